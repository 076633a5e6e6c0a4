#pragma once

#include <ostream>
#include <string>

#include "report_command.hpp"

namespace dlbench::cli {

// `dlbench compare BASELINE CANDIDATE`: whether each case got slower or faster, as a gate for a
// driver, an image or a cluster before and after. A case is slower (or faster) only when its
// throughput moved by at least `threshold` and its repeats show the move at p < alpha.
struct CompareOptions {
  std::string baseline;   // a status file with one run (or, without a candidate, two: the first the baseline)
  std::string candidate;  // likewise, measured after; empty: the baseline file's second run
  double threshold = 0.05;  // the least relative change that counts, 0 to < 1
  double alpha = 0.05;      // the significance level of the rank test, 0 < alpha < 1
  // Also fail when a case measured in the baseline cannot be judged: too few repeats, unstable or
  // disturbed on either side, or missing from the candidate.
  bool strict = false;
  ReportFormat format = ReportFormat::table;
};

// Exit code: 0 no case slower (and, with strict, every baseline measurement judged); 1 a case is
// slower, or measured in the baseline and failed in the candidate (or strict and not judged); 2
// the files cannot be compared (unreadable, invalid, not one run each, different models).
int run_compare(const CompareOptions& options, std::ostream& out, std::ostream& err);

}  // namespace dlbench::cli
