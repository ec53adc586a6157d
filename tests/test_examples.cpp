// The programs under examples/ run, succeed and print what they promise.
#include <doctest/doctest.h>

#include "cli_runner.hpp"

TEST_CASE("examples/autograd_tour fits its curve and passes its gradient check") {
  const CliResult r = run_program(HEADROOM_AUTOGRAD_TOUR, "");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("final loss") != std::string::npos);
  CHECK(r.output.find("gradcheck passed") != std::string::npos);
}
