#include "autograd/shape.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace headroom {

std::string format_shape(const Shape& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + ")";
}

std::size_t shape_size(const Shape& shape) {
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  return n;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op) {
  const std::size_t nd = std::max(a.size(), b.size());
  Shape out(nd, 1);
  for (std::size_t i = 0; i < nd; ++i) {
    // Align from the right, as NumPy does.
    const std::size_t da = i < nd - a.size() ? 1 : a[i - (nd - a.size())];
    const std::size_t db = i < nd - b.size() ? 1 : b[i - (nd - b.size())];
    if (da != db && da != 1 && db != 1) {
      throw ShapeError(fmt::format("{}: shapes cannot be broadcast: lhs {} vs rhs {}", op,
                                   format_shape(a), format_shape(b)));
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  const std::size_t lead = to.size() - from.size();
  for (std::size_t i = 0; i < from.size(); ++i) {
    if (from[i] != to[lead + i] && from[i] != 1) return false;
  }
  return true;
}

std::size_t normalize_axis(int axis, const Shape& shape, std::string_view op) {
  const int nd = static_cast<int>(shape.size());
  if (axis < -nd || axis >= nd) {
    throw ShapeError(fmt::format("{}: axis {} is out of range for a tensor of shape {}", op,
                                 axis, format_shape(shape)));
  }
  return static_cast<std::size_t>(axis < 0 ? axis + nd : axis);
}

std::vector<std::size_t> normalize_axes(const std::vector<int>& axes, const Shape& shape,
                                        std::string_view op) {
  std::vector<std::size_t> out;
  out.reserve(axes.size());
  for (int a : axes) out.push_back(normalize_axis(a, shape, op));
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end()) {
    throw ShapeError(fmt::format("{}: an axis is repeated in the list for a tensor of shape {}",
                                 op, format_shape(shape)));
  }
  return out;
}

AxisLayout axis_layout(const Shape& shape, std::size_t axis) {
  AxisLayout s;
  for (std::size_t i = 0; i < axis; ++i) s.outer *= shape[i];
  s.extent = shape[axis];
  for (std::size_t i = axis + 1; i < shape.size(); ++i) s.inner *= shape[i];
  return s;
}

Shape unravel_index(std::size_t flat, const Shape& shape) {
  Shape idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

}  // namespace headroom
