// Shapes, axes and broadcasting: the small vocabulary every op uses to check its
// inputs and to say, in an error, exactly what it was given.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "autograd/xtensor_setup.hpp"  // first: checks the container settings
#include <xtensor/xarray.hpp>

namespace headroom {

// The shape type of xt::xarray: a small vector of extents, so a Shape converts to
// and from an array's shape without a copy through std::vector.
using Shape = xt::dynamic_shape<std::size_t>;

// Every user-facing mistake (bad shape, bad axis, bad config) is one of these, so
// callers can catch std::invalid_argument and print a single line (docs/design.md #5).
class ShapeError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// "(2, 3, 4)"; a scalar is "()".
std::string format_shape(const Shape& shape);

std::size_t shape_size(const Shape& shape);

// NumPy broadcasting of two shapes, or a ShapeError naming `op` and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op);

// True when an array of shape `from` broadcasts to exactly `to`.
bool broadcasts_to(const Shape& from, const Shape& to);

// Maps a possibly negative axis into [0, ndim), or throws naming op, axis and shape.
std::size_t normalize_axis(int axis, const Shape& shape, std::string_view op);

// The same for a list of axes; duplicates are an error. The result is sorted.
std::vector<std::size_t> normalize_axes(const std::vector<int>& axes, const Shape& shape,
                                        std::string_view op);

// A contiguous row-major array seen as (outer, extent, inner) around one axis:
// element (o, j, i) sits at (o * extent + j) * inner + i.
struct AxisLayout {
  std::size_t outer = 1;   // product of the extents before the axis
  std::size_t extent = 1;  // extent of the axis
  std::size_t inner = 1;   // product of the extents after the axis
};
AxisLayout axis_layout(const Shape& shape, std::size_t axis);

// The multi-index of a flat row-major offset, e.g. for naming a bad element.
Shape unravel_index(std::size_t flat, const Shape& shape);

}  // namespace headroom
