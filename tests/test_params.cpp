// `headroom params` as a user meets it: the table and its numbers, --json, a config
// file, counts of models far too large to build, and one-line errors with status 2.
// And attention-only models without norms through train, heads and attention.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.hpp"
#include "support.hpp"

namespace fs = std::filesystem;

namespace {

// The row of the table that starts with `name`, its columns split on spaces.
std::string row(const std::string& output, const std::string& name) {
  const std::size_t at = output.find("\n" + name + " ");
  if (at == std::string::npos) return "";
  return output.substr(at + 1, output.find('\n', at + 1) - at - 1);
}

}  // namespace

TEST_CASE("headroom params: the seeds' numbers for a 4096-wide model, at once and without allocating") {
  // 32 layers of d_model 4096: about 6.7e9 parameters, which would need 27 GB of floats.
  const CliResult r = run_headroom("params --d-model 4096 --heads 32 --layers 32 --vocab 32000 --seq-len 4096 --no-bias");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(row(r.output, "  attention q").find("16,777,216") != std::string::npos);
  CHECK(row(r.output, "  attention ").find("67,108,864") != std::string::npos);  // 4 * 4096^2
  CHECK(row(r.output, "  ffn").find("134,217,728") != std::string::npos);        // 2 * 4096 * 16384
  // 32 * (4 * 4096^2 + 2 * 4096 * 16384 + 4 * 4096) + 2 * 32000 * 4096 + 4096 * 4096 + 2 * 4096
  CHECK(row(r.output, "total").find("6,721,904,640") != std::string::npos);
  CHECK(r.output.find("KV cache: 1,048,576 bytes per token (1.0 MiB;") != std::string::npos);

  const CliResult gqa = run_headroom("params --d-model 4096 --heads 32 --kv-heads 8 --layers 32 --vocab 32000 --json");
  INFO(gqa.output);
  REQUIRE(gqa.status == 0);
  const nlohmann::json j = nlohmann::json::parse(gqa.output);
  CHECK(j["layers"].size() == 32);
  CHECK(j["layers"][0]["q"]["weights"] == 16'777'216);
  CHECK(j["layers"][0]["k"]["weights"] == 4'194'304);  // 4096 x (8 x 128): a quarter of MHA's
  CHECK(j["layers"][0]["v"]["weights"] == 4'194'304);
  CHECK(j["kv_cache_bytes_per_token"] == 262'144);
  CHECK(j["config"]["n_kv_heads"] == 8);
}

TEST_CASE("headroom params: attention is 4 d_model^2 whatever the head count, and the switches show") {
  for (const char* heads : {"1", "2", "4", "8", "16"}) {
    const CliResult r = run_headroom(std::string("params --d-model 512 --no-bias --heads ") + heads);
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(row(r.output, "  attention ").find("1,048,576") != std::string::npos);
  }
  const CliResult bare = run_headroom("params --task copy --layers 1 --attn-only --norm none --json");
  INFO(bare.output);
  REQUIRE(bare.status == 0);
  const nlohmann::json j = nlohmann::json::parse(bare.output);
  CHECK(j["layers"][0]["ffn"]["total"] == 0);
  CHECK(j["layers"][0]["norms"]["total"] == 0);
  CHECK(j["ln_f"]["total"] == 0);
  CHECK(j["config"]["d_ff"] == 0);
  CHECK(j["total"] == j["tok_emb"]["total"].get<int>() + j["pos_emb"]["total"].get<int>() +
                          j["layers"][0]["attention"].get<int>() + j["head"]["total"].get<int>());
}

TEST_CASE("headroom params --config reads a run's config.json, and flags override it") {
  const TempDir tmp("params_config");
  const fs::path run = tmp.path() / "run";
  const CliResult trained =
      run_headroom("train --task copy --steps 2 --eval-every 2 --d-model 16 --layers 1 --heads 2 --attn-only --norm "
                   "none --quiet --out " + run.string());
  INFO(trained.output);
  REQUIRE(trained.status == 0);
  const CliResult r = run_headroom("params --json --config " + (run / "config.json").string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  const nlohmann::json j = nlohmann::json::parse(r.output);
  // train's own count of the parameters it trained.
  CHECK(trained.output.find(std::to_string(j["total"].get<std::size_t>()) + " parameters") != std::string::npos);
  CHECK(j["config"]["attn_only"] == true);
  const CliResult wider = run_headroom("params --json --d-model 32 --config " + (run / "config.json").string());
  REQUIRE(wider.status == 0);
  CHECK(nlohmann::json::parse(wider.output)["config"]["d_model"] == 32);

  // --attn-only over the config.json of a model with a feed-forward: its d_ff is the
  // default 4 d_model, which says nothing; any other width would be dropped, so it is refused.
  const fs::path plain = tmp.path() / "plain.json", wide = tmp.path() / "wide.json";
  std::ofstream(plain) << R"({"model": {"d_model": 16, "d_ff": 64, "activation": "gelu"}})";
  std::ofstream(wide) << R"({"model": {"d_model": 16, "d_ff": 48}})";
  const CliResult over = run_headroom("params --json --attn-only --config " + plain.string());
  INFO(over.output);
  REQUIRE(over.status == 0);
  CHECK(nlohmann::json::parse(over.output)["config"]["d_ff"] == 0);
  const CliResult refused = run_headroom("params --attn-only --config " + wide.string());
  CHECK(refused.status == 2);
  CHECK(refused.output.find("d_ff 48 with attn_only") != std::string::npos);

  // A dropout run's config.json counts as the same model: the file's dropout passes
  // (it says how the run trained), --dropout 0 too.
  const fs::path dropped = tmp.path() / "dropped.json";
  std::ofstream(dropped) << R"({"model": {"d_model": 16, "dropout": 0.1}})";
  for (const std::string extra : {"", "--dropout 0 "}) {
    const CliResult counted = run_headroom("params --json " + extra + "--config " + dropped.string());
    INFO(counted.output);
    REQUIRE(counted.status == 0);
    CHECK(nlohmann::json::parse(counted.output)["total"] ==
          nlohmann::json::parse(run_headroom("params --json --d-model 16").output)["total"]);
  }
}

TEST_CASE("headroom params: FLOPs grow with --context, and --help explains") {
  const CliResult at1 = run_headroom("params --json --seq-len 64 --context 1");
  const CliResult at64 = run_headroom("params --json --seq-len 64");
  REQUIRE(at1.status == 0);
  REQUIRE(at64.status == 0);
  const nlohmann::json a = nlohmann::json::parse(at1.output), b = nlohmann::json::parse(at64.output);
  CHECK(b["context"] == 64);
  // 2 layers x 2 FLOPs x 4 heads x (d_k 16 + d_v 16) per extra key, 63 more keys.
  CHECK(b["forward_flops_per_token"].get<double>() - a["forward_flops_per_token"].get<double>() ==
        doctest::Approx(2.0 * 2 * 4 * 32 * 63));
  const CliResult help = run_headroom("params --help");
  CHECK(help.status == 0);
  for (const char* flag : {"--d-model", "--heads", "--kv-heads", "--attn-only", "--norm", "--vocab", "--seq-len",
                           "--task", "--config", "--context", "--json"}) {
    CHECK_MESSAGE(help.output.find(flag) != std::string::npos, "params --help lacks " << flag);
  }
  CHECK(help.output.find("--lr") == std::string::npos);  // it trains nothing
  CHECK(help.output.find("\n  --text ") == std::string::npos);
}

TEST_CASE("headroom params and train: mistakes get one line and exit status 2") {
  struct Bad {
    const char* args;
    const char* says;
  };
  const Bad cases[] = {
      {"params --heads 3", "MultiHeadAttention: d_model=64 is not a multiple of n_heads=3"},
      {"params --attn-only --d-ff 128", "d_ff 128 with attn_only: an attention-only block has no feed-forward"},
      {"params --attn-only --activation relu", "activation 'relu' with attn_only"},
      {"params --norm rms", "norm must be 'pre', 'post' or 'none', got 'rms'"},
      {"params --lr 0.1", "--lr"},
      {"params --context 0", "--context: must be a whole number from 1"},
      {"params --context 500 --seq-len 64", "--context 500: the model reads at most max_len 64 tokens"},
      {"params --d-model 4096 --layers 200000", "n_layers 200000 is more than the 100000 layers it lists"},
      {"params --d-model 4294967296 --vocab 4294967296", "overflows 64 bits"},
      {"train --attn-only --d-ff 64 --no-save", "d_ff 64 with attn_only"},
      // params counts weights and FLOPs, which dropout does not change (docs/design.md #11).
      {"params --dropout 0.1",
       "--dropout 0.1: params counts a model's weights and its forward's FLOPs, which dropout does not change"},
      {"params --dropout 1", "--dropout: must be a number in [0, 1), got 1"},
      {"train --dropout 1 --no-save", "--dropout: must be a number in [0, 1), got 1"},
  };
  for (const Bad& bad : cases) {
    check_refused(bad.args, bad.says);
  }
}

TEST_CASE("an attention-only model without LayerNorm trains, and heads and attention read it") {
  const TempDir tmp("attn_only_interp");
  const fs::path run = tmp.path() / "run";
  const CliResult trained = run_headroom("train --task copy --steps 20 --eval-every 10 --d-model 16 --layers 1 "
                                         "--heads 2 --attn-only --norm none --quiet --out " + run.string());
  INFO(trained.output);
  REQUIRE(trained.status == 0);
  const CliResult heads = run_headroom("heads --model " + run.string() + " --batches 1");
  INFO(heads.output);
  CHECK(heads.status == 0);
  CHECK(heads.output.find("1 layers x 2 heads") != std::string::npos);
  const fs::path svg = tmp.path() / "attn.svg";
  const CliResult attention = run_headroom("attention --model " + run.string() + " --out " + svg.string());
  INFO(attention.output);
  CHECK(attention.status == 0);
  CHECK(fs::file_size(svg) > 0);
}

// ---- presets and the keys of docs/design.md #17 -----------------------------------

TEST_CASE("headroom params --preset llama: the resolved config, SwiGLU's three matrices, RMSNorm without bias") {
  const CliResult r = run_headroom("params --preset llama --json");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const nlohmann::json j = nlohmann::json::parse(r.output);
  const nlohmann::json& c = j["config"];
  CHECK(c["pos"] == "rope");
  CHECK(c["norm_type"] == "rmsnorm");
  CHECK(c["ffn"] == "swiglu");
  CHECK(c["norm"] == "pre");
  CHECK(c["bias"] == false);
  CHECK(c["tie_embeddings"] == false);
  CHECK(c["n_heads"] == 4);
  CHECK(c["n_kv_heads"] == 1);  // 4 heads / 4
  CHECK(c["d_ff"] == 176);      // 8 ceil(64 / 3)
  CHECK(j["preset"] == "llama");
  CHECK(j["pos_emb"]["total"] == 0);
  CHECK(j["layers"][0]["ffn"]["weights"] == 3 * 64 * 176);
  CHECK(j["layers"][0]["ffn"]["biases"] == 0);
  CHECK(j["layers"][0]["norms"]["weights"] == 2 * 64);
  CHECK(j["layers"][0]["norms"]["biases"] == 0);
  CHECK(j["ln_f"]["biases"] == 0);
  CHECK(j["layers"][0]["k"]["weights"] == 64 * 16);  // one kv head of d_k 16

  const CliResult table = run_headroom("params --preset llama");
  INFO(table.output);
  REQUIRE(table.status == 0);
  CHECK(table.output.find("d_ff 176, pre-norm, rope, rmsnorm, swiglu\n") != std::string::npos);
  CHECK(table.output.find("\npreset llama: norm=pre pos=rope bias=false tie_embeddings=false norm_type=rmsnorm "
                          "ffn=swiglu n_kv_heads=1\n") != std::string::npos);
  CHECK(row(table.output, "  ffn (gate, up, down)").find("33,792") != std::string::npos);  // 3 x 64 x 176
  CHECK(row(table.output, "  norms (ln1, ln2) rmsnorm").find("128") != std::string::npos);
  // A flag over one of its keys is marked.
  const CliResult learned = run_headroom("params --preset llama --pos learned");
  INFO(learned.output);
  REQUIRE(learned.status == 0);
  CHECK(learned.output.find(" pos=learned (changed) ") != std::string::npos);
  CHECK(learned.output.find("d_ff 176, pre-norm, rmsnorm, swiglu\n") != std::string::npos);
}

TEST_CASE("headroom params: qk norms and the key smear get rows of their own") {
  const CliResult r = run_headroom("params --qk-norm --key-smear --kv-heads 2 --pos none");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("pre-norm, no positions, qk-norm, key smear\n") != std::string::npos);
  CHECK(row(r.output, "  attention qk norms (q_norm, k_norm)").find("32") != std::string::npos);  // 2 x d_k 16
  CHECK(row(r.output, "  attention key smear").find("2") != std::string::npos);
  // The attention row sums all six: 4096 + 2 x 2048 + 4096 weights, 64 + 2 x 32 + 64 biases, 32 + 2.
  CHECK(row(r.output, "  attention ").find("12,514") != std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(run_headroom("params --json --qk-norm --key-smear --kv-heads 2").output);
  CHECK(j["layers"][0]["qk_norm"]["weights"] == 32);
  CHECK(j["layers"][0]["key_smear"]["weights"] == 2);
  CHECK(j["layers"][0]["attention"] == 12'514);
  const CliResult plain = run_headroom("params");
  CHECK(plain.output.find("qk norms") == std::string::npos);
  CHECK(plain.output.find("key smear") == std::string::npos);
}

TEST_CASE("--preset sits under --config, which sits under the flags, and llama's kv heads follow n_heads") {
  const TempDir tmp("params_preset");
  auto config_of = [](const std::string& args) {
    const CliResult r = run_headroom("params --json " + args);
    INFO(args << "\n" << r.output);
    REQUIRE(r.status == 0);
    return nlohmann::json::parse(r.output)["config"];
  };
  const fs::path file = tmp.path() / "c.json", kv_file = tmp.path() / "kv.json";
  std::ofstream(file) << R"({"model": {"pos": "learned", "n_heads": 8}})";
  std::ofstream(kv_file) << R"({"model": {"n_kv_heads": 4, "n_heads": 8}})";
  const std::string with_file = "--preset llama --config " + file.string();
  nlohmann::json c = config_of(with_file);
  CHECK(c["pos"] == "learned");  // the file over the preset
  CHECK(c["ffn"] == "swiglu");   // the preset's, not overridden
  CHECK(c["n_kv_heads"] == 2);   // the file's 8 heads / 4
  c = config_of(with_file + " --pos sinusoidal");
  CHECK(c["pos"] == "sinusoidal");  // the flag over the file
  c = config_of(with_file + " --heads 16");
  CHECK(c["n_kv_heads"] == 4);  // the flag's 16 heads / 4
  c = config_of(with_file + " --kv-heads 8");
  CHECK(c["n_kv_heads"] == 8);  // a flag sets it: no rule
  c = config_of("--preset llama --config " + kv_file.string());
  CHECK(c["n_kv_heads"] == 4);  // the file sets it: no rule
  c = config_of("--preset llama --heads 8");
  CHECK(c["n_kv_heads"] == 2);
  c = config_of("--preset llama --heads 2 --d-model 64");
  CHECK(c["n_kv_heads"] == 2);  // 4 does not divide 2
  CHECK(config_of("--preset gpt2") == config_of(""));  // gpt2 is the defaults
  // A preset key the final model would not read drops out; the same key from a flag is refused.
  c = config_of("--preset llama --attn-only");
  CHECK(c["attn_only"] == true);
  CHECK(c["ffn"] == "mlp");
  CHECK(c["norm_type"] == "rmsnorm");
  CHECK(c["pos"] == "rope");
  c = config_of("--preset llama --norm none");
  CHECK(c["norm_type"] == "layernorm");
  CHECK(c["ffn"] == "swiglu");
  const CliResult refused = run_headroom("params --preset llama --attn-only --ffn swiglu");
  CHECK(refused.status == 2);
  CHECK(refused.output.find("ffn 'swiglu' with attn_only") != std::string::npos);
}

TEST_CASE("--preset: an unknown name is one line listing the presets, and --help lists every key they set") {
  const TempDir tmp("preset_unknown");
  const std::string out = (tmp.path() / "sweep").string();
  for (const std::string& args : std::vector<std::string>{"params --preset gpt3", "train --preset gpt3 --no-save",
                                  "ablate --preset gpt3 --heads 1,2 --out " + out}) {
    check_refused(args, "--preset gpt3: unknown preset 'gpt3' (presets: gpt2, llama)");
  }
  CHECK_FALSE(fs::exists(out));
  for (const char* command : {"params", "train", "ablate"}) {
    const CliResult help = run_headroom(std::string(command) + " --help");
    INFO(command << "\n" << help.output);
    CHECK(help.status == 0);
    CHECK(help.output.find("--preset") != std::string::npos);
    // Help text may wrap: compare with the whitespace squeezed.
    std::string flat;
    for (char ch : help.output) {
      if (ch == '\n' || ch == ' ') {
        if (!flat.empty() && flat.back() != ' ') flat += ' ';
      } else {
        flat += ch;
      }
    }
    CHECK(flat.find("llama: norm=pre pos=rope bias=false tie_embeddings=false norm_type=rmsnorm ffn=swiglu "
                    "n_kv_heads=n_heads / 4 where 4 divides n_heads, else n_heads") != std::string::npos);
    CHECK(flat.find("gpt2: norm=pre activation=gelu pos=learned bias=true tie_embeddings=false norm_type=layernorm "
                    "ffn=mlp") != std::string::npos);
  }
}

TEST_CASE("headroom train --preset llama: config.json records the resolved keys, and the first line names the blocks") {
  const TempDir tmp("train_llama");
  const fs::path run = tmp.path() / "run";
  const CliResult r = run_headroom("train --preset llama --task copy --steps 2 --eval-every 2 --d-model 16 --layers 1 "
                                   "--heads 8 --quiet --out " + run.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  const nlohmann::json c = nlohmann::json::parse(read_file(run / "config.json"));
  CHECK_FALSE(c["model"].contains("preset"));  // the keys, not the name
  CHECK(c["model"]["pos"] == "rope");
  CHECK(c["model"]["norm_type"] == "rmsnorm");
  CHECK(c["model"]["ffn"] == "swiglu");
  CHECK(c["model"]["bias"] == false);
  CHECK(c["model"]["n_kv_heads"] == 2);  // 8 heads / 4
  CHECK(c["model"]["d_ff"] == 48);       // 8 ceil(16 / 3)
  // The run's config.json alone gives the same model, and params counts what train built.
  const CliResult again = run_headroom("params --json --config " + (run / "config.json").string());
  REQUIRE(again.status == 0);
  const nlohmann::json counted = nlohmann::json::parse(again.output);
  CHECK(counted["config"] == c["model"]);
  CHECK(r.output.find(std::to_string(counted["total"].get<std::size_t>()) + " parameters") != std::string::npos);

  const CliResult line = run_headroom("train --preset llama --task copy --steps 2 --eval-every 2 --d-model 16 "
                                      "--layers 1 --qk-norm --no-save");
  INFO(line.output);
  REQUIRE(line.status == 0);
  CHECK(line.output.find("d_k 4, d_v 4, pre-norm, rope, rmsnorm, swiglu, qk-norm\n") != std::string::npos);
  const CliResult plain = run_headroom("train --task copy --steps 2 --eval-every 2 --d-model 16 --layers 1 --no-save");
  CHECK(plain.output.find("d_k 4, d_v 4, pre-norm\n") != std::string::npos);
}

TEST_CASE("headroom params --preset llama at Llama 3 8B's sizes counts its 8,030,261,248 parameters") {
  // Meta-Llama-3-8B: d_model 4096, 32 layers, 32 heads over 8 kv heads, d_ff 14336, vocab 128256, untied;
  // its safetensors hold 8,030,261,248 values.
  const CliResult r = run_headroom("params --preset llama --d-model 4096 --layers 32 --heads 32 --vocab 128256 "
                                   "--d-ff 14336 --seq-len 8192 --json");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const nlohmann::json j = nlohmann::json::parse(r.output);
  CHECK(j["config"]["n_kv_heads"] == 8);
  CHECK(j["total"] == 8'030'261'248);
  CHECK(j["kv_cache_bytes_per_token"] == 32 * 8 * 256 * 4);
}
