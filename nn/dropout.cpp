#include "nn/dropout.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace headroom {
namespace {

thread_local DropoutSeed* innermost = nullptr;

}  // namespace

template <typename T>
Dropout<T>::Dropout(const DropoutOptions& options) : p_(options.p), rng_(options.seed) {
  if (!(options.p >= 0.0 && options.p < 1.0)) {
    throw std::invalid_argument(fmt::format("Dropout: p must be in [0, 1), got {}", options.p));
  }
}

template <typename T>
Tensor<T> Dropout<T>::forward(const Tensor<T>& x) {
  return dropout(x, p_, rng_, this->is_training());
}

DropoutSeed::DropoutSeed(std::uint64_t seed) : seed_(seed), enclosing_(innermost) { innermost = this; }

DropoutSeed::~DropoutSeed() { innermost = enclosing_; }

Rng* DropoutSeed::generator(std::uint64_t site) {
  if (innermost == nullptr) return nullptr;
  return &innermost->generators_.try_emplace(site, stream_seed(innermost->seed_, site)).first->second;
}

template <typename T>
Tensor<T> site_dropout(const Tensor<T>& x, double p, std::uint64_t site, bool training, const char* who) {
  if (!training || p == 0.0) return x;
  Rng* rng = DropoutSeed::generator(site);
  if (rng == nullptr) {
    throw std::logic_error(fmt::format(
        "{}: dropout {} in training mode draws its masks from a DropoutSeed on this thread, and there is none "
        "(call eval() to evaluate, or make a DropoutSeed to train)",
        who, p));
  }
  return dropout(x, p, *rng, true);
}

template class Dropout<float>;
template class Dropout<double>;
template Tensor<float> site_dropout(const Tensor<float>&, double, std::uint64_t, bool, const char*);
template Tensor<double> site_dropout(const Tensor<double>&, double, std::uint64_t, bool, const char*);

}  // namespace headroom
