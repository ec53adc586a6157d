// Activation patching and attribution patching (docs/design.md #22), on the forward
// hooks of nn/hooks.hpp only.
//
// Legend: N = pairs, T = time, L = layers, H = heads, C = d_model, V = vocab.
//
// A pair is a clean and a corrupted input of the same length whose answers differ
// (data/task.hpp, PatchPair). The metric is the logit difference at the answer's
// position, averaged over the pairs:
//
//   LD = mean over pairs of  logit[clean answer] - logit[corrupted answer]
//
// Exact patching runs the clean input once, caching every activation, then runs the
// corrupted input with one site's activation replaced by the clean one, and reports
//
//   recovered = (LD_patched - LD_corrupted) / (LD_clean - LD_corrupted)
//
// (1: the site carries everything that the corruption changed; 0: nothing). The
// sites are (a) head h of layer l: its slice of head_out (after the head gate,
// before W_O), at every position; (b) the residual stream resid_pre of layer l, or
// the final stream (the unembedding's input, row L), at one position; (c) head h's
// attention pattern, at every query.
//
// Attribution patching (Nanda, "Attribution Patching: Activation Patching At
// Industrial Scale", 2023) replaces each patched run by a first-order Taylor step:
// one backward from LD at the corrupted run gives g = dLD/da for every activation
// a, and LD_patched - LD_corrupted ~ (a_clean - a_corrupted) . g, summed over the
// site's slice. Exact when LD is linear in a along that segment; the report gives
// the Pearson correlation and the largest difference between the two.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "autograd/xtensor_setup.hpp"  // first: checks the container settings
#include "data/task.hpp"
#include "nn/hooks.hpp"
#include "nn/transformer.hpp"

namespace headroom {

// Pairs as the model reads them: every row of the same length T.
struct PatchBatch {
  IndexArray clean{};                   // (N, T)
  IndexArray corrupted{};               // (N, T)
  std::vector<std::size_t> position{};  // (N) the input position whose next-token logits are read
  std::vector<Index> answer{};          // (N) the clean answer id
  std::vector<Index> wrong{};           // (N) the corrupted answer id
};

// Task pairs as a batch: each row's first T tokens (the model's inputs). Throws
// std::invalid_argument when pairs is empty or their rows differ in length.
PatchBatch patch_batch(const std::vector<PatchPair>& pairs);

// Every activation of one run, by (point, layer) as the hooks name them.
template <typename T>
using ActivationCache = std::map<std::pair<HookPoint, std::size_t>, xt::xarray<T>>;

// One slice of one activation: with head, index `head` of the head axis (head_out
// (N, T, H, d_v): axis 2; pattern (N, H, T, T): axis 1); with position, index
// `position` of the time axis (axis 1 of a (N, T, C) stream); with neither, all of it.
struct PatchSite {
  HookPoint point = HookPoint::resid_pre;
  std::size_t layer = 0;
  std::optional<std::size_t> head{};
  std::optional<std::size_t> position{};
};

// Runs tokens (N, T) under NoGrad and caches every hook point's value (pattern too
// when with_pattern; attention then runs its composed form). logits (N, T, V), when
// given, receives the output.
template <typename T>
ActivationCache<T> run_with_cache(TransformerLM<T>& model, const IndexArray& tokens, bool with_pattern,
                                  xt::xarray<T>* logits = nullptr);

// The logits (N, T, V) of tokens with each site's slice replaced by source's value
// there (source: e.g. the clean run's cache), under NoGrad. Throws
// std::invalid_argument naming the site when source lacks it or a head or position
// is out of range.
template <typename T>
xt::xarray<T> run_patched(TransformerLM<T>& model, const IndexArray& tokens, const std::vector<PatchSite>& sites,
                          const ActivationCache<T>& source);

// LD of the logits (N, T, V) of batch's rows.
template <typename T>
double logit_difference(const xt::xarray<T>& logits, const PatchBatch& batch);

// dLD / da at the corrupted run for every hook point's value a (pattern too when
// with_pattern): one forward and one backward, each hook returning a + delta for a
// zero leaf delta. Leaves the model's gradients zero.
template <typename T>
ActivationCache<T> logit_difference_gradients(TransformerLM<T>& model, const PatchBatch& batch, bool with_pattern);

struct PatchOptions {
  bool heads = true;    // (a) head_out per head
  bool resid = true;    // (b) resid_pre / final per (layer, position)
  bool pattern = true;  // (c) the attention pattern per head
  // Called after each patched run with (done, total), for a progress line.
  std::function<void(std::size_t done, std::size_t total)> progress{};
};

// One kind of site as a rows x cols grid, row-major.
struct PatchGrid {
  std::size_t rows = 0, cols = 0;
  std::vector<double> exact{};      // the recovered fraction of each site's exact patch
  std::vector<double> attribution{};  // the attribution estimate of the same, as a fraction
  double pearson = 0;               // over the sites; NaN when either side is constant
  double max_abs_diff = 0;          // max |exact - attribution|
  bool empty() const { return exact.empty(); }
};

struct PatchReport {
  std::size_t pairs = 0, positions = 0;  // N, T
  double ld_clean = 0, ld_corrupted = 0;
  PatchGrid heads{};    // L x H
  PatchGrid resid{};    // (L + 1) x T: row l < L resid_pre of layer l, row L the final stream
  PatchGrid pattern{};  // L x H
};

// Every site the options ask for, exactly and by attribution. Puts the model in eval
// mode; leaves its gradients zero. Fractions are NaN when LD_clean = LD_corrupted.
template <typename T>
PatchReport patch_activations(TransformerLM<T>& model, const PatchBatch& batch, const PatchOptions& options);

// Pearson's r of two equally long series (NaN when either is constant or has fewer
// than two finite pairs; entries where either is NaN are skipped).
double pearson(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace headroom
