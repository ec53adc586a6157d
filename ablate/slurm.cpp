// `headroom ablate --slurm`: the job array's and the merge job's batch scripts, and
// their submission through sbatch (ablate/slurm.hpp).
#include "ablate/slurm.hpp"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <spawn.h>
#include <stdexcept>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "nn/safetensors.hpp"

extern char** environ;

namespace headroom {
namespace {

namespace fs = std::filesystem;

// A word for bash: single-quoted unless it is plain.
std::string quoted(const std::string& word) {
  const bool plain = !word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                             "0123456789/._-+=:,@") == std::string::npos;
  if (plain) return word;
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// A job name from the sweep directory's name.
std::string job_name(const fs::path& dir) {
  std::string name = dir.filename().string();
  for (char& c : name) {
    if (std::isalnum(static_cast<unsigned char>(c)) == 0 && c != '-' && c != '_' && c != '.') c = '_';
  }
  return "headroom-" + (name.empty() ? std::string("sweep") : name);
}

std::string header(const SlurmSpec& spec, const std::string& what) {
  return fmt::format(
      "#!/bin/bash\n"
      "# {}\n"
      "# Written by `headroom ablate ... --out {} --slurm`; submit both with --submit,\n"
      "# or by hand:\n"
      "#   jid=$(sbatch --parsable {})\n"
      "#   sbatch --dependency=afterany:$jid {}\n",
      what, spec.sweep_dir.string(), (spec.sweep_dir / "slurm" / "array.sbatch").string(),
      (spec.sweep_dir / "slurm" / "merge.sbatch").string());
}

std::string extra_options(const SlurmSpec& spec) {
  std::string out;
  for (const std::string& o : spec.sbatch) out += "#SBATCH " + o + "\n";
  return out;
}

// Runs argv, returning its exit status and what it wrote to stdout and stderr.
std::pair<int, std::string> run_captured(const std::vector<std::string>& argv) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error(fmt::format("cannot run {}: pipe: {}", argv[0], std::strerror(errno)));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    throw std::runtime_error(fmt::format("cannot run {}: {}", argv[0], std::strerror(rc)));
  }
  std::string output;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n > 0) {
      output.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), output};
}

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
  const std::size_t at = t.rfind('\n');
  return at == std::string::npos ? t : t.substr(at + 1);
}

// The job id in `sbatch --parsable`'s output: "12345" or "12345;cluster".
std::string job_id(const std::string& output, const std::string& what) {
  const std::string line = last_line(output);
  const std::string id = line.substr(0, line.find(';'));
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos) {
    throw std::runtime_error(fmt::format("sbatch {}: expected a job id, got '{}'", what, line));
  }
  return id;
}

}  // namespace

void check_slurm_spec(const SlurmSpec& spec) {
  if (spec.tasks == 0 || spec.tasks > spec.runs) {
    throw std::invalid_argument(fmt::format("--tasks {}: must be from 1 to the grid's {} runs", spec.tasks, spec.runs));
  }
  for (const std::string& o : spec.sbatch) {
    if (o.empty() || o.front() != '-' || o.find_first_of("\n\r") != std::string::npos) {
      throw std::invalid_argument(fmt::format("--sbatch '{}': expected one sbatch option, such as --sbatch=--time=1:00:00", o));
    }
  }
}

SlurmScripts slurm_scripts(const SlurmSpec& spec) {
  check_slurm_spec(spec);
  const std::string name = job_name(spec.sweep_dir);
  const fs::path logs = spec.sweep_dir / "slurm";
  const std::size_t per_task = (spec.runs + spec.tasks - 1) / spec.tasks;
  SlurmScripts s;
  s.array = header(spec, fmt::format("The {} runs of {} as a job array of {} task{}, each training its shard's runs "
                                     "(about {}), {} at a time.",
                                     spec.runs, spec.sweep_dir.string(), spec.tasks, spec.tasks == 1 ? "" : "s",
                                     per_task, spec.jobs)) +
            fmt::format("#SBATCH --job-name={}\n"
                        "#SBATCH --array=1-{}\n"
                        "#SBATCH --ntasks=1\n"
                        "#SBATCH --cpus-per-task={}\n"
                        "#SBATCH --output={}\n",
                        name, spec.tasks, spec.jobs * spec.threads, (logs / "array-%A_%a.out").string()) +
            extra_options(spec) +
            fmt::format("set -euo pipefail\n"
                        "cd {}\n"
                        "exec {} ablate --resume {} --shard auto --jobs {} --no-report\n",
                        quoted(spec.work_dir.string()), quoted(spec.binary.string()),
                        quoted(spec.sweep_dir.string()), spec.jobs);
  s.merge = header(spec, fmt::format("The reports of {} (results.csv, summary.md, plots, report.html), once the "
                                     "array has ended.",
                                     spec.sweep_dir.string())) +
            fmt::format("#SBATCH --job-name={}-merge\n"
                        "#SBATCH --ntasks=1\n"
                        "#SBATCH --cpus-per-task=1\n"
                        "#SBATCH --output={}\n",
                        name, (logs / "merge-%j.out").string()) +
            extra_options(spec) +
            fmt::format("set -euo pipefail\n"
                        "cd {}\n"
                        "exec {} ablate --merge {} --out {} --target-acc {}\n",
                        quoted(spec.work_dir.string()), quoted(spec.binary.string()),
                        quoted(spec.sweep_dir.string()), quoted(spec.sweep_dir.string()), spec.target_acc);
  return s;
}

std::vector<fs::path> write_slurm_scripts(const SlurmSpec& spec) {
  const SlurmScripts s = slurm_scripts(spec);
  const fs::path dir = spec.sweep_dir / "slurm";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::invalid_argument(fmt::format("cannot create {}: {}", dir.string(), ec.message()));
  std::vector<fs::path> files{dir / "array.sbatch", dir / "merge.sbatch"};
  write_file_atomically(files[0], s.array);
  write_file_atomically(files[1], s.merge);
  for (const fs::path& f : files) {
    fs::permissions(f, fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec,
                    fs::perm_options::add, ec);
  }
  return files;
}

fs::path find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return {};
  std::string all = path;
  std::size_t start = 0;
  for (;;) {
    const std::size_t at = all.find(':', start);
    const fs::path dir = all.substr(start, at - start);
    if (!dir.empty() && ::access((dir / program).c_str(), X_OK) == 0) return dir;
    if (at == std::string::npos) return {};
    start = at + 1;
  }
}

SlurmJobs submit_slurm(const fs::path& sweep_dir, const std::string& sbatch) {
  const fs::path dir = sweep_dir / "slurm";
  SlurmJobs jobs;
  const auto [array_rc, array_out] = run_captured({sbatch, "--parsable", (dir / "array.sbatch").string()});
  if (array_rc != 0) {
    throw std::runtime_error(fmt::format("sbatch {} failed (exit status {}): {}", (dir / "array.sbatch").string(),
                                         array_rc, last_line(array_out)));
  }
  jobs.array_id = job_id(array_out, (dir / "array.sbatch").string());
  const auto [merge_rc, merge_out] = run_captured(
      {sbatch, "--parsable", "--dependency=afterany:" + jobs.array_id, (dir / "merge.sbatch").string()});
  if (merge_rc != 0) {
    throw std::runtime_error(fmt::format("array job {} is submitted, but sbatch {} failed (exit status {}): {}; "
                                         "submit it by hand with --dependency=afterany:{}",
                                         jobs.array_id, (dir / "merge.sbatch").string(), merge_rc,
                                         last_line(merge_out), jobs.array_id));
  }
  jobs.merge_id = job_id(merge_out, (dir / "merge.sbatch").string());
  return jobs;
}

}  // namespace headroom
