// Model checkpoints: a TransformerLM's parameters in a safetensors file, named and
// laid out as docs/design.md lists them (PyTorch's state_dict), with the model's config
// as a JSON string under "config" in __metadata__ (every key written explicitly).
// A checkpoint loads into a plain PyTorch model without renaming
// (examples/load_checkpoint.py).
//
//     save_checkpoint("run/model.safetensors", model, config);
//     auto model = load_model<float>("run/model.safetensors");   // config from the file
//
// Loading is strict: a missing or extra parameter, a shape that disagrees with the
// config, a dtype we cannot convert, or a config that does not parse is a
// CheckpointError naming the file, the tensor and the problem; nothing is changed
// in the model on error.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "nn/config.hpp"
#include "nn/safetensors.hpp"
#include "nn/transformer.hpp"

namespace headroom {

// The parameters of `model` (built from `config`) as a SafetensorsFile in `dtype`,
// with metadata {"config": model_config_to_json(config)} plus `extra_metadata`
// (for instance the trainer's data description). Does not touch the disk.
template <typename T>
SafetensorsFile checkpoint_of(const TransformerLM<T>& model, const ModelConfig& config, DType dtype,
                              const std::map<std::string, std::string>& extra_metadata = {});

// checkpoint_of, written atomically (nn/safetensors.hpp). dtype defaults to T's.
template <typename T>
void save_checkpoint(const std::filesystem::path& path, const TransformerLM<T>& model, const ModelConfig& config,
                     const std::map<std::string, std::string>& extra_metadata = {});
template <typename T>
void save_checkpoint(const std::filesystem::path& path, const TransformerLM<T>& model, const ModelConfig& config,
                     DType dtype, const std::map<std::string, std::string>& extra_metadata = {});

// The model config a checkpoint carries (metadata "config"), resolved and checked.
ModelConfig checkpoint_config(const SafetensorsFile& file, const std::string& source);

// Copies a checkpoint's parameters into `model`, converting F32 <-> F64 as needed.
// Strict as described above; `source` names the file in errors.
template <typename T>
void load_checkpoint(const SafetensorsFile& file, TransformerLM<T>& model, const std::string& source);

// A model built from the checkpoint's own config, then loaded.
template <typename T>
struct LoadedModel {
  ModelConfig config;
  std::map<std::string, std::string> metadata;  // the whole __metadata__ but the checksums
  std::unique_ptr<TransformerLM<T>> model;
  bool checksummed = false;  // every tensor's data matched its checksum (SafetensorsFile)
};
template <typename T>
LoadedModel<T> load_model(const std::filesystem::path& path);

}  // namespace headroom
