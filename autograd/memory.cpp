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
  // A thread other than the main one allocates from its own arena, a chain of heaps
  // of at most 64 MiB (glibc's HEAP_MAX_SIZE), and glibc unmaps a heap that its frees
  // leave empty unless the heap below has less than M_TOP_PAD of room: the trim
  // threshold above does not cover whole heaps. 128 MiB, twice a heap, keeps them
  // all. Without it, the second shard of a large step at 2 threads (train/step.cpp)
  // faults tens of MiB of pages back in every step, and such steps run far slower
  // (bench/README.md).
  const bool pad_ok = mallopt(M_TOP_PAD, 128 * 1024 * 1024) == 1;
  return mmap_ok && trim_ok && pad_ok;
#else
  return false;
#endif
}

}  // namespace headroom
