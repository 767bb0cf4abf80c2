#include "examples/plot.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace kiln::examples {
namespace {

// Past these a row was mistimed (no GPU runs so fast, no kernel so far ahead of cuBLAS), and the
// chart's scale would overflow: such rows and ratios are not drawn.
constexpr double kLargestTflops = 1e9, kLargestRatio = 1e12;
// The most gridlines a chart draws; a taller scale takes a coarser step.
constexpr double kMostGridlines = 20;

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                   "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22"};

std::string ShapeName(const rt::GemmSize& s) { return absl::StrCat(s.m, "x", s.n, "x", s.k); }

std::string Escape(const std::string& text) {
  std::string out;
  for (char c : text)
    out += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
  return out;
}

// A chart frame: width x height with margins, y from 0 to y_max with gridlines.
struct Frame {
  double width, height, left = 60, right = 170, top = 40, bottom = 110, y_max;
  double X(double fraction) const { return left + fraction * (width - left - right); }
  double Y(double v) const { return top + (1 - v / y_max) * (height - top - bottom); }
  std::string Open(const std::string& title, const std::string& y_label, double step) const {
    std::string s = absl::StrFormat(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
        "font-family=\"sans-serif\" "
        "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
        "<text x=\"%.0f\" y=\"22\" font-size=\"14\">%s</text>\n",
        width, height, left, Escape(title));
    // At most kMostGridlines, on a step of 1, 2 or 5 times a power of ten (a mistimed row's
    // ratio drew a line per step up to it).
    if (y_max / step > kMostGridlines) {
      const double power = std::pow(10.0, std::floor(std::log10(y_max / 10)));
      step = power * (y_max / 10 <= power       ? 1
                      : y_max / 10 <= 2 * power ? 2
                      : y_max / 10 <= 5 * power ? 5
                                                : 10);
    }
    for (double v = 0; v <= y_max + 1e-9; v += step)
      absl::StrAppendFormat(
          &s,
          "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
          X(0), X(1), Y(v), Y(v), X(0) - 4, Y(v) + 4, v);
    absl::StrAppendFormat(
        &s, "<text transform=\"translate(14,%.0f) rotate(-90)\" text-anchor=\"middle\">%s</text>\n",
        (top + height - bottom) / 2, Escape(y_label));
    return s;
  }
  std::string XLabel(double x, const std::string& text) const {
    return absl::StrFormat(
        "<text transform=\"translate(%.1f,%.1f) rotate(-60)\" text-anchor=\"end\">%s</text>\n", x,
        height - bottom + 12, Escape(text));
  }
};

}  // namespace

absl::StatusOr<std::vector<GemmResult>> ReadResultsTsv(const std::string& path) {
  if (std::filesystem::is_directory(path))
    return absl::InvalidArgumentError(absl::StrCat(path, " is a directory, not a results TSV"));
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::vector<GemmResult> results;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> w = absl::StrSplit(line, '\t');
    GemmResult r;
    // A GEMM row as TsvRow (harness.cc) writes it, 12 columns; the row ops' rows are skipped.
    if (w.size() != 12 || !absl::SimpleAtoi(w[1], &r.size.m) ||
        !absl::SimpleAtoi(w[2], &r.size.n) || !absl::SimpleAtoi(w[3], &r.size.k) ||
        !absl::SimpleAtod(w[5], &r.tflops) || !absl::SimpleAtod(w[7], &r.cublas_tflops))
      continue;
    r.name = w[0];
    // A row a chart cannot place (a size below 1, a rate not positive or past the mistimed-row
    // bound above) is skipped like a row of another kind.
    r.passed = w[11] == "ok" && r.size.m > 0 && r.size.n > 0 && r.size.k > 0 && r.tflops > 0 &&
               r.tflops < kLargestTflops && r.cublas_tflops >= 0 &&
               r.cublas_tflops < kLargestTflops;
    if (r.passed) results.push_back(r);
  }
  if (results.empty())
    return absl::InvalidArgumentError(absl::StrCat(path, " has no timed GEMM rows"));
  return results;
}

// Names in order of first appearance, each once (a set beside the order: a chart of many rows
// must not search its list for each).
struct FirstSeen {
  std::vector<std::string> order;
  std::set<std::string> seen;
  void Add(const std::string& name) {
    if (seen.insert(name).second) order.push_back(name);
  }
};

std::string RatioChart(const std::vector<GemmResult>& results, const std::string& title) {
  FirstSeen shape_names, kernel_names;
  const std::vector<std::string>&shapes = shape_names.order, &kernels = kernel_names.order;
  std::map<std::string, std::map<std::string, double>> ratio;  // kernel -> shape -> ratio
  double y_max = 1.2;
  for (const GemmResult& r : results) {
    if (r.cublas_tflops <= 0 || !(r.tflops / r.cublas_tflops < kLargestRatio)) continue;
    const std::string shape = ShapeName(r.size);
    shape_names.Add(shape);
    kernel_names.Add(r.name);
    ratio[r.name][shape] = r.tflops / r.cublas_tflops;
    y_max = std::max(y_max, r.tflops / r.cublas_tflops);
  }
  // Tall enough for the legend: a line of it per kernel.
  Frame f{std::max(480.0, 240.0 + 26.0 * shapes.size()),
          std::max(460.0, 170.0 + 14.0 * kernels.size()),
          60,
          170,
          40,
          110,
          std::ceil(y_max * 5) / 5};
  auto x_of = [&](size_t i) {
    return f.X(shapes.size() > 1 ? static_cast<double>(i) / (shapes.size() - 1) : 0.5);
  };
  std::string s = f.Open(title, "TFLOPS / cuBLAS's, same process", 0.2);
  absl::StrAppendFormat(&s,
                        "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"black\" "
                        "stroke-dasharray=\"4 3\"/>\n",
                        f.X(0), f.X(1), f.Y(1), f.Y(1));
  std::map<std::string, size_t> shape_column;
  for (size_t i = 0; i < shapes.size(); ++i) {
    s += f.XLabel(x_of(i), shapes[i]);
    shape_column[shapes[i]] = i;
  }
  for (size_t k = 0; k < kernels.size(); ++k) {
    const char* color = kColors[k % std::size(kColors)];
    std::string points;
    std::map<size_t, double> along;  // the kernel's points by shape column (its shapes alone)
    for (const auto& [shape, value] : ratio[kernels[k]]) along[shape_column[shape]] = value;
    for (const auto& [i, value] : along) {
      absl::StrAppendFormat(&points, "%.1f,%.1f ", x_of(i), f.Y(value));
      absl::StrAppendFormat(&s, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n",
                            x_of(i), f.Y(value), color);
    }
    absl::StrAppendFormat(&s, "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\"/>\n", points,
                          color);
    absl::StrAppendFormat(&s, "<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\">%s</text>\n", f.X(1) + 10,
                          f.top + 14.0 * (k + 1), color, Escape(kernels[k]));
  }
  return s + "</svg>\n";
}

std::string ProgressionChart(const std::vector<GemmResult>& results, const std::string& title) {
  // Series in order of appearance, each with its versions in order and their results by shape.
  FirstSeen series_names, shape_names;
  const std::vector<std::string>&series = series_names.order, &shapes = shape_names.order;
  std::map<std::string, FirstSeen> versions;
  std::map<std::string, std::map<std::string, const GemmResult*>> at;  // kernel -> shape -> result
  for (const GemmResult& r : results) {
    const std::string s = r.name.substr(0, r.name.find('/'));
    series_names.Add(s);
    versions[s].Add(r.name);
    at[r.name][ShapeName(r.size)] = &r;
    shape_names.Add(ShapeName(r.size));
  }
  // One shape for everything: the first that every kernel has.
  std::map<std::string, size_t> kernels_with;  // shape -> kernels that have it
  for (const auto& [kernel, by_shape] : at)
    for (const auto& [s, result] : by_shape) ++kernels_with[s];
  std::string shape;
  for (const std::string& candidate : shapes)
    if (kernels_with[candidate] == at.size()) {
      shape = candidate;
      break;
    }
  if (shape.empty() && !shapes.empty()) shape = shapes.front();
  size_t bars = 0;
  double y_max = 100;
  for (const auto& [kernel, by_shape] : at)
    if (auto it = by_shape.find(shape); it != by_shape.end()) {
      ++bars;
      y_max = std::max({y_max, it->second->tflops, it->second->cublas_tflops});
    }
  Frame f{std::max(480.0, 240.0 + 18.0 * (bars + series.size())),
          460,
          60,
          170,
          40,
          110,
          std::ceil(y_max / 100) * 100};
  std::string s = f.Open(absl::StrCat(title, " (", shape, ")"), "TFLOPS", 100);
  const double slot = 1.0 / std::max<size_t>(1, bars + series.size());
  size_t pos = 0;
  for (size_t i = 0; i < series.size(); ++i) {
    const char* color = kColors[i % std::size(kColors)];
    const size_t first = pos;
    double cublas = 0;
    for (const std::string& v : versions[series[i]].order) {
      auto it = at[v].find(shape);
      if (it == at[v].end()) continue;
      const double x0 = f.X(slot * pos), x1 = f.X(slot * (pos + 0.8));
      absl::StrAppendFormat(
          &s, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n", x0,
          f.Y(it->second->tflops), x1 - x0, f.Y(0) - f.Y(it->second->tflops), color);
      s += f.XLabel((x0 + x1) / 2, v);
      cublas = std::max(cublas, it->second->cublas_tflops);
      ++pos;
    }
    if (pos > first && cublas > 0)
      absl::StrAppendFormat(
          &s,
          "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"black\" "
          "stroke-dasharray=\"4 3\"/>\n",
          f.X(slot * first), f.X(slot * pos), f.Y(cublas), f.Y(cublas));
    ++pos;  // a gap between series
  }
  absl::StrAppendFormat(&s, "<text x=\"%.1f\" y=\"%.1f\">dashed: cuBLAS</text>\n", f.X(1) + 10,
                        f.top + 14.0);
  return s + "</svg>\n";
}

}  // namespace kiln::examples
