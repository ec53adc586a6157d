// The ops of current (Llama-style) blocks: sigmoid, RMSNorm, SwiGLU's gating and
// rotary positions. PLACEHOLDER: these call their composed twins until the fused
// kernels land (issue 15); the interface is final.
#include "autograd/composed.hpp"
#include "autograd/ops.hpp"

namespace headroom {

template <typename T>
Tensor<T> sigmoid(const Tensor<T>& x) {
  return composed::sigmoid(x);
}
template <typename T>
Tensor<T> rms_norm(const Tensor<T>& x, const Tensor<T>& weight, T eps) {
  return composed::rms_norm(x, weight, eps);
}
template <typename T>
Tensor<T> swiglu(const Tensor<T>& gate, const Tensor<T>& up) {
  return composed::swiglu(gate, up);
}
template <typename T>
Tensor<T> rope(const Tensor<T>& x, std::size_t n_heads, double base, std::size_t offset) {
  return composed::rope(x, n_heads, base, offset);
}

#define HEADROOM_INSTANTIATE(T)                                                  \
  template Tensor<T> sigmoid(const Tensor<T>&);                                  \
  template Tensor<T> rms_norm(const Tensor<T>&, const Tensor<T>&, T);            \
  template Tensor<T> swiglu(const Tensor<T>&, const Tensor<T>&);                 \
  template Tensor<T> rope(const Tensor<T>&, std::size_t, double, std::size_t);
HEADROOM_INSTANTIATE(float)
HEADROOM_INSTANTIATE(double)
#undef HEADROOM_INSTANTIATE

}  // namespace headroom
