// doctest's main, with one addition: a run in which a test was skipped for a missing
// prerequisite (support.hpp) and nothing failed exits with kSkipExitCode, so that
// CTest, which runs one test case per process, shows it as skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "support.hpp"

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int status = context.run();
  if (context.shouldExit()) return status;  // --help, --list-test-cases and the like
  if (status == 0 && prerequisite_skipped()) return kSkipExitCode;
  return status;
}
