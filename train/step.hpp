// One training step, the only one in headroom: the trainer, bench/train_step_bench
// and examples/train_copy.cpp all call it. In llm.c's five lines:
//
//     zero_grad; loss = forward(batch); backward(loss); clip; set_lr; update
//
// with one guard: a step whose loss or gradient norm is not finite does not reach
// the weights (the update is skipped and the step says so), so one bad batch cannot
// turn every weight into NaN. On n > 1 threads (set_threads) the forward and
// backward run as n shards of the batch, one per thread, their gradients summed in
// shard order (docs/design.md#threads): deterministic for a given n, equal to one
// thread's up to float rounding.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "data/dataset.hpp"
#include "nn/transformer.hpp"
#include "optim/optimizer.hpp"

namespace headroom {

// Each thread beyond the first pays for itself, in a step cut into one shard of the
// batch per thread, from about this many FLOPs of matrix products a step: below it
// the step runs no faster on two threads than on one (bench/README.md). The shards
// meet once a step, to sum their gradients, so they pay from fewer FLOPs than ops
// that share their loops and meet at every op (a batch of one row):
// kFlopsPerExtraThread (autograd/parallel.hpp).
inline constexpr double kFlopsPerExtraShard = 1e8;

// The threads that pay for training steps of `step_flops` on `batch` rows:
// `requested`, capped at one per row and at 1 + step_flops / kFlopsPerExtraShard;
// for one row, threads_that_pay's cap for ops that share their loops.
int step_threads_that_pay(int requested, double step_flops, std::size_t batch);

struct StepOptions {
  std::optional<double> lr{};   // set on the optimizer before the update; none keeps its rate
  double clip = 1.0;            // clip the global gradient norm to this; 0 measures it only
  bool detect_anomaly = false;  // check every op for NaN/Inf; the first one is named in anomaly
  // The seed of this step's dropout masks (nn/dropout.hpp): shard s of the batch runs
  // under DropoutSeed(stream_seed(dropout_seed, s)) on its own thread (one thread is
  // shard 0), so the masks follow the seed and the thread count, as the loss does.
  // Required when the model drops (config dropout > 0, in training mode); give each
  // step its own, or every step draws the same masks.
  std::optional<std::uint64_t> dropout_seed{};
};

struct StepResult {
  double loss = 0;       // the batch's loss, before the update (NaN when it could not be computed)
  double grad_norm = 0;  // the global gradient norm before clipping (NaN when there was no backward)
  bool updated = false;  // false: the loss or the norm was not finite and the weights are as they were
  std::string anomaly{}; // under detect_anomaly, what made the first NaN or Inf
};

// zero_grad, the loss on batch.tokens (B, T+1) counting batch.target_mask (B, T),
// backward, clipping, the learning rate, and the update unless a value was not
// finite. A model that drops without options.dropout_seed is a std::invalid_argument. With an OpProfile active on this thread (autograd/profile.hpp), the parts
// outside the tape are timed as sections.
StepResult train_step(TransformerLM<float>& model, Optimizer<float>& optimizer, const Batch& batch,
                      const StepOptions& options = {});
// The same with every target counted: tokens (B, T+1).
StepResult train_step(TransformerLM<float>& model, Optimizer<float>& optimizer, const IndexArray& tokens,
                      const StepOptions& options = {});

}  // namespace headroom
