#include "train/resources.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>

#include "autograd/parallel.hpp"
#include "autograd/whole_number.hpp"
#include "nn/param_count.hpp"
#include "train/step.hpp"

namespace headroom {
namespace {

constexpr double kFloat = 4;  // bytes: the models train in float
constexpr double kIndex = 8;  // bytes: a token id (Index)
// A --text file in memory, per byte of the file: its ids (one per character, at
// most one per byte) for as long as the run lasts, and while it is read also its
// code points (4 bytes each), from which the ids are made (data/char_dataset.cpp).
constexpr double kTextResident = kIndex;
constexpr double kTextReading = kIndex + 4;

// The size of the run's --text file, or 0 for a toy task (or a file not there, which
// the dataset refuses with a better message).
double text_bytes(const TrainConfig& c) {
  if (c.data.text.empty()) return 0;
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(c.data.text, ec);
  return ec ? 0 : static_cast<double>(size);
}

// The sizes the estimates use, with ModelConfig::resolved()'s zeros filled in.
struct Sizes {
  double V, C, L, H, G, dk, dv, dff, max_len, bias;
  double norms;  // LayerNorms per block: 2, 1 with attn_only, 0 with no norm
  double norm_params;  // per norm and channel: 2 for LayerNorm (weight, bias), 1 for RMSNorm
  double ffn_in;       // matrices from d_model to d_ff: 1 for the MLP's fc1, 2 for SwiGLU's gate and up
  bool concat, learned, tied, normed, rope, qk_norm, key_smear, pos_qk_only;
  bool drops;  // dropout > 0
};

Sizes sizes_of(const ModelConfig& m, std::size_t seq_len) {
  auto d = [](std::size_t v) { return static_cast<double>(v); };
  Sizes s{};
  s.V = d(m.vocab);
  s.C = d(m.d_model);
  s.L = d(m.n_layers);
  s.H = d(std::max<std::size_t>(m.n_heads, 1));
  s.G = m.n_kv_heads == 0 ? s.H : d(m.n_kv_heads);
  s.dk = m.d_k == 0 ? std::floor(s.C / s.H) : d(m.d_k);
  s.dv = m.d_v == 0 ? s.dk : d(m.d_v);
  s.dff = m.attn_only ? 0 : m.d_ff == 0 ? d(default_d_ff(m.d_model, m.ffn)) : d(m.d_ff);
  s.max_len = m.max_len == 0 ? d(seq_len) : d(m.max_len);
  s.bias = m.bias ? 1 : 0;
  s.concat = m.head_combine == HeadCombine::concat;
  s.learned = m.pos == PositionEncoding::learned;
  s.tied = m.tie_embeddings;
  s.normed = m.norm != NormPlacement::none;
  s.norms = s.normed ? (m.attn_only ? 1 : 2) : 0;
  s.norm_params = m.norm_type == NormType::rmsnorm ? 1 : 2;
  s.ffn_in = m.ffn == FeedForwardType::swiglu ? 2 : 1;
  s.rope = m.pos == PositionEncoding::rope;
  s.qk_norm = m.qk_norm;
  s.key_smear = m.key_smear;
  s.pos_qk_only = m.pos_qk_only;
  s.drops = m.dropout > 0;
  return s;
}

double parameters(const Sizes& s) {
  const double attention = (s.C + s.bias) * (s.H * s.dk + s.G * s.dk + s.G * s.dv) +
                           s.C * (s.concat ? s.H * s.dv : s.dv) + s.bias * s.C +
                           (s.qk_norm ? 2 * s.dk : 0) + (s.key_smear ? s.G : 0);
  const double ffn = s.dff == 0 ? 0 : (s.ffn_in + 1) * s.C * s.dff + s.bias * (s.ffn_in * s.dff + s.C);
  const double block = s.norm_params * s.norms * s.C + attention + ffn;
  return s.V * s.C + (s.learned ? s.max_len * s.C : 0) + s.L * block + (s.normed ? s.norm_params * s.C : 0) +
         (s.tied ? 0 : s.C * s.V);
}

// Floats one layer's forward pass keeps, and the embeddings' and the head's. The
// feed-forward is 3 d_ff-wide tensors: the MLP's as measured (docs/cli/train.md,
// Limits), SwiGLU's gate_proj and up_proj outputs and the gated product (the fused
// op keeps no more). RMSNorm keeps what LayerNorm keeps less the mean: counted the same.
// The blocks of docs/design.md #17 add their outputs: QK-norm's normed q and k,
// the smeared k, RoPE's rotated q and k, pos_qk_only's x + P (one, shared by q and k).
double layer_activations(const Sizes& s, double B, double T) {
  const double BT = B * T;
  const double qk = s.H * s.dk + s.G * s.dk;
  const double extra = (s.qk_norm ? qk : 0) + (s.key_smear ? s.G * s.dk : 0) + (s.rope ? qk : 0) +
                       (s.pos_qk_only ? s.C : 0);
  return BT * (7 * s.C + s.H * s.dk + 2 * s.G * s.dk + s.G * s.dv + 2 * s.H * s.dv + 3 * s.dff + extra) +
         B * s.H * T * T;  // the fused attention op keeps only the weights
}
double outer_activations(const Sizes& s, double B, double T) { return B * T * (3 * s.C + 3 * s.V); }

// What dropout adds to a training step's tape (nothing in eval mode, so nothing to an
// evaluation's estimate). Each site keeps its output and its mask: 2 B T C at the
// input and at each residual branch (two a layer, one with attn_only). Dropout on the
// attention weights runs the composed attention instead of the fused op. Its scores,
// scaled scores, masked scores, softmax, dropped weights and mask are each B H T T
// where the fused op kept one such tensor: we count 6 more a layer (the masks around
// them make up the difference of one), and 2 more once, the gradients of two of them
// that its backward holds at the same time. It also copies q, k and v into heads and
// the heads back, and the tape keeps each reshape, permute and transpose: per token
// 3 H d_k + 4 G d_k + 3 G d_v, and 3 H d_v beyond the fused op's one output.
double dropout_activations(const Sizes& s, double B, double T) {
  if (!s.drops) return 0;
  const double BT = B * T, BHTT = B * s.H * T * T;
  const double branches = s.dff == 0 ? 1 : 2;
  const double copies = 3 * s.H * s.dk + 4 * s.G * s.dk + 3 * s.G * s.dv + 3 * s.H * s.dv;
  return s.L * (BT * (2 * branches * s.C + copies) + 6 * BHTT) + 2 * BT * s.C + 2 * BHTT;
}

ModelConfig with_vocab(const TrainConfig& c, std::size_t text_vocab) {
  ModelConfig m = c.model;
  if (m.vocab == 0) m.vocab = reads_text(c.data) ? text_vocab : c.data.vocab;
  return m;
}

[[noreturn]] void bad_limit(const char* text) {
  throw std::invalid_argument(fmt::format(
      "HEADROOM_MEMORY_LIMIT must be a number of bytes, optionally with a K, M, G or T suffix, got '{}'", text));
}

std::optional<double> parse_memory_limit(const char* text) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || errno != 0 || !(v > 0) || !std::isfinite(v)) bad_limit(text);
  const std::string suffix(end);
  double scale = 1;
  if (suffix == "K" || suffix == "KiB") scale = 1024.0;
  else if (suffix == "M" || suffix == "MiB") scale = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "GiB") scale = 1024.0 * 1024 * 1024;
  else if (suffix == "T" || suffix == "TiB") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (!suffix.empty()) bad_limit(text);
  return v * scale;
}

// Where the cgroup v2 hierarchy is mounted (a "cgroup2" line of mountinfo), and
// this process's place in it (the "0::" line of /proc/self/cgroup).
std::optional<std::pair<std::filesystem::path, std::string>> own_cgroup() {
  std::ifstream mounts("/proc/self/mountinfo");
  std::string line;
  std::filesystem::path root;
  while (root.empty() && std::getline(mounts, line)) {
    const std::size_t dash = line.find(" - cgroup2 ");
    if (dash == std::string::npos) continue;
    std::istringstream fields(line.substr(0, dash));
    std::string id, parent, device, mount_root, mount_point;
    if (fields >> id >> parent >> device >> mount_root >> mount_point) root = mount_point;
  }
  if (root.empty()) return std::nullopt;
  std::ifstream groups("/proc/self/cgroup");
  while (std::getline(groups, line)) {
    if (line.starts_with("0::")) return std::make_pair(root, line.substr(3));
  }
  return std::nullopt;
}

std::optional<double> mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

}  // namespace

double model_parameter_count(const ModelConfig& config) {
  return static_cast<double>(count_parameters(config, config.max_len).total());
}

MemoryEstimate estimate_training_memory(const TrainConfig& c, std::size_t text_vocab) {
  const Sizes s = sizes_of(with_vocab(c, text_vocab), c.data.seq_len);
  const double B = static_cast<double>(c.optim.batch), T = static_cast<double>(c.data.seq_len);
  MemoryEstimate e;
  const double p = parameters(s);
  e.parameters = kFloat * p;
  e.gradients = kFloat * p;
  if (c.optim.optimizer == OptimizerKind::sgd) {
    e.optimizer_state = c.optim.momentum > 0 ? kFloat * p : 0;
    e.optimizer_name = c.optim.momentum > 0 ? "SGD momentum" : "";
  } else {
    e.optimizer_state = 2 * kFloat * p;
    e.optimizer_name = "Adam state";
  }
  // The values once, not their gradients as well: counting both gave twice the
  // measured peak RSS, the values alone match it (the table in docs/cli/train.md, Limits).
  e.activations =
      kFloat * (s.L * layer_activations(s, B, T) + outer_activations(s, B, T) + dropout_activations(s, B, T));
  // A batch of (B, T+1) ids and its mask, for train and validation; a toy task draws
  // distinct tokens from a pool of its whole vocabulary.
  e.data = 2 * B * (T + 1) * (kIndex + 1) + (!reads_text(c.data) ? kIndex * s.V : kTextResident * text_bytes(c));
  return e;
}

MemoryEstimate estimate_eval_memory(const ModelConfig& model, std::size_t batch, std::size_t seq_len) {
  const Sizes s = sizes_of(model, seq_len);
  const double B = static_cast<double>(batch), T = static_cast<double>(seq_len);
  MemoryEstimate e;
  e.parameters = kFloat * parameters(s);
  e.activations = kFloat * (2 * layer_activations(s, B, T) + outer_activations(s, B, T));
  e.data = B * (T + 1) * (kIndex + 1);
  return e;
}

std::optional<AvailableMemory> cgroup_available_memory(const std::filesystem::path& root, const std::string& cgroup) {
  namespace fs = std::filesystem;
  const auto read_bytes = [](const fs::path& file) -> std::optional<double> {
    std::ifstream in(file);
    std::string text;
    if (!(in >> text) || text == "max") return std::nullopt;
    const std::optional<std::uint64_t> v = parse_whole_number(text);
    return v ? std::optional<double>(static_cast<double>(*v)) : std::nullopt;
  };
  std::optional<AvailableMemory> tightest;
  fs::path relative = fs::path(cgroup).relative_path();
  for (;;) {
    const fs::path dir = root / relative;
    if (const std::optional<double> limit = read_bytes(dir / "memory.max")) {
      const double used = read_bytes(dir / "memory.current").value_or(0);
      const double left = std::max(0.0, *limit - used);
      if (!tightest || left < tightest->bytes) {
        tightest = AvailableMemory{.bytes = left, .source = fmt::format("{} less memory.current", (dir / "memory.max").string())};
      }
    }
    if (relative.empty()) break;
    relative = relative.parent_path();
  }
  return tightest;
}

std::optional<AvailableMemory> available_memory() {
  if (const char* limit = std::getenv("HEADROOM_MEMORY_LIMIT"); limit != nullptr && *limit != '\0') {
    return AvailableMemory{.bytes = *parse_memory_limit(limit), .source = "HEADROOM_MEMORY_LIMIT"};
  }
  // A container's limit is its cgroup's memory.max, which MemAvailable knows nothing of.
  std::optional<AvailableMemory> cgroup;
  if (const auto own = own_cgroup()) cgroup = cgroup_available_memory(own->first, own->second);
  if (const auto bytes = mem_available()) {
    if (cgroup && cgroup->bytes < *bytes) return cgroup;
    return AvailableMemory{.bytes = *bytes, .source = "MemAvailable"};
  }
  if (cgroup) return cgroup;
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) {
    return AvailableMemory{.bytes = static_cast<double>(pages) * static_cast<double>(page),
                           .source = "available physical pages"};
  }
  return std::nullopt;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return fmt::format("{:.0f} bytes", bytes);
  double v = bytes / 1024;
  std::size_t u = 0;
  while (v >= 1024 && u + 1 < std::size(units)) {
    v /= 1024;
    ++u;
  }
  return v >= 1e4 ? fmt::format("{:.3g} {}", v, units[u]) : fmt::format("{:.1f} {}", v, units[u]);
}

void check_memory(const MemoryEstimate& e, const std::string& culprit, const std::string& doing) {
  const std::optional<AvailableMemory> available = available_memory();
  if (!available || e.total() <= available->bytes) return;
  std::string parts = fmt::format("parameters {}", format_bytes(e.parameters));
  if (e.gradients > 0) parts += fmt::format(", gradients {}", format_bytes(e.gradients));
  if (e.optimizer_state > 0) parts += fmt::format(", {} {}", e.optimizer_name, format_bytes(e.optimizer_state));
  parts += fmt::format(", activations {}, data {}", format_bytes(e.activations), format_bytes(e.data));
  throw std::invalid_argument(fmt::format("{}: {} needs about {} ({}) but this machine has {} available ({})", culprit,
                                          doing, format_bytes(e.total()), parts, format_bytes(available->bytes),
                                          available->source));
}

void check_eval_memory(const ModelConfig& model, std::size_t batch, std::size_t seq_len, std::size_t batches,
                       bool held_batches) {
  MemoryEstimate e = estimate_eval_memory(model, batch, seq_len);
  const double one_batch = e.data;
  if (held_batches) e.data *= static_cast<double>(batches);
  const bool batches_dominate = held_batches && e.data - one_batch > e.activations;
  check_memory(e, batches_dominate ? fmt::format("--batches {}", batches) : fmt::format("--batch {}", batch),
               "evaluating");
}

std::string dominant_training_flag(const TrainConfig& c, std::size_t text_vocab) {
  const TrainConfig defaults;
  struct Candidate {
    std::string flag;
    std::size_t value;
    void (*reset)(TrainConfig&, const TrainConfig&);
  };
  const std::vector<Candidate> candidates{
      {"--d-model", c.model.d_model, [](TrainConfig& t, const TrainConfig& d) { t.model.d_model = d.model.d_model; }},
      {"--layers", c.model.n_layers, [](TrainConfig& t, const TrainConfig& d) { t.model.n_layers = d.model.n_layers; }},
      {"--heads", c.model.n_heads, [](TrainConfig& t, const TrainConfig& d) { t.model.n_heads = d.model.n_heads; }},
      {"--kv-heads", c.model.n_kv_heads, [](TrainConfig& t, const TrainConfig& d) { t.model.n_kv_heads = d.model.n_kv_heads; }},
      {"--dk", c.model.d_k, [](TrainConfig& t, const TrainConfig& d) { t.model.d_k = d.model.d_k; }},
      {"--dv", c.model.d_v, [](TrainConfig& t, const TrainConfig& d) { t.model.d_v = d.model.d_v; }},
      {"--d-ff", c.model.d_ff, [](TrainConfig& t, const TrainConfig& d) { t.model.d_ff = d.model.d_ff; }},
      {"--max-len", c.model.max_len, [](TrainConfig& t, const TrainConfig& d) { t.model.max_len = d.model.max_len; }},
      {"--vocab", c.data.vocab, [](TrainConfig& t, const TrainConfig& d) { t.data.vocab = d.data.vocab; }},
      {"--seq-len", c.data.seq_len,
       [](TrainConfig& t, const TrainConfig& d) { t.data.seq_len = std::min(t.data.seq_len, d.data.seq_len); }},
      {"--batch", c.optim.batch, [](TrainConfig& t, const TrainConfig& d) { t.optim.batch = d.optim.batch; }},
  };
  const double total = estimate_training_memory(c, text_vocab).total();
  std::string best = "the config";
  double best_saving = 0;
  for (const Candidate& k : candidates) {
    if (k.flag == "--vocab" && reads_text(c.data)) continue;  // a text's vocabulary is its own
    TrainConfig smaller = c;
    k.reset(smaller, defaults);
    const double saving = total - estimate_training_memory(smaller, text_vocab).total();
    if (saving > best_saving) {
      best_saving = saving;
      best = fmt::format("{} {}", k.flag, k.value);
    }
  }
  return best;
}

void check_text_memory(const TrainConfig& config) {
  const double bytes = text_bytes(config);
  const std::optional<AvailableMemory> available = available_memory();
  if (!available || kTextReading * bytes <= available->bytes) return;
  throw std::invalid_argument(fmt::format(
      "--text {}: reading it needs about {} ({} bytes of ids and code points per byte of its {}) but this machine "
      "has {} available ({})",
      config.data.text, format_bytes(kTextReading * bytes), kTextReading, format_bytes(bytes),
      format_bytes(available->bytes), available->source));
}

void check_training_memory(const TrainConfig& config, std::size_t text_vocab, std::size_t jobs) {
  MemoryEstimate e = estimate_training_memory(config, text_vocab);
  const std::optional<AvailableMemory> available = available_memory();
  if (!available || e.total() <= available->bytes) {
    if (jobs <= 1 || !available) return;
    const double n = static_cast<double>(jobs);
    if (n * e.total() <= available->bytes) return;
    for (double* part : {&e.parameters, &e.gradients, &e.optimizer_state, &e.activations, &e.data}) *part *= n;
    check_memory(e, fmt::format("--jobs {}", jobs), fmt::format("training {} runs side by side", jobs));
    return;
  }
  check_memory(e, dominant_training_flag(config, text_vocab), "one training step");
}

double training_step_flops(const ModelConfig& model, std::size_t batch, std::size_t seq_len) {
  const Sizes s = sizes_of(model, seq_len);
  const double B = static_cast<double>(batch), T = static_cast<double>(seq_len), tokens = B * T;
  const double per_layer = 2 * tokens * s.C * (s.H * s.dk + s.G * s.dk + s.G * s.dv + s.H * s.dv)  // projections
                           + 2 * B * T * T * s.H * (s.dk + s.dv)                                 // Q K^T, P V
                           + (s.dff > 0 ? (s.ffn_in + 1) * 2 * tokens * s.C * s.dff : 0);        // feed-forward
  return 3 * (s.L * per_layer + 2 * tokens * s.C * s.V);
}

double training_step_flops(const TrainConfig& config, std::size_t text_vocab) {
  return training_step_flops(with_vocab(config, text_vocab), config.optim.batch, config.data.seq_len);
}

namespace {
// `asked` threads, `used` of them paying for steps of `step_flops`, each beyond the
// first from `per_thread` FLOPs; `what` names a step.
ThreadChoice choose_threads(int asked, int used, double step_flops, double per_thread, const char* what) {
  ThreadChoice t{.asked = asked, .used = used, .step_flops = step_flops, .why = {}};
  if (t.used < t.asked) {
    t.why = fmt::format("{} of the {} threads asked: {} of {:.2g} GFLOP is too small for more to pay "
                        "(each thread beyond the first needs about {:.2g} GFLOP of matrix products a step)",
                        t.used, t.asked, what, t.step_flops / 1e9, per_thread / 1e9);
  }
  return t;
}
}  // namespace

ThreadChoice training_threads(const TrainConfig& config, std::size_t text_vocab) {
  const int asked = config.optim.threads;
  const std::size_t rows = config.optim.batch;
  const double flops = training_step_flops(config, text_vocab);
  const int used = step_threads_that_pay(asked, flops, rows);
  if (rows < 2) return choose_threads(asked, used, flops, kFlopsPerExtraThread, "a step of one row");
  ThreadChoice t = choose_threads(asked, used, flops, kFlopsPerExtraShard, "a step");
  if (used < threads_that_pay(asked, flops, kFlopsPerExtraShard)) {  // capped by the rows, not the FLOPs
    t.why = fmt::format("{} of the {} threads asked: a step runs one shard of its batch per thread, and the batch "
                        "has {} rows", used, asked, rows);
  }
  return t;
}

ThreadChoice forward_threads(const ModelConfig& model, std::size_t batch, std::size_t seq_len, int asked) {
  const double flops = training_step_flops(model, batch, seq_len) / 3;
  return choose_threads(asked, threads_that_pay(asked, flops), flops, kFlopsPerExtraThread, "a forward pass");
}

}  // namespace headroom
