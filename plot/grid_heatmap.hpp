// Signed values on a grid as one SVG: panels side by side, each a rows x cols
// heat map with labelled axes, on one diverging colour scale symmetric about 0 with
// a legend (e.g. the recovered fraction of activation patching per layer x head, or
// per layer x position, exact beside its attribution estimate). Plain text out; no
// third-party code.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "plot/heatmap.hpp"

namespace headroom::heatmap {

struct GridPanel {
  std::string title{};                      // above the panel
  std::string row_axis{}, col_axis{};       // "layer", "head"
  std::vector<std::string> rows{}, cols{};  // labels, one per row and column
  std::vector<double> values{};             // rows x cols, row-major; NaN is drawn grey, "n/a"
};

struct GridFigure {
  std::string title{};     // first line
  std::string subtitle{};  // second line
  std::string legend{};    // what the colour means, e.g. "recovered fraction"
  double limit = 1;      // the scale runs from -limit (red) through 0 (white) to +limit (blue); beyond is clamped
  std::vector<GridPanel> panels{};
};

// Red at -1 through white at 0 to blue at +1, linear in sRGB; clamped outside.
Rgb signed_colour(double value);

// Throws std::invalid_argument naming the panel when there are no panels, a panel
// has no rows or columns, more than kMaxTokens of either, values not rows x cols,
// or limit is not a positive finite number.
std::string render_grid_figure(const GridFigure& figure);

}  // namespace headroom::heatmap
