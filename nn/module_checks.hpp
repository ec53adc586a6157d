// The gradient-check suite of every module, the counterpart of autograd's
// op_checks: each module (and the whole language model's loss) against central
// finite differences in double, over the configurations the audience asks about.
// `headroom gradcheck` prints these rows after the ops; tests assert they pass.
#pragma once

#include <vector>

#include "autograd/op_checks.hpp"

namespace headroom {

// Linear, Embedding, LayerNorm, RMSNorm, FeedForward (MLP and SwiGLU),
// MultiHeadAttention, TransformerBlock, TransformerLM.
const std::vector<std::string>& module_names();

// One row per case; OpCheck::op holds the module name. options.op filters by module
// name (an unknown name is a std::invalid_argument listing them).
std::vector<OpCheck> run_module_checks(const OpCheckOptions& options = {});

}  // namespace headroom
