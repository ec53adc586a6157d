// A whole training step on two threads (set_threads: the GEMM library's and
// headroom's own loops) against one: the same loss and gradients up to float
// rounding, and exactly the same on a second run with the same thread count.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "autograd/parallel.hpp"
#include "autograd/random.hpp"
#include "nn/transformer.hpp"

namespace hr = headroom;

namespace {

struct StepResult {
  float loss = 0;
  std::vector<std::pair<std::string, xt::xarray<float>>> grads;
};

// One forward and backward of a small LM, wide enough that parallel_for splits
// its loops (LayerNorm and GELU chunks of 16384 elements) at 2 threads.
StepResult step(int threads) {
  hr::set_threads(threads);
  const hr::ModelConfig config{.vocab = 17, .d_model = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                               .max_len = 48};
  hr::Rng rng(3);
  hr::TransformerLM<float> model(config, rng);
  hr::IndexArray tokens = hr::IndexArray::from_shape({24, 49});  // (B, T+1)
  for (auto& t : tokens) t = static_cast<hr::Index>(rng.below(config.vocab));
  hr::Tensor<float> loss = model.loss(tokens);
  loss.backward();
  StepResult r{loss.item(), {}};
  for (auto& [name, p] : model.named_parameters()) r.grads.emplace_back(name, p.grad());
  hr::set_threads(1);
  return r;
}

}  // namespace

TEST_CASE("a training step on 2 threads matches 1 thread, and repeats exactly") {
  const StepResult one = step(1);
  const StepResult two = step(2);
  const StepResult again = step(2);
  CHECK(std::abs(one.loss - two.loss) <= 1e-5f * std::abs(one.loss));
  CHECK(two.loss == again.loss);
  REQUIRE(one.grads.size() == two.grads.size());
  for (std::size_t i = 0; i < one.grads.size(); ++i) {
    const auto& [name, g1] = one.grads[i];
    const xt::xarray<float>& g2 = two.grads[i].second;
    CAPTURE(name);
    REQUIRE(g1.shape() == g2.shape());
    // Float sums in another order: compare against the gradient's own scale.
    const float scale = xt::amax(xt::abs(g1))();
    float worst = 0;
    std::size_t worst_index = 0;
    for (std::size_t j = 0; j < g1.size(); ++j) {
      const float d = std::abs(g1.data()[j] - g2.data()[j]);
      if (d > worst) {
        worst = d;
        worst_index = j;
      }
    }
    CAPTURE(worst_index);
    CAPTURE(g1.data()[worst_index]);
    CAPTURE(g2.data()[worst_index]);
    CHECK(worst <= 1e-4f * scale + 1e-7f);
    CHECK(std::equal(g2.begin(), g2.end(), again.grads[i].second.begin()));  // same threads: bit for bit
  }
}
