// What a run shows of its curve (issue 46): DIR/loss.svg drawn from metrics.csv, and
// redrawn with it after a resume; a text run's losses in bits per character beside
// nats (metrics.csv, progress, summary) and none for a toy task; a text run's sample
// at each validation, which changes none of the run's numbers.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "train/loss_plot.hpp"
#include "train/metrics.hpp"
#include "train/trainer.hpp"
#include "cli_runner.hpp"
#include "support.hpp"

namespace hr = headroom;
namespace fs = std::filesystem;

namespace {

// A tiny run of a task with a Bayes loss above 0, so that its plot has the line.
const std::string kTinyLags =
    "train --task lags --d-model 16 --heads 2 --layers 1 --batch 8 --eval-batches 2 --warmup 2 ";

// A text of letters and spaces only: its samples print as they are, so a test can
// compare them with `headroom sample`'s output.
std::string plain_text() {
  std::string text;
  for (int i = 0; i < 40; ++i) text += "the quick brown fox jumps over the lazy dog and ";
  return text;
}

std::string tiny_text_flags(const fs::path& text) {
  return fmt::format("train --text {} --seq-len 16 --d-model 16 --heads 2 --layers 1 --batch 8 --eval-batches 2 "
                     "--warmup 2 ",
                     text.string());
}

// The points of the polyline whose <title> is `name`: "x,y" pairs.
std::vector<std::string> polyline_points(const std::string& svg, const std::string& name) {
  const std::size_t title = svg.find("<title>" + name + "</title></polyline>");
  REQUIRE_MESSAGE(title != std::string::npos, "no curve named " << name);
  const std::string open = "<polyline points=\"";
  const std::size_t from = svg.rfind(open, title) + open.size();
  const std::string points = svg.substr(from, svg.find('"', from) - from);
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at < points.size()) {
    const std::size_t space = points.find(' ', at);
    out.push_back(points.substr(at, space - at));
    at = space == std::string::npos ? points.size() : space + 1;
  }
  return out;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// The checks any loss.svg passes: a whole SVG document, its axes labelled with
// units, and both curves with a point per row of the run's metrics.csv.
void check_loss_plot(const fs::path& dir, const std::string& unit) {
  const std::string svg = read_file(dir / "loss.svg");
  INFO(svg);
  REQUIRE(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0);
  CHECK(svg.substr(svg.size() - 7) == "</svg>\n");
  CHECK(count(svg, "<text") == count(svg, "</text>"));
  CHECK(count(svg, "<polyline") == count(svg, "</polyline>"));
  CHECK(svg.find(">training step</text>") != std::string::npos);
  CHECK(svg.find(">loss (" + unit + ", log scale)</text>") != std::string::npos);
  const std::size_t rows = hr::read_metrics(dir / "metrics.csv").size();
  CHECK(rows > 0);
  CHECK(polyline_points(svg, "train loss (mean since the previous validation)").size() == rows);
  CHECK(polyline_points(svg, "validation loss").size() == rows);
}

// The four numbers of "LOSS (BPC) ... VAL (BPC)" as a line shows them.
struct Shown {
  double train = NAN, train_bpc = NAN, val = NAN, val_bpc = NAN;
};
Shown shown_losses(const std::string& text, const char* format) {
  Shown s;
  REQUIRE(std::sscanf(text.c_str(), format, &s.train, &s.train_bpc, &s.val, &s.val_bpc) == 4);
  return s;
}

hr::TrainConfig tiny_copy() {
  hr::TrainConfig c;
  c.model.d_model = 16;
  c.model.n_heads = 2;
  c.model.n_layers = 1;
  c.data = {.task = "copy", .text = "", .seq_len = 8, .vocab = 8};
  c.optim.steps = 60;
  c.optim.batch = 8;
  c.optim.warmup = 5;
  c.optim.eval_every = 10;
  c.optim.eval_batches = 2;
  c.optim.save_every = 20;
  return c;
}

}  // namespace

TEST_CASE("loss.svg: a run draws train and validation loss, a point per metrics.csv row, and the Bayes loss") {
  const TempDir tmp("curves_plot");
  const fs::path dir = tmp / "run";
  const CliResult r = run_headroom(kTinyLags + "--steps 40 --eval-every 10 --out " + dir.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find(dir.string() + "/loss.svg") != std::string::npos);  // the summary names it
  check_loss_plot(dir, "nats per counted target");
  CHECK(hr::read_metrics(dir / "metrics.csv").size() == 4);
  // lags knows its distribution: the Bayes loss, a dashed level across the steps.
  const std::string svg = read_file(dir / "loss.svg");
  const std::vector<std::string> bayes = polyline_points(svg, "Bayes loss (the true distribution&#39;s)");
  CHECK(bayes.size() == 2);
  CHECK(svg.find("stroke-dasharray") != std::string::npos);
  // copy's Bayes loss is 0, which a log axis cannot show: no line, no legend entry.
  const fs::path copy = tmp / "copy";
  REQUIRE(run_headroom("train --task copy --vocab 8 --seq-len 8 --d-model 16 --heads 2 --layers 1 --batch 8 "
                       "--eval-batches 2 --warmup 2 --steps 20 --eval-every 10 -q --out " + copy.string())
              .status == 0);
  check_loss_plot(copy, "nats per counted target");
  CHECK(read_file(copy / "loss.svg").find("Bayes") == std::string::npos);
}

TEST_CASE("loss.svg: a resume redraws it from metrics.csv cut back to the checkpoint, and ends as the whole run's") {
  const TempDir whole("curves_whole"), parts("curves_parts");
  hr::TrainConfig c = tiny_copy();
  auto data = hr::make_dataset(c);
  c = hr::finalize(c, *data);
  hr::TrainOptions once;
  once.out_dir = whole.path().string();
  (void)hr::train(c, *data, once);
  check_loss_plot(whole.path(), "nats per counted target");

  // Stopped at 25 (checkpoint at 25; rows 10 and 20), then, as if the killed run had
  // gone on past its checkpoint, a row at 30 and its plot.
  hr::TrainOptions chunk;
  chunk.out_dir = parts.path().string();
  chunk.stop_after = 25;
  (void)hr::train(c, *data, chunk);
  {
    std::ofstream(parts / "metrics.csv", std::ios::app) << "30,1.0,1.0,0.5,,,0.001,1.0,10.0,,\n";
  }
  hr::write_loss_plot(parts.path(), "copy: loss during training", hr::LossTargets::tokens);
  REQUIRE(polyline_points(read_file(parts / "loss.svg"), "validation loss").size() == 3);
  // Resumed to 27, before any new validation: the plot has lost the row with the file.
  chunk.resume = true;
  chunk.stop_after = 27;
  (void)hr::train(c, *data, chunk);
  CHECK(hr::read_metrics(parts / "metrics.csv").size() == 2);
  check_loss_plot(parts.path(), "nats per counted target");
  // To the end: the same numbers as the whole run, so the same plot, byte for byte.
  chunk.stop_after = 0;
  (void)hr::train(c, *data, chunk);
  check_loss_plot(parts.path(), "nats per counted target");
  CHECK(read_file(parts / "loss.svg") == read_file(whole / "loss.svg"));
}

TEST_CASE("loss.svg: a run without an output directory writes no plot, nor anything else") {
  const TempDir tmp("curves_no_save");
  const CliResult r = run_program("cd " + tmp.path().string() + " && " + std::string(HEADROOM_BIN),
                                  kTinyLags + "--steps 10 --eval-every 5 --no-save");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(tmp.entries().empty());
  // The library the same way: an empty out_dir.
  hr::TrainConfig c = tiny_copy();
  c.optim.steps = 10;
  auto data = hr::make_dataset(c);
  c = hr::finalize(c, *data);
  const fs::path before = fs::current_path();
  fs::current_path(tmp.path());
  (void)hr::train(c, *data, "", {});
  fs::current_path(before);
  CHECK(tmp.entries().empty());
}

TEST_CASE("bits per character: a text run's metrics.csv, progress and summary give loss / ln 2, a task's none") {
  const TempDir tmp("curves_bpc");
  const fs::path text = tmp.write("fox.txt", plain_text());
  const fs::path dir = tmp / "text";
  const CliResult r = run_headroom(tiny_text_flags(text) + "--steps 30 --eval-every 10 --out " + dir.string());
  INFO(r.output);
  REQUIRE(r.status == 0);
  const std::vector<hr::MetricsRow> rows = hr::read_metrics(dir / "metrics.csv");
  REQUIRE(rows.size() == 3);
  for (const hr::MetricsRow& row : rows) {
    CAPTURE(row.step);
    REQUIRE(row.train_bpc.has_value());
    REQUIRE(row.val_bpc.has_value());
    // Both 6 decimals in the file: the ratio holds to their rounding.
    CHECK(std::abs(*row.val_bpc - row.val_loss / std::numbers::ln2) < 2e-6);
    CHECK(std::abs(*row.train_bpc - row.train_loss / std::numbers::ln2) < 2e-6);
    // Every progress line shows both beside their nats, to the digits it prints.
    const std::string head = fmt::format("step {:>6}/30  loss ", row.step);
    const std::size_t at = r.output.find(head);
    REQUIRE(at != std::string::npos);
    const Shown shown = shown_losses(r.output.substr(at + head.size()), "%lf (%lf bpc)  val %lf (%lf bpc)");
    CHECK(shown.train == doctest::Approx(row.train_loss).epsilon(1e-4));
    CHECK(shown.val == doctest::Approx(row.val_loss).epsilon(1e-4));
    CHECK(shown.train_bpc == doctest::Approx(*row.train_bpc).epsilon(1e-3));
    CHECK(shown.val_bpc == doctest::Approx(*row.val_bpc).epsilon(1e-3));
  }
  const std::string final_head = "final: train loss ";
  const std::size_t at = r.output.find(final_head);
  REQUIRE(at != std::string::npos);
  const Shown last = shown_losses(r.output.substr(at + final_head.size()), "%lf (%lf bpc), val loss %lf (%lf bpc)");
  CHECK(last.val == doctest::Approx(rows.back().val_loss).epsilon(1e-4));
  CHECK(last.val_bpc == doctest::Approx(*rows.back().val_bpc).epsilon(1e-3));
  CHECK(last.train_bpc == doctest::Approx(*rows.back().train_bpc).epsilon(1e-3));
  check_loss_plot(dir, "nats per character");

  const fs::path task = tmp / "task";
  const CliResult t = run_headroom(kTinyLags + "--steps 20 --eval-every 10 --out " + task.string());
  INFO(t.output);
  REQUIRE(t.status == 0);
  CHECK(t.output.find(" bpc)") == std::string::npos);
  const std::vector<std::string> lines = lines_of(read_file(task / "metrics.csv"));
  REQUIRE(lines.size() == 3);
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> f = fields(lines[i]);
    REQUIRE(f.size() == 11);
    CHECK(f[9].empty());  // train_bpc
    CHECK(f[10].empty());  // val_bpc
  }
  for (const hr::MetricsRow& row : hr::read_metrics(task / "metrics.csv")) {
    CHECK_FALSE(row.train_bpc.has_value());
    CHECK_FALSE(row.val_bpc.has_value());
  }
}

TEST_CASE("a text run prints a sample at each validation, and its numbers are the same without them") {
  const TempDir tmp("curves_sample");
  const fs::path text = tmp.write("fox.txt", plain_text());
  const std::string flags = tiny_text_flags(text) + "--steps 30 --eval-every 10 ";
  const CliResult with = run_headroom(flags + "--sample-chars 40 --out " + (tmp / "with").string());
  INFO(with.output);
  REQUIRE(with.status == 0);
  std::vector<std::string> samples;
  for (const std::string& line : lines_of(with.output)) {
    if (line.rfind("sample at step ", 0) == 0) samples.push_back(line);
  }
  REQUIRE(samples.size() == 3);
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const std::string head = fmt::format("sample at step {}: ", 10 * (i + 1));
    CHECK(samples[i].rfind(head, 0) == 0);
    CHECK(samples[i].size() == head.size() + 40);  // ASCII letters and spaces: a byte each
  }
  // The last one is what `headroom sample` writes from the finished model.
  const CliResult sampled = run_headroom("sample --tokens 40 --model " + (tmp / "with").string());
  INFO(sampled.output);
  REQUIRE(sampled.status == 0);
  CHECK(sampled.output == samples.back().substr(samples.back().find(": ") + 2) + "\n");

  // Without samples (0) and with the default: the same run, bit for bit.
  const CliResult without = run_headroom(flags + "--sample-chars 0 --out " + (tmp / "without").string());
  const CliResult by_default = run_headroom(flags + "--out " + (tmp / "default").string());
  INFO(without.output);
  REQUIRE(without.status == 0);
  REQUIRE(by_default.status == 0);
  CHECK(without.output.find("sample at step") == std::string::npos);
  CHECK(count(by_default.output, "sample at step") == 3);
  CHECK(metrics_without_timing(tmp / "without" / "metrics.csv") ==
        metrics_without_timing(tmp / "default" / "metrics.csv"));
  CHECK(metrics_without_timing(tmp / "with" / "metrics.csv") ==
        metrics_without_timing(tmp / "default" / "metrics.csv"));
  CHECK(read_file(tmp / "without" / "model.safetensors") == read_file(tmp / "default" / "model.safetensors"));
}

TEST_CASE("the trainer hands each validation's sample to the progress callback, and only a text has one") {
  const TempDir tmp("curves_sample_lib");
  const fs::path text = tmp.write("fox.txt", plain_text());
  hr::TrainConfig c;
  c.model.d_model = 16;
  c.model.n_heads = 2;
  c.model.n_layers = 1;
  c.data = {.task = "copy", .text = text.string(), .seq_len = 16, .vocab = 8};
  c.optim.steps = 20;
  c.optim.batch = 8;
  c.optim.warmup = 2;
  c.optim.eval_every = 10;
  c.optim.eval_batches = 2;
  auto data = hr::make_dataset(c);
  c = hr::finalize(c, *data);
  hr::TrainOptions o;
  o.sample_chars = 25;
  std::size_t samples = 0;
  o.on_progress = [&](const hr::Progress& p) {
    CHECK(p.sample.size() == (p.evaluated ? 25u : 0u));
    samples += p.sample.empty() ? 0 : 1;
  };
  (void)hr::train(c, *data, o);
  CHECK(samples == 2);

  // A toy task has no characters to sample.
  hr::TrainConfig t = tiny_copy();
  auto task = hr::make_dataset(t);
  t = hr::finalize(t, *task);
  CHECK(error_of([&] { (void)hr::train(t, *task, o); }).find("sample_chars 25") != std::string::npos);
}

TEST_CASE("--sample-chars is refused for a toy task, with --quiet and past its cap") {
  check_refused(kTinyLags + "--steps 10 --no-save --sample-chars 20", "--sample-chars 20: samples are characters");
  check_refused(kTinyLags + "--steps 10 --no-save --sample-chars 20 -q", "--quiet prints only the summary");
  check_refused(kTinyLags + "--steps 10 --no-save --sample-chars 10001", "--sample-chars: at most 10000");
  // 0 asks for nothing, which a toy task can give.
  CHECK(run_headroom(kTinyLags + "--steps 10 --eval-every 5 --no-save --sample-chars 0").status == 0);
}
