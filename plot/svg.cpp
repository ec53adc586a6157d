#include "plot/svg.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace headroom::svg {
namespace {

// The tab10 palette: distinguishable, and familiar from matplotlib.
constexpr const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
constexpr double kChartHeight = 380;
constexpr double kMarginLeft = 78, kMarginTop = 40, kMarginBottom = 56, kLegendGap = 14;
constexpr double kPlotWidth = 400;
constexpr double kLegendRow = 17;
constexpr double kTitleHeight = 34;  // the document title above the charts

// Where values fall on one axis: [lo, hi] maps to [0, 1].
struct Range {
  double lo = 0, hi = 1;
  bool log = false;
  double unit(double v) const {
    if (log) return (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo));
    return (v - lo) / (hi - lo);
  }
};

std::string num(double v) { return fmt::format("{:.2f}", v); }

// Tick labels: short, and without float noise (0.30000000000000004).
std::string tick_label(double v) { return v == 0 ? std::string("0") : fmt::format("{:.4g}", v); }

bool usable(double v, bool log) { return std::isfinite(v) && (!log || v > 0); }

Range make_range(const std::vector<double>& values, const Axis& axis, bool is_x) {
  Range r;
  r.log = axis.scale == Scale::log;
  if (is_x && !axis.categories.empty()) {
    r.lo = -0.5;
    r.hi = static_cast<double>(axis.categories.size()) - 0.5;
    r.log = false;
    return r;
  }
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (double v : values) {
    if (!usable(v, r.log)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  for (double t : axis.ticks) {
    if (!usable(t, r.log)) continue;
    lo = std::min(lo, t);
    hi = std::max(hi, t);
  }
  if (!std::isfinite(lo)) {  // nothing to show
    lo = r.log ? 0.1 : 0;
    hi = r.log ? 1 : 1;
  }
  if (r.log) {
    double a = std::log10(lo), b = std::log10(hi);
    if (b - a < 1e-9) {
      a -= 0.5;
      b += 0.5;
    }
    const double pad = 0.05 * (b - a);
    r.lo = std::pow(10.0, a - pad);
    r.hi = std::pow(10.0, b + pad);
  } else {
    if (hi - lo < 1e-12 * std::max(1.0, std::abs(hi))) {
      const double half = lo == 0 ? 1 : 0.1 * std::abs(lo);
      lo -= half;
      hi += half;
    }
    const double pad = 0.05 * (hi - lo);
    r.lo = std::max(lo - pad, axis.floor);
    r.hi = std::min(hi + pad, axis.ceiling);
    if (r.hi <= r.lo) {
      r.lo = lo - pad;
      r.hi = hi + pad;
    }
  }
  return r;
}

// 1, 2 or 5 times a power of ten, near raw.
double nice_step(double raw) {
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / p;
  return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

std::vector<double> linear_ticks(double lo, double hi) {
  const double step = nice_step((hi - lo) / 5);
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step) * step; t <= hi + 1e-9 * step; t += step) {
    ticks.push_back(std::abs(t) < 1e-9 * step ? 0 : t);
  }
  return ticks;
}

std::vector<double> auto_ticks(const Range& r) {
  if (!r.log) return linear_ticks(r.lo, r.hi);
  std::vector<double> ticks;
  const int first = static_cast<int>(std::ceil(std::log10(r.lo))), last = static_cast<int>(std::floor(std::log10(r.hi)));
  for (int k = first; k <= last; ++k) ticks.push_back(std::pow(10.0, k));
  if (ticks.size() < 3) {  // less than two decades: 1, 2 and 5 of each
    ticks.clear();
    for (int k = first - 1; k <= last; ++k) {
      for (double m : {1.0, 2.0, 5.0}) {
        const double t = m * std::pow(10.0, k);
        if (t >= r.lo && t <= r.hi) ticks.push_back(t);
      }
    }
  }
  if (ticks.size() < 2) {
    ticks.clear();
    for (double t : linear_ticks(r.lo, r.hi)) {
      if (t > 0) ticks.push_back(t);
    }
  }
  return ticks;
}

void render_chart(std::string& out, const Chart& chart, double x0, double y0) {
  const double plot_h = kChartHeight - kMarginTop - kMarginBottom;
  const double extra = std::max(0.0, kLegendRow * static_cast<double>(chart.series.size()) - plot_h);
  const double h = plot_h + extra;
  const double left = x0 + kMarginLeft, top = y0 + kMarginTop, right = left + kPlotWidth, bottom = top + h;

  std::vector<double> xs, ys;
  for (const Series& s : chart.series) {
    xs.insert(xs.end(), s.x.begin(), s.x.end());
    ys.insert(ys.end(), s.y.begin(), s.y.end());
    ys.insert(ys.end(), s.lo.begin(), s.lo.end());
    ys.insert(ys.end(), s.hi.begin(), s.hi.end());
    for (const std::vector<double>& values : s.each) ys.insert(ys.end(), values.begin(), values.end());
    for (std::size_t i = 0; i < s.err.size() && i < s.y.size(); ++i) {
      ys.push_back(s.y[i] + s.err[i]);
      if (chart.y.scale == Scale::linear || s.y[i] - s.err[i] > 0) ys.push_back(s.y[i] - s.err[i]);
    }
  }
  const Range rx = make_range(xs, chart.x, true), ry = make_range(ys, chart.y, false);
  auto px = [&](double v) { return left + rx.unit(v) * kPlotWidth; };
  auto py = [&](double v) { return bottom - ry.unit(std::clamp(v, ry.lo, ry.hi)) * h; };

  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">{}</text>\n",
                     num((left + right) / 2), num(y0 + 22), escape(chart.title));
  // Grid and tick labels.
  out += "<g stroke=\"#dddddd\" stroke-width=\"1\">\n";
  std::vector<std::pair<double, std::string>> xticks;
  if (!chart.x.categories.empty()) {
    for (std::size_t i = 0; i < chart.x.categories.size(); ++i) {
      xticks.emplace_back(static_cast<double>(i), chart.x.categories[i]);
    }
  } else {
    for (double t : chart.x.ticks.empty() ? auto_ticks(rx) : chart.x.ticks) xticks.emplace_back(t, tick_label(t));
  }
  const std::vector<double> yticks = chart.y.ticks.empty() ? auto_ticks(ry) : chart.y.ticks;
  for (const auto& [t, label] : xticks) {
    out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>\n", num(px(t)), num(top), num(bottom));
  }
  for (double t : yticks) {
    out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\"/>\n", num(left), num(py(t)), num(right));
  }
  out += "</g>\n<g font-size=\"11\" fill=\"#333333\">\n";
  for (const auto& [t, label] : xticks) {
    out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", num(px(t)), num(bottom + 16),
                       escape(label));
  }
  for (double t : yticks) {
    out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", num(left - 6), num(py(t) + 4),
                       escape(tick_label(t)));
  }
  out += "</g>\n";
  out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#000000\"/>\n",
                     num(left), num(top), num(kPlotWidth), num(h));
  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", num((left + right) / 2),
                     num(bottom + 40), escape(chart.x.label));
  out += fmt::format("<text transform=\"translate({},{}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
                     num(x0 + 20), num((top + bottom) / 2), escape(chart.y.label));

  const bool logy = chart.y.scale == Scale::log;
  for (std::size_t k = 0; k < chart.series.size(); ++k) {
    const Series& s = chart.series[k];
    const char* color = kColors[k % std::size(kColors)];
    auto ok = [&](std::size_t i) { return usable(s.x[i], rx.log) && usable(s.y[i], logy); };
    const std::size_t n = std::min(s.x.size(), s.y.size());
    if (s.lo.size() == n && s.hi.size() == n) {
      std::string fwd, back;
      for (std::size_t i = 0; i < n; ++i) {
        if (!usable(s.x[i], rx.log) || !std::isfinite(s.lo[i]) || !std::isfinite(s.hi[i])) continue;
        fwd += fmt::format("{},{} ", num(px(s.x[i])), num(py(s.hi[i])));
        back = fmt::format("{},{} ", num(px(s.x[i])), num(py(logy && s.lo[i] <= 0 ? ry.lo : s.lo[i]))) + back;
      }
      out += fmt::format("<polygon points=\"{}{}\" fill=\"{}\" fill-opacity=\"0.18\" stroke=\"none\"/>\n", fwd, back,
                         color);
    }
    std::string line;
    auto flush = [&] {
      if (!line.empty()) {
        // The series' name as the line's tooltip: a reader hovering over a curve, and
        // a test, can tell which one it is.
        out += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.8\"{}>"
                           "<title>{}</title></polyline>\n",
                           line, color, s.reference ? " stroke-dasharray=\"6 4\"" : "", escape(s.name));
      }
      line.clear();
    };
    for (std::size_t i = 0; i < n; ++i) {
      if (!ok(i)) {
        flush();
        continue;
      }
      line += fmt::format("{},{} ", num(px(s.x[i])), num(py(s.y[i])));
    }
    flush();
    for (std::size_t i = 0; i < n; ++i) {
      if (!ok(i)) continue;
      const double x = px(s.x[i]);
      if (s.err.size() == n && std::isfinite(s.err[i]) && s.err[i] > 0) {
        const double lo = s.y[i] - s.err[i];
        const double y1 = py(logy && lo <= 0 ? ry.lo : lo), y2 = py(s.y[i] + s.err[i]);
        out += fmt::format("<path d=\"M{0} {1}V{2}M{3} {1}H{4}M{3} {2}H{4}\" stroke=\"{5}\" stroke-width=\"1.2\" "
                           "fill=\"none\"/>\n",
                           num(x), num(y1), num(y2), num(x - 4), num(x + 4), color);
      }
      if (n <= 60 && !s.reference) {
        out += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"3\" fill=\"{}\"/>\n", num(x), num(py(s.y[i])), color);
      }
      if (s.each.size() == n) {
        for (const double v : s.each[i]) {
          if (!usable(v, logy)) continue;
          out += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"2.5\" fill=\"none\" stroke=\"{}\" "
                             "stroke-width=\"1\" stroke-opacity=\"0.7\"/>\n",
                             num(x + 6), num(py(v)), color);
        }
      }
    }
  }
  // The legend, right of the plot.
  const double lx = right + kLegendGap;
  for (std::size_t k = 0; k < chart.series.size(); ++k) {
    const double ly = top + 10 + kLegendRow * static_cast<double>(k);
    const char* color = kColors[k % std::size(kColors)];
    out += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2.5\"{}/>\n",
                       num(lx), num(ly), num(lx + 18), num(ly), color,
                       chart.series[k].reference ? " stroke-dasharray=\"6 4\"" : "");
    out += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\">{}</text>\n", num(lx + 24), num(ly + 4),
                       escape(chart.series[k].name));
  }
}

double legend_width(const Chart& chart) {
  std::size_t longest = 4;
  for (const Series& s : chart.series) longest = std::max(longest, s.name.size());
  return kLegendGap + 24 + 6.5 * static_cast<double>(longest) + 12;
}

double chart_height(const Chart& chart) {
  const double plot_h = kChartHeight - kMarginTop - kMarginBottom;
  return kChartHeight + std::max(0.0, kLegendRow * static_cast<double>(chart.series.size()) - plot_h);
}

}  // namespace

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string render(const std::vector<Chart>& charts, const std::string& title) {
  double width = 0, height = 0;
  std::vector<double> x0;
  for (const Chart& c : charts) {
    x0.push_back(width);
    width += kMarginLeft + kPlotWidth + legend_width(c);
    height = std::max(height, chart_height(c));
  }
  width = std::max(width, 320.0);
  height += kTitleHeight;
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<title>{2}</title>\n"
      "<rect width=\"{0}\" height=\"{1}\" fill=\"#ffffff\"/>\n"
      "<text x=\"{3}\" y=\"22\" text-anchor=\"middle\" font-size=\"16\" font-weight=\"bold\">{2}</text>\n",
      num(width), num(height), escape(title), num(width / 2));
  for (std::size_t i = 0; i < charts.size(); ++i) {
    render_chart(out, charts[i], x0[i], kTitleHeight);
  }
  out += "</svg>\n";
  return out;
}

}  // namespace headroom::svg
