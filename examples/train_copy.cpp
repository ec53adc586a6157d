// Train a 2-layer, 4-head transformer to copy a sequence, with the same train_step
// that `headroom train` runs, then score it on held-out examples.
#include <cstdio>

#include "data/task.hpp"
#include "nn/transformer.hpp"
#include "optim/adam.hpp"
#include "train/evaluate.hpp"
#include "train/step.hpp"

namespace hr = headroom;

int main() {
  const auto task = hr::make_task("copy", {.vocab = 16, .seq_len = 16});
  hr::Rng rng(0);
  hr::TransformerLM<float> model(
      {.vocab = task->vocab_size(), .d_model = 64, .n_layers = 2, .n_heads = 4, .max_len = 16}, rng);
  hr::AdamW<float> optimizer(model.named_parameters(), {.lr = 3e-3});

  for (int step = 1; step <= 200; ++step) {
    const hr::Batch batch = task->sample(32, hr::Split::train, rng);  // tokens (32, 17)
    const hr::StepResult r = hr::train_step(model, optimizer, batch, {.clip = 1.0});
    if (step % 50 == 0) std::printf("step %3d  loss %.4f  grad norm %.3f\n", step, r.loss, r.grad_norm);
  }
  const hr::EvalResult val = hr::evaluate(model, *task, 8, 32, hr::validation_seed(0));
  std::printf("val loss %.4f, accuracy %.1f%% on %zu answer tokens\n", val.loss, 100 * val.accuracy, val.counted);
  return val.accuracy > 0.9 ? 0 : 1;
}
