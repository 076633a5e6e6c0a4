#pragma once

#include <string>
#include <vector>

namespace dlbench::cli {

// One line of the scaling plot: a run × precision × batch size.
struct ScalingSeries {
  std::string label;                 // "quickstart fp32 bs8"
  std::vector<int> devices;          // ascending
  std::vector<double> throughput;    // in `unit`
  std::string unit = "samples/s";    // "sequences/s" for a sequence model
  std::vector<double> speedup;       // NaN where there is no 1×1 baseline
};

// Two panels: throughput against devices, and speed-up against devices with the ideal
// (linear) line; devices on a log2 axis. Returns a standalone SVG document.
std::string render_scaling_svg(const std::vector<ScalingSeries>& series);

}  // namespace dlbench::cli
