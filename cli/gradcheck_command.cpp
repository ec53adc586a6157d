// `headroom gradcheck`: every op against central finite differences, as a table.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "autograd/op_checks.hpp"
#include "nn/module_checks.hpp"
#include "cli/commands.hpp"
#include "cli/suggest.hpp"
#include "cli/validators.hpp"

namespace headroom::cli {
namespace {

struct GradcheckFlags {
  std::uint64_t seed = 0;
  std::string op;
  bool list = false;
  bool verbose = false;
  double atol = 1e-5;
  double rtol = 1e-3;
  double eps = 1e-6;
};

int run_gradcheck(const GradcheckFlags& flags) {
  if (flags.list) {
    for (const auto& name : op_names()) fmt::print("{}\n", name);
    for (const auto& name : module_names()) fmt::print("{}\n", name);
    return 0;
  }
  const auto contains = [](const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  const bool one_op = contains(op_names(), flags.op);
  const bool one_module = contains(module_names(), flags.op);
  if (!flags.op.empty() && !one_op && !one_module) {
    std::vector<std::string> all = op_names();
    for (const auto& name : module_names()) all.push_back(name);
    throw std::invalid_argument(fmt::format("gradcheck: unknown op or module '{}'{}; ops are: {}; modules are: {}",
                                            flags.op, did_you_mean(nearest_name(flags.op, all)),
                                            fmt::join(op_names(), ", "), fmt::join(module_names(), ", ")));
  }
  OpCheckOptions options;
  options.seed = flags.seed;
  options.op = flags.op;
  options.gradcheck.atol = flags.atol;
  options.gradcheck.rtol = flags.rtol;
  options.gradcheck.eps = flags.eps;
  std::vector<OpCheck> results;
  if (!one_module) results = run_op_checks(options);
  if (!one_op) {
    for (auto& r : run_module_checks(options)) results.push_back(std::move(r));
  }

  fmt::print("{:<18} {:<38} {:<40} {:>11} {:>11}  {}\n", "op", "case", "shapes", "max abs err",
             "max rel err", "result");
  std::size_t failed = 0;
  for (const auto& r : results) {
    double abs_err = 0, rel_err = 0;
    for (const auto& in : r.report.inputs) {
      abs_err = std::max(abs_err, in.max_abs_error);
      rel_err = std::max(rel_err, in.max_rel_error);
    }
    const bool ok = r.report.passed();
    failed += ok ? 0 : 1;
    fmt::print("{:<18} {:<38} {:<40} {:>11.2e} {:>11.2e}  {}\n", r.op, r.what, r.shapes, abs_err,
               rel_err, ok ? "pass" : "FAIL");
    if (!ok || flags.verbose) fmt::print("{}", r.report.str());
  }
  const std::string over = one_op       ? "1 op"
                           : one_module ? "1 module"
                                        : fmt::format("{} ops and {} modules", op_names().size(), module_names().size());
  fmt::print("\n{} cases over {}: {} passed, {} failed (seed {}, atol {:g}, rtol {:g}, eps {:g})\n", results.size(),
             over, results.size() - failed, failed, flags.seed, flags.atol, flags.rtol, flags.eps);
  return failed == 0 ? 0 : 1;
}

}  // namespace

Run add_gradcheck_command(CLI::App& app) {
  auto flags = std::make_shared<GradcheckFlags>();
  CLI::App* cmd = app.add_subcommand(
      "gradcheck",
      "Check every op's and every module's backward against central finite differences in double precision, and the "
      "whole language model's loss. Prints a table; exits 1 if any case fails.");
  cmd->footer(
      "Ops run on random shapes (broadcasting, transposed inputs, size-1 axes); modules over head configurations (1 "
      "head, d_k = 1, free d_k and d_v, GQA, MQA, masks, pre/post norm).");
  cmd->add_option("--seed", flags->seed, "Seed for shapes, values and output weights")
      ->capture_default_str()
      ->check(kWholeNumber);
  cmd->add_option("--op", flags->op, "Check only this op or module (see --list)");
  cmd->add_flag("--list", flags->list, "List the ops and modules and exit");
  cmd->add_flag("-v,--verbose", flags->verbose, "Print each input's worst element for every case");
  cmd->add_option("--atol", flags->atol, "Absolute tolerance")->capture_default_str()->check(kPositive);
  cmd->add_option("--rtol", flags->rtol, "Relative tolerance")->capture_default_str()->check(kNonNegative);
  cmd->add_option("--eps", flags->eps, "Finite-difference step")->capture_default_str()->check(kPositive);
  return [flags] { return run_gradcheck(*flags); };
}

}  // namespace headroom::cli
