// Model checkpoints over the safetensors container: parameters by their
// named_parameters() names (the parameter names of docs/design.md), the config under "config" in
// __metadata__, strict loading through Module::load_state_dict (all or nothing).
#include "nn/checkpoint.hpp"

#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "nn/config_json.hpp"
#include "nn/param_count.hpp"

namespace headroom {

namespace {

constexpr const char* kConfigKey = "config";

std::uint64_t add_sat(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? std::numeric_limits<std::uint64_t>::max() : r;
}
std::uint64_t mul_sat(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<std::uint64_t>::max() : r;
}

// The number of parameter values a resolved config makes TransformerLM allocate
// (count_parameters, which allocates nothing), saturating at the largest uint64 for a
// count beyond 64 bits. load_model compares it with the file before building, so that
// a config claiming a vocabulary of 10^12 is an error rather than an allocation of
// terabytes.
std::uint64_t parameter_values(const ModelConfig& c) {
  try {
    return count_parameters(c, 0).total();
  } catch (const std::invalid_argument&) {
    return std::numeric_limits<std::uint64_t>::max();
  }
}

}  // namespace

template <typename T>
SafetensorsFile checkpoint_of(const TransformerLM<T>& model, const ModelConfig& config, DType dtype,
                              const std::map<std::string, std::string>& extra_metadata) {
  // The file's config must be the one the tensors were made by; name the first key
  // that differs.
  const nlohmann::json given = to_json(config), own = to_json(model.config());
  for (const auto& [key, value] : given.items()) {
    if (own.at(key) != value) {
      throw CheckpointError(fmt::format("checkpoint: the config given does not describe the model: {} is {} but the "
                                        "model has {}",
                                        key, value.dump(), own.at(key).dump()));
    }
  }
  const std::string config_json = model_config_to_json(config);
  SafetensorsFile file;
  file.metadata = extra_metadata;
  if (!file.metadata.emplace(kConfigKey, config_json).second) {
    throw CheckpointError("checkpoint: extra metadata may not use the key 'config' (it holds the model config)");
  }
  for (const auto& [name, p] : model.named_parameters()) {
    file.tensors.push_back(to_record(name, p.value(), dtype));
  }
  return file;
}

template <typename T>
void save_checkpoint(const std::filesystem::path& path, const TransformerLM<T>& model, const ModelConfig& config,
                     const std::map<std::string, std::string>& extra_metadata) {
  save_checkpoint(path, model, config, dtype_of<T>(), extra_metadata);
}

template <typename T>
void save_checkpoint(const std::filesystem::path& path, const TransformerLM<T>& model, const ModelConfig& config,
                     DType dtype, const std::map<std::string, std::string>& extra_metadata) {
  write_safetensors(path, checkpoint_of(model, config, dtype, extra_metadata));
}

ModelConfig checkpoint_config(const SafetensorsFile& file, const std::string& source) {
  const auto it = file.metadata.find(kConfigKey);
  if (it == file.metadata.end()) {
    throw CheckpointError(fmt::format("{}: no model config: __metadata__ has no key 'config'", source));
  }
  try {
    return model_config_from_json(it->second, fmt::format("{}: __metadata__ 'config'", source));
  } catch (const std::invalid_argument& e) {
    throw CheckpointError(e.what());
  }
}

template <typename T>
void load_checkpoint(const SafetensorsFile& file, TransformerLM<T>& model, const std::string& source) {
  // We check names and shapes here to say "checkpoint" and the file in the message;
  // load_state_dict checks them again and copies only when all are right.
  const NamedTensors<T> params = model.named_parameters();
  for (const auto& [name, p] : params) {
    const TensorRecord* t = file.find(name);
    if (t == nullptr) {
      throw CheckpointError(fmt::format("{}: missing tensor '{}' (the model expects shape {})", source, name,
                                        format_shape(p.shape())));
    }
    if (t->shape != p.shape()) {
      throw CheckpointError(fmt::format("{}: tensor '{}' has shape {} but the model expects {}", source, name,
                                        format_shape(t->shape), format_shape(p.shape())));
    }
  }
  for (const TensorRecord& t : file.tensors) {
    bool known = false;
    for (const auto& [name, p] : params) known = known || name == t.name;
    if (!known) {
      throw CheckpointError(fmt::format("{}: unexpected tensor '{}' of shape {} (the model has no such parameter)",
                                        source, t.name, format_shape(t.shape)));
    }
  }
  StateDict<T> dict;
  dict.reserve(file.tensors.size());
  for (const TensorRecord& t : file.tensors) dict.emplace_back(t.name, from_record<T>(t, source));
  try {
    model.load_state_dict(dict);
  } catch (const std::invalid_argument& e) {
    throw CheckpointError(fmt::format("{}: {}", source, e.what()));
  }
}

template <typename T>
LoadedModel<T> load_model(const std::filesystem::path& path) {
  const std::string source = path.string();
  SafetensorsFile file = read_safetensors(path);
  LoadedModel<T> loaded{.config = checkpoint_config(file, source),
                        .metadata = file.metadata,
                        .model = nullptr,
                        .checksummed = file.checksummed};

  // A model of ordinary size is built and loaded, so that a mismatch is named
  // tensor by tensor; one far larger than the file is refused before it is
  // allocated, and so is a sinusoidal table of more than 2^28 values (1 GiB).
  std::uint64_t in_file = 0;
  for (const TensorRecord& t : file.tensors) in_file = add_sat(in_file, shape_size(t.shape));
  const ModelConfig& c = loaded.config;
  const std::uint64_t wanted = parameter_values(c);
  if (wanted > (std::uint64_t{1} << 24) && wanted > in_file) {
    throw CheckpointError(fmt::format("{}: the config describes {} parameter values but the file holds only {}",
                                      source, wanted, in_file));
  }
  if (c.pos == PositionEncoding::sinusoidal && mul_sat(c.max_len, c.d_model) > (std::uint64_t{1} << 28)) {
    throw CheckpointError(fmt::format("{}: a sinusoidal table of max_len {} x d_model {} is more than 2^28 values",
                                      source, c.max_len, c.d_model));
  }
  Rng rng(0);  // every value is overwritten by the load
  loaded.model = std::make_unique<TransformerLM<T>>(loaded.config, rng);
  // The guard above must never count more than the model holds, or it would refuse
  // a good file; every load_model checks the count (the tests and the fuzzer too).
  if (loaded.model->parameter_count() != wanted) {
    throw std::logic_error(fmt::format("load_model: the size guard counts {} parameter values but the model has {}",
                                       wanted, loaded.model->parameter_count()));
  }
  load_checkpoint(file, *loaded.model, source);
  return loaded;
}

#define HEADROOM_CHECKPOINT_INSTANTIATE(T)                                                                         \
  template SafetensorsFile checkpoint_of<T>(const TransformerLM<T>&, const ModelConfig&, DType,                   \
                                            const std::map<std::string, std::string>&);                           \
  template void save_checkpoint<T>(const std::filesystem::path&, const TransformerLM<T>&, const ModelConfig&,     \
                                   const std::map<std::string, std::string>&);                                    \
  template void save_checkpoint<T>(const std::filesystem::path&, const TransformerLM<T>&, const ModelConfig&,     \
                                   DType, const std::map<std::string, std::string>&);                             \
  template void load_checkpoint<T>(const SafetensorsFile&, TransformerLM<T>&, const std::string&);                \
  template LoadedModel<T> load_model<T>(const std::filesystem::path&);

HEADROOM_CHECKPOINT_INSTANTIATE(float)
HEADROOM_CHECKPOINT_INSTANTIATE(double)

}  // namespace headroom
