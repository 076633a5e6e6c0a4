#!/usr/bin/env python3
"""bench/conv_fusion_probe asks cuDNN which of a model's convolution passes its engines run fused
with batch norm, for a GPU described by JSON (none needed) or for the machine's own. Checked here
without a GPU: the described H200's answer as a document (every ResNet-50 convolution has its plain
passes; the summary counts convolutions with their multiplicity), and the refusals of bad command
lines, each naming what it wants."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

PROBE = sys.argv.pop(1) if len(sys.argv) > 1 else "conv_fusion_probe"
# The CUDA toolkit's stub driver (lib64/stubs/libcuda.so), where the build found one.
DRIVER_STUB = sys.argv.pop(1) if len(sys.argv) > 1 else ""


def probe(*args):
    return subprocess.run([PROBE, *args], capture_output=True, text=True, timeout=120)


class ConvFusionProbe(unittest.TestCase):
    def test_a_described_h200_answers_for_every_resnet50_convolution(self):
        with tempfile.TemporaryDirectory() as folder:
            output = os.path.join(folder, "probe.json")
            done = probe("--device", "h200", "--batch-size", "8", "--image-size", "64", "--plans", "1",
                         "--output", output)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertIn("NVIDIA H200 (described, not present)", done.stdout)
            with open(output) as f:
                document = json.load(f)
        self.assertEqual(document["batchSize"], 8)
        self.assertTrue(document["complete"])
        self.assertFalse(document["timed"])
        # Runtime-fusion engines (an epilogue only they run: the canary) are offered only where the
        # CUDA driver loads; where it does not, none is ranked, and the probe says why.
        canary = document["runtimeFusionCanary"]
        self.assertEqual(canary["shape"], "ic64ih16oc64k1x1s1")
        if canary["cudaDriver"] == "absent":
            self.assertEqual(canary["ranked"], 0)
            self.assertIn("since this machine has no CUDA driver (libcuda.so.1)", done.stdout)
        # Built the model's way: precompiled engines first, runtime-compiled only where none builds.
        self.assertEqual(document["order"], "model")
        summary = {entry["pass"]: entry for entry in document["summary"]}
        self.assertEqual(set(summary), {"conv", "conv+genstats", "scale+bias+relu+conv+genstats", "wgrad",
                                        "scale+bias+relu+wgrad", "dgrad", "dgrad+drelu", "dgrad+scale+bias+drelu",
                                        "dgrad+drelu+dbn-weight", "dgrad+add+drelu", "dgrad+add+drelu+dbn-weight"})
        for entry in summary.values():
            self.assertEqual(entry["convolutions"], 53)  # ResNet-50's, counted with their multiplicity
        for plain in ("conv", "wgrad", "dgrad"):
            self.assertEqual(summary[plain]["convolutionsBuilt"], 53, plain)
        # The stem (3 input channels) has no fused engine: at most 52 of 53.
        self.assertLessEqual(summary["conv+genstats"]["convolutionsBuilt"], 52)
        # The data gradient fuses in cuDNN's DgradDreluBNBwdWeight pattern (the stem's aside), and in
        # no smaller one.
        self.assertEqual(summary["dgrad+drelu+dbn-weight"]["convolutionsBuilt"], 52)
        self.assertEqual(summary["dgrad+drelu"]["convolutionsBuilt"], 0)
        # The shortcut's form of DgradDreluBNBwdWeight (the block's last batch norm reduced from the
        # next block's data gradient plus the shortcut's) is ranked by no engine of either kind,
        # whatever driver is here.
        for row in document["passes"]:
            if row["pass"] == "dgrad+add+drelu+dbn-weight":
                self.assertEqual(row["ranked"], 0, row["shape"])
        shapes = {row["shape"] for row in document["passes"]}
        self.assertEqual(len(document["passes"]), len(shapes) * 11)
        counted = {}
        for row in document["passes"]:
            counted[row["shape"]] = row["count"]
            if row.get("built", 0) > 0:
                self.assertGreaterEqual(row["engine"], 0)
                self.assertLessEqual(row["built"], 1)  # --plans 1
                self.assertEqual(len(row["planBuildMilliseconds"]), row["built"])
                self.assertGreaterEqual(min(row["planBuildMilliseconds"]), 0)
                # Every pass that builds here, fused or plain, has a precompiled engine, so the
                # model's order compiles no kernel for it.
                self.assertEqual(row["runtimeCompiledPlans"], 0, (row["shape"], row["pass"]))
        for entry in summary.values():
            self.assertNotIn("runtimeCompiledPlans", entry)
        self.assertEqual(sum(counted.values()), 53)
        self.assertIsNone(next((r for r in document["passes"] if "milliseconds" in r), None))

    @unittest.skipUnless(os.path.exists(DRIVER_STUB), "needs the CUDA toolkit's stub driver (lib64/stubs/libcuda.so)")
    def test_with_a_driver_runtime_fusion_is_offered_and_the_model_compiles_only_where_nothing_precompiled_builds(self):
        # AlexNet's 5 convolutions; the forward's statistics fusion and the filter gradient's.
        args = ["--device", "h200", "--model", "alexnet", "--batch-size", "8", "--plans", "50",
                "--passes", "conv+genstats,scale+bias+relu+wgrad"]
        documents = {}
        with tempfile.TemporaryDirectory() as folder:
            for order in ("model", "ranked"):
                output = os.path.join(folder, order + ".json")
                done = probe(*args, "--order", order, "--stub-driver", DRIVER_STUB, "--output", output)
                self.assertEqual(done.returncode, 0, done.stderr)
                with open(output) as f:
                    documents[order] = json.load(f)
        for order, document in documents.items():
            canary = document["runtimeFusionCanary"]
            self.assertEqual(canary["cudaDriver"], "stub", order)
            self.assertGreater(canary["ranked"], 0, order)  # offered where a driver loads
            self.assertEqual(canary["built"], 0, order)     # compiled, and the stub cannot load it
            self.assertEqual({row["pass"] for row in document["passes"]},
                             {"conv", "conv+genstats", "wgrad", "scale+bias+relu+wgrad"})
        fused = {order: {row["shape"]: row for row in document["passes"] if row["pass"] == "conv+genstats"}
                 for order, document in documents.items()}
        stem_shape = "ic3ih224oc64k11x11s4"
        offered = [shape for shape in fused["model"] if shape != stem_shape]
        self.assertEqual(len(offered), 4)
        for shape in offered:
            model, ranked = fused["model"][shape], fused["ranked"][shape]
            # Ranked beside precompiled engines, the runtime-compiled ones are never tried the model's way...
            self.assertGreater(model["rankedRuntimeCompiled"], 0, shape)
            self.assertGreater(model["built"], 0, shape)
            self.assertEqual(model["runtimeCompiledPlans"], 0, shape)
            self.assertNotIn("compiles", model, shape)
            # ...and are, compiling and failing to load, in the heuristics' rank.
            self.assertEqual(ranked["compiles"], ranked["rankedRuntimeCompiled"], shape)
            self.assertEqual(ranked["built"], model["built"], shape)
            self.assertIn("CUDA_DRIVER", ranked["firstUnbuildable"], shape)
        # The stem (3 channels) has only a runtime-compiled engine: the model's way compiles it too.
        stem = fused["model"][stem_shape]
        self.assertEqual((stem["rankedRuntimeCompiled"], stem["compiles"], stem["built"]), (1, 1, 0))
        summary = {entry["pass"]: entry for entry in documents["ranked"]["summary"]}
        self.assertEqual(summary["conv+genstats"]["compiles"], sum(row.get("compiles", 0) for row in fused["ranked"].values()))
        self.assertGreater(summary["conv+genstats"]["slowestCompileMilliseconds"], 0)

    def test_bad_command_lines_are_refused_naming_what_is_allowed(self):
        for args, said in [
            (["--device", "h200", "--precision", "fp32"], "not one of amp, bf16"),
            ([], "give one of --device NAME, --device-json FILE, --gpu"),
            (["--device", "h200", "--gpu"], "give one of"),
            (["--device", "a100"], "'a100' is not a described GPU (one of: h200)"),
            (["--device", "h200", "--time"], "--time, --check and --write-device-json need --gpu"),
            (["--device", "h200", "--plans", "0"], "--plans: between 1 and 50"),
            (["--device", "h200", "--order", "fastest"], "--order: 'fastest' is not one of model, ranked"),
            (["--device", "h200", "--passes", "conv,conv+bn"], "--passes: 'conv+bn' is not one of conv, conv+genstats"),
            (["--device", "h200", "--stub-driver", "/no/libcuda.so"], "--stub-driver: cannot load /no/libcuda.so"),
            (["--gpu", "--stub-driver", "/no/libcuda.so"], "--stub-driver: not with --gpu"),
            (["--device", "h200", "--frobnicate"], "frobnicate"),
        ]:
            done = probe(*args)
            self.assertEqual(done.returncode, 2, (args, done.stderr))
            self.assertIn(said, done.stderr, args)

    def test_a_description_file_missing_a_member_is_refused_naming_it(self):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "device.json")
            with open(path, "w") as f:
                json.dump({"deviceName": "half a GPU"}, f)
            done = probe("--device-json", path)
            self.assertEqual(done.returncode, 1, done.stderr)
            self.assertIn("the device description has no", done.stderr)
            done = probe("--device-json", os.path.join(folder, "absent.json"))
            self.assertEqual(done.returncode, 2, done.stderr)
            self.assertIn("cannot read", done.stderr)

    @unittest.skipIf(shutil.which("nvidia-smi"), "a GPU may be here: --gpu would run")
    def test_the_gpu_flag_without_a_gpu_fails_saying_so(self):
        done = probe("--gpu")
        self.assertEqual(done.returncode, 1)
        self.assertIn("--gpu: no usable CUDA device", done.stderr)


if __name__ == "__main__":
    unittest.main()
