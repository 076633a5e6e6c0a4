#!/usr/bin/env python3
"""bench/real_data_recipe.py on a few generated JPEGs: a line a step with a finite loss, the layer
whose output was largest, and the count of steps past fp16's range, which counts every step when
that range is made 0 (so the check can fail).

    real_data_recipe_test.py PATH/dlbench-input    (run by a python3 that imports torch)
"""
import contextlib
import io
import math
import os
import subprocess
import sys
import tempfile
import unittest

INPUT = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else sys.exit(__doc__)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import real_data_recipe  # noqa: E402


class RealDataRecipe(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.TemporaryDirectory()
        cls.images = os.path.join(cls.work.name, "images")
        subprocess.run([INPUT, "generate", cls.images, "--classes", "4", "--per-class", "4"], check=True,
                       capture_output=True, timeout=120)

    @classmethod
    def tearDownClass(cls):
        cls.work.cleanup()

    def run_recipe(self, *extra):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            past = real_data_recipe.main([self.images, "--image", "32", "--batch", "8", "--steps", "3",
                                          "--threads", "1", *extra])
        return past, out.getvalue().splitlines()

    def test_a_line_a_step_and_the_steps_past_fp16(self):
        past, lines = self.run_recipe()
        steps = [line.split() for line in lines[1:-1]]
        self.assertEqual([int(s[0]) for s in steps], [1, 2, 3], lines)
        for s in steps:
            self.assertTrue(math.isfinite(float(s[1])), s)
            self.assertGreater(float(s[3]), 0.0, s)
            self.assertTrue(s[4], s)  # the layer's name
            self.assertIn(s[5], ("yes", "no"))
        self.assertEqual(past, sum(s[5] == "yes" for s in steps))
        self.assertEqual(lines[-1], f"{past} of 3 steps had an activation past fp16's largest finite value")

    def test_every_step_counts_where_fp16s_range_is_zero(self):
        saved = real_data_recipe.FP16_MAX
        real_data_recipe.FP16_MAX = 0.0
        try:
            past, lines = self.run_recipe("--warmup", "2")
        finally:
            real_data_recipe.FP16_MAX = saved
        self.assertEqual(past, 3, lines)


if __name__ == "__main__":
    unittest.main()
