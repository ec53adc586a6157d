// Heads watched during training (train --track-heads, docs/design.md #23): tracked_heads.csv
// holds every head at every validation, equal to the statistics recomputed on the
// saved model; the ICL score of metrics.csv against a direct computation; a run
// stopped and resumed writes the same tracked_heads.csv as one run; the plot is written;
// tracking without a tracker or without a run directory is refused.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "cli_runner.hpp"
#include "support.hpp"
#include "data/task.hpp"
#include "interp/head_tracking.hpp"
#include "nn/checkpoint.hpp"
#include "train/head_log.hpp"
#include "train/metrics.hpp"
#include "train/trainer.hpp"

namespace fs = std::filesystem;
namespace hr = headroom;

namespace {

hr::TrainConfig tracked_config() {
  hr::TrainConfig c;
  c.data.task = "induction";
  c.data.seq_len = 9;
  c.data.vocab = 14;
  c.model.d_model = 16;
  c.model.n_layers = 2;
  c.model.n_heads = 2;
  c.model.attn_only = true;
  c.optim.steps = 30;
  c.optim.batch = 8;
  c.optim.warmup = 3;
  c.optim.eval_every = 10;
  c.optim.eval_batches = 2;
  c.optim.save_every = 10;
  c.optim.track_heads = true;
  return c;
}

hr::TrainOptions tracked(const fs::path& dir) {
  hr::TrainOptions o;
  o.out_dir = dir.string();
  o.track_heads = hr::track_heads;
  return o;
}

}  // namespace

TEST_CASE("tracked_heads.csv holds every head at every validation, as recomputed on the saved model") {
  TempDir tmp("track_heads");
  const hr::TrainConfig config = tracked_config();
  const std::unique_ptr<hr::Dataset> data = hr::make_dataset(config);
  const hr::TrainConfig final_config = hr::finalize(config, *data);
  hr::train(final_config, *data, tracked(tmp / "run"));
  const std::vector<hr::HeadLogRow> rows = hr::read_head_log(tmp / "run/tracked_heads.csv");
  REQUIRE(rows.size() == 3 * 2 * 2);  // validations at 10, 20, 30 x 2 layers x 2 heads
  for (std::size_t i = 0; i < rows.size(); ++i) {
    CHECK(rows[i].step == 10 * (i / 4 + 1));
    CHECK(rows[i].head.layer == (i % 4) / 2);
    CHECK(rows[i].head.head == i % 2);
    CHECK(rows[i].head.previous_token >= 0.0);
    CHECK(rows[i].head.previous_token <= 1.0);
    CHECK(rows[i].head.entropy >= 0.0);
  }
  // The last validation's rows are the saved model's statistics on the run's batches.
  hr::LoadedModel<float> loaded = hr::load_model<float>(tmp / "run/model.safetensors");
  const hr::OptimConfig& o = final_config.optim;
  const std::vector<hr::Batch> batches =
      hr::validation_batches(*data, o.eval_batches, o.batch, hr::validation_seed(o.seed));
  const std::vector<hr::HeadTrack> now = hr::track_heads(*loaded.model, batches);
  REQUIRE(now.size() == 4);
  for (std::size_t h = 0; h < 4; ++h) {
    const hr::HeadTrack& logged = rows[8 + h].head;
    CHECK(logged.previous_token == doctest::Approx(now[h].previous_token).epsilon(1e-5));
    CHECK(logged.induction == doctest::Approx(now[h].induction).epsilon(1e-5));
    CHECK(logged.entropy == doctest::Approx(now[h].entropy).epsilon(1e-5));
    CHECK(std::abs(logged.loss_increase - now[h].loss_increase) < 2e-6);
  }
  // Tracking changes nothing about training: the same run untracked ends with the same weights.
  hr::TrainConfig untracked = final_config;
  untracked.optim.track_heads = false;
  hr::train(untracked, *data, (tmp / "plain").string(), {});
  const hr::LoadedModel<float> plain = hr::load_model<float>(tmp / "plain/model.safetensors");
  const auto a = loaded.model->named_parameters(), b = plain.model->named_parameters();
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i].second.value() == b[i].second.value());
  CHECK(!fs::exists(tmp / "plain/tracked_heads.csv"));
}

TEST_CASE("the ICL score is the late-quarter loss minus the early-quarter loss, over non-pad targets") {
  hr::ModelConfig mc{.vocab = 14, .d_model = 16, .n_layers = 1, .n_heads = 2, .max_len = 12};
  hr::Rng rng(3);
  hr::TransformerLM<float> model(mc, rng);
  for (auto& [name, p] : model.named_parameters()) p.mutable_value() = hr::normal_init<float>(p.shape(), 0.5, rng);
  const std::unique_ptr<hr::Task> task = hr::make_task("lagsum", {.vocab = 14, .seq_len = 12});  // 3 quadruples and a pad
  hr::Rng data_rng(4);
  const std::vector<hr::Batch> batches{task->sample(6, hr::Split::val, data_rng), task->sample(5, hr::Split::val, data_rng)};
  const hr::EvalResult r = hr::evaluate_batches(model, batches);
  REQUIRE(r.icl_score.has_value());
  // Directly: each target's loss from a one-row forward and log-softmax in double.
  double early = 0, late = 0;
  std::size_t ne = 0, nl = 0;
  const std::size_t T = 12, q = 3;  // floor(12 / 4)
  bool saw_pad = false;
  for (const hr::Batch& b : batches) {
    for (std::size_t row = 0; row < b.tokens.shape()[0]; ++row) {
      hr::IndexArray in = hr::IndexArray::from_shape({1, T});
      for (std::size_t t = 0; t < T; ++t) in(0, t) = b.tokens(row, t);
      hr::NoGrad no_grad;
      model.eval();
      const xt::xarray<float> logits = model.forward(in).value();
      for (std::size_t t = 0; t < T; ++t) {
        const hr::Index target = b.tokens(row, t + 1);
        if (target == hr::kPad) {
          saw_pad = true;
          continue;
        }
        if (t >= q && t < T - q) continue;
        double z = 0;
        for (std::size_t v = 0; v < mc.vocab; ++v) z += std::exp(static_cast<double>(logits(0, t, v)));
        const double nll = std::log(z) - static_cast<double>(logits(0, t, static_cast<std::size_t>(target)));
        if (t < q) {
          early += nll;
          ++ne;
        } else {
          late += nll;
          ++nl;
        }
      }
    }
  }
  CHECK(saw_pad);
  REQUIRE(ne > 0);
  REQUIRE(nl > 0);
  CHECK(*r.icl_score == doctest::Approx(late / double(nl) - early / double(ne)).epsilon(1e-5));
}

TEST_CASE("a tracked run stopped and resumed writes the tracked_heads.csv and metrics.csv ICL of one run") {
  TempDir tmp("track_resume");
  const hr::TrainConfig config = tracked_config();
  const std::unique_ptr<hr::Dataset> data = hr::make_dataset(config);
  const hr::TrainConfig c = hr::finalize(config, *data);
  hr::train(c, *data, tracked(tmp / "one"));
  hr::TrainOptions first = tracked(tmp / "two");
  first.stop_after = 20;
  CHECK(hr::train(c, *data, first).stopped_early);
  // The interrupted process got further than its checkpoint, and was killed in the
  // middle of a row: the rows past the checkpoint, the torn one too, go on resume.
  std::ofstream(tmp / "two/tracked_heads.csv", std::ios::app) << "30,0,1,0.4";
  hr::TrainOptions second = tracked(tmp / "two");
  second.resume = true;
  hr::train(c, *data, second);
  CHECK(read_file(tmp / "two/tracked_heads.csv") == read_file(tmp / "one/tracked_heads.csv"));
  const auto icl = [](const fs::path& f) {
    std::vector<double> out;
    for (const hr::MetricsRow& m : hr::read_metrics(f)) out.push_back(m.icl_score.value());
    return out;
  };
  CHECK(icl(tmp / "two/metrics.csv") == icl(tmp / "one/metrics.csv"));
}

TEST_CASE("train refuses track_heads without a tracker, before anything is written") {
  TempDir tmp("track_refused");
  const hr::TrainConfig config = tracked_config();
  const std::unique_ptr<hr::Dataset> data = hr::make_dataset(config);
  CHECK(error_of([&] { hr::train(hr::finalize(config, *data), *data, (tmp / "run").string(), {}); }) ==
        "train.track_heads is on, but no head statistics were given (TrainOptions::track_heads)");
  CHECK(!fs::exists(tmp / "run"));
}

TEST_CASE("train --track-heads writes tracked_heads.csv and tracked_heads.svg, and is refused with --no-save") {
  TempDir tmp("track_cli");
  const std::string out = (tmp / "run").string();
  const CliResult r = run_headroom(fmt::format(
      "train --task induction --seq-len 9 --vocab 14 --d-model 16 --layers 2 --heads 2 --attn-only --steps 20 "
      "--batch 8 --eval-every 10 --eval-batches 2 --track-heads -q --out {}",
      out));
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("tracked heads: " + out + "/tracked_heads.csv, plotted with the ICL score in " + out + "/tracked_heads.svg") !=
        std::string::npos);
  CHECK(lines_of(read_file(tmp / "run/tracked_heads.csv")).size() == 1 + 2 * 4);
  const std::string svg = read_file(tmp / "run/tracked_heads.svg");
  for (const char* s : {"<svg", "induction score", "previous-token score", "L1 H1", "in-context-learning score"}) {
    CHECK(svg.find(s) != std::string::npos);
  }
  const std::vector<hr::MetricsRow> m = hr::read_metrics(tmp / "run/metrics.csv");
  REQUIRE(m.size() == 2);
  CHECK(m[1].icl_score.has_value());
  check_refused("train --task induction --steps 5 --track-heads --no-save", "--track-heads writes DIR/tracked_heads.csv");
}

TEST_CASE("ablate --track-heads tracks every run and plots the points' curves side by side") {
  TempDir tmp("track_ablate");
  const std::string out = (tmp / "sweep").string();
  const CliResult r = run_headroom(fmt::format(
      "ablate --task induction --seq-len 9 --vocab 14 --d-model 16 --layers 2 --attn-only --heads 1,2 --seeds 1 "
      "--steps 20 --batch 8 --eval-every 10 --eval-batches 2 --track-heads -q --out {}",
      out));
  INFO(r.output);
  REQUIRE(r.status == 0);
  std::size_t runs = 0;
  for (const auto& e : fs::directory_iterator(tmp / "sweep/runs")) {
    ++runs;
    const std::vector<hr::HeadLogRow> rows = hr::read_head_log(e.path() / "tracked_heads.csv");
    CHECK((rows.size() == 2 * 2 * 1 || rows.size() == 2 * 2 * 2));  // 2 validations x 2 layers x 1 or 2 heads
  }
  CHECK(runs == 2);
  const std::string svg = read_file(tmp / "sweep/tracked_heads.svg");
  for (const char* s : {"largest induction score over the heads", "h1-dk16", "h2-dk8", "in-context-learning score"}) {
    CHECK(svg.find(s) != std::string::npos);
  }
}
