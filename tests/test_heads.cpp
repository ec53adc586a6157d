// `headroom heads` and cli/head_analysis: masking cost against an independent way of
// removing a head, the gradient importance against finite differences, the attention
// statistics on a model whose attention is uniform by construction, and on a trained
// repeat model (the first induction layout) the head that does induction; the command's files and errors.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "interp/head_analysis.hpp"
#include "cli_runner.hpp"
#include "support.hpp"
#include "data/task.hpp"

namespace fs = std::filesystem;
namespace hr = headroom;

namespace {

std::vector<std::vector<std::string>> read_csv(const fs::path& p) {
  std::ifstream f(p);
  std::vector<std::vector<std::string>> rows;
  std::string line;
  while (std::getline(f, line)) {
    std::vector<std::string> cells;
    std::stringstream s(line);
    std::string cell;
    while (std::getline(s, cell, ',')) cells.push_back(cell);
    if (!line.empty() && line.back() == ',') cells.emplace_back();
    rows.push_back(cells);
  }
  return rows;
}

hr::Tensor<float> parameter(hr::TransformerLM<float>& model, const std::string& name) {
  for (const auto& [n, p] : model.named_parameters()) {
    if (n == name) return p;
  }
  FAIL("no parameter " << name);
  return {};
}

// A small model with weights large enough that every head matters, and repeat
// batches (rows that repeat their first half).
struct Fixture {
  hr::ModelConfig config{.vocab = 12, .d_model = 16, .n_layers = 2, .n_heads = 4, .max_len = 8};
  hr::Rng rng{5};
  hr::TransformerLM<float> model{config, rng};
  std::vector<hr::Batch> batches;

  Fixture() {
    for (auto& [name, p] : model.named_parameters()) {
      if (name.find("ln") == std::string::npos) p.mutable_value() = hr::normal_init<float>(p.shape(), 0.3, rng);
    }
    const auto task = hr::make_task("repeat", {.vocab = 12, .seq_len = 8});
    batches = hr::validation_batches(*task, 2, 4, 1);
  }
};

}  // namespace

TEST_CASE("heads: the masked loss equals the model with that head's out_proj columns zeroed") {
  Fixture f;
  const hr::HeadReport r = hr::analyze_heads(f.model, f.batches);
  REQUIRE(r.heads.size() == 8);
  CHECK(r.rows == 8);
  CHECK(r.full.loss == doctest::Approx(hr::evaluate_batches(f.model, f.batches).loss).epsilon(1e-12));
  for (const hr::HeadStats& s : r.heads) {
    CAPTURE(s.layer);
    CAPTURE(s.head);
    // Remove the head another way: its d_v columns of out_proj.weight set to zero.
    hr::Tensor<float> w = parameter(f.model, fmt::format("blocks.{}.attn.out_proj.weight", s.layer));
    const xt::xarray<float> saved = w.value();
    const std::size_t dv = f.model.config().d_v;
    for (std::size_t row = 0; row < w.shape()[0]; ++row) {
      for (std::size_t c = s.head * dv; c < (s.head + 1) * dv; ++c) w.mutable_value()(row, c) = 0;
    }
    const hr::EvalResult zeroed = hr::evaluate_batches(f.model, f.batches);
    w.mutable_value() = saved;
    CHECK(s.masked.loss == doctest::Approx(zeroed.loss).epsilon(1e-5));
    CHECK(s.masked.accuracy == zeroed.accuracy);
    CHECK(s.loss_increase == doctest::Approx(s.masked.loss - r.full.loss).epsilon(1e-9));
    CHECK(std::abs(s.loss_increase) > 1e-4);  // every head of this model matters
  }
  // The gates are cleared afterwards.
  for (std::size_t l = 0; l < 2; ++l) CHECK_FALSE(f.model.block(l).attention().head_gate().has_value());
}

TEST_CASE("heads: importance is the mean over rows of |d loss(row) / d gate|, checked by finite differences") {
  Fixture f;
  const hr::HeadReport r = hr::analyze_heads(f.model, f.batches);
  const std::size_t H = 4;
  constexpr float eps = 1e-2f;
  for (std::size_t l = 0; l < 2; ++l) {
    double layer_norm = 0;
    for (std::size_t h = 0; h < H; ++h) layer_norm += r.heads[l * H + h].importance * r.heads[l * H + h].importance;
    layer_norm = std::sqrt(layer_norm);
    for (std::size_t h = 0; h < H; ++h) {
      // Central differences of each row's loss in the gate of (l, h), the other gates at one.
      double numeric = 0;
      std::size_t rows = 0;
      for (const hr::Batch& b : f.batches) {
        const std::size_t n = b.tokens.shape()[0], len = b.tokens.shape()[1];
        for (std::size_t row = 0; row < n; ++row) {
          hr::IndexArray tokens = hr::IndexArray::from_shape({1, len});
          hr::Mask mask = hr::Mask::from_shape({1, len - 1});
          std::copy_n(b.tokens.data() + row * len, len, tokens.data());
          std::copy_n(b.target_mask.data() + row * (len - 1), len - 1, mask.data());
          auto loss_at = [&](float g) {
            hr::NoGrad no_grad;
            xt::xarray<float> gate = xt::ones<float>({H});
            gate(h) = g;
            f.model.block(l).attention().set_head_gate(hr::Tensor<float>(gate));
            const double v = f.model.loss(tokens, &mask).item();
            f.model.block(l).attention().clear_head_gate();
            return v;
          };
          numeric += std::abs((loss_at(1 + eps) - loss_at(1 - eps)) / (2 * eps));
          ++rows;
        }
      }
      numeric /= static_cast<double>(rows);
      const hr::HeadStats& s = r.heads[l * H + h];
      INFO("layer " << l << " head " << h << ": analytic " << s.importance << ", numeric " << numeric);
      CHECK(s.importance == doctest::Approx(numeric).epsilon(2e-2).scale(1e-3));
      CHECK(s.importance_in_layer == doctest::Approx(s.importance / layer_norm).epsilon(1e-9));
    }
  }
}

TEST_CASE("heads: uniform attention (q_proj zero) gives the closed-form statistics") {
  Fixture f;
  // With q = 0 every score is 0: query q attends 1/(q+1) to each of keys 0..q.
  for (std::size_t l = 0; l < 2; ++l) {
    parameter(f.model, fmt::format("blocks.{}.attn.q_proj.weight", l)).mutable_value().fill(0);
    parameter(f.model, fmt::format("blocks.{}.attn.q_proj.bias", l)).mutable_value().fill(0);
  }
  const hr::HeadReport r = hr::analyze_heads(f.model, f.batches);
  const std::size_t T = 8;  // repeat at seq_len 8: s_1..s_4 s_1..s_4, distinct s
  double confidence = 0, entropy = 0, induction = 0;
  for (std::size_t q = 1; q < T; ++q) {
    const double k = static_cast<double>(q + 1);
    confidence += 1 / k;
    entropy += std::log(k);
    if (q >= 4) induction += 1 / k;  // the repeat's queries each have an earlier occurrence
  }
  for (const hr::HeadStats& s : r.heads) {
    CAPTURE(s.layer);
    CAPTURE(s.head);
    CHECK(s.confidence == doctest::Approx(confidence / 7).epsilon(1e-5));
    CHECK(s.previous_token == doctest::Approx(confidence / 7).epsilon(1e-5));
    CHECK(s.entropy == doctest::Approx(entropy / 7).epsilon(1e-5));
    CHECK(s.induction == doctest::Approx(induction / 4).epsilon(1e-5));
    // Ties go to the first key: every query's argmax is key 0, offset q, each once;
    // the smallest offset wins the tie for the mode.
    CHECK(s.dominant_offset == 1);
    CHECK(s.offset_share == doctest::Approx(1.0 / 7));
  }
}

TEST_CASE("repeated_rows: each row's first half again, masks per copy, and uniform attention's repeat-induction score") {
  Fixture f;
  const hr::RepeatedRows rep = hr::repeated_rows(f.batches);
  const std::size_t R = 9, P = 4;  // seq_len 8: 9 tokens a row, a period of 4
  CHECK(rep.period == P);
  REQUIRE(rep.batches.size() == f.batches.size());
  for (std::size_t i = 0; i < rep.batches.size(); ++i) {
    const hr::Batch& b = rep.batches[i];
    REQUIRE(b.tokens.shape()[1] == R);
    for (std::size_t r = 0; r < b.tokens.shape()[0]; ++r) {
      for (std::size_t t = 0; t < R; ++t) CHECK(b.tokens(r, t) == f.batches[i].tokens(r, t % P));
      for (std::size_t t = 0; t < R - 1; ++t) {  // target t is token t + 1
        CHECK(b.target_mask(r, t));
        CHECK(rep.first_copy[i].target_mask(r, t) == (t + 1 < P));
        CHECK(rep.second_copy[i].target_mask(r, t) == (t >= P));
      }
    }
  }
  CHECK(error_of([] {
          hr::Batch tiny{hr::IndexArray::from_shape({1, 3}), hr::Mask::from_shape({1, 2})};
          hr::repeated_rows({tiny});
        }) == "repeated_rows: rows of 3 tokens are too short to repeat");

  // Uniform attention: query q puts 1/(q+1) on key q - P + 1, for q = P .. 7.
  for (std::size_t l = 0; l < 2; ++l) {
    parameter(f.model, fmt::format("blocks.{}.attn.q_proj.weight", l)).mutable_value().fill(0);
    parameter(f.model, fmt::format("blocks.{}.attn.q_proj.bias", l)).mutable_value().fill(0);
  }
  double expected = 0;
  for (std::size_t q = P; q < R - 1; ++q) expected += 1.0 / static_cast<double>(q + 1);
  expected /= static_cast<double>(R - 1 - P);
  const hr::HeadReport r = hr::analyze_heads(f.model, rep.batches, false, {.repeat_period = rep.period});
  for (const hr::HeadStats& s : r.heads) CHECK(s.repeat_induction == doctest::Approx(expected).epsilon(1e-5));
  // Without a period the score is not measured.
  CHECK(std::isnan(hr::analyze_heads(f.model, rep.batches, false).heads[0].repeat_induction));
}

TEST_CASE("heads: word and line starts under uniform attention, against a count written out here") {
  Fixture f;
  for (std::size_t l = 0; l < 2; ++l) {
    parameter(f.model, fmt::format("blocks.{}.attn.q_proj.weight", l)).mutable_value().fill(0);
    parameter(f.model, fmt::format("blocks.{}.attn.q_proj.bias", l)).mutable_value().fill(0);
  }
  // Two token ids as the breaks: a word starts after either, a line after the first.
  const hr::Index space = f.batches[0].tokens(0, 1), newline = f.batches[0].tokens(1, 2);
  const hr::AttentionProbes probes{.repeat_period = 0, .word_breaks = {space, newline}, .line_breaks = {newline}};
  // Query q weighs every key 1/(q+1); it counts where the latest break before it is
  // at least two positions back.
  const auto expected = [&](const std::vector<hr::Index>& breaks) {
    double sum = 0;
    std::size_t n = 0;
    for (const hr::Batch& b : f.batches) {
      for (std::size_t r = 0; r < b.tokens.shape()[0]; ++r) {
        for (std::size_t q = 1; q < 8; ++q) {
          bool found = false;
          std::size_t k = 0;  // the latest break before q
          for (std::size_t j = 0; j < q; ++j) {
            if (std::find(breaks.begin(), breaks.end(), b.tokens(r, j)) != breaks.end()) {
              found = true;
              k = j;
            }
          }
          if (found && k + 2 <= q) {
            sum += 1.0 / static_cast<double>(q + 1);
            ++n;
          }
        }
      }
    }
    REQUIRE(n > 0);
    return sum / static_cast<double>(n);
  };
  const double word = expected({space, newline}), line = expected({newline});
  for (const hr::HeadStats& s : hr::attention_statistics(f.model, f.batches, probes)) {
    CHECK(s.word_start == doctest::Approx(word).epsilon(1e-5));
    CHECK(s.line_start == doctest::Approx(line).epsilon(1e-5));
    CHECK(std::isnan(s.repeat_induction));
  }
  // The same through analyze_heads; and nothing measured without breaks.
  CHECK(hr::analyze_heads(f.model, f.batches, false, probes).heads[3].word_start == doctest::Approx(word).epsilon(1e-5));
  CHECK(std::isnan(hr::attention_statistics(f.model, f.batches)[0].word_start));
}

TEST_CASE("headroom heads on a trained repeat model finds the induction head, and --prune writes the curves") {
  const TempDir tmp("heads_repeat");
  const fs::path& dir = tmp.path();
  // seq_len 8: four tokens and their repeat (n = 4). The repeat's query at n + i - 1
  // (token s_i) finds the token after s_i's first occurrence at i: offset n - 1 = 3.
  const CliResult trained = run_headroom("train --task repeat --seq-len 8 --vocab 12 --d-model 32 --steps 200 "
                                         "--warmup 20 --eval-every 50 -q --out " + dir.string());
  INFO(trained.output);
  REQUIRE(trained.status == 0);
  const CliResult r = run_headroom("heads --model " + dir.string() + " --prune");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("layer  head") != std::string::npos);

  const auto heads = read_csv(dir / "heads.csv");
  REQUIRE(heads.size() == 1 + 2 * 4);
  const std::vector<std::string>& header = heads[0];
  const auto column = [&](const std::string& name) {
    const auto it = std::find(header.begin(), header.end(), name);
    REQUIRE_MESSAGE(it != header.end(), "heads.csv has no column " << name);
    return static_cast<std::size_t>(it - header.begin());
  };
  const std::size_t offset = column("dominant_offset"), induction = column("induction");
  bool found = false;
  for (std::size_t i = 1; i < heads.size(); ++i) {
    found = found || (heads[i][offset] == "3" && std::stod(heads[i][induction]) > 0.5);
  }
  CHECK_MESSAGE(found, "no head with dominant offset 3 and induction score > 0.5");

  // --repeat: the rows' first 4 tokens again; the model's own task repeats with period
  // 4 too, so its induction head reads the copy and the second copy is predicted far
  // better than the first (whose tokens are random).
  const CliResult repeated = run_headroom("heads --model " + dir.string() + " --repeat --out " + (dir / "rep").string());
  INFO(repeated.output);
  REQUIRE(repeated.status == 0);
  const std::size_t at = repeated.output.find("copies    loss on the first copy ");
  REQUIRE(at != std::string::npos);
  double first = 0, second = 0;
  REQUIRE(std::sscanf(repeated.output.c_str() + at, "copies    loss on the first copy %lf, on the second %lf", &first,
                      &second) == 2);
  CHECK(second < 0.5 * first);
  CHECK(repeated.output.find(": below 1, the model reads the first copy)") != std::string::npos);
  const auto rep = read_csv(dir / "rep" / "heads.csv");
  const std::size_t repeat_column = column("repeat_induction");
  REQUIRE(rep[0][repeat_column] == "repeat_induction");
  double best = 0;
  for (std::size_t i = 1; i < rep.size(); ++i) best = std::max(best, std::stod(rep[i][repeat_column]));
  CHECK(best > 0.5);
  // Without --repeat the column is there and empty.
  CHECK(heads[1][column("repeat_induction")].empty());

  // Four orders, each from the full model (removed 0) to every head removed (8).
  const auto prune = read_csv(dir / "prune.csv");
  REQUIRE(prune.size() == 1 + 4 * 9);
  CHECK(prune[0][0] == "order");
  for (std::size_t c = 0; c < 4; ++c) {
    const auto& first = prune[1 + 9 * c];
    const auto& last = prune[9 + 9 * c];
    CHECK(first[1] == "0");
    CHECK(last[1] == "8");
    CHECK(last[2] == "1");
    // Every order starts from the same full model and ends at the same empty one.
    CHECK(first[3] == prune[1][3]);
    CHECK(last[3] == prune[9][3]);
  }
  std::ifstream svg(dir / "prune.svg");
  std::stringstream text;
  text << svg.rdbuf();
  CHECK(text.str().rfind("<svg", 0) == 0);
  CHECK(text.str().find("Validation accuracy as heads are removed") != std::string::npos);
}

TEST_CASE("headroom heads: a missing model or a bad flag is one line and exit status 2") {
  const CliResult missing = run_headroom("heads --model /nonexistent/run");
  CHECK(missing.status == 2);
  CHECK(missing.output.find("/nonexistent/run") != std::string::npos);
  CHECK(count_lines(missing.output) == 1);
  const CliResult zero = run_headroom("heads --model /nonexistent/run --batches 0");
  CHECK(zero.status == 2);
  CHECK(zero.output.find("--batches") != std::string::npos);
  CHECK(count_lines(zero.output) == 1);
}

TEST_CASE("heads_by: increasing importance normalised per layer, or raw, ties in layer-major order") {
  hr::HeadReport r;
  // Layer 0 matters much more than layer 1, but within layer 1 head 0 leads.
  const double importance[2][2] = {{0.30, 0.40}, {0.004, 0.003}};
  for (std::size_t l = 0; l < 2; ++l) {
    const double norm = std::hypot(importance[l][0], importance[l][1]);
    for (std::size_t h = 0; h < 2; ++h) {
      hr::HeadStats s;
      s.layer = l;
      s.head = h;
      s.importance = importance[l][h];
      s.importance_in_layer = importance[l][h] / norm;
      r.heads.push_back(s);
    }
  }
  using Order = std::vector<std::pair<std::size_t, std::size_t>>;
  // Per layer: 0.6 (0,0), 0.8 (0,1), 0.8 (1,0), 0.6 (1,1); ties keep layer-major order.
  CHECK(hr::heads_by(r, &hr::HeadStats::importance_in_layer) == Order{{0, 0}, {1, 1}, {0, 1}, {1, 0}});
  CHECK(hr::heads_by(r, &hr::HeadStats::importance) == Order{{1, 1}, {1, 0}, {0, 0}, {0, 1}});
}

TEST_CASE("headroom heads works on a llama-style model: rope, RMSNorm, SwiGLU, no bias, qk_norm, key smear") {
  const TempDir tmp("heads_llama");
  const fs::path& dir = tmp.path();
  const CliResult trained =
      run_headroom("train --task copy --steps 30 --d-model 16 --heads 4 --kv-heads 2 --pos rope --norm-type rmsnorm "
                   "--ffn swiglu --no-bias --qk-norm --key-smear -q --out " + dir.string());
  INFO(trained.output);
  REQUIRE(trained.status == 0);
  const CliResult r = run_headroom("heads --model " + dir.string() + " --prune");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const auto heads = read_csv(dir / "heads.csv");
  REQUIRE(heads.size() == 1 + 2 * 4);  // 2 layers of 4 query heads
  const auto prune = read_csv(dir / "prune.csv");
  REQUIRE(prune.size() == 1 + 4 * 9);
  // Every order starts from the full model and ends with every head removed, whose
  // loss differs from the full model's: the gates reach this model's heads.
  CHECK(prune[1][1] == "0");
  CHECK(prune[9][1] == "8");
  CHECK(std::isfinite(std::stod(prune[1][3])));
  CHECK(std::stod(prune[9][3]) != doctest::Approx(std::stod(prune[1][3])).epsilon(1e-3));
}
