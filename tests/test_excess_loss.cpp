// Excess loss (val loss - Bayes loss, docs/design.md #15) wherever a run's numbers
// go: the trainer's progress and summary, metrics.csv (and an old one without the
// column, read and resumed), checkpoints, result.json, results.csv, summary.md and
// the final_vs plots. The data is `copy` with a made-up target_nll of 0.5 on the
// counted targets of even rows and 0 on odd ones, so that the Bayes loss of any
// validation set of even-sized batches is exactly 0.25; a text knows none. The
// temporary directories are named xl_* because their paths appear in the outputs
// searched for "excess".
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "ablate/report.hpp"
#include "data/task.hpp"
#include "nn/safetensors.hpp"
#include "train/metrics.hpp"
#include "train/trainer.hpp"
#include "cli_runner.hpp"
#include "support.hpp"

namespace hr = headroom;
namespace fs = std::filesystem;

namespace {

constexpr double kBayes = 0.25;

class NoisyCopy : public hr::Dataset {
 public:
  NoisyCopy() : copy_(hr::make_task("copy", {.vocab = 8, .seq_len = 8})) {}
  std::string name() const override { return "copy"; }
  std::size_t vocab_size() const override { return copy_->vocab_size(); }
  std::size_t seq_len() const override { return copy_->seq_len(); }
  hr::Batch sample(std::size_t batch, hr::Split split, hr::Rng& rng) const override {
    hr::Batch b = copy_->sample(batch, split, rng);
    REQUIRE(b.target_nll.size() == b.target_mask.size());
    const std::size_t T = seq_len();
    for (std::size_t i = 0; i < b.target_nll.size(); ++i) {
      b.target_nll[i] = b.target_mask.data()[i] && (i / T) % 2 == 0 ? 2 * kBayes : 0.0;
    }
    return b;
  }

 private:
  std::unique_ptr<hr::Dataset> copy_;
};

hr::TrainConfig tiny(const NoisyCopy& data) {
  hr::TrainConfig c;
  c.model.d_model = 16;
  c.model.n_heads = 2;
  c.model.n_layers = 1;
  c.data = {.task = "copy", .text = "", .seq_len = 8, .vocab = 8};
  c.optim.steps = 40;
  c.optim.batch = 8;
  c.optim.warmup = 5;
  c.optim.eval_every = 10;
  c.optim.eval_batches = 2;
  c.optim.save_every = 10;
  return hr::finalize(c, data);
}

std::size_t column(const std::string& header, const std::string& name) {
  const std::vector<std::string> h = fields(header);
  const auto it = std::find(h.begin(), h.end(), name);
  REQUIRE_MESSAGE(it != h.end(), header << " lacks " << name);
  return static_cast<std::size_t>(it - h.begin());
}


}  // namespace

TEST_CASE("excess loss: the validation batches' Bayes loss is the mean target_nll of their counted targets") {
  const NoisyCopy data;
  const std::vector<hr::Batch> val = hr::validation_batches(data, 3, 4, hr::validation_seed(5));
  REQUIRE(hr::bayes_loss(val).has_value());
  CHECK(*hr::bayes_loss(val) == kBayes);
  std::vector<hr::Batch> unknown = val;
  unknown[1].target_nll.clear();  // one batch that does not know its distribution
  CHECK_FALSE(hr::bayes_loss(unknown).has_value());
}

TEST_CASE("excess loss: every validation, the summary and metrics.csv give val loss - Bayes loss") {
  const TempDir tmp("xl_train");
  const NoisyCopy data;
  const hr::TrainConfig c = tiny(data);
  hr::TrainOptions o;
  o.out_dir = tmp.path().string();
  std::vector<double> losses, excesses;
  o.on_progress = [&](const hr::Progress& p) {
    if (!p.evaluated) return;
    REQUIRE(p.val.bayes_loss.has_value());
    CHECK(*p.val.bayes_loss == kBayes);
    REQUIRE(p.val.excess_loss().has_value());
    CHECK(*p.val.excess_loss() == p.val.loss - kBayes);
    losses.push_back(p.val.loss);
    excesses.push_back(*p.val.excess_loss());
  };
  const hr::TrainSummary s = hr::train(c, data, o);
  REQUIRE(excesses.size() == 4);
  REQUIRE(s.bayes_loss.has_value());
  CHECK(*s.bayes_loss == kBayes);
  REQUIRE(s.final_excess_loss.has_value());
  CHECK(*s.final_excess_loss == s.final_val.loss - kBayes);
  CHECK(*s.final_excess_loss == excesses.back());
  REQUIRE(s.best_excess_loss.has_value());
  CHECK(*s.best_excess_loss == *std::min_element(excesses.begin(), excesses.end()));

  // The column in the file, 6 decimals like val_loss, and the same numbers read back.
  const std::vector<std::string> rows = lines_of(read_file(tmp / "metrics.csv"));
  REQUIRE(rows.size() == 5);
  CHECK(rows[0] ==
        "step,train_loss,val_loss,val_accuracy,val_excess_loss,icl_score,lr,grad_norm,tokens_per_s,train_bpc,val_bpc");
  for (std::size_t i = 1; i < rows.size(); ++i) {
    CAPTURE(rows[i]);
    CHECK(fields(rows[i])[4] == fmt::format("{:.6f}", excesses[i - 1]));
  }
  const std::vector<hr::MetricsRow> read = hr::read_metrics(tmp / "metrics.csv");
  REQUIRE(read.size() == 4);
  for (std::size_t i = 0; i < read.size(); ++i) {
    REQUIRE(read[i].val_excess_loss.has_value());
    CHECK(*read[i].val_excess_loss == doctest::Approx(read[i].val_loss - kBayes).epsilon(1e-5));
    CHECK(*read[i].val_excess_loss == doctest::Approx(losses[i] - kBayes).epsilon(1e-5));
  }
}

TEST_CASE("excess loss: a resumed run keeps its best excess loss and writes the rows the whole run writes") {
  const TempDir whole("xl_resume_whole"), parts("xl_resume_parts");
  const NoisyCopy data;
  const hr::TrainConfig c = tiny(data);
  hr::TrainOptions once;
  once.out_dir = whole.path().string();
  const hr::TrainSummary a = hr::train(c, data, once);
  hr::TrainOptions chunk;
  chunk.out_dir = parts.path().string();
  chunk.stop_after = 25;
  (void)hr::train(c, data, chunk);
  chunk.resume = true;
  chunk.stop_after = 0;
  const hr::TrainSummary b = hr::train(c, data, chunk);
  CHECK(b.best_excess_loss == a.best_excess_loss);
  CHECK(b.final_excess_loss == a.final_excess_loss);
  CHECK(b.bayes_loss == a.bayes_loss);
  CHECK(metrics_without_timing(parts / "metrics.csv") == metrics_without_timing(whole / "metrics.csv"));
}

TEST_CASE("excess loss: a checkpoint from before the excess loss was recorded resumes, and its best starts over") {
  const TempDir tmp("xl_old_checkpoint");
  const NoisyCopy data;
  const hr::TrainConfig c = tiny(data);
  hr::TrainOptions o;
  o.out_dir = tmp.path().string();
  o.stop_after = 20;
  (void)hr::train(c, data, o);
  // Make it a checkpoint from before these keys existed.
  const fs::path state_file = tmp / "checkpoints" / "step-00000020" / "train_state.safetensors";
  hr::SafetensorsFile st = hr::read_safetensors(state_file);
  nlohmann::json state = nlohmann::json::parse(st.metadata.at("state"));
  REQUIRE(state.contains("best_excess_loss"));
  REQUIRE(state["last_val"].contains("bayes_loss"));
  CHECK(state["last_val"]["bayes_loss"] == kBayes);
  state.erase("best_excess_loss");
  state["last_val"].erase("bayes_loss");
  st.metadata["state"] = state.dump();
  hr::write_safetensors(state_file, st);

  std::vector<double> excesses;
  o.on_progress = [&](const hr::Progress& p) {
    if (p.evaluated) excesses.push_back(*p.val.excess_loss());
  };
  o.resume = true;
  o.stop_after = 0;
  const hr::TrainSummary s = hr::train(c, data, o);
  REQUIRE(excesses.size() == 2);  // steps 30 and 40
  REQUIRE(s.best_excess_loss.has_value());
  CHECK(*s.best_excess_loss == std::min(excesses[0], excesses[1]));
  CHECK(s.bayes_loss == kBayes);
}

TEST_CASE("excess loss: a metrics.csv from before the column is read, and a resume rewrites it in the new columns") {
  const TempDir tmp("xl_old_metrics");
  const NoisyCopy data;
  const hr::TrainConfig c = tiny(data);
  hr::TrainOptions o;
  o.out_dir = tmp.path().string();
  o.stop_after = 20;
  (void)hr::train(c, data, o);

  // Rewrite its metrics.csv as a run made before val_excess_loss would have: without
  // the column, and with a row past the checkpoint that a resume drops.
  const std::vector<std::string> rows = lines_of(read_file(tmp / "metrics.csv"));
  REQUIRE(rows.size() == 3);  // header, steps 10 and 20
  std::string old;
  std::vector<std::string> old_rows;
  for (const std::string& row : rows) {
    std::vector<std::string> f = fields(row);
    f.resize(9);                            // train_bpc and val_bpc, newer than this file
    f.erase(f.begin() + 4, f.begin() + 6);  // val_excess_loss and icl_score, both newer than this file
    std::string line;
    for (const std::string& x : f) line += (line.empty() ? "" : ",") + x;
    old_rows.push_back(line);
    old += line + "\n";
  }
  REQUIRE(old_rows[0] == "step,train_loss,val_loss,val_accuracy,lr,grad_norm,tokens_per_s");
  old += "30,1.0,1.0,0.5,0.001,1.0,10.0\n";
  std::ofstream(tmp / "metrics.csv") << old;

  const std::vector<hr::MetricsRow> read = hr::read_metrics(tmp / "metrics.csv");
  REQUIRE(read.size() == 3);
  CHECK(read[2].step == 30);
  CHECK(read[2].val_loss == 1.0);
  CHECK(read[2].tokens_per_s == 10.0);
  for (const hr::MetricsRow& r : read) {
    CHECK_FALSE(r.val_excess_loss.has_value());
    CHECK_FALSE(r.icl_score.has_value());
  }

  o.resume = true;
  o.stop_after = 0;
  (void)hr::train(c, data, o);
  const std::vector<std::string> after = lines_of(read_file(tmp / "metrics.csv"));
  REQUIRE(after.size() == 5);  // header, steps 10 and 20 as they were, then 30 and 40 anew
  CHECK(after[0] ==
        "step,train_loss,val_loss,val_accuracy,val_excess_loss,icl_score,lr,grad_norm,tokens_per_s,train_bpc,val_bpc");
  for (std::size_t i = 1; i <= 2; ++i) {  // the old fields in the new order, the unknown ones empty
    std::vector<std::string> f = fields(old_rows[i]);
    f.insert(f.begin() + 4, 2, "");
    f.insert(f.end(), 2, "");
    CHECK(fields(after[i]) == f);
  }
  for (std::size_t i = 3; i <= 4; ++i) {
    CAPTURE(after[i]);
    CHECK(fields(after[i]).size() == 11);
    CHECK_FALSE(fields(after[i])[5].empty());  // icl_score
    CHECK_FALSE(fields(after[i])[4].empty());
  }
  const std::vector<hr::MetricsRow> resumed = hr::read_metrics(tmp / "metrics.csv");
  REQUIRE(resumed.size() == 4);
  CHECK_FALSE(resumed[1].val_excess_loss.has_value());
  REQUIRE(resumed[3].val_excess_loss.has_value());
  CHECK(*resumed[3].val_excess_loss == doctest::Approx(resumed[3].val_loss - kBayes).epsilon(1e-5));
}

TEST_CASE("excess loss: a text run has none: no Bayes loss, an empty column, and no line in train's output") {
  const TempDir tmp("xl_text");
  std::string words;
  for (int i = 0; i < 20; ++i) words += "the cat sat on the mat. the dog sat on the cat's mat. a cat ran.\n";
  const fs::path text = tmp.write("t.txt", words);
  hr::TrainConfig c;
  c.model.d_model = 16;
  c.model.n_heads = 2;
  c.model.n_layers = 1;
  c.data.text = text.string();
  c.data.seq_len = 8;
  c.optim.steps = 20;
  c.optim.batch = 4;
  c.optim.warmup = 2;
  c.optim.eval_every = 10;
  c.optim.eval_batches = 2;
  const auto data = hr::make_dataset(c);
  c = hr::finalize(c, *data);
  hr::TrainOptions o;
  o.out_dir = (tmp / "run").string();
  const hr::TrainSummary s = hr::train(c, *data, o);
  CHECK_FALSE(s.bayes_loss.has_value());
  CHECK_FALSE(s.final_excess_loss.has_value());
  CHECK_FALSE(s.best_excess_loss.has_value());
  const std::vector<std::string> rows = lines_of(read_file(tmp / "run" / "metrics.csv"));
  REQUIRE(rows.size() == 3);
  for (std::size_t i = 1; i < rows.size(); ++i) CHECK(fields(rows[i])[4].empty());
  for (const hr::MetricsRow& r : hr::read_metrics(tmp / "run" / "metrics.csv")) CHECK_FALSE(r.val_excess_loss);

  const CliResult r = run_headroom("train --text " + text.string() +
                                   " --seq-len 8 --d-model 16 --heads 2 --layers 1 --steps 20 --batch 4 --warmup 2 "
                                   "--eval-every 10 --eval-batches 2 --no-save");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("bayes") == std::string::npos);
  CHECK(r.output.find("excess") == std::string::npos);
}

TEST_CASE("excess loss: headroom train shows the Bayes loss once and the excess at each validation") {
  // Every task today has determined answers: Bayes loss 0, so excess = val loss.
  const CliResult r = run_headroom("train --task copy --vocab 8 --seq-len 8 --d-model 16 --heads 2 --layers 1 "
                                   "--steps 20 --warmup 2 --eval-every 10 --eval-batches 2 --no-save");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const std::string bayes =
      "bayes loss 0.0000 on the validation targets (the true distribution's loss; excess = val - bayes)\n";
  REQUIRE(r.output.find(bayes) != std::string::npos);
  CHECK(r.output.find("bayes loss") == r.output.find(bayes));  // once, before the summary
  std::size_t validations = 0;
  for (const std::string& line : lines_of(r.output)) {
    if (line.rfind("step ", 0) != 0) continue;
    ++validations;
    const std::size_t v = line.find("  val ");
    REQUIRE(v != std::string::npos);
    const std::string val = line.substr(v + 6, 6);  // "0.1234"
    CHECK(line.find("  val " + val + " excess " + val + " acc ") != std::string::npos);
  }
  CHECK(validations == 2);
  const std::size_t final_at = r.output.find(", val loss ");
  REQUIRE(final_at != std::string::npos);
  const std::string final_val = r.output.substr(final_at + 11, 6);
  CHECK(r.output.find(fmt::format("excess loss {} (val loss - bayes loss 0.0000), lowest ", final_val)) !=
        std::string::npos);
}

// ---- ablate ---------------------------------------------------------------------------

namespace {

// A sweep directory of hand-written results: 2 points x 3 seeds, with the result.json
// of `old_seed` (if any) as written before the excess loss was recorded.
struct HandSweep {
  hr::SweepPlan plan;
  std::vector<std::vector<double>> loss{{0.55, 0.57, 0.53}, {0.27, 0.28, 0.29}};
  std::vector<std::vector<double>> bayes{{0.25, 0.25, 0.25}, {0.26, 0.26, 0.26}};

  HandSweep(const fs::path& dir, int old_seed, bool text) {
    const NoisyCopy data;
    plan.columns = {"n_heads", "d_k", "n_kv_heads"};
    plan.plot_axes = {"n_heads"};
    plan.seeds = {0, 1, 2};
    for (std::size_t p = 0; p < 2; ++p) {
      for (std::uint64_t seed = 0; seed < 3; ++seed) {
        plan.runs.push_back({.id = fmt::format("h{}-s{}", p + 1, seed), .point = fmt::format("h{}", p + 1),
                             .seed = seed, .values = {p + 1, 8, p + 1}, .config = tiny(data)});
      }
    }
    for (std::size_t i = 0; i < plan.runs.size(); ++i) {
      const fs::path run = dir / "runs" / plan.runs[i].id;
      fs::create_directories(run);
      const double l = loss[i / 3][i % 3], b = bayes[i / 3][i % 3];
      nlohmann::json j{{"id", plan.runs[i].id},  {"seed", i % 3},           {"steps", 40},
                       {"parameters", 1000},     {"final_train_loss", 0.5}, {"final_val_loss", l},
                       {"final_val_accuracy", 0.5}, {"best_val_accuracy", 0.5}, {"best_step", 40},
                       {"skipped_steps", 0},     {"wall_s", 1.0},           {"tokens_per_s", 100.0}};
      if (text) {
        j["final_bayes_loss"] = nullptr;
        j["final_excess_loss"] = nullptr;
      } else if (static_cast<int>(i % 3) != old_seed) {
        j["final_bayes_loss"] = b;
        j["final_excess_loss"] = l - b;
      }
      std::ofstream(run / "result.json") << j.dump(2) << "\n";
      std::ofstream(run / "metrics.csv") << "step,train_loss,val_loss,val_accuracy,lr,grad_norm,tokens_per_s\n"
                                         << fmt::format("40,0.5,{},0.5,0.001,1.0,100.0\n", l);
    }
  }
};

}  // namespace

TEST_CASE("excess loss in ablate: results.csv columns, the summary's mean and sd with noise marks, the plot") {
  const TempDir tmp("xl_ablate");
  const HandSweep sweep(tmp.path(), -1, false);
  const std::string summary = hr::write_reports(sweep.plan, tmp.path(), 0.99);

  const std::vector<hr::RunResult> results = hr::collect_results(sweep.plan, tmp.path(), 0.99);
  REQUIRE(results.size() == 6);
  CHECK(results[4].final_bayes_loss == 0.26);
  CHECK(results[4].final_excess_loss == 0.28 - 0.26);

  const std::vector<std::string> csv = lines_of(read_file(tmp / "results.csv"));
  REQUIRE(csv.size() == 7);
  const std::size_t bayes_at = column(csv[0], "final_bayes_loss"), excess_at = column(csv[0], "final_excess_loss");
  CHECK(bayes_at == column(csv[0], "final_val_loss") + 1);
  CHECK(excess_at == bayes_at + 1);
  CHECK(fields(csv[5])[bayes_at] == "0.26");
  CHECK(fields(csv[5])[excess_at] == fmt::format("{}", 0.28 - 0.26));

  const std::vector<hr::PointSummary> points = hr::summarize(sweep.plan, results);
  REQUIRE(points.size() == 2);
  CHECK(points[0].excess_loss.n == 3);
  CHECK(points[0].excess_loss.mean == doctest::Approx(0.30));
  CHECK(points[0].excess_loss.sd == doctest::Approx(0.02));
  CHECK(points[1].excess_loss.mean == doctest::Approx(0.02));
  CHECK(points[1].excess_loss.sd == doctest::Approx(0.01));
  CHECK(points[1].best_excess);
  CHECK(points[0].excess_differs);  // 0.28 apart, 2 se = 2 sqrt(0.0004/3 + 0.0001/3) = 0.026
  // The table: the column after val loss, four significant digits, the same marks.
  const std::size_t header = summary.find("| point ");
  REQUIRE(header != std::string::npos);
  CHECK(summary.find(" val loss |", header) < summary.find(" excess loss |", header));
  CHECK(summary.find(" excess loss |", header) < summary.find(" val acc % |", header));
  CHECK(summary.find(" 0.3000 ± 0.0200 * |") != std::string::npos);
  CHECK(summary.find(" 0.02000 ± 0.01000 (best) |") != std::string::npos);
  CHECK(summary.find("Excess loss: a run's final val loss minus the Bayes loss") != std::string::npos);

  const std::string svg = read_file(tmp / "final_vs_n_heads.svg");
  CHECK(svg.find("Final excess loss (val loss - Bayes loss)") != std::string::npos);
  CHECK(svg.find("final excess loss (nats/token)") != std::string::npos);
}

TEST_CASE("excess loss in ablate: an old result.json without it is read, and a text sweep shows none") {
  SUBCASE("one seed's result.json predates the fields: its cells are empty and its point pools the others") {
    const TempDir tmp("xl_ablate_old");
    const HandSweep sweep(tmp.path(), 1, false);
    const std::string summary = hr::write_reports(sweep.plan, tmp.path(), 0.99);
    const std::vector<std::string> csv = lines_of(read_file(tmp / "results.csv"));
    REQUIRE(csv.size() == 7);
    const std::size_t bayes_at = column(csv[0], "final_bayes_loss");
    CHECK(fields(csv[2])[bayes_at].empty());      // h1-s1
    CHECK(fields(csv[2])[bayes_at + 1].empty());
    CHECK(fields(csv[1])[bayes_at] == "0.25");    // h1-s0
    const std::vector<hr::PointSummary> points =
        hr::summarize(sweep.plan, hr::collect_results(sweep.plan, tmp.path(), 0.99));
    CHECK(points[0].excess_loss.n == 2);
    CHECK(points[0].excess_loss.mean == doctest::Approx((0.30 + 0.28) / 2));
    CHECK(points[0].val_loss.n == 3);
  }
  SUBCASE("a text sweep: null in result.json, empty cells, no column in the summary and no excess plot") {
    const TempDir tmp("xl_ablate_text");
    const HandSweep sweep(tmp.path(), -1, true);
    const std::string summary = hr::write_reports(sweep.plan, tmp.path(), 0.99);
    const std::vector<std::string> csv = lines_of(read_file(tmp / "results.csv"));
    const std::size_t bayes_at = column(csv[0], "final_bayes_loss");
    for (std::size_t i = 1; i < csv.size(); ++i) {
      CHECK(fields(csv[i])[bayes_at].empty());
      CHECK(fields(csv[i])[bayes_at + 1].empty());
    }
    CHECK(summary.find("excess") == std::string::npos);
    CHECK(summary.find("Excess") == std::string::npos);
    CHECK(read_file(tmp / "final_vs_n_heads.svg").find("excess") == std::string::npos);
  }
}

TEST_CASE("excess loss in ablate: a real sweep's result.json and results.csv carry it (copy: Bayes loss 0)") {
  const TempDir tmp("xl_ablate_e2e");
  const CliResult r = run_headroom(
      "ablate --task copy --vocab 8 --seq-len 6 --d-model 16 --layers 1 --steps 20 --warmup 2 --eval-every 10 "
      "--heads 2 --dk auto --seeds 1 --out " + tmp.path().string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  const std::string result = read_file(tmp / "runs" / "h2-dk8-s0" / "result.json");
  CHECK(result.find("\"final_bayes_loss\": 0.0") != std::string::npos);
  const std::vector<std::string> csv = lines_of(read_file(tmp / "results.csv"));
  REQUIRE(csv.size() == 2);
  const std::vector<std::string> row = fields(csv[1]);
  const std::size_t loss_at = column(csv[0], "final_val_loss");
  CHECK(row[loss_at + 1] == "0");
  CHECK(row[loss_at + 2] == row[loss_at]);  // loss - 0
  CHECK(r.output.find(fmt::format("h2-dk8-s0: val loss {:.4f} (excess {:.4f})", std::stod(row[loss_at]),
                                  std::stod(row[loss_at]))) != std::string::npos);
}
