// claims.md and claims.html (claims/run.hpp).
#include <fmt/format.h>

#include "claims/run.hpp"
#include "nn/safetensors.hpp"
#include "plot/svg.hpp"

namespace headroom {
namespace {

namespace fs = std::filesystem;

// A table cell: no line breaks, and a '|' does not end the cell.
std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::string plot_file(const ClaimRow& row) { return fmt::format("claim-{}.svg", row.id); }

// "seeds 0, 2, 4 (set A)": the seeds of one set.
std::string seeds_of(const Study& study, SeedSet set) {
  std::string out;
  for (std::size_t i = set == SeedSet::a ? 0 : 1; i < 2 * study.seeds; i += 2) {
    out += fmt::format("{}{}", out.empty() ? "" : ", ", study.seed_offset + i);
  }
  return out;
}

std::string budget_line(const Study& study) {
  return fmt::format("{}budget **{}**, {} seeds per point in two disjoint sets of {}: A (seeds {}) and B (seeds {})",
                     study.suite == Suite::text ? "Real text (Debian's corpora), " : "", to_string(study.budget), 2 * study.seeds, study.seeds, seeds_of(study, SeedSet::a),
                     seeds_of(study, SeedSet::b));
}

// The table's verdict: the verdict on every seed, and whether the two seed sets agree.
std::string verdict_cell(const ClaimRow& r) {
  if (!r.replicated) return to_string(r.verdict);
  return r.settled() ? to_string(r.verdict) + ", settled" : to_string(r.verdict) + ", not settled";
}

std::string sets_cell(const ClaimRow& r) {
  if (!r.replicated) return "-";
  std::string out = fmt::format("{} · {}", to_string(r.set_a), to_string(r.set_b));
  if (r.seeds_per_set > 0) out += fmt::format(" ({} seeds a set)", r.seeds_per_set);
  return out;
}

// Under a claim: what each seed set said, and what that makes of the verdict.
std::string replication_text(const ClaimRow& r) {
  if (!r.replicated) return {};
  const std::string both = fmt::format("Seed set A: {}; seed set B: {}", to_string(r.set_a), to_string(r.set_b));
  if (r.settled()) return both + ": the two disjoint sets agree, so the verdict is settled.";
  return both + ": they do not agree on a decided verdict, so it is not settled (more seeds, or steps, may settle it).";
}

const char* kVerdictRules =
    "Each verdict is computed from the numbers by the rule stated under its claim, never written by hand: "
    "**supported**, **contradicted**, or **inconclusive at this budget** (more seeds or steps could still decide "
    "it). Seed statistics are the mean, the sample sd and n over seeds. Two seed means differ beyond noise when "
    "they are more than two standard errors of their difference apart (Welch: sqrt(sd_a^2/n_a + sd_b^2/n_b)), "
    "ablate's rule; two means are equal when that whole two-standard-error interval lies within a stated margin. "
    "A loss here is the excess loss (model loss minus the task's Bayes loss) where the task knows its true "
    "distribution, else the validation loss.";

const ClaimSweep* find_sweep(const Study& study, const std::string& name) {
  for (const ClaimSweep& s : study.sweeps) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

// The command that reruns sweep `s` as it is now: with the seeds rounds added.
std::string command_now(const Study& study, const ClaimSweep& s, const fs::path& dir,
                        const std::vector<SweepTally>& tallies) {
  for (const SweepTally& t : tallies) {
    if (t.name == s.name && t.seeds_per_set > study.seeds) return study.grown(s.name, t.seeds_per_set).command(dir);
  }
  return s.command(dir);
}

}  // namespace

std::string claims_markdown(const Study& study, const std::vector<ClaimRow>& rows, const fs::path& dir,
                            const std::vector<SweepTally>& tallies) {
  std::string out = "# headroom claims: the seeds' claims about heads, measured\n\n";
  out += fmt::format("{} ({}). Every sweep is an ordinary `headroom ablate` directory under {}; the command under "
                     "each claim reruns or extends it.\n\n",
                     budget_line(study),
                     fmt::format("`headroom claims{}{}`", study.suite == Suite::text ? " --text" : "",
                                 study.budget == Budget::quick ? " --quick" : ""),
                     dir.string());
  out += "| # | claim | verdict (all seeds) | seed sets A · B | numbers (all seeds) |\n|---|---|---|---|---|\n";
  for (const ClaimRow& r : rows) {
    out += fmt::format("| {} | {} | {} | {} | {} |\n", r.id, cell(r.claim), verdict_cell(r), sets_cell(r),
                       cell(r.summary));
  }
  out += fmt::format("\n{}\n", kVerdictRules);
  if (!tallies.empty()) {
    out += "\nRounds of seeds until decided train the compared points alone, so a grown sweep has finished fewer "
           "runs than its grid holds; its command fills the grid.\n";
    out += "\n| sweep | runs finished (of the grid) | run time (s, summed) | s per run |\n|---|---|---|---|\n";
    for (const SweepTally& t : tallies) {
      out += fmt::format("| [{0}]({0}/summary.md) | {1} ({2}) | {3:.0f} | {4} |\n", t.name, t.finished, t.runs,
                         t.run_seconds,
                         t.finished == 0 ? std::string("-") : fmt::format("{:.1f}", t.run_seconds / t.finished));
    }
  }
  for (const ClaimRow& r : rows) {
    out += fmt::format("\n## {}. {}\n\n**Verdict: {}.** {}\n\n", r.id, r.claim, verdict_cell(r), r.finding);
    if (r.replicated) out += replication_text(r) + "\n\n";
    out += fmt::format("- Experiment: {}\n- Prediction: {}\n- Rule: {}\n", r.experiment, r.prediction, r.rule);
    for (const std::string& name : r.sweeps) {
      const ClaimSweep* s = find_sweep(study, name);
      out += fmt::format("- Sweep `{}/` ({}):\n\n      {}\n\n", name, s == nullptr ? "" : s->about,
                         s == nullptr ? std::string("(not in this study)") : command_now(study, *s, dir, tallies));
    }
    if (r.sweeps.empty()) out += "\n";
    out += "Numbers:\n\n";
    for (const std::string& n : r.numbers) out += fmt::format("- {}\n", n);
    if (!r.plot_svg.empty()) out += fmt::format("\n![claim {0}]({1})\n", r.id, plot_file(r));
  }
  return out;
}

std::string claims_html(const Study& study, const std::vector<ClaimRow>& rows, const fs::path& dir,
                        const std::vector<SweepTally>& tallies) {
  std::string out = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>headroom claims</title>\n"
      "<style>\nbody {{ font-family: sans-serif; margin: 2em; color: #222; max-width: 75em; }}\n"
      "table {{ border-collapse: collapse; margin: 1em 0; }}\n"
      "th, td {{ border: 1px solid #ccc; padding: 3px 8px; text-align: left; vertical-align: top; }}\n"
      "th {{ background: #f3f3f3; }}\n.supported {{ color: #176117; }}\n.contradicted {{ color: #a11; }}\n"
      ".inconclusive {{ color: #8a6d00; }}\npre {{ background: #f6f6f6; padding: 0.5em; white-space: pre-wrap; }}\n"
      "</style>\n</head>\n<body>\n<h1>headroom claims: the seeds' claims about heads, measured</h1>\n"
      "<p>{}. Every sweep is an ordinary <code>headroom ablate</code> directory under {}.</p>\n"
      "<table>\n<tr><th>#</th><th>claim</th><th>verdict (all seeds)</th><th>seed sets A · B</th><th>numbers (all "
      "seeds)</th></tr>\n",
      svg::escape(budget_line(study)),
      svg::escape(dir.string()));
  auto css = [](Verdict v) {
    return v == Verdict::supported ? "supported" : v == Verdict::contradicted ? "contradicted" : "inconclusive";
  };
  for (const ClaimRow& r : rows) {
    out += fmt::format(
        "<tr><td><a href=\"#claim-{0}\">{0}</a></td><td>{1}</td><td class=\"{2}\">{3}</td><td>{4}</td><td>{5}</td>"
        "</tr>\n",
        svg::escape(r.id), svg::escape(r.claim), css(r.verdict), svg::escape(verdict_cell(r)), svg::escape(sets_cell(r)),
        svg::escape(r.summary));
  }
  out += fmt::format("</table>\n<p>{}</p>\n", svg::escape(kVerdictRules));
  if (!tallies.empty()) {
    out += "<table>\n<tr><th>sweep</th><th>runs finished (of the grid)</th><th>run time (s, summed)</th></tr>\n";
    for (const SweepTally& t : tallies) {
      out += fmt::format("<tr><td><a href=\"{0}/report.html\">{0}</a></td><td>{1} ({2})</td><td>{3:.0f}</td></tr>\n",
                         svg::escape(t.name), t.finished, t.runs, t.run_seconds);
    }
    out += "</table>\n";
  }
  for (const ClaimRow& r : rows) {
    out += fmt::format("<h2 id=\"claim-{0}\">{0}. {1}</h2>\n<p><strong class=\"{2}\">Verdict: {3}.</strong> {4}</p>\n",
                       svg::escape(r.id), svg::escape(r.claim), css(r.verdict), svg::escape(verdict_cell(r)),
                       svg::escape(r.finding));
    if (r.replicated) out += fmt::format("<p>{}</p>\n", svg::escape(replication_text(r)));
    out += fmt::format("<ul>\n<li>Experiment: {}</li>\n<li>Prediction: {}</li>\n<li>Rule: {}</li>\n</ul>\n",
                       svg::escape(r.experiment), svg::escape(r.prediction), svg::escape(r.rule));
    for (const std::string& name : r.sweeps) {
      const ClaimSweep* s = find_sweep(study, name);
      if (s == nullptr) continue;
      out += fmt::format("<p>Sweep <a href=\"{0}/report.html\">{0}/</a> ({1}):</p>\n<pre>{2}</pre>\n",
                         svg::escape(name), svg::escape(s->about), svg::escape(command_now(study, *s, dir, tallies)));
    }
    out += "<ul>\n";
    for (const std::string& n : r.numbers) out += fmt::format("<li>{}</li>\n", svg::escape(n));
    out += "</ul>\n";
    if (!r.plot_svg.empty()) out += fmt::format("<figure>\n{}<figcaption>{}</figcaption>\n</figure>\n", r.plot_svg, plot_file(r));
  }
  out += "</body>\n</html>\n";
  return out;
}

std::string write_claims_report(const Study& study, const std::vector<ClaimRow>& rows, const fs::path& dir,
                                const std::vector<SweepTally>& tallies) {
  for (const ClaimRow& r : rows) {
    if (!r.plot_svg.empty()) write_file_atomically(dir / plot_file(r), r.plot_svg);
  }
  const std::string md = claims_markdown(study, rows, dir, tallies);
  write_file_atomically(dir / "claims.md", md);
  write_file_atomically(dir / "claims.html", claims_html(study, rows, dir, tallies));
  return md;
}

}  // namespace headroom
