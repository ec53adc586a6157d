#include "cli/interrupt.hpp"

#include <atomic>
#include <csignal>
#include <ctime>
#include <stdexcept>

namespace headroom::cli {
namespace {

std::atomic<int> g_signal{0};             // first signal received, 0 if none
std::atomic<long long> g_first_ns{0};     // CLOCK_MONOTONIC time of the first one
std::atomic<bool> g_installed{false};
struct sigaction g_previous_int {}, g_previous_term{};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<long long>::is_always_lock_free,
              "a signal handler may only touch lock-free atomics");

constexpr long long kGraceNs = 1'000'000'000;

long long monotonic_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);  // async-signal-safe (POSIX)
  return static_cast<long long>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

extern "C" void on_interrupt(int sig) {
  const long long now = monotonic_ns();
  int expected = 0;
  if (g_signal.compare_exchange_strong(expected, sig)) {
    g_first_ns = now;
    return;
  }
  if (now - g_first_ns.load() < kGraceNs) return;  // the same request, delivered twice
  // A real second request: stop now, the way the user asked.
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

InterruptGuard::InterruptGuard() {
  if (g_installed.exchange(true)) throw std::logic_error("InterruptGuard: one at a time per process");
  g_signal = 0;
  g_first_ns = 0;
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, &g_previous_int);
  sigaction(SIGTERM, &action, &g_previous_term);
}

InterruptGuard::~InterruptGuard() {
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
  g_installed = false;
}

bool InterruptGuard::requested() { return g_signal.load() != 0; }
int InterruptGuard::signal_number() { return g_signal.load(); }
int InterruptGuard::exit_status() { return 128 + g_signal.load(); }

}  // namespace headroom::cli
