// Checkpoints: the safetensors container (layout, strict parser, atomic writer) and
// model save/load (bit-exact round trips, dtype conversion, strict name and shape
// checks). The parser is fed every truncation of a valid file, a table of
// hand-broken headers and a few thousand random byte flips: each must parse or be a
// CheckpointError, never a crash or another exception. fuzz/ goes further.
#include <algorithm>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <span>

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "nn/checkpoint.hpp"
#include "nn/crc32c.hpp"
#include "support.hpp"

namespace hr = headroom;
namespace fs = std::filesystem;

namespace {

const hr::ModelConfig kTiny{.vocab = 7, .d_model = 8, .n_layers = 1, .n_heads = 2, .max_len = 6};

// Every parameter drawn afresh, so no tensor is all zeros or all ones and a
// transposed or swapped tensor cannot go unnoticed.
template <typename T>
void scramble(hr::TransformerLM<T>& model, std::uint64_t seed) {
  hr::Rng rng(seed);
  for (auto& [name, p] : model.named_parameters()) {
    for (auto& v : p.mutable_value()) v = static_cast<T>(0.5 * rng.normal());
  }
}

template <typename T>
std::unique_ptr<hr::TransformerLM<T>> tiny_model(std::uint64_t seed, const hr::ModelConfig& config = kTiny) {
  hr::Rng rng(seed);
  auto model = std::make_unique<hr::TransformerLM<T>>(config, rng);
  scramble(*model, seed + 1);
  return model;
}

// The bytes of a file with this header text and `data` zero bytes after it; the
// length field is the header's size unless given.
std::vector<std::byte> file_bytes(std::string_view header, std::size_t data = 0,
                                  std::optional<std::uint64_t> length = std::nullopt) {
  const std::uint64_t n = length.value_or(header.size());
  std::vector<std::byte> out(8 + header.size() + data);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

// One tensor's header entry.
std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return fmt::format(R"("{}": {{"dtype": {}, "shape": {}, "data_offsets": {}}})", name, dtype, shape, offsets);
}

// A header object of these entries.
std::string object(std::initializer_list<std::string> entries) { return fmt::format("{{{}}}", fmt::join(entries, ", ")); }

template <typename A, typename B>
void check_same_parameters(const hr::TransformerLM<A>& a, const hr::TransformerLM<B>& b) {
  const auto pa = a.named_parameters();
  const auto pb = b.named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) {
    REQUIRE(pa[i].first == pb[i].first);
    REQUIRE(pa[i].second.shape() == pb[i].second.shape());
    const A* va = pa[i].second.value().data();
    const B* vb = pb[i].second.value().data();
    for (std::size_t j = 0; j < pa[i].second.size(); ++j) {
      // Compared in the narrower type: float -> double -> float is exact.
      if (sizeof(A) <= sizeof(B) ? va[j] != static_cast<A>(vb[j]) : static_cast<B>(va[j]) != vb[j]) {
        FAIL_CHECK(pa[i].first << "[" << j << "]: " << va[j] << " vs " << vb[j]);
        return;
      }
    }
  }
}

}  // namespace

TEST_CASE("checkpoint: float and double models round-trip bit-exactly") {
  const TempDir dir("checkpoint");
  SUBCASE("float") {
    auto a = tiny_model<float>(1);
    hr::save_checkpoint(dir.path() / "f.safetensors", *a, kTiny);
    const hr::LoadedModel<float> b = hr::load_model<float>(dir.path() / "f.safetensors");
    check_same_parameters(*a, *b.model);
    CHECK(b.model->config().d_model == 8);
  }
  SUBCASE("double") {
    auto a = tiny_model<double>(2);
    hr::save_checkpoint(dir.path() / "d.safetensors", *a, kTiny);
    CHECK(hr::read_safetensors(dir.path() / "d.safetensors").tensors.at(0).dtype == hr::DType::f64);
    check_same_parameters(*a, *hr::load_model<double>(dir.path() / "d.safetensors").model);
  }
  SUBCASE("an F32 file into a double model and back gives the same bytes") {
    auto a = tiny_model<float>(3);
    hr::save_checkpoint(dir.path() / "f32.safetensors", *a, kTiny);
    const hr::LoadedModel<double> d = hr::load_model<double>(dir.path() / "f32.safetensors");
    check_same_parameters(*a, *d.model);
    hr::save_checkpoint(dir.path() / "again.safetensors", *d.model, kTiny, hr::DType::f32);
    CHECK(read_file(dir.path() / "again.safetensors") == read_file(dir.path() / "f32.safetensors"));
  }
  SUBCASE("a float model saved as F64 loads back exactly into float") {
    auto a = tiny_model<float>(4);
    hr::save_checkpoint(dir.path() / "f64.safetensors", *a, kTiny, hr::DType::f64);
    check_same_parameters(*a, *hr::load_model<float>(dir.path() / "f64.safetensors").model);
  }
  SUBCASE("tied, sinusoidal, grouped-query, no-bias, post-norm") {
    const hr::ModelConfig cfg{.vocab = 7, .d_model = 8, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .d_v = 3,
                              .max_len = 6, .norm = hr::NormPlacement::post, .pos = hr::PositionEncoding::sinusoidal,
                              .bias = false, .tie_embeddings = true};
    auto a = tiny_model<float>(5, cfg);
    hr::save_checkpoint(dir.path() / "v.safetensors", *a, cfg);
    const hr::LoadedModel<float> b = hr::load_model<float>(dir.path() / "v.safetensors");
    check_same_parameters(*a, *b.model);
    CHECK(hr::model_config_to_json(b.config) == hr::model_config_to_json(cfg));
  }
}

TEST_CASE("checkpoint: the file is safetensors with the config in __metadata__") {
  auto model = tiny_model<float>(1);
  const hr::SafetensorsFile file = hr::checkpoint_of(*model, kTiny, hr::DType::f32, {{"data", "copy"}});
  const std::vector<std::byte> bytes = hr::serialize_safetensors(file);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<std::uint64_t>(bytes[i]);
  CHECK(n % 8 == 0);  // padded, so the data starts 8-byte aligned
  const auto header = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(bytes.data() + 8), n));
  CHECK(header["__metadata__"]["data"] == "copy");
  CHECK(header["__metadata__"]["config"] == hr::model_config_to_json(kTiny));
  // Tensors back to back in named_parameters() order.
  std::uint64_t offset = 0;
  for (const auto& named : model->named_parameters()) {
    const std::string& name = named.first;  // not a structured binding: doctest's macros capture it
    const hr::Tensor<float>& p = named.second;
    const auto& e = header.at(name);
    CHECK_MESSAGE(e["dtype"] == "F32", name);
    CHECK_MESSAGE(e["shape"] == std::vector<std::size_t>(p.shape().begin(), p.shape().end()), name);
    CHECK_MESSAGE((e["data_offsets"] == std::vector<std::uint64_t>{offset, offset + 4 * p.size()}), name);
    // The bytes are the float values, little-endian.
    CHECK(std::memcmp(bytes.data() + 8 + n + offset, p.value().data(), 4 * p.size()) == 0);
    offset += 4 * p.size();
  }
  CHECK(bytes.size() == 8 + n + offset);
  CHECK(header.size() == model->named_parameters().size() + 1);

  const hr::SafetensorsFile back = hr::parse_safetensors(bytes, "mem");
  CHECK(back.metadata == file.metadata);
  CHECK(hr::model_config_to_json(hr::checkpoint_config(back, "mem")) == hr::model_config_to_json(kTiny));
  CHECK_THROWS_WITH_AS(hr::checkpoint_of(*model, kTiny, hr::DType::f32, {{"config", "{}"}}),
                       doctest::Contains("may not use the key 'config'"), hr::CheckpointError);
  hr::ModelConfig other = kTiny;
  other.d_ff = 16;
  CHECK_THROWS_WITH_AS(hr::checkpoint_of(*model, other, hr::DType::f32),
                       "checkpoint: the config given does not describe the model: d_ff is 16 but the model has 32", hr::CheckpointError);
}

TEST_CASE("checkpoint: loading is strict and names the tensor, the shapes and the file") {
  auto model = tiny_model<float>(1);
  const hr::SafetensorsFile file = hr::checkpoint_of(*model, kTiny, hr::DType::f32);
  auto target = tiny_model<float>(9);
  const hr::StateDict<float> before = target->state_dict();
  auto unchanged = [&] {
    const hr::StateDict<float> now = target->state_dict();
    for (std::size_t i = 0; i < now.size(); ++i) CHECK_MESSAGE(now[i].second == before[i].second, now[i].first);
  };

  SUBCASE("another config") {
    hr::ModelConfig wide = kTiny;
    wide.d_ff = 16;
    hr::Rng rng(0);
    hr::TransformerLM<float> other(wide, rng);
    CHECK_THROWS_WITH_AS(hr::load_checkpoint(file, other, "m.safetensors"),
                         "m.safetensors: tensor 'blocks.0.ffn.fc1.weight' has shape (32, 8) but the model expects "
                         "(16, 8)",
                         hr::CheckpointError);
  }
  SUBCASE("a missing parameter") {
    hr::SafetensorsFile missing = file;
    missing.tensors.erase(missing.tensors.end() - 2);  // ln_f.bias
    CHECK_THROWS_WITH_AS(hr::load_checkpoint(missing, *target, "m.safetensors"),
                         "m.safetensors: missing tensor 'ln_f.bias' (the model expects shape (8))",
                         hr::CheckpointError);
    unchanged();
  }
  SUBCASE("an extra tensor") {
    hr::SafetensorsFile extra = file;
    extra.tensors.push_back(hr::to_record<float>("head.bias", xt::zeros<float>({7})));
    CHECK_THROWS_WITH_AS(hr::load_checkpoint(extra, *target, "m.safetensors"),
                         "m.safetensors: unexpected tensor 'head.bias' of shape (7) (the model has no such parameter)",
                         hr::CheckpointError);
    unchanged();
  }
  SUBCASE("an untied checkpoint into a tied model") {
    hr::ModelConfig tied = kTiny;
    tied.tie_embeddings = true;
    auto t = tiny_model<float>(2, tied);
    CHECK_THROWS_WITH_AS(hr::load_checkpoint(file, *t, "m.safetensors"),
                         doctest::Contains("unexpected tensor 'head.weight' of shape (7, 8)"), hr::CheckpointError);
  }
  SUBCASE("a checkpoint without a config, or with a broken one") {
    hr::SafetensorsFile bare = file;
    bare.metadata.clear();
    CHECK_THROWS_WITH_AS(hr::checkpoint_config(bare, "m.safetensors"),
                         "m.safetensors: no model config: __metadata__ has no key 'config'", hr::CheckpointError);
    bare.metadata["config"] = R"({"vocab": 7, "d_model": 8, "n_heads": 3})";
    CHECK_THROWS_WITH_AS(hr::checkpoint_config(bare, "m.safetensors"),
                         "m.safetensors: __metadata__ 'config': MultiHeadAttention: d_model=8 is not a multiple of "
                         "n_heads=3; give d_k explicitly",
                         hr::CheckpointError);
    bare.metadata["config"] = R"({"vocab": 7,)";
    CHECK_THROWS_WITH_AS(hr::checkpoint_config(bare, "m.safetensors"),
                         doctest::Contains("m.safetensors: __metadata__ 'config': not valid JSON"), hr::CheckpointError);
  }
  SUBCASE("load_model refuses a config far larger than the file before allocating it") {
    const TempDir dir("checkpoint");
    hr::SafetensorsFile huge = file;
    huge.metadata["config"] = R"({"vocab": 1000000000000, "d_model": 8, "n_layers": 1, "n_heads": 2})";
    hr::write_safetensors(dir.path() / "huge.safetensors", huge);
    CHECK_THROWS_WITH_AS(hr::load_model<float>(dir.path() / "huge.safetensors"),
                         doctest::Contains(fmt::format("parameter values but the file holds only {}",
                                                       model->parameter_count()).c_str()),
                         hr::CheckpointError);
    huge.metadata["config"] =
        R"({"vocab": 7, "d_model": 8, "n_layers": 1, "n_heads": 2, "pos": "sinusoidal", "max_len": 100000000})";
    hr::write_safetensors(dir.path() / "huge.safetensors", huge);
    CHECK_THROWS_WITH_AS(hr::load_model<float>(dir.path() / "huge.safetensors"),
                         doctest::Contains("a sinusoidal table of max_len 100000000 x d_model 8"), hr::CheckpointError);
  }
  SUBCASE("a file that is not there") {
    CHECK_THROWS_WITH_AS(hr::load_model<float>("/nonexistent/m.safetensors"),
                         "/nonexistent/m.safetensors: cannot open: No such file or directory", hr::CheckpointError);
  }
  // A CheckpointError is a std::invalid_argument, so the CLI prints it as one line.
  CHECK_THROWS_AS(hr::checkpoint_config(hr::SafetensorsFile{}, "x"), std::invalid_argument);
}

TEST_CASE("checkpoint: load_model builds the model of the file's config, whatever the layout") {
  // load_model counts the parameters a config implies before building it (its guard
  // against absurd configs) and checks that count against the model it builds.
  const TempDir dir("checkpoint");
  using hr::Activation, hr::NormPlacement, hr::PositionEncoding;
  for (const hr::ModelConfig& cfg :
       {hr::ModelConfig{.vocab = 5, .d_model = 6, .n_layers = 2, .n_heads = 3, .max_len = 4},
        hr::ModelConfig{.vocab = 9, .d_model = 4, .n_layers = 1, .n_heads = 4, .n_kv_heads = 1, .d_k = 3, .d_v = 2,
                        .d_ff = 5, .max_len = 3, .activation = Activation::gelu_tanh, .bias = false},
        hr::ModelConfig{.vocab = 3, .d_model = 6, .n_layers = 3, .n_heads = 2, .n_kv_heads = 2, .d_ff = 7, .max_len = 5,
                        .norm = NormPlacement::post, .activation = Activation::relu,
                        .pos = PositionEncoding::sinusoidal, .causal = false, .attn_scale = 0.3, .ln_eps = 1e-3,
                        .tie_embeddings = true},
        hr::ModelConfig{.vocab = 5, .d_model = 6, .n_layers = 1, .n_heads = 3, .d_v = 4,
                        .head_combine = hr::HeadCombine::sum, .max_len = 4},
        // attention-only without norms, and each switch alone (docs/design.md #13)
        hr::ModelConfig{.vocab = 5, .d_model = 6, .n_layers = 2, .n_heads = 2, .max_len = 4,
                        .norm = NormPlacement::none, .attn_only = true},
        hr::ModelConfig{.vocab = 5, .d_model = 6, .n_layers = 2, .n_heads = 2, .max_len = 4,
                        .norm = NormPlacement::post, .tie_embeddings = true, .attn_only = true},
        hr::ModelConfig{.vocab = 5, .d_model = 6, .n_layers = 1, .n_heads = 2, .max_len = 4,
                        .norm = NormPlacement::none, .pos = PositionEncoding::sinusoidal}}) {
    auto model = tiny_model<float>(7, cfg);
    hr::save_checkpoint(dir.path() / "m.safetensors", *model, cfg, {{"note", "x"}});
    const hr::LoadedModel<float> back = hr::load_model<float>(dir.path() / "m.safetensors");
    check_same_parameters(*model, *back.model);
    CHECK(hr::model_config_to_json(back.model->config()) == hr::model_config_to_json(cfg));
    CHECK(back.metadata.at("note") == "x");
    CHECK(back.metadata.at("config") == hr::model_config_to_json(cfg));
  }
}

TEST_CASE("safetensors: every truncation of a valid file is a CheckpointError") {
  auto model = tiny_model<float>(1);
  const std::vector<std::byte> bytes = hr::serialize_safetensors(hr::checkpoint_of(*model, kTiny, hr::DType::f32));
  REQUIRE_NOTHROW(hr::parse_safetensors(bytes, "ok"));
  std::size_t rejected = 0;
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    try {
      hr::parse_safetensors(std::span(bytes.data(), n), "cut");
      FAIL_CHECK("a prefix of " << n << " of " << bytes.size() << " bytes parsed");
    } catch (const hr::CheckpointError& e) {
      ++rejected;
      if (std::string_view(e.what()).substr(0, 5) != "cut: ") FAIL_CHECK("prefix " << n << ": " << e.what());
    } catch (const std::exception& e) {
      FAIL_CHECK("prefix " << n << ": not a CheckpointError: " << e.what());
    }
  }
  CHECK(rejected == bytes.size());
}

TEST_CASE("safetensors: a table of broken files, each rejected with the tensor and the problem") {
  const std::string w4 = entry("w", R"("F32")", "[2]", "[0, 8]");  // a good tensor of 8 bytes
  struct Case {
    const char* what;
    std::vector<std::byte> bytes;
    std::vector<std::string> expect;  // substrings of the message
  };
  const std::vector<Case> cases{
      {"fewer than 8 bytes", std::vector<std::byte>(5), {"the file is 5 bytes, too short"}},
      {"header length huge", file_bytes("{}", 0, std::uint64_t{1} << 63),
       {"header length 9223372036854775808 is above the limit of 104857600 bytes"}},
      {"header length at the limit plus one", file_bytes("{}", 0, hr::kMaxSafetensorsHeader + 1),
       {"header length 104857601 is above the limit"}},
      {"header length beyond the file", file_bytes("{}", 4, 100),
       {"header length 100 runs past the end of the file (6 bytes after the length field)"}},
      {"empty header", file_bytes(""), {"header is not valid JSON"}},
      {"not JSON", file_bytes("{\"w\": "), {"header is not valid JSON"}},
      {"NUL padding", file_bytes(std::string("{}\0\0", 4)), {"header is not valid JSON"}},
      {"JSON array", file_bytes("[1, 2]"), {"the header must be a JSON object, got array"}},
      {"JSON string", file_bytes("\"w\""), {"the header must be a JSON object, got string"}},
      {"tensor not an object", file_bytes(R"({"w": [1]})"), {"tensor 'w': must be an object", "[1]"}},
      {"empty tensor name", file_bytes(object({entry("", R"("F32")", "[0]", "[0, 0]")})),
       {"a tensor has an empty name"}},
      {"dtype F16", file_bytes(object({entry("w", R"("F16")", "[2]", "[0, 4]")}), 4),
       {"tensor 'w': unsupported dtype \"F16\" (we read F32, F64 and I64)"}},
      {"dtype BF16", file_bytes(object({entry("w", R"("BF16")", "[2]", "[0, 4]")}), 4),
       {"tensor 'w': unsupported dtype \"BF16\""}},
      {"dtype I32", file_bytes(object({entry("w", R"("I32")", "[1]", "[0, 4]")}), 4),
       {"tensor 'w': unsupported dtype \"I32\""}},
      {"dtype in lower case", file_bytes(object({entry("w", R"("f32")", "[2]", "[0, 8]")}), 8),
       {"tensor 'w': unsupported dtype \"f32\""}},
      {"dtype a number", file_bytes(object({entry("w", "32", "[2]", "[0, 8]")}), 8),
       {"tensor 'w': 'dtype' must be a string, got 32 (number)"}},
      {"shape with a negative entry", file_bytes(object({entry("w", R"("F32")", "[2, -1]", "[0, 8]")}), 8),
       {"tensor 'w': shape entry 1 is -1 (number), not a non-negative integer"}},
      {"shape with a fraction", file_bytes(object({entry("w", R"("F32")", "[2.5]", "[0, 8]")}), 8),
       {"tensor 'w': shape entry 0 is 2.5 (number)"}},
      {"shape with a float that is whole", file_bytes(object({entry("w", R"("F32")", "[2.0]", "[0, 8]")}), 8),
       {"tensor 'w': shape entry 0 is 2.0 (number)"}},
      {"shape with a string", file_bytes(object({entry("w", R"("F32")", R"(["2"])", "[0, 8]")}), 8),
       {"tensor 'w': shape entry 0 is \"2\" (string)"}},
      {"shape beyond uint64", file_bytes(object({entry("w", R"("F32")", "[1e30]", "[0, 8]")}), 8),
       {"tensor 'w': shape entry 0 is 1e+30 (number)"}},
      {"shape not an array", file_bytes(object({entry("w", R"("F32")", "2", "[0, 8]")}), 8),
       {"tensor 'w': 'shape' must be an array of non-negative integers, got 2 (number)"}},
      {"shape whose product overflows", file_bytes(object({entry("w", R"("F32")", "[4294967296, 4294967296]", "[0, 8]")}), 8),
       {"tensor 'w': shape [4294967296,4294967296] (array) has more elements than 2^64"}},
      {"shape whose byte count overflows",
       file_bytes(object({entry("w", R"("F64")", "[4611686018427387904]", "[0, 8]")}), 8),
       {"tensor 'w': shape [4611686018427387904] needs more than 2^64 bytes"}},
      {"missing data_offsets", file_bytes(R"({"w": {"dtype": "F32", "shape": [2]}})", 8),
       {"tensor 'w': missing 'data_offsets'"}},
      {"missing dtype", file_bytes(R"({"w": {"shape": [2], "data_offsets": [0, 8]}})", 8),
       {"tensor 'w': missing 'dtype'"}},
      {"an extra field", file_bytes(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "x": 1}})", 8),
       {"tensor 'w': unexpected key 'x' (expected dtype, shape, data_offsets)"}},
      {"one offset", file_bytes(object({entry("w", R"("F32")", "[2]", "[8]")}), 8),
       {"tensor 'w': 'data_offsets' must be [begin, end] with non-negative integers, got [8] (array)"}},
      {"three offsets", file_bytes(object({entry("w", R"("F32")", "[2]", "[0, 4, 8]")}), 8),
       {"tensor 'w': 'data_offsets' must be [begin, end]"}},
      {"a negative offset", file_bytes(object({entry("w", R"("F32")", "[2]", "[-8, 0]")}), 8),
       {"tensor 'w': 'data_offsets' must be [begin, end]", "[-8,0]"}},
      {"an offset beyond uint64", file_bytes(object({entry("w", R"("F32")", "[0]", "[1e20, 1e20]")}), 0),
       {"tensor 'w': 'data_offsets' must be [begin, end]"}},
      {"begin > end", file_bytes(object({entry("w", R"("F32")", "[1]", "[8, 4]")}), 8),
       {"tensor 'w': data_offsets [8, 4] have begin > end"}},
      {"size disagrees with the shape", file_bytes(object({entry("w", R"("F32")", "[3]", "[0, 8]")}), 8),
       {"tensor 'w': data_offsets [0, 8] hold 8 bytes but F32 shape [3] needs 12"}},
      {"size disagrees with the dtype", file_bytes(object({entry("w", R"("F64")", "[2]", "[0, 8]")}), 8),
       {"tensor 'w': data_offsets [0, 8] hold 8 bytes but F64 shape [2] needs 16"}},
      {"past the end", file_bytes(object({entry("w", R"("F32")", "[4]", "[0, 16]")}), 8),
       {"tensor 'w': data_offsets [0, 16] run past the end of the data (8 bytes after the header)"}},
      {"not starting at 0", file_bytes(object({entry("w", R"("F32")", "[2]", "[4, 12]")}), 12),
       {"tensor 'w': data_offsets [4, 12] do not start at 0"}},
      {"overlapping", file_bytes(object({w4, entry("v", R"("F32")", "[2]", "[4, 12]")}), 12),
       {"tensor 'v': data_offsets [4, 12] overlap tensor 'w' at [0, 8]"}},
      {"the same range twice", file_bytes(object({w4, entry("v", R"("F32")", "[2]", "[0, 8]")}), 8),
       {"data_offsets [0, 8] overlap tensor", "at [0, 8]"}},
      {"a gap", file_bytes(object({w4, entry("v", R"("F32")", "[2]", "[12, 20]")}), 20),
       {"tensor 'v': data_offsets [12, 20] leave a gap of 4 bytes after tensor 'w' at [0, 8]"}},
      {"trailing bytes", file_bytes(object({w4}), 11),
       {"3 trailing bytes after the last tensor (the data is 11 bytes, the tensors end at 8)"}},
      {"no tensors but data", file_bytes("{}", 4), {"4 trailing bytes after the last tensor"}},
      {"a tensor named twice", file_bytes(object({w4, w4}), 8), {"tensor 'w' appears twice in the header"}},
      {"a tensor with the empty name twice", file_bytes(R"({"": {}, "": {}})"),
       {"tensor '' appears twice in the header"}},
      {"a field given twice in a tensor with the empty name",
       file_bytes(R"({"": {"dtype": "F32", "dtype": "F64", "shape": [2], "data_offsets": [0, 8]}})", 8),
       {"tensor '': duplicate key 'dtype'"}},
      {"the empty metadata key twice", file_bytes(R"({"__metadata__": {"": "1", "": "2"}})"),
       {"__metadata__: duplicate key ''"}},
      {"a field given twice",
       file_bytes(R"({"w": {"dtype": "F32", "dtype": "F64", "shape": [2], "data_offsets": [0, 8]}})", 8),
       {"tensor 'w': duplicate key 'dtype'"}},
      {"__metadata__ twice", file_bytes(R"({"__metadata__": {}, "__metadata__": {}})"),
       {"__metadata__ appears twice in the header"}},
      {"a metadata key twice", file_bytes(R"({"__metadata__": {"a": "1", "a": "2"}})"),
       {"__metadata__: duplicate key 'a'"}},
      {"metadata with a number", file_bytes(R"({"__metadata__": {"config": 3}})"),
       {"__metadata__ 'config' must be a string, got 3 (number)"}},
      {"metadata with an object", file_bytes(R"({"__metadata__": {"config": {"vocab": 3}}})"),
       {"__metadata__ 'config' must be a string, got {\"vocab\":3} (object)"}},
      {"metadata not an object", file_bytes(R"({"__metadata__": ["a"]})"),
       {"__metadata__ must be an object of string values, got [\"a\"] (array)"}},
  };
  for (const Case& c : cases) {
    const std::string what = c.what;
    CAPTURE(what);
    try {
      hr::parse_safetensors(c.bytes, "bad.safetensors");
      FAIL_CHECK(c.what << ": parsed");
    } catch (const hr::CheckpointError& e) {
      const std::string message = e.what();
      CHECK_MESSAGE(message.rfind("bad.safetensors: ", 0) == 0, message);
      for (const std::string& want : c.expect) CHECK_MESSAGE(message.find(want) != std::string::npos, message);
    }
  }
}

TEST_CASE("safetensors: the edge cases that are valid parse") {
  // Tensors in a different order in the header than in the data, a scalar, an
  // empty tensor, spaces after the JSON, and metadata.
  const std::string header = object({entry("b", R"("F64")", "[]", "[4, 12]"), entry("a", R"("F32")", "[1]", "[0, 4]"),
                                      entry("e", R"("F32")", "[0, 3]", "[12, 12]"), R"("__metadata__": {"k": "v"})"}) +
                             "   ";
  std::vector<std::byte> bytes = file_bytes(header, 12);
  const float a = 1.5f;
  const double b = -2.25;
  std::memcpy(bytes.data() + 8 + header.size(), &a, 4);
  std::memcpy(bytes.data() + 8 + header.size() + 4, &b, 8);
  const hr::SafetensorsFile f = hr::parse_safetensors(bytes, "ok");
  REQUIRE(f.tensors.size() == 3);
  CHECK(f.tensors[0].name == "a");  // in file order
  CHECK(f.tensors[1].name == "b");
  CHECK(f.tensors[2].name == "e");
  CHECK(hr::from_record<float>(*f.find("a"), "ok")(0) == 1.5f);
  CHECK(hr::from_record<double>(*f.find("b"), "ok")() == -2.25);
  CHECK(f.find("e")->shape == hr::Shape{0, 3});
  CHECK(f.find("nope") == nullptr);
  CHECK(f.metadata == std::map<std::string, std::string>{{"k", "v"}});
  // And the empty file of the format.
  CHECK(hr::parse_safetensors(file_bytes("{}"), "ok").tensors.empty());
  // serialize -> parse is the identity.
  const hr::SafetensorsFile back = hr::parse_safetensors(hr::serialize_safetensors(f), "ok");
  REQUIRE(back.tensors.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(back.tensors[i].name == f.tensors[i].name);
    CHECK(back.tensors[i].dtype == f.tensors[i].dtype);
    CHECK(back.tensors[i].shape == f.tensors[i].shape);
    CHECK(back.tensors[i].data == f.tensors[i].data);
  }
  CHECK(back.metadata == f.metadata);
}

TEST_CASE("safetensors: serialize refuses what it could not read back") {
  auto record = [](std::string name, std::size_t bytes) {
    return hr::TensorRecord{.name = std::move(name), .dtype = hr::DType::f32, .shape = {2},
                            .data = std::vector<std::byte>(bytes)};
  };
  CHECK_THROWS_WITH_AS(hr::serialize_safetensors({.metadata = {}, .tensors = {record("w", 8), record("w", 8)}}),
                       "safetensors: tensor 'w' appears twice", hr::CheckpointError);
  CHECK_THROWS_WITH_AS(hr::serialize_safetensors({.metadata = {}, .tensors = {record("", 8)}}),
                       "safetensors: a tensor has an empty name", hr::CheckpointError);
  CHECK_THROWS_WITH_AS(hr::serialize_safetensors({.metadata = {}, .tensors = {record("__metadata__", 8)}}),
                       "safetensors: a tensor may not be named __metadata__", hr::CheckpointError);
  CHECK_THROWS_WITH_AS(hr::serialize_safetensors({.metadata = {}, .tensors = {record("w", 6)}}),
                       "safetensors: tensor 'w': 6 bytes of data but F32 shape (2) needs 8", hr::CheckpointError);
  CHECK_THROWS_WITH_AS(hr::serialize_safetensors({.metadata = {{"k", "\xff"}}, .tensors = {}}),
                       doctest::Contains("safetensors: cannot write the header"), hr::CheckpointError);
}

TEST_CASE("safetensors: random byte flips either parse or are a CheckpointError") {
  auto model = tiny_model<float>(1);
  const std::vector<std::byte> valid = hr::serialize_safetensors(hr::checkpoint_of(*model, kTiny, hr::DType::f32));
  std::uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | static_cast<std::uint64_t>(valid[i]);
  auto target = tiny_model<float>(2);
  hr::Rng rng(2024);
  int parsed = 0, rejected = 0, loaded = 0;
  for (int iteration = 0; iteration < 3000; ++iteration) {
    std::vector<std::byte> bytes = valid;
    const std::uint64_t flips = 1 + rng.below(3);
    for (std::uint64_t f = 0; f < flips; ++f) {
      // Mostly in the header, where the parser has decisions to make.
      const std::size_t at = rng.uniform() < 0.9 ? 8 + rng.below(header) : rng.below(bytes.size());
      bytes[at] ^= static_cast<std::byte>(1 + rng.below(255));
    }
    try {
      const hr::SafetensorsFile f = hr::parse_safetensors(bytes, "flip");
      ++parsed;
      try {
        hr::checkpoint_config(f, "flip");
        hr::load_checkpoint(f, *target, "flip");
        ++loaded;
      } catch (const hr::CheckpointError&) {
      }
    } catch (const hr::CheckpointError&) {
      ++rejected;
    } catch (const std::exception& e) {
      FAIL_CHECK("iteration " << iteration << ": not a CheckpointError: " << e.what());
    }
  }
  MESSAGE(parsed << " parsed (" << loaded << " loaded), " << rejected << " rejected");
  CHECK(parsed > 0);
  CHECK(rejected > 0);
}

TEST_CASE("write_file_atomically replaces the file and leaves nothing else behind") {
  const TempDir dir("checkpoint");
  const fs::path path = dir.path() / "model.safetensors";
  hr::write_file_atomically(path, std::string_view("old contents"));
  CHECK(read_file(path) == "old contents");
  hr::write_file_atomically(path, std::string_view("new"));
  CHECK(read_file(path) == "new");
  CHECK(dir.entries() == std::vector<std::string>{"model.safetensors"});
  // A bare file name writes to the current directory (its directory is ".").
  const fs::path cwd = fs::current_path();
  fs::current_path(dir.path());
  hr::write_file_atomically("bare.txt", std::string_view("x"));
  fs::current_path(cwd);
  CHECK(read_file(dir.path() / "bare.txt") == "x");
}

TEST_CASE("write_directory_atomically: the directory appears whole or not at all") {
  const TempDir dir("atomic_dir");
  const std::string a = "first", b = "second";
  const auto bytes = [](const std::string& s) { return std::as_bytes(std::span(s)); };
  // Made with its missing parents, onto nothing or onto an empty directory.
  hr::write_directory_atomically(dir / "x/y/out", {{.name = "a", .bytes = bytes(a)}, {.name = "b", .bytes = bytes(b)}});
  CHECK(TempDir::entries_of(dir / "x/y/out") == std::vector<std::string>{"a", "b"});
  CHECK(read_file(dir / "x/y/out/b") == "second");
  CHECK(TempDir::entries_of(dir / "x/y") == std::vector<std::string>{"out"});
  fs::create_directory(dir / "empty");
  hr::write_directory_atomically(dir / "empty/", {{.name = "a", .bytes = bytes(a)}});
  CHECK(TempDir::entries_of(dir / "empty") == std::vector<std::string>{"a"});
  // The second file fails (a name in a directory that does not exist): nothing appears,
  // and no temporary is left.
  CHECK_THROWS_AS(hr::write_directory_atomically(dir / "broken", {{.name = "a", .bytes = bytes(a)},
                                                                  {.name = "no/such/b", .bytes = bytes(b)}}),
                  hr::CheckpointError);
  CHECK_FALSE(fs::exists(dir / "broken"));
  // Onto a directory that is not empty: refused, and it keeps what it held.
  CHECK_THROWS_WITH_AS(hr::write_directory_atomically(dir / "x/y/out", {{.name = "c", .bytes = bytes(a)}}),
                       doctest::Contains("it is not empty"), hr::CheckpointError);
  CHECK(TempDir::entries_of(dir / "x/y/out") == std::vector<std::string>{"a", "b"});
  CHECK(dir.entries() == std::vector<std::string>{"empty", "x"});
  CHECK(TempDir::entries_of(dir / "x/y") == std::vector<std::string>{"out"});
}

TEST_CASE("write_file_atomically: errors name the path and the OS's reason, and keep the old file") {
  const TempDir dir("checkpoint");
  SUBCASE("a directory that does not exist") {
    const fs::path path = dir.path() / "no" / "such" / "model.safetensors";
    CHECK_THROWS_WITH_AS(hr::write_file_atomically(path, std::string_view("x")),
                         doctest::Contains(fmt::format("cannot write '{}'", path.string()).c_str()),
                         hr::CheckpointError);
    CHECK_THROWS_WITH_AS(hr::write_file_atomically(path, std::string_view("x")),
                         doctest::Contains("No such file or directory"), hr::CheckpointError);
  }
  SUBCASE("a target that is a directory") {
    fs::create_directory(dir.path() / "sub");
    CHECK_THROWS_WITH_AS(hr::write_file_atomically(dir.path() / "sub", std::string_view("x")),
                         doctest::Contains("Is a directory"), hr::CheckpointError);
    CHECK(dir.entries() == std::vector<std::string>{"sub"});  // the temporary file is gone
  }
  SUBCASE("a read-only directory") {
    if (::geteuid() == 0) {
      MESSAGE("skipped: running as root, which ignores directory permissions");
      return;
    }
    const fs::path path = dir.path() / "model.safetensors";
    hr::write_file_atomically(path, std::string_view("old"));
    fs::permissions(dir.path(), fs::perms::owner_read | fs::perms::owner_exec);
    CHECK_THROWS_WITH_AS(hr::write_file_atomically(path, std::string_view("new")),
                         doctest::Contains("Permission denied"), hr::CheckpointError);
    fs::permissions(dir.path(), fs::perms::owner_all);
    CHECK(read_file(path) == "old");
  }
  SUBCASE("a write that fails midway, as on a full disk") {
    // RLIMIT_FSIZE makes write() fail with EFBIG past the limit, as ENOSPC would on a
    // full disk, without root or a tiny file system. SIGXFSZ would kill us; ignore it.
    const fs::path path = dir.path() / "model.safetensors";
    hr::write_file_atomically(path, std::string_view("old contents"));
    rlimit saved{};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
    rlimit small = saved;
    small.rlim_cur = 100;
    void (*old_handler)(int) = std::signal(SIGXFSZ, SIG_IGN);
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    std::string message;
    try {
      hr::write_file_atomically(path, std::string(100000, 'x'));
    } catch (const hr::CheckpointError& e) {
      message = e.what();
    }
    ::setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, old_handler);
    CHECK(message.find(fmt::format("cannot write '{}'", path.string())) != std::string::npos);
    CHECK_MESSAGE(message.find("File too large") != std::string::npos, message);
    CHECK(read_file(path) == "old contents");
    CHECK(dir.entries() == std::vector<std::string>{"model.safetensors"});
  }
}

TEST_CASE("read_safetensors names the file and the OS's reason") {
  const TempDir dir("checkpoint");
  const std::string none = (dir.path() / "none.safetensors").string();
  CHECK_THROWS_WITH_AS(hr::read_safetensors(none), (none + ": cannot open: No such file or directory").c_str(),
                       hr::CheckpointError);
  CHECK_THROWS_WITH_AS(hr::read_safetensors(dir.path()), (dir.path().string() + ": cannot read: it is a directory").c_str(),
                       hr::CheckpointError);
  const std::string short_file = (dir.path() / "short").string();
  hr::write_file_atomically(short_file, std::string_view("abc"));
  CHECK_THROWS_WITH_AS(hr::read_safetensors(short_file),
                       (short_file + ": the file is 3 bytes, too short for the 8-byte header length").c_str(),
                       hr::CheckpointError);
}

TEST_CASE("the fuzzing seed corpus parses and loads") {
  // fuzz/corpus is written by fuzz/make_corpus.cpp; a seed that no longer parses
  // would make the fuzzer start from rejects only.
  std::size_t seeds = 0;
  for (const auto& e : fs::directory_iterator(HEADROOM_FUZZ_CORPUS_DIR)) {
    CAPTURE(e.path().string());
    const hr::SafetensorsFile f = hr::read_safetensors(e.path());
    if (f.metadata.count("config")) {
      const hr::ModelConfig c = hr::checkpoint_config(f, e.path().string());
      hr::Rng rng(0);
      hr::TransformerLM<float> model(c, rng);
      CHECK_NOTHROW(hr::load_checkpoint(f, model, e.path().string()));
    }
    ++seeds;
  }
  CHECK(seeds >= 3);
}

// ---- checksums and reading only what the header declares (issue 44) ----------------

TEST_CASE("crc32c: the standard check value, and the instruction equals the table on every length and offset") {
  const std::string check = "123456789";
  CHECK(hr::crc32c(std::as_bytes(std::span(check))) == 0xE3069283u);  // CRC-32C's published check value
  CHECK(hr::crc32c_portable(std::as_bytes(std::span(check))) == 0xE3069283u);
  CHECK(hr::crc32c({}) == 0u);
  hr::Rng rng(32);
  std::vector<std::byte> bytes(300);
  for (auto& b : bytes) b = static_cast<std::byte>(rng.below(256));
  for (std::size_t offset = 0; offset < 9; ++offset) {
    for (std::size_t n = 0; offset + n <= bytes.size(); n += 1 + n / 7) {
      const std::span<const std::byte> s(bytes.data() + offset, n);
      CAPTURE(offset);
      CAPTURE(n);
      CHECK(hr::crc32c(s) == hr::crc32c_portable(s));
      // Continued over two halves, it is the checksum of the whole.
      CHECK(hr::crc32c(s.subspan(n / 2), hr::crc32c(s.first(n / 2))) == hr::crc32c(s));
    }
  }
}

TEST_CASE("safetensors: every tensor's CRC-32C is in __metadata__, checked on read, invisible to the caller") {
  auto model = tiny_model<float>(1);
  const hr::SafetensorsFile file = hr::checkpoint_of(*model, kTiny, hr::DType::f32, {{"data", "copy"}});
  const std::vector<std::byte> bytes = hr::serialize_safetensors(file);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<std::uint64_t>(bytes[i]);
  const auto header = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(bytes.data() + 8), n));
  for (const hr::TensorRecord& t : file.tensors) {
    CAPTURE(t.name);
    CHECK(header["__metadata__"]["crc32c:" + t.name] == fmt::format("{:08x}", hr::crc32c(t.data)));
  }
  const hr::SafetensorsFile back = hr::parse_safetensors(bytes, "mem");
  CHECK(back.checksummed);
  CHECK(back.metadata == file.metadata);  // the checksums are the container's, not the caller's

  // One flipped bit of any tensor's data is an error naming the file and the tensor.
  std::uint64_t offset = 0;
  for (const hr::TensorRecord& t : file.tensors) {
    std::vector<std::byte> flipped = bytes;
    flipped[8 + n + offset + t.data.size() / 2] ^= std::byte{0x10};
    CHECK_THROWS_WITH_AS(hr::parse_safetensors(flipped, "f.safetensors"),
                         doctest::Contains(("f.safetensors: tensor '" + t.name + "': the data does not match its checksum").c_str()),
                         hr::CheckpointError);
    offset += t.data.size();
  }

  // A file without checksums (an older headroom, another tool) still loads, unchecked.
  const std::string plain = object({entry("a", R"("F32")", "[1]", "[0, 4]")});
  const hr::SafetensorsFile unchecked = hr::parse_safetensors(file_bytes(plain, 4), "old");
  CHECK_FALSE(unchecked.checksummed);
  CHECK(unchecked.tensors.size() == 1);
  // Malformed checksums, and one for a tensor the file lacks, are refused.
  const auto with_meta = [](const std::string& meta) {
    return file_bytes(object({entry("a", R"("F32")", "[1]", "[0, 4]"), R"("__metadata__": )" + meta}), 4);
  };
  CHECK_THROWS_WITH_AS(hr::parse_safetensors(with_meta(R"({"crc32c:a": "12345"})"), "m"),
                       doctest::Contains("must be 8 lowercase hex digits"), hr::CheckpointError);
  CHECK_THROWS_WITH_AS(hr::parse_safetensors(with_meta(R"({"crc32c:a": "DEADBEEF"})"), "m"),
                       doctest::Contains("must be 8 lowercase hex digits"), hr::CheckpointError);
  CHECK_THROWS_WITH_AS(hr::parse_safetensors(with_meta(R"({"crc32c:b": "00000000"})"), "m"),
                       doctest::Contains("the checksum of a tensor the file does not hold"), hr::CheckpointError);
  const std::uint32_t zeros = hr::crc32c(std::vector<std::byte>(4));
  CHECK(hr::parse_safetensors(with_meta(fmt::format(R"({{"crc32c:a": "{:08x}"}})", zeros)), "m").checksummed);
  // The writer's key is reserved.
  CHECK_THROWS_WITH_AS(hr::serialize_safetensors({.metadata = {{"crc32c:a", "00000000"}}, .tensors = {}}),
                       doctest::Contains("is reserved for the checksums"), hr::CheckpointError);
}

TEST_CASE("read_safetensors: a huge file is refused from its header, without reading or allocating its data") {
  const TempDir tmp("huge_safetensors");
  const auto sparse = [&](const std::string& name, const std::vector<std::byte>& head, std::uintmax_t size) {
    const fs::path p = tmp / name;
    {
      std::ofstream out(p, std::ios::binary);
      out.write(reinterpret_cast<const char*>(head.data()), static_cast<std::streamsize>(head.size()));
    }
    fs::resize_file(p, size);  // a hole: takes no disk
    return p;
  };
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  // Junk in the length field (the issue's `head -c 1M /dev/urandom; truncate -s 20G`).
  std::vector<std::byte> junk(64);
  hr::Rng rng(7);
  for (auto& b : junk) b = static_cast<std::byte>(rng.below(256));
  junk[7] = std::byte{0x9f};  // a length above the 100 MiB limit, whatever the other bytes
  CHECK_THROWS_WITH_AS(hr::read_safetensors(sparse("junk.safetensors", junk, std::uintmax_t{20} << 30)),
                       doctest::Contains("is above the limit"), hr::CheckpointError);
  // A valid header declaring 4 bytes of data, in a 20 GiB file.
  const std::string header = object({entry("a", R"("F32")", "[1]", "[0, 4]")});
  CHECK_THROWS_WITH_AS(hr::read_safetensors(sparse("long.safetensors", file_bytes(header, 4), std::uintmax_t{20} << 30)),
                       doctest::Contains("trailing bytes after the last tensor"), hr::CheckpointError);
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  CHECK(after.ru_maxrss - before.ru_maxrss < 64 * 1024);  // KiB: nothing near the file's size was taken
}
