// Hook points of the forward pass (docs/design.md #20): named places where an
// observer reads an activation and may replace it, the mechanism under headroom's
// interpretability tools (interp/: direct logit attribution, activation and
// attribution patching). TransformerLens calls them hook_resid_pre, hook_pattern,
// hook_z, ...; these are the same places.
//
// Legend: B = batch, T = time, C = d_model, H = n_heads, d_v = per-head value width.
//
//   point       layer   shape          the value
//   resid_pre   l       (B, T, C)      the residual stream entering block l; at l = 0 the
//                                      embedding tok_emb[token] (+ P unless pos_qk_only),
//                                      after the input's dropout
//   pattern     l       (B, H, T, T)   the attention weights softmax(QK^T * scale), before
//                                      their dropout, only with ForwardHooks::pattern (see there)
//   head_out    l       (B, T, H, d_v) each head's output, after the head gate and before
//                                      the heads are combined and projected by W_O
//                                      (TransformerLens's hook_z): replacing head j's
//                                      slice removes or patches exactly that head
//   attn_out    l       (B, T, C)      the attention sublayer's output, out_proj's, before
//                                      its dropout
//   resid_mid   l       (B, T, C)      x + attn_out (dropped first, with dropout in training):
//                                      after attention, before ln1 (post-norm) or the
//                                      feed-forward (pre-norm, no norm)
//   mlp_out     l       (B, T, C)      the feed-forward's output, before its dropout (not
//                                      called with attn_only)
//   resid_post  l       (B, T, C)      block l's output
//   final       L       (B, T, C)      the unembedding's input: ln_f's output (or the last
//                                      resid_post with no norm); layer = n_layers
//
// Points are reached in that order within a block, blocks in order. A hook returns
// the value the forward continues with: `value` itself to observe, or a tensor of the
// same shape to patch (a ShapeError otherwise). What it returns is on the tape like
// any op's output, so a hook that returns add(value, delta) for a leaf delta that
// requires grad receives d loss / d activation in delta.grad() after backward: the
// gradient that attribution patching needs.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "autograd/tensor.hpp"

namespace headroom {

enum class HookPoint { resid_pre, pattern, head_out, attn_out, resid_mid, mlp_out, resid_post, final };

std::string to_string(HookPoint point);  // "resid_pre", ..., "final"

template <typename T>
struct ForwardHooks {
  // Called at every point the forward reaches; see the table above.
  std::function<Tensor<T>(HookPoint point, std::size_t layer, const Tensor<T>& value)> fn;
  // Also stop at HookPoint::pattern. The fused attention op never materialises the
  // weights as a tensor on the tape, so with this set attention runs its composed
  // form (softmax, then the weights times V): slower, equal to rounding.
  bool pattern = false;
};

// The hook's value at (point, layer), checked to keep value's shape; `value` itself
// when hooks is null or has no fn.
template <typename T>
Tensor<T> apply_hook(const ForwardHooks<T>* hooks, HookPoint point, std::size_t layer, const Tensor<T>& value);

}  // namespace headroom
