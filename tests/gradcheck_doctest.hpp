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
