// What each attention head of a trained model does, measured on validation batches
// (`headroom heads`):
//
//   loss_increase   val loss with this head alone gated out (MultiHeadAttention's
//                   head gate at 0), minus the full model's: the cost of removing it
//                   (Michel et al., 2019, "Are Sixteen Heads Really Better than One?").
//   importance      Michel et al.'s head importance: the mean over validation rows of
//                   |d loss(row) / d gate|, the gate's derivative at gates of one.
//                   A first-order estimate of loss_increase that needs one backward
//                   pass per row instead of one evaluation per head.
//   confidence      the mean over queries of the largest attention weight (Voita et
//                   al., 2019): near 1 for a head that looks at one token.
//   entropy         the mean over queries of the attention distribution's entropy
//                   (nats); 0 for one token, log(t+1) for uniform over t+1 keys.
//   dominant offset the most frequent (query - argmax key): 0 attends to itself, 1 is
//                   a previous-token head; with the share of queries that have it.
//   previous_token  the mean weight on key q-1.
//   induction       the mean weight on key p+1, where p < q is the latest earlier
//                   position holding the query's token, over the queries whose token
//                   occurred before (an induction head attends to the token after
//                   the previous occurrence of the current one); NaN when no query
//                   of the batches repeats a token.
//   repeat induction on rows that repeat themselves with period P (repeated_rows),
//                   the mean weight a query q >= P puts on key q - P + 1: the token
//                   after its twin one period back, which is the token to predict
//                   (Olsson et al., 2022, "In-context Learning and Induction Heads",
//                   on a repeated sequence). On real text the plain induction score
//                   mixes in every earlier occurrence of a frequent character; this
//                   one reads only the copy. NaN unless a period is given.
//   word start      on text, the mean weight on the break that opens the query's word:
//                   the latest position k < q holding a word break (a space or a line
//                   end), over the queries with such a k at k <= q - 2 (a break just
//                   before the query is its previous token, which prev-token counts).
//                   A head that reads the current word from its boundary scores near
//                   1. NaN without breaks.
//   line start      the same with line ends alone: in kjv, the end of the verse before.
//
// The per-query statistics skip query 0, which has one key under the causal mask and
// so a weight of exactly 1 in every head.
#pragma once

#include <cstddef>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "train/trainer.hpp"
#include "data/dataset.hpp"
#include "nn/transformer.hpp"

namespace headroom {

struct HeadStats {
  std::size_t layer = 0, head = 0;
  EvalResult masked;             // the model with this head alone gated out
  double loss_increase = 0;      // masked.loss - the full model's
  double accuracy_drop = 0;      // the full model's accuracy - masked.accuracy
  double importance = 0;         // mean |d loss(row) / d gate|
  double importance_in_layer = 0;  // importance / the l2 norm of its layer's importances
  double confidence = 0;
  double entropy = 0;
  long dominant_offset = 0;
  double offset_share = 0;       // share of queries whose argmax key is at dominant_offset
  double previous_token = 0;
  double induction = 0;          // NaN when no query repeats an earlier token
  double repeat_induction = std::numeric_limits<double>::quiet_NaN();  // with a repeat period only
  double word_start = std::numeric_limits<double>::quiet_NaN();        // with word breaks only
  double line_start = std::numeric_limits<double>::quiet_NaN();        // with line breaks only
};

// What the attention statistics may look for beyond what every row has: a repeat
// period (repeated_rows) and the token ids that end a word or a line.
struct AttentionProbes {
  std::size_t repeat_period = 0;
  std::vector<Index> word_breaks{}, line_breaks{};
};

// The probes a dataset's tokens allow: for a character model (CharDataset), the ids
// of the space and the line end as word breaks and the line end as the line break,
// where its vocabulary has them; none for a task or a classifier.
AttentionProbes text_probes(const Dataset& data);

struct HeadReport {
  EvalResult full;               // every head on
  std::vector<HeadStats> heads;  // layer-major: layer 0's heads, then layer 1's, ...
  std::size_t rows = 0;          // validation rows measured
};

// Every statistic above for every head. Leaves the model's gates cleared and its
// gradients zero. Throws std::invalid_argument when `batches` is empty.
// With importance false, the importance fields stay 0 and no backward pass runs
// (what train --track-heads needs at every validation, interp/head_tracking.hpp).
// probes: what else to measure (repeat induction, word and line starts).
HeadReport analyze_heads(TransformerLM<float>& model, const std::vector<Batch>& batches, bool importance = true,
                         const AttentionProbes& probes = {});

// The attention statistics alone (confidence, entropy, dominant offset and its share,
// previous-token, induction, and what the probes ask for), layer-major, from
// one forward pass per batch: what analyze_heads reports beside the gating costs,
// without them. Leaves the model's mode as it was.
std::vector<HeadStats> attention_statistics(TransformerLM<float>& model, const std::vector<Batch>& batches,
                                            const AttentionProbes& probes = {});

// Rows that repeat: each row of `batches` cut to its first P = (T + 1) / 2 tokens,
// written again from its start until the row is full (T + 1 tokens), every target
// counted. A model that reads the first copy predicts the second better.
struct RepeatedRows {
  std::vector<Batch> batches;
  std::size_t period = 0;  // P
  // The same rows with only the first copy's targets counted (positions 1 .. P-1),
  // and only the second copy's whose previous token has a twin (P+1 .. T).
  std::vector<Batch> first_copy, second_copy;
};
// Throws std::invalid_argument when the rows are too short to repeat (T + 1 < 4).
RepeatedRows repeated_rows(const std::vector<Batch>& batches);

struct PrunePoint {
  std::size_t removed = 0;  // heads gated out so far
  double fraction = 0;      // removed / all heads
  EvalResult val;
  std::string head;         // "layer L head H", the head removed at this point ("" at 0)
};

// Gates heads out one at a time in `order` ((layer, head) pairs) and evaluates after
// each: removed = 0 (the full model) .. order.size(). Leaves the gates cleared.
std::vector<PrunePoint> prune_curve(TransformerLM<float>& model, const std::vector<Batch>& batches,
                                    const std::vector<std::pair<std::size_t, std::size_t>>& order);

// The heads as (layer, head) in increasing `key`, ties by layer then head: the
// pruning orders, e.g. &HeadStats::importance_in_layer (Michel et al. normalise per
// layer before comparing across layers), &HeadStats::importance, or
// &HeadStats::loss_increase.
std::vector<std::pair<std::size_t, std::size_t>> heads_by(const HeadReport& report, double HeadStats::*key);

}  // namespace headroom
