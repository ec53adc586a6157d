// Writes the seed corpus of safetensors_fuzz into a directory (fuzz/README.md):
//
//     build-fuzz/fuzz/safetensors_make_corpus fuzz/corpus
//
// Small valid files that reach every part of the reader: checkpoints of the four
// configs of fuzz_models.hpp in F32 and F64, a file without metadata, and one with
// a scalar, an empty tensor and header order different from data order.
// tests/test_checkpoint.cpp checks that every committed seed still parses.
#include <cstdio>
#include <exception>

#include "fuzz/fuzz_models.hpp"
#include "nn/checkpoint.hpp"

namespace hr = headroom;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  try {
    const std::filesystem::path dir = argv[1];
    std::filesystem::create_directories(dir);
    hr::Rng rng(0);
    hr::TransformerLM<float> tiny(hr::fuzz::kTinyConfig, rng);
    hr::save_checkpoint(dir / "tiny_f32.safetensors", tiny, hr::fuzz::kTinyConfig);
    hr::save_checkpoint(dir / "tiny_f64.safetensors", tiny, hr::fuzz::kTinyConfig, hr::DType::f64,
                        {{"note", "a float model saved as F64"}});
    hr::TransformerLM<float> variant(hr::fuzz::kVariantConfig, rng);
    hr::save_checkpoint(dir / "variant_f32.safetensors", variant, hr::fuzz::kVariantConfig);
    hr::TransformerLM<float> current(hr::fuzz::kCurrentConfig, rng);
    hr::save_checkpoint(dir / "current_f32.safetensors", current, hr::fuzz::kCurrentConfig);
    hr::TransformerLM<float> qk_positions(hr::fuzz::kQkPositionsConfig, rng);
    hr::save_checkpoint(dir / "qk_positions_f64.safetensors", qk_positions, hr::fuzz::kQkPositionsConfig,
                        hr::DType::f64);

    hr::SafetensorsFile bare = hr::checkpoint_of(tiny, hr::fuzz::kTinyConfig, hr::DType::f32);
    bare.metadata.clear();
    bare.tensors.resize(3);
    hr::write_safetensors(dir / "no_metadata.safetensors", bare);

    hr::SafetensorsFile odd;
    odd.metadata = {{"k", "v"}};
    odd.tensors.push_back(hr::to_record<double>("scalar", xt::xarray<double>(1.5)));
    odd.tensors.push_back(hr::to_record<float>("empty", xt::zeros<float>({0, 3})));
    odd.tensors.push_back(hr::to_record<float>("a.weight", xt::xarray<float>{{1, 2}, {3, 4}}));
    hr::write_safetensors(dir / "scalar_and_empty.safetensors", odd);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "safetensors_make_corpus: %s\n", e.what());
    return 1;
  }
  return 0;
}
