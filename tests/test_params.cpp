// `headroom params` as a user meets it: the table and its numbers, --json, a config
// file, counts of models far too large to build, and one-line errors with status 2.
// And attention-only models without norms through train, heads and attention.
#include <filesystem>
#include <fstream>
#include <string>

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
  CHECK(help.output.find("\n    --text ") == std::string::npos);
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
