#include "plot/heatmap.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <stdexcept>

#include <fmt/format.h>

#include "autograd/shape.hpp"
#include "plot/svg.hpp"

namespace headroom::heatmap {
namespace {

// The colour map's stops, chosen here so that each of r, g and b strictly falls
// from stop to stop: the map is then monotone in every channel (and in lightness)
// wherever we interpolate.
struct Stop {
  double at;
  Rgb colour;
};
constexpr std::array<Stop, 5> kStops{{
    {0.00, {255, 255, 255}},
    {0.25, {204, 224, 245}},
    {0.50, {120, 170, 220}},
    {0.75, {40, 100, 180}},
    {1.00, {8, 40, 100}},
}};

// Layout, in SVG user units (pixels at 100%). A map is T cells square; the cell size
// shrinks with T so that a map stays about 300 units wide, within readable bounds.
constexpr int kMapTarget = 300;
constexpr int kMinCell = 8, kMaxCell = 22;
constexpr int kMargin = 20;            // around the whole document
constexpr int kHeaderHeight = 20;      // "layer 0, head 2" above each map
constexpr int kGapX = 26, kGapY = 22;  // between maps
constexpr int kTitleBlock = 92;        // title, subtitle and the reading guide
constexpr int kLegendGap = 30;         // between the last map and the legend
constexpr int kBarWidth = 16;
constexpr int kLegendWidth = 190;
// Above this many tokens a tooltip per cell makes the file large for little use.
constexpr std::size_t kMaxTooltipTokens = 32;

// Rough width of text in a sans-serif font (the SVG has no text metrics). Counts
// code points, not bytes: UTF-8 continuation bytes take no width.
double text_width(const std::string& text, double font_size) {
  std::size_t chars = 0;
  for (const char c : text) chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80 ? 1 : 0;
  return static_cast<double>(chars) * font_size * 0.62;
}

std::string num(double v) { return fmt::format("{:.1f}", v); }

void check(const AttentionMaps& maps) {
  const std::size_t T = maps.tokens.size();
  if (maps.layers.empty()) throw std::invalid_argument("attention map: no layers to draw");
  if (T == 0) throw std::invalid_argument("attention map: the input has no tokens");
  if (T > kMaxTokens) {
    throw std::invalid_argument(
        fmt::format("attention map: {} tokens are more than the {} we draw (the maps would be unreadable)", T,
                    kMaxTokens));
  }
  for (std::size_t l = 0; l < maps.layers.size(); ++l) {
    const auto& w = maps.layers[l];
    if (w.dimension() != 3 || w.shape()[0] == 0 || w.shape()[1] != T || w.shape()[2] != T) {
      throw std::invalid_argument(fmt::format("attention map: layer {} has weights of shape {}, expected (H, {}, {})",
                                              l, format_shape(Shape(w.shape())), T, T));
    }
    for (std::size_t i = 0; i < w.size(); ++i) {
      if (!std::isfinite(w.data()[i])) {
        const std::size_t h = i / (T * T), q = i / T % T, k = i % T;
        throw std::invalid_argument(fmt::format("attention map: layer {}, head {}: the weight of query {} on key {} "
                                                "is {}",
                                                l, h, q, k, w.data()[i]));
      }
    }
  }
}

}  // namespace

Rgb weight_colour(double weight) {
  const double w = std::clamp(weight, 0.0, 1.0);
  std::size_t i = 1;
  while (i + 1 < kStops.size() && w > kStops[i].at) ++i;
  const Stop& a = kStops[i - 1];
  const Stop& b = kStops[i];
  const double t = (w - a.at) / (b.at - a.at);
  const auto mix = [t](std::uint8_t x, std::uint8_t y) {
    return static_cast<std::uint8_t>(std::lround(x + t * (static_cast<double>(y) - x)));
  };
  return {mix(a.colour.r, b.colour.r), mix(a.colour.g, b.colour.g), mix(a.colour.b, b.colour.b)};
}

std::string hex(Rgb colour) { return fmt::format("#{:02x}{:02x}{:02x}", colour.r, colour.g, colour.b); }

std::string render_attention_maps(const AttentionMaps& maps) {
  check(maps);
  const std::size_t T = maps.tokens.size();
  std::size_t heads = 0;
  for (const auto& w : maps.layers) heads = std::max(heads, w.shape()[0]);
  const std::size_t layers = maps.layers.size();

  const int cell = std::clamp(kMapTarget / static_cast<int>(T), kMinCell, kMaxCell);
  const int map_size = cell * static_cast<int>(T);
  const double label_font = std::min(11.0, std::max(6.0, cell * 0.62));
  double label_width = 0;  // the widest token label
  for (const std::string& t : maps.tokens) label_width = std::max(label_width, text_width(t, label_font));
  // Key labels stand upright when they fit a column, else they are turned to run upwards.
  const bool upright_keys = label_width <= cell - 2;
  const double row_labels = label_width + 6;                                     // left of a map
  const double column_labels = upright_keys ? label_font + 5 : label_width + 6;  // above a map
  const double panel_width = row_labels + map_size;
  const double panel_height = kHeaderHeight + column_labels + map_size;

  const double grid_width = static_cast<double>(heads) * panel_width + static_cast<double>(heads - 1) * kGapX;
  const double grid_height = static_cast<double>(layers) * panel_height + static_cast<double>(layers - 1) * kGapY;
  const double legend_x = kMargin + grid_width + kLegendGap;
  const std::string guide = fmt::format(
      "Each map: one row per query (the token that attends), one column per key (the token attended to); each row "
      "sums to 1.{}",
      maps.causal ? " Hatched: keys after the query, hidden by the causal mask." : "");
  const double width = std::max({legend_x + kLegendWidth, text_width(maps.title, 16) + 2 * kMargin,
                                 text_width(maps.subtitle, 12) + 2 * kMargin, text_width(guide, 11) + 2 * kMargin});
  const double height = kTitleBlock + std::max(grid_height, 260.0) + kMargin;

  std::string out;
  auto put = std::back_inserter(out);
  fmt::format_to(put,
                 "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
                 "font-family=\"sans-serif\">\n<title>{2}</title>\n",
                 num(width), num(height), svg::escape(maps.title));
  // The hatch of masked cells, and the legend's gradient: the same stops as
  // weight_colour, which SVG interpolates the same way (linearly in sRGB).
  out +=
      "<defs>\n<pattern id=\"attn-masked\" width=\"5\" height=\"5\" patternUnits=\"userSpaceOnUse\" "
      "patternTransform=\"rotate(45)\"><rect width=\"5\" height=\"5\" fill=\"#f2f2f2\"/><line x1=\"0\" y1=\"0\" "
      "x2=\"0\" y2=\"5\" stroke=\"#c4c4c4\" stroke-width=\"1.6\"/></pattern>\n"
      "<linearGradient id=\"attn-scale\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">";
  for (const Stop& s : kStops) {
    fmt::format_to(put, "<stop offset=\"{}\" stop-color=\"{}\"/>", s.at, hex(s.colour));
  }
  out += "</linearGradient>\n</defs>\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";

  fmt::format_to(put, "<text x=\"{}\" y=\"28\" font-size=\"16\" font-weight=\"bold\">{}</text>\n", kMargin,
                 svg::escape(maps.title));
  fmt::format_to(put, "<text x=\"{}\" y=\"50\" font-size=\"12\" fill=\"#222222\" xml:space=\"preserve\">{}</text>\n",
                 kMargin, svg::escape(maps.subtitle));
  fmt::format_to(put, "<text x=\"{}\" y=\"72\" font-size=\"11\" fill=\"#555555\">{}</text>\n", kMargin, guide);

  for (std::size_t l = 0; l < layers; ++l) {
    const xt::xarray<float>& w = maps.layers[l];
    for (std::size_t h = 0; h < w.shape()[0]; ++h) {
      const double px = kMargin + static_cast<double>(h) * (panel_width + kGapX);
      const double py = kTitleBlock + static_cast<double>(l) * (panel_height + kGapY);
      const double mx = px + row_labels;                        // the map's top-left corner
      const double my = py + kHeaderHeight + column_labels;
      fmt::format_to(put, "<g>\n<text x=\"{}\" y=\"{}\" font-size=\"12\" font-weight=\"bold\">layer {}, head {}</text>\n",
                     num(mx), num(py + 13), l, h);
      // Token labels: keys across the top, queries down the left.
      fmt::format_to(put, "<g font-size=\"{}\" fill=\"#333333\">\n", num(label_font));
      for (std::size_t k = 0; k < T; ++k) {
        const double cx = mx + (static_cast<double>(k) + 0.5) * cell;
        const std::string label = svg::escape(maps.tokens[k]);
        if (upright_keys) {
          fmt::format_to(put, "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", num(cx), num(my - 4),
                         label);
        } else {
          fmt::format_to(put, "<text transform=\"translate({},{}) rotate(-90)\" dominant-baseline=\"central\">{}</text>\n",
                         num(cx), num(my - 4), label);
        }
      }
      for (std::size_t q = 0; q < T; ++q) {
        const double cy = my + (static_cast<double>(q) + 0.5) * cell;
        fmt::format_to(put, "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" dominant-baseline=\"central\">{}</text>\n",
                       num(mx - 4), num(cy), svg::escape(maps.tokens[q]));
      }
      out += "</g>\n";
      // The masked region shows through as the hatched background: only cells a
      // query can see are drawn.
      if (maps.causal) {
        fmt::format_to(put, "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"url(#attn-masked)\"/>\n",
                       num(mx), num(my), map_size, map_size);
      }
      const bool tooltips = T <= kMaxTooltipTokens;
      for (std::size_t q = 0; q < T; ++q) {
        for (std::size_t k = 0; k < T; ++k) {
          if (maps.causal && k > q) continue;
          const float v = w(h, q, k);
          fmt::format_to(put, "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"", num(mx + k * cell),
                         num(my + q * cell), cell, cell, hex(weight_colour(v)));
          if (tooltips) {
            fmt::format_to(put, "><title>query {} ({}), key {} ({}): {:.3f}</title></rect>\n", q,
                           svg::escape(maps.tokens[q]), k, svg::escape(maps.tokens[k]), v);
          } else {
            out += "/>\n";
          }
        }
      }
      fmt::format_to(put,
                     "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888888\" "
                     "stroke-width=\"0.8\"/>\n</g>\n",
                     num(mx), num(my), map_size, map_size);
    }
  }

  // The legend: the colour bar with ticks, then the masked swatch.
  const double bar_top = kTitleBlock + kHeaderHeight + 16;
  const double bar_height = 180;
  fmt::format_to(put, "<g font-size=\"11\" fill=\"#333333\">\n<text x=\"{}\" y=\"{}\" font-weight=\"bold\">attention "
                      "weight</text>\n",
                 num(legend_x), num(bar_top - 14));
  fmt::format_to(put,
                 "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"url(#attn-scale)\" stroke=\"#888888\" "
                 "stroke-width=\"0.8\"/>\n",
                 num(legend_x), num(bar_top), kBarWidth, num(bar_height));
  for (const double tick : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    const double y = bar_top + (1 - tick) * bar_height;
    fmt::format_to(put,
                   "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#333333\" stroke-width=\"0.8\"/>"
                   "<text x=\"{3}\" y=\"{1}\" dominant-baseline=\"central\">{4}</text>\n",
                   num(legend_x + kBarWidth), num(y), num(legend_x + kBarWidth + 4), num(legend_x + kBarWidth + 7),
                   tick == 0 ? "0" : tick == 1 ? "1" : fmt::format("{:g}", tick));
  }
  if (maps.causal) {
    const double y = bar_top + bar_height + 24;
    fmt::format_to(put,
                   "<rect x=\"{0}\" y=\"{1}\" width=\"{2}\" height=\"{2}\" fill=\"url(#attn-masked)\" stroke=\"#888888\" "
                   "stroke-width=\"0.8\"/><text x=\"{3}\" y=\"{4}\" dominant-baseline=\"central\">masked (key after "
                   "query)</text>\n",
                   num(legend_x), num(y), kBarWidth, num(legend_x + kBarWidth + 7), num(y + kBarWidth / 2.0));
  }
  out += "</g>\n</svg>\n";
  return out;
}

}  // namespace headroom::heatmap
