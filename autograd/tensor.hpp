// The tensor handle, the tape and reverse-mode differentiation.
//
// A Tensor<T> is a cheap handle (a shared_ptr) to a Node that holds an evaluated
// value and, after backward, a gradient of the same shape. Every op whose inputs
// require grad appends one TapeEntry to a thread-local Wengert list in execution
// order, which is already a topological order; backward() walks that list in
// reverse (no recursion, so depth never threatens the stack) and then clears it.
// Each op's forward and backward live side by side in ops_*.cpp.
//
// T is float (training) or double (gradient checks); both are instantiated
// explicitly in tensor.cpp and the op files, so this header stays light.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <stdexcept>
#include <vector>

#include "autograd/xtensor_setup.hpp"  // first: checks the container settings
#include <xtensor/xarray.hpp>

#include "autograd/shape.hpp"

namespace headroom {

template <typename T>
struct Node {
  xt::xarray<T> value;
  xt::xarray<T> grad;  // same shape as value once has_grad; empty before
  bool has_grad = false;
  bool requires_grad = false;
  bool is_leaf = true;       // made by the user, not by an op; keeps its grad
  bool on_tape = false;      // an op's output whose tape entry has not been cleared yet
  const char* op = "leaf";  // the op that produced value (a string literal)
};

struct BackwardOptions {
  // Keep the tape after backward so the same graph can be differentiated again
  // (gradients then accumulate into the leaves, as in PyTorch's retain_graph).
  bool keep_tape = false;
};

template <typename T>
class Tensor {
 public:
  using value_type = T;

  Tensor() = default;  // an undefined handle; defined() is false
  explicit Tensor(xt::xarray<T> value, bool requires_grad = false);
  static Tensor from_node(std::shared_ptr<Node<T>> node);

  bool defined() const { return node_ != nullptr; }
  const xt::xarray<T>& value() const { return node_->value; }
  // In-place edits (optimizer steps, finite differences) are not recorded on the
  // tape; do them outside a forward pass whose tape you still mean to walk.
  xt::xarray<T>& mutable_value() { return node_->value; }
  const Shape& shape() const { return node_->value.shape(); }
  std::size_t ndim() const { return node_->value.dimension(); }
  std::size_t size() const { return node_->value.size(); }
  // The single value of a one-element tensor; throws otherwise.
  T item() const;

  bool requires_grad() const { return node_->requires_grad; }
  // Only leaves may change this; an op's output requires grad iff an input does.
  Tensor& set_requires_grad(bool on = true);
  bool is_leaf() const { return node_->is_leaf; }
  const char* op() const { return node_->op; }

  bool has_grad() const { return node_->has_grad; }
  // Throws if no backward pass has reached this tensor since the last zero_grad.
  const xt::xarray<T>& grad() const;
  // For in-place edits of the gradient (clipping); throws as grad() does.
  xt::xarray<T>& mutable_grad();
  void zero_grad();
  // A new leaf sharing nothing with the tape: same value, no grad, no history.
  Tensor detach() const;

  // Reverse-mode differentiation from this tensor. Without an upstream gradient
  // the tensor must hold a single element (a loss); otherwise `upstream` must have
  // exactly this tensor's shape.
  void backward(BackwardOptions options = {}) const;
  void backward(const xt::xarray<T>& upstream, BackwardOptions options = {}) const;

  const std::shared_ptr<Node<T>>& node() const { return node_; }

 private:
  std::shared_ptr<Node<T>> node_;
};

// ---- grad mode ---------------------------------------------------------------

// Whether ops on this thread record onto the tape.
bool grad_enabled();

// RAII: no op records onto this thread's tape while a NoGrad is alive.
class NoGrad {
 public:
  NoGrad();
  ~NoGrad();
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  bool previous_;
};

// ---- anomaly mode --------------------------------------------------------------

// Raised in anomaly mode when an op's forward or backward produced NaN or Inf.
class AnomalyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

bool anomaly_enabled();
void set_anomaly_enabled(bool on);

// RAII: anomaly mode on for this thread while alive. In anomaly mode every op checks
// its output, and every backward step the gradients it produced; the first op that
// makes a NaN or Inf out of finite inputs (masked_fill's fill excepted) throws
// AnomalyError naming the op, its input and output shapes, and the first bad index.
class DetectAnomaly {
 public:
  DetectAnomaly();
  ~DetectAnomaly();
  DetectAnomaly(const DetectAnomaly&) = delete;
  DetectAnomaly& operator=(const DetectAnomaly&) = delete;

 private:
  bool previous_;
};

// ---- the tape ------------------------------------------------------------------

template <typename T>
struct TapeEntry {
  const char* op;
  std::vector<std::shared_ptr<Node<T>>> inputs;
  std::shared_ptr<Node<T>> output;
  // Pushes grad_out (the gradient of the output, shaped like out) into the inputs
  // through accumulate_grad. It receives the output value so that ops whose
  // backward needs it (exp, softmax, tanh) need not keep a copy.
  std::function<void(const xt::xarray<T>& grad_out, const xt::xarray<T>& out)> backward;
};

// Number of entries on this thread's tape (for tests and diagnostics).
template <typename T>
std::size_t tape_size();

// Drops every entry on this thread's tape without differentiating.
template <typename T>
void clear_tape();

// The one place gradients enter a node (docs/design.md #3). `grad` must have the node's
// shape or broadcast to it: broadcast axes are summed back to the node's shape.
// Any other shape is a ShapeError naming the op and both shapes. Nodes that do not
// require grad are skipped; a leaf's gradient goes to the LeafGradients active on
// this thread, when one is.
template <typename T>
void accumulate_grad(Node<T>& node, const xt::xarray<T>& grad, const char* op);
template <typename T>
void accumulate_grad(Node<T>& node, xt::xarray<T>&& grad, const char* op);

// Gradients for leaves, collected apart from the leaves themselves. A data-parallel
// step (train/step.cpp, docs/design.md#threads) runs each shard of the batch forward
// and backward on its own thread, with its own tape, through the same parameters;
// every shard but the first collects the gradients that reach the parameters here,
// so that no two threads write the same grad, and the step then adds each
// collection into the leaves, in shard order: the same sums whichever thread ran
// which shard.
template <typename T>
class LeafGradients {
 public:
  // Runs f() on this thread with every gradient that accumulate_grad sends to a leaf
  // going into this collection instead (non-leaves are untouched). The leaves must
  // outlive the collection.
  template <typename F>
  void collect(F&& f) {
    struct Scope {
      LeafGradients* previous;
      explicit Scope(LeafGradients* now) : previous(swap_active(now)) {}
      ~Scope() { swap_active(previous); }
    } scope(this);
    f();
  }
  // Adds each collected gradient into its leaf's grad (a leaf without one takes it
  // as it is), in the order the leaves were first reached, and empties the
  // collection. Uses this thread's parallel_for.
  void add_to_leaves();
  std::size_t size() const { return grads_.size(); }
  bool empty() const { return grads_.empty(); }

  // accumulate_grad's entry while this collection is active on the thread: `grad`
  // (an xt::xarray<T>, copied or moved) has the leaf's shape or broadcasts to it, as
  // there, and is summed the same way.
  template <typename G>
  void add(Node<T>& leaf, G&& grad, const char* op);
  // The gradient collected for `leaf`, or nullptr.
  xt::xarray<T>* find(const Node<T>& leaf);
  // The collection active on this thread, or nullptr.
  static LeafGradients* active();

 private:
  static LeafGradients* swap_active(LeafGradients* now);

  std::vector<std::pair<Node<T>*, xt::xarray<T>>> grads_;  // few: a model's parameters
};

// Sums `grad` over the axes along which `shape` was broadcast to grad's shape.
template <typename T>
xt::xarray<T> sum_to_shape(const xt::xarray<T>& grad, const Shape& shape, const char* op);

// Wraps an op's evaluated output in a tensor and, when grad mode is on and an
// input requires grad, records `backward` on the tape. Every op goes through here.
template <typename T>
Tensor<T> make_result(const char* op, xt::xarray<T>&& value,
                      std::vector<std::shared_ptr<Node<T>>> inputs,
                      std::function<void(const xt::xarray<T>&, const xt::xarray<T>&)> backward);

}  // namespace headroom
