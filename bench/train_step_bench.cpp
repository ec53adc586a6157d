// train_step_bench: the wall time of one full headroom training step, for the
// side-by-side comparison with PyTorch in bench/compare.py (bench/README.md).
//
// Legend: B = batch, T = seq_len, V = vocab.
// A timed step is exactly what cli/trainer.cpp does per step, minus data sampling
// and progress: zero_grad, forward + mean next-token cross-entropy over all B*T
// targets, backward, clip_grad_norm(1.0), AdamW step. bench/torch_train_step.py
// times the same five things on the same model.
//
// The token batches are uniform random ids in [0, V), drawn with our Rng from
// --seed before the clock starts; the model is TransformerLM<float> with
// docs/design.md's defaults (pre-norm, learned positions, exact GELU, biases, untied
// head, d_ff = 4 d_model) and max_len = T, or with the keys of docs/design.md #17 that
// --kv-heads, --pos, --norm-type, --ffn, --d-ff and --no-bias set (compare.py's
// llama configs: rope, rmsnorm, swiglu, grouped K/V, no bias).
//
// Output: progress and errors on stderr; one JSON line on stdout, the format both
// implementations share (see bench/README.md for its keys).
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <optional>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "autograd/gemm.hpp"
#include "autograd/memory.hpp"
#include "autograd/parallel.hpp"
#include "autograd/profile.hpp"
#include "autograd/random.hpp"
#include "nn/transformer.hpp"
#include "optim/optim.hpp"
#include "train/resources.hpp"
#include "train/step.hpp"

namespace hr = headroom;

namespace {

using Clock = std::chrono::steady_clock;

struct BenchOptions {
  std::size_t d_model = 64;
  std::size_t n_heads = 4;
  std::size_t n_layers = 2;
  std::size_t n_kv_heads = 0;  // 0: n_heads
  std::size_t d_ff = 0;        // 0: the config's default for the ffn
  std::string pos = "learned";
  std::string norm_type = "layernorm";
  std::string ffn = "mlp";
  bool no_bias = false;
  std::size_t seq_len = 32;   // T
  std::size_t batch = 16;     // B
  std::size_t vocab = 64;     // V
  std::size_t steps = 30;     // timed steps
  std::size_t warmup_steps = 5;  // run first, not timed
  int threads = 1;
  std::uint64_t seed = 0;
  std::string allocator = "retain";  // retain: headroom::retain_freed_memory(), as headroom does; glibc: its defaults
  bool profile = false;  // time the timed steps per op kind and print the table on stderr
};

// The value at quantile q of sorted values, by linear interpolation between the
// closest ranks (numpy.percentile's default), so both sides agree on p10/p90.
double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return sorted[lo] + frac * (sorted[hi] - sorted[lo]);
}

// CPU time of the whole process (every thread), in ms. At 1 thread it is the wall
// time minus the time other processes held the core, so it survives a busy machine.
double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

// (steps, B, T+1) uniform token ids, one batch per step, warm-up steps first.
std::vector<hr::IndexArray> make_batches(const BenchOptions& o) {
  hr::Rng rng(o.seed);
  std::vector<hr::IndexArray> batches;
  batches.reserve(o.warmup_steps + o.steps);
  for (std::size_t s = 0; s < o.warmup_steps + o.steps; ++s) {
    hr::IndexArray tokens = hr::IndexArray::from_shape({o.batch, o.seq_len + 1});  // (B, T+1)
    for (auto& id : tokens) id = static_cast<hr::Index>(rng.below(o.vocab));
    batches.push_back(std::move(tokens));
  }
  return batches;
}

// The GEMM floating-point operations of one training step of this model
// (train/resources.hpp): the forward's GEMMs (q, k, v and out projections, Q K^T
// and P V per head, the feed-forward's two or three, the output head), times 3.
double step_gemm_flops(const BenchOptions& o, const hr::ModelConfig& c) {
  return hr::training_step_flops(c, o.batch, o.seq_len);
}

// The FLOP rate (billions a second) of one single-threaded (or --threads) float
// GEMM of the feed-forward's shape (B T, C) x (C, 4 C), the step's largest, best of
// 20 after 3 warm-ups.
double gemm_gflops(const BenchOptions& o) {
  const std::size_t m = o.batch * o.seq_len, k = o.d_model, n = 4 * o.d_model;
  hr::Rng rng(o.seed);
  const xt::xarray<float> a = hr::normal_init<float>({m, k}, 1.0, rng);
  const xt::xarray<float> b = hr::normal_init<float>({k, n}, 1.0, rng);
  xt::xarray<float> c = xt::zeros<float>({m, n});
  double best = 1e300;
  for (int rep = 0; rep < 23; ++rep) {
    const auto t0 = Clock::now();
    hr::gemm<float>(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (rep >= 3) best = std::min(best, s);
  }
  return 2.0 * static_cast<double>(m * n * k) / best / 1e9;
}

// The per-op table of --profile on stderr: milliseconds per step by op kind,
// forward and backward, and each row's share of the mean step. The backward
// section's own row is the tape walk minus the op backwards inside it.
void print_profile(const hr::OpProfile& profile, const std::vector<double>& step_ms, std::size_t steps) {
  std::vector<hr::OpTiming> rows = profile.timings();
  double op_backward_ms = 0, walk_ms = 0;  // walk: the whole backward() section, op backwards included
  for (const auto& r : rows) {
    op_backward_ms += r.backward_ms;
    if (r.name == "(backward: tape walk)") walk_ms = r.forward_ms;
  }
  double step_total = 0;
  for (double m : step_ms) step_total += m;
  const double n = static_cast<double>(steps);
  const double step_mean = step_total / n;
  double listed = 0;
  std::cerr << fmt::format("per-op profile, ms per step (mean of {} steps of {:.2f} ms):\n", steps, step_mean);
  std::cerr << fmt::format("{:<28} {:>10} {:>10} {:>10} {:>7} {:>7}\n", "op", "forward", "backward", "total",
                           "share", "calls");
  for (auto& r : rows) {
    if (r.name == "(backward: tape walk)") r.forward_ms = walk_ms - op_backward_ms;
    const double f = r.forward_ms / n, b = r.backward_ms / n;
    listed += f + b;
    std::cerr << fmt::format("{:<28} {:>10.3f} {:>10.3f} {:>10.3f} {:>6.1f}% {:>7.0f}\n", r.name, f, b, f + b,
                             100.0 * (f + b) / step_mean,
                             static_cast<double>(std::max(r.forward_calls, r.backward_calls)) / n);
  }
  std::cerr << fmt::format("{:<28} {:>10} {:>10} {:>10.3f} {:>6.1f}%\n", "(not attributed)", "", "",
                           step_mean - listed, 100.0 * (step_mean - listed) / step_mean);
}

int run(const BenchOptions& o) {
  if (o.steps == 0) throw std::invalid_argument("--steps must be positive, got 0");
  if (o.threads < 1) throw std::invalid_argument(fmt::format("--threads must be >= 1, got {}", o.threads));
  if (o.allocator == "retain" && !hr::retain_freed_memory()) {
    throw std::runtime_error("the C library refused retain_freed_memory's settings");
  }

  const hr::ResolvedModelConfig config = hr::ModelConfig{.vocab = o.vocab,
                                                         .d_model = o.d_model,
                                                         .n_layers = o.n_layers,
                                                         .n_heads = o.n_heads,
                                                         .n_kv_heads = o.n_kv_heads,
                                                         .d_ff = o.d_ff,
                                                         .max_len = o.seq_len,
                                                         .pos = hr::parse_pos(o.pos),
                                                         .bias = !o.no_bias,
                                                         .norm_type = hr::parse_norm_type(o.norm_type),
                                                         .ffn = hr::parse_ffn(o.ffn)}
                                              .resolved();
  // What `headroom train --threads N` uses for this model (train/resources.hpp).
  const int threads_used = hr::step_threads_that_pay(o.threads, step_gemm_flops(o, config), o.batch);
  hr::set_threads(threads_used);
  hr::Rng init_rng(o.seed + 1);
  hr::TransformerLM<float> model(config, init_rng);
  // PyTorch's AdamW defaults (betas 0.9/0.999, eps 1e-8) at lr 1e-3, weight decay
  // 0.01; headroom leaves biases, LayerNorm and embeddings out of the decay and the
  // torch side uses the same two parameter groups.
  hr::AdamW<float> optimizer(model.named_parameters(), hr::AdamWOptions{.lr = 1e-3, .weight_decay = 0.01});

  const std::vector<hr::IndexArray> batches = make_batches(o);
  std::vector<double> ms;      // wall time per timed step
  std::vector<double> cpu_ms;  // process CPU time per timed step
  ms.reserve(o.steps);
  cpu_ms.reserve(o.steps);
  double initial_loss = 0;
  double final_loss = 0;
  std::optional<hr::OpProfile> profile;  // made at the first timed step
  hr::ParallelStats pool_before;          // the pool's counts before the first timed step
  for (std::size_t s = 0; s < batches.size(); ++s) {
    const double c0 = process_cpu_ms();
    const auto t0 = Clock::now();
    if (o.profile && s == o.warmup_steps) profile.emplace();
    if (s == o.warmup_steps) pool_before = hr::parallel_stats();
    // The trainer's own step (train/step.hpp); with a profile it times its parts.
    const hr::StepResult r = hr::train_step(model, optimizer, batches[s], {.clip = 1.0});
    const auto t1 = Clock::now();
    const double c1 = process_cpu_ms();
    const double value = r.loss;
    if (!r.updated) {
      throw std::runtime_error(fmt::format("loss is {} at step {}", value, s + 1));
    }
    if (s == 0) initial_loss = value;
    final_loss = value;
    if (s >= o.warmup_steps) {
      ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      cpu_ms.push_back(c1 - c0);
    }
    if ((s + 1) % 10 == 0) std::cerr << fmt::format("headroom: step {}/{}\n", s + 1, batches.size());
  }

  const hr::ParallelStats pool = hr::parallel_stats();
  if (profile) print_profile(*profile, ms, o.steps);
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const double median = quantile(sorted, 0.5);
  std::sort(cpu_ms.begin(), cpu_ms.end());
  const double tokens_per_s = static_cast<double>(o.batch * o.seq_len) / (median / 1000.0);
  const double flops = step_gemm_flops(o, config);
  std::cout << fmt::format(
      "{{\"impl\": \"headroom\", \"d_model\": {}, \"n_heads\": {}, \"n_kv_heads\": {}, \"n_layers\": {}, "
      "\"d_ff\": {}, \"pos\": \"{}\", \"norm_type\": \"{}\", \"ffn\": \"{}\", \"bias\": {}, \"seq_len\": {}, "
      "\"batch\": {}, \"vocab\": {}, \"threads\": {}, \"threads_used\": {}, \"steps\": {}, \"warmup_steps\": {}, "
      "\"parameters\": {}, \"initial_loss\": {:.6f}, \"final_loss\": {:.6f}, \"ln_vocab\": {:.6f}, "
      "\"median_ms\": {:.4f}, \"p10_ms\": {:.4f}, \"p90_ms\": {:.4f}, \"median_cpu_ms\": {:.4f}, "
      "\"tokens_per_s\": {:.1f}, \"peak_rss_mib\": {:.1f}, \"gemm_flops\": {:.6g}, \"step_gflops\": {:.3f}, "
      "\"gemm_gflops\": {:.3f}, \"gemm_library\": \"{}\", \"blis_kernels\": \"{}\", \"blis_kernels_id\": {}, "
      "\"loops_shared\": {}, \"loops_kept\": {}, \"loops_lost_ms\": {:.3f}, \"loops_shared_ms\": {:.3f}, "
      "\"loops_busy_ms\": {:.3f}, \"loops_kept_ms\": {:.3f}, \"ms_per_step\": [{:.4f}]}}\n",
      o.d_model, o.n_heads, config->n_kv_heads, o.n_layers, config->d_ff, hr::to_string(config->pos),
      hr::to_string(config->norm_type), hr::to_string(config->ffn), config->bias, o.seq_len, o.batch, o.vocab,
      o.threads, threads_used, o.steps, o.warmup_steps,
      model.parameter_count(), initial_loss, final_loss, std::log(static_cast<double>(o.vocab)), median,
      quantile(sorted, 0.1), quantile(sorted, 0.9), quantile(cpu_ms, 0.5), tokens_per_s, peak_rss_mib(),
      flops, flops / (median / 1000.0) / 1e9, gemm_gflops(o), hr::gemm_library().name, hr::gemm_library().kernels,
      hr::gemm_library().kernels_id, pool.shared - pool_before.shared, pool.kept - pool_before.kept,
      pool.lost_ms - pool_before.lost_ms, pool.shared_ms - pool_before.shared_ms, pool.busy_ms - pool_before.busy_ms,
      pool.kept_ms - pool_before.kept_ms, fmt::join(ms, ", "));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times full headroom training steps (see bench/README.md); prints one JSON line.",
               "train_step_bench"};
  BenchOptions o;
  app.add_option("--d-model", o.d_model, "model width C")->capture_default_str();
  app.add_option("--heads", o.n_heads, "attention heads")->capture_default_str();
  app.add_option("--layers", o.n_layers, "transformer blocks")->capture_default_str();
  app.add_option("--kv-heads", o.n_kv_heads, "key/value heads (n_kv_heads; 0: --heads)")->capture_default_str();
  app.add_option("--d-ff", o.d_ff, "feed-forward width (0: 4 d_model, or 8 ceil(d_model / 3) with --ffn swiglu)")
      ->capture_default_str();
  app.add_option("--pos", o.pos, "learned | sinusoidal | rope | none (docs/design.md #17)")->capture_default_str();
  app.add_option("--norm-type", o.norm_type, "layernorm | rmsnorm")->capture_default_str();
  app.add_option("--ffn", o.ffn, "mlp | swiglu")->capture_default_str();
  app.add_flag("--no-bias", o.no_bias, "Linear layers without bias");
  app.add_option("--seq-len", o.seq_len, "T, tokens per row fed to the model")->capture_default_str();
  app.add_option("--batch", o.batch, "B, rows per step")->capture_default_str();
  app.add_option("--vocab", o.vocab, "V, token ids are uniform in [0, V)")->capture_default_str();
  app.add_option("--steps", o.steps, "timed steps")->capture_default_str();
  app.add_option("--warmup-steps", o.warmup_steps, "untimed steps before them")->capture_default_str();
  app.add_option("--threads", o.threads, "threads for the GEMMs and headroom's own loops (headroom::set_threads)")->capture_default_str();
  app.add_option("--seed", o.seed, "seeds the weights and the batches")->capture_default_str();
  app.add_option("--allocator", o.allocator,
                 "retain: keep freed buffers for the next step (headroom::retain_freed_memory, what headroom train "
                 "does); glibc: the C library's defaults")
      ->check(CLI::IsMember({"retain", "glibc"}))
      ->capture_default_str();
  app.add_flag("--profile", o.profile,
               "also time the timed steps per op kind (forward and backward) and print the table on stderr; "
               "the timing itself costs a little");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "train_step_bench: error: " << e.what() << "\n";
    return 2;
  }
  try {
    return run(o);
  } catch (const std::invalid_argument& e) {
    std::cerr << "train_step_bench: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "train_step_bench: error: " << e.what() << "\n";
    return 3;
  }
}
