#include "scaling_plot.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <set>
#include <sstream>

#include "status_sources.hpp"

namespace dlbench::cli {
namespace {

constexpr double kPanelWidth = 460, kPanelHeight = 320, kMarginLeft = 70, kMarginTop = 40, kMarginBottom = 50,
                 kGap = 90, kLegendHeight = 22;
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};

std::string number(double v) {
  std::ostringstream s;
  if (v >= 100) {
    s << std::fixed << std::setprecision(0) << v;
  } else if (v >= 10) {
    s << std::fixed << std::setprecision(1) << v;
  } else {
    s << std::fixed << std::setprecision(2) << v;
  }
  return s.str();
}

// A "nice" upper bound and tick step for an axis starting at 0.
std::pair<double, double> nice_axis(double max_value) {
  if (!(max_value > 0)) return {1.0, 0.25};
  const double raw = max_value / 4.0;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (const double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * magnitude >= raw) {
      step = m * magnitude;
      break;
    }
  }
  return {std::ceil(max_value / step) * step, step};
}

struct Panel {
  double x0, y0;  // top-left of the plotting area
  int max_devices;
  double y_max;

  double x(int devices) const {
    const double span = std::max(1.0, std::log2(static_cast<double>(max_devices)));
    return x0 + (max_devices == 1 ? kPanelWidth / 2 : std::log2(static_cast<double>(devices)) / span * kPanelWidth);
  }
  double y(double value) const { return y0 + kPanelHeight - value / y_max * kPanelHeight; }
};

void axes(std::ostringstream& svg, const Panel& p, const std::set<int>& ticks, double step, const std::string& title,
          const std::string& y_label) {
  svg << "<text x=\"" << p.x0 + kPanelWidth / 2 << "\" y=\"" << p.y0 - 14
      << "\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">" << xml_escape(title) << "</text>\n";
  for (double v = 0; v <= p.y_max + 1e-9; v += step) {
    svg << "<line x1=\"" << p.x0 << "\" x2=\"" << p.x0 + kPanelWidth << "\" y1=\"" << p.y(v) << "\" y2=\"" << p.y(v)
        << "\" stroke=\"#e0e0e0\"/>\n";
    std::ostringstream label;  // as many decimals as the step needs
    label << std::fixed << std::setprecision(step >= 1 ? 0 : step >= 0.1 ? 1 : 2) << v;
    svg << "<text x=\"" << p.x0 - 8 << "\" y=\"" << p.y(v) + 4 << "\" text-anchor=\"end\" font-size=\"11\">"
        << label.str() << "</text>\n";
  }
  for (const int d : ticks) {
    svg << "<line x1=\"" << p.x(d) << "\" x2=\"" << p.x(d) << "\" y1=\"" << p.y0 << "\" y2=\"" << p.y0 + kPanelHeight
        << "\" stroke=\"#f0f0f0\"/>\n";
    svg << "<text x=\"" << p.x(d) << "\" y=\"" << p.y0 + kPanelHeight + 18 << "\" text-anchor=\"middle\" font-size=\"11\">"
        << d << "</text>\n";
  }
  svg << "<rect x=\"" << p.x0 << "\" y=\"" << p.y0 << "\" width=\"" << kPanelWidth << "\" height=\"" << kPanelHeight
      << "\" fill=\"none\" stroke=\"#333\"/>\n";
  svg << "<text x=\"" << p.x0 + kPanelWidth / 2 << "\" y=\"" << p.y0 + kPanelHeight + 40
      << "\" text-anchor=\"middle\" font-size=\"12\">devices (nodes × GPUs)</text>\n";
  svg << "<text transform=\"translate(" << p.x0 - 52 << "," << p.y0 + kPanelHeight / 2
      << ") rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">" << xml_escape(y_label) << "</text>\n";
}

void line(std::ostringstream& svg, const Panel& p, const std::vector<int>& devices, const std::vector<double>& values,
          const char* color) {
  std::string points;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    if (std::isnan(values[i])) continue;
    points += std::to_string(p.x(devices[i])) + "," + std::to_string(p.y(values[i])) + " ";
    svg << "<circle cx=\"" << p.x(devices[i]) << "\" cy=\"" << p.y(values[i]) << "\" r=\"4\" fill=\"" << color
        << "\"><title>" << devices[i] << " devices: " << number(values[i]) << "</title></circle>\n";
  }
  svg << "<polyline points=\"" << points << "\" fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\"/>\n";
}

}  // namespace

std::string render_scaling_svg(const std::vector<ScalingSeries>& series) {
  std::set<int> ticks;
  double max_throughput = 0, max_speedup = 1;
  int max_devices = 1;
  for (const auto& s : series) {
    for (std::size_t i = 0; i < s.devices.size(); ++i) {
      ticks.insert(s.devices[i]);
      max_devices = std::max(max_devices, s.devices[i]);
      max_throughput = std::max(max_throughput, s.throughput[i]);
      if (!std::isnan(s.speedup[i])) max_speedup = std::max(max_speedup, s.speedup[i]);
    }
  }
  max_speedup = std::max(max_speedup, static_cast<double>(max_devices));  // room for the ideal line
  const auto [throughput_max, throughput_step] = nice_axis(max_throughput * 1.05);
  const auto [speedup_max, speedup_step] = nice_axis(max_speedup);
  const Panel left{kMarginLeft, kMarginTop, max_devices, throughput_max};
  const Panel right{kMarginLeft + kPanelWidth + kGap, kMarginTop, max_devices, speedup_max};
  const double width = 2 * kPanelWidth + kGap + kMarginLeft + 30;
  const double height = kMarginTop + kPanelHeight + kMarginBottom + kLegendHeight * (static_cast<double>(series.size()) + 1) + 10;

  std::ostringstream svg;
  svg << std::fixed << std::setprecision(1);
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" font-family=\"DejaVu Sans, Arial, sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  axes(svg, left, ticks, throughput_step, "Throughput", series.empty() ? "samples/s" : series.front().unit);
  axes(svg, right, ticks, speedup_step, "Speed-up over 1×1", "speed-up");
  // The ideal: speed-up equal to the number of devices.
  std::string ideal;
  for (const int d : ticks) ideal += std::to_string(right.x(d)) + "," + std::to_string(right.y(d)) + " ";
  svg << "<polyline points=\"" << ideal << "\" fill=\"none\" stroke=\"#777\" stroke-dasharray=\"6,4\"/>\n";
  for (std::size_t i = 0; i < series.size(); ++i) {
    const char* color = kColors[i % (sizeof kColors / sizeof kColors[0])];
    line(svg, left, series[i].devices, series[i].throughput, color);
    line(svg, right, series[i].devices, series[i].speedup, color);
  }
  double legend_y = kMarginTop + kPanelHeight + kMarginBottom + 14;
  for (std::size_t i = 0; i < series.size(); ++i, legend_y += kLegendHeight) {
    const char* color = kColors[i % (sizeof kColors / sizeof kColors[0])];
    svg << "<line x1=\"" << kMarginLeft << "\" x2=\"" << kMarginLeft + 24 << "\" y1=\"" << legend_y - 4 << "\" y2=\""
        << legend_y - 4 << "\" stroke=\"" << color << "\" stroke-width=\"3\"/>\n";
    svg << "<text x=\"" << kMarginLeft + 32 << "\" y=\"" << legend_y << "\" font-size=\"12\">" << xml_escape(series[i].label)
        << "</text>\n";
  }
  svg << "<line x1=\"" << kMarginLeft << "\" x2=\"" << kMarginLeft + 24 << "\" y1=\"" << legend_y - 4 << "\" y2=\""
      << legend_y - 4 << "\" stroke=\"#777\" stroke-dasharray=\"6,4\"/>\n";
  svg << "<text x=\"" << kMarginLeft + 32 << "\" y=\"" << legend_y << "\" font-size=\"12\">ideal (linear) speed-up</text>\n";
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace dlbench::cli
