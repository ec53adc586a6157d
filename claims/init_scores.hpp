// What attention looks like before any training (claim 2 of `headroom claims`): the
// spread of the attention scores and the entropy of the attention weights of a
// freshly initialised model on validation rows of its own data.
//
// The model returns its attention weights w = softmax(s), not the scores s. Over the
// keys a query can see, log w = s - logsumexp(s), so log w differs from s by one
// constant per row and the within-row standard deviation of log w is that of the
// scores. We read both numbers from the weights.
#pragma once

#include <cstddef>
#include <cstdint>

#include "train/config.hpp"

namespace headroom {

struct InitAttention {
  double score_sd = 0;   // within-row sd of the scores, averaged over rows (rows of >= 2 keys)
  double entropy = 0;    // attention entropy in nats, averaged over every (row, head, query)
  double max_entropy = 0;  // the same average of log(keys seen): what uniform weights give
};

// The model `config` (finalized, as a PlannedRun's) initialises with `seed` (the
// trainer's init stream, docs/design.md #6), on `rows` validation rows drawn from
// the validation stream of the same seed; every layer and head pooled.
InitAttention init_attention(const TrainConfig& config, std::uint64_t seed, std::size_t rows);

}  // namespace headroom
