// `headroom sample`: generate from a trained model. Text models read and write text;
// toy-task models read token ids and, without a prompt, answer validation examples of
// their task and say whether they got them right.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "autograd/parallel.hpp"
#include "cli/commands.hpp"
#include "cli/model_file.hpp"
#include "nn/generate.hpp"
#include "train/run_dir.hpp"
#include "train/text_sample.hpp"
#include "data/task_tokens.hpp"
#include "cli/validators.hpp"
#include "data/task.hpp"
#include "nn/checkpoint.hpp"

namespace headroom::cli {
namespace {

struct SampleFlags {
  std::string model;
  std::string prompt;
  std::optional<std::size_t> tokens;
  std::optional<double> temperature;  // default 1
  std::optional<std::size_t> top_k;
  std::optional<double> top_p;  // default 1 (off)
  bool greedy = false;
  std::optional<std::uint64_t> seed;  // default 0
  std::size_t count = 1;
  bool no_cache = false;  // --no-cache: the whole context again for every token
};

constexpr std::size_t kTextTokens = 200;  // --tokens default for text models
// Generation slides its context window, so max_len does not bound --tokens; past
// max_len (and with --no-cache) each token runs the whole model once, so we cap the
// run instead.
constexpr std::size_t kMaxTokens = 100000;
constexpr std::size_t kMaxCount = 10000;

// Separate streams of one seed for the validation examples and the token draws, so
// asking for more tokens never changes which examples come up. The draws' stream is
// the one train's validation samples use too (train/text_sample.hpp).
constexpr std::uint64_t kDrawStream = kSampleDrawStream;
constexpr std::uint64_t kExampleStream = kValidationExampleStream;

// One validation example of the task cut before its answer: the prompt, and where
// in the continuation the counted targets are.
struct TaskExample {
  std::vector<Index> prompt;
  std::vector<Index> answer;        // the row from the first to the last counted target
  std::vector<bool> answer_counted;  // (answer.size()) which of them count
};

TaskExample validation_example(const Task& task, Rng& rng) {
  const std::size_t T = task.seq_len();
  const Batch b = task.sample(1, Split::val, rng);
  const std::span<const Index> row(b.tokens.data(), T + 1);
  const std::span<const bool> counted(b.target_mask.data(), T);
  // counted[t] is about row[t + 1]; every row has at least one counted target.
  const auto first = static_cast<std::size_t>(std::find(counted.begin(), counted.end(), true) - counted.begin());
  const auto from_end = static_cast<std::size_t>(std::find(counted.rbegin(), counted.rend(), true) - counted.rbegin());
  const std::size_t last = T - 1 - from_end;
  TaskExample e;
  e.prompt.assign(row.begin(), row.begin() + static_cast<std::ptrdiff_t>(first + 1));
  for (std::size_t t = first; t <= last; ++t) {
    e.answer.push_back(row[t + 1]);
    e.answer_counted.push_back(counted[t]);
  }
  return e;
}

Decode decode_mode(const SampleFlags& flags) { return flags.no_cache ? Decode::full : Decode::cached; }

// `step` is ", step N" when the model file says its step (train/run_dir.hpp), else "".
int sample_task(const SampleFlags& flags, TransformerLM<float>& model, const DataDescription& data,
                const SamplingOptions& options, const std::string& source, const std::string& step) {
  const std::unique_ptr<Task> task = make_task(data.task, data.task_options());
  std::optional<std::vector<Index>> user_prompt;
  if (!flags.prompt.empty()) user_prompt = parse_task_tokens(flags.prompt, data.vocab, "--prompt");
  fmt::print("{}: {} model (vocab {}, seq_len {}{})\n", source, data.task, data.vocab, data.seq_len, step);
  Rng draws(stream_seed(flags.seed.value_or(kDefaultSampleSeed), kDrawStream));
  Rng examples(stream_seed(flags.seed.value_or(kDefaultSampleSeed), kExampleStream));

  std::size_t matched = 0;
  for (std::size_t i = 0; i < flags.count; ++i) {
    TaskExample e;
    if (user_prompt) {
      e.prompt = *user_prompt;
    } else {
      e = validation_example(*task, examples);
    }
    // By default we fill the row the model was trained on (T+1 tokens), or generate
    // exactly the answer of a validation example.
    const std::size_t row_rest = data.seq_len + 1 > e.prompt.size() ? data.seq_len + 1 - e.prompt.size() : 1;
    const std::size_t n = flags.tokens.value_or(user_prompt ? row_rest : e.answer.size());
    if (i > 0) fmt::print("\n");
    fmt::print("prompt    {}\n", render_task_tokens(e.prompt));
    fmt::print("model     ");
    std::fflush(stdout);
    // Each token as it comes, as render_task_tokens would write the whole answer.
    bool first = true;
    const std::vector<Index> out = generate(
        model, e.prompt, n, options, draws,
        [&first](Index id) {
          fmt::print("{}{}", first ? "" : " ", task_token_label(id));
          first = false;
          std::fflush(stdout);
        },
        decode_mode(flags));
    fmt::print("\n");
    if (user_prompt) continue;
    bool match = out.size() >= e.answer.size();
    for (std::size_t j = 0; j < e.answer.size() && j < out.size(); ++j) {
      match = match && (!e.answer_counted[j] || out[j] == e.answer[j]);
    }
    matched += match ? 1 : 0;
    fmt::print("expected  {}  {}\n", render_task_tokens(e.answer), match ? "(match)" : "(MISMATCH)");
  }
  if (!user_prompt) {
    fmt::print("\n{} of {} validation examples answered correctly\n", matched, flags.count);
  }
  return 0;
}

int sample_text(const SampleFlags& flags, TransformerLM<float>& model, const DataDescription& data,
                const SamplingOptions& options, const std::string& source) {
  const CharVocab vocab = char_vocab(data, source);
  Rng draws(stream_seed(flags.seed.value_or(kDefaultSampleSeed), kDrawStream));
  // Without a prompt we start where train's validation samples start.
  const bool prompted = !flags.prompt.empty();
  const IndexArray prompt = prompted ? vocab.encode(std::string_view(flags.prompt), "--prompt")
                                     : IndexArray{default_text_prompt(vocab)};
  const std::span<const Index> prompt_ids(prompt.data(), prompt.size());
  const std::size_t n = flags.tokens.value_or(kTextTokens);
  for (std::size_t i = 0; i < flags.count; ++i) {
    if (flags.count > 1) fmt::print("{}--- sample {} of {} ---\n", i > 0 ? "\n" : "", i + 1, flags.count);
    // The prompt, then each character as it comes; a newline ends the sample unless
    // it already ends with one.
    std::string tail = prompted ? flags.prompt : std::string();  // what was printed last
    fmt::print("{}", tail);
    std::fflush(stdout);
    generate(
        model, prompt_ids, n, options, draws,
        [&](Index id) {
          const std::string c = vocab.decode(std::span<const Index>(&id, 1), "sample");
          fmt::print("{}", c);
          if (!c.empty()) tail = c;
          std::fflush(stdout);
        },
        decode_mode(flags));
    fmt::print("{}", tail.empty() || tail.back() != '\n' ? "\n" : "");
    std::fflush(stdout);
  }
  return 0;
}

// Greedy decoding (--greedy, or --temperature 0) draws nothing, so a sampling knob
// next to it would be silently ignored: we refuse the pair. Also the caps.
void check_sample_flags(const SampleFlags& f) {
  if (f.tokens && *f.tokens > kMaxTokens) {
    throw std::invalid_argument(fmt::format(
        "--tokens: at most {} (past max_len each token runs the whole model once), got {}", kMaxTokens,
        *f.tokens));
  }
  if (f.count > kMaxCount) {
    throw std::invalid_argument(fmt::format("--count: at most {}, got {}", kMaxCount, f.count));
  }
  const bool zero_temperature = f.temperature && *f.temperature == 0;
  if (!f.greedy && !zero_temperature) return;
  const std::string greedy = f.greedy ? "--greedy" : "--temperature 0";
  const auto refuse = [&](const std::string& knob) {
    throw std::invalid_argument(fmt::format(
        "{}: {} always takes the most likely token, so it would be ignored; give one or the other", knob, greedy));
  };
  if (f.greedy && f.temperature) refuse(fmt::format("--temperature {}", *f.temperature));
  if (f.top_k) refuse(fmt::format("--top-k {}", *f.top_k));
  if (f.top_p) refuse(fmt::format("--top-p {}", *f.top_p));
}

int run_sample(const SampleFlags& flags) {
  check_sample_flags(flags);
  set_threads(1);  // one sequence at a time: threads only add overhead
  LoadedRun run = open_model(flags.model);
  const std::string& source = run.source;
  const DataDescription& data = run.data;
  if (data.is_classifier()) {
    throw std::invalid_argument(fmt::format(
        "{} is a classifier ({}): it predicts a label, it does not write text; see headroom eval, or headroom "
        "attention --input TEXT",
        source, data.source_name()));
  }
  if (flags.top_k && (*flags.top_k == 0 || *flags.top_k > data.vocab)) {
    throw std::invalid_argument(fmt::format("--top-k: must be from 1 to the model's vocab {}, got {}", data.vocab,
                                            *flags.top_k));
  }
  // Greedy decoding draws nothing: the seed then only picks validation examples.
  const bool greedy = flags.greedy || (flags.temperature && *flags.temperature == 0);
  if (greedy && flags.seed && (data.is_text() || !flags.prompt.empty())) {
    throw std::invalid_argument(fmt::format(
        "--seed {}: {} draws nothing, and with {} there are no validation examples to pick, so it would be "
        "ignored; leave it out",
        *flags.seed, flags.greedy ? "--greedy" : "--temperature 0", data.is_text() ? "a text model" : "--prompt"));
  }
  const SamplingOptions options{.temperature = flags.temperature.value_or(1.0),
                                .top_k = flags.top_k.value_or(0),
                                .top_p = flags.top_p.value_or(1.0),
                                .greedy = flags.greedy};
  check_sampling_options(options, run.config().vocab);  // before the first line is printed
  return data.is_text() ? sample_text(flags, run.model(), data, options, source)
                        : sample_task(flags, run.model(), data, options, source,
                                      run.step ? fmt::format(", step {}", *run.step) : std::string());
}

}  // namespace

Run add_sample_command(CLI::App& app) {
  auto f = std::make_shared<SampleFlags>();
  CLI::App* cmd = app.add_subcommand(
      "sample",
      "Generate from a trained model. A text model continues --prompt TEXT; a toy-task model continues --prompt "
      "\"3 7 4 |\" (token ids) or, without one, answers validation examples of its task and says whether each is "
      "right.");
  cmd->footer(
      "In a toy-task prompt, _ | ? stand for pad, separator and query. Tokens are printed as they are made, decoded "
      "from a KV cache (docs/design.md #18); past the model's max_len the context is cropped from the left.");
  cmd->add_option("--model", f->model,
                  "A run directory written by headroom train --out (its model.safetensors, else its newest "
                  "checkpoint), or a .safetensors file")
      ->required();
  cmd->add_option("--prompt", f->prompt, "Text for a text model; space-separated token ids for a toy-task model");
  cmd->add_option("--tokens", f->tokens,
                  fmt::format("Tokens to generate, at most {} (default: {} characters for a text model; for a "
                              "toy-task model the answer's length, or the rest of a training row after --prompt). "
                              "They are printed as they are made",
                              kMaxTokens, kTextTokens))
      ->check(kCount);
  cmd->add_option("--temperature", f->temperature,
                  "Divide the logits by this before sampling (default 1); 0 is greedy, and takes no --top-k or "
                  "--top-p")
      ->check(kFiniteNonNegative);
  cmd->add_option("--top-k", f->top_k, "Sample only among the K most likely tokens (default: all)")->check(kCount);
  cmd->add_option("--top-p", f->top_p,
                  "Nucleus sampling: then only among the fewest most likely tokens whose probabilities sum to at "
                  "least P, 0 < P <= 1 (default 1: all)")
      ->check(kProbability);
  cmd->add_flag("--greedy", f->greedy,
                "Always take the most likely token (the same as --temperature 0); refused with --temperature, "
                "--top-k or --top-p, which it would ignore");
  cmd->add_option("--seed", f->seed,
                  "Seed for the draws and the validation examples (default 0); greedy decoding draws nothing, so "
                  "with --greedy it is only for a toy-task model's validation examples")
      ->check(kWholeNumber);
  cmd->add_option("--count", f->count,
                  fmt::format("Samples to generate, at most {} (each a new validation example for a toy-task model "
                              "without --prompt)",
                              kMaxCount))
      ->capture_default_str()
      ->check(kCount);
  cmd->add_flag("--no-cache", f->no_cache,
                "Run the whole context through the model again for every token instead of decoding from the KV "
                "cache: the same tokens (the logits agree to float rounding), slower; for comparison");
  return [f] { return run_sample(*f); };
}

}  // namespace headroom::cli
