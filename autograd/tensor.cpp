#include "autograd/tensor.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <xtensor/xbuilder.hpp>

#include "autograd/parallel.hpp"
#include "autograd/profile.hpp"

namespace headroom {
namespace {

thread_local bool t_grad_enabled = true;
thread_local bool t_anomaly_enabled = false;

template <typename T>
std::vector<TapeEntry<T>>& tape() {
  thread_local std::vector<TapeEntry<T>> entries;
  return entries;
}

void require_defined(const void* node, const char* what) {
  if (node == nullptr) {
    throw std::invalid_argument(fmt::format("Tensor::{}: the tensor is undefined", what));
  }
}

// Index (as a multi-index string) of the first non-finite element, or "" if none.
template <typename T>
std::string first_non_finite(const xt::xarray<T>& a) {
  const T* p = a.data();
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(p[i])) {
      // NaN's sign bit depends on the operation and the machine: print it plainly.
      return fmt::format("{} at index {}", std::isnan(p[i]) ? std::string("nan") : fmt::format("{}", p[i]),
                         format_shape(unravel_index(i, a.shape())));
    }
  }
  return "";
}

// Anomaly mode's forward check: the first op whose output holds a NaN or Inf while
// all of its inputs are finite is where the trouble started; name it. masked_fill
// is exempt: its -inf is the caller's mask, which softmax turns into zeros.
template <typename T>
void check_forward(const char* op, const xt::xarray<T>& value, const std::vector<std::shared_ptr<Node<T>>>& inputs) {
  if (std::string_view(op) == "masked_fill") return;
  const std::string bad = first_non_finite(value);
  if (bad.empty()) return;
  std::string shapes;
  for (const auto& in : inputs) {
    if (!first_non_finite(in->value).empty()) return;  // inherited, not produced here
    shapes += (shapes.empty() ? "" : ", ") + format_shape(in->value.shape());
  }
  throw AnomalyError(fmt::format("anomaly: forward of '{}' (inputs [{}]) produced a non-finite value from finite "
                                 "inputs: {}",
                                 op, shapes, bad));
}

// Drops every entry, marking their outputs as no longer differentiable through.
template <typename T>
void drop_entries(std::vector<TapeEntry<T>>& entries) {
  for (auto& e : entries) {
    if (e.output) e.output->on_tape = false;
  }
  entries.clear();
}

// A non-leaf that requires grad but is no longer on the tape: its history was
// consumed by an earlier backward(), so gradients would silently stop here.
template <typename T>
void require_history(const Node<T>& node, const char* consumer) {
  if (node.requires_grad && !node.is_leaf && !node.on_tape) {
    throw std::invalid_argument(fmt::format(
        "backward: {} a tensor made by '{}' (shape {}) whose tape entry an earlier backward() "
        "already cleared, so no gradient could flow past it; pass BackwardOptions{{.keep_tape = "
        "true}} to the earlier backward() or recompute the tensor",
        consumer, node.op, format_shape(node.value.shape())));
  }
}

}  // namespace

// ---- Tensor ------------------------------------------------------------------

template <typename T>
Tensor<T>::Tensor(xt::xarray<T> value, bool requires_grad) : node_(std::make_shared<Node<T>>()) {
  node_->value = std::move(value);
  node_->requires_grad = requires_grad;
}

template <typename T>
Tensor<T> Tensor<T>::from_node(std::shared_ptr<Node<T>> node) {
  Tensor t;
  t.node_ = std::move(node);
  return t;
}

template <typename T>
T Tensor<T>::item() const {
  require_defined(node_.get(), "item");
  if (node_->value.size() != 1) {
    throw ShapeError(fmt::format("Tensor::item: expected one element, got shape {}",
                                 format_shape(shape())));
  }
  return node_->value.data()[0];
}

template <typename T>
Tensor<T>& Tensor<T>::set_requires_grad(bool on) {
  require_defined(node_.get(), "set_requires_grad");
  if (!node_->is_leaf) {
    throw std::invalid_argument(fmt::format(
        "Tensor::set_requires_grad: only leaves can change requires_grad; this tensor is the "
        "output of '{}' (detach() it first)",
        node_->op));
  }
  node_->requires_grad = on;
  return *this;
}

template <typename T>
const xt::xarray<T>& Tensor<T>::grad() const {
  require_defined(node_.get(), "grad");
  if (!node_->has_grad) {
    throw std::invalid_argument(fmt::format(
        "Tensor::grad: no gradient for this tensor (op '{}', shape {}, requires_grad={}); "
        "only leaves keep gradients, and only after a backward pass that reaches them",
        node_->op, format_shape(shape()), node_->requires_grad));
  }
  return node_->grad;
}

template <typename T>
xt::xarray<T>& Tensor<T>::mutable_grad() {
  (void)grad();  // the same checks and message
  return node_->grad;
}

template <typename T>
void Tensor<T>::zero_grad() {
  require_defined(node_.get(), "zero_grad");
  node_->has_grad = false;
  node_->grad = xt::xarray<T>();
}

template <typename T>
Tensor<T> Tensor<T>::detach() const {
  require_defined(node_.get(), "detach");
  return Tensor(node_->value, false);
}

template <typename T>
void Tensor<T>::backward(BackwardOptions options) const {
  require_defined(node_.get(), "backward");
  if (node_->value.size() != 1) {
    throw ShapeError(fmt::format(
        "backward: the tensor has shape {} (op '{}'); backward() without an upstream gradient "
        "needs a single-element tensor such as a loss; pass an upstream gradient of shape {}",
        format_shape(shape()), node_->op, format_shape(shape())));
  }
  xt::xarray<T> seed = xt::ones<T>(shape());
  backward(seed, options);
}

template <typename T>
void Tensor<T>::backward(const xt::xarray<T>& upstream, BackwardOptions options) const {
  require_defined(node_.get(), "backward");
  if (!node_->requires_grad) {
    throw std::invalid_argument(fmt::format(
        "backward: the tensor (op '{}', shape {}) does not require grad; no input of the "
        "computation that made it requires grad, or it was made under NoGrad",
        node_->op, format_shape(shape())));
  }
  if (Shape(upstream.shape()) != shape()) {
    throw ShapeError(fmt::format("backward: upstream gradient has shape {} but the tensor has {}",
                                 format_shape(upstream.shape()), format_shape(shape())));
  }
  auto& entries = tape<T>();
  // On any exit, intermediate gradients are released (they belong to this pass
  // only: a second pass over a kept tape must start from zero) and the tape is
  // cleared unless the caller keeps it.
  struct Cleanup {
    std::vector<TapeEntry<T>>& entries;
    bool keep;
    ~Cleanup() {
      for (auto& e : entries) {
        if (e.output && !e.output->is_leaf) {
          e.output->has_grad = false;
          e.output->grad = xt::xarray<T>();
        }
      }
      if (!keep) drop_entries(entries);
    }
  } cleanup{entries, options.keep_tape};

  require_history(*node_, "called on");
  accumulate_grad(*node_, upstream, "backward");
  const bool check = t_anomaly_enabled;
  for (std::size_t i = entries.size(); i-- > 0;) {
    TapeEntry<T>& e = entries[i];
    Node<T>& out = *e.output;
    if (!out.has_grad) continue;  // not on a path from this tensor
    for (const auto& in : e.inputs) require_history(*in, fmt::format("'{}' uses", e.op).c_str());
    if (OpProfile* profile = OpProfile::active()) {
      const auto t0 = OpProfile::Clock::now();
      e.backward(out.grad, out.value);
      profile->add(e.op, true, std::chrono::duration<double, std::milli>(OpProfile::Clock::now() - t0).count());
    } else {
      e.backward(out.grad, out.value);
    }
    if (check) {
      for (std::size_t k = 0; k < e.inputs.size(); ++k) {
        const Node<T>& in = *e.inputs[k];
        // A leaf's gradient is in the collection active on this thread, if any: the
        // leaf's own grad may be another thread's to write.
        LeafGradients<T>* collected = in.is_leaf ? LeafGradients<T>::active() : nullptr;
        const xt::xarray<T>* grad = collected ? collected->find(in) : (in.has_grad ? &in.grad : nullptr);
        if (grad == nullptr) continue;
        const std::string bad = first_non_finite(*grad);
        if (bad.empty()) continue;
        std::string shapes;
        for (const auto& other : e.inputs) {
          shapes += (shapes.empty() ? "" : ", ") + format_shape(other->value.shape());
        }
        throw AnomalyError(fmt::format(
            "anomaly: backward of '{}' (inputs [{}]; output {}) produced a non-finite gradient "
            "for input {} of shape {}: {}",
            e.op, shapes, format_shape(out.value.shape()), k, format_shape(in.value.shape()),
            bad));
      }
    }
    if (!out.is_leaf) {
      out.has_grad = false;
      out.grad = xt::xarray<T>();
    }
    if (!options.keep_tape) {
      // Nothing later in this walk needs the entry (its output's consumers came
      // first), so what it saved for backward and its hold on its inputs and output
      // go now rather than at the end: a step's peak memory then stops growing
      // with the parameter gradients it accumulates.
      out.on_tape = false;
      e = TapeEntry<T>{};
    }
  }
}

// ---- modes ---------------------------------------------------------------------

bool grad_enabled() { return t_grad_enabled; }
NoGrad::NoGrad() : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGrad::~NoGrad() { t_grad_enabled = previous_; }

bool anomaly_enabled() { return t_anomaly_enabled; }
void set_anomaly_enabled(bool on) { t_anomaly_enabled = on; }
DetectAnomaly::DetectAnomaly() : previous_(t_anomaly_enabled) { t_anomaly_enabled = true; }
DetectAnomaly::~DetectAnomaly() { t_anomaly_enabled = previous_; }

// ---- tape ----------------------------------------------------------------------

template <typename T>
std::size_t tape_size() {
  return tape<T>().size();
}

template <typename T>
void clear_tape() {
  drop_entries(tape<T>());
}

template <typename T>
xt::xarray<T> sum_to_shape(const xt::xarray<T>& grad, const Shape& shape, const char* op) {
  const Shape& gshape = grad.shape();
  if (!broadcasts_to(shape, gshape)) {
    throw ShapeError(fmt::format("{}: gradient of shape {} cannot be accumulated into a tensor "
                                 "of shape {}",
                                 op, format_shape(gshape), format_shape(shape)));
  }
  // Each element of grad adds into the output element whose index is its own,
  // with broadcast axes (missing or extent 1 in `shape`) pinned to 0. We walk grad
  // in row-major order with an odometer; the innermost axis is a tight loop.
  // (A plain loop on purpose: xtensor 0.24's lazy reducers are a known hazard.)
  const std::size_t nd = gshape.size();
  const std::size_t lead = nd - shape.size();
  std::vector<std::size_t> out_stride(nd, 0);
  for (std::size_t i = nd, s = 1; i-- > lead;) {
    const std::size_t extent = shape[i - lead];
    out_stride[i] = extent == 1 ? 0 : s;
    s *= extent;
  }
  xt::xarray<T> out = xt::zeros<T>(shape);
  if (grad.size() == 0) return out;
  if (nd == 0) {
    out.data()[0] = grad.data()[0];
    return out;
  }
  const T* src = grad.data();
  T* dst = out.data();
  const std::size_t inner = gshape[nd - 1];
  const std::size_t inner_stride = out_stride[nd - 1];
  std::vector<std::size_t> idx(nd, 0);
  std::size_t base = 0;  // output offset of idx with the innermost axis at 0
  for (std::size_t done = 0; done < grad.size(); done += inner) {
    if (inner_stride == 0) {
      T acc = 0;
      for (std::size_t j = 0; j < inner; ++j) acc += src[done + j];
      dst[base] += acc;
    } else {
      for (std::size_t j = 0; j < inner; ++j) dst[base + j] += src[done + j];
    }
    for (std::size_t d = nd - 1; d-- > 0;) {  // advance the outer axes
      base += out_stride[d];
      if (++idx[d] < gshape[d]) break;
      base -= out_stride[d] * gshape[d];
      idx[d] = 0;
    }
  }
  return out;
}

// ---- accumulation ------------------------------------------------------------------

namespace {

// Adds `grad` (the shape of a tensor of `shape`, or broadcasting to it) into `dst`,
// or makes it `dst` when `has` is false: the sum behind accumulate_grad, for a
// node's own gradient and for a LeafGradients entry alike.
template <typename T>
void add_grad(xt::xarray<T>& dst, bool& has, const Shape& shape, const xt::xarray<T>& grad, const char* op) {
  const bool same = Shape(grad.shape()) == shape;
  if (!has) {
    if (same) {  // a copy, in parallel for the large activations of a residual stream
      dst = xt::empty<T>(grad.shape());
      const T* src = grad.data();
      T* out = dst.data();
      parallel_for(grad.size(), kMinChunkElements, [&](std::size_t begin, std::size_t end) {
        std::copy(src + begin, src + end, out + begin);
      });
    } else {
      dst = sum_to_shape(grad, shape, op);
    }
    has = true;
    return;
  }
  T* out = dst.data();
  if (same) {
    const T* src = grad.data();
    parallel_for(dst.size(), kMinChunkElements, [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) out[i] += src[i];
    });
  } else {
    const xt::xarray<T> reduced = sum_to_shape(grad, shape, op);
    const T* src = reduced.data();
    for (std::size_t i = 0, n = dst.size(); i < n; ++i) out[i] += src[i];
  }
}

template <typename T>
void add_grad(xt::xarray<T>& dst, bool& has, const Shape& shape, xt::xarray<T>&& grad, const char* op) {
  if (!has && Shape(grad.shape()) == shape) {
    dst = std::move(grad);
    has = true;
    return;
  }
  add_grad(dst, has, shape, static_cast<const xt::xarray<T>&>(grad), op);
}

template <typename T>
LeafGradients<T>*& active_leaf_gradients() {
  thread_local LeafGradients<T>* active = nullptr;
  return active;
}

}  // namespace

// ---- leaf gradients collected apart --------------------------------------------

template <typename T>
LeafGradients<T>* LeafGradients<T>::active() {
  return active_leaf_gradients<T>();
}

template <typename T>
LeafGradients<T>* LeafGradients<T>::swap_active(LeafGradients* now) {
  return std::exchange(active_leaf_gradients<T>(), now);
}

template <typename T>
xt::xarray<T>* LeafGradients<T>::find(const Node<T>& leaf) {
  for (auto& [node, grad] : grads_) {
    if (node == &leaf) return &grad;
  }
  return nullptr;
}

template <typename T>
template <typename G>
void LeafGradients<T>::add(Node<T>& leaf, G&& grad, const char* op) {
  xt::xarray<T>* held = find(leaf);
  bool has = held != nullptr;
  if (!has) held = &grads_.emplace_back(&leaf, xt::xarray<T>()).second;
  add_grad(*held, has, leaf.value.shape(), std::forward<G>(grad), op);
}

template <typename T>
void LeafGradients<T>::add_to_leaves() {
  for (auto& [leaf, grad] : grads_) {
    add_grad(leaf->grad, leaf->has_grad, leaf->value.shape(), std::move(grad), "LeafGradients");
  }
  grads_.clear();
}

template <typename T>
void accumulate_grad(Node<T>& node, const xt::xarray<T>& grad, const char* op) {
  if (!node.requires_grad) return;
  LeafGradients<T>* collected = node.is_leaf ? LeafGradients<T>::active() : nullptr;
  if (collected) {
    collected->add(node, grad, op);
  } else {
    add_grad(node.grad, node.has_grad, node.value.shape(), grad, op);
  }
}

template <typename T>
void accumulate_grad(Node<T>& node, xt::xarray<T>&& grad, const char* op) {
  if (!node.requires_grad) return;
  LeafGradients<T>* collected = node.is_leaf ? LeafGradients<T>::active() : nullptr;
  if (collected) {
    collected->add(node, std::move(grad), op);
  } else {
    add_grad(node.grad, node.has_grad, node.value.shape(), std::move(grad), op);
  }
}

template <typename T>
Tensor<T> make_result(const char* op, xt::xarray<T>&& value,
                      std::vector<std::shared_ptr<Node<T>>> inputs,
                      std::function<void(const xt::xarray<T>&, const xt::xarray<T>&)> backward) {
  if (OpProfile* profile = OpProfile::active()) profile->op_made(op);
  if (t_anomaly_enabled) check_forward(op, value, inputs);
  auto node = std::make_shared<Node<T>>();
  node->value = std::move(value);
  node->op = op;
  bool record = false;
  if (t_grad_enabled) {
    for (const auto& in : inputs) record = record || in->requires_grad;
  }
  if (record) {
    node->requires_grad = true;
    node->is_leaf = false;
    node->on_tape = true;
    tape<T>().push_back(TapeEntry<T>{op, std::move(inputs), node, std::move(backward)});
  }
  return Tensor<T>::from_node(std::move(node));
}

#define HEADROOM_INSTANTIATE(T)                                                              \
  template class Tensor<T>;                                                                  \
  template class LeafGradients<T>;                                                           \
  template void LeafGradients<T>::add<const xt::xarray<T>&>(Node<T>&, const xt::xarray<T>&, const char*); \
  template void LeafGradients<T>::add<xt::xarray<T>>(Node<T>&, xt::xarray<T>&&, const char*);             \
  template std::size_t tape_size<T>();                                                       \
  template void clear_tape<T>();                                                             \
  template xt::xarray<T> sum_to_shape<T>(const xt::xarray<T>&, const Shape&, const char*);  \
  template void accumulate_grad<T>(Node<T>&, const xt::xarray<T>&, const char*);            \
  template void accumulate_grad<T>(Node<T>&, xt::xarray<T>&&, const char*);                 \
  template Tensor<T> make_result<T>(                                                         \
      const char*, xt::xarray<T>&&, std::vector<std::shared_ptr<Node<T>>>,                   \
      std::function<void(const xt::xarray<T>&, const xt::xarray<T>&)>);
HEADROOM_INSTANTIATE(float)
HEADROOM_INSTANTIATE(double)
#undef HEADROOM_INSTANTIATE

}  // namespace headroom
