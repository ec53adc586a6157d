// A small SVG line-chart writer for `headroom ablate`'s plots: lines with markers,
// optional min-max bands and error bars, linear or log axes, numeric or categorical
// x, titles, axis labels and a legend. Plain text out; no third-party code.
#pragma once

#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace headroom::svg {

struct Series {
  std::string name;            // the legend entry
  std::vector<double> x{}, y{};  // points; non-finite ones are left out
  std::vector<double> lo{}, hi{};  // a shaded band from lo to hi (empty: none), one per point
  std::vector<double> err{};     // error bars y +- err (empty: none), one per point
  // Each point's own observations (one per seed), drawn as hollow markers at its x
  // so that one failed seed shows as itself and not only as a wider bar (empty: none).
  std::vector<std::vector<double>> each{};
  // A reference level rather than a measurement (the Bayes loss under a loss curve):
  // a dashed line without markers, so that it does not read as data points.
  bool reference = false;
};

enum class Scale { linear, log };

struct Axis {
  std::string label;  // with its unit, e.g. "validation loss (nats/token)"
  Scale scale = Scale::linear;
  // Categorical axis: x values are the indices 0..n-1 and ticks show these labels.
  std::vector<std::string> categories{};
  // Ticks at these values (and only these) instead of automatic ones.
  std::vector<double> ticks{};
  // The shown range never goes past these (an accuracy stops at 100%).
  double floor = -std::numeric_limits<double>::infinity();
  double ceiling = std::numeric_limits<double>::infinity();
};

struct Chart {
  std::string title;
  Axis x, y;
  std::vector<Series> series{};
};

// One SVG document: `title` on top (also as the document's <title>), then the
// charts side by side, each with its own title, axes, grid and legend.
std::string render(const std::vector<Chart>& charts, const std::string& title);

// Text with &, <, >, " and ' escaped for XML.
std::string escape(std::string_view text);

}  // namespace headroom::svg
