// `headroom ablate --slurm`: a sweep as a Slurm job array plus a merge job that
// depends on it (docs/cli/ablate.md, "On a cluster"). Two batch scripts go into
// DIR/slurm/:
//
//     array.sbatch   #SBATCH --array=1-T: task K runs `headroom ablate --resume DIR
//                    --shard auto --no-report`, that is the runs of shard K/T
//                    (shard_from_environment), claimed one by one in DIR
//     merge.sbatch   `headroom ablate --merge DIR --out DIR`: the reports, after the
//                    array (submitted with --dependency=afterany:<array job>)
//
// and their logs: DIR/slurm/array-<job>_<task>.out, DIR/slurm/merge-<job>.out.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

namespace headroom {

struct SlurmSpec {
  std::filesystem::path sweep_dir;  // absolute: the tasks run on other machines, from another directory
  std::filesystem::path binary;     // absolute path of the headroom that runs the tasks
  std::filesystem::path work_dir;   // absolute: where relative paths in the configs (--text) resolve
  std::size_t runs = 0;             // the grid's runs
  std::size_t tasks = 0;            // array tasks, 1..runs
  std::size_t jobs = 1;             // runs side by side in each task
  std::size_t threads = 1;          // the largest train.threads of the grid's runs
  double target_acc = 0.99;         // for the merge job's reports
  std::vector<std::string> sbatch;  // more #SBATCH options, each as "--name=value" or "-x value"
};

struct SlurmScripts {
  std::string array;  // array.sbatch
  std::string merge;  // merge.sbatch
};

// Refuses (std::invalid_argument naming the flag and the value) tasks outside
// 1..runs, and an --sbatch option that does not start with '-' or holds a newline.
void check_slurm_spec(const SlurmSpec& spec);

// The two scripts' text. Each task asks for jobs x threads CPUs; the merge job for one.
SlurmScripts slurm_scripts(const SlurmSpec& spec);

// Writes DIR/slurm/array.sbatch and merge.sbatch (atomically, executable) and
// returns their paths, array first.
std::vector<std::filesystem::path> write_slurm_scripts(const SlurmSpec& spec);

// The directory on PATH that holds an executable `program`, or an empty path.
std::filesystem::path find_on_path(const std::string& program);

struct SlurmJobs {
  std::string array_id;
  std::string merge_id;
};

// Submits DIR/slurm/array.sbatch, then merge.sbatch with
// --dependency=afterany:<array job>, through `sbatch --parsable`. A submission that
// fails is a std::runtime_error with sbatch's exit status and its output's last line
// (the merge's failure names the array job, which then runs without it).
SlurmJobs submit_slurm(const std::filesystem::path& sweep_dir, const std::string& sbatch = "sbatch");

}  // namespace headroom
