#include "train/step.hpp"

#include <cmath>

#include "autograd/profile.hpp"
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

StepResult step(TransformerLM<float>& model, Optimizer<float>& optimizer, const IndexArray& tokens,
                const Mask* target_mask, const StepOptions& options) {
  StepResult r{.loss = NAN, .grad_norm = NAN};
  part("(zero_grad)", [&] { optimizer.zero_grad(); });
  try {
    std::optional<DetectAnomaly> anomaly;
    if (options.detect_anomaly) anomaly.emplace();
    Tensor<float> loss = model.loss(tokens, target_mask);
    r.loss = loss.item();
    if (std::isfinite(r.loss)) {
      part("(backward: tape walk)", [&] { loss.backward(); });
      part("(clip_grad_norm)", [&] {
        const NamedParameters<float>& params = optimizer.parameters();
        r.grad_norm = options.clip > 0 ? clip_grad_norm(params, options.clip) : grad_norm(params);
      });
    }
  } catch (const AnomalyError& e) {
    r.anomaly = e.what();
  }
  clear_tape<float>();  // a skipped backward leaves the forward's history behind
  if (options.lr) optimizer.set_lr(*options.lr);
  r.updated = std::isfinite(r.loss) && std::isfinite(r.grad_norm);
  if (r.updated) part("(optimizer step)", [&] { optimizer.step(); });
  return r;
}

}  // namespace

StepResult train_step(TransformerLM<float>& model, Optimizer<float>& optimizer, const Batch& batch,
                      const StepOptions& options) {
  return step(model, optimizer, batch.tokens, &batch.target_mask, options);
}

StepResult train_step(TransformerLM<float>& model, Optimizer<float>& optimizer, const IndexArray& tokens,
                      const StepOptions& options) {
  return step(model, optimizer, tokens, nullptr, options);
}

}  // namespace headroom
