#include "train/step.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "autograd/parallel.hpp"
#include "autograd/profile.hpp"
#include "nn/dropout.hpp"
#include "optim/clip.hpp"

namespace headroom {
namespace {

// f(), timed as a section of the thread's profile when there is one.
template <typename F>
void part(const char* name, F&& f) {
  if (OpProfile* profile = OpProfile::active()) {
    profile->section(name, f);
  } else {
    f();
  }
}

// The batch's rows cut into shards for a data-parallel step: shard s of n covers rows
// [s B / n, (s + 1) B / n), and counts `targets` of them. Shards that count no
// target are left out (their rows add nothing to the loss or its gradient).
struct Shard {
  std::size_t begin = 0, end = 0;
  std::size_t targets = 0;
};

std::vector<Shard> shards_of(const IndexArray& tokens, const Mask* target_mask, std::size_t n) {
  const std::size_t B = tokens.shape()[0];
  const std::size_t T = tokens.shape()[1] - 1;
  std::vector<Shard> shards;
  for (std::size_t s = 0; s < n; ++s) {
    Shard shard{.begin = s * B / n, .end = (s + 1) * B / n};
    if (target_mask == nullptr) {
      shard.targets = (shard.end - shard.begin) * T;
    } else {
      const bool* m = target_mask->data();
      shard.targets = static_cast<std::size_t>(std::count(m + shard.begin * T, m + shard.end * T, true));
    }
    if (shard.targets > 0) shards.push_back(shard);
  }
  return shards;
}

// Rows [begin, end) of a row-major (B, ...) array.
template <typename A>
A rows(const A& a, std::size_t begin, std::size_t end) {
  Shape shape(a.shape().begin(), a.shape().end());
  const std::size_t width = a.size() / shape[0];
  shape[0] = end - begin;
  A out = A::from_shape(shape);
  std::copy(a.data() + begin * width, a.data() + end * width, out.data());
  return out;
}

// The loss and its gradient, the batch cut into one shard per thread (docs/design.md
// #threads): each shard runs forward and backward on its own thread and tape, on
// one core's cache, and the threads meet once instead of at every op. Shard s's mean
// loss weighs n_s / N (its share of the counted targets), which is also the upstream
// gradient its backward starts from, so the sum is the batch's mean loss and its
// gradient. Shard 0 writes the parameters' gradients, the others collect theirs
// apart, added in shard order afterwards: deterministic for a given thread count,
// equal to one thread's up to float rounding. Returns false, with `r` untouched,
// when the batch cannot be cut (fewer than two shards count a target).
bool sharded_loss_and_backward(TransformerLM<float>& model, const IndexArray& tokens, const Mask* target_mask,
                               const StepOptions& options, StepResult& r) {
  const std::vector<Shard> shards = shards_of(tokens, target_mask, static_cast<std::size_t>(threads()));
  if (shards.size() < 2) return false;
  std::size_t total = 0;
  for (const Shard& shard : shards) total += shard.targets;
  const std::size_t n = shards.size();
  std::vector<float> losses(n, NAN);
  std::vector<std::string> anomalies(n);
  std::vector<std::exception_ptr> errors(n);
  std::vector<LeafGradients<float>> collected(n);
  double own_ms = 0;  // the calling thread's time in its shards, with a profile
  std::vector<std::function<void()>> tasks;
  for (std::size_t s = 0; s < n; ++s) {
    tasks.emplace_back([&, s] {
      struct ClearTape {  // this thread's tape, whatever happens
        ~ClearTape() { clear_tape<float>(); }
      } clear;
      const Shard& shard = shards[s];
      const float weight = static_cast<float>(shard.targets) / static_cast<float>(total);
      const auto forward_backward = [&] {
        std::optional<DetectAnomaly> anomaly;
        if (options.detect_anomaly) anomaly.emplace();
        std::optional<DropoutSeed> masks;
        if (options.dropout_seed) masks.emplace(stream_seed(*options.dropout_seed, s));
        const IndexArray shard_tokens = rows(tokens, shard.begin, shard.end);
        std::optional<Mask> shard_mask;
        if (target_mask) shard_mask = rows(*target_mask, shard.begin, shard.end);
        Tensor<float> loss = model.loss(shard_tokens, shard_mask ? &*shard_mask : nullptr);
        losses[s] = loss.item();
        if (!std::isfinite(losses[s])) return;
        xt::xarray<float> upstream = xt::xarray<float>::from_shape(loss.shape());
        upstream.fill(weight);
        part("(backward: tape walk)", [&] { loss.backward(upstream); });
      };
      // The profile, when there is one, is the calling thread's: it times the ops of
      // the shards that thread ran, and how long it then waited for the others.
      struct OwnTime {
        OpProfile::Clock::time_point started = OpProfile::Clock::now();
        double& ms;
        ~OwnTime() {
          if (!OpProfile::active()) return;
          ms += std::chrono::duration<double, std::milli>(OpProfile::Clock::now() - started).count();
        }
      } own{.ms = own_ms};
      try {
        if (s == 0) {
          forward_backward();
        } else {
          collected[s].collect(forward_backward);
        }
      } catch (const AnomalyError& e) {
        anomalies[s] = e.what();
      } catch (...) {
        errors[s] = std::current_exception();
      }
    });
  }
  const auto started = OpProfile::Clock::now();
  parallel_tasks(tasks);
  if (OpProfile* profile = OpProfile::active()) {
    const double wall_ms = std::chrono::duration<double, std::milli>(OpProfile::Clock::now() - started).count();
    profile->add("(shards: waiting for the other threads)", false, std::max(0.0, wall_ms - own_ms));
    profile->lap();
  }
  // The first shard's error, whichever thread met it first.
  for (std::size_t s = 0; s < n; ++s) {
    if (errors[s]) std::rethrow_exception(errors[s]);
  }
  double loss = 0;
  for (std::size_t s = 0; s < n; ++s) loss += static_cast<double>(losses[s]) * static_cast<double>(shards[s].targets);
  r.loss = static_cast<float>(loss / static_cast<double>(total));
  for (std::size_t s = 0; s < n; ++s) {
    if (!anomalies[s].empty()) {
      r.anomaly = anomalies[s];
      return true;
    }
  }
  if (!std::isfinite(r.loss)) return true;
  part("(backward: shards' gradients)", [&] {
    for (std::size_t s = 1; s < n; ++s) collected[s].add_to_leaves();
  });
  return true;
}

StepResult step(TransformerLM<float>& model, Optimizer<float>& optimizer, const IndexArray& tokens,
                const Mask* target_mask, const StepOptions& options) {
  if (model.is_training() && model.config().dropout > 0 && !options.dropout_seed) {
    throw std::invalid_argument(fmt::format(
        "train_step: the model has dropout {}, so StepOptions::dropout_seed must say where its masks come from",
        model.config().dropout));
  }
  StepResult r{.loss = NAN, .grad_norm = NAN};
  part("(zero_grad)", [&] { optimizer.zero_grad(); });
  const auto clip = [&] {
    part("(clip_grad_norm)", [&] {
      const NamedParameters<float>& params = optimizer.parameters();
      r.grad_norm = options.clip > 0 ? clip_grad_norm(params, options.clip) : grad_norm(params);
    });
  };
  if (threads() > 1 && sharded_loss_and_backward(model, tokens, target_mask, options, r)) {
    if (std::isfinite(r.loss) && r.anomaly.empty()) clip();
  } else {
    try {
      std::optional<DetectAnomaly> anomaly;
      if (options.detect_anomaly) anomaly.emplace();
      std::optional<DropoutSeed> masks;  // as shard 0 of a sharded step
      if (options.dropout_seed) masks.emplace(stream_seed(*options.dropout_seed, 0));
      Tensor<float> loss = model.loss(tokens, target_mask);
      r.loss = loss.item();
      if (std::isfinite(r.loss)) {
        part("(backward: tape walk)", [&] { loss.backward(); });
        clip();
      }
    } catch (const AnomalyError& e) {
      r.anomaly = e.what();
    }
    clear_tape<float>();  // a skipped backward leaves the forward's history behind
  }
  if (options.lr) optimizer.set_lr(*options.lr);
  r.updated = std::isfinite(r.loss) && std::isfinite(r.grad_norm);
  if (r.updated) part("(optimizer step)", [&] { optimizer.step(); });
  return r;
}

}  // namespace

int step_threads_that_pay(int requested, double step_flops, std::size_t batch) {
  if (batch < 2) return threads_that_pay(requested, step_flops);
  const int paying = threads_that_pay(requested, step_flops, kFlopsPerExtraShard);
  return static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(paying), batch));
}

StepResult train_step(TransformerLM<float>& model, Optimizer<float>& optimizer, const Batch& batch,
                      const StepOptions& options) {
  return step(model, optimizer, batch.tokens, &batch.target_mask, options);
}

StepResult train_step(TransformerLM<float>& model, Optimizer<float>& optimizer, const IndexArray& tokens,
                      const StepOptions& options) {
  return step(model, optimizer, tokens, nullptr, options);
}

}  // namespace headroom
