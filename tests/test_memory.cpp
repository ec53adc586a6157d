// retain_freed_memory: on glibc the allocator accepts its settings. `headroom` calls
// it at start-up and ignores a refusal, so without this test a build that silently
// lost the settings (it once did, when __GLIBC__ stopped being defined before the
// check) would only show as slower steps and a larger resident set.
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#if defined(__GLIBC__)
#include <sys/resource.h>
#endif

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

// Sanitizers replace glibc's malloc (see above): the settings are not theirs.
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
namespace {
// Minor page faults of this thread while it allocates `blocks` blocks of `bytes`,
// writes every byte and frees them all; -1 when an allocation fails. (It runs on a
// thread of its own, where a failed REQUIRE would end the process: no asserts here.)
long faults_of_a_round(std::size_t blocks, std::size_t bytes) {
  rusage before{}, after{};
  getrusage(RUSAGE_THREAD, &before);
  std::vector<char*> held;
  for (std::size_t i = 0; i < blocks; ++i) {
    char* p = static_cast<char*>(std::malloc(bytes));
    if (p == nullptr) {
      for (char* q : held) std::free(q);
      return -1;
    }
    std::memset(p, 1, bytes);
    asm volatile("" : : "r"(p) : "memory");  // the writes happen; the compiler may not drop the pair
    held.push_back(p);
  }
  for (char* p : held) std::free(p);
  getrusage(RUSAGE_THREAD, &after);
  return after.ru_minflt - before.ru_minflt;
}
}  // namespace

TEST_CASE("retain_freed_memory: another thread's freed heaps are kept for its next round") {
  // A training step at 2 threads runs its second shard on a worker thread, whose
  // allocations come from glibc's per-thread arena: heaps of at most 64 MiB, which
  // glibc unmapped whenever a step's frees emptied them (memory.cpp, M_TOP_PAD). Here
  // a thread started after the settings takes 96 MiB in 1 MiB blocks (more than one
  // heap), frees it, and takes it again: the second round must find its pages
  // mapped. Without M_TOP_PAD every round faulted about 8,400 pages (33 MiB) in.
  REQUIRE(headroom::retain_freed_memory());
  long first = 0, second = 0;
  std::thread([&] {
    constexpr std::size_t kBlocks = 96, kBytes = std::size_t{1} << 20;
    first = faults_of_a_round(kBlocks, kBytes);
    second = faults_of_a_round(kBlocks, kBytes);
  }).join();
  CAPTURE(first);
  CAPTURE(second);
  REQUIRE(first >= 0);
  REQUIRE(second >= 0);
  CHECK(second < 1000);
}
#endif
