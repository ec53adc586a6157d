// Global-norm gradient clipping, as torch.nn.utils.clip_grad_norm_ with the L2 norm.
//
// The total norm is the L2 norm of all gradients taken together,
//   norm = sqrt(sum over parameters, sum over elements of g^2),
// accumulated in double whatever T is. Parameters without a gradient are left out
// (PyTorch filters p.grad is None). Clipping multiplies every gradient by
//   scale = max_norm / (norm + 1e-6)
// when scale < 1 (PyTorch always multiplies by min(scale, 1); multiplying by 1 is
// the identity, so we skip it).
#pragma once

#include "optim/optimizer.hpp"

namespace headroom {

// The total L2 norm of the gradients; 0 when no parameter has one.
template <typename T>
double grad_norm(const NamedParameters<T>& params);

// Clips the gradients in place and returns the total norm before clipping.
// max_norm must be > 0 (infinity disables clipping). A non-finite norm (an Inf or
// NaN in some gradient) is returned without touching any gradient, unlike PyTorch,
// which would scale them all to NaN: the caller sees std::isfinite(norm) == false
// and decides to skip the step.
template <typename T>
double clip_grad_norm(const NamedParameters<T>& params, double max_norm);

}  // namespace headroom
