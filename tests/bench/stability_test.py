#!/usr/bin/env python3
"""bench/stability.py applies dlbench-worker's stability rule: the cases of
tests/unit/statistics_test.cpp (Stability.AnotherRepeatWhileTheLastOnesSpreadTooMuch), and a
run_repeat driven through measure()."""
import os
import statistics
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import stability  # noqa: E402


class StabilityRule(unittest.TestCase):
    def test_another_repeat_while_the_last_ones_spread_too_much(self):
        bound = stability.DEFAULT_MAX_CV["cpu"]
        t = [10.0, 10.1]
        self.assertFalse(stability.measure_again(t, 3, 7, bound))  # not all repeats measured yet
        t.append(5.0)  # a disturbed repeat: cv 0.35
        self.assertTrue(stability.measure_again(t, 3, 7, bound))
        t.append(10.0)  # the disturbed one is still among the last 3
        self.assertTrue(stability.measure_again(t, 3, 7, bound))
        t += [10.05, 10.1]  # the last 3 agree: no more
        self.assertFalse(stability.measure_again(t, 3, 7, bound))
        # At the limit it stops; one repeat cannot spread; extraRepeats 0 only judges.
        self.assertFalse(stability.measure_again([10.0, 5.0, 10.0, 5.0, 10.0, 5.0], 3, 3, bound))
        self.assertFalse(stability.measure_again([1.0, 9.0], 1, 7, bound))
        self.assertFalse(stability.measure_again([10.0, 5.0, 10.0], 3, 0, bound))

    def test_cv_is_the_sample_standard_deviation_over_the_mean(self):
        # The worker's words for {5, 10, 5}: "cv 43.3%".
        self.assertAlmostEqual(stability.cv([5.0, 10.0, 5.0]), 0.433, places=3)
        self.assertEqual(stability.cv([7.0]), 0.0)

    def test_measure_reports_the_last_repeats_and_keeps_the_others(self):
        values = iter([10.0, 10.1, 5.0, 10.0, 10.05, 10.1, 99.0])
        result = stability.measure(lambda: next(values), 3, 7, 0.05)
        self.assertEqual(result["repeats"], [10.0, 10.05, 10.1])
        self.assertEqual(result["discarded"], [10.0, 10.1, 5.0])
        self.assertEqual(result["median"], 10.05)
        self.assertEqual(result["stability"], "stable")
        self.assertAlmostEqual(result["cv"], statistics.stdev([10.0, 10.05, 10.1]) / 10.05)

    def test_measure_stops_at_the_limit_and_says_unstable(self):
        values = iter([10.0, 5.0] * 10)
        result = stability.measure(lambda: next(values), 3, 2, 0.02)
        self.assertEqual(len(result["repeats"]) + len(result["discarded"]), 5)
        self.assertEqual(result["stability"], "unstable")


if __name__ == "__main__":
    unittest.main()
