// decode_bench: tokens/s of incremental decoding with a KV cache against the full
// re-run of the context, and the cache's bytes, for MHA, GQA (h/4 kv heads) and MQA
// (1 kv head) at equal d_model and query heads (bench/README.md).
// bench/decode_compare.py runs it side by side with bench/torch_decode.py.
//
// Legend: L = context length, n = --steps, V = vocab, h = query heads, G = kv heads.
//
// What is timed, per (kv config, L) and per rep, on one row (batch 1): the n tokens
// whose contexts are L - n + 1, ..., L tokens (mean context L - (n - 1) / 2).
//   cached: a KVCache of capacity L is cleared and prefilled with the first L - n
//           tokens (not timed); then n calls of forward_cached with T_new = 1, each
//           feeding the next token (timed, each call on its own clock).
//   full:   n calls of forward over the whole context, (1, c) tokens for c = L - n + 1,
//           ..., L, what generate's Decode::full does per token (timed likewise).
// Both run under NoGrad in eval mode and produce the logits of the same n positions;
// choosing the next token is not timed (the tokens are uniform random ids drawn
// from --seed before the clock starts). A rep's tokens/s is n over the sum of its n
// calls; the reported value is the median over --reps reps after --warmup untimed
// ones (cached_cpu_tok_s and full_cpu_tok_s: the same over process CPU time, which at
// 1 thread leaves out the time other processes held the core), and the two paths alternate rep by rep so that the machine's slow phases hit
// both. As a check that the two compute the same thing, max_abs_logit_diff is the
// largest difference between a cached step's logits and the full forward's last row
// at the same context, over the last rep.
//
// The KV bytes are KVCache<float>::bytes_per_token(config) * L, and kv_cache_bytes
// the bytes() of the cache of capacity L itself.
//
// Output: progress and errors on stderr, one JSON line per (kv config, L) on stdout,
// then a readable table on stderr, with the check that MQA's bytes per token are
// exactly 1/h of MHA's.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "autograd/memory.hpp"
#include "autograd/parallel.hpp"
#include "autograd/profile.hpp"
#include "autograd/random.hpp"
#include "nn/kv_cache.hpp"
#include "nn/module.hpp"
#include "nn/transformer.hpp"

namespace hr = headroom;

namespace {

using Clock = std::chrono::steady_clock;

struct BenchOptions {
  std::size_t d_model = 256;
  std::size_t n_heads = 8;
  std::size_t n_layers = 4;
  std::size_t max_len = 1024;
  std::size_t vocab = 64;
  std::string kv = "mha,gqa,mqa";                // mha: G = h, gqa: G = h / 4, mqa: G = 1, or a number
  std::string contexts = "64,128,256,512,1024";  // L
  std::size_t steps = 8;                         // n, timed tokens per rep
  std::size_t reps = 5;
  std::size_t warmup = 1;
  int threads = 1;
  std::uint64_t seed = 0;
  bool profile = false;  // per-op table of the cached steps on stderr
};

struct KvConfig {
  std::string name;
  std::size_t n_kv_heads = 0;
};

struct Row {
  std::string kv;
  std::size_t n_kv_heads = 0;
  std::size_t context = 0;
  double cached_tok_s = 0;
  double full_tok_s = 0;
  double cached_cpu_tok_s = 0;  // the same by process CPU time
  double full_cpu_tok_s = 0;
  std::size_t bytes_per_token = 0;
  std::size_t cache_bytes = 0;
  double max_diff = 0;
};

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::size_t parse_count(const std::string& flag, const std::string& text) {
  std::size_t used = 0;
  unsigned long value = 0;
  try {
    value = std::stoul(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || value == 0 || text.front() == '-') {
    throw std::invalid_argument(fmt::format("{}: '{}' is not a positive integer", flag, text));
  }
  return value;
}

std::vector<KvConfig> parse_kv(const BenchOptions& o) {
  std::vector<KvConfig> out;
  for (const std::string& name : split(o.kv)) {
    if (name == "mha") {
      out.push_back({.name = name, .n_kv_heads = o.n_heads});
    } else if (name == "gqa") {
      if (o.n_heads % 4 != 0) {
        throw std::invalid_argument(fmt::format("--kv gqa needs --heads divisible by 4, got {}", o.n_heads));
      }
      out.push_back({.name = name, .n_kv_heads = o.n_heads / 4});
    } else if (name == "mqa") {
      out.push_back({.name = name, .n_kv_heads = 1});
    } else {
      if (name.find_first_not_of("0123456789") != std::string::npos || name.front() == '0') {
        throw std::invalid_argument(fmt::format("--kv: '{}' is none of mha, gqa, mqa or a positive integer", name));
      }
      const std::size_t g = parse_count("--kv", name);
      out.push_back({.name = fmt::format("kv{}", g), .n_kv_heads = g});
    }
  }
  if (out.empty()) throw std::invalid_argument(fmt::format("--kv lists no configs: '{}'", o.kv));
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// CPU time of the whole process, in ms: at 1 thread the wall time minus the time
// other processes held the core, so it survives a busy machine.
double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The logits of the last position of a (1, T, V) tensor.
std::vector<float> last_row(const hr::Tensor<float>& logits) {
  const xt::xarray<float>& v = logits.value();
  const std::size_t t = v.shape()[1], n_vocab = v.shape()[2];
  const float* p = v.data() + (t - 1) * n_vocab;
  return {p, p + n_vocab};
}

hr::ModelConfig model_config(const BenchOptions& o, std::size_t n_kv_heads) {
  return hr::ModelConfig{.vocab = o.vocab,
                         .d_model = o.d_model,
                         .n_layers = o.n_layers,
                         .n_heads = o.n_heads,
                         .n_kv_heads = n_kv_heads,
                         .max_len = o.max_len};
}

void print_profile(const std::map<std::string, hr::OpTiming>& by_name, std::size_t tokens) {
  std::vector<hr::OpTiming> rows;
  double total_ms = 0;
  for (const auto& [name, t] : by_name) {
    rows.push_back(t);
    total_ms += t.forward_ms;
  }
  std::sort(rows.begin(), rows.end(), [](const hr::OpTiming& a, const hr::OpTiming& b) {
    return a.forward_ms > b.forward_ms;
  });
  std::cerr << fmt::format("per-op profile of the cached steps, microseconds per token ({} tokens):\n", tokens);
  std::cerr << fmt::format("{:<28} {:>10} {:>7} {:>10}\n", "op", "us/token", "share", "calls/tok");
  for (const hr::OpTiming& r : rows) {
    std::cerr << fmt::format("{:<28} {:>10.2f} {:>6.1f}% {:>10.1f}\n", r.name,
                             1e3 * r.forward_ms / static_cast<double>(tokens), 100.0 * r.forward_ms / total_ms,
                             static_cast<double>(r.forward_calls) / static_cast<double>(tokens));
  }
}

// --profile's timing by parts: the 6 n_layers + 1 linears of one decode step alone,
// (1, 1, in) x (out, in)^T + bias, in the model's order and shapes, each layer with
// its own weights (so they stream from memory as in the model); microseconds per
// token, the median of 9 reps of 16 tokens. The cached step's time minus this is
// attention, norms, adds, GELU and the rest.
struct LinearParts {
  double total_us = 0;
  std::vector<std::pair<std::string, double>> by_shape;  // per shape, summed over layers
};

LinearParts time_linears(const hr::ModelConfig& c, std::uint64_t seed) {
  hr::Rng rng(seed);
  struct Lin {
    std::string name;
    hr::Tensor<float> w, b;
  };
  const std::size_t C = c.d_model, q = c.n_heads * c.d_k, kv = c.n_kv_heads * c.d_k, f = c.d_ff;
  const auto make = [&](std::string name, std::size_t out, std::size_t in, bool bias) {
    return Lin{.name = std::move(name),
               .w = hr::Tensor<float>(hr::normal_init<float>({out, in}, 0.02, rng)),
               .b = bias ? hr::Tensor<float>(xt::xarray<float>(xt::zeros<float>({out}))) : hr::Tensor<float>()};
  };
  std::vector<Lin> lins;
  for (std::size_t l = 0; l < c.n_layers; ++l) {
    lins.push_back(make(fmt::format("q_proj ({}, {})", q, C), q, C, true));
    lins.push_back(make(fmt::format("k_proj ({}, {})", kv, C), kv, C, true));
    lins.push_back(make(fmt::format("v_proj ({}, {})", kv, C), kv, C, true));
    lins.push_back(make(fmt::format("out_proj ({}, {})", C, q), C, q, true));
    lins.push_back(make(fmt::format("fc1 ({}, {})", f, C), f, C, true));
    lins.push_back(make(fmt::format("fc2 ({}, {})", C, f), C, f, true));
  }
  lins.push_back(make(fmt::format("head ({}, {})", c.vocab, C), c.vocab, C, false));
  std::map<std::string, std::vector<double>> per_name;  // us per token, per rep
  std::vector<double> totals;
  const std::size_t tokens = 16;
  for (int rep = 0; rep < 10; ++rep) {
    std::map<std::string, double> ms;
    double total = 0;
    for (std::size_t t = 0; t < tokens; ++t) {
      for (const Lin& lin : lins) {
        const std::size_t in = lin.w.shape()[1];
        const hr::Tensor<float> x(xt::xarray<float>(xt::ones<float>({std::size_t{1}, std::size_t{1}, in})));
        const auto t0 = Clock::now();
        const hr::Tensor<float> y = hr::linear(x, lin.w, lin.b);
        const double d = ms_since(t0);
        ms[lin.name] += d;
        total += d;
      }
    }
    if (rep == 0) continue;  // warm-up
    for (const auto& [name, v] : ms) per_name[name].push_back(1e3 * v / tokens);
    totals.push_back(1e3 * total / tokens);
  }
  LinearParts parts{.total_us = median(totals), .by_shape = {}};
  for (const auto& [name, v] : per_name) parts.by_shape.emplace_back(name, median(v));
  return parts;
}

Row bench_one(const BenchOptions& o, const KvConfig& kv, std::size_t context, hr::TransformerLM<float>& model,
              const std::vector<hr::Index>& ids, std::map<std::string, hr::OpTiming>* profile_sum,
              std::size_t& profiled_tokens) {
  const std::size_t n = o.steps, prefill = context - n;
  hr::KVCache<float> cache(model.config(), 1, context);
  hr::IndexArray prompt = hr::IndexArray::from_shape({1, prefill});  // (1, L - n)
  std::copy(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(prefill), prompt.begin());
  std::vector<hr::IndexArray> steps;  // n of (1, 1)
  std::vector<hr::IndexArray> contexts;  // n of (1, c), c = L - n + 1 .. L
  for (std::size_t k = 0; k < n; ++k) {
    hr::IndexArray one = hr::IndexArray::from_shape({1, 1});
    one(0, 0) = ids[prefill + k];
    steps.push_back(std::move(one));
    hr::IndexArray all = hr::IndexArray::from_shape({1, prefill + k + 1});
    std::copy(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(prefill + k + 1), all.begin());
    contexts.push_back(std::move(all));
  }

  std::vector<double> cached_tok_s, full_tok_s, cached_cpu_tok_s, full_cpu_tok_s;
  std::vector<std::vector<float>> cached_logits(n), full_logits(n);
  for (std::size_t rep = 0; rep < o.warmup + o.reps; ++rep) {
    const bool timed = rep >= o.warmup;
    cache.clear();
    model.forward_cached(prompt, cache);
    double cached_ms = 0, cached_cpu = 0;
    {
      std::optional<hr::OpProfile> profile;  // the cached steps only: not the prefill, not the full path
      if (profile_sum) profile.emplace();
      for (std::size_t k = 0; k < n; ++k) {
        if (profile) profile->lap();
        const double c0 = process_cpu_ms();
        const auto t0 = Clock::now();
        const hr::Tensor<float> logits = model.forward_cached(steps[k], cache);  // (1, 1, V)
        cached_ms += ms_since(t0);
        cached_cpu += process_cpu_ms() - c0;
        cached_logits[k] = last_row(logits);
      }
      if (profile) {
        for (const hr::OpTiming& t : profile->timings()) {
          hr::OpTiming& sum = (*profile_sum)[t.name];
          sum.name = t.name;
          sum.forward_ms += t.forward_ms;
          sum.forward_calls += t.forward_calls;
        }
        profiled_tokens += n;  // warm-up reps included
      }
    }
    double full_ms = 0, full_cpu = 0;
    {
      for (std::size_t k = 0; k < n; ++k) {
        const double c0 = process_cpu_ms();
        const auto t0 = Clock::now();
        const hr::Tensor<float> logits = model.forward(contexts[k]);  // (1, c, V)
        full_ms += ms_since(t0);
        full_cpu += process_cpu_ms() - c0;
        full_logits[k] = last_row(logits);
      }
    }
    if (timed) {
      cached_tok_s.push_back(static_cast<double>(n) / (cached_ms / 1000.0));
      full_tok_s.push_back(static_cast<double>(n) / (full_ms / 1000.0));
      cached_cpu_tok_s.push_back(static_cast<double>(n) / (cached_cpu / 1000.0));
      full_cpu_tok_s.push_back(static_cast<double>(n) / (full_cpu / 1000.0));
    }
  }
  double max_diff = 0;
  for (std::size_t k = 0; k < n; ++k) {
    for (std::size_t i = 0; i < cached_logits[k].size(); ++i) {
      max_diff = std::max(max_diff, static_cast<double>(std::abs(cached_logits[k][i] - full_logits[k][i])));
    }
  }
  return {.kv = kv.name,
          .n_kv_heads = kv.n_kv_heads,
          .context = context,
          .cached_tok_s = median(cached_tok_s),
          .full_tok_s = median(full_tok_s),
          .cached_cpu_tok_s = median(cached_cpu_tok_s),
          .full_cpu_tok_s = median(full_cpu_tok_s),
          .bytes_per_token = hr::KVCache<float>::bytes_per_token(model.config()),
          .cache_bytes = cache.bytes(),
          .max_diff = max_diff};
}

int run(const BenchOptions& o) {
  if (o.reps == 0) throw std::invalid_argument("--reps must be positive, got 0");
  if (o.steps == 0) throw std::invalid_argument("--steps must be positive, got 0");
  if (o.threads < 1) throw std::invalid_argument(fmt::format("--threads must be >= 1, got {}", o.threads));
  const std::vector<KvConfig> kvs = parse_kv(o);
  std::vector<std::size_t> lengths;
  for (const std::string& text : split(o.contexts)) {
    const std::size_t l = parse_count("--contexts", text);
    if (l <= o.steps || l > o.max_len) {
      throw std::invalid_argument(fmt::format(
          "--contexts: {} must be above --steps {} (a prefill of L - n >= 1 tokens) and at most --max-len {}", l,
          o.steps, o.max_len));
    }
    lengths.push_back(l);
  }
  if (lengths.empty()) throw std::invalid_argument(fmt::format("--contexts lists no lengths: '{}'", o.contexts));
  hr::set_threads(o.threads);
  if (!hr::retain_freed_memory()) throw std::runtime_error("the C library refused retain_freed_memory's settings");

  hr::Rng token_rng(o.seed);
  std::vector<hr::Index> ids(o.max_len);
  for (auto& id : ids) id = static_cast<hr::Index>(token_rng.below(o.vocab));

  std::vector<Row> rows;
  for (const KvConfig& kv : kvs) {
    const hr::ResolvedModelConfig config = model_config(o, kv.n_kv_heads).resolved();
    hr::Rng init_rng(o.seed + 1);
    hr::TransformerLM<float> model(config, init_rng);
    model.eval();
    const hr::NoGrad no_grad;
    std::map<std::string, hr::OpTiming> profile_sum;  // by op, summed over the cached steps of every L
    std::size_t profiled_tokens = 0;
    for (std::size_t context : lengths) {
      const Row r = bench_one(o, kv, context, model, ids, o.profile ? &profile_sum : nullptr, profiled_tokens);
      rows.push_back(r);
      std::cerr << fmt::format("headroom: {} (G {}) L {}: cached {:.1f} tok/s, full {:.1f} tok/s\n", r.kv,
                               r.n_kv_heads, r.context, r.cached_tok_s, r.full_tok_s);
      std::cout << fmt::format(
          "{{\"impl\": \"headroom\", \"kv\": \"{}\", \"d_model\": {}, \"n_heads\": {}, \"n_kv_heads\": {}, "
          "\"n_layers\": {}, \"max_len\": {}, \"vocab\": {}, \"threads\": {}, \"parameters\": {}, "
          "\"context\": {}, \"steps\": {}, \"reps\": {}, \"warmup\": {}, \"mean_context\": {:.1f}, "
          "\"cached_tok_s\": {:.2f}, \"full_tok_s\": {:.2f}, \"cached_over_full\": {:.3f}, "
          "\"cached_cpu_tok_s\": {:.2f}, \"full_cpu_tok_s\": {:.2f}, "
          "\"kv_bytes_per_token\": {}, \"kv_bytes\": {}, \"kv_cache_bytes\": {}, "
          "\"max_abs_logit_diff\": {:.3g}}}\n",
          r.kv, o.d_model, o.n_heads, r.n_kv_heads, o.n_layers, o.max_len, o.vocab, o.threads,
          model.parameter_count(), r.context, o.steps, o.reps, o.warmup,
          static_cast<double>(r.context) - 0.5 * static_cast<double>(o.steps - 1), r.cached_tok_s, r.full_tok_s,
          r.cached_tok_s / r.full_tok_s, r.cached_cpu_tok_s, r.full_cpu_tok_s, r.bytes_per_token, r.bytes_per_token * r.context, r.cache_bytes,
          r.max_diff);
      std::cout.flush();
    }
    if (o.profile) {
      std::cerr << fmt::format("{} (G {}):\n", kv.name, kv.n_kv_heads);
      print_profile(profile_sum, profiled_tokens);
      double step_ms = 0;
      for (const auto& [name, t] : profile_sum) step_ms += t.forward_ms;
      const LinearParts parts = time_linears(model.config(), o.seed + 2);
      const double step_us = 1e3 * step_ms / static_cast<double>(profiled_tokens);
      std::cerr << "by parts: the step's linears alone (1 row, each layer's own weights), us per token:\n";
      for (const auto& [name, us] : parts.by_shape) std::cerr << fmt::format("  {:<26} {:>9.2f}\n", name, us);
      std::cerr << fmt::format("  {:<26} {:>9.2f} of the step's {:.2f} ({:.1f}%); the rest, {:.2f}, is attention over "
                               "the cache and the small ops (mean over the contexts above)\n",
                               "all linears", parts.total_us, step_us, 100.0 * parts.total_us / step_us,
                               step_us - parts.total_us);
    }
  }

  std::cerr << fmt::format("\n{} steps per rep at contexts L-{}..L, median of {} reps, {} thread(s)\n", o.steps,
                           o.steps - 1, o.reps, o.threads);
  std::cerr << fmt::format("{:<6} {:>4} {:>6} {:>12} {:>12} {:>9} {:>12} {:>12} {:>10}\n", "kv", "G", "L",
                           "cached tok/s", "full tok/s", "ratio", "KV B/token", "KV bytes", "max diff");
  for (const Row& r : rows) {
    std::cerr << fmt::format("{:<6} {:>4} {:>6} {:>12.1f} {:>12.1f} {:>9.2f} {:>12} {:>12} {:>10.2g}\n", r.kv,
                             r.n_kv_heads, r.context, r.cached_tok_s, r.full_tok_s, r.cached_tok_s / r.full_tok_s,
                             r.bytes_per_token, r.bytes_per_token * r.context, r.max_diff);
  }
  const std::size_t mha = hr::KVCache<float>::bytes_per_token(model_config(o, o.n_heads).resolved().get());
  const std::size_t mqa = hr::KVCache<float>::bytes_per_token(model_config(o, 1).resolved().get());
  std::cerr << fmt::format("MQA's KV bytes per token {} x h {} = {}, MHA's {}: {}\n", mqa, o.n_heads,
                           mqa * o.n_heads, mha, mqa * o.n_heads == mha ? "exactly 1/h" : "NOT 1/h");
  return mqa * o.n_heads == mha ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times cached and uncached decoding of MHA, GQA and MQA models (see bench/README.md); one JSON line "
               "per kv config and context on stdout.",
               "decode_bench"};
  BenchOptions o;
  app.add_option("--d-model", o.d_model, "model width C")->capture_default_str();
  app.add_option("--heads", o.n_heads, "query heads h")->capture_default_str();
  app.add_option("--layers", o.n_layers, "transformer blocks")->capture_default_str();
  app.add_option("--max-len", o.max_len, "the model's max_len (position table)")->capture_default_str();
  app.add_option("--vocab", o.vocab, "V, token ids are uniform in [0, V)")->capture_default_str();
  app.add_option("--kv", o.kv, "comma-separated: mha (G = h), gqa (G = h/4), mqa (G = 1), or a number G")
      ->capture_default_str();
  app.add_option("--contexts", o.contexts, "comma-separated context lengths L, each in (steps, max_len]")
      ->capture_default_str();
  app.add_option("--steps", o.steps, "n, timed tokens per rep, at contexts L-n+1 .. L")->capture_default_str();
  app.add_option("--reps", o.reps, "timed reps (the median is reported)")->capture_default_str();
  app.add_option("--warmup", o.warmup, "untimed reps first")->capture_default_str();
  app.add_option("--threads", o.threads, "headroom::set_threads")->capture_default_str();
  app.add_option("--seed", o.seed, "seeds the tokens and the weights")->capture_default_str();
  app.add_flag("--profile", o.profile, "per-op table of the cached decode steps (prefill and full path left out) on stderr");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return run(o);
  } catch (const std::invalid_argument& e) {
    std::cerr << "decode_bench: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "decode_bench: " << e.what() << "\n";
    return 1;
  }
}
