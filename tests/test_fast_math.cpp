// autograd/fast_math.hpp against double-precision libm on dense grids: the accuracy
// its header promises, and the special values a masked softmax and anomaly
// detection rely on.
#include <cmath>
#include <initializer_list>
#include <limits>

#include <doctest/doctest.h>

#include "autograd/fast_math.hpp"

namespace fast = headroom::fast;

TEST_CASE("fast::exp(float): relative error below 3e-7 from -87.33 to 88.3") {
  double worst = 0;
  float worst_x = 0;
  for (int i = 0; i <= 2000000; ++i) {
    const float x = -87.33f + static_cast<float>(i) * (88.3f + 87.33f) / 2000000.0f;
    const double want = std::exp(static_cast<double>(x));
    const double err = std::abs(static_cast<double>(fast::exp(x)) - want) / want;
    if (err > worst) {
      worst = err;
      worst_x = x;
    }
  }
  INFO("worst relative error " << worst << " at x = " << worst_x);
  CHECK(worst < 3e-7);
}

TEST_CASE("fast::exp(float): 0 below the range and for -inf, infinity above, NaN for NaN, exp(0) = 1") {
  CHECK(fast::exp(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(fast::exp(-100.0f) == 0.0f);
  CHECK(fast::exp(-87.5f) == 0.0f);
  CHECK(fast::exp(89.0f) == std::numeric_limits<float>::infinity());
  CHECK(fast::exp(std::numeric_limits<float>::infinity()) == std::numeric_limits<float>::infinity());
  CHECK(std::isnan(fast::exp(std::numeric_limits<float>::quiet_NaN())));
  CHECK(fast::exp(0.0f) == 1.0f);
}

TEST_CASE("fast::normal_cdf(float): absolute error below 3e-7 on [-12, 12], symmetric, NaN for NaN") {
  double worst = 0;
  float worst_x = 0;
  for (int i = 0; i <= 2400000; ++i) {
    const float x = -12.0f + static_cast<float>(i) * 1e-5f;
    const double want = 0.5 * std::erfc(-static_cast<double>(x) / std::sqrt(2.0));
    const double err = std::abs(static_cast<double>(fast::normal_cdf(x)) - want);
    if (err > worst) {
      worst = err;
      worst_x = x;
    }
  }
  INFO("worst absolute error " << worst << " at x = " << worst_x);
  CHECK(worst < 3e-7);
  CHECK(fast::normal_cdf(0.0f) == 0.5f);
  CHECK(fast::normal_cdf(-40.0f) == 0.0f);
  CHECK(fast::normal_cdf(40.0f) == 1.0f);
  CHECK(std::isnan(fast::normal_cdf(std::numeric_limits<float>::quiet_NaN())));
}

TEST_CASE("fast:: in double is the library function itself") {
  for (const double x : {-3.5, -0.25, 0.0, 0.7, 2.0}) {
    CHECK(fast::exp(x) == std::exp(x));
    CHECK(fast::normal_cdf(x) == 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))));
  }
}
