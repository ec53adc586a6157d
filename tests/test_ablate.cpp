// `headroom ablate`: the grid, the flag parsers and the noise rule as functions, then
// tiny sweeps end to end through the binary: the files, skipping finished runs,
// redoing and resuming unfinished ones, shards and their merge, invalid points,
// Ctrl-C, and one-line errors that leave nothing behind.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <set>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "ablate/sweep.hpp"
#include "ablate/report.hpp"
#include "nn/presets.hpp"
#include "train/out_dir.hpp"
#include "train/trainer.hpp"
#include "cli_runner.hpp"
#include "support.hpp"

namespace hr = headroom;
namespace fs = std::filesystem;

namespace {

// The tiny sweep of the end-to-end tests: 2 head counts x 2 seeds, ~0.1 s a run.
const std::string kTiny =
    "ablate --task copy --vocab 8 --seq-len 6 --d-model 16 --layers 1 --steps 30 --warmup 5 --eval-every 10 "
    "--save-every 10 --heads 2,4 --dk auto --seeds 2 --jobs 2";

hr::TrainConfig tiny_base() {
  hr::TrainConfig c;
  c.data = {.task = "copy", .text = "", .seq_len = 6, .vocab = 8};
  c.model.d_model = 16;
  c.optim.steps = 30;
  c.optim.warmup = 5;
  return c;
}

}  // namespace

// ---- the grid and the flags, as functions ----------------------------------------

TEST_CASE("ablate grid: the cartesian product of the axes and seeds, in order, with readable ids") {
  hr::SweepSpec spec{.base = tiny_base(),
                     .axes = {hr::parse_count_axis("--heads", "n_heads", "1,2", false),
                              hr::parse_count_axis("--dk", "d_k", "auto", true), hr::parse_sweep_flag("lr=0.001,0.003")},
                     .seeds = {0, 7}};
  const hr::SweepPlan plan = hr::plan_sweep(spec);
  CHECK(plan.skipped.empty());
  CHECK(plan.columns == std::vector<std::string>{"n_heads", "d_k", "n_kv_heads", "lr"});
  CHECK(plan.plot_axes == std::vector<std::string>{"n_heads", "lr"});  // --dk auto is one label
  std::vector<std::string> ids;
  for (const hr::PlannedRun& r : plan.runs) ids.push_back(r.id);
  CHECK(ids == std::vector<std::string>{"h1-dk16-lr0.001-s0", "h1-dk16-lr0.001-s7", "h1-dk16-lr0.003-s0",
                                        "h1-dk16-lr0.003-s7", "h2-dk8-lr0.001-s0", "h2-dk8-lr0.001-s7",
                                        "h2-dk8-lr0.003-s0", "h2-dk8-lr0.003-s7"});
  const hr::PlannedRun& r = plan.runs[6];
  CHECK(r.point == "h2-dk8-lr0.003");
  CHECK(r.config.model.n_heads == 2);
  CHECK(r.config.model.d_k == 8);   // finalized: auto resolved
  CHECK(r.config.model.vocab == 8);  // from the data
  CHECK(r.config.optim.lr == 0.003);
  CHECK(r.config.optim.seed == 0);
  CHECK(r.values.size() == 4);
  CHECK(r.values[3] == 0.003);
  // sweep.json round-trips.
  const hr::SweepPlan back = hr::sweep_plan_from_json(hr::to_json(plan), "test");
  CHECK(hr::to_json(back) == hr::to_json(plan));
}

TEST_CASE("ablate grid: invalid and duplicate points are skipped with the reason") {
  hr::SweepSpec spec{.base = tiny_base(),
                     .axes = {hr::parse_count_axis("--heads", "n_heads", "2,3", false),
                              hr::parse_count_axis("--dk", "d_k", "8,auto", true),
                              hr::parse_count_axis("--kv-heads", "n_kv_heads", "1,2", false)},
                     .seeds = {0}};
  const hr::SweepPlan plan = hr::plan_sweep(spec);
  std::vector<std::string> ids;
  for (const hr::PlannedRun& r : plan.runs) ids.push_back(r.id);
  // h3 with d_k 8 is valid (d_k given); with kv 2 it is not (3 heads over 2 kv heads).
  CHECK(ids == std::vector<std::string>{"h2-dk8-kv1-s0", "h2-dk8-kv2-s0", "h3-dk8-kv1-s0"});
  REQUIRE(plan.skipped.size() == 5);
  CHECK(plan.skipped[0].point == "n_heads=2 d_k=auto n_kv_heads=1");
  CHECK(plan.skipped[0].reason.find("the same runs as n_heads=2 d_k=8 n_kv_heads=1") != std::string::npos);
  CHECK(plan.skipped[2].point == "n_heads=3 d_k=8 n_kv_heads=2");
  CHECK(plan.skipped[2].reason.find("n_heads=3 is not a multiple of n_kv_heads=2") != std::string::npos);
  CHECK(plan.skipped[3].point == "n_heads=3 d_k=auto n_kv_heads=1");
  CHECK(plan.skipped[3].reason.find("d_model=16 is not a multiple of n_heads=3") != std::string::npos);

  // Two spellings of one value are one point.
  spec.axes = {hr::parse_sweep_flag("lr=0.001,1e-3")};
  const hr::SweepPlan same = hr::plan_sweep(spec);
  CHECK(same.runs.size() == 1);
  REQUIRE(same.skipped.size() == 1);
  CHECK(same.skipped[0].reason == "the same runs as lr=0.001 (h4-dk4-lr0.001)");

  spec.axes = {hr::parse_count_axis("--heads", "n_heads", "3,5", false)};
  CHECK_THROWS_WITH_AS(hr::plan_sweep(spec), doctest::Contains("none of the 2 points of the grid is valid"),
                       std::invalid_argument);

  // A list key sweeps lags's data, each value a dataset of its own; a task that does
  // not read the key skips the point that sets it.
  spec.base.data = {.task = "lags", .text = "", .seq_len = 9, .vocab = 8};
  spec.axes = {hr::parse_sweep_flag("lags=1,1+2"), hr::parse_sweep_flag("task=lags,copy")};
  const hr::SweepPlan lags = hr::plan_sweep(spec);
  ids.clear();
  for (const hr::PlannedRun& r : lags.runs) ids.push_back(r.id);
  CHECK(ids == std::vector<std::string>{"h4-dk4-lags1-tasklags-s0", "h4-dk4-lags1+2-tasklags-s0",
                                        "h4-dk4-lags1+2-taskcopy-s0"});
  CHECK(lags.runs[0].config.data.lags == std::vector<std::size_t>{1});
  REQUIRE(lags.skipped.size() == 1);
  CHECK(lags.skipped[0].point == "lags=1 task=copy");
  CHECK(lags.skipped[0].reason ==
        "data.lags [1]: task copy does not read it (only lags and lags_argmax do), so it would be ignored");
}

TEST_CASE("ablate flags: lists, --sweep keys and values, seeds and shards are checked") {
  CHECK_THROWS_WITH_AS(hr::parse_count_axis("--heads", "n_heads", "0,x", false),
                       doctest::Contains("comma-separated list of whole numbers >= 1, got '0,x'"), std::invalid_argument);
  CHECK_THROWS_WITH(hr::parse_count_axis("--heads", "n_heads", "2,2", false), doctest::Contains("listed twice"));
  CHECK_THROWS(hr::parse_count_axis("--heads", "n_heads", "auto", false));
  CHECK(hr::parse_count_axis("--dk", "d_k", "8,auto", true).values == std::vector<nlohmann::json>{8, 0});

  const hr::SweepAxis norm = hr::parse_sweep_flag("norm=pre,post");
  CHECK(norm.section == "model");
  CHECK(norm.values == std::vector<nlohmann::json>{"pre", "post"});
  const hr::SweepAxis lr = hr::parse_sweep_flag("train.lr=1e-3,0.01");
  CHECK(lr.section == "train");
  CHECK(lr.labels == std::vector<std::string>{"1e-3", "0.01"});
  CHECK(hr::parse_sweep_flag("vocab=8,12").section == "data");
  CHECK_THROWS_WITH(hr::parse_sweep_flag("nokey"), doctest::Contains("expected KEY=V1,V2,..."));
  CHECK_THROWS_WITH(hr::parse_sweep_flag("unknown_key=1"), doctest::Contains("unknown key 'unknown_key'"));
  CHECK_THROWS_WITH(hr::parse_sweep_flag("lr=abc"), doctest::Contains("'train.lr' must be a number"));
  CHECK_THROWS_WITH(hr::parse_sweep_flag("norm=middle"), doctest::Contains("norm must be 'pre', 'post' or 'none'"));
  CHECK_THROWS_WITH(hr::parse_sweep_flag("lr=0.1,"), doctest::Contains("empty value"));
  CHECK_THROWS_WITH(hr::parse_sweep_flag("n_heads=1,2"), doctest::Contains("with --heads"));
  CHECK_THROWS_WITH(hr::parse_sweep_flag("seed=1,2"), doctest::Contains("with --seeds"));
  // A list key: ',' between values, '+' between the items of one value.
  const hr::SweepAxis lags = hr::parse_sweep_flag("lags=1,1+2,3+1");
  CHECK(lags.section == "data");
  CHECK(lags.labels == std::vector<std::string>{"1", "1+2", "3+1"});
  CHECK(lags.values == std::vector<nlohmann::json>{nlohmann::json::array({1}), nlohmann::json::array({1, 2}),
                                                   nlohmann::json::array({3, 1})});
  CHECK_THROWS_WITH(hr::parse_sweep_flag("lags=1,1+x"),
                    "'lags=1,1+x': lags is a list: give each value as whole numbers joined by '+' (lags=1,1+2 sweeps "
                    "[1] and [1, 2]), got '1+x'");
  CHECK_THROWS_WITH(hr::parse_sweep_flag("lags=[1,2]"), doctest::Contains("lags is a list"));

  CHECK(hr::parse_seeds("3") == std::vector<std::uint64_t>{0, 1, 2});
  CHECK(hr::parse_seeds("0,5,9") == std::vector<std::uint64_t>{0, 5, 9});
  CHECK(hr::parse_seeds("7,") == std::vector<std::uint64_t>{7});
  CHECK_THROWS(hr::parse_seeds("0"));
  CHECK_THROWS(hr::parse_seeds("1,1"));
  CHECK_THROWS(hr::parse_seeds("x"));
  CHECK(hr::parse_seeds("3", 100) == std::vector<std::uint64_t>{100, 101, 102});
  CHECK(hr::parse_seeds("0,5", 7) == std::vector<std::uint64_t>{7, 12});
  CHECK(hr::parse_seeds("9999999999999999999,", hr::kMaxSeedOffset) ==
        std::vector<std::uint64_t>{9999999999999999999ULL + hr::kMaxSeedOffset});
  CHECK_THROWS(hr::parse_seeds("1", hr::kMaxSeedOffset + 1));
  CHECK(hr::parse_seed_offset("0") == 0);
  CHECK(hr::parse_seed_offset("1000000000000") == hr::kMaxSeedOffset);
  CHECK_THROWS_WITH(hr::parse_seed_offset("1000000000001"), doctest::Contains("from 0 to 1000000000000"));
  CHECK_THROWS(hr::parse_seed_offset("-1"));
  CHECK_THROWS(hr::parse_seed_offset("99999999999999999999"));

  const hr::Shard s = hr::parse_shard("2/3");
  CHECK((s.index == 2 && s.count == 3));
  CHECK((!s.has(0) && s.has(1) && !s.has(2) && s.has(4)));
  CHECK_THROWS_WITH(hr::parse_shard("3/2"), doctest::Contains("K must be from 1 to N"));
  CHECK_THROWS(hr::parse_shard("0/2"));
  CHECK_THROWS(hr::parse_shard("1-2"));
}

TEST_CASE("ablate grid: the keys of docs/design.md #17 sweep, and the refused combinations are skipped") {
  hr::SweepSpec spec{.base = tiny_base(), .axes = {hr::parse_sweep_flag("pos=learned,sinusoidal,rope")}, .seeds = {0}};
  hr::SweepPlan plan = hr::plan_sweep(spec);
  REQUIRE(plan.runs.size() == 3);
  CHECK(plan.runs[2].id == "h4-dk4-posrope-s0");
  CHECK(plan.runs[2].config.model.pos == hr::PositionEncoding::rope);
  CHECK(plan.runs[1].config.model.pos == hr::PositionEncoding::sinusoidal);
  CHECK(plan.columns.back() == "pos");

  spec.axes = {hr::parse_sweep_flag("norm_type=layernorm,rmsnorm"), hr::parse_sweep_flag("ffn=mlp,swiglu"),
               hr::parse_sweep_flag("qk_norm=false,true")};
  plan = hr::plan_sweep(spec);
  REQUIRE(plan.runs.size() == 8);
  CHECK(plan.skipped.empty());
  CHECK(plan.runs[7].id == "h4-dk4-norm_typermsnorm-ffnswiglu-qk_normtrue-s0");
  const hr::ModelConfig& last = plan.runs[7].config.model;
  CHECK(last.norm_type == hr::NormType::rmsnorm);
  CHECK(last.ffn == hr::FeedForwardType::swiglu);
  CHECK(last.qk_norm);
  CHECK(last.d_ff == 48);  // finalized: SwiGLU's 8 ceil(16 / 3)
  CHECK(plan.runs[0].config.model.d_ff == 64);
  CHECK(plan.runs[7].values == std::vector<nlohmann::json>{4, 4, 4, "rmsnorm", "swiglu", true});

  // ffn with attn_only is refused by the model config: that point is skipped, with why.
  spec.base.model.attn_only = true;
  spec.axes = {hr::parse_sweep_flag("ffn=mlp,swiglu")};
  plan = hr::plan_sweep(spec);
  REQUIRE(plan.runs.size() == 1);
  REQUIRE(plan.skipped.size() == 1);
  CHECK(plan.skipped[0].point == "ffn=swiglu");
  CHECK(plan.skipped[0].reason.find("ffn 'swiglu' with attn_only") != std::string::npos);
  CHECK_THROWS_WITH(hr::parse_sweep_flag("ffn=mlp,geglu"), doctest::Contains("geglu"));
}

TEST_CASE("ablate grid: a preset's kv-head rule follows each point's n_heads, unless kv heads are swept") {
  hr::SweepSpec spec{.base = tiny_base(), .axes = {hr::parse_count_axis("--heads", "n_heads", "4,8", false)},
                     .seeds = {0}};
  spec.base.model.d_model = 32;
  hr::apply_preset(hr::find_preset("llama"), spec.base.model);
  spec.kv_heads = hr::find_preset("llama").kv_heads;
  hr::SweepPlan plan = hr::plan_sweep(spec);
  REQUIRE(plan.runs.size() == 2);
  CHECK(plan.runs[0].config.model.n_kv_heads == 1);
  CHECK(plan.runs[1].config.model.n_kv_heads == 2);
  CHECK(plan.runs[1].values == std::vector<nlohmann::json>{8, 4, 2});
  CHECK(plan.runs[1].config.model.ffn == hr::FeedForwardType::swiglu);
  // A --kv-heads axis sets them itself.
  spec.axes.push_back(hr::parse_count_axis("--kv-heads", "n_kv_heads", "4", false));
  plan = hr::plan_sweep(spec);
  REQUIRE(plan.runs.size() == 2);
  CHECK(plan.runs[0].config.model.n_kv_heads == 4);
  CHECK(plan.runs[1].config.model.n_kv_heads == 4);
}

TEST_CASE("ablate grid: a default lr follows each point's norms, unless lr is swept") {
  hr::SweepSpec spec{.base = tiny_base(), .axes = {hr::parse_sweep_flag("norm=pre,none")}, .seeds = {0}};
  hr::SweepPlan plan = hr::plan_sweep(spec);
  REQUIRE(plan.runs.size() == 2);
  CHECK(plan.runs[1].config.optim.lr == hr::OptimConfig{}.lr);  // not open: the base's lr, given
  spec.lr_follows_model = true;
  plan = hr::plan_sweep(spec);
  REQUIRE(plan.runs.size() == 2);
  CHECK(plan.runs[0].config.optim.lr == hr::OptimConfig{}.lr);
  CHECK(plan.runs[1].config.optim.lr == hr::kNoNormLr);
  spec.axes.push_back(hr::parse_sweep_flag("lr=0.002"));
  plan = hr::plan_sweep(spec);
  REQUIRE(plan.runs.size() == 2);
  CHECK(plan.runs[1].config.optim.lr == 0.002);
}

TEST_CASE("headroom ablate --norm none: the runs train at kNoNormLr, or at the --lr given") {
  const TempDir tmp("ablate_no_norm_lr");
  const std::string sweep = "ablate --task copy --vocab 8 --seq-len 6 --d-model 16 --layers 1 --norm none --steps 2 "
                            "--warmup 1 --eval-every 2 --heads 2 --seeds 1 --out ";
  struct Case {
    std::string name, flags;
    double lr;
  };
  for (const Case& c : {Case{"default", "", hr::kNoNormLr}, Case{"given", " --lr 0.003", 0.003}}) {
    CAPTURE(c.name);
    const CliResult r = run_headroom(sweep + (tmp.path() / c.name).string() + c.flags);
    INFO(r.output);
    REQUIRE(r.status == 0);
    const nlohmann::json plan = nlohmann::json::parse(read_file(tmp.path() / c.name / "sweep.json"));
    REQUIRE(plan["runs"].size() == 1);
    CHECK(plan["runs"][0]["config"]["train"]["lr"] == c.lr);
    // Said before the runs start, when the rule chose the rate.
    const bool said = r.output.find("the default for a model without norms") < r.output.find("[1/1]");
    CHECK(said == c.flags.empty());
  }
}

TEST_CASE("ablate summary header: names the blocks of docs/design.md #17 that every run has") {
  const TempDir tmp("ablate_blocks_header");
  hr::SweepSpec spec{.base = tiny_base(), .axes = {hr::parse_sweep_flag("ffn=mlp,swiglu")}, .seeds = {0}};
  hr::apply_preset(hr::find_preset("llama"), spec.base.model);
  spec.base.model.qk_norm = true;
  hr::SweepPlan plan = hr::plan_sweep(spec);
  REQUIRE(plan.runs.size() == 2);
  (void)hr::write_reports(plan, tmp.path(), 0.99);
  std::string summary = read_file(tmp.path() / "summary.md");
  INFO(summary);
  // swiglu is swept, so only one run has it: it goes unsaid.
  CHECK(summary.find(", 2 layers, rope, rmsnorm, qk-norm, ") != std::string::npos);
  CHECK(summary.find("swiglu, ") == std::string::npos);

  spec.base = tiny_base();  // GPT-2's blocks: nothing to name
  plan = hr::plan_sweep(spec);
  (void)hr::write_reports(plan, tmp.path(), 0.99);
  summary = read_file(tmp.path() / "summary.md");
  CHECK(summary.find(", 2 layers, 30 steps, ") != std::string::npos);
}

// ---- the noise rule ----------------------------------------------------------------

TEST_CASE("noise rule: a point differs from the best when the means are over two standard errors apart") {
  const hr::SeedStats s = hr::seed_stats({1.0, 2.0, 3.0});
  CHECK(s.n == 3);
  CHECK(s.mean == doctest::Approx(2.0));
  CHECK(s.sd == doctest::Approx(1.0));  // sample sd: n - 1 in the denominator
  CHECK(std::isnan(hr::seed_stats({4.0}).sd));

  // se = sqrt(0.01/3 + 0.01/3) = 0.0816, so the threshold is 0.163.
  const hr::SeedStats best{.n = 3, .mean = 1.0, .sd = 0.1};
  CHECK(hr::differs_beyond_noise(hr::SeedStats{.n = 3, .mean = 1.17, .sd = 0.1}, best));
  CHECK_FALSE(hr::differs_beyond_noise(hr::SeedStats{.n = 3, .mean = 1.16, .sd = 0.1}, best));
  CHECK(hr::differs_beyond_noise(hr::SeedStats{.n = 3, .mean = 0.83, .sd = 0.1}, best));  // either side
  // Unequal sizes and spreads (Welch): sqrt(0.04/2 + 0.01/4) = 0.15, threshold 0.3.
  CHECK(hr::differs_beyond_noise(hr::SeedStats{.n = 2, .mean = 1.31, .sd = 0.2}, hr::SeedStats{.n = 4, .mean = 1.0, .sd = 0.1}));
  CHECK_FALSE(hr::differs_beyond_noise(hr::SeedStats{.n = 2, .mean = 1.29, .sd = 0.2}, hr::SeedStats{.n = 4, .mean = 1.0, .sd = 0.1}));
  // No noise estimate with one seed: never marked.
  CHECK_FALSE(hr::differs_beyond_noise(hr::SeedStats{.n = 1, .mean = 9.0, .sd = NAN}, best));
  // Zero spread on both sides: any difference is beyond noise, none is not.
  CHECK(hr::differs_beyond_noise(hr::SeedStats{.n = 2, .mean = 0.99, .sd = 0}, hr::SeedStats{.n = 2, .mean = 1.0, .sd = 0}));
  CHECK_FALSE(hr::differs_beyond_noise(hr::SeedStats{.n = 2, .mean = 1.0, .sd = 0}, hr::SeedStats{.n = 2, .mean = 1.0, .sd = 0}));
}

TEST_CASE("summary: one row per point, the best marked, points beyond noise of the best starred") {
  hr::SweepPlan plan;
  plan.columns = {"n_heads", "d_k", "n_kv_heads"};
  plan.seeds = {0, 1, 2};
  const std::vector<std::vector<double>> losses = {{0.50, 0.52, 0.48}, {0.10, 0.12, 0.08}, {0.14, 0.11, 0.09}};
  for (std::size_t p = 0; p < losses.size(); ++p) {
    for (std::uint64_t seed = 0; seed < 3; ++seed) {
      plan.runs.push_back({.id = fmt::format("p{}-s{}", p, seed), .point = fmt::format("p{}", p), .seed = seed,
                           .values = {1, 16, 1}, .config = {}});
    }
  }
  std::vector<hr::RunResult> results;
  for (std::size_t i = 0; i < plan.runs.size(); ++i) {
    hr::RunResult r;
    r.run = &plan.runs[i];
    r.final_val_loss = losses[i / 3][i % 3];
    r.final_val_accuracy = 1.0 - r.final_val_loss;
    if (i / 3 != 0) r.steps_to_target = 100 * (i % 3 + 1);
    results.push_back(r);
  }
  const std::vector<hr::PointSummary> points = hr::summarize(plan, results);
  REQUIRE(points.size() == 3);
  CHECK(points[1].best_loss);
  CHECK(points[1].best_accuracy);
  CHECK(points[0].loss_differs);        // 0.50 vs 0.10, sd 0.02 each
  CHECK_FALSE(points[2].loss_differs);  // 0.113 vs 0.10: within noise
  CHECK(points[0].accuracy_differs);
  CHECK(points[1].steps_to_target.mean == doctest::Approx(200));
  CHECK(points[0].steps_to_target.n == 0);
  CHECK(points[2].val_loss.mean == doctest::Approx((0.14 + 0.11 + 0.09) / 3));
}

// ---- end to end, through the binary -------------------------------------------------

TEST_CASE("headroom ablate: a tiny sweep writes its runs, results, summary, plots and report") {
  const TempDir tmp("ablate_e2e");
  const fs::path& dir = tmp.path();
  const CliResult r = run_headroom(kTiny + " --out " + dir.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("4 runs (2 points x 2 seeds)") != std::string::npos);
  CHECK(r.output.find("[4/4]") != std::string::npos);  // plain progress lines when not a terminal

  for (const char* id : {"h2-dk8-s0", "h2-dk8-s1", "h4-dk4-s0", "h4-dk4-s1"}) {
    CAPTURE(id);
    for (const char* file : {"config.json", "metrics.csv", "result.json", "model.safetensors"}) {
      CHECK_MESSAGE(fs::exists(dir / "runs" / id / file), file);
    }
  }
  const std::vector<std::string> csv = lines_of(read_file(dir / "results.csv"));
  REQUIRE(csv.size() == 5);
  CHECK(csv[0] == "run,n_heads,d_k,n_kv_heads,seed,parameters,attention_parameters_per_layer,"
                  "kv_floats_per_token_per_layer,final_train_loss,final_val_loss,final_bayes_loss,final_excess_loss,"
                  "final_val_accuracy,best_val_accuracy,steps_to_target,final_step,stop_reason,convergence,"
                  "fall_per_validation,wall_s,tokens_per_s");
  const std::vector<std::string> row = fields(csv[3]);
  REQUIRE(row.size() == 21);
  CHECK(row[0] == "h4-dk4-s0");
  CHECK(row[1] == "4");
  CHECK(row[2] == "4");
  CHECK(row[4] == "0");
  // 4 projections of (16 x 16) plus their biases, whatever the head count; KV: 4 heads x (4 + 4).
  CHECK(row[6] == "1088");
  CHECK(row[7] == "32");
  CHECK(std::stod(row[9]) > 0);
  CHECK(row[10] == "0");       // copy's answers are determined: Bayes loss 0
  CHECK(row[11] == row[9]);    // so the excess loss is the val loss
  CHECK(std::stod(row[12]) >= 0);
  CHECK(row[15] == "30");     // the last step: no --patience
  CHECK(row[16] == "steps");
  // 3 validations (every 10 of 30 steps) are enough for the rule to say.
  CHECK((row[17] == "falling" || row[17] == "converged"));
  CHECK(std::isfinite(std::stod(row[18])));
  CHECK(std::stod(row[19]) > 0);

  const std::string summary = read_file(dir / "summary.md");
  std::size_t table_rows = 0;
  for (const std::string& line : lines_of(summary)) table_rows += line.rfind("| h", 0) == 0 ? 1 : 0;
  CHECK(table_rows == 2);
  CHECK(summary.find("2 sqrt(sd_a^2/n_a + sd_b^2/n_b)") != std::string::npos);
  CHECK(r.output.find("| h2-dk8 ") != std::string::npos);  // the table is printed too

  for (const char* plot : {"val_loss.svg", "final_vs_n_heads.svg"}) {
    CAPTURE(plot);
    const std::string svg = read_file(dir / plot);
    CHECK(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0);
    CHECK(svg.find("<title>") != std::string::npos);
    CHECK(svg.find("</svg>") != std::string::npos);
    CHECK(svg.find("<polyline") != std::string::npos);
    const bool legend = svg.find("h2-dk8") != std::string::npos || svg.find("mean ± sd") != std::string::npos;
    CHECK(legend);
  }
  CHECK(read_file(dir / "val_loss.svg").find(">step</text>") != std::string::npos);
  CHECK(read_file(dir / "val_loss.svg").find("validation loss (nats/token") != std::string::npos);
  CHECK(read_file(dir / "final_vs_n_heads.svg").find("query heads (n_heads)") != std::string::npos);
  CHECK(read_file(dir / "final_vs_n_heads.svg").find("final validation accuracy (%)") != std::string::npos);
  const std::string html = read_file(dir / "report.html");
  CHECK(html.find("<table>") != std::string::npos);
  CHECK(html.find("<svg") != std::string::npos);

  const std::string before = read_file(dir / "results.csv");
  SUBCASE("running it again skips every finished run") {
    const CliResult again = run_headroom(kTiny + " --out " + dir.string());
    INFO(again.output);
    CHECK(again.status == 0);
    CHECK(again.output.find("4 finished before (skipped), 0 to run") != std::string::npos);
    CHECK(read_file(dir / "results.csv") == before);
  }
  SUBCASE("a run without result.json is redone, and only that one") {
    // As a process killed before it wrote result.json leaves the run: no result.json
    // and a lock file without the finished mark (docs/cli/ablate.md, Re-running).
    fs::remove(dir / "runs" / "h2-dk8-s1" / "result.json");
    std::ofstream(dir / "runs" / "h2-dk8-s1" / hr::kLockFile) << "1 on elsewhere";
    const CliResult again = run_headroom(kTiny + " --out " + dir.string());
    INFO(again.output);
    CHECK(again.status == 0);
    CHECK(again.output.find("3 finished before (skipped), 1 to run") != std::string::npos);
    CHECK(again.output.find("] h2-dk8-s1: val loss") != std::string::npos);
    CHECK(again.output.find("] h2-dk8-s0:") == std::string::npos);
    CHECK(results_without_timing(dir / "results.csv") == [&] {
      fs::path old = dir / "old.csv";
      std::ofstream(old) << before;
      return results_without_timing(old);
    }());
  }
  SUBCASE("an interrupted run resumes from its newest checkpoint and ends as if never stopped") {
    const fs::path run = dir / "runs" / "h4-dk4-s1";
    fs::remove(run / "result.json");
    std::ofstream(run / hr::kLockFile) << "1 on elsewhere";  // unmarked, as a stopped run's is
    fs::remove(run / "model.safetensors");
    fs::remove_all(run / "checkpoints" / "step-00000030");  // as if stopped after step 20
    REQUIRE(fs::exists(run / "checkpoints" / "step-00000020"));
    const CliResult again = run_headroom(kTiny + " --out " + dir.string());
    INFO(again.output);
    CHECK(again.status == 0);
    CHECK(again.output.find("(1 resumed from checkpoints)") != std::string::npos);
    CHECK(again.output.find("h4-dk4-s1: resuming from its checkpoint at step 20") != std::string::npos);
    std::ofstream(dir / "old.csv") << before;
    CHECK(results_without_timing(dir / "results.csv") == results_without_timing(dir / "old.csv"));
  }
  SUBCASE("more seeds extend the sweep: the new seeds train, the finished runs are kept") {
    const std::string kTiny3 = kTiny.substr(0, kTiny.find("--seeds 2")) + "--seeds 3 --jobs 2";
    const CliResult more = run_headroom(kTiny3 + " --out " + dir.string());
    INFO(more.output);
    CHECK(more.status == 0);
    CHECK(more.output.find("4 finished before (skipped), 2 to run") != std::string::npos);
    const nlohmann::json sweep = nlohmann::json::parse(read_file(dir / "sweep.json"));
    CHECK(sweep["seeds"] == nlohmann::json::array({0, 1, 2}));
    CHECK(sweep["runs"].size() == 6);
    CHECK(fs::exists(dir / "runs" / "h2-dk8-s2" / "result.json"));
    CHECK(read_file(dir / "summary.md").find("| h2-dk8 ") != std::string::npos);
    // The first two seeds again: a subset of the sweep, all finished; sweep.json keeps three.
    const CliResult fewer = run_headroom(kTiny + " --out " + dir.string());
    CHECK(fewer.status == 0);
    CHECK(fewer.output.find("4 finished before (skipped), 0 to run") != std::string::npos);
    CHECK(nlohmann::json::parse(read_file(dir / "sweep.json"))["seeds"].size() == 3);
    // Seeds that are not a continuation (0, 5) are another sweep.
    const std::string kOther = kTiny.substr(0, kTiny.find("--seeds 2")) + "--seeds 0,5 --jobs 2";
    const CliResult other = run_headroom(kOther + " --out " + dir.string());
    CHECK(other.status == 2);
    CHECK(other.output.find("holds a different sweep") != std::string::npos);
  }
  SUBCASE("another sweep in the same directory is refused") {
    const CliResult other = run_headroom(kTiny + " --lr 0.01 --out " + dir.string());
    INFO(other.output);
    CHECK(other.status == 2);
    CHECK(count_lines(other.output) == 1);
    CHECK(other.output.find("holds a different sweep (runs[\"h2-dk8-s0\"].config.train.lr: 0.003 there, 0.01 here)") !=
          std::string::npos);
  }
}

TEST_CASE("seeds until decided: a point is open until it differs from the best beyond noise or equals it within 0.02") {
  const auto point = [](const char* name, double mean, double sd, std::size_t n) {
    hr::PointSummary p;
    p.point = name;
    p.val_loss = {.n = n, .mean = mean, .sd = sd};
    return p;
  };
  // Against a best of sd 0: se = sd / 2 over 4 seeds (sd 2: se 1, 2 se = 2).
  const hr::PointSummary best = point("best", 1.0, 0.0, 4);
  CHECK(hr::undecided_points({best, point("far", 3.0 + 1.0 / 64, 2.0, 4)}).empty());  // beyond 2 se
  CHECK(hr::undecided_points({best, point("near", 3.0, 2.0, 4)}) == std::vector<std::string>{"near"});
  CHECK(hr::undecided_points({best, point("same", 1.001, 0.004, 4)}).empty());  // 0.001 + 0.004 < 0.02
  CHECK(hr::undecided_points({best, point("wide", 1.001, 0.02, 4)}) == std::vector<std::string>{"wide"});
  CHECK(hr::undecided_points({best, point("one", 5.0, 0.0, 1)}) == std::vector<std::string>{"one"});
  // The excess loss decides where every point knows it.
  hr::PointSummary a = point("a", 1.0, 0.0, 4), b = point("b", 1.0, 0.0, 4);
  a.excess_loss = {.n = 4, .mean = 0.1, .sd = 0.0};
  b.excess_loss = {.n = 4, .mean = 0.5, .sd = 0.0};
  CHECK(hr::undecided_points({a, b}).empty());
  b.excess_loss = {};
  CHECK(hr::undecided_points({a, b}).empty());  // val losses equal to the digit: equal within the margin
  CHECK(hr::undecided_points({}).empty());

  // equal_within on its own: |gap| + 2 se < margin, strictly; two seeds on each side.
  const hr::SeedStats two{.n = 4, .mean = 1.0, .sd = 2.0};  // se 1 against an sd-0 side
  CHECK(hr::equal_within(two, {.n = 4, .mean = 1.5, .sd = 0.0}, 2.5 + 1.0 / 64));
  CHECK_FALSE(hr::equal_within(two, {.n = 4, .mean = 1.5, .sd = 0.0}, 2.5));
  CHECK_FALSE(hr::equal_within(two, {.n = 4, .mean = 1.5, .sd = 0.0}, 2.0));  // 1 se would pass
  CHECK_FALSE(hr::equal_within({.n = 1, .mean = 1.0, .sd = 0.0}, {.n = 4, .mean = 1.0, .sd = 0.0}, 1.0));
  CHECK_FALSE(hr::equal_within({.n = 4, .mean = 1.0, .sd = 0.0}, {.n = 1, .mean = 1.0, .sd = 0.0}, 1.0));
  CHECK(hr::equal_within({.n = 2, .mean = 1.0, .sd = 0.0}, {.n = 2, .mean = 1.0, .sd = 0.0}, 1.0));
  CHECK_FALSE(hr::equal_within({.n = 4, .mean = NAN, .sd = 0.0}, {.n = 4, .mean = 1.0, .sd = 0.0}, 1.0));
}

TEST_CASE("new_seeds_at asks for the seeds a plan did not have, at the points named or at every point") {
  hr::SweepPlan before;
  before.seeds = {0, 1};
  const auto run = [](const char* point, std::uint64_t seed) {
    hr::PlannedRun r;
    r.point = point;
    r.seed = seed;
    return r;
  };
  const auto at_a = hr::new_seeds_at(before, {"a"});
  CHECK(at_a(run("a", 2)));
  CHECK_FALSE(at_a(run("b", 2)));
  CHECK_FALSE(at_a(run("a", 1)));
  const auto everywhere = hr::new_seeds_at(before, {});
  CHECK(everywhere(run("b", 2)));
  CHECK_FALSE(everywhere(run("b", 0)));
}

TEST_CASE("headroom ablate --seeds auto adds a seed to the compared points while a comparison is open, up to --max-seeds") {
  const TempDir tmp("ablate_seeds_auto");
  const fs::path dir = tmp.path() / "sweep";
  const std::string grid = "ablate --task copy --vocab 8 --seq-len 6 --d-model 16 --layers 1 --steps 40 --warmup 5 "
                           "--eval-every 20 --heads 1,2,4 --seeds auto --max-seeds 4 --jobs 2 --out " + dir.string();
  const CliResult r = run_headroom(grid);
  INFO(r.output);
  REQUIRE(r.status == 0);
  const nlohmann::json sweep = nlohmann::json::parse(read_file(dir / "sweep.json"));
  const std::size_t seeds = sweep["seeds"].size();
  CHECK(seeds >= 3);
  CHECK(seeds <= 4);
  CHECK(sweep["runs"].size() == 3 * seeds);  // the grid; the rounds train part of it
  // What it printed is what the finished runs say.
  const hr::SweepPlan plan = hr::read_sweep_plan(dir);
  const std::vector<hr::RunResult> finished = hr::collect_results(plan, dir, 0.99);
  const std::vector<std::string> open = hr::undecided_points(hr::summarize(plan, finished));
  if (open.empty()) {
    CHECK(r.output.find(fmt::format("--seeds auto: every comparison with the best point decided with up to {} seeds a "
                                    "point", seeds)) != std::string::npos);
  } else {
    CHECK(seeds == 4);
    CHECK(r.output.find("--seeds auto: not decided at --max-seeds with up to 4 seeds a point") != std::string::npos);
  }
  // Each round's seed went to the points compared after the round before (the open
  // ones and the best), and to no other: replayed here from the runs of the earlier seeds.
  std::size_t trained = 0;
  for (const hr::RunResult& x : finished) {
    if (x.run->seed < 3) ++trained;
  }
  CHECK(trained == 9);
  for (std::size_t k = 3; k < seeds; ++k) {
    hr::SweepPlan before = plan;
    before.seeds.resize(k);
    std::erase_if(before.runs, [&](const hr::PlannedRun& run) { return run.seed >= k; });
    std::string best;
    const std::vector<std::string> was_open =
        hr::undecided_points(hr::summarize(before, hr::collect_results(before, dir, 0.99)), hr::kEqualLossNats, &best);
    REQUIRE_FALSE(was_open.empty());
    CHECK(r.output.find(fmt::format("): seed {} for them and the best, {}\n", k, best)) != std::string::npos);
    std::set<std::string> want(was_open.begin(), was_open.end()), got;
    want.insert(best);
    for (const hr::RunResult& x : finished) {
      if (x.run->seed == k) got.insert(x.run->point);
    }
    CHECK(got == want);
  }
  // Again: the same rounds from the finished runs, nothing trained.
  const CliResult again = run_headroom(grid);
  CHECK(again.status == 0);
  const auto count = [&](const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = again.output.find(what); at != std::string::npos; at = again.output.find(what, at + 1)) ++n;
    return n;
  };
  CHECK(count(" 0 to run") >= 1);
  CHECK(count(" 0 to run") == count(" to run"));
  for (const std::string bad : {"--max-seeds 2", "--max-seeds 0"}) {
    const CliResult b = run_headroom(grid.substr(0, grid.find("--max-seeds 4")) + bad + " --out " +
                                     (tmp.path() / "bad").string());
    CHECK(b.status == 2);
    CHECK(count_lines(b.output) == 1);
  }
  const CliResult without = run_headroom("ablate --task copy --seeds 3 --max-seeds 5 --out " + (tmp.path() / "bad").string());
  CHECK(without.status == 2);
  CHECK(without.output.find("--max-seeds is for --seeds auto") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp.path() / "bad"));
}

TEST_CASE("headroom ablate --seed-offset: the same grid on a disjoint set of seeds, and a bad offset is one line") {
  const TempDir tmp("ablate_seed_offset");
  const fs::path dir = tmp.path() / "sweep";
  const std::string grid = "ablate --task copy --vocab 8 --seq-len 6 --d-model 16 --layers 1 --steps 2 --warmup 1 "
                           "--eval-every 2 --heads 2 --seeds 2 --jobs 2 -q";
  const CliResult r = run_headroom(grid + " --seed-offset 100 --out " + dir.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  const nlohmann::json sweep = nlohmann::json::parse(read_file(dir / "sweep.json"));
  REQUIRE(sweep["runs"].size() == 2);
  CHECK(sweep["runs"][0]["id"] == "h2-dk8-s100");
  CHECK(sweep["runs"][1]["id"] == "h2-dk8-s101");
  // The same directory without the offset is another sweep.
  const CliResult other = run_headroom(grid + " --out " + dir.string());
  CHECK(other.status == 2);
  for (const char* bad : {"-1", "x", "1000000000001"}) {
    const CliResult b = run_headroom(grid + " --seed-offset " + bad + " --out " + (tmp.path() / "bad").string());
    CHECK(b.status == 2);
    CHECK(count_lines(b.output) == 1);
    CHECK(b.output.find("--seed-offset") != std::string::npos);
    CHECK_FALSE(fs::exists(tmp.path() / "bad"));
  }
}

TEST_CASE("headroom ablate --preset llama --heads 4,8: each run's kv heads are its own n_heads / 4") {
  const TempDir tmp("ablate_llama");
  const fs::path dir = tmp.path() / "sweep";
  const CliResult r = run_headroom("ablate --preset llama --task copy --vocab 8 --seq-len 6 --d-model 16 --layers 1 "
                                   "--steps 4 --warmup 1 --eval-every 2 --heads 4,8 --seeds 1 --jobs 2 -q --out " +
                                   dir.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  const nlohmann::json sweep = nlohmann::json::parse(read_file(dir / "sweep.json"));
  REQUIRE(sweep["runs"].size() == 2);
  CHECK(sweep["runs"][0]["id"] == "h4-dk4-s0");
  CHECK(sweep["runs"][0]["config"]["model"]["n_kv_heads"] == 1);
  CHECK(sweep["runs"][1]["config"]["model"]["n_kv_heads"] == 2);
  CHECK(sweep["runs"][1]["config"]["model"]["ffn"] == "swiglu");
  CHECK(read_file(dir / "summary.md").find(", rope, rmsnorm, swiglu, ") != std::string::npos);
  // --kv-heads given: the rule is off.
  const CliResult kv = run_headroom("ablate --preset llama --task copy --vocab 8 --seq-len 6 --d-model 16 --layers 1 "
                                    "--steps 2 --warmup 1 --eval-every 2 --heads 4,8 --kv-heads 4 --seeds 1 -q --out " +
                                    (tmp.path() / "kv").string());
  INFO(kv.output);
  REQUIRE(kv.status == 0);
  const nlohmann::json kv_sweep = nlohmann::json::parse(read_file(tmp.path() / "kv" / "sweep.json"));
  REQUIRE(kv_sweep["runs"].size() == 2);
  CHECK(kv_sweep["runs"][1]["config"]["model"]["n_kv_heads"] == 4);
}

TEST_CASE("headroom ablate: two shards merged give the unsharded results") {
  const TempDir whole_tmp("ablate_whole");
  const TempDir a_tmp("ablate_shard1");
  const TempDir b_tmp("ablate_shard2");
  const TempDir merged_tmp("ablate_merged");
  const fs::path& whole = whole_tmp.path();
  const fs::path& a = a_tmp.path();
  const fs::path& b = b_tmp.path();
  const fs::path& merged = merged_tmp.path();
  REQUIRE(run_headroom(kTiny + " -q --out " + whole.string()).status == 0);
  const CliResult r1 = run_headroom(kTiny + " --shard 1/2 --out " + a.string());
  INFO(r1.output);
  REQUIRE(r1.status == 0);
  CHECK(r1.output.find("2 runs in this shard (1/2)") != std::string::npos);
  CHECK(fs::exists(a / "runs" / "h2-dk8-s0" / "result.json"));
  CHECK_FALSE(fs::exists(a / "runs" / "h2-dk8-s1"));
  CHECK(lines_of(read_file(a / "results.csv")).size() == 3);
  REQUIRE(run_headroom(kTiny + " --shard 2/2 --out " + b.string()).status == 0);

  const CliResult m = run_headroom("ablate --merge " + a.string() + " " + b.string() + " --out " + merged.string());
  INFO(m.output);
  REQUIRE(m.status == 0);
  CHECK(m.output.find("4 runs brought in, 0 already there, 4 of 4 finished") != std::string::npos);
  CHECK(results_without_timing(merged / "results.csv") == results_without_timing(whole / "results.csv"));
  CHECK(fs::exists(merged / "report.html"));
  CHECK(fs::exists(merged / "runs" / "h4-dk4-s1" / "metrics.csv"));

  // A merge refuses directories of different sweeps and flags that would define one.
  const CliResult mixed = run_headroom(kTiny + " --lr 0.01 -q --out " + (merged / "other").string());
  REQUIRE(mixed.status == 0);
  const CliResult refused = run_headroom("ablate --merge " + a.string() + " " + (merged / "other").string() +
                                         " --out " + (merged / "m2").string());
  CHECK(refused.status == 2);
  CHECK(refused.output.find("hold different sweeps") != std::string::npos);
  CHECK_FALSE(fs::exists(merged / "m2"));
  const CliResult flags = run_headroom("ablate --merge " + a.string() + " --heads 2 --out " + (merged / "m3").string());
  CHECK(flags.status == 2);
  CHECK(flags.output.find("excludes") != std::string::npos);
}

TEST_CASE("headroom ablate: an invalid combination is listed and skipped, the rest runs") {
  const TempDir tmp("ablate_invalid");
  const fs::path& dir = tmp.path();
  const CliResult r = run_headroom(
      "ablate --task copy --vocab 8 --seq-len 6 --d-model 16 --layers 1 --steps 10 --warmup 2 --eval-every 5 "
      "--heads 2,3 --dk auto --seeds 1 --out " + dir.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("skipped n_heads=3 d_k=auto: ") != std::string::npos);
  CHECK(r.output.find("d_model=16 is not a multiple of n_heads=3") != std::string::npos);
  CHECK(lines_of(read_file(dir / "results.csv")).size() == 2);
  CHECK(read_file(dir / "summary.md").find("- n_heads=3 d_k=auto: ") != std::string::npos);
}

TEST_CASE("headroom ablate: bad flags get one line and exit status 2, and write nothing") {
  const TempDir tmp("ablate_bad");
  const fs::path dir = tmp / "out";  // must not come into being
  struct Bad {
    std::string args;
    const char* says;
  };
  const std::string out = " --out " + dir.string();
  const Bad cases[] = {
      {"ablate --heads 0,x" + out, "--heads: expected a comma-separated list of whole numbers >= 1, got '0,x'"},
      {"ablate --dk 8,big" + out, "--dk: expected a comma-separated list of whole numbers >= 1 or auto"},
      {"ablate --kv-heads 2,2" + out, "--kv-heads: 2 is listed twice in '2,2'"},
      {"ablate --sweep nokey" + out, "--sweep: expected KEY=V1,V2,... (a config.json key), got 'nokey'"},
      {"ablate --sweep unknown_key=1" + out, "--sweep: unknown key 'unknown_key' (model: "},
      {"ablate --sweep lr=fast" + out, "'train.lr' must be a number, got \"fast\""},
      {"ablate --sweep lr=0.1 --sweep lr=0.2" + out, "--sweep lr is given twice"},
      {"ablate --shard 3/2" + out, "--shard: K must be from 1 to N in K/N, got '3/2'"},
      {"ablate --seeds 0" + out, "--seeds: expected a count N"},
      {"ablate --jobs 0" + out, "--jobs: must be a whole number from 1"},
      {"ablate --heads 4", "--out is required"},
      {"ablate --heads 3,5 --dk auto" + out, "none of the 2 points of the grid is valid"},
      {"ablate --steps 0" + out, "steps must be positive, got 0"},
      {"ablate --seed 3" + out, "--seed"},
      {"ablate --merge " + dir.string() + "/nothing" + out, "is not a headroom ablate directory"},
  };
  for (const Bad& bad : cases) {
    check_refused(bad.args, bad.says);
    CHECK_FALSE(fs::exists(dir));
    fs::remove_all(dir);
  }
}

TEST_CASE("headroom ablate: Ctrl-C stops every running run with a checkpoint and exits 130") {
  const TempDir tmp("ablate_sigint");
  const fs::path& dir = tmp.path();
  // Runs that would take hours; SIGINT once both have started (their metrics.csv is
  // written before the first step), as a terminal's Ctrl-C would send it.
  const std::string d = dir.string();
  const std::string script = fmt::format(
      "{} ablate --task copy --vocab 8 --seq-len 6 --d-model 16 --layers 1 --steps 10000000 --schedule constant "
      "--eval-every 1000000 --save-every 0 --heads 1,2 --seeds 1 --jobs 2 --out {} & pid=$!; n=0; "
      "while [ ! -f {}/runs/h1-dk16-s0/metrics.csv ] || [ ! -f {}/runs/h2-dk8-s0/metrics.csv ]; do "
      "sleep 0.1; n=$((n+1)); [ $n -gt 600 ] && break; done; sleep 0.5; kill -INT $pid; wait $pid",
      HEADROOM_BIN, d, d, d);
  const CliResult r = run_program("sh -c", "'" + script + "'");
  INFO(r.output);
  CHECK(r.status == 130);
  CHECK(r.output.find("interrupted: 2 runs stopped with a checkpoint, 0 finished") != std::string::npos);
  for (const char* id : {"h1-dk16-s0", "h2-dk8-s0"}) {
    CAPTURE(id);
    CHECK_FALSE(fs::exists(dir / "runs" / id / "result.json"));
    bool checkpoint = false;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir / "runs" / id / "checkpoints", ec)) {
      checkpoint = checkpoint || fs::exists(e.path() / "train_state.safetensors");
    }
    CHECK(checkpoint);
  }
}

// Runs start longest first (ablate/run.cpp, start_longest_first): more matrix-product
// FLOPs first, and at equal FLOPs more heads first; sweep.json and results.csv keep
// the grid's order.
TEST_CASE("headroom ablate starts the longest runs first, and keeps the grid's order in its files") {
  const TempDir tmp("ablate_order");
  const fs::path dir = tmp.path() / "sweep";
  // --dk auto: the same FLOPs for 1 and 4 heads; d_k 8 against 2: more FLOPs.
  const CliResult r = run_headroom("ablate --task copy --vocab 8 --seq-len 6 --d-model 16 --layers 1 --steps 2 "
                                   "--warmup 1 --eval-every 2 --heads 1,4 --dk auto --seeds 1 --jobs 1 --out " +
                                   dir.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  const std::size_t h4 = r.output.find("[1/2] h4-dk4-s0:"), h1 = r.output.find("[2/2] h1-dk16-s0:");
  CHECK(h4 != std::string::npos);
  CHECK(h1 != std::string::npos);
  const nlohmann::json sweep = nlohmann::json::parse(read_file(dir / "sweep.json"));
  CHECK(sweep["runs"][0]["id"] == "h1-dk16-s0");
  CHECK(read_file(dir / "results.csv").find("h1-dk16-s0") < read_file(dir / "results.csv").find("h4-dk4-s0"));

  const CliResult dk = run_headroom("ablate --task copy --vocab 8 --seq-len 6 --d-model 16 --layers 1 --steps 2 "
                                    "--warmup 1 --eval-every 2 --heads 2 --dk 2,8 --seeds 1 --jobs 1 --out " +
                                    (tmp.path() / "dk").string());
  INFO(dk.output);
  REQUIRE(dk.status == 0);
  CHECK(dk.output.find("[1/2] h2-dk8-s0:") != std::string::npos);
  CHECK(dk.output.find("[2/2] h2-dk2-s0:") != std::string::npos);
}

// ---- convergence and early stopping (issue 45) ---------------------------------------

namespace {

// A sweep directory of hand-written results: points p0 and p1, 2 seeds each. Each
// run's result.json says `convergence[i]` and `stop_reason[i]`; an empty word leaves
// both out, as a result.json written before them.
struct ConvergenceSweep {
  hr::SweepPlan plan;

  ConvergenceSweep(const fs::path& dir, const std::vector<std::string>& convergence,
                   const std::vector<std::string>& stop_reason) {
    hr::TrainConfig c = tiny_base();
    auto data = hr::make_dataset(c);
    c = hr::finalize(c, *data);
    plan.columns = {"n_heads", "d_k", "n_kv_heads"};
    plan.plot_axes = {"n_heads"};
    plan.seeds = {0, 1};
    for (std::size_t i = 0; i < 4; ++i) {
      plan.runs.push_back({.id = fmt::format("p{}-s{}", i / 2, i % 2), .point = fmt::format("p{}", i / 2),
                           .seed = i % 2, .values = {2, 8, 2}, .config = c});
    }
    for (std::size_t i = 0; i < plan.runs.size(); ++i) {
      const fs::path run = dir / "runs" / plan.runs[i].id;
      fs::create_directories(run);
      nlohmann::json j{{"id", plan.runs[i].id},      {"seed", i % 2},         {"steps", 20 + i},
                       {"parameters", 1000},         {"final_train_loss", 0.5}, {"final_val_loss", 0.4},
                       {"final_val_accuracy", 0.5},  {"best_val_accuracy", 0.5}, {"best_step", 20},
                       {"skipped_steps", 0},         {"wall_s", 1.0},         {"tokens_per_s", 100.0}};
      if (!convergence[i].empty()) {
        j["convergence"] = convergence[i];
        j["stop_reason"] = stop_reason[i];
        j["fall_per_validation"] = convergence[i] == "unknown" ? nlohmann::json(nullptr) : nlohmann::json(0.125);
      }
      std::ofstream(run / "result.json") << j.dump(2) << "\n";
      std::ofstream(run / "metrics.csv") << "step,train_loss,val_loss,val_accuracy,lr,grad_norm,tokens_per_s\n"
                                         << "20,0.5,0.4,0.5,0.001,1.0,100.0\n";
    }
  }
};

std::size_t column_of(const std::string& header, const std::string& name) {
  const std::vector<std::string> cells = fields(header);
  return static_cast<std::size_t>(std::find(cells.begin(), cells.end(), name) - cells.begin());
}

}  // namespace

TEST_CASE("ablate reports convergence: results.csv's columns, a mark on still-falling points and the line under the table") {
  const TempDir tmp("ablate_convergence");
  const ConvergenceSweep sweep(tmp.path(), {"falling", "converged", "converged", ""}, {"steps", "patience", "steps", ""});
  const std::string summary = hr::write_reports(sweep.plan, tmp.path(), 0.99);
  INFO(summary);

  const std::vector<hr::RunResult> results = hr::collect_results(sweep.plan, tmp.path(), 0.99);
  REQUIRE(results.size() == 4);
  CHECK(results[0].convergence == hr::ConvergenceStatus::falling);
  CHECK(results[0].fall_per_eval == 0.125);
  CHECK(results[1].stop_reason == "patience");
  // A result.json from before: unknown, nothing else changes.
  CHECK(results[3].convergence == hr::ConvergenceStatus::unknown);
  CHECK(std::isnan(results[3].fall_per_eval));
  CHECK(results[3].stop_reason.empty());
  CHECK(results[3].final_val_loss == 0.4);

  const std::vector<std::string> csv = lines_of(read_file(tmp / "results.csv"));
  REQUIRE(csv.size() == 5);
  const std::size_t at = column_of(csv[0], "convergence");
  CHECK(column_of(csv[0], "final_step") + 2 == at);
  CHECK(column_of(csv[0], "stop_reason") + 1 == at);
  CHECK(column_of(csv[0], "fall_per_validation") == at + 1);
  CHECK(column_of(csv[0], "wall_s") == at + 2);  // the timing columns stay last
  const std::vector<std::vector<std::string>> want = {{"20", "steps", "falling", "0.125"},
                                                      {"21", "patience", "converged", "0.125"},
                                                      {"22", "steps", "converged", "0.125"},
                                                      {"23", "", "", ""}};
  for (std::size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i);
    const std::vector<std::string> row = fields(csv[i + 1]);
    CHECK(std::vector<std::string>(row.begin() + static_cast<std::ptrdiff_t>(at) - 2,
                                   row.begin() + static_cast<std::ptrdiff_t>(at) + 2) == want[i]);
  }

  const std::vector<hr::PointSummary> points = hr::summarize(sweep.plan, results);
  REQUIRE(points.size() == 2);
  CHECK(points[0].still_falling);  // one seed of two is enough
  CHECK_FALSE(points[1].still_falling);
  // The mark on p0's row only, and the line right under the table.
  const std::vector<std::string> lines = lines_of(summary);
  std::size_t last_row = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("| p", 0) == 0) last_row = i;
  }
  REQUIRE(last_row + 2 < lines.size());
  CHECK(summary.find("| p0 † ") != std::string::npos);
  CHECK(summary.find("| p1 † ") == std::string::npos);
  CHECK(summary.find("| p1 ") != std::string::npos);
  CHECK(lines[last_row + 1].empty());
  CHECK(lines[last_row + 2].rfind("† Still improving: ", 0) == 0);
  CHECK(lines[last_row + 2].find("Comparisons with marked points measure the training budget, not the architecture") !=
        std::string::npos);
  const std::string html = read_file(tmp / "report.html");
  CHECK(html.find("<td>p0 †</td>") != std::string::npos);
  CHECK(html.find("† Still improving: ") != std::string::npos);
}

TEST_CASE("ablate reports convergence: no mark and no line when no point was still falling, and a bad word is refused") {
  const TempDir tmp("ablate_converged");
  {
    const ConvergenceSweep sweep(tmp.path(), {"converged", "unknown", "", "converged"}, {"steps", "steps", "", "patience"});
    const std::string summary = hr::write_reports(sweep.plan, tmp.path(), 0.99);
    CHECK(summary.find("†") == std::string::npos);
    CHECK(summary.find("Still improving") == std::string::npos);
    CHECK(read_file(tmp / "report.html").find("Still improving") == std::string::npos);
  }
  const ConvergenceSweep bad(tmp.path(), {"converged", "flat", "", ""}, {"steps", "steps", "", ""});
  CHECK_THROWS_WITH_AS(hr::collect_results(bad.plan, tmp.path(), 0.99),
                       doctest::Contains("p0-s1/result.json: convergence must be unknown, falling or converged; got 'flat'"),
                       std::invalid_argument);
}

TEST_CASE("headroom ablate --patience: runs end out of patience as finished runs, recorded, and a rerun skips them") {
  const TempDir tmp("ablate_patience");
  const fs::path& dir = tmp.path();
  const std::string sweep = "ablate --task copy --vocab 8 --seq-len 6 --d-model 16 --layers 1 --steps 600 --warmup 5 "
                            "--eval-every 10 --save-every 50 --heads 2 --dk auto --seeds 2 --jobs 2 --patience 2 "
                            "--min-delta 0.05 --out " + dir.string();
  const CliResult r = run_headroom(sweep);
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find(", out of patience") != std::string::npos);
  CHECK(r.output.find("patience 2 (min_delta 0.05)") != std::string::npos);  // the summary's settings line
  for (const char* id : {"h2-dk8-s0", "h2-dk8-s1"}) {
    CAPTURE(id);
    const fs::path run = dir / "runs" / id;
    const nlohmann::json config = nlohmann::json::parse(read_file(run / "config.json"));
    CHECK(config["train"]["patience"] == 2);
    CHECK(config["train"]["min_delta"] == 0.05);
    const nlohmann::json result = nlohmann::json::parse(read_file(run / "result.json"));
    CHECK(result["stop_reason"] == "patience");
    CHECK(result["steps"].get<std::size_t>() < 600);
    CHECK((result["convergence"] == "falling" || result["convergence"] == "converged"));
    CHECK(fs::exists(run / "model.safetensors"));
  }
  const std::string before = read_file(dir / "results.csv");
  const std::vector<std::string> csv = lines_of(before);
  REQUIRE(csv.size() == 3);
  CHECK(fields(csv[1])[column_of(csv[0], "stop_reason")] == "patience");

  SUBCASE("running it again skips them") {
    const CliResult again = run_headroom(sweep);
    INFO(again.output);
    CHECK(again.status == 0);
    CHECK(again.output.find("2 finished before (skipped), 0 to run") != std::string::npos);
  }
  SUBCASE("one killed before its result.json starts over (a resume would be refused) and ends the same") {
    const fs::path run = dir / "runs" / "h2-dk8-s1";
    fs::remove(run / "result.json");
    std::ofstream(run / hr::kLockFile) << "1 on elsewhere";
    const CliResult again = run_headroom(sweep);
    INFO(again.output);
    CHECK(again.status == 0);
    CHECK(again.output.find("1 to run (0 resumed from checkpoints)") != std::string::npos);
    CHECK(again.output.find("] h2-dk8-s1: val loss") != std::string::npos);
    std::ofstream(dir / "old.csv") << before;
    CHECK(results_without_timing(dir / "results.csv") == results_without_timing(dir / "old.csv"));
  }
}
