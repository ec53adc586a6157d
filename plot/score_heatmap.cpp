#include "plot/score_heatmap.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <stdexcept>

#include <fmt/format.h>

#include "autograd/shape.hpp"
#include "plot/heatmap.hpp"
#include "plot/svg.hpp"

namespace headroom::heatmap {
namespace {

constexpr std::size_t kMaxLabels = 64;
constexpr int kPanelTarget = 260;
constexpr int kMinCell = 10, kMaxCell = 40;
constexpr int kMargin = 20;
constexpr int kTitleBlock = 92;
constexpr int kHeaderHeight = 20;
constexpr int kGapX = 36;
constexpr int kLegendGap = 30;
constexpr int kBarWidth = 16;
constexpr int kLegendWidth = 170;

double text_width(const std::string& text, double font_size) {
  std::size_t chars = 0;
  for (const char c : text) chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80 ? 1 : 0;
  return static_cast<double>(chars) * font_size * 0.62;
}

std::string num(double v) { return fmt::format("{:.1f}", v); }

void check(const ScoreMatrices& s) {
  const std::size_t R = s.row_labels.size(), K = s.column_labels.size();
  if (s.panels.empty()) throw std::invalid_argument("score heat map: no panels to draw");
  if (R == 0 || K == 0) throw std::invalid_argument("score heat map: no labels");
  if (std::max(R, K) > kMaxLabels) {
    throw std::invalid_argument(
        fmt::format("score heat map: {} labels are more than the {} we draw", std::max(R, K), kMaxLabels));
  }
  if (!(s.scale_max > 0) || !std::isfinite(s.scale_max)) {
    throw std::invalid_argument(fmt::format("score heat map: scale_max must be positive, got {}", s.scale_max));
  }
  for (const ScorePanel& p : s.panels) {
    if (p.values.dimension() != 2 || p.values.shape()[0] != R || p.values.shape()[1] != K) {
      throw std::invalid_argument(fmt::format("score heat map: panel '{}' has shape {}, expected ({}, {})", p.title,
                                              format_shape(Shape(p.values.shape())), R, K));
    }
    for (const double v : p.values) {
      if (std::isinf(v)) throw std::invalid_argument(fmt::format("score heat map: panel '{}' holds {}", p.title, v));
    }
  }
}

}  // namespace

std::string render_score_matrices(const ScoreMatrices& s) {
  check(s);
  const std::size_t R = s.row_labels.size(), K = s.column_labels.size();
  const int cell = std::clamp(kPanelTarget / static_cast<int>(std::max(R, K)), kMinCell, kMaxCell);
  const int size_x = cell * static_cast<int>(K), size_y = cell * static_cast<int>(R);
  const double label_font = std::min(11.0, std::max(7.0, cell * 0.6));
  double row_width = 0, column_width = 0;
  for (const std::string& l : s.row_labels) row_width = std::max(row_width, text_width(l, label_font));
  for (const std::string& l : s.column_labels) column_width = std::max(column_width, text_width(l, label_font));
  const double row_labels = row_width + 6;
  const double column_labels = column_width + 6;  // turned to run upwards
  const double axis_text = 14;                    // the axis names
  const double panel_width = std::max(axis_text + row_labels + size_x, text_width(s.column_axis, 11) + 10);
  const double panel_height = kHeaderHeight + column_labels + size_y + axis_text + 6;
  const std::size_t P = s.panels.size();
  const double grid_width = static_cast<double>(P) * panel_width + static_cast<double>(P - 1) * kGapX;
  const double legend_x = kMargin + grid_width + kLegendGap;
  const double width = std::max({legend_x + kLegendWidth, text_width(s.title, 16) + 2 * kMargin,
                                 text_width(s.subtitle, 12) + 2 * kMargin, text_width(s.guide, 11) + 2 * kMargin});
  const double height = kTitleBlock + std::max(panel_height, 280.0) + kMargin;

  std::string out;
  auto put = std::back_inserter(out);
  fmt::format_to(put,
                 "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
                 "font-family=\"sans-serif\">\n<title>{2}</title>\n",
                 num(width), num(height), svg::escape(s.title));
  out +=
      "<defs>\n<pattern id=\"score-undefined\" width=\"5\" height=\"5\" patternUnits=\"userSpaceOnUse\" "
      "patternTransform=\"rotate(45)\"><rect width=\"5\" height=\"5\" fill=\"#f2f2f2\"/><line x1=\"0\" y1=\"0\" "
      "x2=\"0\" y2=\"5\" stroke=\"#c4c4c4\" stroke-width=\"1.6\"/></pattern>\n"
      "<linearGradient id=\"score-scale\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">";
  for (int i = 0; i <= 8; ++i) {
    const double at = i / 8.0;
    fmt::format_to(put, "<stop offset=\"{}\" stop-color=\"{}\"/>", at, hex(weight_colour(at)));
  }
  out += "</linearGradient>\n</defs>\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  fmt::format_to(put, "<text x=\"{}\" y=\"28\" font-size=\"16\" font-weight=\"bold\">{}</text>\n", kMargin,
                 svg::escape(s.title));
  fmt::format_to(put, "<text x=\"{}\" y=\"50\" font-size=\"12\" fill=\"#222222\">{}</text>\n", kMargin,
                 svg::escape(s.subtitle));
  fmt::format_to(put, "<text x=\"{}\" y=\"72\" font-size=\"11\" fill=\"#555555\">{}</text>\n", kMargin,
                 svg::escape(s.guide));

  for (std::size_t pi = 0; pi < P; ++pi) {
    const ScorePanel& panel = s.panels[pi];
    const double px = kMargin + static_cast<double>(pi) * (panel_width + kGapX);
    const double py = kTitleBlock;
    const double mx = px + axis_text + row_labels;
    const double my = py + kHeaderHeight + column_labels;
    fmt::format_to(put, "<g>\n<text x=\"{}\" y=\"{}\" font-size=\"12\" font-weight=\"bold\">{}</text>\n", num(mx),
                   num(py + 13), svg::escape(panel.title));
    fmt::format_to(put, "<g font-size=\"{}\" fill=\"#333333\">\n", num(label_font));
    for (std::size_t i = 0; i < K; ++i) {
      const double c = (static_cast<double>(i) + 0.5) * cell;
      fmt::format_to(put, "<text transform=\"translate({},{}) rotate(-90)\" dominant-baseline=\"central\">{}</text>\n",
                     num(mx + c), num(my - 4), svg::escape(s.column_labels[i]));
    }
    for (std::size_t i = 0; i < R; ++i) {
      const double c = (static_cast<double>(i) + 0.5) * cell;
      fmt::format_to(put, "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" dominant-baseline=\"central\">{}</text>\n",
                     num(mx - 4), num(my + c), svg::escape(s.row_labels[i]));
    }
    out += "</g>\n";
    fmt::format_to(put,
                   "<text x=\"{}\" y=\"{}\" font-size=\"11\" fill=\"#555555\" text-anchor=\"middle\">{}</text>\n",
                   num(mx + size_x / 2.0), num(my + size_y + axis_text), svg::escape(s.column_axis));
    fmt::format_to(put,
                   "<text transform=\"translate({},{}) rotate(-90)\" font-size=\"11\" fill=\"#555555\" "
                   "text-anchor=\"middle\">{}</text>\n",
                   num(px + 9), num(my + size_y / 2.0), svg::escape(s.row_axis));
    fmt::format_to(put, "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"url(#score-undefined)\"/>\n",
                   num(mx), num(my), size_x, size_y);
    for (std::size_t r = 0; r < R; ++r) {
      for (std::size_t c = 0; c < K; ++c) {
        const double v = panel.values(r, c);
        if (std::isnan(v)) continue;
        fmt::format_to(put,
                       "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{} from {}: {:.3f}"
                       "</title></rect>\n",
                       num(mx + static_cast<double>(c) * cell), num(my + static_cast<double>(r) * cell), cell, cell,
                       hex(weight_colour(v / s.scale_max)), svg::escape(s.row_labels[r]), svg::escape(s.column_labels[c]), v);
      }
    }
    fmt::format_to(put,
                   "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888888\" "
                   "stroke-width=\"0.8\"/>\n</g>\n",
                   num(mx), num(my), size_x, size_y);
  }

  const double bar_top = kTitleBlock + kHeaderHeight + 16;
  const double bar_height = 180;
  fmt::format_to(put, "<g font-size=\"11\" fill=\"#333333\">\n<text x=\"{}\" y=\"{}\" font-weight=\"bold\">{}</text>\n",
                 num(legend_x), num(bar_top - 14), svg::escape(s.legend));
  fmt::format_to(put,
                 "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"url(#score-scale)\" stroke=\"#888888\" "
                 "stroke-width=\"0.8\"/>\n",
                 num(legend_x), num(bar_top), kBarWidth, num(bar_height));
  for (const double tick : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    const double y = bar_top + (1 - tick) * bar_height;
    fmt::format_to(put,
                   "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#333333\" stroke-width=\"0.8\"/>"
                   "<text x=\"{3}\" y=\"{1}\" dominant-baseline=\"central\">{4:.3g}</text>\n",
                   num(legend_x + kBarWidth), num(y), num(legend_x + kBarWidth + 4), num(legend_x + kBarWidth + 7),
                   tick * s.scale_max);
  }
  bool any_undefined = false;
  for (const ScorePanel& panel : s.panels) {
    for (const double v : panel.values) any_undefined = any_undefined || std::isnan(v);
  }
  const double y = bar_top + bar_height + 24;
  if (any_undefined) fmt::format_to(put,
                 "<rect x=\"{0}\" y=\"{1}\" width=\"{2}\" height=\"{2}\" fill=\"url(#score-undefined)\" "
                 "stroke=\"#888888\" stroke-width=\"0.8\"/><text x=\"{3}\" y=\"{4}\" "
                 "dominant-baseline=\"central\">{5}</text>\n",
                 num(legend_x), num(y), kBarWidth, num(legend_x + kBarWidth + 7), num(y + kBarWidth / 2.0),
                 svg::escape(s.undefined));
  out += "</g>\n</svg>\n";
  return out;
}

}  // namespace headroom::heatmap
