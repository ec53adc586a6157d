// CHECK_GRADCHECK(report): a failing gradient check prints, for every input, the
// name, the worst index and both the analytic and the numeric value there.
#pragma once

#include <doctest/doctest.h>

#include "autograd/gradcheck.hpp"

#define CHECK_GRADCHECK(report_expr)                  \
  do {                                                \
    const ::headroom::GradcheckReport& hr_report_ = (report_expr); \
    INFO(hr_report_.str());                           \
    CHECK(hr_report_.passed());                       \
  } while (false)

#include <functional>
#include <vector>

#include "autograd/op_checks.hpp"

// Runs one op's (or module's) suite cases for three seeds, so each case is seen on
// three draws of shapes and values, and checks every report.
inline void check_suite_cases(
    const std::string& name,
    const std::function<std::vector<headroom::OpCheck>(const headroom::OpCheckOptions&)>& run) {
  for (std::uint64_t seed : {0u, 1u, 2u}) {
    headroom::OpCheckOptions options;
    options.seed = seed;
    options.op = name;
    const auto results = run(options);
    REQUIRE_MESSAGE(!results.empty(), "no gradcheck case for " << name);
    for (const auto& r : results) {
      INFO(r.op << " / " << r.what << " / " << r.shapes << " / seed " << seed);
      CHECK_GRADCHECK(r.report);
    }
  }
}
