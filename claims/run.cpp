#include "claims/run.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "ablate/report.hpp"
#include "data/corpus.hpp"
#include "interp/head_analysis.hpp"
#include "nn/checkpoint.hpp"
#include "nn/safetensors.hpp"
#include "train/evaluate.hpp"
#include "train/trainer.hpp"
#include "nn/strict_json.hpp"

namespace headroom {
namespace {

namespace fs = std::filesystem;

// The target accuracy ablate's reports use for steps-to-target (its default).
constexpr double kTargetAccuracy = 0.99;
// Rows of validation data claim 2 looks at per model at initialisation.
constexpr std::size_t kInitRows = 64;

// The claim-2 measurement of every model of its sweep, before training.
std::vector<InitPoint> measure_init(const SweepPlan& plan) {
  std::vector<InitPoint> out;
  for (const PlannedRun& run : plan.runs) {
    const ModelConfig& m = run.config.model;
    out.push_back({.d_k = m.d_k,
                   .scaled = m.attn_scale.value_or(0) != 1.0,
                   .seed = run.seed,
                   .attention = init_attention(run.config, run.seed, kInitRows)});
  }
  return out;
}

// Validation rows claim 10 measures each model on: the same for every model.
constexpr std::size_t kRoleBatches = 4, kRoleBatch = 32;

// Claim 10's measurement of every finished run of the kjv sweep (its model file in
// DIR/runs/<id>), on one set of repeated validation rows drawn once.
std::vector<HeadRoles> measure_roles(const std::vector<RunResult>& results, const fs::path& sweep_dir) {
  std::vector<HeadRoles> out;
  if (results.empty()) return out;
  const std::unique_ptr<Dataset> data = make_dataset(results.front().run->config);
  const RepeatedRows rows = repeated_rows(validation_batches(*data, kRoleBatches, kRoleBatch, validation_seed(0)));
  AttentionProbes probes = text_probes(*data);
  probes.repeat_period = rows.period;
  for (const RunResult& r : results) {
    const fs::path file = sweep_dir / "runs" / r.run->id / "model.safetensors";
    std::error_code ec;
    if (!fs::exists(file, ec)) continue;
    LoadedModel<float> loaded = load_model<float>(file);
    TransformerLM<float>& model = *loaded.model;
    HeadRoles roles{.point = r.run->point, .seed = r.run->seed};
    roles.previous_token = roles.repeat_induction = -INFINITY;
    for (const HeadStats& s : attention_statistics(model, rows.batches, probes)) {
      roles.previous_token = std::max(roles.previous_token, s.previous_token);
      roles.repeat_induction = std::max(roles.repeat_induction, s.repeat_induction);
      if (std::isfinite(s.word_start)) roles.word_start = std::fmax(roles.word_start, s.word_start);
      if (std::isfinite(s.line_start)) roles.line_start = std::fmax(roles.line_start, s.line_start);
      if (2 * s.offset_share >= 1) ++roles.offset_heads[s.dominant_offset];
    }
    roles.copy_ratio = evaluate_batches(model, rows.second_copy).loss / evaluate_batches(model, rows.first_copy).loss;
    out.push_back(std::move(roles));
  }
  return out;
}

}  // namespace

std::vector<SweepPlan> plan_study(const Study& study) {
  // A corpus not installed: the one line naming its apt-get install, before a sweep
  // is planned (planning a run on a corpus reads it for its vocabulary).
  for (const std::string& corpus : study_corpora(study)) check_installed(corpus);
  std::vector<SweepPlan> plans;
  for (const ClaimSweep& s : study.sweeps) {
    const SweepSpec spec = s.spec();
    check_grid_size(spec, kDefaultMaxRuns);
    plans.push_back(plan_sweep(spec));
  }
  return plans;
}

void check_claims_dir(const Study& study, const std::vector<SweepPlan>& plans, const fs::path& dir, std::size_t jobs) {
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) throw std::invalid_argument(fmt::format("--out {} exists and is not a directory", dir.string()));
    const fs::path file = dir / "claims.json";
    if (!fs::exists(file, ec)) {
      if (fs::directory_iterator(dir, ec) != fs::directory_iterator()) {
        throw std::invalid_argument(fmt::format("--out {} is not empty and holds no claims.json (not a headroom claims directory): give a "
                        "new or empty directory",
                        dir.string()));
      }
    } else {
      const nlohmann::json stored = read_strict_json_file(file);
      const nlohmann::json wanted = study_json(study);
      if (stored != wanted) {
        const std::string was = stored.is_object() && stored.contains("budget") && stored.contains("seeds")
                                    ? fmt::format("budget {}, {} seeds", stored["budget"].dump(), stored["seeds"].dump())
                                    : std::string("other settings");
        throw std::invalid_argument(fmt::format("--out {} holds a claims study made with {}, not budget \"{}\", {} seeds: give another --out, "
                        "or the settings that made it",
                        dir.string(), was, to_string(study.budget), study.seeds));
      }
    }
  }
  for (std::size_t i = 0; i < plans.size(); ++i) {
    check_sweep_dir(dir / study.sweeps[i].name, plans[i]);
    check_sweep_memory(plans[i], jobs);
  }
}

namespace {

// The claims from the sweeps' numbers (in the study's sweep order) and claim 2's
// measurements at initialisation (by sweep name).
std::vector<ClaimRow> assess_claims(const Study& study, const std::vector<SweepPlan>& plans,
                                    const std::vector<SweepNumbers>& numbers,
                                    const std::map<std::string, std::vector<InitPoint>>& init,
                                    const std::vector<HeadRoles>& roles) {
  auto at = [&](const std::string& name) -> const SweepNumbers& {
    for (std::size_t i = 0; i < numbers.size(); ++i) {
      if (study.sweeps[i].name == name) return numbers[i];
    }
    throw std::out_of_range(fmt::format("headroom claims: no sweep named {}", name));
  };
  auto init_of = [&](const std::string& name) {
    const auto it = init.find(name);
    return it == init.end() ? std::vector<InitPoint>{} : it->second;
  };
  std::vector<ClaimRow> rows;
  if (study.suite == Suite::text) {
    for (ClaimRow& r : assess_classifier_heads(at("8-classifier-heads"))) rows.push_back(std::move(r));
    for (ClaimRow& r : assess_text_heads(at("9-kjv-heads"))) rows.push_back(std::move(r));
    for (ClaimRow& r : assess_head_roles(at("9-kjv-heads"), roles)) rows.push_back(std::move(r));
    return rows;
  }
  rows.push_back(assess_mha_parameters(&at("4-heads-lags")));
  for (ClaimRow& r : assess_attn_scale(at("2-attn-scale"), init_of("2-attn-scale"))) rows.push_back(std::move(r));
  rows.push_back(assess_attn_scale_unit_init(at("2-attn-scale-unit-init"), init_of("2-attn-scale-unit-init")));
  for (ClaimRow& r : assess_concat_sum(at("3-concat-vs-sum"))) rows.push_back(std::move(r));
  // |K|, the elbow claim 4 predicts: the offsets the heads sweep's lags task reads.
  std::size_t lags = 0;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    if (study.sweeps[i].name == "4-heads-lags" && !plans[i].runs.empty()) lags = plans[i].runs[0].config.data.lags.size();
  }
  for (ClaimRow& r : assess_several_heads(at("4-heads-lags"), lags)) rows.push_back(std::move(r));
  for (ClaimRow& r : assess_too_many_heads(at("4-heads-lags"), at("5-recall-narrow-heads"))) rows.push_back(std::move(r));
  rows.push_back(assess_kv_heads(at("6-kv-heads")));
  rows.push_back(assess_head_time(at("4-heads-lags")));
  return rows;
}

}  // namespace

std::vector<ClaimRow> assess_study(const Study& study, const std::vector<SweepPlan>& plans, const fs::path& dir) {
  // Every seed, then set A and set B alone: the same rules on each.
  std::array<std::vector<SweepNumbers>, 3> numbers;
  std::array<std::map<std::string, std::vector<InitPoint>>, 3> init;
  std::array<std::vector<HeadRoles>, 3> roles;
  const auto in = [&](std::size_t which, std::uint64_t seed) {
    return which == 0 || study.set_of(seed) == (which == 1 ? SeedSet::a : SeedSet::b);
  };
  for (std::size_t i = 0; i < plans.size(); ++i) {
    const std::string& name = study.sweeps[i].name;
    const fs::path sweep_dir = dir / name;
    std::error_code ec;
    const std::vector<RunResult> results =
        fs::exists(sweep_dir, ec) ? collect_results(plans[i], sweep_dir, kTargetAccuracy) : std::vector<RunResult>{};
    const bool at_init = name == "2-attn-scale" || name == "2-attn-scale-unit-init";
    const std::vector<InitPoint> measured = at_init ? measure_init(plans[i]) : std::vector<InitPoint>{};
    const std::vector<HeadRoles> measured_roles =
        study.suite == Suite::text && name == "9-kjv-heads" ? measure_roles(results, sweep_dir) : std::vector<HeadRoles>{};
    for (std::size_t which = 0; which < 3; ++which) {
      std::vector<RunResult> kept;
      for (const RunResult& r : results) {
        if (in(which, r.run->seed)) kept.push_back(r);
      }
      numbers[which].push_back(sweep_numbers(name, plans[i], kept));
      for (const HeadRoles& r : measured_roles) {
        if (in(which, r.seed)) roles[which].push_back(r);
      }
      if (!at_init) continue;
      for (const InitPoint& p : measured) {
        if (in(which, p.seed)) init[which][name].push_back(p);
      }
    }
  }
  std::vector<ClaimRow> rows = assess_claims(study, plans, numbers[0], init[0], roles[0]);
  add_replication(rows, assess_claims(study, plans, numbers[1], init[1], roles[1]),
                  assess_claims(study, plans, numbers[2], init[2], roles[2]));
  // Seeds a set: the most finished seeds either set has at a compared point; when the
  // claim compares none (it reads every point: 2a's slopes), the seeds every point has.
  for (ClaimRow& r : rows) {
    std::size_t most = 0, common = SIZE_MAX;
    for (std::size_t i = 0; i < plans.size(); ++i) {
      const std::string& name = study.sweeps[i].name;
      if (std::find(r.sweeps.begin(), r.sweeps.end(), name) == r.sweeps.end()) continue;
      for (std::size_t k = 0; k < numbers[1][i].points.size() && k < numbers[2][i].points.size(); ++k) {
        const std::string& point = numbers[1][i].points[k].point;
        const std::size_t n = std::max(numbers[1][i].points[k].val_loss.n, numbers[2][i].points[k].val_loss.n);
        common = std::min(common, n);
        if (std::find(r.compared.begin(), r.compared.end(), ClaimRow::Point{name, point}) != r.compared.end()) {
          most = std::max(most, n);
        }
      }
    }
    r.seeds_per_set = r.compared.empty() ? (common == SIZE_MAX ? 0 : common) : most;
  }
  return rows;
}

std::vector<SweepTally> tally_study(const Study& study, const std::vector<SweepPlan>& plans, const fs::path& dir) {
  std::vector<SweepTally> out;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    const fs::path sweep_dir = dir / study.sweeps[i].name;
    SweepTally t{.name = study.sweeps[i].name,
                 .runs = plans[i].runs.size(),
                 .finished = 0,
                 .run_seconds = 0,
                 .seeds_per_set = plans[i].seeds.size() / 2};
    std::error_code ec;
    if (fs::exists(sweep_dir, ec)) {
      for (const RunResult& r : collect_results(plans[i], sweep_dir, kTargetAccuracy)) {
        ++t.finished;
        if (std::isfinite(r.wall_s)) t.run_seconds += r.wall_s;
      }
    }
    out.push_back(t);
  }
  return out;
}

std::map<std::size_t, std::set<std::string>> sweeps_to_grow(const Study& study, const std::vector<ClaimRow>& rows,
                                                            const std::vector<std::size_t>& per_set,
                                                            std::vector<std::string>* open) {
  std::map<std::size_t, std::set<std::string>> grow;
  std::set<std::size_t> every_point;  // sweeps a claim reads as a whole
  for (const ClaimRow& r : rows) {
    if (r.settled() || !r.seeds_can_decide) continue;
    bool room = false;
    for (const std::string& name : r.sweeps) {
      for (std::size_t i = 0; i < study.sweeps.size() && i < per_set.size(); ++i) {
        if (study.sweeps[i].name != name || per_set[i] >= study.max_seeds) continue;
        std::set<std::string>& points = grow[i];
        bool any = false;
        for (const ClaimRow::Point& p : r.compared) {
          if (p.sweep != name) continue;
          points.insert(p.point);
          any = true;
        }
        if (!any) every_point.insert(i);
        room = true;
      }
    }
    if (room && open != nullptr) open->push_back(r.id);
  }
  for (const std::size_t i : every_point) grow[i].clear();
  return grow;
}

ClaimsOutcome run_claims(const Study& study, const ClaimsOptions& options) {
  std::vector<SweepPlan> plans = plan_study(study);
  const fs::path& dir = options.out_dir;
  check_claims_dir(study, plans, dir, options.jobs);  // before anything is written

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::invalid_argument(fmt::format("cannot create --out {}: {}", dir.string(), ec.message()));
  if (!fs::exists(dir / "claims.json", ec)) write_file_atomically(dir / "claims.json", study_json(study).dump(2) + "\n");

  auto emit = [&](const ClaimsEvent& e) {
    if (options.on_event) options.on_event(e);
  };
  ClaimsOutcome outcome;
  // Runs sweep i as plans[i] says (its runs finished before are skipped), those `only`
  // accepts where it is given.
  const auto run_one = [&](std::size_t i, const ClaimSweep& sweep, std::size_t round,
                           std::function<bool(const PlannedRun&)> only) {
    ClaimsEvent started{.kind = ClaimsEvent::Kind::sweep_started, .index = i + 1, .count = plans.size(),
                        .sweep = &sweep, .plan = &plans[i], .event = nullptr, .outcome = nullptr, .round = round};
    emit(started);
    AblateOptions ablate{.out_dir = dir / sweep.name,
                         .jobs = options.jobs,
                         .shard = {},
                         .on_event =
                             [&](const SweepEvent& e) {
                               ClaimsEvent wrapped = started;
                               wrapped.kind = ClaimsEvent::Kind::sweep_event;
                               wrapped.event = &e;
                               emit(wrapped);
                             },
                         .stop_requested = options.stop_requested,
                         .track_heads = {},
                         .only = std::move(only)};
    outcome.sweeps.push_back(run_sweep(plans[i], ablate));
    const SweepOutcome& done = outcome.sweeps.back();
    (void)write_reports(plans[i], dir / sweep.name, kTargetAccuracy);
    outcome.failed += done.failed.size();
    ClaimsEvent finished = started;
    finished.kind = ClaimsEvent::Kind::sweep_finished;
    finished.outcome = &done;
    emit(finished);
    if (done.interrupted) outcome.interrupted = true;
  };
  for (std::size_t i = 0; i < plans.size() && !outcome.interrupted; ++i) run_one(i, study.sweeps[i], 1, {});

  // Seeds until decided: while a claim is not settled and more seeds could settle it,
  // the points it compares gain one seed a set, up to study.max_seeds. Each round's
  // seeds are new to every point, and the rounds are decided from the finished runs
  // alone (a plan collects the runs of its seeds), so a rerun replays them and trains
  // nothing it has.
  std::vector<std::size_t> per_set(plans.size(), study.seeds);
  std::vector<ClaimRow> rows;  // the assessment of the runs as they are, when nothing has run since
  for (std::size_t round = 2; !outcome.interrupted; ++round) {
    emit({.kind = ClaimsEvent::Kind::assessing, .index = 0, .count = plans.size(), .sweep = nullptr, .plan = nullptr,
          .event = nullptr, .outcome = nullptr, .round = round - 1});
    rows = assess_study(study, plans, dir);
    std::vector<std::string> open;
    const std::map<std::size_t, std::set<std::string>> grow = sweeps_to_grow(study, rows, per_set, &open);
    if (grow.empty()) break;
    rows.clear();
    emit({.kind = ClaimsEvent::Kind::round_started, .index = 0, .count = plans.size(), .sweep = nullptr,
          .plan = nullptr, .event = nullptr, .outcome = nullptr, .round = round, .open_claims = open});
    for (const auto& [i, points] : grow) {
      if (outcome.interrupted) break;
      ++per_set[i];
      const ClaimSweep sweep = study.grown(study.sweeps[i].name, per_set[i]);
      const SweepSpec spec = sweep.spec();
      check_grid_size(spec, kDefaultMaxRuns);
      auto only = new_seeds_at(plans[i], points);
      plans[i] = plan_sweep(spec);
      check_sweep_memory(plans[i], options.jobs);
      run_one(i, sweep, round, std::move(only));
    }
  }
  outcome.rows = rows.empty() ? assess_study(study, plans, dir) : std::move(rows);
  outcome.markdown = write_claims_report(study, outcome.rows, dir, tally_study(study, plans, dir));
  return outcome;
}

}  // namespace headroom
