#include "plot/grid_heatmap.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <stdexcept>

#include <fmt/format.h>

#include "plot/svg.hpp"

namespace headroom::heatmap {
namespace {

struct Stop {
  double at;
  Rgb colour;
};
// Each channel moves monotonically on either side of white, so a larger |value| is
// never lighter.
constexpr std::array<Stop, 5> kStops{{
    {-1.0, {165, 15, 21}},
    {-0.5, {239, 138, 98}},
    {0.0, {255, 255, 255}},
    {0.5, {120, 170, 220}},
    {1.0, {8, 40, 100}},
}};

constexpr int kMargin = 20;
constexpr int kTitleBlock = 76;
constexpr int kPanelGap = 40;
constexpr int kMinCell = 14, kMaxCell = 44, kPanelTarget = 420;
constexpr int kBarWidth = 16;
constexpr int kLegendWidth = 150;

double text_width(const std::string& text, double font_size) {
  std::size_t chars = 0;
  for (const char c : text) chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80 ? 1 : 0;
  return static_cast<double>(chars) * font_size * 0.62;
}

std::string num(double v) { return fmt::format("{:.1f}", v); }

void check(const GridFigure& f) {
  if (f.panels.empty()) throw std::invalid_argument("grid figure: no panels to draw");
  if (!(f.limit > 0) || !std::isfinite(f.limit)) {
    throw std::invalid_argument(fmt::format("grid figure: the colour limit must be positive and finite, got {}", f.limit));
  }
  for (const GridPanel& p : f.panels) {
    if (p.rows.empty() || p.cols.empty() || p.rows.size() > kMaxTokens || p.cols.size() > kMaxTokens) {
      throw std::invalid_argument(fmt::format("grid figure: panel '{}' has {} rows and {} columns (1 to {} each)",
                                              p.title, p.rows.size(), p.cols.size(), kMaxTokens));
    }
    if (p.values.size() != p.rows.size() * p.cols.size()) {
      throw std::invalid_argument(fmt::format("grid figure: panel '{}' has {} values for {} x {} cells", p.title,
                                              p.values.size(), p.rows.size(), p.cols.size()));
    }
  }
}

}  // namespace

Rgb signed_colour(double value) {
  const double v = std::clamp(value, -1.0, 1.0);
  std::size_t i = 1;
  while (i + 1 < kStops.size() && v > kStops[i].at) ++i;
  const Stop& a = kStops[i - 1];
  const Stop& b = kStops[i];
  const double t = (v - a.at) / (b.at - a.at);
  const auto mix = [t](std::uint8_t x, std::uint8_t y) {
    return static_cast<std::uint8_t>(std::lround(x + t * (static_cast<double>(y) - x)));
  };
  return {mix(a.colour.r, b.colour.r), mix(a.colour.g, b.colour.g), mix(a.colour.b, b.colour.b)};
}

std::string render_grid_figure(const GridFigure& f) {
  check(f);
  std::size_t max_rows = 0, max_cols = 0;
  for (const GridPanel& p : f.panels) {
    max_rows = std::max(max_rows, p.rows.size());
    max_cols = std::max(max_cols, p.cols.size());
  }
  const int cell = std::clamp(kPanelTarget / static_cast<int>(std::max(max_rows, max_cols)), kMinCell, kMaxCell);
  const double label_font = std::min(11.0, std::max(7.0, cell * 0.5));
  const bool numbers = cell >= 30;  // each cell's value written in it
  double row_label_width = 0, col_label_width = 0;
  for (const GridPanel& p : f.panels) {
    for (const std::string& r : p.rows) row_label_width = std::max(row_label_width, text_width(r, label_font));
    for (const std::string& c : p.cols) col_label_width = std::max(col_label_width, text_width(c, label_font));
  }
  const bool upright_cols = col_label_width <= cell - 2;
  const double left = row_label_width + 22;                                        // row labels and the axis name
  const double top = 20 + (upright_cols ? label_font + 6 : col_label_width + 8) + 14;  // title, column labels, axis name
  std::vector<double> xs;  // each panel's left edge
  double x = kMargin;
  for (const GridPanel& p : f.panels) {
    xs.push_back(x);
    x += left + static_cast<double>(cell * p.cols.size()) + kPanelGap;
  }
  const double legend_x = x;
  const double grid_height = top + static_cast<double>(cell * max_rows);
  const double width = std::max({legend_x + kLegendWidth, text_width(f.title, 16) + 2 * kMargin,
                                 text_width(f.subtitle, 12) + 2 * kMargin});
  const double height = kTitleBlock + std::max(grid_height, top + 240.0) + kMargin;  // the legend: bar and n/a

  std::string out;
  auto put = std::back_inserter(out);
  fmt::format_to(put,
                 "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
                 "font-family=\"sans-serif\">\n<title>{2}</title>\n<defs>\n<linearGradient id=\"grid-scale\" x1=\"0\" "
                 "y1=\"1\" x2=\"0\" y2=\"0\">",
                 num(width), num(height), svg::escape(f.title));
  for (const Stop& s : kStops) {
    fmt::format_to(put, "<stop offset=\"{}\" stop-color=\"{}\"/>", (s.at + 1) / 2, hex(s.colour));
  }
  out += "</linearGradient>\n</defs>\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  fmt::format_to(put, "<text x=\"{}\" y=\"28\" font-size=\"16\" font-weight=\"bold\">{}</text>\n", kMargin,
                 svg::escape(f.title));
  fmt::format_to(put, "<text x=\"{}\" y=\"50\" font-size=\"12\" fill=\"#222222\" xml:space=\"preserve\">{}</text>\n",
                 kMargin, svg::escape(f.subtitle));

  for (std::size_t k = 0; k < f.panels.size(); ++k) {
    const GridPanel& p = f.panels[k];
    const double mx = xs[k] + left, my = kTitleBlock + top;  // the map's top-left corner
    const double map_w = static_cast<double>(cell * p.cols.size()), map_h = static_cast<double>(cell * p.rows.size());
    fmt::format_to(put, "<g>\n<text x=\"{}\" y=\"{}\" font-size=\"13\" font-weight=\"bold\">{}</text>\n", num(xs[k]),
                   num(kTitleBlock + 14), svg::escape(p.title));
    fmt::format_to(put, "<text x=\"{}\" y=\"{}\" font-size=\"11\" fill=\"#555555\" text-anchor=\"middle\">{}</text>\n",
                   num(mx + map_w / 2), num(kTitleBlock + 32), svg::escape(p.col_axis));
    fmt::format_to(put,
                   "<text transform=\"translate({},{}) rotate(-90)\" font-size=\"11\" fill=\"#555555\" "
                   "text-anchor=\"middle\">{}</text>\n",
                   num(xs[k] + 8), num(my + map_h / 2), svg::escape(p.row_axis));
    fmt::format_to(put, "<g font-size=\"{}\" fill=\"#333333\">\n", num(label_font));
    for (std::size_t j = 0; j < p.cols.size(); ++j) {
      const double cx = mx + (static_cast<double>(j) + 0.5) * cell;
      if (upright_cols) {
        fmt::format_to(put, "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", num(cx), num(my - 4),
                       svg::escape(p.cols[j]));
      } else {
        fmt::format_to(put, "<text transform=\"translate({},{}) rotate(-90)\" dominant-baseline=\"central\">{}</text>\n",
                       num(cx), num(my - 4), svg::escape(p.cols[j]));
      }
    }
    for (std::size_t i = 0; i < p.rows.size(); ++i) {
      fmt::format_to(put, "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" dominant-baseline=\"central\">{}</text>\n",
                     num(mx - 4), num(my + (static_cast<double>(i) + 0.5) * cell), svg::escape(p.rows[i]));
    }
    out += "</g>\n";
    for (std::size_t i = 0; i < p.rows.size(); ++i) {
      for (std::size_t j = 0; j < p.cols.size(); ++j) {
        const double v = p.values[i * p.cols.size() + j];
        const bool missing = std::isnan(v);
        std::string value = missing ? "n/a" : fmt::format("{:.2f}", v);
        if (value == "-0.00") value = "0.00";  // a small negative rounds to zero, not to "-0"
        const double cx = mx + static_cast<double>(j * cell), cy = my + static_cast<double>(i * cell);
        fmt::format_to(put,
                       "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{} {}, {} {}: "
                       "{}</title></rect>\n",
                       num(cx), num(cy), cell, cell, missing ? "#d0d0d0" : hex(signed_colour(v / f.limit)),
                       svg::escape(p.row_axis), svg::escape(p.rows[i]), svg::escape(p.col_axis),
                       svg::escape(p.cols[j]), value);
        if (numbers) {
          const bool dark = !missing && std::abs(v / f.limit) > 0.6;
          fmt::format_to(put,
                         "<text x=\"{}\" y=\"{}\" font-size=\"{}\" text-anchor=\"middle\" dominant-baseline=\"central\" "
                         "fill=\"{}\">{}</text>\n",
                         num(cx + cell / 2.0), num(cy + cell / 2.0), num(std::min(11.0, cell * 0.3)),
                         dark ? "#ffffff" : "#222222", value);
        }
      }
    }
    fmt::format_to(put,
                   "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888888\" "
                   "stroke-width=\"0.8\"/>\n</g>\n",
                   num(mx), num(my), num(map_w), num(map_h));
  }

  const double bar_top = kTitleBlock + top;
  const double bar_height = 180;
  fmt::format_to(put, "<g font-size=\"11\" fill=\"#333333\">\n<text x=\"{}\" y=\"{}\" font-weight=\"bold\">{}</text>\n",
                 num(legend_x), num(bar_top - 14), svg::escape(f.legend));
  fmt::format_to(put,
                 "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"url(#grid-scale)\" stroke=\"#888888\" "
                 "stroke-width=\"0.8\"/>\n",
                 num(legend_x), num(bar_top), kBarWidth, num(bar_height));
  for (const double tick : {-1.0, -0.5, 0.0, 0.5, 1.0}) {
    const double y = bar_top + (1 - tick) / 2 * bar_height;
    fmt::format_to(put,
                   "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#333333\" stroke-width=\"0.8\"/>"
                   "<text x=\"{3}\" y=\"{1}\" dominant-baseline=\"central\">{4}{5:g}</text>\n",
                   num(legend_x + kBarWidth), num(y), num(legend_x + kBarWidth + 4), num(legend_x + kBarWidth + 7),
                   tick == -1.0 ? "\u2264 " : tick == 1.0 ? "\u2265 " : "", tick * f.limit);
  }
  const double y = bar_top + bar_height + 20;
  fmt::format_to(put,
                 "<rect x=\"{0}\" y=\"{1}\" width=\"{2}\" height=\"{2}\" fill=\"#d0d0d0\" stroke=\"#888888\" "
                 "stroke-width=\"0.8\"/><text x=\"{3}\" y=\"{4}\" dominant-baseline=\"central\">n/a</text>\n",
                 num(legend_x), num(y), kBarWidth, num(legend_x + kBarWidth + 7), num(y + kBarWidth / 2.0));
  out += "</g>\n</svg>\n";
  return out;
}

}  // namespace headroom::heatmap
