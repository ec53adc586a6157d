// retain_freed_memory: on glibc the allocator accepts its settings. `headroom` calls
// it at start-up and ignores a refusal, so without this test a build that silently
// lost the settings (it once did, when __GLIBC__ stopped being defined before the
// check) would only show as slower steps and a larger resident set.
#include <cstdlib>

#include <doctest/doctest.h>

#include "autograd/memory.hpp"

TEST_CASE("retain_freed_memory takes effect on glibc") {
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
  CHECK(headroom::retain_freed_memory());
#else
  // Other C libraries have no such settings, and AddressSanitizer's allocator, which
  // replaces glibc's malloc, refuses them: a refusal, which headroom ignores.
  CHECK_FALSE(headroom::retain_freed_memory());
#endif
}
