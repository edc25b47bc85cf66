// SPDX-License-Identifier: MIT
// SVG pieces the command-line tool draws with: escaping, wrapped titles, tick steps, the colours
// of the components, and a chart of bytes against a GPU's capacity.
#pragma once

#include <cmath>
#include <ostream>
#include <string>
#include <vector>
#include <vramfit/vramfit.hpp>

namespace vramfit::cli {

namespace svg {
inline std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}
/// The title as lines of at most `width` characters, broken at " | ".
inline std::vector<std::string> wrap(const std::string& title, std::size_t width = 92) {
  std::vector<std::string> lines{""};
  std::size_t at = 0;
  while (at <= title.size()) {
    const std::size_t bar = title.find(" | ", at);
    const std::string piece =
        title.substr(at, bar == std::string::npos ? std::string::npos : bar - at);
    if (!lines.back().empty() && lines.back().size() + 3 + piece.size() > width)
      lines.emplace_back();
    lines.back() += (lines.back().empty() ? "" : " | ") + piece;
    if (bar == std::string::npos) break;
    at = bar + 3;
  }
  return lines;
}

/// Writes the wrapped title from y = 24 on and returns the y below it.
inline double title(std::ostream& out, const std::string& text, double x) {
  double y = 24;
  for (const std::string& line : wrap(text)) {
    out << "<text x=\"" << x << "\" y=\"" << y << "\" font-size=\"15\">" << escape(line)
        << "</text>\n";
    y += 20;
  }
  return y;
}

/// A round step for about five ticks up to `most` bytes: 1, 2 or 5 x 10^k GiB.
inline double tick_step(double most) {
  const double gib = static_cast<double>(GiB.size);
  double step = gib;
  for (double scale = 1; step * 5 < most; scale *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      step = m * scale * gib;
      if (step * 5 >= most) break;
    }
  }
  while (step / 2 * 5 >= most && step > gib / 4) step /= 2;
  return step;
}

inline const char* colors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                               "#59a14f", "#edc948", "#b07aa1", "#9c755f"};

/// A chart of bytes (y, from 0 on a GiB scale up to at least `most`) against some x: the
/// constructor writes the <svg> element, the title, the axes and the scale; the caller draws its
/// points at y_of(bytes); end() draws the GPU's capacity and the x axis's name and closes it.
class bytes_chart {
 public:
  static constexpr double left = 80, right = 30, height = 300;

  bytes_chart(std::ostream& out, const std::string& title, double width, double most)
      : out_(out), width_(width), top_(40 + 20 * static_cast<double>(wrap(title).size())) {
    const double step = tick_step(most);
    const double ticks = std::ceil(most / step);
    most_ = ticks * step;
    out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\""
        << top_ + height + 60 << "\" font-family=\"sans-serif\" font-size=\"13\">\n<title>"
        << escape(title) << "</title>\n";
    svg::title(out, title, left);
    out << "<line x1=\"" << left << "\" y1=\"" << top_ << "\" x2=\"" << left << "\" y2=\""
        << bottom() << "\" stroke=\"#000\"/>\n<line x1=\"" << left << "\" y1=\"" << bottom()
        << "\" x2=\"" << width - right << "\" y2=\"" << bottom() << "\" stroke=\"#000\"/>\n";
    for (double tick = 0; tick <= ticks; ++tick) {
      const double b = step * tick;
      out << "<text x=\"" << left - 6 << "\" y=\"" << y_of(b) + 4 << "\" text-anchor=\"end\">"
          << escape(to_string(bytes{static_cast<std::int64_t>(b)}, GiB)) << "</text>\n";
    }
  }

  [[nodiscard]] double y_of(double b) const { return top_ + height - height * b / most_; }
  [[nodiscard]] double bottom() const { return top_ + height; }
  [[nodiscard]] double width() const { return width_; }

  void end(const gpu& device, const std::string& x_axis) {
    const double cap = y_of(static_cast<double>(device.capacity.count));
    out_ << "<line x1=\"" << left << "\" y1=\"" << cap << "\" x2=\"" << width_ - right << "\" y2=\""
         << cap << "\" stroke=\"#e15759\" stroke-dasharray=\"6,4\"/>\n<text x=\"" << width_ - right
         << "\" y=\"" << cap - 6 << "\" text-anchor=\"end\" fill=\"#e15759\">"
         << escape(device.name) << " capacity " << escape(to_string(device.capacity))
         << "</text>\n<text x=\"" << (left + width_ - right) / 2 << "\" y=\"" << bottom() + 44
         << "\" text-anchor=\"middle\">" << escape(x_axis) << "</text>\n</svg>\n";
  }

 private:
  std::ostream& out_;
  double width_, top_, most_ = 0;
};
}  // namespace svg

}  // namespace vramfit::cli
