// `headroom eval`: loss and accuracy of a trained model on its own validation data
// (the batches the trainer validated on, so a finished run's final numbers come
// back), or perplexity on any text file read with the model's own vocabulary.
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autograd/input_file.hpp"
#include "autograd/parallel.hpp"
#include "autograd/whole_number.hpp"
#include "cli/commands.hpp"
#include "cli/model_file.hpp"
#include "train/resources.hpp"
#include "train/run_dir.hpp"
#include "train/evaluate.hpp"
#include "cli/validators.hpp"
#include "data/char_dataset.hpp"
#include "data/labelled_dataset.hpp"
#include "train/classify.hpp"
#include "data/task.hpp"
#include "nn/checkpoint.hpp"

namespace headroom::cli {
namespace {

namespace fs = std::filesystem;

struct EvalFlags {
  std::string model;
  std::string text;
  std::vector<std::string> tokens;  // rows of comma-separated ids, as examples/load_checkpoint.py reads them
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

// One --tokens row: comma-separated ids in [0, vocab).
std::vector<Index> parse_token_row(const std::string& row, std::size_t vocab) {
  std::vector<Index> ids;
  std::size_t begin = 0;
  while (begin <= row.size()) {
    const std::size_t end = std::min(row.find(',', begin), row.size());
    const std::string id = row.substr(begin, end - begin);
    const std::optional<std::uint64_t> value = parse_whole_number(id);
    if (!value || *value >= vocab) {
      throw std::invalid_argument(fmt::format("--tokens '{}': '{}' is not a token id in [0, {})", row, id, vocab));
    }
    ids.push_back(static_cast<Index>(*value));
    begin = end + 1;
  }
  return ids;
}

// The rows of --tokens as one batch (B, T+1) with every target counted: the mean
// next-token cross-entropy over all B*T positions, which is what
// examples/load_checkpoint.py computes.
EvalReport eval_token_rows(const EvalFlags& flags, TransformerLM<float>& model, const DataDescription& data) {
  const std::size_t max_len = model.config().max_len;
  std::vector<std::vector<Index>> rows;
  for (const std::string& row : flags.tokens) rows.push_back(parse_token_row(row, data.vocab));
  const std::size_t len = rows.front().size();
  for (std::size_t r = 0; r < rows.size(); ++r) {
    if (rows[r].size() != len || len < 2 || len > max_len + 1) {
      throw std::invalid_argument(fmt::format(
          "--tokens '{}': every row needs the same length T+1, from 2 to the model's max_len + 1 = {}; it has {} "
          "ids and the first row {}",
          flags.tokens[r], max_len + 1, rows[r].size(), len));
    }
  }
  Batch b{.tokens = IndexArray::from_shape({rows.size(), len}), .target_mask = Mask::from_shape({rows.size(), len - 1})};
  for (std::size_t r = 0; r < rows.size(); ++r) std::copy(rows[r].begin(), rows[r].end(), b.tokens.data() + r * len);
  b.target_mask.fill(true);
  EvalReport report;
  report.text_model = data.is_text();
  report.result = evaluate_batches(model, {b});
  report.data = fmt::format("--tokens: {} row{} of {} ids, every next token counted", rows.size(),
                            rows.size() == 1 ? "" : "s", len);
  return report;
}

// Flags that the chosen data would ignore are refused rather than dropped.
void check_eval_flags(const EvalFlags& f) {
  const auto refuse = [](const std::string& flag, const std::string& why) {
    throw std::invalid_argument(fmt::format("{}: {}, so it would be ignored; leave it out", flag, why));
  };
  if (!f.tokens.empty()) {
    const std::string why = "--tokens gives the rows to evaluate";
    if (!f.text.empty()) refuse(fmt::format("--text {}", f.text), why);
    if (f.batches) refuse(fmt::format("--batches {}", *f.batches), why);
    if (f.batch) refuse(fmt::format("--batch {}", *f.batch), why);
    if (f.seed) refuse(fmt::format("--seed {}", *f.seed), why);
  }
  if (!f.text.empty() && f.seed) refuse(fmt::format("--seed {}", *f.seed), "--text reads the whole file in order");
}

EvalReport eval_own_data(TransformerLM<float>& model, const DataDescription& data,
                         const std::string& source, std::size_t batches, std::size_t batch, std::uint64_t seed) {
  const std::unique_ptr<Dataset> dataset =
      own_dataset(data, source, "evaluate it on a text file with --text FILE (read with the model's vocabulary)");
  EvalReport report;
  report.text_model = data.is_text();
  report.result = evaluate(model, *dataset, batches, batch, validation_seed(seed));
  report.data = fmt::format("{} validation split: {} batch{} of {} rows, the trainer's batches for seed {}",
                            data.source_name(), batches, batches == 1 ? "" : "es", batch, seed);
  return report;
}

// The confusion matrix as text: a row per true label, a column per prediction.
std::string confusion_table(const ClassifierEval& r) {
  std::size_t width = 4;
  for (const std::string& label : r.labels) width = std::max(width, label.size());
  for (const auto& row : r.confusion) {
    for (const std::size_t n : row) width = std::max(width, fmt::format("{}", n).size());
  }
  const std::string corner = "true \\ predicted";
  std::size_t first = corner.size();
  for (const std::string& label : r.labels) first = std::max(first, label.size());
  std::string out = fmt::format("  {:>{}}", corner, first);
  for (const std::string& label : r.labels) out += fmt::format(" {:>{}}", label, width);
  for (std::size_t t = 0; t < r.labels.size(); ++t) {
    out += fmt::format("\n  {:>{}}", r.labels[t], first);
    for (const std::size_t n : r.confusion[t]) out += fmt::format(" {:>{}}", n, width);
  }
  return out;
}

// A classifier on its own validation split: every item once, in order, with the
// scores a classifier is judged by and the majority-class baseline beside them.
int eval_classifier(const EvalFlags& flags, LoadedRun& run, std::size_t batch, std::optional<std::size_t> batches) {
  if (flags.seed) {
    throw std::invalid_argument(fmt::format(
        "--seed {}: a classifier is evaluated on every validation item in order, so it would be ignored; leave it out",
        *flags.seed));
  }
  const DataDescription& data = run.data;
  const std::unique_ptr<Dataset> dataset = own_dataset(data, run.source, "evaluate it with --tokens instead");
  const auto& items = dynamic_cast<const LabelledDataset&>(*dataset);
  const ClassifierEval r = evaluate_classifier(run.model(), items, Split::val, batch, batches ? *batches * batch : 0);
  const std::string& majority = r.labels[r.majority];
  if (flags.json) {
    nlohmann::json j{{"model", run.source},
                     {"kind", "classifier"},
                     {"data", data.source_name()},
                     {"split", "val"},
                     {"seq_len", data.seq_len},
                     {"vocab", data.vocab},
                     {"items", r.items},
                     {"truncated", r.truncated},
                     {"labels", r.labels},
                     {"loss", r.loss},
                     {"accuracy", r.scores.accuracy},
                     {"macro_f1", r.scores.macro_f1},
                     {"confusion", r.confusion},
                     {"majority_label", majority},
                     {"majority_accuracy", r.majority_scores.accuracy},
                     {"majority_macro_f1", r.majority_scores.macro_f1}};
    if (run.step) j["step"] = *run.step;
    fmt::print("{}\n", j.dump());
    return 0;
  }
  fmt::print("model       {} (classifier of {} labels, vocab {}, seq_len {}{})\n", run.source, r.labels.size(),
             data.vocab, data.seq_len, run.step ? fmt::format(", step {}", *run.step) : std::string());
  fmt::print("data        {} validation split: {} items{} ({} cut to their first {} characters)\n",
             data.source_name(), r.items,
             r.items < items.items(Split::val) ? fmt::format(", spread evenly over its {}", items.items(Split::val))
                                              : std::string(" in order"),
             r.truncated, data.seq_len - 1);
  fmt::print("loss        {:.4f} (of the label token)\n", r.loss);
  fmt::print("accuracy    {:.2f}%   majority baseline ({}) {:.2f}%\n", 100 * r.scores.accuracy, majority,
             100 * r.majority_scores.accuracy);
  fmt::print("macro-F1    {:.2f}%   majority baseline {:.2f}%\n", 100 * r.scores.macro_f1,
             100 * r.majority_scores.macro_f1);
  fmt::print("confusion\n{}\n", confusion_table(r));
  return 0;
}

int run_eval(const EvalFlags& flags) {
  check_eval_flags(flags);
  LoadedRun run = open_model(flags.model);
  const std::string& source = run.source;
  const DataDescription& data = run.data;
  // The batches the trainer validated on, unless the flags say otherwise.
  const ValidationSettings v = validation_settings(run.file, flags.batches, flags.batch, flags.seed);
  const std::size_t batches = v.batches, batch = v.batch;
  const std::uint64_t seed = v.seed;
  // The training run's threads, or fewer where a forward pass is too small for them
  // to pay: said in the report, or with --json on stderr.
  const ThreadChoice threads = forward_threads(run.model().config(), batch, data.seq_len, v.threads);
  if (!threads.why.empty() && flags.json) fmt::print(stderr, "headroom eval: threads: {}\n", threads.why);
  set_threads(threads.used);
  check_eval_memory(run.model().config(), batch, data.seq_len, batches, false);  // before a batch is drawn
  if (!flags.text.empty() && !data.is_text()) {
    throw std::invalid_argument(fmt::format("--text needs a character-level model; {} is a {} model ({})", source,
                                            data.is_classifier() ? "classifier" : "toy-task", data.source_name()));
  }
  if (data.is_classifier() && flags.tokens.empty()) return eval_classifier(flags, run, batch, flags.batches);
  const EvalReport report = !flags.tokens.empty() ? eval_token_rows(flags, run.model(), data)
                            : flags.text.empty()  ? eval_own_data(run.model(), data, source, batches, batch, seed)
                                                  : eval_text_file(flags, run.model(), data, source, batch);
  const EvalResult& r = report.result;
  const double perplexity = std::exp(r.loss);
  const double bits = bits_per_char(r.loss);

  if (flags.json) {
    nlohmann::json j{{"model", source},
                     {"kind", data.is_text() ? "text" : data.is_classifier() ? "classifier" : "task"},
                     {"data", !flags.tokens.empty() ? "--tokens" : flags.text.empty() ? data.source_name() : flags.text},
                     {"split", !flags.tokens.empty() ? "tokens" : flags.text.empty() ? "val" : "file"},
                     {"seq_len", data.seq_len},
                     {"vocab", data.vocab},
                     {"targets", r.counted},
                     {"loss", r.loss},
                     {"accuracy", r.accuracy}};
    if (run.step) j["step"] = *run.step;
    if (flags.text.empty() && flags.tokens.empty()) {
      j["batches"] = batches;
      j["batch"] = batch;
      j["seed"] = seed;
    }
    if (report.text_model) {
      j["perplexity"] = perplexity;
      j["bits_per_char"] = bits;
    }
    if (r.bayes_loss) {  // a task's own validation data (docs/design.md #15)
      j["bayes_loss"] = *r.bayes_loss;
      j["excess_loss"] = *r.excess_loss();
    }
    fmt::print("{}\n", j.dump());
    return 0;
  }
  const std::string kind = data.is_text() ? "character-level text" : data.is_classifier() ? "classifier" : data.task;
  fmt::print("model       {} ({}, vocab {}, seq_len {}{})\n", source, kind, data.vocab, data.seq_len,
             run.step ? fmt::format(", step {}", *run.step) : std::string());
  if (!threads.why.empty()) fmt::print("threads     {}\n", threads.why);
  fmt::print("data        {}\n", report.data);
  fmt::print("targets     {}\n", r.counted);
  // With --tokens, 9 significant digits (all a float has), to compare with
  // examples/load_checkpoint.py --expect.
  fmt::print("loss        {}\n", flags.tokens.empty() ? fmt::format("{:.4f}", r.loss)
                                                       : fmt::format("{:.9g}", r.loss));
  if (r.bayes_loss) {  // a task's own validation data: the floor, and how far above it the model is
    fmt::print("bayes loss  {:.4f}\n", *r.bayes_loss);
    fmt::print("excess loss {:.4f}\n", *r.excess_loss());
  }
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
      "Loss and accuracy of a trained model on the counted targets: on its own validation data, drawn as the trainer "
      "drew it (a finished run's final val numbers come back), or on every character of a text file (--text).");
  cmd->footer("With --text a text model also gets perplexity and bits per character.");
  cmd->add_option("--model", f->model,
                  "A run directory written by headroom train --out (its model.safetensors, else its newest "
                  "checkpoint), or a .safetensors file")
      ->required();
  cmd->add_option("--text", f->text,
                  "Evaluate a text model on this UTF-8 file: windows of seq_len + 1 characters, each character "
                  "predicted once");
  cmd->add_option("--tokens", f->tokens,
                  "Evaluate these rows instead: each ROW is comma-separated token ids (3,1,4,1,5), all of the same "
                  "length T+1 <= max_len + 1; the loss is the mean next-token cross-entropy over all of their "
                  "targets, printed with 9 significant digits, the number examples/load_checkpoint.py --expect "
                  "takes. Not with --text, --batches, --batch or --seed")
      ->expected(1, -1)
      ->type_name("ROW");
  cmd->add_option("--batches", f->batches,
                  "Validation batches (default: the run's eval_batches from its config.json, else 8); with --text, "
                  "the most batches of windows to read (default: the whole file); for a classifier, batches of items spread over "
                  "its val split (default: every item)")
      ->check(kCount);
  cmd->add_option("--batch", f->batch, "Rows per batch (default: the run's batch, else 32)")->check(kCount);
  cmd->add_option("--seed", f->seed,
                  "Seed of the run whose validation batches to draw (default: the run's seed, else 0); not with "
                  "--text, which reads the file in order")
      ->check(kWholeNumber);
  cmd->add_flag("--json", f->json, "Print one JSON object instead of the table");
  return [f] { return run_eval(*f); };
}

}  // namespace headroom::cli
