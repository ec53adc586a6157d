#include "autograd/memory.hpp"

#include <cstdlib>  // defines __GLIBC__ on glibc: nothing else here may be included first

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace headroom {

bool retain_freed_memory() {
#if defined(__GLIBC__)
  // mallopt returns 1 on success. 32 MiB is DEFAULT_MMAP_THRESHOLD_MAX on 64-bit.
  const bool mmap_ok = mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024) == 1;
  const bool trim_ok = mallopt(M_TRIM_THRESHOLD, 1024 * 1024 * 1024) == 1;
  return mmap_ok && trim_ok;
#else
  return false;
#endif
}

}  // namespace headroom
