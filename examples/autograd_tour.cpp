// A tour of headroom's autograd for a C++ user: leaves, ops, backward, gradients,
// NoGrad and gradcheck. It fits a small two-layer network to y = sin(3x) with plain
// gradient descent and exits non-zero if the fit or the gradient check fails.
//
//   build/examples/autograd_tour
#include <cmath>
#include <cstdio>

#include "autograd/gradcheck.hpp"
#include "autograd/ops.hpp"

namespace hr = headroom;
using F = hr::Tensor<float>;

namespace {

// A leaf of N(0, scale^2) values from our seeded generator.
template <typename T>
hr::Tensor<T> randn_leaf(const hr::Shape& shape, hr::Rng& rng, double scale) {
  xt::xarray<T> v = xt::xarray<T>::from_shape(shape);
  for (auto& e : v) e = static_cast<T>(scale * rng.normal());
  return hr::Tensor<T>(std::move(v), /*requires_grad=*/true);
}

}  // namespace

int main() {
  hr::Rng rng(0);
  // Data: x (N, 1) on [-1, 1], y = sin(3x).
  const std::size_t N = 64;
  xt::xarray<float> xs = xt::xarray<float>::from_shape({N, 1});
  xt::xarray<float> ys = xt::xarray<float>::from_shape({N, 1});
  for (std::size_t i = 0; i < N; ++i) {
    xs(i, 0) = -1.0f + 2.0f * static_cast<float>(i) / (N - 1);
    ys(i, 0) = std::sin(3.0f * xs(i, 0));
  }
  const F x(xs), y(ys);

  // Parameters: leaves that require grad. W1 (1, 32), b1 (32), W2 (32, 1), b2 (1).
  F w1 = randn_leaf<float>({1, 32}, rng, 1.0), b1 = randn_leaf<float>({32}, rng, 0.1);
  F w2 = randn_leaf<float>({32, 1}, rng, 0.2), b2 = randn_leaf<float>({1}, rng, 0.0);
  std::vector<F> params{w1, b1, w2, b2};

  auto predict = [&](const F& in) { return add(matmul(tanh(add(matmul(in, w1), b1)), w2), b2); };

  float first = 0, last = 0;
  for (int step = 0; step < 2000; ++step) {
    F diff = sub(predict(x), y);
    F loss = mean(mul(diff, diff));  // every op above was recorded on the tape
    loss.backward();                 // walks the tape in reverse, then clears it
    for (F& p : params) {            // plain gradient descent, outside the tape
      float* v = p.mutable_value().data();
      const float* g = p.grad().data();
      for (std::size_t i = 0; i < p.size(); ++i) v[i] -= 0.1f * g[i];
      p.zero_grad();
    }
    if (step == 0) first = loss.item();
    last = loss.item();
    if (step % 500 == 0) std::printf("step %4d  loss %.5f\n", step, loss.item());
  }
  {
    hr::NoGrad no_grad;  // evaluation records nothing
    xt::xarray<float> probe = xt::xarray<float>::from_shape({1, 1});
    probe(0, 0) = 0.5f;
    std::printf("prediction at x=0.5: %.4f (target %.4f)\n", predict(F(probe)).value()(0, 0), std::sin(1.5f));
  }
  std::printf("final loss %.5f (from %.5f)\n", last, first);

  // The same model in double precision, checked against finite differences.
  using D = hr::Tensor<double>;
  hr::Rng rng64(1);
  D dx = randn_leaf<double>({5, 1}, rng64, 1.0), dw1 = randn_leaf<double>({1, 4}, rng64, 1.0);
  D dw2 = randn_leaf<double>({4, 1}, rng64, 1.0);
  const hr::GradcheckReport report = hr::gradcheck(
      [&] { return std::vector<D>{matmul(tanh(matmul(dx, dw1)), dw2)}; },
      {{"x", dx}, {"W1", dw1}, {"W2", dw2}});
  std::printf("%s", report.str().c_str());

  const bool fitted = last < 0.05f * first;
  return fitted && report.passed() ? 0 : 1;
}
