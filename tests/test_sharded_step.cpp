// A training step on more than one thread cuts the batch into one shard per thread,
// each run forward and backward on its own thread (train/step.cpp, docs/design.md
// #threads). Against its plain twin, the whole batch on one thread: the same loss,
// gradient norm and gradients up to float rounding, and the same bits again on the
// same thread count; shards that count no target are left out and the others
// weighed by their targets; an anomaly or a bad target in a shard ends the step as
// it does on one thread, and the next step trains. With dropout, each shard draws its
// masks from its own stream of the step's dropout seed.
#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "autograd/parallel.hpp"
#include "nn/dropout.hpp"
#include "train/optim_setup.hpp"
#include "train/step.hpp"
#include "train/trainer.hpp"

namespace hr = headroom;

namespace {

struct Threads {
  explicit Threads(int n) { hr::set_threads(n); }
  ~Threads() { hr::set_threads(1); }
};

hr::TrainConfig small_copy() {
  hr::TrainConfig c;
  c.model.d_model = 32;
  c.model.n_heads = 2;
  c.model.n_kv_heads = 1;
  c.model.n_layers = 2;
  c.data = {.task = "copy", .text = "", .seq_len = 8, .vocab = 8};
  c.optim.batch = 6;
  return c;
}

struct Outcome {
  hr::StepResult step;
  std::vector<std::pair<std::string, xt::xarray<float>>> grads;
};

// One step from the seed's weights on `batch`, with a zero learning rate (the
// gradients stay in the parameters) and no clipping (the norm is only measured).
Outcome one_step(const hr::TrainConfig& c, const hr::Batch& batch, int threads, bool detect_anomaly = false,
                 float poison = 0) {
  const Threads t(threads);
  hr::Rng rng(11);
  hr::TransformerLM<float> model(c.model, rng);
  if (poison != 0) model.named_parameters().back().second.mutable_value().fill(poison);
  const auto optimizer = hr::make_optimizer(c.optim, model.named_parameters());
  Outcome o;
  o.step = hr::train_step(model, *optimizer, batch, {.lr = 0.0, .clip = 0, .detect_anomaly = detect_anomaly});
  if (o.step.updated) {
    for (auto& [name, p] : model.named_parameters()) o.grads.emplace_back(name, p.grad());
  }
  return o;
}

void check_close(const Outcome& one, const Outcome& sharded) {
  CHECK(std::abs(one.step.loss - sharded.step.loss) <= 1e-6 * std::abs(one.step.loss));
  CHECK(std::abs(one.step.grad_norm - sharded.step.grad_norm) <= 1e-5 * one.step.grad_norm);
  REQUIRE(one.grads.size() == sharded.grads.size());
  for (std::size_t i = 0; i < one.grads.size(); ++i) {
    const auto& [name, g1] = one.grads[i];
    const xt::xarray<float>& g2 = sharded.grads[i].second;
    CAPTURE(name);
    REQUIRE(g1.shape() == g2.shape());
    const float scale = xt::amax(xt::abs(g1))();
    float worst = 0;
    for (std::size_t j = 0; j < g1.size(); ++j) worst = std::max(worst, std::abs(g1.data()[j] - g2.data()[j]));
    CHECK(worst <= 1e-5f * scale + 1e-8f);
  }
}

void check_same_bits(const Outcome& a, const Outcome& b) {
  CHECK(a.step.loss == b.step.loss);
  CHECK(a.step.grad_norm == b.step.grad_norm);
  REQUIRE(a.grads.size() == b.grads.size());
  for (std::size_t i = 0; i < a.grads.size(); ++i) {
    CAPTURE(a.grads[i].first);
    CHECK(std::equal(a.grads[i].second.begin(), a.grads[i].second.end(), b.grads[i].second.begin()));
  }
}

}  // namespace

TEST_CASE("a step on 2 and 3 threads, the batch in shards, matches one thread and repeats bit for bit") {
  hr::TrainConfig c = small_copy();
  auto data = hr::make_dataset(c);
  c = hr::finalize(c, *data);
  hr::Rng rng(4);
  const hr::Batch batch = data->sample(c.optim.batch, hr::Split::train, rng);
  const Outcome one = one_step(c, batch, 1);
  REQUIRE(one.step.updated);
  for (int threads : {2, 3}) {
    CAPTURE(threads);
    const Outcome sharded = one_step(c, batch, threads);
    REQUIRE(sharded.step.updated);
    check_close(one, sharded);
    check_same_bits(sharded, one_step(c, batch, threads));
  }
  CHECK(hr::tape_size<float>() == 0);
}

TEST_CASE("a shard that counts no target is left out, and the others weigh by their targets") {
  hr::TrainConfig c = small_copy();
  auto data = hr::make_dataset(c);
  c = hr::finalize(c, *data);
  hr::Rng rng(5);
  hr::Batch batch = data->sample(c.optim.batch, hr::Split::train, rng);
  const std::size_t T = batch.target_mask.shape()[1];
  // On 3 threads the shards are rows [0, 2), [2, 4), [4, 6): the middle one counts
  // nothing, and row 5 only its first counted target, so the two left differ.
  for (std::size_t t = 0; t < T; ++t) {
    batch.target_mask(2, t) = false;
    batch.target_mask(3, t) = false;
  }
  bool first = true;
  for (std::size_t t = 0; t < T; ++t) {
    if (batch.target_mask(5, t)) {
      batch.target_mask(5, t) = first;
      first = false;
    }
  }
  REQUIRE_FALSE(first);
  const Outcome one = one_step(c, batch, 1);
  const Outcome three = one_step(c, batch, 3);
  REQUIRE(three.step.updated);
  check_close(one, three);
  check_same_bits(three, one_step(c, batch, 3));

  // A batch that counts nothing at all fails as it does on one thread.
  for (auto& m : batch.target_mask) m = false;
  CHECK_THROWS_WITH_AS(one_step(c, batch, 1), doctest::Contains("no position counts"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(one_step(c, batch, 3), doctest::Contains("no position counts"), std::invalid_argument);
}

TEST_CASE("an anomaly or a bad target in a shard ends the step as on one thread, and the next step trains") {
  hr::TrainConfig c = small_copy();
  auto data = hr::make_dataset(c);
  c = hr::finalize(c, *data);
  hr::Rng rng(6);
  const hr::Batch batch = data->sample(c.optim.batch, hr::Split::train, rng);
  // Output weights of 3e38 make the head's product overflow to inf from finite inputs
  // (a LayerNorm output above 1.14 in size is enough).
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    const Outcome caught = one_step(c, batch, threads, /*detect_anomaly=*/true, 3e38f);
    CHECK_FALSE(caught.step.updated);
    CHECK(caught.step.anomaly.find("anomaly: forward of 'linear'") == 0);
    const Outcome unchecked = one_step(c, batch, threads, /*detect_anomaly=*/false, 3e38f);
    CHECK_FALSE(unchecked.step.updated);
    CHECK(unchecked.step.anomaly.empty());
    CHECK(one_step(c, batch, threads).step.updated);
  }

  hr::Batch bad = batch;
  // The last row's last token is only a target (no input): out of range there.
  bad.tokens(c.optim.batch - 1, bad.tokens.shape()[1] - 1) = 99;
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    CHECK_THROWS_WITH_AS(one_step(c, bad, threads), doctest::Contains("is out of range for 8 classes"),
                         std::invalid_argument);
    CHECK(one_step(c, batch, threads).step.updated);
  }
  CHECK(hr::tape_size<float>() == 0);
}

TEST_CASE("with dropout, shard s draws from stream s of the step's seed, and a sharded step repeats bit for bit") {
  hr::TrainConfig c = small_copy();
  c.model.dropout = 0.3;
  auto data = hr::make_dataset(c);
  c = hr::finalize(c, *data);
  hr::Rng rng(7);
  const hr::Batch batch = data->sample(c.optim.batch, hr::Split::train, rng);
  const auto step = [&](int threads, std::optional<std::uint64_t> seed) {
    const Threads t(threads);
    hr::Rng init(11);
    hr::TransformerLM<float> model(c.model, init);
    const auto optimizer = hr::make_optimizer(c.optim, model.named_parameters());
    return hr::train_step(model, *optimizer, batch, {.lr = 0.0, .clip = 0, .dropout_seed = seed});
  };
  CHECK_THROWS_WITH_AS(step(1, std::nullopt),
                       "train_step: the model has dropout 0.3, so StepOptions::dropout_seed must say where its masks "
                       "come from",
                       std::invalid_argument);
  for (int threads : {1, 2, 3}) {
    CAPTURE(threads);
    const hr::StepResult a = step(threads, 40);
    REQUIRE(a.updated);
    const hr::StepResult again = step(threads, 40);
    CHECK(again.loss == a.loss);
    CHECK(again.grad_norm == a.grad_norm);
    CHECK(step(threads, 41).loss != a.loss);
    // The step's loss is its shards' losses weighed by their targets, each shard's
    // forward under DropoutSeed(stream_seed(40, s)): the rows [s B / n, (s + 1) B / n).
    hr::Rng init(11);
    hr::TransformerLM<float> model(c.model, init);
    const hr::NoGrad no_grad;
    const std::size_t B = c.optim.batch, T = batch.target_mask.shape()[1], n = static_cast<std::size_t>(threads);
    double weighed = 0, counted = 0;
    for (std::size_t s = 0; s < n; ++s) {
      const std::size_t begin = s * B / n, end = (s + 1) * B / n;
      hr::IndexArray rows = hr::IndexArray::from_shape({end - begin, T + 1});
      hr::Mask mask = hr::Mask::from_shape({end - begin, T});
      std::copy(batch.tokens.data() + begin * (T + 1), batch.tokens.data() + end * (T + 1), rows.data());
      std::copy(batch.target_mask.data() + begin * T, batch.target_mask.data() + end * T, mask.data());
      const double targets = static_cast<double>(std::count(mask.begin(), mask.end(), true));
      const hr::DropoutSeed masks(hr::stream_seed(40, s));
      weighed += targets * model.loss(rows, &mask).item();
      counted += targets;
    }
    CHECK(a.loss == doctest::Approx(weighed / counted).epsilon(1e-6));
  }
  CHECK(hr::tape_size<float>() == 0);
}
