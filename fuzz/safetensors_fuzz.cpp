// libFuzzer target for the checkpoint reader (fuzz/README.md).
//
// Every input goes through parse_safetensors. One that parses must survive a
// serialize/parse round trip unchanged, and is then loaded into a tiny float model
// and, when it carries a small config of its own, into a double model built from
// that config, which then computes a loss. CheckpointError (and the
// std::invalid_argument of a bad config) is the expected way to say no; any other
// exception escapes and aborts, and ASan/UBSan stop on any memory error or
// undefined behaviour, so the fuzzer reports them all as crashes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>

#include <fmt/format.h>

#include "fuzz/fuzz_models.hpp"
#include "nn/checkpoint.hpp"

namespace hr = headroom;

namespace {

[[noreturn]] void fail(const std::string& what) {
  fmt::print(stderr, "safetensors_fuzz: {}\n", what);
  std::abort();
}

bool same(const hr::SafetensorsFile& a, const hr::SafetensorsFile& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) return false;
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    const hr::TensorRecord &x = a.tensors[i], &y = b.tensors[i];
    if (x.name != y.name || x.dtype != y.dtype || x.shape != y.shape || x.data != y.data) return false;
  }
  return true;
}

void load_into_own_config(const hr::SafetensorsFile& file) {
  hr::ModelConfig config;
  try {
    config = hr::checkpoint_config(file, "fuzz");
  } catch (const hr::CheckpointError&) {
    return;
  }
  if (!hr::fuzz::small_enough(config)) return;
  hr::Rng rng(0);
  hr::TransformerLM<double> model(config, rng);
  try {
    hr::load_checkpoint(file, model, "fuzz");
  } catch (const hr::CheckpointError&) {
    return;
  }
  // A loaded model must run: tokens (1, T+1) within the vocabulary and max_len.
  const std::size_t t = std::min<std::size_t>(config.max_len, 3);
  hr::IndexArray tokens = hr::IndexArray::from_shape({1, t + 1});
  for (std::size_t i = 0; i <= t; ++i) tokens(0, i) = static_cast<hr::Index>(i % config.vocab);
  if (t >= 1) {
    hr::NoGrad no_grad;
    (void)model.loss(tokens).item();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  hr::SafetensorsFile file;
  try {
    file = hr::parse_safetensors(bytes, "fuzz");
  } catch (const hr::CheckpointError&) {
    return 0;
  }

  // Whatever parses, we can write and read back unchanged (no exception allowed).
  const hr::SafetensorsFile again = hr::parse_safetensors(hr::serialize_safetensors(file), "fuzz round trip");
  if (!same(file, again)) fail("serialize -> parse changed the file");

  static const std::unique_ptr<hr::TransformerLM<float>> tiny = [] {
    hr::Rng rng(0);
    return std::make_unique<hr::TransformerLM<float>>(hr::fuzz::kTinyConfig, rng);
  }();
  try {
    hr::load_checkpoint(file, *tiny, "fuzz");
  } catch (const hr::CheckpointError&) {
  }
  try {
    load_into_own_config(file);
  } catch (const std::invalid_argument& e) {
    // Not expected: checkpoint_config resolves the config, so the model builds and
    // a loaded model computes its loss. Report it rather than hide it.
    fail(fmt::format("a config that checkpoint_config accepted failed later: {}", e.what()));
  }
  return 0;
}
