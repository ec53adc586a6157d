// Model presets (nn/presets.hpp): the keys each sets, Llama's kv-head rule, the
// unknown-name message, and the block names the command headers use.
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "nn/presets.hpp"

namespace hr = headroom;

TEST_CASE("presets: gpt2 is the defaults, llama sets Llama's blocks") {
  CHECK(hr::preset_names() == "gpt2, llama");
  hr::ModelConfig gpt2;
  gpt2.qk_norm = true;  // a key the preset does not set is left as it is
  hr::apply_preset(hr::find_preset("gpt2"), gpt2);
  hr::ModelConfig expected;
  expected.qk_norm = true;
  CHECK(gpt2 == expected);

  hr::ModelConfig llama;
  llama.n_kv_heads = 3;
  hr::apply_preset(hr::find_preset("llama"), llama);
  CHECK(llama.pos == hr::PositionEncoding::rope);
  CHECK(llama.norm_type == hr::NormType::rmsnorm);
  CHECK(llama.ffn == hr::FeedForwardType::swiglu);
  CHECK(llama.norm == hr::NormPlacement::pre);
  CHECK_FALSE(llama.bias);
  CHECK_FALSE(llama.tie_embeddings);
  CHECK(llama.n_kv_heads == 3);  // left to the rule, which needs the final n_heads
  CHECK(llama.d_ff == 0);        // SwiGLU's own default width
  CHECK(hr::describe_preset(hr::find_preset("llama")) ==
        "norm=pre pos=rope bias=false tie_embeddings=false norm_type=rmsnorm ffn=swiglu "
        "n_kv_heads=n_heads / 4 where 4 divides n_heads, else n_heads");
  CHECK(hr::describe_preset(hr::find_preset("gpt2")) ==
        "norm=pre activation=gelu pos=learned bias=true tie_embeddings=false norm_type=layernorm ffn=mlp");
}

TEST_CASE("presets: llama's kv heads are a quarter of the query heads where 4 divides them") {
  const hr::ModelPreset& llama = hr::find_preset("llama");
  REQUIRE(static_cast<bool>(llama.kv_heads));
  CHECK(llama.kv_heads(32) == 8);  // Llama 3 8B
  CHECK(llama.kv_heads(4) == 1);
  CHECK(llama.kv_heads(8) == 2);
  CHECK(llama.kv_heads(6) == 6);  // 4 does not divide 6: no grouping
  CHECK(llama.kv_heads(2) == 2);
  CHECK_FALSE(static_cast<bool>(hr::find_preset("gpt2").kv_heads));
}

TEST_CASE("presets: an unknown name is refused with the list") {
  CHECK_THROWS_WITH_AS(hr::find_preset("gpt3"), "unknown preset 'gpt3' (presets: gpt2, llama)", std::invalid_argument);
  CHECK_THROWS_AS(hr::find_preset(""), std::invalid_argument);
}

TEST_CASE("block_choices names what differs from GPT-2's blocks, in order") {
  CHECK(hr::block_choices(hr::ModelConfig{}).empty());
  hr::ModelConfig llama;
  hr::apply_preset(hr::find_preset("llama"), llama);
  CHECK(hr::block_choices(llama) == std::vector<std::string>{"rope", "rmsnorm", "swiglu"});
  const hr::ModelConfig induction{.pos = hr::PositionEncoding::sinusoidal, .qk_norm = true, .key_smear = true,
                                  .pos_qk_only = true};
  CHECK(hr::block_choices(induction) ==
        std::vector<std::string>{"sinusoidal", "positions in q/k", "qk-norm", "key smear"});
  CHECK(hr::block_choices(hr::ModelConfig{.pos = hr::PositionEncoding::none}) ==
        std::vector<std::string>{"no positions"});
}
