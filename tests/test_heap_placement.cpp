// A float32 training step gives the same bits wherever the heap puts its buffers
// (docs/design.md: a seed gives the same weights bit for bit). The vectorised row
// kernels (autograd/fast_math.hpp's HEADROOM_CLONES) once took one of two paths by
// a runtime alias check, a vector multiply-then-add or a scalar fused multiply-add,
// depending on whether a partial-sum buffer lay just after the incoming gradient;
// the kernels are now compiled without contraction (-ffp-contract=off) and their
// pointers are __restrict, so that every path rounds alike. Here the same step runs
// with the heap shifted between runs by allocations of many sizes, which moves every
// buffer the step allocates, and every gradient must match the first run's bits.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "autograd/parallel.hpp"
#include "autograd/random.hpp"
#include "nn/transformer.hpp"

namespace hr = headroom;

namespace {

using Grads = std::vector<std::pair<std::string, xt::xarray<float>>>;

// One forward and backward, on one thread, with `shift` bytes of the heap taken
// (and, for every other shift, touched and freed) first, so that the step's own
// allocations land elsewhere.
Grads step(const hr::ModelConfig& config, std::size_t shift) {
  std::vector<std::unique_ptr<char[]>> held;
  for (std::size_t size = 8; size <= shift; size += 8 + size / 3) {
    held.emplace_back(new char[size]);
    std::memset(held.back().get(), 0, size);
    if (held.size() % 2 == 0) held.pop_back();  // holes of many sizes
  }
  hr::Rng rng(5);
  hr::TransformerLM<float> model(config, rng);
  hr::IndexArray tokens = hr::IndexArray::from_shape({3, config.max_len + 1});  // (B, T+1)
  for (auto& t : tokens) t = static_cast<hr::Index>(rng.below(config.vocab));
  hr::Tensor<float> loss = model.loss(tokens);
  loss.backward();
  Grads grads;
  for (auto& [name, p] : model.named_parameters()) grads.emplace_back(name, p.grad());
  return grads;
}

void check_placement_free(const hr::ModelConfig& config) {
  hr::set_threads(1);
  const Grads first = step(config, 0);
  for (const std::size_t shift : {24u, 200u, 1000u, 4104u, 20000u, 70000u}) {
    const Grads again = step(config, shift);
    REQUIRE(again.size() == first.size());
    for (std::size_t i = 0; i < first.size(); ++i) {
      CAPTURE(shift);
      CAPTURE(first[i].first);
      const xt::xarray<float>& a = first[i].second;
      const xt::xarray<float>& b = again[i].second;
      REQUIRE(a.size() == b.size());
      std::size_t differ = 0;
      for (std::size_t k = 0; k < a.size(); ++k) differ += std::memcmp(&a.data()[k], &b.data()[k], sizeof(float)) != 0;
      CHECK(differ == 0);
    }
  }
}

}  // namespace

// d_model 24 and d_ff 72: rows whose length is not a multiple of any vector width
// (24 mod 16 = 8), so that every kernel has a vector body and a scalar tail.
TEST_CASE("a float32 step's gradients do not depend on where the heap puts its buffers (GPT-2 blocks)") {
  check_placement_free(hr::ModelConfig{.vocab = 19, .d_model = 24, .n_layers = 2, .n_heads = 3, .d_ff = 72,
                                       .max_len = 13, .norm = hr::NormPlacement::post,
                                       .pos = hr::PositionEncoding::sinusoidal});
  check_placement_free(hr::ModelConfig{.vocab = 19, .d_model = 24, .n_layers = 2, .n_heads = 3, .max_len = 13});
}

TEST_CASE("a float32 step's gradients do not depend on where the heap puts its buffers (Llama blocks)") {
  check_placement_free(hr::ModelConfig{.vocab = 19, .d_model = 24, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                                       .max_len = 13, .pos = hr::PositionEncoding::rope, .bias = false,
                                       .norm_type = hr::NormType::rmsnorm, .ffn = hr::FeedForwardType::swiglu,
                                       .qk_norm = true});
}
