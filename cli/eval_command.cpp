// `headroom eval`: loss and accuracy of a trained model on its own validation data
// (the batches the trainer validated on, so a finished run's final numbers come
// back), or perplexity on any text file read with the model's own vocabulary.
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autograd/input_file.hpp"
#include "autograd/parallel.hpp"
#include "cli/commands.hpp"
#include "train/resources.hpp"
#include "train/run_dir.hpp"
#include "train/evaluate.hpp"
#include "cli/validators.hpp"
#include "data/char_dataset.hpp"
#include "data/task.hpp"
#include "nn/checkpoint.hpp"

namespace headroom::cli {
namespace {

namespace fs = std::filesystem;

struct EvalFlags {
  std::string model;
  std::string text;
  std::optional<std::size_t> batches, batch;
  std::optional<std::uint64_t> seed;
  bool json = false;
};

// What was evaluated, for the report.
struct EvalReport {
  std::string data;  // one line: which data, how much of it
  EvalResult result;
  bool text_model = false;
};

// A regular file of at most kMaxTextBytes (data/char_dataset.hpp), as train's --text.
std::string read_text_file(const fs::path& file, const std::string& what) {
  return read_input_file(file, what, kMaxTextBytes);
}

EvalReport eval_text_file(const EvalFlags& flags, TransformerLM<float>& model, const DataDescription& data,
                          const std::string& source, std::size_t batch) {
  const std::string what = fmt::format("--text '{}'", flags.text);
  const CharVocab vocab = char_vocab(data, source);
  const IndexArray ids = vocab.encode(std::string_view(read_text_file(flags.text, what)), what);
  if (ids.size() < 2) {
    throw std::invalid_argument(fmt::format("{}: has {} character(s); it takes at least 2 to predict one", what,
                                            ids.size()));
  }
  std::size_t batches_done = 0;
  EvalReport report;
  report.text_model = true;
  report.result = evaluate_windows(model, std::span<const Index>(ids.data(), ids.size()), data.seq_len, batch,
                                   flags.batches.value_or(0), batches_done);
  report.data = fmt::format("{}: {} of its {} characters predicted, in windows of {} characters, {} batch{} of up to {}",
                            flags.text, report.result.counted, ids.size(), data.seq_len + 1, batches_done,
                            batches_done == 1 ? "" : "es", batch);
  return report;
}

EvalReport eval_own_data(TransformerLM<float>& model, const DataDescription& data,
                         const std::string& source, std::size_t batches, std::size_t batch, std::uint64_t seed) {
  const std::unique_ptr<Dataset> dataset =
      own_dataset(data, source, "evaluate it on a text file with --text FILE (read with the model's vocabulary)");
  EvalReport report;
  report.text_model = data.is_text();
  report.result = evaluate(model, *dataset, batches, batch, validation_seed(seed));
  report.data = fmt::format("{} validation split: {} batch{} of {} rows, the trainer's batches for seed {}",
                            data.is_text() ? data.text : data.task, batches, batches == 1 ? "" : "es", batch, seed);
  return report;
}

int run_eval(const EvalFlags& flags) {
  LoadedRun run = load_run(flags.model);
  const std::string& source = run.source;
  const DataDescription& data = run.data;
  // The batches the trainer validated on, unless the flags say otherwise.
  const ValidationSettings v = validation_settings(run.file, flags.batches, flags.batch, flags.seed);
  const std::size_t batches = v.batches, batch = v.batch;
  const std::uint64_t seed = v.seed;
  set_threads(v.threads);
  check_eval_memory(run.model().config(), batch, data.seq_len, batches, false);  // before a batch is drawn
  if (!flags.text.empty() && !data.is_text()) {
    throw std::invalid_argument(fmt::format("--text needs a character-level model; {} is a toy-task model ({})",
                                            source, data.task));
  }
  const EvalReport report = flags.text.empty()
                                ? eval_own_data(run.model(), data, source, batches, batch, seed)
                                : eval_text_file(flags, run.model(), data, source, batch);
  const EvalResult& r = report.result;
  const double perplexity = std::exp(r.loss);
  const double bits = r.loss / std::log(2.0);

  if (flags.json) {
    nlohmann::json j{{"model", source},
                     {"kind", data.is_text() ? "text" : "task"},
                     {"data", flags.text.empty() ? (data.is_text() ? data.text : data.task) : flags.text},
                     {"split", flags.text.empty() ? "val" : "file"},
                     {"seq_len", data.seq_len},
                     {"vocab", data.vocab},
                     {"targets", r.counted},
                     {"loss", r.loss},
                     {"accuracy", r.accuracy}};
    if (flags.text.empty()) {
      j["batches"] = batches;
      j["batch"] = batch;
      j["seed"] = seed;
    }
    if (report.text_model) {
      j["perplexity"] = perplexity;
      j["bits_per_char"] = bits;
    }
    fmt::print("{}\n", j.dump());
    return 0;
  }
  const std::string kind = data.is_text() ? "character-level text" : data.task;
  fmt::print("model       {} ({}, vocab {}, seq_len {})\n", source, kind, data.vocab, data.seq_len);
  fmt::print("data        {}\n", report.data);
  fmt::print("targets     {}\n", r.counted);
  fmt::print("loss        {:.4f}\n", r.loss);
  fmt::print("accuracy    {:.2f}%\n", 100 * r.accuracy);
  if (report.text_model) {
    fmt::print("perplexity  {:.3f}\n", perplexity);
    fmt::print("bits/char   {:.3f}\n", bits);
  }
  return 0;
}

}  // namespace

Run add_eval_command(CLI::App& app) {
  auto f = std::make_shared<EvalFlags>();
  CLI::App* cmd = app.add_subcommand(
      "eval",
      "Loss and accuracy of a trained model on the counted targets. By default on its own validation data, drawn "
      "exactly as the trainer drew it (so a finished run's final val numbers come back); --text FILE instead reads "
      "every character of FILE with the model's vocabulary (text models: perplexity and bits per character too).");
  cmd->add_option("--model", f->model,
                  "A run directory written by headroom train --out (its model.safetensors, else its newest "
                  "checkpoint), or a .safetensors file")
      ->required();
  cmd->add_option("--text", f->text,
                  "Evaluate a text model on this UTF-8 file: windows of seq_len + 1 characters, each character "
                  "predicted once");
  cmd->add_option("--batches", f->batches,
                  "Validation batches (default: the run's eval_batches from its config.json, else 8); with --text, "
                  "the most batches of windows to read (default: the whole file)")
      ->check(kCount);
  cmd->add_option("--batch", f->batch, "Rows per batch (default: the run's batch, else 32)")->check(kCount);
  cmd->add_option("--seed", f->seed, "Seed of the run whose validation batches to draw (default: the run's seed, else 0)")
      ->check(kWholeNumber);
  cmd->add_flag("--json", f->json, "Print one JSON object instead of the table");
  return [f] { return run_eval(*f); };
}

}  // namespace headroom::cli
