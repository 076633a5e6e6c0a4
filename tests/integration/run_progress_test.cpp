// `dlbench run`'s progress line against a clock the test moves.
#include <chrono>
#include <cmath>

#include <gtest/gtest.h>

#include "run_progress.hpp"

namespace dlbench::cli {
namespace {

TEST(RunProgress, CountsCasesAndRepeatsAndEstimatesWhatIsLeft) {
  auto now = std::chrono::steady_clock::time_point{};
  RunProgress p(4, 3, [&] { return now; });
  p.case_started("1x1-bs8-fp32");
  EXPECT_EQ(p.line(), "case 1/4 1x1-bs8-fp32, repeat 0 of 3; 0 of 12 repeats done in 0:00, time left not known yet");
  EXPECT_TRUE(std::isnan(p.seconds_left()));
  now += std::chrono::seconds(10);
  p.repeat_done();
  now += std::chrono::seconds(10);
  p.repeat_done();
  // 2 repeats in 20 s: 10 s each, 10 repeats left.
  EXPECT_EQ(p.line(), "case 1/4 1x1-bs8-fp32, repeat 2 of 3; 2 of 12 repeats done in 0:20, about 1:40 left");
  now += std::chrono::seconds(10);
  p.repeat_done();
  p.repeat_done();  // measured again: the work left does not shrink
  EXPECT_EQ(p.line(), "case 1/4 1x1-bs8-fp32, repeat 4 of 3 (measured again); 3 of 12 repeats done in 0:30, "
                      "about 1:30 left");
  p.case_ended();
  p.case_ended();  // a case skipped counts as its repeats done
  p.case_started("1x4-bs8-fp32");
  EXPECT_EQ(p.line(), "case 3/4 1x4-bs8-fp32, repeat 0 of 3; 6 of 12 repeats done in 0:30, about 0:30 left");
  p.case_ended();
  p.case_ended();
  EXPECT_EQ(p.line(), "case 4/4; 12 of 12 repeats done in 0:30, about 0:00 left");
}

// Only a finished repeat's line moves the count: a LossNotFinite message that names a repeat once
// made `dlbench run` print "repeat 4 of 3 (measured again)".
TEST(RunProgress, ARepeatLineIsTheWorkersNotAMessageNamingARepeat) {
  EXPECT_TRUE(is_repeat_line("    case 1x2-bs8-fp32 repeat 3/7: 41.41 samples/s"));
  EXPECT_TRUE(is_repeat_line("case 1x1-bs2-fp32 repeat 4/3 (again: the last repeats spread too much): 6.12 samples/s"));
  EXPECT_TRUE(is_repeat_line("  case 1x1-bs2-fp32 repeat 1/5: 2.87 samples/s, loss not finite: stopping"));
  EXPECT_FALSE(is_repeat_line("  dlbench-exec: case 1x1-bs4-fp32 Failed: LossNotFinite: the loss after repeat 3 was NaN"));
  EXPECT_FALSE(is_repeat_line("case 1x1 repeat after repeat"));
  EXPECT_FALSE(is_repeat_line("case 1x1 repeat 12"));
  EXPECT_FALSE(is_repeat_line(""));
}

TEST(RunProgress, ClockTime) {
  EXPECT_EQ(clock_time(0), "0:00");
  EXPECT_EQ(clock_time(75.4), "1:15");
  EXPECT_EQ(clock_time(3723), "1:02:03");
  EXPECT_EQ(clock_time(-5), "0:00");
}

}  // namespace
}  // namespace dlbench::cli
