// Resources checked before they are spent (docs/design.md #12): the memory a training
// step or an evaluation takes, estimated from the config alone, against the memory
// this machine has. All sizes are doubles, so a config with
// vocab 2e9 and d_model 1e5 gives a huge estimate instead of an overflowed one.
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>

#include "nn/config.hpp"
#include "train/config.hpp"

namespace headroom {

// TransformerLM's parameter count for a config (vocab set; resolved as
// ModelConfig::resolved() does, and refused as it refuses): count_parameters's total
// (nn/param_count.hpp). Equals parameter_count() of the model built from the config.
// The memory estimates below use the same closed form in doubles, so that a config
// too large for 64 bits still gets an estimate to refuse.
double model_parameter_count(const ModelConfig& config);

// Bytes, by what holds them.
struct MemoryEstimate {
  double parameters = 0;
  double gradients = 0;
  double optimizer_state = 0;  // Adam/AdamW: 2 floats per parameter; SGD: 1 (momentum) or 0
  double activations = 0;      // one step's tape (train) or one forward pass (eval)
  double data = 0;             // batches of tokens; the toy task's per-vocab pool or the --text's ids
  std::string optimizer_name{};  // "Adam state", "SGD momentum"; empty: no state
  double total() const { return parameters + gradients + optimizer_state + activations + data; }
};

// One training step of `config` (its model.vocab may be 0: the data's vocab is used,
// data.vocab for a toy task; max_len 0 means seq_len). `text_vocab` is the vocabulary
// of a --text file, when known.
//
// Activations, floats: the tape keeps every layer's intermediate values,
//   L [B T (7 C + H d_k + 2 G d_k + G d_v + 2 H d_v + 3 d_ff) + B H T T]
//   + B T (3 C) + 3 B T V
// (per layer: the two norms, q/k/v, the heads and their merge, out_proj, residuals,
// fc1, its activation and fc2; the attention weights, which the fused op keeps; then the
// embeddings, ln_f, the logits and the cross-entropy's softmax). With model.dropout
// > 0, plus
//   L [B T (2 b C + 3 H d_k + 4 G d_k + 3 G d_v + 3 H d_v) + 6 B H T T]
//   + 2 B T C + 2 B H T T
// with b the residual branches per layer (2, 1 with attn_only): each site's output and
// mask, and the composed attention that dropout on the weights runs instead of the
// fused op, with its copies of the heads.
MemoryEstimate estimate_training_memory(const TrainConfig& config, std::size_t text_vocab = 0);
// A forward pass without a tape over `batch` rows of seq_len tokens of a model with
// this (resolved) config: the parameters and one layer's activations at a time.
MemoryEstimate estimate_eval_memory(const ModelConfig& model, std::size_t batch, std::size_t seq_len);

// Evaluation (eval, heads) over `batches` batches of `batch` rows: with held_batches,
// they are all drawn up front (heads), else one at a time. Refused as check_memory
// does, naming --batch or, when the held batches dominate, --batches.
void check_eval_memory(const ModelConfig& model, std::size_t batch, std::size_t seq_len, std::size_t batches,
                       bool held_batches);

// Bytes this machine can give: $HEADROOM_MEMORY_LIMIT when set (bytes, or with a K, M,
// G or T suffix for KiB..TiB: "512M"), else MemAvailable of /proc/meminfo or what
// this process's cgroup v2 memory.max leaves, whichever is smaller, else the
// available physical pages; nullopt when none of them is known. A malformed
// HEADROOM_MEMORY_LIMIT is a std::invalid_argument naming it.
struct AvailableMemory {
  double bytes = 0;
  std::string source{};  // "HEADROOM_MEMORY_LIMIT", "MemAvailable"
};
std::optional<AvailableMemory> available_memory();

// What a cgroup v2 hierarchy mounted at `root` leaves to a process in `cgroup` (as
// /proc/self/cgroup names it, "/a/b"): for that group and each ancestor with a
// numeric memory.max, the limit less its memory.current; the least of them, or
// nullopt when none has a limit. available_memory() takes the smaller of this and
// MemAvailable.
std::optional<AvailableMemory> cgroup_available_memory(const std::filesystem::path& root, const std::string& cgroup);

// "1.5 GiB", "12.0 MiB", "512 bytes".
std::string format_bytes(double bytes);

// Throws std::invalid_argument, one line, when `estimate` is above the available
// memory: "<culprit>: <doing> needs about X (parameters .., ...) but this machine has
// Y available (<source>)". `culprit` names the flag that dominates ("--d-model 100000").
void check_memory(const MemoryEstimate& estimate, const std::string& culprit, const std::string& doing);

// The flag whose value, set back to its default, shrinks a training step's estimate
// the most, as "--d-model 100000"; "the config" when none does.
std::string dominant_training_flag(const TrainConfig& config, std::size_t text_vocab = 0);

// A --text file's memory while it is read (its ids and code points, 12 bytes per
// byte of the file at most), refused as check_memory refuses, before it is read.
void check_text_memory(const TrainConfig& config);

// The two together: estimate a training step of `config` and refuse it, naming the
// dominant flag, when it does not fit. `jobs` runs side by side multiply it.
void check_training_memory(const TrainConfig& config, std::size_t text_vocab = 0, std::size_t jobs = 1);

// The FLOPs of one training step's matrix products (2 per multiply-add): the q, k,
// v and out projections, Q K^T and P V over the whole (B, T, T), the feed-forward's
// two matrices (SwiGLU's three) and the output head, times 3 for the forward and
// the backward's two products of each. model.vocab must be set. The same count
// bench/train_step_bench divides by a step's time.
double training_step_flops(const ModelConfig& model, std::size_t batch, std::size_t seq_len);
// The same for a training config: its model with the data's vocabulary, its batch and seq_len.
double training_step_flops(const TrainConfig& config, std::size_t text_vocab = 0);

// The threads a training run uses: optim.threads, or fewer where its steps are too
// small for more to pay or its batch has fewer rows than threads
// (step_threads_that_pay, train/step.hpp). `why` says so when it is fewer, for the
// CLI to print; empty otherwise.
struct ThreadChoice {
  int asked = 1, used = 1;
  double step_flops = 0;
  std::string why;
};
ThreadChoice training_threads(const TrainConfig& config, std::size_t text_vocab = 0);
// The same for commands that run the model forward only (eval, heads): `asked`, or
// fewer where one forward pass of `batch` rows of `seq_len` tokens, a third of a
// training step's products, is too small for more to pay. model.vocab must be set.
ThreadChoice forward_threads(const ModelConfig& model, std::size_t batch, std::size_t seq_len, int asked);

}  // namespace headroom
