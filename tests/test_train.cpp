// `headroom train` and the trainer behind it: a tiny model learns `copy`, the files
// it writes, determinism, --config with flags overriding it, and one-line errors.
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "nn/checkpoint.hpp"
#include "nn/config_fields.hpp"
#include "train/config_fields.hpp"
#include "train/optim_setup.hpp"
#include "train/resume.hpp"
#include "train/step.hpp"
#include "train/trainer.hpp"
#include "cli_runner.hpp"
#include "support.hpp"

namespace hr = headroom;
namespace fs = std::filesystem;

namespace {

// A model small enough to train in a second or two.
hr::TrainConfig tiny_copy() {
  hr::TrainConfig c;
  c.model.d_model = 32;
  c.model.n_heads = 2;
  c.model.n_layers = 2;
  c.data = {.task = "copy", .text = "", .seq_len = 8, .vocab = 8};
  c.optim.steps = 300;
  c.optim.batch = 32;
  c.optim.warmup = 20;
  c.optim.eval_every = 50;
  c.optim.eval_batches = 4;
  return c;
}

}  // namespace

TEST_CASE("training smoke: a tiny model learns copy to 99% validation accuracy") {
  const hr::TrainConfig raw = tiny_copy();
  auto data = hr::make_dataset(raw);
  const hr::TrainConfig config = hr::finalize(raw, *data);
  std::size_t reports = 0, evaluations = 0;
  const hr::TrainSummary s = hr::train(config, *data, "", [&](const hr::Progress& p) {
    ++reports;
    evaluations += p.evaluated ? 1 : 0;
  });
  CHECK(reports == 300);
  CHECK(evaluations == 6);
  INFO("val accuracy " << s.final_val.accuracy << ", loss " << s.final_val.loss);
  CHECK(s.final_val.accuracy >= 0.99);
  CHECK(s.final_val.loss < 0.1);
  CHECK(s.final_val.counted == 4u * 32 * 4);  // 4 batches of 32 rows, 4 answer tokens each
}

TEST_CASE("the same seed gives a bit-identical loss curve, and another seed does not") {
  hr::TrainConfig c = tiny_copy();
  c.optim.steps = 40;
  c.optim.eval_every = 10;
  auto data = hr::make_dataset(c);
  c = hr::finalize(c, *data);
  auto curve = [&](std::uint64_t seed) {
    hr::TrainConfig run = c;
    run.optim.seed = seed;
    std::vector<double> losses;
    hr::train(run, *data, "", [&](const hr::Progress& p) {
      losses.push_back(p.train_loss);
      if (p.evaluated) losses.push_back(p.val.loss);
    });
    return losses;
  };
  const auto a = curve(3), b = curve(3), other = curve(4);
  CHECK(a == b);
  CHECK(a != other);
}

TEST_CASE("train_step sets the learning rate it is given and keeps the optimizer's own without one") {
  hr::TrainConfig c = tiny_copy();
  auto data = hr::make_dataset(c);
  c = hr::finalize(c, *data);
  hr::Rng rng(1);
  hr::TransformerLM<float> model(c.model, rng);
  const auto optimizer = hr::make_optimizer(c.optim, model.named_parameters());
  const hr::Batch batch = data->sample(4, hr::Split::train, rng);
  const hr::StepResult r = hr::train_step(model, *optimizer, batch, {.lr = 0.0123});
  CHECK(r.updated);
  CHECK(optimizer->lr() == 0.0123);
  hr::train_step(model, *optimizer, batch, {});
  CHECK(optimizer->lr() == 0.0123);
}

// The loop is train_step at the schedule's rate of each step, on the training stream
// of the seed, from weights of the init stream: replayed by hand, every step's loss
// comes out the same, bit for bit. A schedule that never reaches the optimizer, or a
// seed that does not reach the weights or the batches, breaks it.
TEST_CASE("the trainer's steps are train_step at the schedule's rates, from the seed's streams") {
  // With dropout, step k's masks come from dropout_step_seed(seed, k) and nothing else.
  for (const double dropout : {0.0, 0.2}) {
    CAPTURE(dropout);
    hr::TrainConfig c = tiny_copy();
    c.model.dropout = dropout;
    c.optim.steps = 24;
    c.optim.warmup = 8;
    c.optim.eval_every = 1;  // so that each report's train_loss is its own step's
    c.optim.eval_batches = 1;
    c.optim.seed = 5;
    auto data = hr::make_dataset(c);
    c = hr::finalize(c, *data);
    std::vector<double> losses, rates;
    hr::train(c, *data, "", [&](const hr::Progress& p) {
      losses.push_back(p.train_loss);
      rates.push_back(p.lr);
    });
    REQUIRE(losses.size() == c.optim.steps);

    hr::Rng init(hr::stream_seed(c.optim.seed, hr::kInitStream));
    hr::Rng batches(hr::stream_seed(c.optim.seed, hr::kTrainStream));
    hr::TransformerLM<float> model(c.model, init);
    const auto optimizer = hr::make_optimizer(c.optim, model.named_parameters());
    const hr::LrSchedule schedule = hr::make_schedule(c.optim);
    for (std::size_t step = 1; step <= c.optim.steps; ++step) {
      const hr::Batch batch = data->sample(c.optim.batch, hr::Split::train, batches);
      const hr::StepResult r =
          hr::train_step(model, *optimizer, batch,
                         {.lr = schedule.lr_at(step),
                          .clip = c.optim.clip,
                          .dropout_seed = hr::dropout_step_seed(c.optim.seed, step)});
      CAPTURE(step);
      CHECK(rates[step - 1] == schedule.lr_at(step));
      CHECK(losses[step - 1] == r.loss);
    }
    // The warm-up and the decay make the rates differ, so a constant rate could not pass.
    CHECK(rates.front() < rates[7]);
    CHECK(rates.back() < rates[7]);
  }
}

TEST_CASE("a good step ends a run of bad steps, and the bad ones are counted and add no loss") {
  hr::LoopState s;
  CHECK(hr::record_step(s, false, NAN) == 1);
  CHECK(hr::record_step(s, false, INFINITY) == 2);
  CHECK(hr::record_step(s, true, 0.5) == 0);  // the run of bad steps is over
  CHECK(s.consecutive_bad == 0);
  CHECK(hr::record_step(s, false, NAN) == 1);  // a new run starts from one
  CHECK(hr::record_step(s, true, 0.25) == 0);
  CHECK(s.skipped_steps == 3);
  CHECK(s.steps_since == 2);
  CHECK(s.loss_since == 0.75);
}

TEST_CASE("headroom train writes config.json and metrics.csv and ends with a summary") {
  const TempDir tmp("train_files");
  const fs::path& dir = tmp.path();
  const CliResult r = run_headroom("train --task copy --vocab 8 --seq-len 8 --d-model 32 --heads 2 --steps 60 "
                                   "--eval-every 20 --warmup 5 --out " + dir.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("example: copy:") != std::string::npos);
  CHECK(r.output.find("step     20/60") != std::string::npos);  // plain lines when not a terminal
  CHECK(r.output.find("final: train loss") != std::string::npos);

  const std::string config = read_file(dir / "config.json");
  for (const char* key : {"\"d_model\": 32", "\"n_heads\": 2", "\"d_k\": 16", "\"vocab\": 8", "\"max_len\": 8",
                          "\"task\": \"copy\"", "\"steps\": 60", "\"schedule\": \"cosine\"", "\"tie_embeddings\""}) {
    CHECK_MESSAGE(config.find(key) != std::string::npos, "config.json lacks " << key);
  }
  const std::string metrics = read_file(dir / "metrics.csv");
  std::istringstream lines(metrics);
  std::string line;
  std::vector<std::string> rows;
  while (std::getline(lines, line)) rows.push_back(line);
  REQUIRE(rows.size() == 4);  // header + steps 20, 40, 60
  CHECK(rows[0] ==
        "step,train_loss,val_loss,val_accuracy,val_excess_loss,icl_score,lr,grad_norm,tokens_per_s,train_bpc,val_bpc");
  CHECK(rows[3].rfind("60,", 0) == 0);
}

TEST_CASE("--beta1 and --beta2 reach Adam: recorded in config.json, read back, and a different curve") {
  const TempDir tmp("train_betas");
  const std::string tiny = " -q --task copy --d-model 8 --heads 1 --layers 1 --steps 6 --batch 4 --seq-len 6 "
                           "--eval-every 3 --eval-batches 1 ";
  const auto run = [&](const std::string& name, const std::string& flags) {
    const CliResult r = run_headroom("train" + tiny + flags + " --out " + (tmp.path() / name).string());
    INFO(r.output);
    REQUIRE(r.status == 0);
    return nlohmann::json::parse(read_file(tmp.path() / name / "config.json"));
  };
  const nlohmann::json defaults = run("default", "");
  CHECK(defaults["train"]["beta1"] == 0.9);
  CHECK(defaults["train"]["beta2"] == 0.999);
  const nlohmann::json set = run("set", "--beta1 0.8 --beta2 0.99");
  CHECK(set["train"]["beta1"] == 0.8);
  CHECK(set["train"]["beta2"] == 0.99);
  const auto curve = [&](const std::string& name) { return metrics_without_timing(tmp.path() / name / "metrics.csv"); };
  CHECK(curve("set") != curve("default"));
  // The same betas through the file give the same run, bit for bit.
  run("again", "--config " + (tmp.path() / "set" / "config.json").string());
  CHECK(curve("again") == curve("set"));
}

TEST_CASE("--dropout reaches the model: recorded in config.json and the checkpoint, read back, and a different curve") {
  const TempDir tmp("train_dropout");
  const std::string tiny = " -q --task copy --d-model 8 --heads 1 --layers 1 --steps 6 --batch 4 --seq-len 6 "
                           "--eval-every 3 --eval-batches 1 ";
  const auto run = [&](const std::string& name, const std::string& flags) {
    const CliResult r = run_headroom("train" + tiny + flags + " --out " + (tmp.path() / name).string());
    INFO(r.output);
    REQUIRE(r.status == 0);
    return nlohmann::json::parse(read_file(tmp.path() / name / "config.json"));
  };
  const auto curve = [&](const std::string& name) { return metrics_without_timing(tmp.path() / name / "metrics.csv"); };
  CHECK(run("default", "")["model"]["dropout"] == 0.0);
  CHECK(run("set", "--dropout 0.1")["model"]["dropout"] == 0.1);
  CHECK(hr::load_model<float>(tmp.path() / "set" / "model.safetensors").config.dropout == 0.1);
  CHECK(curve("set") != curve("default"));
  // The validations are dropout-free: the final model's val loss, evaluated alone in
  // eval mode, is the last row's.
  const std::vector<std::string> rows = lines_of(read_file(tmp.path() / "set" / "metrics.csv"));
  const CliResult evaluated = run_headroom("eval --model " + (tmp.path() / "set").string() + " --json");
  INFO(evaluated.output);
  REQUIRE(evaluated.status == 0);
  CHECK(fmt::format("{:.6f}", nlohmann::json::parse(evaluated.output)["loss"].get<double>()) ==
        fields(rows.back())[2]);
  // The same dropout through the file gives the same run, bit for bit.
  run("again", "--config " + (tmp.path() / "set" / "config.json").string());
  CHECK(curve("again") == curve("set"));
  // Dropout holds no weights, so a run may start from a model trained with another.
  CHECK(run("up", "--dropout 0.3 --init-from " + (tmp.path() / "default").string())["model"]["dropout"] == 0.3);

  // Outside [0, 1): one line naming the flag and the value, exit status 2, nothing written.
  check_refused("train" + tiny + "--dropout 1 --out " + (tmp.path() / "bad").string(),
                "--dropout: must be a number in [0, 1), got 1");
  check_refused("train" + tiny + "--dropout -0.5 --out " + (tmp.path() / "bad").string(),
                "--dropout: must be a number in [0, 1), got -0.5");
  {
    std::ofstream(tmp.path() / "bad.json") << R"({"model": {"dropout": 1.5}})";
  }
  check_refused("train" + tiny + "--config " + (tmp.path() / "bad.json").string() + " --out " +
                    (tmp.path() / "bad").string(),
                "dropout must be in [0, 1), got 1.5");
  CHECK_FALSE(fs::exists(tmp.path() / "bad"));
}

TEST_CASE("--decay-embeddings reaches AdamW: recorded in config.json, read back, and a different curve") {
  const TempDir tmp("train_decay_embeddings");
  const std::string tiny = " -q --task copy --d-model 8 --heads 1 --layers 1 --steps 6 --batch 4 --seq-len 6 "
                           "--eval-every 3 --eval-batches 1 --weight-decay 0.5 --tie-embeddings ";
  const auto run = [&](const std::string& name, const std::string& flags) {
    const CliResult r = run_headroom("train" + tiny + flags + " --out " + (tmp.path() / name).string());
    INFO(r.output);
    REQUIRE(r.status == 0);
    return nlohmann::json::parse(read_file(tmp.path() / name / "config.json"));
  };
  CHECK(run("default", "")["train"]["decay_embeddings"] == false);
  CHECK(run("set", "--decay-embeddings")["train"]["decay_embeddings"] == true);
  const auto curve = [&](const std::string& name) { return metrics_without_timing(tmp.path() / name / "metrics.csv"); };
  // The token embedding is also the head here, so decaying it changes the curve.
  CHECK(curve("set") != curve("default"));
  run("again", "--config " + (tmp.path() / "set" / "config.json").string());
  CHECK(curve("again") == curve("set"));
}

TEST_CASE("--config reads a written config.json and flags override it") {
  const TempDir tmp("train_config");
  const fs::path& dir = tmp.path();
  {
    std::ofstream f(dir / "in.json");
    f << R"({"model": {"d_model": 16, "n_heads": 4}, "data": {"task": "reverse", "vocab": 8, "seq_len": 6},
             "train": {"steps": 7, "eval_every": 7, "warmup": 2}})";
  }
  const CliResult r = run_headroom("train --config " + (dir / "in.json").string() + " --heads 2 --out " +
                                   (dir / "out").string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("reverse (vocab 8, seq_len 6), d_model 16, 2 layers, 2 heads") != std::string::npos);
  const std::string written = read_file(dir / "out" / "config.json");
  CHECK(written.find("\"n_heads\": 2") != std::string::npos);
  CHECK(written.find("\"steps\": 7") != std::string::npos);

  // The written config.json is itself a valid --config.
  const CliResult again = run_headroom("train -q --no-save --config " + (dir / "out" / "config.json").string());
  INFO(again.output);
  CHECK(again.status == 0);
}

TEST_CASE("lags: config.json records the list, --config reads it, and --task over the file drops it") {
  const TempDir tmp("train_lags");
  const fs::path& dir = tmp.path();
  const CliResult r = run_headroom("train -q --task lags --lags 3,1 --context 4 --lag-beta 0.5 --task-seed 9 "
                                   "--seq-len 11 --steps 2 --warmup 0 --eval-every 2 --d-model 16 --out " +
                                   (dir / "out").string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  const nlohmann::json written = nlohmann::json::parse(read_file(dir / "out" / "config.json"));
  CHECK(written["data"]["lags"] == nlohmann::json::array({3, 1}));
  CHECK(written["data"]["context"] == 4);
  CHECK(written["data"]["lag_beta"] == 0.5);
  CHECK(written["data"]["task_seed"] == 9);
  hr::TrainConfig back;
  hr::update_from_json(back, written, "config.json");
  CHECK(back.data.lags == std::vector<std::size_t>{3, 1});
  const CliResult again = run_headroom("train -q --no-save --config " + (dir / "out" / "config.json").string());
  INFO(again.output);
  CHECK(again.status == 0);
  // --task copy replaces the file's task and the keys only it reads.
  const CliResult copy =
      run_headroom("train -q --no-save --task copy --seq-len 8 --config " + (dir / "out" / "config.json").string());
  INFO(copy.output);
  CHECK(copy.status == 0);
}

// ---- the config's field tables, enums and flags ---------------------------------

TEST_CASE("train config field tables: every data and train field round-trips through config.json") {
  hr::TrainConfig set;  // every data and train field away from its default
  set.data = {.task = "sort", .text = "corpus.txt", .val_text = "held-out.txt", .corpus = "kjv",
              .labelled = "reviews.tsv", .seq_len = 12, .vocab = 20, .lags = {3, 1}, .context = 5, .lag_beta = 0.5,
              .task_seed = 7};
  set.optim = {.optimizer = hr::OptimizerKind::sgd, .steps = 7, .batch = 3, .lr = 0.25,
               .schedule = hr::LrScheduleKind::inverse_sqrt, .warmup = 2, .min_lr = 1e-4, .clip = 0.5,
               .weight_decay = 0.2, .decay_embeddings = true, .momentum = 0.5, .beta1 = 0.8, .beta2 = 0.99, .seed = 9, .threads = 2, .eval_every = 4, .eval_batches = 5,
               .patience = 3, .min_delta = 0.05, .save_every = 6, .keep_checkpoints = 3, .max_bad_steps = 4, .detect_anomaly = true, .track_heads = true,
               .init_from = "runs/mha", .init_from_hash = "fnv1a64:0123456789abcdef"};
  set.model.vocab = 20;
  set.model.max_len = 12;
  const hr::TrainConfig defaults;
  const nlohmann::json json = hr::to_json(set);
  hr::TrainConfig back;
  hr::update_from_json(back, json, "config.json");
  std::size_t data_fields = 0, optim_fields = 0;
  hr::for_each_data_field([&](const auto& f) {
    CAPTURE(std::string(f.key));
    ++data_fields;
    CHECK(json["data"].contains(f.key));
    CHECK(set.data.*f.member != defaults.data.*f.member);
    CHECK(back.data.*f.member == set.data.*f.member);
  });
  hr::for_each_optim_field([&](const auto& f) {
    CAPTURE(std::string(f.key));
    ++optim_fields;
    CHECK(json["train"].contains(f.key));
    CHECK(set.optim.*f.member != defaults.optim.*f.member);
    CHECK(back.optim.*f.member == set.optim.*f.member);
  });
  CHECK(json["data"].size() == data_fields);
  CHECK(json["train"].size() == optim_fields);
  CHECK(optim_fields == 26);
  CHECK(json["train"]["optimizer"] == "sgd");
  CHECK(json["train"]["schedule"] == "inverse_sqrt");
  CHECK(back.data == set.data);
  CHECK(back.optim == set.optim);
  // The model went through the resolver on the way out, so it compares resolved.
  CHECK(back.model == hr::ModelConfig(set.model.resolved()));
}

TEST_CASE("train config field tables: the unknown-key messages list every key of the section") {
  std::string data_keys, train_keys;
  hr::for_each_data_field([&](const auto& f) { data_keys += (data_keys.empty() ? "" : ", ") + std::string(f.key); });
  hr::for_each_optim_field([&](const auto& f) { train_keys += (train_keys.empty() ? "" : ", ") + std::string(f.key); });
  CHECK(data_keys == "task, text, val_text, corpus, labelled, seq_len, vocab, lags, context, lag_beta, task_seed");
  CHECK(train_keys ==
        "optimizer, steps, batch, lr, schedule, warmup, min_lr, clip, weight_decay, decay_embeddings, momentum, beta1, beta2, "
        "seed, threads, "
        "eval_every, eval_batches, patience, min_delta, save_every, keep_checkpoints, max_bad_steps, detect_anomaly, track_heads, init_from, "
        "init_from_hash");
  hr::TrainConfig c;
  CHECK_THROWS_WITH_AS(hr::update_from_json(c, nlohmann::json{{"data", {{"tsk", 1}}}}, "f.json"),
                       ("f.json: unknown key 'data.tsk' (keys: " + data_keys + ")").c_str(), std::invalid_argument);
  CHECK_THROWS_WITH_AS(hr::update_from_json(c, nlohmann::json{{"train", {{"stepz", 1}}}}, "f.json"),
                       ("f.json: unknown key 'train.stepz' (keys: " + train_keys + ")").c_str(), std::invalid_argument);
  CHECK_THROWS_WITH_AS(hr::update_from_json(c, nlohmann::json{{"train", {{"optimizer", "lion"}}}}, "f.json"),
                       "f.json: 'train.optimizer': optimizer must be adamw, adam or sgd; got 'lion'",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(hr::update_from_json(c, nlohmann::json{{"train", {{"schedule", "linear"}}}}, "f.json"),
                       "f.json: 'train.schedule': unknown lr schedule 'linear'; valid names are constant, cosine, "
                       "inverse_sqrt",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(hr::update_from_json(c, nlohmann::json{{"train", {{"optimizer", 3}}}}, "f.json"),
                       "f.json: 'train.optimizer' must be a string, got 3", std::invalid_argument);
}

TEST_CASE("optimizer kinds: names round-trip, a bad name is an error, and each makes its optimizer") {
  for (const auto kind : {hr::OptimizerKind::adamw, hr::OptimizerKind::adam, hr::OptimizerKind::sgd}) {
    CHECK(hr::parse_optimizer(hr::to_string(kind)) == kind);
  }
  CHECK(hr::to_string(hr::OptimizerKind::adamw) == "adamw");
  CHECK_THROWS_WITH_AS(hr::parse_optimizer("lion"), "optimizer must be adamw, adam or sgd; got 'lion'",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(hr::parse_optimizer("SGD"), "optimizer must be adamw, adam or sgd; got 'SGD'",
                       std::invalid_argument);
  const hr::NamedParameters<float> params = {{"w", hr::Tensor<float>(xt::xarray<float>{1.0f, 2.0f}, true)}};
  const std::pair<hr::OptimizerKind, const char*> made[] = {
      {hr::OptimizerKind::adamw, "AdamW"}, {hr::OptimizerKind::adam, "Adam"}, {hr::OptimizerKind::sgd, "SGD"}};
  for (const auto& m : made) {
    CAPTURE(m.second);
    CHECK(hr::make_optimizer({.optimizer = m.first}, params)->name() == m.second);
  }
  // --lr is the schedule's peak whatever the model's width.
  const hr::LrSchedule s =
      hr::make_schedule({.lr = 2e-3, .schedule = hr::LrScheduleKind::inverse_sqrt, .warmup = 10});
  CHECK(s.lr_at(10) == doctest::Approx(2e-3).epsilon(1e-15));
  CHECK(s.lr_at(40) == doctest::Approx(1e-3).epsilon(1e-15));
}

TEST_CASE("train config: operator== sees every section") {
  const hr::TrainConfig a;
  hr::TrainConfig b = a;
  CHECK(a == b);
  b.optim.schedule = hr::LrScheduleKind::constant;
  CHECK(a != b);
  b = a;
  b.data.seq_len = 17;
  CHECK(a != b);
  b = a;
  b.model.d_v = 3;
  CHECK(a != b);
}

TEST_CASE("every table field has its flag in train --help, except the keys set only by config.json") {
  const std::string help = run_headroom("train --help").output;
  std::vector<std::string> flagless;
  auto check = [&](const char* section, const auto& f) {
    if (!f.flag) {
      flagless.push_back(fmt::format("{}.{}", section, f.key));
      return;
    }
    const std::string name = hr::flag_name(f.key, *f.flag);
    CHECK_MESSAGE(help.find("\n  " + name + " ") != std::string::npos, "train --help lacks " << name);
  };
  hr::for_each_model_field([&](const auto& f) { check("model", f); });
  hr::for_each_data_field([&](const auto& f) { check("data", f); });
  hr::for_each_optim_field([&](const auto& f) { check("train", f); });
  // vocab comes from the data; head_combine and ln_eps are experiments' keys;
  // init_from_hash is recorded by train from the --init-from file.
  CHECK(flagless ==
        std::vector<std::string>{"model.vocab", "model.head_combine", "model.ln_eps", "train.init_from_hash"});
  for (const char* flag : {"--d-model", "--heads", "--dk", "--dv", "--kv-heads", "--layers", "--d-ff", "--max-len",
                           "--norm", "--activation", "--pos", "--attn-scale", "--no-bias", "--tie-embeddings",
                           "--attn-only", "--non-causal", "--task", "--text", "--seq-len", "--vocab", "--steps", "--batch", "--lr",
                           "--optimizer", "--schedule", "--warmup", "--min-lr", "--clip", "--weight-decay",
                           "--momentum", "--seed", "--threads", "--eval-every", "--eval-batches", "--save-every",
                           "--keep-checkpoints", "--max-bad-steps", "--detect-anomaly"}) {
    CHECK_MESSAGE(help.find(std::string("\n  ") + flag + " ") != std::string::npos, "train --help lacks " << flag);
  }
  CHECK(help.find("Model width (default 64)") != std::string::npos);
  CHECK(help.find("Peak learning rate, reached after --warmup steps (default 0.003;") != std::string::npos);
  // ablate sweeps these with list flags of its own.
  const std::string ablate = run_headroom("ablate --help").output;
  CHECK(ablate.find("Query heads (default 4)") == std::string::npos);
  CHECK(ablate.find("\n  --seed ") == std::string::npos);
  CHECK(ablate.find("\n  --dv ") != std::string::npos);
}

TEST_CASE("flags override --config, which overrides the task's defaults, field by field") {
  const TempDir tmp("train_flag_precedence");
  const fs::path& dir = tmp.path();
  std::ofstream(dir / "c.json") << R"({"data": {"task": "recall"}, "train": {"optimizer": "adam", "steps": 5},
                                      "model": {"norm": "post"}})";
  const std::string run = dir.string() + "/run";
  const CliResult r = run_headroom("train --config " + (dir / "c.json").string() +
                                   " --steps 2 --eval-every 2 --d-model 16 --layers 1 --schedule inverse_sqrt --warmup 1"
                                   " --no-bias --non-causal --tie-embeddings -q --out " + run);
  REQUIRE_MESSAGE(r.status == 0, r.output);
  const nlohmann::json c = nlohmann::json::parse(read_file(fs::path(run) / "config.json"));
  CHECK(c["data"]["task"] == "recall");
  CHECK(c["data"]["seq_len"] == 6);  // recall's default
  CHECK(c["train"]["optimizer"] == "adam");  // the file
  CHECK(c["train"]["steps"] == 2);  // the flag over the file
  CHECK(c["train"]["schedule"] == "inverse_sqrt");
  CHECK(c["train"]["lr"] == 1e-3);  // recall's default
  CHECK(c["model"]["norm"] == "post");
  CHECK(c["model"]["d_model"] == 16);
  CHECK(c["model"]["bias"] == false);
  CHECK(c["model"]["causal"] == false);
  CHECK(c["model"]["tie_embeddings"] == true);
}

TEST_CASE("headroom train: bad input gets one line naming the problem and exit status 2") {
  const TempDir tmp("train_bad");
  const fs::path& dir = tmp.path();
  {
    std::ofstream(dir / "unknown.json") << R"({"train": {"stepz": 5}})";
    std::ofstream(dir / "wrongtype.json") << R"({"model": {"d_model": "big"}})";
    std::ofstream(dir / "broken.json") << R"({"model": )";
    std::ofstream(dir / "empty.txt");
    std::ofstream(dir / "lags_copy.json") << R"({"data": {"task": "copy", "lags": [3]}})";
    std::ofstream(dir / "lags_bad.json") << R"({"data": {"task": "lags", "lags": 3}})";
    std::ofstream(dir / "tiny.txt") << "abcabcabcabcabcabcabcabcabcabcabcabcabcabc\n";
  }
  struct Bad {
    std::string args;
    const char* says;
  };
  const std::string d = dir.string();
  const Bad cases[] = {
      {"train --heads 3", "d_model=64 is not a multiple of n_heads=3; give d_k explicitly"},
      {"train --heads 8 --kv-heads 3", "n_heads=8 is not a multiple of n_kv_heads=3"},
      {"train --d-model 0", "d_model must be positive, got 0"},
      {"train --steps 0", "steps must be positive, got 0"},
      {"train --batch 0", "batch must be positive, got 0"},
      {"train --lr -1", "--lr: must be a positive number, got -1"},
      {"train --steps -1", "--steps: must be a whole number from 0 to 10^19 - 1, got -1"},
      {"train --seed -4", "--seed: must be a whole number from 0 to 10^19 - 1, got -4"},
      {"train --batch abc", "--batch: must be a whole number from 0 to 10^19 - 1, got abc"},
      {"train --clip -0.5", "--clip: must be a number >= 0, got -0.5"},
      {"train --warmup 200 --steps 100", "warmup 200 is longer than steps 100"},
      {"train --seq-len 32 --max-len 16", "seq_len 32 is longer than the model's max_len 16"},
      {"train --task copyy", "copyy"},
      {"train --task recall --vocab 6 --seq-len 8", "recall: vocab 6 is too small"},
      {"train --norm middle", "norm must be 'pre', 'post' or 'none', got 'middle'"},
      {"train --activation swish", "activation must be one of gelu, gelu_tanh, relu; got 'swish'"},
      {"train --pos rotary", "pos must be 'learned', 'sinusoidal', 'rope' or 'none', got 'rotary'"},
      {"train --optimizer lion", "optimizer must be adamw, adam or sgd; got 'lion'"},
      {"train --schedule linear", "linear"},
      {"train --threads 0", "threads must be from 1 to 256, got 0"},
      {"train --stepz 5", "stepz"},
      {"train --text " + d + "/missing.txt", "missing.txt"},
      {"train --text " + d + "/empty.txt", "empty.txt"},
      {"train --config " + d + "/nope.json", "nope.json: no such file"},
      {"train --config " + d + "/unknown.json", "unknown key 'train.stepz'"},
      {"train --config " + d + "/wrongtype.json", "'d_model' must be a non-negative integer, got \"big\""},
      {"train --config " + d + "/broken.json", "not valid JSON"},
      {"train --eval-every 0", "eval_every must be positive, got 0"},
      {"train --keep-checkpoints 0", "keep_checkpoints must be positive, got 0"},
      {"train --max-bad-steps 0", "max_bad_steps must be positive, got 0"},
      {"train --save-every -1", "--save-every: must be a whole number from 0 to 10^19 - 1, got -1"},
      {"train --stop-after soon", "--stop-after: must be a whole number from 0 to 10^19 - 1, got soon"},
      {"train --dk 0", "--dk: must be a whole number >= 1 (leave the flag out for its default), got 0"},
      {"train --heads 4 --kv-heads 8", "n_kv_heads=8"},
      {"train --task copy --vocab 4", "copy: vocab 4 is too small"},
      // The task options are read by lags and lags_argmax only (docs/design.md #11).
      {"train --task copy --lags 1,2",
       "--lags 1,2: --task copy does not read it (only lags and lags_argmax do), so it would be ignored"},
      {"train --context 4", "--context 4: --task copy does not read it (only lags and lags_argmax do)"},
      {"train --text " + d + "/tiny.txt --task-seed 3", "--task-seed 3: a --text run does not read it"},
      {"train --task recall --lag-beta 2", "--lag-beta 2: --task recall does not read it"},
      {"train --config " + d + "/lags_copy.json",
       "data.lags [3]: task copy does not read it (only lags and lags_argmax do), so it would be ignored"},
      {"train --config " + d + "/lags_bad.json", "'data.lags' must be an array of whole numbers, got 3"},
      {"train --task lags --lags 1,x", "--lags: must be whole numbers separated by commas (1,2,3), got 1,x"},
      {"train --task lags --lags 1,,2", "--lags: must be whole numbers separated by commas (1,2,3), got 1,,2"},
      {"train --task lags --lags 0,1", "lags: offset 0 in lags [0, 1]: offsets are >= 1"},
      {"train --task lags --lags 2,2", "lags: offset 2 is listed twice in lags [2, 2]"},
      {"train --task lags --context 3 --lags 4", "lags: offset 4 in lags [4] is beyond the context 3"},
      {"train --resume " + d + "/run --lr 0.1", "excludes --resume"},
  };
  for (const Bad& bad : cases) {
    check_refused(bad.args + " --out " + d + "/run", bad.says);
    CHECK_FALSE(fs::exists(dir / "run"));  // nothing written for a run that never started
    fs::remove_all(dir / "run");
  }
}

// ---- checkpoints, resume, interrupts and bad steps ----------------------------

namespace {


hr::TrainConfig tiny_resumable() {
  hr::TrainConfig c = tiny_copy();
  c.optim.steps = 60;
  c.optim.warmup = 10;
  c.optim.eval_every = 10;
  c.optim.save_every = 20;
  return c;
}

}  // namespace

TEST_CASE("a run stopped at step k and resumed is bit-identical to the uninterrupted run") {
  const TempDir whole_tmp("train_resume_whole");
  const TempDir parts_tmp("train_resume_parts");
  const fs::path& whole = whole_tmp.path();
  const fs::path& parts = parts_tmp.path();
  hr::TrainConfig c = tiny_resumable();
  auto data = hr::make_dataset(c);
  c = hr::finalize(c, *data);
  // With dropout, the masks of the steps after a resume are those the uninterrupted
  // run drew: each step's come from its own seed, not from a generator's state.
  const std::pair<const char*, double> runs[] = {{"adamw", 0.0}, {"sgd", 0.0}, {"adamw", 0.1}};
  for (const auto& run : runs) {
    const char* optimizer = run.first;
    const double dropout = run.second;
    CAPTURE(optimizer);
    CAPTURE(dropout);
    c.optim.optimizer = hr::parse_optimizer(optimizer);
    c.model.dropout = dropout;
    fs::remove_all(whole);
    fs::remove_all(parts);
    hr::TrainOptions once;
    once.out_dir = whole.string();
    const hr::TrainSummary a = hr::train(c, *data, once);
    CHECK(a.steps == 60);
    CHECK_FALSE(a.stopped_early);

    // Stopped at 35 (between evaluations and saves) and at 47, then to the end.
    hr::TrainOptions chunk;
    chunk.out_dir = parts.string();
    chunk.stop_after = 35;
    const hr::TrainSummary b1 = hr::train(c, *data, chunk);
    CHECK(b1.stopped_early);
    CHECK(b1.steps == 35);
    CHECK(fs::exists(parts / "model.safetensors"));  // an early stop writes it too: the newest state
    chunk.resume = true;
    chunk.stop_after = 47;
    const hr::TrainSummary b2 = hr::train(c, *data, chunk);
    CHECK(b2.start_step == 35);
    CHECK(b2.steps == 47);
    chunk.stop_after = 0;
    const hr::TrainSummary b3 = hr::train(c, *data, chunk);
    CHECK(b3.start_step == 47);
    CHECK(b3.steps == 60);

    CHECK(metrics_without_timing(parts / "metrics.csv") == metrics_without_timing(whole / "metrics.csv"));
    CHECK(read_file(parts / "model.safetensors") == read_file(whole / "model.safetensors"));
    CHECK(b3.final_val.loss == a.final_val.loss);
    CHECK(b3.best_step == a.best_step);
    // Rolling checkpoints: the newest keep_checkpoints (2) remain.
    CHECK(fs::exists(parts / "checkpoints" / "step-00000060"));
    CHECK(fs::exists(parts / "checkpoints" / "step-00000047"));
    CHECK_FALSE(fs::exists(parts / "checkpoints" / "step-00000040"));
  }
}

TEST_CASE("resume refuses a finished run, a checkpoint of another model and a corrupt state file") {
  const TempDir tmp("train_resume_bad");
  const fs::path& dir = tmp.path();
  hr::TrainConfig c = tiny_resumable();
  auto data = hr::make_dataset(c);
  c = hr::finalize(c, *data);
  hr::TrainOptions o;
  o.out_dir = dir.string();
  o.stop_after = 20;
  hr::train(c, *data, o);
  o.resume = true;
  o.stop_after = 0;

  SUBCASE("a different model") {
    hr::TrainConfig other = c;
    other.model.d_model = 16;
    other.model = other.model.resolved();
    CHECK_THROWS_WITH_AS(hr::train(other, *data, o), doctest::Contains("model.d_model: 32 in the checkpoint, 16 in"),
                         std::invalid_argument);
  }
  SUBCASE("a corrupt training state") {
    std::ofstream(dir / "checkpoints" / "step-00000020" / "train_state.safetensors") << "garbage";
    CHECK_THROWS_WITH_AS(hr::train(c, *data, o), doctest::Contains("train_state.safetensors"), std::invalid_argument);
  }
  SUBCASE("a finished run") {
    hr::train(c, *data, o);
    CHECK_THROWS_WITH_AS(hr::train(c, *data, o), doctest::Contains("already at step 60 of steps 60"),
                         std::invalid_argument);
  }
  SUBCASE("nothing to resume from") {
    fs::remove_all(dir / "checkpoints");
    CHECK_THROWS_WITH_AS(hr::train(c, *data, o), doctest::Contains("has no checkpoint to resume from"),
                         std::invalid_argument);
  }
}

// The step number in "interrupted at step N" of a run's output.
static std::size_t interrupted_step(const std::string& output) {
  const std::string marker = "interrupted at step ";
  const std::size_t at = output.find(marker);
  REQUIRE_MESSAGE(at != std::string::npos, "no '" << marker << "' in the output");
  return std::stoull(output.substr(at + marker.size()));
}

TEST_CASE("Ctrl-C and SIGTERM save a checkpoint, and --resume continues from it") {
  const TempDir tmp("train_sigint");
  const fs::path& dir = tmp.path();
  // timeout sends SIGINT after 3 s to a run that would take hours, to the process and
  // then to its process group: the run sees the signal twice within microseconds and
  // must treat the copy as the same request, not as a second Ctrl-C that kills.
  const CliResult r = run_program("timeout --preserve-status -s INT 3",
                                  std::string(HEADROOM_BIN) +
                                      " train --steps 10000000 --warmup 10 --eval-every 1000000 "
                                      "--save-every 0 --out " + dir.string());
  INFO(r.output);
  CHECK(r.status == 130);
  const std::size_t step = interrupted_step(r.output);
  CHECK(step >= 1);
  CHECK(r.output.find("continue with: headroom train --resume " + dir.string()) != std::string::npos);
  const fs::path ckpt = dir / "checkpoints" / fmt::format("step-{:08}", step);
  CHECK(fs::exists(ckpt / "model.safetensors"));
  CHECK(fs::exists(ckpt / "train_state.safetensors"));

  // SIGTERM (kill, docker stop, a batch scheduler) stops a resumed run the same way.
  const CliResult term =
      run_program("timeout --preserve-status -s TERM 2", std::string(HEADROOM_BIN) + " train --resume " + dir.string());
  INFO(term.output);
  CHECK(term.status == 128 + SIGTERM);
  const std::size_t term_step = interrupted_step(term.output);
  CHECK(term_step > step);
  CHECK(fs::exists(dir / "checkpoints" / fmt::format("step-{:08}", term_step) / "train_state.safetensors"));

  const CliResult resumed =
      run_headroom("train --resume " + dir.string() + " --steps " + std::to_string(term_step + 3));
  INFO(resumed.output);
  CHECK(resumed.status == 0);
  CHECK(resumed.output.find("done: 3 steps") != std::string::npos);
  CHECK(fs::exists(dir / "model.safetensors"));

  const CliResult changed = run_headroom("train --resume " + dir.string() + " --lr 0.1");
  CHECK(changed.status == 2);
  CHECK(changed.output.find("--resume excludes --lr") != std::string::npos);
}

TEST_CASE("non-finite steps never reach the weights, and too many in a row stop the run") {
  const TempDir tmp("train_diverge");
  const fs::path& dir = tmp.path();
  // SGD at lr 1e30: step 1 is finite and throws the weights to ~1e28; from step 2 on
  // the forward pass overflows and every step is skipped.
  const std::string args = "train --d-model 16 --heads 2 --vocab 8 --seq-len 8 --optimizer sgd --lr 1e30 --clip 0 "
                           "--warmup 0 --schedule constant --max-bad-steps 3 --save-every 1 --out " + dir.string();
  SUBCASE("the message names the step and the last good checkpoint") {
    const CliResult r = run_headroom(args);
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find("training stopped at step 4: 3 consecutive steps with a non-finite loss") !=
          std::string::npos);
    CHECK(r.output.find("last good checkpoint: " + (dir / "checkpoints" / "step-00000001").string()) !=
          std::string::npos);
    CHECK(r.output.find("rerun with --detect-anomaly") != std::string::npos);
    // Bad steps save no periodic checkpoint: step 1's is the newest.
    CHECK(fs::exists(dir / "checkpoints" / "step-00000001"));
    CHECK_FALSE(fs::exists(dir / "checkpoints" / "step-00000002"));
  }
  SUBCASE("a run that ends with a non-finite validation loss fails and writes no model") {
    std::string many = args;
    many.replace(many.find("--max-bad-steps 3"), 17, "--max-bad-steps 1000 --steps 6");
    const CliResult r = run_headroom(many);
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find("training ended at step 6 with a non-finite validation loss (nan), so no model.safetensors "
                        "was written; 5 of 6 updates were skipped") != std::string::npos);
    CHECK_FALSE(fs::exists(dir / "model.safetensors"));
  }
  SUBCASE("--detect-anomaly names the op that made the first NaN") {
    const CliResult r = run_headroom(args + " --detect-anomaly");
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find("first NaN/Inf: anomaly: forward of '") != std::string::npos);
  }
}

TEST_CASE("recall's and before's own defaults apply below --config and the flags") {
  const TempDir tmp("train_recall_defaults");
  const fs::path& dir = tmp.path();
  const CliResult r = run_headroom("train --task recall --steps 2 --seq-len 8 -q --out " + dir.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("recall (vocab 32, seq_len 8)") != std::string::npos);  // the flag beats the preset
  const std::string written = read_file(dir / "config.json");
  for (const char* key : {"\"vocab\": 32", "\"batch\": 64", "\"lr\": 0.001", "\"schedule\": \"constant\"",
                          "\"weight_decay\": 0.1", "\"steps\": 2"}) {
    CHECK_MESSAGE(written.find(key) != std::string::npos, "config.json lacks " << key);
  }
  // Other tasks keep the global defaults.
  CHECK(hr::task_defaults("copy").optim.lr == hr::TrainConfig{}.optim.lr);
  CHECK(hr::task_defaults("recall").data.seq_len == 6);
  CHECK(hr::task_defaults("before").optim.steps == 3000);
  CHECK(hr::task_defaults("before").optim.lr == hr::TrainConfig{}.optim.lr);
}
