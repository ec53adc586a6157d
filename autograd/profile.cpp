#include "autograd/profile.hpp"

#include <algorithm>
#include <stdexcept>

namespace headroom {
namespace {
thread_local OpProfile* t_active = nullptr;
}  // namespace

OpProfile::OpProfile() : last_(Clock::now()), previous_(t_active) {
  if (previous_ != nullptr) {
    throw std::logic_error("OpProfile: this thread already has an active OpProfile; nest none");
  }
  t_active = this;
}

OpProfile::~OpProfile() { t_active = previous_; }

OpProfile* OpProfile::active() { return t_active; }

void OpProfile::lap() { last_ = Clock::now(); }

void OpProfile::add(const std::string& name, bool backward, double ms) {
  OpTiming& t = by_name_[name];
  t.name = name;
  if (backward) {
    t.backward_ms += ms;
    ++t.backward_calls;
  } else {
    t.forward_ms += ms;
    ++t.forward_calls;
  }
}

void OpProfile::op_made(const char* op) {
  const auto now = Clock::now();
  add(op, false, std::chrono::duration<double, std::milli>(now - last_).count());
  last_ = Clock::now();  // the bookkeeping above is not charged to the next op
}

std::vector<OpTiming> OpProfile::timings() const {
  std::vector<OpTiming> out;
  out.reserve(by_name_.size());
  for (const auto& [name, t] : by_name_) out.push_back(t);
  std::stable_sort(out.begin(), out.end(), [](const OpTiming& a, const OpTiming& b) {
    return a.forward_ms + a.backward_ms > b.forward_ms + b.backward_ms;
  });
  return out;
}

void OpProfile::reset() {
  by_name_.clear();
  lap();
}

}  // namespace headroom
