// A program built against an installed headroom (examples/consumer/CMakeLists.txt):
// it trains a tiny model on the copy task for 30 steps, looks at its heads, and
// plans a sweep over head counts. Exits 1 unless the loss fell and the head report
// and the plan have the sizes they should.
//
// It includes <xtensor/xarray.hpp> before any headroom header on purpose: the
// container settings come from the headroom::autograd target, not from the order of
// the includes (autograd/xtensor_setup.hpp).
#include <xtensor/xarray.hpp>

#include <cstdio>
#include <filesystem>
#include <vector>

#include "ablate/sweep.hpp"
#include "autograd/tensor.hpp"
#include "interp/head_analysis.hpp"
#include "nn/checkpoint.hpp"
#include "train/evaluate.hpp"
#include "train/trainer.hpp"

namespace hr = headroom;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer OUT_DIR\n");
    return 2;
  }
  const std::filesystem::path out = argv[1];

  hr::TrainConfig config;
  config.model.d_model = 16;
  config.model.n_heads = 2;
  config.model.n_layers = 1;
  config.data = {.task = "copy", .text = "", .seq_len = 6, .vocab = 8};
  config.optim.steps = 30;
  config.optim.warmup = 5;
  config.optim.eval_every = 30;
  config.optim.eval_batches = 2;
  const hr::TrainConfig flags = config;  // what plan_sweep takes, before finalize
  const auto data = hr::make_dataset(config);
  config = hr::finalize(config, *data);

  std::vector<double> losses;  // the mean train loss at every step
  const hr::TrainSummary summary =
      hr::train(config, *data, out.string(), [&](const hr::Progress& p) { losses.push_back(p.train_loss); });
  std::printf("trained %zu steps: train loss %.4f -> %.4f, val loss %.4f\n", summary.steps, losses.front(),
              losses.back(), summary.final_val.loss);
  if (summary.steps != 30 || losses.size() != 30 || !(losses.back() < losses.front())) {
    std::fprintf(stderr, "consumer: the loss did not fall\n");
    return 1;
  }

  // A container made here is the type headroom's own code makes (same allocator).
  const xt::xarray<float> here = {1.0f, 2.0f};
  const hr::Tensor<float> t(here);
  if (!(t.value() == here)) return 1;

  hr::LoadedModel<float> trained = hr::load_model<float>(out / "model.safetensors");
  const hr::HeadReport report = hr::analyze_heads(
      *trained.model, hr::validation_batches(*data, 2, 8, hr::validation_seed(config.optim.seed)));
  std::printf("head report: %zu heads, full-model val loss %.4f\n", report.heads.size(), report.full.loss);
  if (report.heads.size() != 2) return 1;

  const hr::SweepPlan plan = hr::plan_sweep(
      {.base = flags, .axes = {hr::parse_count_axis("--heads", "n_heads", "1,2", false)}, .seeds = {0}});
  std::printf("sweep plan: %zu runs\n", plan.runs.size());
  return plan.runs.size() == 2 ? 0 : 1;
}
