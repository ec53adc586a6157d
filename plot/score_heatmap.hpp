// Score matrices as one SVG: panels side by side, each a labelled grid of
// cells coloured by heatmap::weight_colour on one scale from 0 to `scale_max`, with
// a legend; NaN cells (undefined scores) drawn hatched, with a legend entry when
// there are any. `headroom circuits` draws
// its Q-, K- and V-composition scores with it (rows: the reading head, columns: the
// writing head). Plain text out; no third-party code.
//
// Legend: R = rows, K = columns.
#pragma once

#include <string>
#include <vector>

#include "autograd/xtensor_setup.hpp"  // first: checks the container settings
#include <xtensor/xarray.hpp>

namespace headroom::heatmap {

struct ScorePanel {
  std::string title;           // above the panel, e.g. "K-composition"
  xt::xarray<double> values;   // (R, K); NaN where undefined
};

struct ScoreMatrices {
  std::string title;                // first line: what model
  std::string subtitle;             // second line: what the scores are
  std::string guide;                // third line: how to read a cell
  std::string row_axis, column_axis;  // "reader (layer 2 head)", "writer"
  std::vector<std::string> row_labels;     // (R)
  std::vector<std::string> column_labels;  // (K)
  std::vector<ScorePanel> panels;
  double scale_max = 1;             // the value drawn darkest; larger ones clamp
  std::string legend = "score";     // the colour bar's heading
  std::string undefined = "undefined";  // the hatched swatch's legend entry
};

// The SVG document. Throws std::invalid_argument naming the panel and shape when
// there are no panels or labels, a panel is not (R, K), more than 64 labels on an
// axis, a value is infinite, or scale_max is not positive.
std::string render_score_matrices(const ScoreMatrices& scores);

}  // namespace headroom::heatmap
