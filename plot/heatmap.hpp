// Attention maps as one SVG: a grid of heatmaps, one per (layer, head), rows =
// layers and columns = heads, on one colour scale from 0 to 1 with a legend. Each
// map shows one head's attention weights for one input: query positions down the
// side, key positions across the top, both labelled with the input's tokens. Plain
// text out; no third-party code.
//
// Legend: L = layers, H = heads per layer, T = tokens of the input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/xtensor_setup.hpp"  // first: checks the container settings
#include <xtensor/xarray.hpp>

namespace headroom::heatmap {

struct Rgb {
  std::uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

// The sequential colour map of every map and the legend: white at 0 through light
// blue to dark navy at 1, linear in sRGB between a few stops. Every channel falls
// as the weight rises, so a heavier weight is never lighter; white at 0 leaves the
// (mostly near-zero) background quiet and lets the few large weights stand out.
// Weights outside [0, 1] are clamped.
Rgb weight_colour(double weight);

// "#rrggbb"
std::string hex(Rgb colour);

// Longer inputs make maps too dense to read and files of many megabytes.
inline constexpr std::size_t kMaxTokens = 128;

struct AttentionMaps {
  std::string title;                      // first line: what model
  std::string subtitle;                   // second line: what input
  std::vector<std::string> tokens;        // (T) axis labels, one per position
  std::vector<xt::xarray<float>> layers;  // L arrays of (H, T, T): [head, query, key]
  bool causal = true;  // keys after their query are masked: drawn hatched, not coloured
};

// The SVG document of the grid. Throws std::invalid_argument naming the layer and
// shapes when there are no layers, a layer is not (H, T, T) with H >= 1 and T the
// number of labels, T is 0 or above kMaxTokens, or a weight is not finite.
std::string render_attention_maps(const AttentionMaps& maps);

}  // namespace headroom::heatmap
