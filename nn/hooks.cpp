#include "nn/hooks.hpp"

#include <fmt/format.h>

#include "autograd/shape.hpp"

namespace headroom {

std::string to_string(HookPoint point) {
  switch (point) {
    case HookPoint::resid_pre: return "resid_pre";
    case HookPoint::pattern: return "pattern";
    case HookPoint::head_out: return "head_out";
    case HookPoint::attn_out: return "attn_out";
    case HookPoint::resid_mid: return "resid_mid";
    case HookPoint::mlp_out: return "mlp_out";
    case HookPoint::resid_post: return "resid_post";
    case HookPoint::final: return "final";
  }
  return "unknown";
}

template <typename T>
Tensor<T> apply_hook(const ForwardHooks<T>* hooks, HookPoint point, std::size_t layer, const Tensor<T>& value) {
  if (hooks == nullptr || !hooks->fn) return value;
  Tensor<T> out = hooks->fn(point, layer, value);
  if (!out.defined() || out.shape() != value.shape()) {
    throw ShapeError(fmt::format("hook at {} of layer {} returned {}, expected the value's shape {}", to_string(point),
                                 layer, out.defined() ? format_shape(out.shape()) : std::string("an undefined tensor"),
                                 format_shape(value.shape())));
  }
  return out;
}

template Tensor<float> apply_hook(const ForwardHooks<float>*, HookPoint, std::size_t, const Tensor<float>&);
template Tensor<double> apply_hook(const ForwardHooks<double>*, HookPoint, std::size_t, const Tensor<double>&);

}  // namespace headroom
