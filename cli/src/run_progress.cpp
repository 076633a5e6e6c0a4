#include "run_progress.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace dlbench::cli {

RunProgress::RunProgress(int planned_cases, int repeats_per_case, Clock clock)
    : planned_cases_(std::max(0, planned_cases)),
      repeats_per_case_(std::max(1, repeats_per_case)),
      clock_(std::move(clock)),
      start_(clock_()) {}

void RunProgress::case_started(const std::string& id) {
  current_ = id;
  repeats_this_case_ = 0;
}

void RunProgress::case_ended() {
  // A case skipped, failed early or measured again counts as its planned repeats: what is left
  // is what the estimate is about.
  repeats_done_ += repeats_per_case_ - std::min(repeats_this_case_, repeats_per_case_);
  cases_done_ = std::min(cases_done_ + 1, planned_cases_);
  repeats_this_case_ = 0;
  current_.clear();
}

void RunProgress::repeat_done() {
  ++repeats_this_case_;
  if (repeats_this_case_ <= repeats_per_case_) ++repeats_done_;
}

double RunProgress::seconds_left() const {
  const double elapsed = std::chrono::duration<double>(clock_() - start_).count();
  const int total = planned_cases_ * repeats_per_case_;
  if (repeats_done_ <= 0) return std::nan("");
  return elapsed / repeats_done_ * std::max(0, total - repeats_done_);
}

std::string RunProgress::line() const {
  const double elapsed = std::chrono::duration<double>(clock_() - start_).count();
  std::string out = "case " + std::to_string(std::min(cases_done_ + 1, planned_cases_)) + "/" +
                    std::to_string(planned_cases_);
  if (!current_.empty()) {
    out += " " + current_ + ", repeat " + std::to_string(repeats_this_case_) + " of " + std::to_string(repeats_per_case_);
    if (repeats_this_case_ > repeats_per_case_) out += " (measured again)";
  }
  out += "; " + std::to_string(repeats_done_) + " of " + std::to_string(planned_cases_ * repeats_per_case_) +
         " repeats done in " + clock_time(elapsed);
  const double left = seconds_left();
  out += std::isnan(left) ? ", time left not known yet" : ", about " + clock_time(left) + " left";
  return out;
}

bool is_repeat_line(std::string_view line) {
  const auto begin = line.find_first_not_of(' ');
  if (begin == std::string_view::npos) return false;
  line.remove_prefix(begin);
  if (!line.starts_with("case ")) return false;
  const auto at = line.find(" repeat ");
  if (at == std::string_view::npos) return false;
  const std::string_view count = line.substr(at + 8);  // "3/7: …"
  const auto digits = count.find_first_not_of("0123456789");
  return digits != 0 && digits != std::string_view::npos && count[digits] == '/';
}

std::string clock_time(double seconds) {
  const long total = std::lround(std::max(0.0, seconds));
  char buffer[32];
  if (total >= 3600) {
    std::snprintf(buffer, sizeof buffer, "%ld:%02ld:%02ld", total / 3600, total / 60 % 60, total % 60);
  } else {
    std::snprintf(buffer, sizeof buffer, "%ld:%02ld", total / 60, total % 60);
  }
  return buffer;
}

}  // namespace dlbench::cli
