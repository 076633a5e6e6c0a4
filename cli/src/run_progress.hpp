// Where a long `dlbench run` stands (issue 35: a sweep of many cases printed nothing between a
// case's start and its result but the repeats): cases done and planned, the current case, and an
// estimate of the time left, printed after every repeat.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

namespace dlbench::cli {

class RunProgress {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  // `repeats_per_case`: methodology.repeats, the unit of work the estimate counts (a case measured
  // again takes more; the estimate then catches up from the time actually spent).
  RunProgress(int planned_cases, int repeats_per_case, Clock clock = std::chrono::steady_clock::now);

  void case_started(const std::string& id);  // a case that will run (not one skipped)
  void case_ended();                          // ran or skipped: one more case done
  void repeat_done();                         // one more repeat of the current case
  // "case 2/8 1x2-bs8-fp32, repeat 3 of 7; 9 of 56 repeats done in 0:42, about 3:39 left"
  std::string line() const;
  // The estimate alone, in seconds; NaN before the first repeat ends.
  double seconds_left() const;

 private:
  int planned_cases_, repeats_per_case_;
  Clock clock_;
  std::chrono::steady_clock::time_point start_;
  int cases_done_ = 0;
  int repeats_done_ = 0;        // over the run, counted at most repeats_per_case per case
  int repeats_this_case_ = 0;   // may exceed repeats_per_case when measured again
  std::string current_;
};

// Whether a line of the worker's (or dlbench-exec's) output says a repeat finished:
// "  case 1x2-bs8-fp32 repeat 3/7: 41.41 samples/s", not a message that mentions a repeat
// ("… Failed: LossNotFinite: the loss after repeat 3 was NaN …").
bool is_repeat_line(std::string_view line);

// 75 s → "1:15"; an hour or more → "1:02:03".
std::string clock_time(double seconds);

}  // namespace dlbench::cli
