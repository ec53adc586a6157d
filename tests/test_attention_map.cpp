// `headroom attention`: the heatmap SVG writer on hand-made weights, the command end
// to end on a tiny trained task model (the weights it writes against the model's own
// forward pass) and on a text model saved in-process, the I64 tensors it writes, and
// one-line errors.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "autograd/parallel.hpp"
#include "plot/heatmap.hpp"
#include "train/run_dir.hpp"
#include "data/task_tokens.hpp"
#include "cli_runner.hpp"
#include "support.hpp"
#include "tiny_model.hpp"
#include "data/char_dataset.hpp"
#include "data/task.hpp"
#include "nn/checkpoint.hpp"
#include "nn/safetensors.hpp"

namespace fs = std::filesystem;
namespace hm = headroom::heatmap;
namespace hr = headroom;

namespace {

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

double luminance(hm::Rgb c) { return 0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b; }

// (H, T, T) weights where head h's query q puts weight on keys 0..q: row q of head h
// is the one-hot of key (q + h) % (q + 1), so every visible row sums to 1.
xt::xarray<float> one_hot_weights(std::size_t heads, std::size_t T) {
  xt::xarray<float> w = xt::zeros<float>({heads, T, T});
  for (std::size_t h = 0; h < heads; ++h) {
    for (std::size_t q = 0; q < T; ++q) w(h, q, (q + h) % (q + 1)) = 1.0f;
  }
  return w;
}

// Trains a tiny repeat model once per test run (a few seconds at most): 2 layers
// of 2 heads, seq_len 8, so rows are s1 s2 s3 s4 s1 s2 s3 s4 _.
const fs::path& induction_model() {
  static const TempDir tmp("attention_induction");  // removed at exit
  static const fs::path dir = [] {
    const fs::path& d = tmp.path();
    const CliResult train = run_headroom(
        "train --task repeat --seq-len 8 --vocab 12 --d-model 16 --heads 2 --layers 2 --steps 30 --warmup 5 "
        "--eval-every 30 --eval-batches 1 -q --out " + d.string());
    INFO(train.output);
    REQUIRE(train.status == 0);
    return d;
  }();
  return dir;
}

hr::Shape shape_of(const hr::SafetensorsFile& f, const std::string& name) {
  const hr::TensorRecord* t = f.find(name);
  REQUIRE_MESSAGE(t != nullptr, "no tensor " << name);
  return t->shape;
}

// Every visible row of every head sums to 1, and every masked weight is exactly 0.
void check_rows(const xt::xarray<float>& w, const std::string& name) {
  const std::size_t H = w.shape()[0], T = w.shape()[1];
  for (std::size_t h = 0; h < H; ++h) {
    for (std::size_t q = 0; q < T; ++q) {
      double sum = 0;
      for (std::size_t k = 0; k <= q; ++k) sum += w(h, q, k);
      INFO(name << " head " << h << " query " << q << ": visible keys sum to " << sum);
      CHECK(std::abs(sum - 1.0) < 1e-5);
      for (std::size_t k = q + 1; k < T; ++k) {
        INFO(name << " head " << h << " query " << q << " key " << k);
        CHECK(w(h, q, k) == 0.0f);
      }
    }
  }
}

}  // namespace

TEST_CASE("weight_colour: white at 0, dark navy at 1, never lighter for a heavier weight") {
  CHECK(hm::hex(hm::weight_colour(0)) == "#ffffff");
  CHECK(hm::hex(hm::weight_colour(1)) == "#082864");
  CHECK(hm::weight_colour(-0.5) == hm::weight_colour(0));  // clamped
  CHECK(hm::weight_colour(3) == hm::weight_colour(1));
  hm::Rgb previous = hm::weight_colour(0);
  for (int i = 1; i <= 1000; ++i) {
    const double w = i / 1000.0;
    const hm::Rgb c = hm::weight_colour(w);
    INFO("weight " << w << ": " << hm::hex(c) << " after " << hm::hex(previous));
    CHECK(c.r <= previous.r);
    CHECK(c.g <= previous.g);
    CHECK(c.b <= previous.b);
    previous = c;
  }
  // Strictly darker over any step of 0.05: the scale never goes flat.
  for (int i = 0; i < 20; ++i) {
    INFO("weights " << i * 0.05 << " and " << (i + 1) * 0.05);
    CHECK(luminance(hm::weight_colour((i + 1) * 0.05)) < luminance(hm::weight_colour(i * 0.05)) - 1.0);
  }
}

TEST_CASE("render_attention_maps: one labelled map per layer and head, token labels, legend, colour by weight") {
  const std::size_t T = 4;
  hm::AttentionMaps maps;
  maps.title = "Attention weights of m.safetensors";
  maps.subtitle = "input 3 7 | <";
  maps.tokens = {"3", "7", "|", "<"};
  maps.layers = {one_hot_weights(3, T), one_hot_weights(3, T)};
  maps.layers[1](2, 3, 0) = 0.5f;  // a half weight to find by colour
  maps.layers[1](2, 3, 1) = 0.5f;
  maps.layers[1](2, 3, 3) = 0.0f;
  const std::string svg = hm::render_attention_maps(maps);

  REQUIRE(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0);
  CHECK(svg.substr(svg.size() - 7) == "</svg>\n");
  CHECK(count(svg, "<svg") == 1);
  CHECK(count(svg, "<g") == count(svg, "</g>"));
  CHECK(svg.find(">Attention weights of m.safetensors</text>") != std::string::npos);
  CHECK(svg.find(">input 3 7 | &lt;</text>") != std::string::npos);  // escaped
  for (std::size_t l = 0; l < 2; ++l) {
    for (std::size_t h = 0; h < 3; ++h) {
      INFO("layer " << l << ", head " << h);
      CHECK(count(svg, fmt::format(">layer {}, head {}</text>", l, h)) == 1);
    }
  }
  CHECK(count(svg, ">layer 2,") == 0);
  CHECK(count(svg, ", head 3<") == 0);
  // Each map labels every token twice: once as a key, once as a query.
  CHECK(count(svg, ">7</text>") == 2 * 6);
  CHECK(count(svg, ">&lt;</text>") == 2 * 6);
  // Only the cells a query can see are drawn (T (T + 1) / 2 per map), each with a tooltip.
  CHECK(count(svg, "<title>query ") == 6 * T * (T + 1) / 2);
  CHECK(count(svg, "<title>query 0 (3), key 1 (7)") == 0);
  // The masked region: one hatched background per map, and the legend's swatch.
  CHECK(count(svg, "fill=\"url(#attn-masked)\"") == 6 + 1);
  CHECK(svg.find("masked (key after query)") != std::string::npos);
  // The legend: a gradient bar on the same stops, ticks 0 to 1.
  CHECK(svg.find(">attention weight</text>") != std::string::npos);
  CHECK(count(svg, "fill=\"url(#attn-scale)\"") == 1);
  CHECK(svg.find("<stop offset=\"0\" stop-color=\"#ffffff\"/>") != std::string::npos);
  CHECK(svg.find("<stop offset=\"1\" stop-color=\"#082864\"/>") != std::string::npos);
  for (const char* tick : {">0</text>", ">0.25</text>", ">0.5</text>", ">0.75</text>", ">1</text>"}) {
    INFO(tick);
    CHECK(count(svg, tick) == 1);
  }
  // Cells take the colour of their weight.
  const auto cell = [](const std::string& tooltip, double weight) {
    return fmt::format("fill=\"{}\"><title>{}</title>", hm::hex(hm::weight_colour(weight)), tooltip);
  };
  CHECK(count(svg, cell("query 3 (&lt;), key 0 (3): 0.500", 0.5)) == 1);
  CHECK(count(svg, cell("query 3 (&lt;), key 3 (&lt;): 0.000", 0.0)) >= 1);
  CHECK(count(svg, cell("query 0 (3), key 0 (3): 1.000", 1.0)) == 6);  // the first query sees only itself
  CHECK(luminance(hm::weight_colour(0.5)) < luminance(hm::weight_colour(0.0)));
  CHECK(luminance(hm::weight_colour(1.0)) < luminance(hm::weight_colour(0.5)));

  // Without a causal mask every cell is drawn and nothing is hatched.
  maps.causal = false;
  const std::string full = hm::render_attention_maps(maps);
  CHECK(count(full, "<title>query ") == 6 * T * T);
  CHECK(full.find("attn-masked)") == std::string::npos);
  CHECK(full.find("masked (key after query)") == std::string::npos);
}

TEST_CASE("render_attention_maps: the shapes, the length and the values are checked, with the numbers") {
  hm::AttentionMaps maps;
  maps.tokens = {"a", "b", "c"};
  CHECK(error_of([&] { (void)hm::render_attention_maps(maps); }) == "attention map: no layers to draw");
  maps.layers = {one_hot_weights(2, 3), one_hot_weights(2, 4)};
  CHECK(error_of([&] { (void)hm::render_attention_maps(maps); }) ==
        "attention map: layer 1 has weights of shape (2, 4, 4), expected (H, 3, 3)");
  maps.layers = {one_hot_weights(2, 3)};
  maps.layers[0](1, 2, 0) = NAN;
  CHECK(error_of([&] { (void)hm::render_attention_maps(maps); }) ==
        "attention map: layer 0, head 1: the weight of query 2 on key 0 is nan");
  maps.tokens.assign(hm::kMaxTokens + 1, "x");
  maps.layers = {one_hot_weights(1, hm::kMaxTokens + 1)};
  CHECK(error_of([&] { (void)hm::render_attention_maps(maps); }) ==
        "attention map: 129 tokens are more than the 128 we draw (the maps would be unreadable)");
  // At the limit it draws, without per-cell tooltips (they would make the file large).
  maps.tokens.assign(hm::kMaxTokens, "x");
  maps.layers = {one_hot_weights(1, hm::kMaxTokens)};
  const std::string big = hm::render_attention_maps(maps);
  CHECK(count(big, "<title>query") == 0);
  // The visible cells, plus the background, the hatch pattern's tile, the map's hatched
  // backdrop and outline, the legend's bar and swatch.
  CHECK(count(big, "<rect ") == hm::kMaxTokens * (hm::kMaxTokens + 1) / 2 + 6);
}

TEST_CASE("safetensors I64: token ids round-trip, and never mix with floating-point tensors") {
  const hr::IndexArray ids{3, 1, 4, 1, 5, 9000000000};
  hr::SafetensorsFile f;
  f.tensors.push_back(hr::to_record("tokens", ids));
  f.tensors.push_back(hr::to_record("w", xt::xarray<float>{0.5f, 1.5f}));
  const hr::SafetensorsFile back = hr::parse_safetensors(hr::serialize_safetensors(f), "t.safetensors");
  REQUIRE(back.find("tokens") != nullptr);
  CHECK(back.find("tokens")->dtype == hr::DType::i64);
  CHECK(std::string(hr::dtype_name(hr::DType::i64)) == "I64");
  CHECK(hr::from_record<hr::Index>(*back.find("tokens"), "t.safetensors") == ids);
  CHECK(error_of([&] { (void)hr::from_record<float>(*back.find("tokens"), "t.safetensors"); }) ==
        "t.safetensors: tensor 'tokens' is I64, expected F32 or F64 for floating-point values");
  CHECK(error_of([&] { (void)hr::from_record<hr::Index>(*back.find("w"), "t.safetensors"); }) ==
        "t.safetensors: tensor 'w' is F32, expected I64 for integers");
  CHECK(error_of([] { (void)hr::to_record("w", xt::xarray<float>{1.0f}, hr::DType::i64); }) ==
        "safetensors: tensor 'w' is I64, expected F32 or F64 for floating-point values");

  // A checkpoint whose parameter is I64 does not load.
  hr::Rng rng(1);
  const hr::ModelConfig config = hr::ModelConfig{.vocab = 5, .d_model = 8, .n_layers = 1, .n_heads = 2,
                                                 .max_len = 4}.resolved();
  hr::TransformerLM<float> model(config, rng);
  hr::SafetensorsFile checkpoint = hr::checkpoint_of(model, config, hr::DType::f32);
  for (hr::TensorRecord& t : checkpoint.tensors) {
    if (t.name == "ln_f.bias") t = hr::to_record("ln_f.bias", hr::IndexArray(xt::zeros<hr::Index>({8})));
  }
  CHECK(error_of([&] { hr::load_checkpoint(checkpoint, model, "m.safetensors"); }) ==
        "m.safetensors: tensor 'ln_f.bias' is I64, expected F32 or F64 for floating-point values");
}

TEST_CASE("headroom attention --example: the SVG, and weights that are the model's own, row-stochastic and causal") {
  const fs::path& dir = induction_model();
  const CliResult r = run_headroom("attention --model " + dir.string() + " --example 3");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const fs::path svg_file = dir / "attention.svg";
  const fs::path weights_file = dir / "attention.safetensors";
  CHECK(r.output.find("wrote " + svg_file.string()) != std::string::npos);
  CHECK(r.output.find("wrote " + weights_file.string()) != std::string::npos);
  CHECK(r.output.find("validation example 3 of repeat") != std::string::npos);

  const std::string svg = read_file(svg_file);
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.substr(svg.size() - 7) == "</svg>\n");
  for (const char* panel : {"layer 0, head 0", "layer 0, head 1", "layer 1, head 0", "layer 1, head 1"}) {
    INFO(panel);
    CHECK(count(svg, std::string(">") + panel + "<") == 1);
  }

  const hr::SafetensorsFile f = hr::read_safetensors(weights_file);
  CHECK(f.tensors.size() == 3);
  CHECK(shape_of(f, "layer.0") == hr::Shape{2, 8, 8});
  CHECK(shape_of(f, "layer.1") == hr::Shape{2, 8, 8});
  CHECK(shape_of(f, "tokens") == hr::Shape{8});
  CHECK(f.find("layer.0")->dtype == hr::DType::f32);
  CHECK(f.find("tokens")->dtype == hr::DType::i64);
  const hr::IndexArray tokens = hr::from_record<hr::Index>(*f.find("tokens"), "tokens");

  // The row of a repeat example: four distinct content tokens, then the same four.
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(tokens(i) >= hr::kFirstContent);
    CHECK(tokens(i + 4) == tokens(i));
  }
  // Example 3 is the fourth example `headroom sample --seed 0` shows: its prompt is
  // the row up to the first counted target.
  const CliResult sample = run_headroom("sample --greedy --count 4 --model " + dir.string());
  REQUIRE(sample.status == 0);
  std::istringstream lines(sample.output);
  std::string line, prompt;
  for (int prompts = 0; prompts < 4 && std::getline(lines, line);) {
    if (line.rfind("prompt    ", 0) == 0 && ++prompts == 4) prompt = line.substr(10);
  }
  const std::vector<hr::Index> prompt_ids = hr::parse_task_tokens(prompt, 12, "prompt");
  REQUIRE(prompt_ids.size() == 5);
  CHECK(std::equal(prompt_ids.begin(), prompt_ids.end(), tokens.begin()));

  // The weights are the model's own, from an in-process forward pass on the same tokens.
  hr::set_threads(1);
  hr::LoadedModel<float> loaded = hr::load_model<float>(dir / "model.safetensors");
  loaded.model->eval();
  hr::NoGrad no_grad;
  std::vector<hr::Tensor<float>> expected;
  hr::IndexArray batch = tokens;
  batch.reshape({1, 8});
  (void)loaded.model->forward(batch, &expected);
  REQUIRE(expected.size() == 2);
  for (std::size_t l = 0; l < 2; ++l) {
    const std::string name = fmt::format("layer.{}", l);
    const xt::xarray<float> w = hr::from_record<float>(*f.find(name), name);
    check_rows(w, name);
    const xt::xarray<float>& e = expected[l].value();  // (1, H, T, T)
    REQUIRE(e.size() == w.size());
    float worst = 0;
    for (std::size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::abs(w.data()[i] - e.data()[i]));
    INFO(name << ": largest difference from forward() " << worst);
    CHECK(worst <= 1e-6f);
  }

  // The same N gives the same row; without --input or --example it is example 0.
  const fs::path other = dir / "again.svg";
  REQUIRE(run_headroom("attention --model " + dir.string() + " --example 3 --out " + other.string()).status == 0);
  CHECK(hr::from_record<hr::Index>(*hr::read_safetensors(dir / "again.safetensors").find("tokens"), "t") == tokens);
  REQUIRE(run_headroom("attention --model " + dir.string() + " --out " + (dir / "default.svg").string()).status == 0);
  REQUIRE(run_headroom("attention --model " + dir.string() + " --example 0 --out " + (dir / "zero.svg").string())
              .status == 0);
  CHECK(read_file(dir / "default.safetensors") == read_file(dir / "zero.safetensors"));
  CHECK(read_file(dir / "default.svg") == read_file(dir / "zero.svg"));
}

TEST_CASE("headroom attention on a llama-style model: the model's own weights, row-stochastic and causal") {
  const TempDir tmp("attention_llama");
  const fs::path& dir = tmp.path();
  const CliResult trained = run_headroom(
      "train --task repeat --seq-len 8 --vocab 12 --steps 20 --d-model 16 --heads 4 --kv-heads 2 --pos rope "
      "--norm-type rmsnorm --ffn swiglu --no-bias --qk-norm --key-smear -q --out " + dir.string());
  INFO(trained.output);
  REQUIRE(trained.status == 0);
  const CliResult r = run_headroom("attention --model " + dir.string() + " --example 1");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const hr::SafetensorsFile f = hr::read_safetensors(dir / "attention.safetensors");
  CHECK(shape_of(f, "layer.0") == hr::Shape{4, 8, 8});
  const hr::IndexArray tokens = hr::from_record<hr::Index>(*f.find("tokens"), "tokens");
  hr::set_threads(1);
  hr::LoadedModel<float> loaded = hr::load_model<float>(dir / "model.safetensors");
  CHECK(loaded.config.pos == hr::PositionEncoding::rope);
  CHECK(loaded.config.key_smear);
  loaded.model->eval();
  hr::NoGrad no_grad;
  std::vector<hr::Tensor<float>> expected;
  hr::IndexArray batch = tokens;
  batch.reshape({1, 8});
  (void)loaded.model->forward(batch, &expected);
  REQUIRE(expected.size() == 2);
  for (std::size_t l = 0; l < 2; ++l) {
    const std::string name = fmt::format("layer.{}", l);
    const xt::xarray<float> w = hr::from_record<float>(*f.find(name), name);
    check_rows(w, name);
    const xt::xarray<float>& e = expected[l].value();
    REQUIRE(e.size() == w.size());
    float worst = 0;
    for (std::size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::abs(w.data()[i] - e.data()[i]));
    CHECK(worst <= 1e-6f);
  }
}

TEST_CASE("headroom attention --input: the user's ids, at any length up to max_len, to the files asked for") {
  const fs::path& dir = induction_model();
  const TempDir out_tmp("attention_input");
  const fs::path& out = out_tmp.path();
  const CliResult r = run_headroom("attention --model " + dir.string() + " --input '3 4 5 | ?' --out " +
                                   (out / "maps.svg").string() + " --weights " + (out / "w.safetensors").string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("input 3 4 5 | ? (5 tokens)") != std::string::npos);
  CHECK(fs::exists(out / "maps.svg"));
  CHECK_FALSE(fs::exists(out / "maps.safetensors"));
  const hr::SafetensorsFile f = hr::read_safetensors(out / "w.safetensors");
  CHECK(shape_of(f, "layer.0") == hr::Shape{2, 5, 5});
  CHECK(shape_of(f, "layer.1") == hr::Shape{2, 5, 5});
  CHECK(hr::from_record<hr::Index>(*f.find("tokens"), "t") == hr::IndexArray{3, 4, 5, hr::kSep, hr::kQuery});
  for (const char* name : {"layer.0", "layer.1"}) check_rows(hr::from_record<float>(*f.find(name), name), name);
  const std::string svg = read_file(out / "maps.svg");
  CHECK(count(svg, ">?</text>") == 2 * 4);  // key and query label on each of the 4 maps
  CHECK(count(svg, ">|</text>") == 2 * 4);

  // One token is an input too.
  REQUIRE(run_headroom("attention --model " + dir.string() + " --input 7 --out " + (out / "one.svg").string())
              .status == 0);
  CHECK(shape_of(hr::read_safetensors(out / "one.safetensors"), "layer.1") == hr::Shape{2, 1, 1});
}

TEST_CASE("headroom attention on a text model: characters on the axes, --example from the training text") {
  const TempDir tmp("attention_text");
  const fs::path& dir = tmp.path();
  {
    std::ofstream(dir / "t.txt") << "the cat sat on the mat.\nthe dog sat on the cat.\n"
                                    "a cat and a dog sat on a mat.\nthe cat ran to the dog and the dog sat.\n"
                                    "then the cat and the dog sat on the mat.\nthe end.\n";
  }
  const hr::CharDataset chars(dir / "t.txt", {.seq_len = 8});
  hr::Rng rng(2);
  const hr::ModelConfig config = tiny_model_config(chars.vocab_size(), 8);
  hr::TransformerLM<float> model(config, rng);
  const hr::DataConfig data{.task = "", .text = (dir / "t.txt").string(), .seq_len = 8, .vocab = 0};
  hr::save_checkpoint(dir / "model.safetensors", model, config, {{hr::kDataMetadataKey, hr::data_metadata(data, chars)}});

  const CliResult r = run_headroom("attention --model " + dir.string() + " --input 'a cat\n'");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const hr::SafetensorsFile f = hr::read_safetensors(dir / "attention.safetensors");
  CHECK(shape_of(f, "layer.0") == hr::Shape{2, 6, 6});
  CHECK(hr::from_record<hr::Index>(*f.find("tokens"), "t") == chars.encode("a cat\n"));
  const std::string svg = read_file(dir / "attention.svg");
  CHECK(count(svg, ">\u2423</text>") == 2 * 2);  // the space, visible, as key and query on 2 maps
  CHECK(count(svg, ">\u21b5</text>") == 2 * 2);  // the newline
  CHECK(count(svg, ">c</text>") == 2 * 2);
  CHECK(svg.find(">input &quot;a cat\u21b5&quot;</text>") != std::string::npos);
  CHECK(r.output.find("input \"a cat\u21b5\" (6 tokens)") != std::string::npos);
  CHECK(r.output.find("(layer.0: float32 (2, 6, 6) [head, query, key]; tokens: int64 (6))") != std::string::npos);

  // --example: a window of seq_len characters of the validation split, the same each time.
  REQUIRE(run_headroom("attention --model " + dir.string() + " --example 1").status == 0);
  const hr::IndexArray window =
      hr::from_record<hr::Index>(*hr::read_safetensors(dir / "attention.safetensors").find("tokens"), "t");
  REQUIRE(window.size() == 8);
  const std::string text = read_file(dir / "t.txt");
  const std::string window_text = chars.decode(window);
  CHECK(text.rfind(window_text) >= text.size() * 9 / 10);  // in the last tenth, the validation split

  // Without the training text, --example cannot be drawn; --input still can.
  fs::rename(dir / "t.txt", dir / "moved.txt");
  const CliResult gone = run_headroom("attention --model " + dir.string() + " --example 0");
  CHECK(gone.status == 2);
  CHECK(count_lines(gone.output) == 1);
  CHECK(gone.output.find("which is not there") != std::string::npos);
  CHECK(gone.output.find("--input TEXT") != std::string::npos);
  CHECK(run_headroom("attention --model " + dir.string() + " --input 'the'").status == 0);

  const CliResult unknown = run_headroom("attention --model " + dir.string() + " --input 'the cow'");
  CHECK(unknown.status == 2);
  CHECK(unknown.output.find("--input: character U+0077 'w' at position 6 is not in the vocabulary") !=
        std::string::npos);
  const CliResult empty = run_headroom("attention --model " + dir.string() + " --input ''");
  CHECK(empty.status == 2);
  CHECK(empty.output == "headroom: error: --input: is empty (it needs at least one character)\n");
}

TEST_CASE("headroom attention: user mistakes are one line and exit status 2, naming the value") {
  const fs::path& dir = induction_model();
  const std::string m = "attention --model " + dir.string() + " ";
  struct Case {
    std::string args;
    std::string message;  // a part of the one line
  };
  const fs::path missing = dir / "nope";
  const std::vector<Case> cases{
      {"attention --model " + missing.string(), "model '" + missing.string() + "': no such file or directory"},
      {m + "--input '3 99'", "--input: token 99 is out of range for the model's vocab 12 (ids 0 to 11)"},
      {m + "--input '3 x'", "--input: 'x' is not a token id"},
      {m + "--input ''", "--input: no token ids in it"},
      {m + "--input '3 4 5 6 7 8 9 10 11'", "--input: 9 tokens are more than the model's max_len 8"},
      {m + "--input 3 --example 2", "--input excludes --example"},
      {m + "--example -1", "--example: must be a whole number"},
      {m + "--example 100000", "--example: must be below 100000, got 100000"},
      {m + "--out " + (dir / "w.safetensors").string(), "the weights go to the same name with .safetensors"},
      {m + "--out " + (dir / "a.svg").string() + " --weights " + (dir / "a.svg").string(),
       "--weights '" + (dir / "a.svg").string() + "': is the SVG's own path (--out)"},
      {m + "--out " + (dir / "no/such/dir/a.svg").string(),
       "--out '" + (dir / "no/such/dir/a.svg").string() + "': the directory '" + (dir / "no/such/dir").string() +
           "' does not exist"},
      {m + "--weights " + dir.string(), "--weights '" + dir.string() + "': is a directory"},
  };
  for (const Case& c : cases) {
    const CliResult r = run_headroom(c.args);
    INFO(c.args << "\n" << r.output);
    CHECK(r.status == 2);
    CHECK(count_lines(r.output) == 1);
    CHECK(r.output.find(c.message) != std::string::npos);
  }
  const CliResult help = run_headroom("attention --help");
  CHECK(help.status == 0);
  for (const char* flag : {"--model", "--input", "--example", "--out", "--weights"}) {
    INFO(flag);
    CHECK(help.output.find(flag) != std::string::npos);
  }
}
