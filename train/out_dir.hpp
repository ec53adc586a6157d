// A run's output directory before the first step: what it may already hold, its
// lock, the leftovers of interrupted saves, and the default name
// (docs/cli/train.md, "Output directories").
//
//     DIR/.lock                           the advisory lock (flock) of the run training into DIR
//     DIR/attempts.log                    headroom ablate's record of the processes that trained
//                                         here (ablate/sweep.hpp); like the lock, not a run entry
//     DIR/config.json, metrics.csv,       the run's own entries (kRunEntries); --overwrite
//     DIR/loss.svg, model.safetensors,    removes exactly these
//     DIR/checkpoints/
//     DIR/tracked_heads.csv, .svg         (train --track-heads)
//     DIR/NAME.tmp.PID.N                  a write_file_atomically in progress (nn/safetensors.hpp)
//     DIR/checkpoints/.step-N.tmp-PID     a checkpoint being saved (train/resume.hpp)
//     DIR/checkpoints/.step-N.old-PID     a checkpoint being replaced
//     DIR/checkpoints/.step-N.pruned-PID  a checkpoint being pruned
//     DIR/.overwritten-PID/               the run entries --overwrite is removing
#pragma once

#include <array>
#include <cstddef>
#include <filesystem>
#include <string>

#include "train/config.hpp"

namespace headroom {

// The entries a run writes into its directory, besides the lock file.
inline constexpr std::array<const char*, 7> kRunEntries{"config.json",       "metrics.csv",      "loss.svg",
                                                        "model.safetensors", "checkpoints",      "tracked_heads.csv",
                                                        "tracked_heads.svg"};
inline constexpr const char* kLockFile = ".lock";
inline constexpr const char* kOverwrittenPrefix = ".overwritten-";
// Entries a directory may hold beside a run, or alone, that say nothing about the run:
// check_out_dir ignores them and --overwrite keeps them.
inline constexpr std::array<const char*, 2> kKeptEntries{kLockFile, "attempts.log"};
bool is_kept_entry(const std::string& name);

enum class OutDirUse {
  fresh,      // DIR must be missing, empty, or hold only kKeptEntries
  overwrite,  // as fresh, or DIR holds a run whose entries are removed first
  resume,     // DIR holds the run to continue
};

// The run's advisory lock: an flock(LOCK_EX) on DIR/.lock, held while this lives.
// The file holds the holder's "PID on HOST", for the message of the next one, and
// the holder's mark, if any (below).
//
// On a local file system the kernel drops the lock when its process dies, however it
// dies. On NFS, Linux clients turn flock into a POSIX lock on the whole file that the
// server's lock manager arbitrates (NLM for NFSv3, the protocol itself for v4), so it
// is exclusive across machines too, and a dead client's locks lapse with its lease.
// Under that emulation locks belong to the process, not to the open file: a second
// acquire of a lock this process holds succeeds, and closing any descriptor of the
// file drops it. Callers therefore never take one directory's lock twice, and never
// open a held lock file otherwise (docs/design.md #24).
class RunDirLock {
 public:
  RunDirLock() = default;
  RunDirLock(RunDirLock&& other) noexcept;
  RunDirLock& operator=(RunDirLock&& other) noexcept;
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;
  ~RunDirLock();

  // Takes the lock of `dir` (which must exist), or throws std::invalid_argument
  // naming the directory and, when it can, the process that holds it.
  static RunDirLock acquire(const std::filesystem::path& dir);
  // As acquire, but a lock held by another process is not an error: the result is
  // then not held(). Other failures (no such directory, no permission) throw.
  static RunDirLock try_acquire(const std::filesystem::path& dir);
  // As acquire, but waits for another holder to let go.
  static RunDirLock wait(const std::filesystem::path& dir);
  bool held() const { return fd_ >= 0; }

  // A state for later holders to read, kept in the lock file after "PID on HOST"
  // until a holder marks another (headroom ablate marks a run "finished" once its
  // result.json is written). It is read under the lock, so it is current even where
  // another file's existence may not be yet: an NFS client caches lookups for
  // seconds. Throws std::runtime_error when the file cannot be written.
  void mark(const std::string& state);
  // The mark in the file when this holder took the lock, or "".
  const std::string& previous_mark() const { return previous_; }

 private:
  int fd_ = -1;
  std::string previous_;
};

// Checks `dir` for `use`, creates it (fresh, overwrite), takes its lock, removes the
// old run's entries (overwrite: kRunEntries only; other files stay) and the
// temporaries that interrupted saves left. A directory holds a run when it has a
// config.json or checkpoints/. One that does is refused for fresh (naming what it
// holds, --resume and --overwrite); a non-empty one that does not is refused for
// fresh and overwrite alike, naming a few of its entries, and nothing in it is
// touched. Errors are std::invalid_argument with one line naming `dir`. With
// `locked`, the caller already holds `dir`'s lock (headroom ablate's runner claims a
// run by its lock before it trains it): nothing is locked, and the result is empty.
RunDirLock open_out_dir(const std::filesystem::path& dir, OutDirUse use, bool locked = false);

// open_out_dir's checks alone: touches nothing, so a caller can refuse a directory
// before it prints or allocates anything. Returns whether `dir` holds a run.
bool check_out_dir(const std::filesystem::path& dir, OutDirUse use);

// Removes the leftovers of interrupted saves in `dir` and `dir`/checkpoints (the
// temporaries listed at the top of this file): those whose process is gone
// (kill(pid, 0) fails with ESRCH), or all of them when `all` (the caller holds the
// run's lock, so no live process of ours writes there). Returns how many it removed.
std::size_t remove_stale_temporaries(const std::filesystem::path& dir, bool all);

// Whether a name in a directory is one of write_file_atomically's temporaries
// (NAME.tmp.PID.N), which check_out_dir also passes over.
bool is_temporary_name(const std::string& name);

// Where `headroom train` writes when not told: root/<task>, or root/<stem of the
// text file>, or the first of root/<name>-2, root/<name>-3, ... that a new run may
// use (missing or empty: check_out_dir accepts it), so an earlier run is never touched.
std::filesystem::path default_out_dir(const TrainConfig& config, const std::filesystem::path& root = "runs");

}  // namespace headroom
