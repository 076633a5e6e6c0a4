#!/usr/bin/env python3
"""bench/real_data_recipe.py on a few generated JPEGs: a line a step with a finite loss, the layer
whose output was largest, and the count of steps past fp16's range, which counts every step when
that range is made 0 (so the check can fail). amp emulated on the CPU: GradScaler's rule (skip,
halve, unscale, grow) and fp16's range on the way forward and back, an overflowing scale skipping
every step and a small one none.

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
import torch  # noqa: E402


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
            self.assertEqual(len(s), 9, s)
            self.assertTrue(math.isfinite(float(s[1])), s)
            self.assertGreater(float(s[3]), 0.0, s)
            self.assertTrue(s[4], s)  # the layer's name
            self.assertIn(s[5], ("yes", "no"))
            self.assertEqual(s[6:8], ["-", "no"], s)  # fp32: no loss scale, nothing skipped
        self.assertEqual(past, sum(s[5] == "yes" for s in steps))
        self.assertEqual(lines[-1], f"{past} of 3 steps had an activation past fp16's largest finite value")

    def run_emulated_amp(self, initial_scale):
        saved = real_data_recipe.INITIAL_SCALE
        real_data_recipe.INITIAL_SCALE = initial_scale
        try:
            _, lines = self.run_recipe("--precision", "amp")
        finally:
            real_data_recipe.INITIAL_SCALE = saved
        return [line.split() for line in lines[1:-2]], lines

    def test_emulated_amp_skips_every_step_whose_scaled_gradients_pass_fp16(self):
        # 2^60 times any gradient is past 65,504: every step skipped in backward, the scale halved each time.
        steps, lines = self.run_emulated_amp(2.0 ** 60)
        self.assertEqual([s[7] for s in steps], ["backward"] * 3, lines)
        self.assertEqual([s[6] for s in steps], [f"{2.0 ** e:g}" for e in (60, 59, 58)], lines)
        self.assertEqual(lines[-1], f"3 of 3 steps skipped by loss scaling (emulated on the CPU), the scale ended at "
                                    f"{2.0 ** 57:g}")

    def test_emulated_amp_at_scale_one_skips_nothing(self):
        steps, lines = self.run_emulated_amp(1.0)
        self.assertEqual([s[7] for s in steps], ["no"] * 3, lines)
        self.assertEqual([s[6] for s in steps], ["1"] * 3, lines)
        self.assertEqual(lines[-1], "0 of 3 steps skipped by loss scaling (emulated on the CPU), the scale ended at 1")

    def test_emulated_amp_overflows_forward_whatever_the_scale(self):
        # A rate of 10^4 sends the first update's weights past fp16's range: from then on the first
        # convolution's output is inf as amp stores it, every step skips for it, scale 1 or not.
        saved = real_data_recipe.INITIAL_SCALE
        real_data_recipe.INITIAL_SCALE = 1.0
        try:
            _, lines = self.run_recipe("--precision", "amp", "--lr", "10000")
        finally:
            real_data_recipe.INITIAL_SCALE = saved
        steps = [line.split() for line in lines[1:-2]]
        self.assertEqual([(s[3], s[4], s[5], s[6], s[7]) for s in steps[1:]],
                         [("inf", "conv1", "yes", "1", "forward"), ("inf", "conv1", "yes", "0.5", "forward")], lines)
        self.assertEqual(steps[0][7], "no", lines)

    def test_the_emulated_scaler_is_gradscalers_rule(self):
        layer = torch.nn.Linear(2, 1, bias=False)
        opt = torch.optim.SGD(layer.parameters(), lr=1.0)
        scaler = real_data_recipe.EmulatedScaler()
        before = layer.weight.detach().clone()
        layer.weight.grad = torch.tensor([[float("inf"), 1.0]])
        self.assertTrue(scaler.step(opt, list(layer.parameters())))
        self.assertTrue(torch.equal(layer.weight.detach(), before))  # skipped: the weights untouched
        self.assertEqual(scaler.scale, 32768.0)
        layer.weight.grad = torch.tensor([[32768.0, -65536.0]])
        self.assertFalse(scaler.step(opt, list(layer.parameters())))
        self.assertTrue(torch.equal(layer.weight.detach(), before - torch.tensor([[1.0, -2.0]])))  # unscaled, then applied
        scaler.streak = real_data_recipe.GROWTH_INTERVAL - 1
        layer.weight.grad = torch.zeros(1, 2)
        self.assertFalse(scaler.step(opt, list(layer.parameters())))
        self.assertEqual((scaler.scale, scaler.streak), (65536.0, 0))  # grown after the interval's clean steps

    def test_fp16s_range_both_ways(self):
        x = torch.tensor([70000.0, 1.0, 1e-9], requires_grad=True)
        y = real_data_recipe.through_fp16(x)
        self.assertEqual(y.tolist(), [float("inf"), 1.0, 0.0])
        y.backward(torch.tensor([1.0, 70000.0, 1.0]))
        self.assertEqual(x.grad.tolist(), [1.0, float("inf"), 1.0])  # the gradient coming back is rounded too

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
