#!/usr/bin/env python3
"""bench/gpu_check_table.py reads a LOG_DIR as bench/gpu_check.sh leaves it on a GPU machine: the
self-tests' documents (counts, failures named), the other models' few amp steps (state, rate,
losses from the document, else from the result table), and steps that wrote nothing (their log's last line). What a
GPU session reads first must not need a GPU to be checked."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TABLE = os.path.join(HERE, "..", "..", "bench", "gpu_check_table.py")


def write(folder, name, text):
    with open(os.path.join(folder, name), "w") as f:
        f.write(text)


class GpuCheckTable(unittest.TestCase):
    def table(self, logs):
        done = subprocess.run([sys.executable, TABLE, logs], capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        return done.stdout.splitlines()

    def test_an_empty_log_folder_gives_a_table_of_dashes(self):
        with tempfile.TemporaryDirectory() as logs:
            lines = self.table(logs)
        self.assertIn("self-test-inception-deeplab-tf32: no document; (no log)", lines)
        self.assertIn("  alexnet: - ((no log))", lines)

    def test_each_models_step_says_its_worst_layers_share_of_the_bound(self):
        # The worker's own lines (fp16 and bf16 emulated on the CPU, 2026-12-04): one that passed, one
        # that failed (the reference's rounding switched off), and another kind of check, not read.
        step = "step, each layer fed the reference's input"
        with tempfile.TemporaryDirectory() as logs:
            write(logs, "self-test.log", "\n".join([
                "  prec  check                                        error     bound  result  detail",
                f"  amp   resnet50 {step}  3.70e-04  5.00e-02  passed  worst: layer1.0 (Bottleneck) backward; max "
                "pools' backward at most 1.68e-04 (maxpool (MaxPool2d) backward), bound 1.50e-01: near-ties rank "
                "as rounded; loss scale 512",
                "  amp   training, 5 steps                            1.00e-03  1.00e-02  passed  the loss"]))
            write(logs, "self-test-inception-deeplab-amp.log",
                  f"  amp   inception_v3 {step}  5.21e-02  5.00e-02  failed  first off: AuxLogits.conv1.bn "
                  "(BatchNorm2d+ReLU) backward: off by 5.21e-02, bound 5.00e-02; worst: AuxLogits.conv1.bn "
                  "(BatchNorm2d+ReLU) backward (5.21e-02); max pools' backward at most 3.19e-02 (Mixed_6a.max_pool "
                  "(MaxPool2d) backward), bound 1.50e-01: near-ties rank as rounded; loss scale 512\n")
            write(logs, "self-test-resnet152-vgg16-alexnet-bf16.log",
                  f"  bf16  vgg16 {step}  2.54e-03  2.00e-01  passed  worst: features.7 (Conv2d) forward; max pools' "
                  "backward at most 0.00e+00 (features.30 (MaxPool2d) backward), bound 3.00e-01: near-ties rank as "
                  "rounded\n")
            lines = self.table(logs)
        at = lines.index("model steps in the self-tests (each layer fed the reference's rounded input):")
        self.assertEqual(lines[at + 1:at + 4], [
            "  amp resnet50: passed, worst 3.70e-04 (layer1.0 (Bottleneck) backward), 1% of its bound 5.00e-02; "
            "max pools 1.68e-04 [self-test]",
            "  amp inception_v3: failed, worst 5.21e-02 (AuxLogits.conv1.bn (BatchNorm2d+ReLU) backward), 104% of its "
            "bound 5.00e-02; max pools 3.19e-02 [self-test-inception-deeplab-amp]",
            "  bf16 vgg16: passed, worst 2.54e-03 (features.7 (Conv2d) forward), 1% of its bound 2.00e-01; max pools "
            "0.00e+00 [self-test-resnet152-vgg16-alexnet-bf16]"])
        self.assertFalse(lines[at + 4].startswith("  amp training"), lines[at + 4])

    def test_convolutions_fused_with_batch_norm_timed_on_the_gpu_and_for_the_described_one(self):
        def entry(name, baseline, built, ms=None, base_ms=None, timed=None):
            e = {"pass": name, "baseline": baseline, "convolutionsBuilt": built, "convolutions": 53}
            if ms is not None:
                e.update(millisecondsPerStep=ms, baselineMillisecondsPerStep=base_ms, convolutionsTimed=timed)
            return e
        with tempfile.TemporaryDirectory() as logs:
            write(logs, "conv-fusion.json", json.dumps({
                "device": "NVIDIA H200", "cudnnVersion": 91900, "complete": False,
                "summary": [entry("conv", "conv", 53, 9.5, 9.5, 53),
                            dict(entry("conv+genstats", "conv", 52, 9.8, 9.25, 52), convolutionsFastestNotFirstPlan=3,
                                 compiles=40, compileMilliseconds=31400.0, slowestCompileMilliseconds=1530.2),
                            entry("dgrad+drelu", "dgrad", 0)]}))
            write(logs, "conv-fusion-check.json", json.dumps({
                "device": "NVIDIA H200", "cudnnVersion": 91900, "complete": True,
                "summary": [dict(entry("conv+genstats", "conv", 52), convolutionsChecked=52, convolutionsOff=1,
                                 secondRunWithoutZeroing={"overwritten": 50, "added": 2})]}))
            write(logs, "conv-fusion-bf16.json", json.dumps({
                "device": "NVIDIA H200", "cudnnVersion": 91900, "complete": True,
                "runtimeFusionCanary": {"shape": "ic64ih56oc64k1x1s1", "ranked": 4, "built": 1,
                                        "runtimeCompiledPlans": 1, "buildMilliseconds": 812.4, "cudaDriver": "present"},
                "summary": [entry("conv+genstats", "conv", 0)]}))
            write(logs, "conv-fusion-described.json", json.dumps({
                "device": "NVIDIA H200 (described, not present)", "cudnnVersion": 91900, "complete": True,
                "runtimeFusionCanary": {"shape": "ic64ih56oc64k1x1s1", "ranked": 0, "built": 0,
                                        "runtimeCompiledPlans": 0, "cudaDriver": "absent"},
                "summary": [entry("conv+genstats", "conv", 52)]}))
            write(logs, "dlbench-resnet50-amp-conv-bn-fused.json", json.dumps({
                "state": "Succeeded", "environment": {"backendOptions": {
                    "convBatchNorm": "fused", "convBatchNormBlocks": "16 of 16",
                    "convBatchNormGradientBlocks": "15 of 16"}}}))
            lines = self.table(logs)
        at = lines.index("Convolutions fused with batch norm (cuDNN's engines, ResNet-50 amp at batch 256):")
        self.assertEqual(lines[at + 1], "  this GPU, NVIDIA H200, cuDNN 91900 (cut short: the shapes it finished):")
        self.assertEqual(lines[at + 2], "    conv: 53 of 53 convolutions; 9.50 ms a step")
        self.assertEqual(lines[at + 3], "    conv+genstats: 52 of 53 convolutions; 9.80 ms a step against conv's 9.25 "
                                        "over the same 52; fastest not the best-ranked plan for 3; 40 plans compiled "
                                        "at build, 31.4 s in all, the slowest 1530 ms")
        self.assertEqual(lines[at + 4], "    dgrad+drelu: 0 of 53 convolutions")
        self.assertEqual(lines[at + 5], "  this GPU, checked at batch 8, NVIDIA H200, cuDNN 91900:")
        self.assertEqual(lines[at + 6], "    conv+genstats: 52 of 53 convolutions; checked 52, 1 off their bound; "
                                        "sums after a second run without zeroing: added 2, overwritten 50")
        self.assertEqual(lines[at + 7], "  this GPU in bf16, built at batch 8, NVIDIA H200, cuDNN 91900:")
        self.assertEqual(lines[at + 8], "    runtime-fusion engines: 4 ranked, 1 built, 1 compiled at build in 812 ms")
        self.assertEqual(lines[at + 9], "    conv+genstats: 0 of 53 convolutions")
        self.assertEqual(lines[at + 10], "  the described H200, NVIDIA H200 (described, not present), cuDNN 91900:")
        self.assertEqual(lines[at + 11], "    runtime-fusion engines: 0 ranked, 0 built, 0 compiled at build "
                                         "(no CUDA driver here: cuDNN offers them none)")
        self.assertEqual(lines[at + 13], "  dlbench-resnet50-amp-conv-bn-fused: bottlenecks fused 16 of 16, their data "
                                         "gradients with the batch norms' 15 of 16")

    def test_a_fusion_probe_without_a_document_says_its_last_line(self):
        with tempfile.TemporaryDirectory() as logs:
            write(logs, "conv-fusion-described.log", "conv_fusion_probe: the device description has no \"x\"\n")
            lines = self.table(logs)
            self.assertIn("  the described H200: no document; conv_fusion_probe: the device description has no \"x\"",
                          lines)
            write(logs, "conv-fusion-described.json", json.dumps({
                "device": "NVIDIA H200 (described, not present)", "cudnnVersion": 91900, "complete": True,
                "runtimeFusionCanary": {"shape": "ic64ih56oc64k1x1s1", "ranked": 6, "built": 0,
                                        "runtimeCompiledPlans": 0, "cudaDriver": "stub"},
                "summary": []}))
            self.assertIn("    runtime-fusion engines: 6 ranked, 0 built, 0 compiled at build (the driver's stub here: "
                          "compiled, never loaded)", self.table(logs))

    def test_the_models_self_test_and_their_amp_steps(self):
        with tempfile.TemporaryDirectory() as logs:
            # The document counts every check and lists only those that did not pass.
            write(logs, "self-test-inception-deeplab-amp.json", json.dumps({
                "state": "Failed", "reason": "SelfTestFailed", "message": "1 of 140 checks failed",
                "summary": {"passed": 137, "skipped": 2, "failed": 1},
                "checks": [{"precision": "amp", "name": "inception_v3 step, each layer fed the reference's input",
                            "outcome": "failed", "detail": "first off: Mixed_6b.branch7x7_2.conv (Conv2d) forward"},
                           {"precision": "tf32", "name": "every check", "outcome": "skipped", "detail": "no"}]}))
            write(logs, "train-alexnet-amp.json", json.dumps({
                "state": "Succeeded", "case": {"batchSizePerDevice": 64},
                "throughput": {"median": 9876.7, "unit": "samples/s"}}))
            write(logs, "train-alexnet-amp.log", "\n".join([
                "dlbench-worker: alexnet on cuda (NVIDIA H200), case 1x1-bs64-amp, image 224x224",
                "  repeat  samples/s   step ms   loss after",
                "       1    9800.10      6.53      6.9012",
                "       2    9952.90      6.43      6.8120",
                "  median 9876.50 samples/s (min 9800.10, max 9952.90, cv 1.09%)"]))
            write(logs, "train-vgg16-amp.log", "dlbench-worker: cuda: out of memory\n")
            # A diverged case: Failed, LossNotFinite; its losses come from the document.
            write(logs, "train-resnet152-amp.json", json.dumps({
                "state": "Failed", "reason": "LossNotFinite", "case": {"batchSizePerDevice": 32},
                "throughput": {"median": 2100.4, "unit": "samples/s"}, "lossAfterRepeats": [7.25, "NaN"]}))
            # compute-sanitizer's last summary line, or the log's last line where it wrote none.
            write(logs, "memcheck-resnet50-amp.log", "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n")
            write(logs, "memcheck-self-test-inception-tf32.log", "========= Invalid __global__ read of size 16\n"
                  "=========     at kernel_x\n========= ERROR SUMMARY: 3 errors\n")
            # A self-test stopped at its deadline: no document, the checks its log printed line by line.
            write(logs, "self-test-resnet152-vgg16-alexnet-amp.log", "\n".join([
                "dlbench-worker --self-test: cuda against cpu fp32 (oneDNN), 1 rank (none)",
                "  prec  check                                        error     bound  result  detail",
                "  amp   resnet152 step, each layer fed the reference's input  1.20e-02  5.00e-02  passed  worst: fc",
                "  amp   vgg16 step, each layer fed the reference's input  9.10e-02  5.00e-02  failed  first off: "
                "features.0 (Conv2d) forward",
                "  -     loss scaling skips an overflowing step           -         -  passed  skipped, scale halved"]))
            write(logs, "real-data-amp-loss-scale.log", "\n".join([
                "  case 1x1-bs256-amp repeat 1/2: 5800.00 samples/s",
                "dlbench-worker: step 3 skipped, loss scale now 32768: loss 6.9; 1 of 161 parameters' gradients "
                "not finite, nearest the loss first: fc.weight (3 inf, 0 NaN of 2048000)",
                "  replayed at loss scale 65536: forward: every layer output finite; loss 6.9; backward: first "
                "non-finite input gradient: fc (Linear), 3 inf, 0 NaN of 524288",
                "dlbench-worker: step 9 skipped, loss scale now 16384: loss inf (not finite: the forward pass "
                "overflowed); 0 of 161 parameters' gradients not finite",
                "  replayed at loss scale 32768: forward: first non-finite layer output: layer1.0.bn1 (BatchNorm2d), "
                "2 inf, 0 NaN of 51380224; loss inf; the loss gradient holds 0 inf, 256000 NaN of 256000; backward: "
                "first non-finite input gradient: fc (Linear), 0 inf, 524288 NaN of 524288",
                "dlbench-worker: step 12 skipped, loss scale now 8192: loss 6.8; 2 of 161 parameters' gradients "
                "not finite, nearest the loss first: layer4.2.conv3.weight (1 inf, 0 NaN of 1048576), "
                "layer1.0.conv1.weight (0 inf, 2 NaN of 4096)",
                "  replayed at loss scale 16384: forward: first non-finite layer output: layer1.0.bn1 (BatchNorm2d), "
                "1 inf, 0 NaN of 51380224; loss 6.8; backward: every input gradient finite"]))
            write(logs, "real-data-amp-loss-scale-spatial.log", "  case 1x1-bs256-amp repeat 1/2: 5100.00 samples/s\n")
            write(logs, "pytorch-real-data-amp.log", "\n".join([
                "step loss max|logit| max|activation| layer past-fp16-max scale skipped seconds",
                "1 6.962 5.9 58.2 layer3.5.conv1 no 65536 backward 3",
                "2 7.055 6.3 57.3 layer3.5.conv1 no 32768 no 3",
                "3 31.5 4000.0 inf layer2.0.bn1 yes 32768 forward 4",
                "4 2.81 9.0 70.1 conv1 no 16384 no 4",
                "1 of 4 steps had an activation past fp16's largest finite value",
                "2 of 4 steps skipped by loss scaling (GradScaler), the scale ended at 16384"]))
            lines = self.table(logs)
        self.assertIn("memcheck-resnet50-amp: ========= ERROR SUMMARY: 0 errors", lines)
        self.assertIn("memcheck-self-test-inception-tf32: ========= ERROR SUMMARY: 3 errors", lines)
        self.assertIn("self-test-inception-deeplab-amp: 137 of 140 checks passed, 2 skipped", lines)
        self.assertIn("  SelfTestFailed: 1 of 140 checks failed", lines)
        self.assertIn("  real-data-amp-loss-scale: 3 steps skipped; step 3 skipped, loss scale now 32768: loss 6.9; 1 of "
                      "161 parameters' gradients not finite, nearest the loss first: fc.weight (3 inf, 0 NaN of 2048000); "
                      "step 9 skipped, loss scale now 16384: loss inf (not finite: the forward pass overflowed); 0 of "
                      "161 parameters' gradients not finite", lines)
        self.assertIn("    gradients first not finite: fc.weight 1, none named 1, layer4.2.conv3.weight 1", lines)
        self.assertIn("    3 replayed layer by layer: forward layer1.0.bn1 (BatchNorm2d) 2, all finite 1; "
                      "backward fc (Linear) 2, all finite 1", lines)
        self.assertIn("  real-data-amp-loss-scale-spatial: 0 steps skipped", lines)
        self.assertIn("  pytorch-real-data-amp: 2 of 4 steps skipped by loss scaling (forward 1, backward 1), the scale "
                      "ended at 16384; loss 6.962 at step 1, 2.81 lowest, 2.81 at step 4", lines)
        self.assertIn("self-test-resnet152-vgg16-alexnet-amp: no document; stopped after 3 checks (2 passed, 1 failed, "
                      "0 skipped); last: -     loss scaling skips an overflowing step           -         -  passed  "
                      "skipped, scale halved", lines)
        self.assertIn("  FAILED amp vgg16 step, each layer fed the reference's input: first off: features.0 (Conv2d) "
                      "forward", lines)
        self.assertIn("  FAILED amp inception_v3 step, each layer fed the reference's input: "
                      "first off: Mixed_6b.branch7x7_2.conv (Conv2d) forward", lines)
        self.assertIn("  alexnet batch 64: Succeeded, 9877 samples/s, losses 6.9012 6.8120", lines)
        self.assertIn("  vgg16: - (dlbench-worker: cuda: out of memory)", lines)
        self.assertIn("  resnet152 batch 32: Failed LossNotFinite, 2100 samples/s, losses 7.2500 NaN", lines)

    def test_bert_against_pytorch_eager_and_its_tuned_path(self):
        # comparison.jsonl as gpu_check.sh appends it: dlbench's result lines and pytorch_bert.py's.
        with tempfile.TemporaryDirectory() as logs:
            write(logs, "comparison.jsonl", "\n".join(json.dumps(r) for r in [
                {"model": "bert-base", "precision": "amp", "engine": "dlbench", "batch": 64, "median": 3349.0},
                {"model": "bert-base", "precision": "amp", "engine": "pytorch", "batch": 64, "median": 1105.0,
                 "cv": 0.14, "stability": "unstable", "discarded": [1401.0]},
                {"model": "bert-base", "precision": "amp", "engine": "pytorch-tuned", "batch": 64, "median": 2232.7,
                 "cv": 0.01, "stability": "stable"},
                # fp32 and tf32, under the floor too: a row each, their own ratio.
                {"model": "bert-base", "precision": "fp32", "engine": "dlbench", "batch": 64, "median": 560.0},
                {"model": "bert-base", "precision": "fp32", "engine": "pytorch", "batch": 64, "median": 700.0,
                 "cv": 0.004, "stability": "stable"},
                {"model": "bert-base", "precision": "tf32", "engine": "pytorch", "batch": 64, "median": 1500.0,
                 "cv": 0.003, "stability": "stable"},
                # Another image model's amp row: dlbench's result and pytorch_resnet50.py --model's line.
                {"model": "inception_v3", "precision": "amp", "engine": "dlbench", "batch": 128, "median": 2600.0},
                {"model": "inception_v3", "precision": "amp", "engine": "pytorch", "batch": 128, "median": 2000.0,
                 "cv": 0.005, "stability": "stable"}]) + "\n")
            lines = self.table(logs)
        row = [line for line in lines if line.startswith("| bert-base | 64 | amp |")]
        self.assertEqual(len(row), 1, lines)
        self.assertIn("| 3349.0 |", row[0])
        self.assertIn("| 1105.0 | 3.03 |", row[0])
        self.assertIn("PyTorch tuned (fused optimizer; BERT's attention through scaled_dot_product_attention): "
                      "bert-base amp 2232.7, dlbench / tuned 1.50 (cv 1.00% stable)", lines)
        self.assertIn("PyTorch's repeats: bert-base amp cv 14.00% unstable (+1); bert-base fp32 cv 0.40% stable (+0); "
                      "bert-base tf32 cv 0.30% stable (+0); inception_v3 amp cv 0.50% stable (+0)", lines)
        fp32 = [line for line in lines if line.startswith("| bert-base | 64 | fp32 |")]
        self.assertEqual(len(fp32), 1, lines)
        self.assertIn("| 560.0 |", fp32[0])
        self.assertIn("| 700.0 | 0.80 |", fp32[0])
        # tf32's dlbench row missing (its step timed out, say): the batch comes from PyTorch's row.
        tf32 = [line for line in lines if line.startswith("| bert-base | 64 | tf32 |")]
        self.assertEqual(len(tf32), 1, lines)
        self.assertIn("| 1500.0 | - |", tf32[0])
        inception = [line for line in lines if line.startswith("| inception_v3 | 128 | amp |")]
        self.assertEqual(len(inception), 1, lines)
        self.assertIn("| 2600.0 |", inception[0])
        self.assertIn("| 2000.0 | 1.30 |", inception[0])

    def test_energy_per_sample_beside_pytorchs(self):
        with tempfile.TemporaryDirectory() as logs:
            write(logs, "comparison.jsonl", "\n".join(json.dumps(r) for r in [
                {"model": "resnet50", "precision": "amp", "engine": "dlbench", "batch": 256, "median": 7230.7,
                 "joules_per_sample": 0.0712},
                {"model": "resnet50", "precision": "amp", "engine": "pytorch", "batch": 256, "median": 5627.8,
                 "joules_per_sample": 0.089},
                {"model": "resnet50", "precision": "fp32", "engine": "dlbench", "batch": 64, "median": 898.3,
                 "joules_per_sample": 0.61},
                {"model": "resnet50", "precision": "fp32", "engine": "pytorch", "batch": 64, "median": 922.2,
                 "energy_why": "the GPU at index 0 has no energy counter"},
                {"model": "resnet50", "precision": "tf32", "engine": "dlbench", "batch": 128, "median": 3586.2}]) + "\n")
            lines = self.table(logs)
        self.assertIn("Energy per sample (each GPU's counter over the measured steps): resnet50 amp dlbench 0.0712 J, "
                      "PyTorch eager 0.089 J, dlbench / PyTorch 0.80; resnet50 fp32 dlbench 0.61 J, PyTorch eager - "
                      "(the GPU at index 0 has no energy counter)", lines)

    def test_pytorch_under_engine_command_beside_its_own_timing(self):
        sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
        import gpu_bench
        with tempfile.TemporaryDirectory() as logs:
            # The status `dlbench run` leaves, as gpu_check.sh turns it into comparison lines.
            write(logs, "run.status.json", json.dumps({
                "spec": {"model": "resnet50"},
                "status": {"results": [
                    {"case": {"batchSizePerDevice": 256, "precision": "amp"}, "state": "Succeeded",
                     "throughput": {"median": 5580.0, "cv": 0.004}},
                    {"case": {"batchSizePerDevice": 256, "precision": "bf16"}, "state": "Failed",
                     "reason": "CommandFailed"}]}}))
            lines = gpu_bench.status_lines(os.path.join(logs, "run.status.json"), "pytorch-command")
            self.assertEqual([json.loads(line) for line in lines], [
                {"model": "resnet50", "engine": "pytorch-command", "batch": 256, "precision": "amp", "median": 5580.0,
                 "state": "Succeeded", "reason": "", "cv": 0.004},
                {"model": "resnet50", "engine": "pytorch-command", "batch": 256, "precision": "bf16", "median": None,
                 "state": "Failed", "reason": "CommandFailed"}])
            write(logs, "comparison.jsonl", "\n".join(lines + [json.dumps(
                {"model": "resnet50", "precision": "amp", "engine": "pytorch", "batch": 256, "median": 5627.8})]) + "\n")
            table = self.table(logs)
        self.assertIn("PyTorch's example under engine: command (dlbench-exec times its step markers): resnet50 amp "
                      "5580.0 (cv 0.40%), PyTorch's own timing 5627.8, engine: command / own 0.99; resnet50 bf16 "
                      "- (CommandFailed), PyTorch's own timing -, engine: command / own -", table)

    def test_a_results_line_says_its_joules_per_sample(self):
        sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
        import gpu_bench
        import nvml_energy
        with tempfile.TemporaryDirectory() as logs:
            path = os.path.join(logs, "r.json")
            write(logs, "r.json", json.dumps({"state": "Succeeded", "throughput": {"median": 7000.0},
                                              "globalBatchSize": 256, "methodology": {"measureSteps": 30},
                                              "energyJoules": [530.0, 537.6, 545.0]}))
            line = json.loads(gpu_bench.result_line(path, 256, "amp"))
            self.assertAlmostEqual(line["joules_per_sample"], 537.6 / 7680)
            write(logs, "r.json", json.dumps({"state": "Succeeded", "throughput": {"median": 7000.0},
                                              "globalBatchSize": 256, "methodology": {"measureSteps": 30}}))
            self.assertNotIn("joules_per_sample", json.loads(gpu_bench.result_line(path, 256, "amp")))
        # Both sides' rule: the median repeat's joules over its samples, none where a repeat has none.
        self.assertAlmostEqual(nvml_energy.joules_per_sample([530.0, 537.6, 545.0], 7680), 537.6 / 7680)
        self.assertIsNone(nvml_energy.joules_per_sample([530.0, None, 545.0], 7680))
        self.assertIsNone(nvml_energy.joules_per_sample([], 7680))

    def test_pytorchs_amp_on_the_jpegs_stopped_at_its_deadline(self):
        # Killed before its summary: the steps it printed still count, and the line says so.
        with tempfile.TemporaryDirectory() as logs:
            write(logs, "pytorch-real-data-amp.log", "\n".join([
                "step loss max|logit| max|activation| layer past-fp16-max scale skipped seconds",
                "1 6.9 5.9 58.2 layer3.5.conv1 no 65536 backward 3",
                "2 5.5 6.3 57.3 layer3.5.conv1 no 32768 no 3",
                "3 5.8 6.1 57.0 layer3.5.conv1 no 32768 no 4"]))
            lines = self.table(logs)
        self.assertIn("  pytorch-real-data-amp: 1 of 3 steps skipped by loss scaling (forward 0, backward 1), stopped "
                      "early, its last step ran at scale 32768; loss 6.9 at step 1, 5.5 lowest, 5.8 at step 3", lines)

    def test_the_batches_amp_trains_on_scanned_for_what_is_not_finite(self):
        # dlbench-input measure --check-values's JSON line; a step that left none says its last line.
        with tempfile.TemporaryDirectory() as logs:
            write(logs, "input-check-values.log", json.dumps({
                "imagesPerSecond": 5900.0, "pixelType": "fp16",
                "values": {"batches": 201, "nonFinite": 3, "batchesWithNonFinite": 2, "min": -2.1171875,
                           "max": 2.640625}}) + "\n")
            lines = self.table(logs)
            self.assertIn("  input-check-values: 3 values not finite in 2 of 201 batches; finite ones from -2.1171875 "
                          "to 2.640625", lines)
            write(logs, "input-check-values.log", "dlbench-input: --check-values: images only\n")
            self.assertIn("  input-check-values: dlbench-input: --check-values: images only", self.table(logs))

    def test_real_data_beside_its_synthetic_row(self):
        # The real-data cases' result documents, and a synthetic one to compare with.
        with tempfile.TemporaryDirectory() as logs:
            write(logs, "dlbench-resnet50-amp.json", json.dumps({"state": "Succeeded", "throughput": {"median": 7268.0}}))
            write(logs, "dlbench-resnet50-amp-imagefolder.json", json.dumps({
                "state": "Succeeded", "throughput": {"median": 3634.0},
                "input": {"verdict": "input-bound", "waitShare": 0.5, "pipelineThroughput": 3700.0,
                          "decodeThreads": 14, "files": 1024, "skippedFiles": 0},
                "lossScaling": {"finalScale": 1.49e-8, "skippedSteps": 42, "steps": 400,
                                "overflow": "untimed step 401 skipped, loss scale now 7.45e-09: loss 2.8\nreplayed at "
                                            "loss scale 1.49e-08: forward: first non-finite layer output: conv1 "
                                            "(Conv2d), 2 inf, 0 NaN of 9"}}))
            # The device's row, where the default device resize gave way to the threads for want of memory.
            write(logs, "dlbench-resnet50-amp-imagefolder-device.json", json.dumps({
                "state": "Succeeded", "throughput": {"median": 3600.0},
                "environment": {"backendOptions": {"inputResize": "host", "inputResizeReason": "the device's ring of "
                                                   "batches did not fit, host memory: asked for 159.0 MiB, 12.0 MiB left"}},
                "input": {"verdict": "input-bound", "waitShare": 0.5, "pipelineThroughput": 3700.0,
                          "decodeThreads": 14, "files": 1024, "skippedFiles": 0}}))
            write(logs, "dlbench-deeplabv3plus-amp-cityscapes.json", json.dumps({
                "state": "Failed", "reason": "DataUnavailable", "message": "data.path /x does not exist on this node"}))
            write(logs, "dlbench-bert-amp.json", json.dumps({"state": "Succeeded", "throughput": {"median": 3349.0}}))
            write(logs, "dlbench-bert-amp-bertpretraining.json", json.dumps({
                "state": "Succeeded", "throughput": {"median": 3300.0},
                "input": {"verdict": "compute-bound", "waitShare": 0.001, "pipelineThroughput": 150000.0,
                          "decodeThreads": 1, "files": 8192, "skippedFiles": 0}}))
            lines = self.table(logs)
        self.assertIn("  dlbench-bert-amp-bertpretraining: 3300.0/s, 0.99 of synthetic's 3349.0; compute-bound, waited "
                      "0.1% of the measured time; the pipeline alone 150000/s with 1 threads, 8192 files, 0 skipped",
                      lines)
        self.assertIn("  dlbench-resnet50-amp-imagefolder: 3634.0/s, 0.50 of synthetic's 7268.0; input-bound, waited "
                      "50.0% of the measured time; the pipeline alone 3700/s with 14 threads, 1024 files, 0 skipped", lines)
        at = lines.index("  dlbench-resnet50-amp-imagefolder-device: 3600.0/s, 0.50 of synthetic's 7268.0; input-bound, "
                         "waited 50.0% of the measured time; the pipeline alone 3700/s with 14 threads, 1024 files, 0 "
                         "skipped; resized on the host")
        self.assertEqual(lines[at + 1], "    not on the device: the device's ring of batches did not fit, host memory: "
                                        "asked for 159.0 MiB, 12.0 MiB left")
        at = lines.index("    loss scaling: 42 of 400 steps skipped, the scale ended at 1.49e-08")
        self.assertEqual(lines[at + 1:at + 3], [
            "      untimed step 401 skipped, loss scale now 7.45e-09: loss 2.8",
            "      replayed at loss scale 1.49e-08: forward: first non-finite layer output: conv1 (Conv2d), 2 inf, 0 NaN of 9"])
        self.assertIn("  dlbench-deeplabv3plus-amp-cityscapes: Failed DataUnavailable: data.path /x does not exist on "
                      "this node", lines)

    def test_each_cases_gpu_readings_with_its_energy_per_sample(self):
        gpu = {"otherProcesses": 0, "smClockMinMhz": 1980, "smClockMedianMhz": 1980, "smClockMaxMhz": 1980,
               "throttleReasons": [], "temperatureMaxCelsius": 61, "powerMedianWatts": 540, "samples": 90}
        with tempfile.TemporaryDirectory() as logs:
            # 256 a step, 30 measured steps: 7680 samples a repeat; the median repeat drew 537.6 J.
            write(logs, "dlbench-resnet50-amp.json", json.dumps({
                "state": "Succeeded", "globalBatchSize": 256, "methodology": {"measureSteps": 30},
                "interference": {"verdict": "clean", "gpu": gpu}, "stability": {"cv": 0.001, "verdict": "stable"},
                "energyJoules": [530.0, 537.6, 545.0]}))
            write(logs, "dlbench-resnet50-fp32.json", json.dumps({
                "state": "Succeeded", "globalBatchSize": 64, "methodology": {"measureSteps": 30},
                "interference": {"verdict": "clean", "gpu": gpu}, "stability": {"cv": 0.002, "verdict": "stable"}}))
            lines = self.table(logs)
        self.assertIn("| dlbench-resnet50-amp | clean | 0 | 1980 / 1980 / 1980 | - | 61 | 540 | 0.07 | 0.10% | stable (+0) |",
                      lines)
        self.assertIn("| dlbench-resnet50-fp32 | clean | 0 | 1980 / 1980 / 1980 | - | 61 | 540 | NO ENERGY COUNTER | 0.20% | "
                      "stable (+0) |", lines)

    def test_fp32_profile_beside_pytorchs(self):
        # dlbench-worker --profile's document, and pytorch_resnet50.py --profile's line in its log.
        with tempfile.TemporaryDirectory() as logs:
            write(logs, "profile-resnet50-fp32.json", json.dumps({
                "case": {"batchSizePerDevice": 64},
                "profile": {"steps": 5, "stepSeconds": 0.0729, "outsideLayersSeconds": 0.0012,
                            "outsideParts": {"update": 0.0009, "other": 0.00012, "loss": 0.00013, "input": 0.00005}, "kinds": [
                    {"kind": "Conv2d", "forwardSeconds": 0.0201, "backwardSeconds": 0.0347},
                    {"kind": "BatchNorm2d+ReLU", "forwardSeconds": 0.003, "backwardSeconds": 0.0048}], "layers": [
                    {"name": "layer1.0.conv2", "kind": "Conv2d", "forwardSeconds": 0.0011, "backwardSeconds": 0.002},
                    {"name": "conv1", "kind": "Conv2d", "forwardSeconds": 0.0012, "backwardSeconds": 0.0013},
                    {"name": "bn1", "kind": "BatchNorm2d+ReLU", "forwardSeconds": 0.0001, "backwardSeconds": 0.0002}]}}))
            write(logs, "pytorch-profile-resnet50-fp32.log", "a warning on stderr\n" + json.dumps({
                "engine": "pytorch", "model": "resnet50", "batch": 64, "precision": "fp32", "median": 922.0,
                "profile": {"steps": 5, "stepSeconds": 0.0712, "attributedSeconds": 0.0688, "kernelSeconds": 0.0690,
                            "kinds": [{"kind": "convolution", "seconds": 0.0521}, {"kind": "batch norm", "seconds": 0.0102}],
                            "ops": [], "kernels": [{"kernel": "sm90_xmma_dgrad_implicit_gemm_f32f32", "seconds": 0.0101},
                                                   {"kernel": "cudnn::bn_bw_1C11_kernel_new", "seconds": 0.004}]}}) + "\n")
            lines = self.table(logs)
        at = lines.index("  fp32 batch 64: step 72.9, outside layers 1.2 (update 0.9, loss 0.1, other 0.1); Conv2d 54.8, "
                         "BatchNorm2d+ReLU 7.8")
        self.assertEqual(lines[at + 1], "    stem conv1 2.50 (forward 1.20); slowest: layer1.0.conv2 3.10, conv1 2.50, "
                                        "bn1 0.30")
        self.assertEqual(lines[at + 2], "  pytorch fp32 batch 64: step 71.2 under the profiler, charged 68.8 of kernels "
                                        "69.0; convolution 52.1, batch norm 10.2")
        self.assertEqual(lines[at + 3], "    its largest kernels, ms a step: sm90_xmma_dgrad_implicit_gemm_f32f32 10.1, "
                                        "cudnn::bn_bw_1C11_kernel_new 4.0")

    def test_the_algorithms_inceptions_aux_logits_took(self):
        prefix = "dlbench-worker: cudnn "
        aux = "forward fp32 nchw 3x128x5x5 -> 768 5x5 stride 1 pad 0"
        other = "forward fp32 nchw 3x768x17x17 -> 128 1x1 stride 1 pad 0"
        with tempfile.TemporaryDirectory() as logs:
            self.assertNotIn("InceptionV3's AuxLogits.conv1 in fp32's self-test, as cuDNN chose:", self.table(logs))
            write(logs, "self-test-inception-deeplab-fp32.log", "\n".join([
                prefix + aux + ": FFT_TILING, fma, 12.0 MiB workspace",
                prefix + other + ": IMPLICIT_PRECOMP_GEMM, fma, 0.0 MiB workspace",
                "inception_v3 AuxLogits.conv1.conv forward  2.91e-04  1.0e-04  FAIL"]) + "\n")
            lines = self.table(logs)
        at = lines.index("InceptionV3's AuxLogits.conv1 in fp32's self-test, as cuDNN chose:")
        self.assertEqual(lines[at + 1], f"  {aux}: FFT_TILING, fma, 12.0 MiB workspace")
        self.assertFalse(lines[at + 2].startswith("  forward fp32 nchw 3x768x17x17"), lines)

    def test_amps_profile_beside_pytorchs_and_none_under_tf32(self):
        with tempfile.TemporaryDirectory() as logs:
            for precision, batch in (("amp", 256), ("tf32", 128)):
                write(logs, f"profile-resnet50-{precision}.json", json.dumps({
                    "case": {"batchSizePerDevice": batch},
                    "profile": {"steps": 5, "stepSeconds": 0.037, "outsideLayersSeconds": 0.001,
                                "kinds": [{"kind": "Conv2d", "forwardSeconds": 0.005, "backwardSeconds": 0.0105}]}}))
            write(logs, "pytorch-profile-resnet50-amp.log", json.dumps({
                "engine": "pytorch", "model": "resnet50", "batch": 256, "precision": "amp", "median": 5560.0,
                "profile": {"steps": 5, "stepSeconds": 0.046, "attributedSeconds": 0.045, "kernelSeconds": 0.0452,
                            "kinds": [{"kind": "convolution", "seconds": 0.021}], "ops": [],
                            "kernels": [{"kernel": "sm90_xmma_fprop_implicit_gemm_f16f16", "seconds": 0.004}]}}) + "\n")
            lines = self.table(logs)
        at = lines.index("  amp batch 256: step 37.0, outside layers 1.0; Conv2d 15.5")
        self.assertEqual(lines[at + 1], "  pytorch amp batch 256: step 46.0 under the profiler, charged 45.0 of kernels "
                                        "45.2; convolution 21.0")
        tf32 = lines.index("  tf32 batch 128: step 37.0, outside layers 1.0; Conv2d 15.5")
        self.assertFalse(lines[tf32 + 1].startswith(("  pytorch", "  pytorch-profile")), lines[tf32 + 1])

    def test_a_pytorch_profile_that_did_not_run_says_why(self):
        with tempfile.TemporaryDirectory() as logs:
            write(logs, "profile-resnet50-fp32.json", json.dumps({
                "case": {"batchSizePerDevice": 64},
                "profile": {"steps": 5, "stepSeconds": 0.07, "outsideLayersSeconds": 0.001, "kinds": []}}))
            write(logs, "pytorch-profile-resnet50-fp32.log", "RuntimeError: CUDA error: out of memory\n")
            lines = self.table(logs)
        self.assertIn("  pytorch-profile-resnet50-fp32: - (RuntimeError: CUDA error: out of memory)", lines)


if __name__ == "__main__":
    unittest.main()
