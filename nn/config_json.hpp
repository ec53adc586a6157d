// The JSON form of ModelConfig for code that already speaks nlohmann::json (the
// CLI's config.json nests it). Kept apart from config.hpp so that only the files
// that need nlohmann's large header include it.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "nn/config.hpp"

namespace headroom {

// Every key written explicitly; a plain config is resolved first.
nlohmann::json to_json(const ModelConfig& config);
nlohmann::json to_json(const ResolvedModelConfig& config);
// Reads the keys of `object` into `config` (keys absent stay as they are). Unknown
// keys and wrong types are errors naming `source` and the key.
void update_from_json(ModelConfig& config, const nlohmann::json& object, const std::string& source);

}  // namespace headroom
