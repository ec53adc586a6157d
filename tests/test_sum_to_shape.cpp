// The accumulation choke point's un-broadcast, against sums written out by hand.
#include <cstdint>

#include <doctest/doctest.h>

#include "autograd/tensor.hpp"

using headroom::sum_to_shape;

namespace {

void check_equal(const xt::xarray<double>& got, const xt::xarray<double>& want) {
  REQUIRE(headroom::format_shape(got.shape()) == headroom::format_shape(want.shape()));
  for (std::size_t i = 0; i < got.size(); ++i) {
    CHECK_MESSAGE(got.data()[i] == want.data()[i], "flat index " << i << ": got " << got.data()[i]
                                                                 << ", want " << want.data()[i]);
  }
}

xt::xarray<double> shaped(xt::xarray<double> values, const headroom::Shape& shape) {
  values.reshape(shape);
  return values;
}

}  // namespace

TEST_CASE("sum_to_shape folds leading and size-1 axes") {
  const xt::xarray<double> g = {{{1, 2, 3}, {4, 5, 6}}, {{7, 8, 9}, {10, 11, 12}}};  // (2, 2, 3)
  check_equal(sum_to_shape(g, {2, 2, 3}, "t"), g);
  check_equal(sum_to_shape(g, {3}, "t"), {22.0, 26.0, 30.0});
  // 1+2+3+7+8+9 = 30 and 4+5+6+10+11+12 = 48.
  check_equal(sum_to_shape(g, {2, 1}, "t"), shaped({30.0, 48.0}, {2, 1}));
  check_equal(sum_to_shape(g, {2, 1, 3}, "t"), {{{5.0, 7.0, 9.0}}, {{17.0, 19.0, 21.0}}});
  check_equal(sum_to_shape(g, {1, 2, 1}, "t"), shaped({30.0, 48.0}, {1, 2, 1}));
  check_equal(sum_to_shape(g, {}, "t"), xt::xarray<double>(78.0));
  check_equal(sum_to_shape(g, {1}, "t"), {78.0});
}

TEST_CASE("sum_to_shape rejects shapes that do not broadcast") {
  const xt::xarray<double> g = xt::zeros<double>({2, 3});
  CHECK_THROWS_WITH_AS(sum_to_shape(g, {2}, "op"),
                       "op: gradient of shape (2, 3) cannot be accumulated into a tensor of shape (2)",
                       std::invalid_argument);
}

TEST_CASE("every array's storage is 64-byte aligned (docs/design.md)") {
  // Containers made directly, by xtensor builders, and by an op.
  const xt::xarray<float> a = xt::xarray<float>::from_shape({3, 5});
  const xt::xarray<double> b = xt::zeros<double>({7});
  const headroom::Tensor<float> t(xt::xarray<float>::from_shape({2, 3}), true);
  const auto u = headroom::sum_to_shape(xt::xarray<float>(xt::ones<float>({4, 3})), {3}, "t");
  for (const void* p : {static_cast<const void*>(a.data()), static_cast<const void*>(b.data()),
                        static_cast<const void*>(t.value().data()), static_cast<const void*>(u.data())}) {
    CHECK(reinterpret_cast<std::uintptr_t>(p) % 64 == 0);
  }
}
