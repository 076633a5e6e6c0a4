#!/usr/bin/env python3
"""bench/pytorch_profile.py, the PyTorch side of gpu_check.sh's "where a step goes": its charging
of time to op kinds (on a GPU: kernels to the aten op that launched them, rehearsed here with the
profiler's event shapes), and bench/pytorch_resnet50.py --profile on the CPU with Debian's PyTorch.

    pytorch_profile_test.py   (run by a python3 that imports torch and torchvision)
"""
import json
import os
import subprocess
import sys
import types
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BENCH = os.path.join(ROOT, "bench")
sys.path.insert(0, BENCH)
import pytorch_profile  # noqa: E402 (bench/, found above)

CPU = types.SimpleNamespace(name="CPU")
CUDA = types.SimpleNamespace(name="CUDA")


def event(name, parent=None, device=CPU, self_device_us=0.0, span_us=0.0, modern=True, is_async=False,
          start_us=100.0, thread=1):
    """A profiler event as FunctionEvent shapes it: PyTorch 2.x names the self time on a device
    self_device_time_total, 1.13 self_cuda_time_total."""
    fields = dict(name=name, cpu_parent=parent, device_type=device, is_async=is_async, thread=thread,
                  time_range=types.SimpleNamespace(start=start_us, end=start_us + span_us))
    fields["self_device_time_total" if modern else "self_cuda_time_total"] = self_device_us
    return types.SimpleNamespace(**fields)


class Kinds(unittest.TestCase):
    def test_resnet_ops_land_in_their_kinds(self):
        expected = {
            "aten::cudnn_convolution": "convolution", "aten::convolution_backward": "convolution",
            "aten::mkldnn_convolution": "convolution", "aten::cudnn_batch_norm": "batch norm",
            "aten::native_batch_norm_backward": "batch norm", "aten::relu_": "relu",
            "aten::threshold_backward": "relu", "aten::max_pool2d_with_indices_backward": "pooling",
            "aten::addmm": "linear", "aten::mm": "linear", "aten::_log_softmax": "softmax and loss",
            "aten::nll_loss_forward": "softmax and loss", "aten::add_": "add", "aten::add": "add",
            "aten::_foreach_add_": "optimizer", "aten::_fused_sgd_": "optimizer",
            "aten::_amp_foreach_non_finite_check_and_unscale_": "optimizer",
            "Optimizer.step: aten::mul_": "optimizer", "aten::copy_": "casts and copies",
            "aten::fill_": "fill", "aten::native_layer_norm": "layer norm", "aten::empty": "other",
            "aten::gelu_backward": "gelu", "aten::native_dropout": "dropout", "aten::bernoulli_": "dropout",
            "aten::embedding_dense_backward": "embedding", "aten::sum": "reductions", "aten::bmm": "linear",
        }
        for op, kind in expected.items():
            self.assertEqual(pytorch_profile.kind_of(op), kind, op)


class Charging(unittest.TestCase):
    def assertAlmostEqualTables(self, got, expected):
        self.assertEqual(set(got), set(expected), got)
        for key, value in expected.items():
            self.assertAlmostEqual(got[key], value, places=12, msg=key)

    def test_kernels_are_charged_once_to_the_aten_op_that_launched_them(self):
        step = event("ProfilerStep#1")
        conv = event("aten::cudnn_convolution", parent=event("aten::convolution", parent=step))
        launch = event("cudaLaunchKernel", parent=conv, self_device_us=0.0)
        conv.self_device_time_total = 3000.0  # its two kernels, linked to it
        bn = event("aten::cudnn_batch_norm", parent=step, self_device_us=1000.0)
        optimizer = event("Optimizer.step#SGD.step", parent=step)
        foreach = event("aten::_foreach_add_", parent=optimizer, self_device_us=500.0)
        legacy_add = event("aten::add_", parent=optimizer, self_device_us=250.0)
        kernels = [event("sm90_xmma_fprop_implicit_gemm", device=CUDA, span_us=2000.0),
                   event("sm90_xmma_fprop_implicit_gemm", device=CUDA, span_us=1000.0),
                   event("bn_fw_tr_1C11_kernel", device=CUDA, span_us=1000.0),
                   event("multi_tensor_apply_kernel", device=CUDA, span_us=750.0),
                   event("memcpy_unlinked", device=CUDA, span_us=250.0)]
        events = [step, conv, launch, bn, optimizer, foreach, legacy_add] + kernels
        by_op, by_kernel, total = pytorch_profile.charge(events, on_device=True)
        self.assertEqual(set(by_op), {"aten::cudnn_convolution", "aten::cudnn_batch_norm",
                                      "Optimizer.step: aten::_foreach_add_", "Optimizer.step: aten::add_"})
        self.assertAlmostEqual(by_op["aten::cudnn_convolution"], 3e-3)
        self.assertAlmostEqual(total, 5e-3)
        self.assertAlmostEqual(by_kernel["sm90_xmma_fprop_implicit_gemm"], 3e-3)
        profile = pytorch_profile.summarize(by_op, by_kernel, total, steps=2, wall_seconds=0.01, on_device=True)
        kinds = {k["kind"]: k["seconds"] for k in profile["kinds"]}
        self.assertAlmostEqualTables(kinds, {"convolution": 1.5e-3, "batch norm": 0.5e-3, "optimizer": 0.375e-3})
        self.assertEqual(profile["kinds"][0]["kind"], "convolution")
        self.assertAlmostEqual(profile["attributedSeconds"], 2.375e-3)
        self.assertAlmostEqual(profile["kernelSeconds"], 2.5e-3)  # the unlinked copy shows as the gap
        self.assertEqual(profile["kernels"][0]["kernel"], "sm90_xmma_fprop_implicit_gemm")
        self.assertAlmostEqual(profile["kernels"][0]["seconds"], 1.5e-3)
        self.assertIn("charged 2.4 of kernels 2.5; convolution 1.5, batch norm 0.5, optimizer 0.4",
                      pytorch_profile.format_kinds(profile))

    def test_pytorch_1_13_names_the_device_time_for_cuda(self):
        op = event("aten::relu_", self_device_us=400.0, modern=False)
        by_op, _, _ = pytorch_profile.charge([op], on_device=True)
        self.assertAlmostEqualTables(by_op, {"aten::relu_": 4e-4})

    def test_on_the_cpu_self_time_is_charged_and_records_outside_ops_say_so(self):
        engine = event("autograd::engine::evaluate_function: ConvolutionBackward0", start_us=0.0, span_us=1020.0)
        backward = event("aten::convolution_backward", parent=engine, start_us=10.0, span_us=1000.0)
        helper = event("mkldnn::reorder", parent=backward, start_us=20.0, span_us=100.0)  # not aten: its op's
        asynchronous = event("aten::add", start_us=0.0, span_us=5000.0, is_async=True)
        by_op, by_kernel, total = pytorch_profile.charge([engine, backward, helper, asynchronous], on_device=False)
        self.assertAlmostEqualTables(by_op, {pytorch_profile.OUTSIDE_OPS: 2e-5, "aten::convolution_backward": 1e-3})
        self.assertEqual((by_kernel, total), ({}, 0.0))
        profile = pytorch_profile.summarize(by_op, by_kernel, total, steps=1, wall_seconds=2e-3, on_device=False)
        self.assertIsNone(profile["kernelSeconds"])
        self.assertIn("charged 1.0; convolution 1.0, outside aten ops 0.0", pytorch_profile.format_kinds(profile))


    def test_on_the_cpu_ops_are_nested_by_time_not_as_pytorch_1_13_rounded_them(self):
        # As 1.13 records a batch norm: native_batch_norm ends a microsecond after
        # _batch_norm_impl_index, which holds it, so 1.13 makes both children of batch_norm (whose
        # self time goes to -246 us while native_batch_norm's 247 us are counted twice).
        norm = event("aten::batch_norm", start_us=0.0, span_us=249.0)
        impl = event("aten::_batch_norm_impl_index", parent=norm, start_us=0.0, span_us=248.0)
        native = event("aten::native_batch_norm", parent=norm, start_us=2.0, span_us=247.0)
        # Meanwhile on another thread (the autograd engine's, on a GPU build): timed apart.
        relu = event("aten::relu_", start_us=0.0, span_us=100.0, thread=2)
        by_op, _, _ = pytorch_profile.charge([norm, native, relu, impl], on_device=False)
        self.assertAlmostEqualTables(by_op, {"aten::batch_norm": 1e-6, "aten::_batch_norm_impl_index": 2e-6,
                                             "aten::native_batch_norm": 246e-6, "aten::relu_": 1e-4})
        profile = pytorch_profile.summarize(by_op, {}, 0.0, steps=1, wall_seconds=249e-6, on_device=False)
        kinds = {k["kind"]: k["seconds"] for k in profile["kinds"]}
        self.assertAlmostEqualTables(kinds, {"batch norm": 249e-6, "relu": 1e-4})


class ResNet50OnTheCpu(unittest.TestCase):
    def run_script(self, *args):
        return subprocess.run([sys.executable, os.path.join(BENCH, "pytorch_resnet50.py"), "--device", "cpu", *args],
                              capture_output=True, text=True, timeout=600, cwd=BENCH)

    def test_a_profiled_step_goes_mostly_to_convolutions_and_every_resnet_kind_is_seen(self):
        done = self.run_script("--batch", "2", "--image-size", "64", "--precision", "fp32", "--warmup", "1",
                               "--measure", "1", "--repeats", "1", "--profile", "2")
        self.assertEqual(done.returncode, 0, done.stderr)
        line = json.loads(done.stdout.strip().splitlines()[-1])
        self.assertGreater(line["median"], 0)
        profile = line["profile"]
        self.assertEqual(profile["steps"], 2)
        kinds = {k["kind"]: k["seconds"] for k in profile["kinds"]}
        for kind in ("convolution", "batch norm", "relu", "pooling", "linear", "softmax and loss", "optimizer",
                     "add"):
            self.assertGreater(kinds.get(kind, 0), 0, f"{kind}: {kinds}")
        self.assertEqual(profile["kinds"][0]["kind"], "convolution", kinds)
        self.assertAlmostEqual(sum(kinds.values()), profile["attributedSeconds"], places=9)
        # No time counted twice: with PyTorch 1.13's own self times the charges summed up to 2%
        # over the step (nest_by_time).
        self.assertLessEqual(profile["attributedSeconds"], profile["stepSeconds"] * 1.01)
        self.assertGreater(profile["attributedSeconds"], profile["stepSeconds"] * 0.5)
        # Few ops go unclassified. The allocator's (aten::empty*, resize_) is "other" too, but its time
        # is this machine's page faults: beside other tests on a 2-core VM it took 10% of this small step.
        allocation = sum(op["seconds"] for op in profile["ops"]
                         if op["op"].startswith(("aten::empty", "aten::resize_")))
        self.assertLess(kinds.get("other", 0) - allocation, 0.1 * profile["attributedSeconds"], profile["ops"])

    def test_what_the_cpu_cannot_run_is_refused_naming_the_flag(self):
        done = self.run_script("--batch", "2", "--precision", "amp")
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("--precision amp needs --device cuda", done.stderr)
        done = self.run_script("--batch", "2", "--precision", "fp32", "--profile", "-1")
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("--profile -1", done.stderr)
        import torch
        if not hasattr(torch, "compile"):  # PyTorch 1.13, Debian's: both scripts say so, not an AttributeError
            for script in ("pytorch_resnet50.py", "pytorch_bert.py"):
                done = subprocess.run([sys.executable, os.path.join(BENCH, script), "--device", "cpu", "--batch", "2",
                                       "--precision", "fp32", "--compile"],
                                      capture_output=True, text=True, timeout=120, cwd=BENCH)
                self.assertNotEqual(done.returncode, 0)
                self.assertIn(f"{script}: --compile needs torch.compile, which PyTorch {torch.__version__} lacks",
                              done.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
