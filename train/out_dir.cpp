#include "train/out_dir.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <sys/file.h>
#include <system_error>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>

#include "autograd/whole_number.hpp"

namespace headroom {
namespace {

namespace fs = std::filesystem;

bool is_run_entry(const std::string& name) {
  return std::find_if(kRunEntries.begin(), kRunEntries.end(), [&](const char* e) { return name == e; }) !=
         kRunEntries.end();
}

// The PID in a temporary's name: ".step-N.tmp-PID", ".step-N.old-PID",
// ".step-N.pruned-PID" (checkpoints), ".overwritten-PID" (a run --overwrite is
// removing) or "NAME.tmp.PID.N" (write_file_atomically); nothing for any other name.
std::optional<std::uint64_t> temporary_pid(const std::string& name, bool in_checkpoints) {
  if (in_checkpoints) {
    if (name.rfind(".step-", 0) != 0) return std::nullopt;
    for (const std::string_view tag : {".tmp-", ".old-", ".pruned-"}) {
      const std::size_t at = name.rfind(tag);
      if (at != std::string::npos && at > 6) return parse_whole_number(std::string_view(name).substr(at + tag.size()));
    }
    return std::nullopt;
  }
  if (name.starts_with(kOverwrittenPrefix)) {
    return parse_whole_number(std::string_view(name).substr(std::string_view(kOverwrittenPrefix).size()));
  }
  const std::size_t at = name.rfind(".tmp.");
  if (at == std::string::npos || at == 0) return std::nullopt;
  const std::string_view rest = std::string_view(name).substr(at + 5);
  const std::size_t dot = rest.find('.');
  if (dot == std::string_view::npos || !parse_whole_number(rest.substr(dot + 1))) return std::nullopt;
  return parse_whole_number(rest.substr(0, dot));
}

// No process has a PID above pid_t's range, so a name that says so is a leftover too.
bool process_gone(std::uint64_t pid) {
  if (pid > static_cast<std::uint64_t>(std::numeric_limits<pid_t>::max())) return true;
  return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

// A few of a directory's entries, for a message: "a.txt, notes/, ... (12 entries)".
std::string some_entries(const std::vector<std::string>& names) {
  std::string list;
  for (std::size_t i = 0; i < names.size() && i < 4; ++i) list += (i > 0 ? ", " : "") + names[i];
  if (names.size() > 4) list += fmt::format(", ... ({} entries)", names.size());
  return list;
}

struct Contents {
  std::vector<std::string> run;    // the run's own entries present
  std::vector<std::string> other;  // everything else but kKeptEntries
};

Contents contents_of(const fs::path& dir) {
  Contents c;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (is_kept_entry(name) || temporary_pid(name, false)) continue;
    const std::string shown = name + (e.is_directory(ec) ? "/" : "");
    (is_run_entry(name) ? c.run : c.other).push_back(shown);
  }
  if (ec) throw std::invalid_argument(fmt::format("cannot read output directory {}: {}", dir.string(), ec.message()));
  std::sort(c.run.begin(), c.run.end());
  std::sort(c.other.begin(), c.other.end());
  return c;
}

// Why `path` (not followed if a symlink) could not be deleted, or "": its parent
// must let us remove entries, and neither it nor, for a directory, what it holds may
// be immutable or append-only (chattr +i, +a), which no permission overrides.
std::string why_not_removable(const fs::path& path) {
  if (::access(path.parent_path().c_str(), W_OK | X_OK) != 0) {
    return fmt::format("{} cannot be removed from {}: {}", path.filename().string(), path.parent_path().string(),
                       std::strerror(errno));
  }
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(path, ec);
  if (fs::is_symlink(st)) return "";
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    int flags = 0;
    const bool known = ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
    ::close(fd);
    if (known && (flags & (FS_IMMUTABLE_FL | FS_APPEND_FL)) != 0) {
      return fmt::format("{} is {} (chattr)", path.string(), (flags & FS_IMMUTABLE_FL) ? "immutable" : "append-only");
    }
  }
  if (fs::is_directory(st)) {
    for (const fs::directory_entry& e : fs::directory_iterator(path, ec)) {
      if (std::string why = why_not_removable(e.path()); !why.empty()) return why;
    }
    if (ec) return fmt::format("cannot list {}: {}", path.string(), ec.message());
  }
  return "";
}

// --overwrite: the old run's entries are checked, moved together out of sight into
// DIR/.overwritten-PID (one rename each, all undone if one fails), and deleted only
// then, so that a run which cannot be removed whole is refused with every file in
// place, and a kill leaves the old run or the empty directory, never half of it.
// The run entries of `dir`, each checked for removal (why_not_removable).
std::vector<fs::path> removable_run_entries(const fs::path& dir) {
  std::error_code ec;
  std::vector<fs::path> entries;
  for (const char* name : kRunEntries) {
    if (fs::exists(fs::symlink_status(dir / name, ec))) entries.push_back(dir / name);
  }
  for (const fs::path& entry : entries) {
    if (std::string why = why_not_removable(entry); !why.empty()) {
      throw std::invalid_argument(fmt::format("--overwrite: cannot replace the run in {}: {}; nothing was removed",
                                              dir.string(), why));
    }
  }
  return entries;
}

void remove_old_run(const fs::path& dir) {
  std::error_code ec;
  const std::vector<fs::path> entries = removable_run_entries(dir);
  const fs::path trash = dir / fmt::format("{}{}", kOverwrittenPrefix, ::getpid());
  fs::remove_all(trash, ec);
  if (!fs::create_directory(trash, ec) || ec) {
    throw std::invalid_argument(
        fmt::format("--overwrite: cannot create {}: {}; nothing was removed", trash.string(), ec.message()));
  }
  std::vector<fs::path> moved;
  for (const fs::path& entry : entries) {
    fs::rename(entry, trash / entry.filename(), ec);
    if (ec) {
      const std::string why = ec.message();
      for (const fs::path& back : moved) fs::rename(trash / back.filename(), back, ec);
      fs::remove(trash, ec);
      throw std::invalid_argument(
          fmt::format("--overwrite: cannot move {} aside: {}; nothing was removed", entry.string(), why));
    }
    moved.push_back(entry);
  }
  fs::remove_all(trash, ec);
  if (ec) {
    throw std::invalid_argument(fmt::format("--overwrite: the old run is out of the way in {}, but deleting it failed: "
                                            "{}; delete it yourself",
                                            trash.string(), ec.message()));
  }
}

}  // namespace

bool check_out_dir(const fs::path& dir, OutDirUse use) {
  if (dir.empty()) throw std::invalid_argument("output directory: the path is empty");
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  if (!fs::exists(status)) {
    if (use == OutDirUse::resume) throw std::invalid_argument(fmt::format("{}: no such directory to resume", dir.string()));
    return false;
  }
  if (!fs::is_directory(status)) throw std::invalid_argument(fmt::format("output directory {} is not a directory", dir.string()));
  const Contents c = contents_of(dir);
  if (use == OutDirUse::resume) return true;
  // A run is what has a config.json or checkpoints/; other entries beside them are
  // the user's, and stay.
  const bool is_run = std::any_of(c.run.begin(), c.run.end(),
                                  [](const std::string& e) { return e == "config.json" || e == "checkpoints/"; });
  if (!is_run && (!c.other.empty() || !c.run.empty())) {
    std::vector<std::string> all = c.run;
    all.insert(all.end(), c.other.begin(), c.other.end());
    std::sort(all.begin(), all.end());
    throw std::invalid_argument(fmt::format("output directory {} is not empty and is not a headroom run ({}); choose another --out, or "
                    "empty it",
                    dir.string(), some_entries(all)));
  }
  if (is_run && use == OutDirUse::fresh) {
    throw std::invalid_argument(fmt::format("output directory {} already holds a run ({}); continue it with --resume {}, or replace it "
                    "with --overwrite",
                    dir.string(), some_entries(c.run), dir.string()));
  }
  if (is_run && use == OutDirUse::overwrite) (void)removable_run_entries(dir);
  return is_run;
}

RunDirLock::RunDirLock(RunDirLock&& other) noexcept : fd_(other.fd_), previous_(std::move(other.previous_)) {
  other.fd_ = -1;
}

RunDirLock& RunDirLock::operator=(RunDirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    previous_ = std::move(other.previous_);
    other.fd_ = -1;
  }
  return *this;
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

namespace {

enum class LockWait { no, yes };

// "PID on HOST" of this process.
std::string holder_text() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return fmt::format("{} on {}", ::getpid(), host[0] != '\0' ? host : "an unknown host");
}

// The lock file's text, as far as it goes: "PID on HOST", and a second line when the
// holder marked the directory (RunDirLock::mark).
std::string lock_text(int fd) {
  char text[512] = {};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  return n > 0 ? std::string(text, static_cast<std::size_t>(n)) : std::string();
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// The lock's descriptor, or -1 when another process holds it and `wait` is no. `text`
// gets the file's text: the holder's when it is held elsewhere, else the previous one's.
int lock_fd(const fs::path& dir, LockWait wait, std::string* text) {
  const fs::path file = dir / kLockFile;
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) throw std::invalid_argument(fmt::format("cannot create lock file {}: {}", file.string(), std::strerror(errno)));
  int rc;
  do {
    rc = ::flock(fd, LOCK_EX | (wait == LockWait::no ? LOCK_NB : 0));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    if (text != nullptr) *text = lock_text(fd);
    ::close(fd);
    if (err == EWOULDBLOCK) return -1;
    throw std::invalid_argument(fmt::format("cannot lock {}: {}", file.string(), std::strerror(err)));
  }
  // Read under the lock, so on NFS too it is what the last holder wrote (taking a
  // lock revalidates the client's cache of that file).
  const std::string before = lock_text(fd);
  if (text != nullptr) *text = before;
  // The holder, for the message of the next one, and the mark kept; a failure here
  // costs only the message.
  const std::size_t newline = before.find('\n');
  const std::string me = holder_text() + (newline == std::string::npos ? std::string() : before.substr(newline));
  if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, me.data(), me.size(), 0);
  return fd;
}

}  // namespace

RunDirLock RunDirLock::acquire(const fs::path& dir) {
  std::string text;
  RunDirLock lock;
  lock.fd_ = lock_fd(dir, LockWait::no, &text);
  if (!lock.held()) {
    const std::string holder = first_line(text);
    throw std::invalid_argument(fmt::format("output directory {} is in use by another headroom process{}; wait for it, or choose "
                    "another --out",
                    dir.string(), holder.empty() ? "" : fmt::format(" (pid {})", holder)));
  }
  lock.previous_ = text.find('\n') == std::string::npos ? std::string() : text.substr(text.find('\n') + 1);
  return lock;
}

RunDirLock RunDirLock::try_acquire(const fs::path& dir) {
  std::string text;
  RunDirLock lock;
  lock.fd_ = lock_fd(dir, LockWait::no, &text);
  if (lock.held() && text.find('\n') != std::string::npos) lock.previous_ = text.substr(text.find('\n') + 1);
  return lock;
}

RunDirLock RunDirLock::wait(const fs::path& dir) {
  std::string text;
  RunDirLock lock;
  lock.fd_ = lock_fd(dir, LockWait::yes, &text);
  if (text.find('\n') != std::string::npos) lock.previous_ = text.substr(text.find('\n') + 1);
  return lock;
}

void RunDirLock::mark(const std::string& state) {
  if (fd_ < 0) return;
  const std::string text = holder_text() + "\n" + state;
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    throw std::runtime_error(fmt::format("cannot write the lock file: {}", std::strerror(errno)));
  }
}

RunDirLock open_out_dir(const fs::path& dir, OutDirUse use, bool locked) {
  const bool has_run = check_out_dir(dir, use);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::invalid_argument(fmt::format("cannot create output directory {}: {}", dir.string(), ec.message()));
  RunDirLock lock = locked ? RunDirLock() : RunDirLock::acquire(dir);
  if (has_run && use == OutDirUse::overwrite) remove_old_run(dir);
  remove_stale_temporaries(dir, true);
  return lock;
}

std::size_t remove_stale_temporaries(const fs::path& dir, bool all) {
  std::size_t removed = 0;
  for (const bool in_checkpoints : {false, true}) {
    const fs::path where = in_checkpoints ? dir / "checkpoints" : dir;
    std::error_code ec;
    if (!fs::is_directory(where, ec)) continue;
    std::vector<fs::path> stale;
    for (const fs::directory_entry& e : fs::directory_iterator(where, ec)) {
      const std::optional<long> pid = temporary_pid(e.path().filename().string(), in_checkpoints);
      if (pid && (all || process_gone(*pid))) stale.push_back(e.path());
    }
    for (const fs::path& p : stale) {
      if (fs::remove_all(p, ec) > 0 && !ec) ++removed;
    }
  }
  return removed;
}

bool is_kept_entry(const std::string& name) {
  return std::find_if(kKeptEntries.begin(), kKeptEntries.end(), [&](const char* e) { return name == e; }) !=
         kKeptEntries.end();
}

bool is_temporary_name(const std::string& name) { return temporary_pid(name, false).has_value(); }

fs::path default_out_dir(const TrainConfig& config, const fs::path& root) {
  const DataConfig& d = config.data;
  const std::string name = !d.text.empty()       ? fs::path(d.text).stem().string()
                           : !d.corpus.empty()   ? d.corpus
                           : !d.labelled.empty() ? fs::path(d.labelled).stem().string()
                                                 : d.task;
  auto usable = [](const fs::path& p) {  // what --out would accept for a new run
    try {
      return !check_out_dir(p, OutDirUse::fresh);
    } catch (const std::invalid_argument&) {
      return false;
    }
  };
  const fs::path first = root / (name.empty() ? std::string("run") : name);
  if (usable(first)) return first;
  for (std::size_t i = 2;; ++i) {
    const fs::path next = fs::path(first.string() + fmt::format("-{}", i));
    if (usable(next)) return next;
  }
}

}  // namespace headroom
