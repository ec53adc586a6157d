// MHA -> GQA by mean-pooling kv heads (nn/convert.hpp, docs/design.md #19): the means
// against hand-computed ones, the identity, the converted model's logits, `headroom
// convert` end to end, and `train --init-from` (uptraining) with its refusals.
#include <cmath>
#include <filesystem>
#include <map>
#include <string>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <xtensor/xview.hpp>

#include "autograd/random.hpp"
#include "cli_runner.hpp"
#include "nn/convert.hpp"
#include "support.hpp"
#include "train/init_from.hpp"

namespace fs = std::filesystem;
namespace hr = headroom;

namespace {

// One layer, 4 query and 4 kv heads of d_k = d_v = 2, key smear on: 4 x 2 = 8 rows
// in k_proj and v_proj.
hr::ModelConfig mha_config() {
  return hr::ModelConfig{.vocab = 7, .d_model = 8, .n_layers = 1, .n_heads = 4, .max_len = 6, .key_smear = true}
      .resolved();
}

const xt::xarray<double>& tensor(const hr::StateDict<double>& s, const std::string& name) {
  for (const auto& [n, v] : s) {
    if (n == name) return v;
  }
  FAIL("no tensor " << name);
  static const xt::xarray<double> none;
  return none;
}

void set_tensor(hr::StateDict<double>& s, const std::string& name, const xt::xarray<double>& value) {
  for (auto& [n, v] : s) {
    if (n == name) v = value;
  }
}

// A model whose key_smear is not all zeros, so that its pooling is seen.
std::unique_ptr<hr::TransformerLM<double>> mha_model(std::uint64_t seed) {
  hr::Rng rng(seed);
  auto model = std::make_unique<hr::TransformerLM<double>>(mha_config(), rng);
  hr::StateDict<double> s = model->state_dict();
  set_tensor(s, "blocks.0.attn.key_smear", xt::xarray<double>{0.5, -1.0, 2.0, 0.25});
  // Biases start at 0: give them values so that their pooling is seen too.
  set_tensor(s, "blocks.0.attn.k_proj.bias", xt::xarray<double>{1, 2, 3, 4, 5, 6, 7, 8});
  set_tensor(s, "blocks.0.attn.v_proj.bias", xt::xarray<double>{-1, -2, -3, -4, -5, -6, -7, -8});
  model->load_state_dict(s);
  return model;
}

const hr::IndexArray kTokens = {{1, 4, 2, 6, 0, 3}, {5, 5, 1, 2, 6, 4}};

xt::xarray<double> logits(hr::TransformerLM<double>& model) {
  model.eval();
  return model.forward(kTokens).value();
}

double max_abs_diff(const xt::xarray<double>& a, const xt::xarray<double>& b) {
  REQUIRE(a.shape() == b.shape());
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a.data()[i] - b.data()[i]));
  return m;
}

}  // namespace

TEST_CASE("pool_kv_heads: each new kv head is the mean of its group of old ones, in k, v, biases and key_smear") {
  auto model = mha_model(1);
  const hr::StateDict<double> old = model->state_dict();
  const hr::StateDict<double> two = hr::pool_kv_heads(old, model->config(), 2);
  // 4 kv heads -> 2: new head 0 = mean(old 0, old 1), new head 1 = mean(old 2, old 3);
  // head h's rows are [2h, 2h + 2).
  const auto& k = tensor(old, "blocks.0.attn.k_proj.weight");  // (8, 8)
  const auto& k2 = tensor(two, "blocks.0.attn.k_proj.weight");  // (4, 8)
  REQUIRE(k2.shape() == std::vector<std::size_t>{4, 8});
  for (std::size_t c = 0; c < 8; ++c) {
    CHECK(k2(0, c) == doctest::Approx((k(0, c) + k(2, c)) / 2).epsilon(1e-15));
    CHECK(k2(1, c) == doctest::Approx((k(1, c) + k(3, c)) / 2).epsilon(1e-15));
    CHECK(k2(2, c) == doctest::Approx((k(4, c) + k(6, c)) / 2).epsilon(1e-15));
    CHECK(k2(3, c) == doctest::Approx((k(5, c) + k(7, c)) / 2).epsilon(1e-15));
  }
  const auto& v = tensor(old, "blocks.0.attn.v_proj.weight");
  const auto& v2 = tensor(two, "blocks.0.attn.v_proj.weight");
  CHECK(v2(3, 5) == doctest::Approx((v(5, 5) + v(7, 5)) / 2).epsilon(1e-15));
  CHECK(tensor(two, "blocks.0.attn.k_proj.bias") == xt::xarray<double>{2, 3, 6, 7});
  CHECK(tensor(two, "blocks.0.attn.v_proj.bias") == xt::xarray<double>{-2, -3, -6, -7});
  // The raw (pre-sigmoid) parameter: (0.5 - 1) / 2, (2 + 0.25) / 2.
  CHECK(tensor(two, "blocks.0.attn.key_smear") == xt::xarray<double>{-0.25, 1.125});
  // To one kv head (MQA): the mean of all four.
  const hr::StateDict<double> one = hr::pool_kv_heads(old, model->config(), 1);
  CHECK(tensor(one, "blocks.0.attn.k_proj.bias") == xt::xarray<double>{4, 5});
  CHECK(tensor(one, "blocks.0.attn.key_smear") == xt::xarray<double>{0.4375});
  // Everything else is copied.
  CHECK(tensor(two, "blocks.0.attn.q_proj.weight") == tensor(old, "blocks.0.attn.q_proj.weight"));
  CHECK(tensor(two, "blocks.0.attn.out_proj.weight") == tensor(old, "blocks.0.attn.out_proj.weight"));
  CHECK(tensor(two, "tok_emb.weight") == tensor(old, "tok_emb.weight"));
  CHECK(two.size() == old.size());
}

TEST_CASE("pool_kv_heads: G equal to the model's kv heads is the identity, bit for bit") {
  auto model = mha_model(2);
  const hr::StateDict<double> old = model->state_dict();
  const hr::StateDict<double> same = hr::pool_kv_heads(old, model->config(), 4);
  REQUIRE(same.size() == old.size());
  for (std::size_t i = 0; i < old.size(); ++i) {
    INFO(old[i].first);
    CHECK(same[i].first == old[i].first);
    CHECK(same[i].second == old[i].second);  // exact equality of every element
  }
  auto copy = hr::pool_kv_heads(*model, 4);
  CHECK(logits(*copy) == logits(*model));
}

TEST_CASE("pool_kv_heads: the converted model computes what a hand-built GQA model with those weights does") {
  auto model = mha_model(3);
  auto pooled = hr::pool_kv_heads(*model, 2);
  CHECK(pooled->config().n_kv_heads == 2);
  CHECK(pooled->config().n_heads == 4);
  // The GQA model built from its config, with the means written in by hand.
  hr::ModelConfig gqa = mha_config();
  gqa.n_kv_heads = 2;
  hr::Rng rng(99);
  hr::TransformerLM<double> hand(gqa.resolved(), rng);
  hr::StateDict<double> s = hand.state_dict();
  const hr::StateDict<double> old = model->state_dict();
  for (auto& [name, value] : s) {
    const xt::xarray<double>& o = tensor(old, name);
    if (name.find("k_proj") != std::string::npos || name.find("v_proj") != std::string::npos) {
      for (std::size_t h = 0; h < 2; ++h) {
        for (std::size_t row = 0; row < 2; ++row) {
          const auto a = xt::eval(xt::view(o, (2 * h) * 2 + row));
          const auto b = xt::eval(xt::view(o, (2 * h + 1) * 2 + row));
          xt::view(value, h * 2 + row) = (a + b) / 2.0;
        }
      }
    } else if (name.find("key_smear") != std::string::npos) {
      value = xt::xarray<double>{(o(0) + o(1)) / 2, (o(2) + o(3)) / 2};
    } else {
      value = o;
    }
  }
  hand.load_state_dict(s);
  CHECK(max_abs_diff(logits(*pooled), logits(hand)) == 0.0);
}

TEST_CASE("pool_kv_heads: MHA whose kv heads agree within each group gives the same logits after pooling") {
  auto model = mha_model(4);
  hr::StateDict<double> s = model->state_dict();
  // Old head 2g + 1 := old head 2g, in k, v and their biases, and key_smear.
  for (auto& [name, value] : s) {
    if (name.find("k_proj") != std::string::npos || name.find("v_proj") != std::string::npos) {
      for (std::size_t g = 0; g < 2; ++g) {
        for (std::size_t row = 0; row < 2; ++row) {
          xt::view(value, (2 * g + 1) * 2 + row) = xt::eval(xt::view(value, (2 * g) * 2 + row));
        }
      }
    }
  }
  set_tensor(s, "blocks.0.attn.key_smear", xt::xarray<double>{0.5, 0.5, -1.5, -1.5});
  model->load_state_dict(s);
  auto pooled = hr::pool_kv_heads(*model, 2);
  // (a + a) / 2 is a exactly, so the pooled weights are the old ones; only the
  // order of the attention's sums may differ between the MHA and GQA paths.
  CHECK(max_abs_diff(logits(*pooled), logits(*model)) < 1e-12);
}

TEST_CASE("pool_kv_heads: a kv head count that does not divide is refused with the values") {
  const hr::ModelConfig c = mha_config();
  for (std::size_t g : {0, 3, 8}) {
    try {
      (void)hr::pooled_kv_config(c, g);
      FAIL("accepted " << g);
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      CHECK(m.find(fmt::format("kv heads {}", g)) != std::string::npos);
      CHECK(m.find("n_kv_heads 4") != std::string::npos);
    }
  }
}

TEST_CASE("convert and train --init-from: end to end through the binary, with their refusals") {
  const TempDir tmp("convert");
  const std::string a = (tmp / "a").string(), b = (tmp / "b").string();
  const std::string model_flags = "--task copy --seq-len 8 --vocab 8 --d-model 16 --heads 4 --layers 1";
  const CliResult train = run_headroom(fmt::format("train {} --steps 30 --batch 8 --out {} -q", model_flags, a));
  INFO(train.output);
  REQUIRE(train.status == 0);

  const CliResult conv = run_headroom(fmt::format("convert --model {} --kv-heads 2 --out {}", a, b));
  INFO(conv.output);
  REQUIRE(conv.status == 0);
  CHECK(conv.output.find("kv heads 4 -> 2") != std::string::npos);
  // One layer, float32: 4 x (4 + 4) x 4 = 128 bytes, then 2 x 8 x 4 = 64.
  CHECK(conv.output.find("KV cache: 128 -> 64 bytes per token") != std::string::npos);
  const auto loaded = hr::load_run(b);
  CHECK(loaded.config().n_kv_heads == 2);
  CHECK(loaded.step == std::optional<std::size_t>(30));
  CHECK(loaded.data.task == "copy");
  CHECK(run_headroom("eval --model " + b).status == 0);
  CHECK(run_headroom("sample --model " + b + " --count 1").status == 0);

  check_refused(fmt::format("convert --model {} --kv-heads 3 --out {}", a, (tmp / "c").string()), "kv heads 3");
  CHECK(!fs::exists(tmp / "c"));
  check_refused(fmt::format("convert --model {} --kv-heads 2 --out {}", a, b), "is not empty");

  // Uptraining refuses data and model flags that are not the model's.
  check_refused(fmt::format("train --task copy --seq-len 12 --vocab 8 --init-from {} --no-save", a),
                "data.seq_len 8 but this run has 12");
  check_refused(fmt::format("train --task copy --seq-len 8 --vocab 8 --d-model 32 --init-from {} --no-save", a),
                "--d-model 32: --init-from " + a + " has d_model 16");
  check_refused(fmt::format("train {} --kv-heads 3 --init-from {} --no-save", model_flags, a),
                "--kv-heads 3: --init-from " + a + ": kv heads 3: mean-pooling needs a divisor of the model's n_kv_heads 4");
  CHECK(!fs::exists(tmp / "never"));

  // A step at a learning rate of 1e-30 leaves the weights as they were (to float
  // rounding), so the run's validation loss is eval's of DIR: it started from DIR.
  const std::string u = (tmp / "u").string();
  const CliResult up = run_headroom(fmt::format("train {} --init-from {} --steps 1 --batch 8 --lr 1e-30 --out {} -q",
                                                model_flags, a, u));
  INFO(up.output);
  REQUIRE(up.status == 0);
  const auto loss_of = [](const std::string& dir) {
    const CliResult r = run_headroom("eval --json --model " + dir);
    INFO(r.output);
    REQUIRE(r.status == 0);
    return nlohmann::json::parse(r.output)["loss"].get<double>();
  };
  CHECK(std::abs(loss_of(u) - loss_of(a)) < 1e-6);
  const nlohmann::json config = nlohmann::json::parse(read_file(tmp / "u" / "config.json"));
  CHECK(config["train"]["init_from"] == a);
  CHECK(config["train"]["init_from_hash"] == hr::init_from_hash(tmp / "a" / "model.safetensors"));

  // Pooled on the fly, stopped and resumed: the resumed run ends where an unbroken one does.
  const std::string whole = (tmp / "whole").string(), part = (tmp / "part").string();
  const std::string up2 = fmt::format("{} --kv-heads 2 --init-from {} --steps 6 --batch 8 --save-every 0", model_flags, a);
  REQUIRE(run_headroom(fmt::format("train {} --out {} -q", up2, whole)).status == 0);
  REQUIRE(run_headroom(fmt::format("train {} --out {} --stop-after 3 -q", up2, part)).status == 0);
  fs::rename(tmp / "a", tmp / "a-moved");  // resume reads its own checkpoint, not DIR
  const CliResult resumed = run_headroom(fmt::format("train --resume {} -q", part));
  INFO(resumed.output);
  REQUIRE(resumed.status == 0);
  CHECK(loss_of(part) == loss_of(whole));
  CHECK(hr::load_run(part).config().n_kv_heads == 2);
  fs::rename(tmp / "a-moved", tmp / "a");

  // ablate --init-from: each run pools DIR's model to its --kv-heads, and sweep.json
  // holds the start, so a sweep from another start is refused in that directory.
  const std::string sweep = (tmp / "sweep").string();
  const std::string data_flags = "--task copy --seq-len 8 --vocab 8 --steps 2 --batch 4 --seeds 1 --jobs 1 -q";
  const CliResult ab =
      run_headroom(fmt::format("ablate {} --init-from {} --kv-heads 4,2,1 --out {}", data_flags, a, sweep));
  INFO(ab.output);
  REQUIRE(ab.status == 0);
  const nlohmann::json plan = nlohmann::json::parse(read_file(tmp / "sweep" / "sweep.json"));
  const std::string text = plan.dump();
  CHECK(text.find(hr::init_from_hash(tmp / "a" / "model.safetensors")) != std::string::npos);
  for (const char* kv : {"kv4", "kv2", "kv1"}) {
    const fs::path run = tmp / "sweep" / "runs" / fmt::format("h4-dk4-{}-s0", kv);
    INFO(run.string());
    CHECK(fs::exists(run / "model.safetensors"));
  }
  CHECK(hr::load_run((tmp / "sweep" / "runs" / "h4-dk4-kv1-s0").string()).config().n_kv_heads == 1);
  // u has a's model and data but other weights.
  const CliResult other =
      run_headroom(fmt::format("ablate {} --init-from {} --kv-heads 4,2,1 --out {}", data_flags, u, sweep));
  CHECK(other.status == 2);
  INFO(other.output);
  CHECK(other.output.find("init_from") != std::string::npos);
  // A point whose model is not DIR's (--heads 2) is skipped with the reason.
  check_refused(fmt::format("ablate {} --init-from {} --heads 2 --out {}", data_flags, a, (tmp / "sweep2").string()),
                "n_heads");
}
