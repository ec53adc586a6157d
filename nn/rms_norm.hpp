// RMSNorm (Zhang and Sennrich, 2019) over the last axis, as torch.nn.RMSNorm:
//   y = x / sqrt(mean(x^2) + eps) * weight,
// no mean subtracted and no bias. weight starts at one.
#pragma once

#include "nn/norm.hpp"

namespace headroom {

struct RMSNormOptions {
  std::size_t dim = 0;
  double eps = 1e-5;
};

template <typename T>
class RMSNorm : public Norm<T> {
 public:
  explicit RMSNorm(const RMSNormOptions& options);
  // x (..., dim) -> (..., dim)
  Tensor<T> forward(const Tensor<T>& x) const override;

 private:
  RMSNormOptions options_;
  Tensor<T> weight_;  // (dim)
};

}  // namespace headroom
