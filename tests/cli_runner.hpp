// Runs a program (the headroom binary by default) with arguments and captures its exit status and output.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include <doctest/doctest.h>

struct CliResult {
  int status = -1;      // exit status
  std::string output;   // stdout and stderr together
};

inline CliResult run_program(const std::string& program, const std::string& args) {
  const std::string command = program + " " + args + " 2>&1";
  CliResult r;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buffer{};
  std::size_t n = 0;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) r.output.append(buffer.data(), n);
  const int raw = pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

inline CliResult run_headroom(const std::string& args) { return run_program(HEADROOM_BIN, args); }

extern "C" char** environ;

// A headroom process started in the background, its output to a file.
struct Child {
  pid_t pid = -1;
  std::filesystem::path log;
};

inline Child spawn_headroom(const std::string& args, const std::filesystem::path& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  // exec, so that the PID is headroom's own and a SIGKILL reaches it, not a shell
  const std::string command = "exec " + std::string(HEADROOM_BIN) + " " + args;
  const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
  Child c{.pid = -1, .log = log};
  REQUIRE(posix_spawn(&c.pid, "/bin/sh", &actions, nullptr, const_cast<char* const*>(argv), environ) == 0);
  posix_spawn_file_actions_destroy(&actions);
  return c;
}

// The child's exit status, or 128 + the signal that ended it.
inline int wait_for(const Child& c) {
  int status = 0;
  REQUIRE(waitpid(c.pid, &status, 0) == c.pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

inline int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// Runs `headroom args` and checks that it was refused as all bad input is
// (docs/design.md #5): exit status 2 and one line of output, "headroom: error: ..."
// (or "headroom CMD: error: ..." for a flag), which contains `says`.
// Returns the result for the caller's own checks.
inline CliResult check_refused(const std::string& args, const std::string& says) {
  const CliResult r = run_headroom(args);
  INFO("headroom " << args << "\n" << r.output);
  CHECK(r.status == 2);
  CHECK(count_lines(r.output) == 1);
  CHECK(r.output.rfind("headroom", 0) == 0);
  CHECK(r.output.find("error: ") != std::string::npos);
  CHECK(r.output.find(says) != std::string::npos);
  return r;
}
