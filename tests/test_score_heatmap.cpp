// plot/score_heatmap.hpp: one coloured cell per defined score, undefined ones left to
// the hatch, labels on both axes, and its input checks with the numbers.
#include <cmath>
#include <limits>
#include <string>

#include <doctest/doctest.h>

#include "plot/heatmap.hpp"
#include "plot/score_heatmap.hpp"
#include "support.hpp"

namespace hm = headroom::heatmap;

namespace {

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

hm::ScoreMatrices two_by_three() {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  hm::ScoreMatrices s;
  s.title = "scores";
  s.row_labels = {"r0", "r1"};
  s.column_labels = {"c0", "c1", "c2"};
  s.panels = {{"A", xt::xarray<double>{{0.0, 0.5, nan}, {1.0, 2.0, 0.25}}}};
  s.scale_max = 1.0;
  return s;
}

}  // namespace

TEST_CASE("render_score_matrices: a cell per defined score, coloured on the 0..scale_max scale") {
  const std::string svg = hm::render_score_matrices(two_by_three());
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(count_of(svg, "<title>r") == 5);  // five defined cells, each with its tooltip
  CHECK(svg.find("<title>r0 from c2") == std::string::npos);
  CHECK(svg.find(hm::hex(hm::weight_colour(0.5))) != std::string::npos);
  // 2.0 is past scale_max: drawn as 1.
  CHECK(svg.find("<title>r1 from c1: 2.000</title>") != std::string::npos);
  for (const char* label : {">r0<", ">r1<", ">c0<", ">c2<"}) CHECK(svg.find(label) != std::string::npos);
  CHECK(svg.find(">undefined<") != std::string::npos);  // the hatch's legend entry, as a NaN is drawn
}

TEST_CASE("render_score_matrices: bad shapes, values and scales are refused with the numbers") {
  hm::ScoreMatrices s = two_by_three();
  s.panels[0].values = xt::zeros<double>({3, 2});
  CHECK(error_of([&] { hm::render_score_matrices(s); }) ==
        "score heat map: panel 'A' has shape (3, 2), expected (2, 3)");
  s = two_by_three();
  s.panels[0].values(0, 0) = std::numeric_limits<double>::infinity();
  CHECK(error_of([&] { hm::render_score_matrices(s); }) == "score heat map: panel 'A' holds inf");
  s = two_by_three();
  s.scale_max = 0;
  CHECK(error_of([&] { hm::render_score_matrices(s); }) == "score heat map: scale_max must be positive, got 0");
  s = two_by_three();
  s.panels.clear();
  CHECK(error_of([&] { hm::render_score_matrices(s); }) == "score heat map: no panels to draw");
}
