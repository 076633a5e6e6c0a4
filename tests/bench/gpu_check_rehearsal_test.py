#!/usr/bin/env python3
"""bench/gpu_check.sh rehearsed without a GPU: a lent GPU gives a session about 15 minutes, and
a script that stops on a shell error, or never reaches a step it names, wastes them. Run against
this build's programs (which fail fast with BackendUnavailable where no GPU is), the script must
go from its first step to its table, every step must say how it ended, a step may fail only for
want of a GPU (never on a usage error, exit 2, nor on a DLBENCH_CUDA_* value the backend refuses,
which dlbench-worker reads before it looks for a device), and a spent budget must name the steps
a second call runs, which that call then runs and nothing else. The patterns the script and its
table read the worker's logs with are tried on the worker's own lines.

The rehearsal's bundle holds exactly the programs scripts/gpu-bundle.sh packs, so a program the
check runs and the bundle lacks fails here (exit 127), not on the GPU; and the steps that need
no GPU (generating and reading the real data sets) must succeed. Given a python3 that imports
torch (Debian's CPU build), the PyTorch side runs as far as it goes without a GPU: its scripts
parse their arguments and build their models, then stop at CUDA, and nowhere sooner.

    gpu_check_rehearsal_test.py BIN_DIR [TORCH_PYTHON]
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

BIN = os.path.abspath(sys.argv.pop(1)) if len(sys.argv) > 1 else sys.exit(__doc__)
TORCH_PYTHON = sys.argv.pop(1) if len(sys.argv) > 1 and os.path.isfile(sys.argv[1]) else ""  # else unittest's
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SCRIPT = os.path.join(ROOT, "bench", "gpu_check.sh")
TABLE = os.path.join(ROOT, "bench", "gpu_check_table.py")
BUNDLE_SCRIPT = os.path.join(ROOT, "scripts", "gpu-bundle.sh")
VERDICT = re.compile(r"^(ok|exit \d+|TIMED OUT after \d+s|SKIPPED \((not chosen|budget spent|self-test failed)\))$")
# Steps that need no GPU: they succeed here as on the device.
CPU_ONLY = ["real-data-generate", "input-measure-imagefolder", "input-measure-cityscapes", "input-check-values",
            "conv-fusion-described"]
# What a step that needs a GPU says where there is none: dlbench-worker, dlbench run, PyTorch, and
# PyTorch's script under engine: command.
NO_GPU = ("--backend cuda: no usable CUDA device", "finds no cuda device on this host",
          "Torch not compiled with CUDA enabled", "amp needs a CUDA device; PyTorch sees none",
          "--gpu: no usable CUDA device")
# Steps the script must reach (those behind compute-sanitizer or ncu run only where they exist).
EXPECTED = CPU_ONLY + (["list-devices", "real-data-amp-loss-scale", "pytorch-real-data-amp", "amp-overflow-trace", "injected-failure-cuda", "stopped-cuda", "dlbench-run-cuda", "dlbench-run-cuda-graph", "pytorch-command-resnet50-amp", "self-test", "gpu-tests", "cuda-backend-tests-1of2", "cuda-backend-tests-2of2", "profile-bert-amp",
             "dlbench-resnet50-amp-graph", "conv-fusion", "conv-fusion-check", "conv-fusion-bf16",
             "self-test-conv-batch-norm-fused", "dlbench-resnet50-amp-conv-bn-fused",
             "dlbench-resnet50-amp-conv-bn-fused-graph",
             "dlbench-resnet50-amp-conv-bn-apart", "profile-resnet50-amp-conv-bn-fused",
             "dlbench-resnet50-fp32-conv-graph-nhwc", "dlbench-resnet50-fp32-conv-graph-nhwc-own",
             "dlbench-resnet50-fp32-cudnn", "self-test-own-pool", "dlbench-resnet50-amp-pool-own",
             "dlbench-resnet50-fp32-accumulate", "self-test-weight-copies-kept", "dlbench-resnet50-amp-kept",
             "self-test-own-channels-last", "poisoned-resnet50-amp-own", "dlbench-resnet50-amp-own",
             "dlbench-resnet50-bf16-own", "profile-resnet50-amp-own",
             "dlbench-resnet50-tf32-kept", "dlbench-bert-amp-kept", "self-test-pad-4", "dlbench-resnet50-amp-pad-4",
             "profile-resnet50-amp-pad-4",
             "profile-resnet50-fp32-cudnn",
             "dlbench-resnet50-fp32-persistent", "self-test-fp32-persistent", "profile-resnet50-fp32",
             "pytorch-profile-resnet50-fp32", "pytorch-profile-resnet50-amp"]
            + [f"self-test-{g}-{p}" for g in ("resnet152-vgg16-alexnet", "inception-deeplab")
               for p in ("fp32", "tf32", "amp", "bf16")]
            + [f"poisoned-resnet50-{p}" for p in ("fp32", "tf32", "amp", "bf16")]
            + [f"{side}-resnet50-{p}" for side in ("dlbench", "pytorch") for p in ("fp32", "tf32", "amp", "bf16")]
            + [f"{side}-bert-{p}" for side in ("dlbench", "pytorch") for p in ("fp32", "tf32", "amp", "bf16")]
            + [f"train-{m}-amp" for m in ("resnet152", "vgg16", "alexnet", "inception_v3", "deeplabv3plus")]
            + [f"{side}-{m}-amp" for side in ("dlbench", "pytorch")
               for m in ("resnet152", "vgg16", "alexnet", "inception_v3", "deeplabv3plus")])


def bundled_programs():
    """The programs scripts/gpu-bundle.sh packs, from its `programs=(...)` line."""
    with open(BUNDLE_SCRIPT) as f:
        found = re.search(r"^programs=\(([^)]*)\)$", f.read(), re.M)
    if found is None:
        raise AssertionError(f"{BUNDLE_SCRIPT} has no programs=(...) line")
    return found.group(1).split()


def table_lines(test, logs):
    """bench/gpu_check_table.py's lines for LOG_DIR `logs`; it must exit 0."""
    done = subprocess.run([sys.executable, TABLE, logs], capture_output=True, text=True, timeout=60)
    test.assertEqual(done.returncode, 0, done.stderr)
    return done.stdout.splitlines()


def summary(logs, name="summary.txt"):
    """{step: verdict} from LOG_DIR/summary.txt (name, verdict, seconds per line), or from an
    earlier call's summary.N.txt."""
    steps = {}
    with open(os.path.join(logs, name)) as f:
        for line in f:
            found = re.match(r"^(\S+)\s+(.*?)\s+\d+s$", line.rstrip("\n"))
            if found is None:
                raise AssertionError(f"a summary line that says no verdict: {line!r}")
            steps[found.group(1)] = found.group(2)
    return steps


class GpuCheckRehearsal(unittest.TestCase):
    def rehearse(self, work, logs, torch=False, **env):
        bundle = os.path.join(work, "bundle")
        if torch:  # the scripts run as `python3`: that python3 first on PATH
            shim = os.path.join(work, "torch-python")
            os.makedirs(shim, exist_ok=True)
            os.symlink(TORCH_PYTHON, os.path.join(shim, "python3"))
            env["PATH"] = shim + os.pathsep + os.environ.get("PATH", "")
        if not os.path.exists(bundle):
            os.makedirs(os.path.join(bundle, "lib"))
            os.makedirs(os.path.join(bundle, "bin"))
            for program in bundled_programs():
                self.assertTrue(os.path.exists(os.path.join(BIN, program)), f"{program} is not built in {BIN}")
                os.symlink(os.path.join(BIN, program), os.path.join(bundle, "bin", program))
            # The examples, which the bundle carries beside bin/ as the build tree does.
            os.symlink(os.path.join(BIN, "..", "share"), os.path.join(bundle, "share"))
        done = subprocess.run(["bash", SCRIPT, bundle, os.path.join(work, logs)], cwd=ROOT, capture_output=True,
                              text=True, timeout=600, env={**os.environ, **env})
        output = done.stdout + done.stderr
        self.assertEqual(done.returncode, 0, output)
        for broken in ("unbound variable", "syntax error", "bad substitution", "bad array subscript"):
            self.assertNotIn(broken, output)
        return output, summary(os.path.join(work, logs))

    def test_every_step_is_reached_and_says_how_it_ended(self):
        with tempfile.TemporaryDirectory() as work:
            output, steps = self.rehearse(work, "logs", torch=bool(TORCH_PYTHON), GPU_CHECK_BUDGET="600")
            logs = os.path.join(work, "logs")
            with open(os.path.join(logs, "table.md")) as f:
                table = f.read()
            for name in EXPECTED:
                self.assertIn(name, steps, output)
            for name, verdict in steps.items():
                self.assertRegex(verdict, VERDICT, name)
                self.assertFalse(verdict.startswith("SKIPPED"), f"{name}: {verdict} with the whole budget left")
                # 126/127: a program the bundle lacks, or cannot run.
                self.assertNotIn(verdict, ("exit 126", "exit 127"), f"{name}: a program the bundle lacks?\n{output}")
                # 2: a usage error (dlbench's programs and argparse alike), which the GPU would meet as
                # well: amp-overflow-trace asked for a rate of 1000 where --learning-rate allows 100.
                if verdict == "exit 2":
                    with open(os.path.join(logs, f"{name}.log")) as f:
                        self.fail(f"{name}: a usage error, which the GPU would meet too:\n{f.read()[-2000:]}")
                # 1: a step that failed here failed for want of a GPU, and for nothing the GPU would
                # meet as well (a DLBENCH_CUDA_* value the backend refuses, a missing file).
                if verdict == "exit 1":
                    with open(os.path.join(logs, f"{name}.log"), errors="replace") as f:
                        said = f.read()
                    no_gpu = NO_GPU + (() if TORCH_PYTHON else ("No module named 'torch'",))
                    self.assertTrue(any(reason in said for reason in no_gpu),
                                    f"{name} failed for something other than the missing GPU:\n{said[-2000:]}")
                # The PyTorch scripts on a CPU build of torch: past their arguments and models, up to CUDA.
                if TORCH_PYTHON and name.startswith("pytorch-") and name != "pytorch-command-resnet50-amp":
                    with open(os.path.join(logs, f"{name}.log")) as f:
                        said = f.read()
                    self.assertIn("Torch not compiled with CUDA enabled", said, f"{name} stopped before CUDA")
        for name in CPU_ONLY:
            self.assertEqual(steps[name], "ok", name)
        # Correct first: the real-data amp diagnosis before any timed row (a first call of 515 s
        # never reached it when it came after fp32, BERT and amp), PyTorch's side with it where
        # dlbench's run left no loss scaling to read (here, without a GPU); then the floor
        # (fp32), its target (amp), BERT, and the floor in every other precision before amp's
        # settled A/Bs (a 515 s call on 2026-12-04 never reached tf32's and bf16's rows behind them).
        order = list(steps)
        for earlier, later in (("real-data-amp-loss-scale", "dlbench-resnet50-fp32"),
                               ("pytorch-real-data-amp", "dlbench-resnet50-fp32"),
                               ("dlbench-resnet50-fp32-cudnn", "dlbench-resnet50-amp"),
                               ("dlbench-resnet50-amp-conv-bn-apart", "dlbench-bert-fp32"),
                               ("dlbench-resnet50-amp-graph", "dlbench-bert-amp"),
                               ("pytorch-resnet50-bf16", "dlbench-resnet50-amp-kept"),
                               ("pytorch-bert-bf16", "dlbench-resnet50-amp-kept"),
                               ("conv-fusion", "dlbench-resnet50-amp-imagefolder")):
            self.assertLess(order.index(earlier), order.index(later), f"{earlier} after {later}")
        for model in ("resnet50", "bert-base", "resnet152", "inception_v3", "vgg16", "alexnet", "deeplabv3plus"):
            self.assertRegex(table, rf"\n\| {re.escape(model)} \| \d+ \| ", model)
        self.assertNotIn("the budget did not reach", output)

    def test_a_step_chosen_alone_makes_the_data_it_reads(self):
        # A second call whose readers of the real data ran out of budget in a first call that had
        # already generated it: the data dies with the first call, so a reader brings its own.
        readers = ["input-check-values", "input-measure-cityscapes", "dlbench-resnet50-amp-imagefolder"]
        with tempfile.TemporaryDirectory() as work:
            output, steps = self.rehearse(work, "logs", GPU_CHECK_BUDGET="600",
                                          GPU_CHECK_ONLY="^(" + "|".join(readers) + ")$")
            with open(os.path.join(work, "logs", "summary.txt")) as f:
                made = [line for line in f if line.startswith("real-data-generate ")]
            with open(os.path.join(work, "logs", "dlbench-resnet50-amp-imagefolder.log")) as f:
                said = f.read()
        self.assertEqual(len(made), 1, output)  # once a call, whichever reader comes first
        self.assertEqual(steps["real-data-generate"], "ok", output)
        self.assertEqual(steps["input-check-values"], "ok", output)
        self.assertEqual(steps["input-measure-cityscapes"], "ok", output)
        self.assertEqual(steps["dlbench-resnet50-amp-imagefolder"], "exit 1", output)
        self.assertTrue(any(reason in said for reason in NO_GPU), said)
        for name, verdict in steps.items():
            if name not in readers + ["real-data-generate"]:
                self.assertEqual(verdict, "SKIPPED (not chosen)", name)

    def test_a_variant_whose_self_test_failed_is_not_timed(self):
        # Self-test documents as a first call left them in LOG_DIR: dlbench's own batch norms failed
        # a check of their own; kept weight copies failed one that the default failed as well.
        def document(*failed):
            return {"summary": {"passed": 30, "failed": len(failed), "skipped": 0},
                    "checks": [{"rank": 0, "precision": p, "name": n, "outcome": "failed"} for p, n in failed]}
        shared = ("amp", "bottleneck with projection")
        timed = ["dlbench-resnet50-amp-own", "dlbench-resnet50-bf16-own", "profile-resnet50-amp-own",
                 "dlbench-resnet50-amp-kept", "dlbench-resnet50-fp32-persistent"]
        with tempfile.TemporaryDirectory() as work:
            logs = os.path.join(work, "logs")
            os.makedirs(logs)
            for name, doc in (("self-test", document(shared)),
                              ("self-test-own-channels-last", document(("amp", "training, 5 steps"))),
                              ("self-test-weight-copies-kept", document(shared))):
                with open(os.path.join(logs, name + ".json"), "w") as f:
                    json.dump(doc, f)
            output, steps = self.rehearse(work, "logs", GPU_CHECK_BUDGET="600",
                                          GPU_CHECK_ONLY="^(" + "|".join(timed) + ")$")
        for name in timed[:3]:
            self.assertEqual(steps[name], "SKIPPED (self-test failed)", output)
        for name in timed[3:]:  # timed: here, that is, they fail for want of a GPU
            self.assertEqual(steps[name], "exit 1", output)

    def test_a_spent_budget_names_the_steps_a_second_call_runs(self):
        # The second call runs in the first call's LOG_DIR, carried back to the device, as
        # gpu_check.sh asks: the first call's summary and rows stay, and one table shows them.
        # A row no step of this script makes again (batch norm's *Ex calls in fp32, settled 2026-11-29).
        row = {"model": "resnet50", "precision": "fp32", "engine": "dlbench-ex", "batch": 64, "median": 882.6}
        with tempfile.TemporaryDirectory() as work:
            logs = os.path.join(work, "logs")
            output, first = self.rehearse(work, "logs", GPU_CHECK_BUDGET="15")
            found = re.search(r"a second call runs them with GPU_CHECK_ONLY='([^']+)'", output)
            self.assertIsNotNone(found, output)
            unreached = [name for name, verdict in first.items() if verdict == "SKIPPED (budget spent)"]
            self.assertTrue(unreached)
            self.assertIn(f"the budget did not reach {len(unreached)} steps", output)
            with open(os.path.join(logs, "comparison.jsonl"), "a") as f:  # as if the first call had timed it
                f.write(json.dumps(row) + "\n")
            second_output, second = self.rehearse(work, "logs", GPU_CHECK_BUDGET="600", GPU_CHECK_ONLY=found.group(1))
            self.assertEqual(summary(logs, "summary.1.txt"), first)
            with open(os.path.join(logs, "comparison.jsonl")) as f:
                self.assertIn(json.dumps(row), f.read())
        # The real data are made again where a chosen step reads them (the first call's are gone
        # with its /tmp): where the budget stopped between making them and their readers, how far
        # it reached depending on the machine's load, real-data-generate runs in both calls.
        with open(SCRIPT) as f:
            readers = set(re.findall(r"needs_real_data ([\w-]+)", f.read()))
        self.assertIn("dlbench-resnet50-amp-imagefolder", readers)
        makes_data = bool(readers & set(unreached))
        for name, verdict in second.items():
            if name in unreached or (name == "real-data-generate" and makes_data):
                self.assertFalse(verdict.startswith("SKIPPED"), f"{name}: {verdict}")
            else:
                self.assertEqual(verdict, "SKIPPED (not chosen)", name)
        self.assertEqual(set(second), set(first))
        # The table's columns: dlbench, graph, bn *Ex, ...
        self.assertRegex(second_output, r"\n\| resnet50 \| 64 \| fp32 \| [^|]+\| [^|]+\| 882\.6 \|",
                         "the first call's row in the table")


class SelfTestThroughTheTable(unittest.TestCase):
    """The table reads a real self-test: its document, and, where the deadline stopped it before
    it wrote one, the check lines it printed, which must count the same checks."""

    def test_the_document_and_the_printed_lines_count_the_same_checks(self):
        with tempfile.TemporaryDirectory() as logs:
            with open(os.path.join(logs, "self-test.log"), "w") as log:
                done = subprocess.run([os.path.join(BIN, "dlbench-worker"), "--self-test", "--precision", "fp32",
                                       "--output", os.path.join(logs, "self-test.json")],
                                      stdout=log, stderr=subprocess.STDOUT, timeout=240)
            self.assertEqual(done.returncode, 0)
            with open(os.path.join(logs, "self-test.json")) as f:
                passed = json.load(f)["summary"]["passed"]
            self.assertGreater(passed, 20)
            lines = table_lines(self, logs)
            self.assertIn(f"self-test: {passed} of {passed} checks passed, 0 skipped", lines)
            # ResNet-50's whole step, read from the worker's own line: its worst layer and share of the
            # bound (fp32 holds its max pools to the step's bound, so says no figure of theirs apart).
            self.assertTrue(any(re.fullmatch(r"  fp32 resnet50: passed, worst \S+ \(.+\), \d+% of its bound 5\.00e-04 "
                                             r"\[self-test\]", line) for line in lines), lines)
            os.remove(os.path.join(logs, "self-test.json"))  # as a self-test its deadline stopped leaves it
            self.assertTrue(any(line.startswith(f"self-test: no document; stopped after {passed} checks ({passed} "
                                                f"passed, 0 failed, 0 skipped); last: ")
                                for line in table_lines(self, logs)))


class ProfileThroughTheTable(unittest.TestCase):
    """The table reads a real --profile document: the step by kind, and the stem beside the
    slowest layers."""

    def test_a_profiled_step_is_summed_by_kind_with_its_stem(self):
        with tempfile.TemporaryDirectory() as logs:
            done = subprocess.run([os.path.join(BIN, "dlbench-worker"), "--model", "resnet50", "--image-size", "32",
                                   "--batch-size", "2", "--warmup-steps", "1", "--measure-steps", "2", "--repeats", "1",
                                   "--extra-repeats", "0", "--profile", "2", "--output",
                                   os.path.join(logs, "profile-resnet50-fp32.json")],
                                  capture_output=True, text=True, timeout=240)
            self.assertEqual(done.returncode, 0, done.stderr)
            lines = table_lines(self, logs)
            with open(os.path.join(logs, "profile-resnet50-fp32.json")) as f:
                layers = json.load(f)["profile"]["layers"]
        at = next(i for i, line in enumerate(lines) if line.startswith("  fp32 batch 2: "))
        self.assertRegex(lines[at], r"^  fp32 batch 2: step [0-9.]+, outside layers [0-9.]+ "
                                    r"\((\w+ [0-9.]+, ){2}\w+ [0-9.]+\); (\S+ [0-9.]+, ){4}\S+ [0-9.]+$")
        self.assertIn(" Conv2d ", lines[at])
        # Which layers are slowest on a shared CPU is noise (the stem's batch norm has led); what the
        # table owes is the document's four slowest, in order, with their figures.
        found = re.fullmatch(r"    stem conv1 ([0-9.]+) \(forward ([0-9.]+)\); slowest: ((?:\S+ [0-9.]+, ){3}\S+ [0-9.]+)",
                             lines[at + 1])
        self.assertIsNotNone(found, lines[at + 1])
        ms = {l["name"]: 1e3 * (l["forwardSeconds"] + l["backwardSeconds"]) for l in layers}
        self.assertAlmostEqual(float(found[1]), ms["conv1"], delta=0.006)
        stem_forward = next(1e3 * l["forwardSeconds"] for l in layers if l["name"] == "conv1")
        self.assertAlmostEqual(float(found[2]), stem_forward, delta=0.006)
        named = [pair.rsplit(" ", 1) for pair in found[3].split(", ")]
        for name, figure in named:
            self.assertIn(name, ms)
            self.assertAlmostEqual(float(figure), ms[name], delta=0.006)
        self.assertEqual([name for name, _ in named], sorted(ms, key=ms.get, reverse=True)[:4])


class ReplayPatterns(unittest.TestCase):
    """The patterns gpu_check.sh reads its own logs with, against the lines the worker writes."""

    def test_a_batch_norm_named_first_in_forward_is_found_whatever_it_fused(self):
        with open(SCRIPT) as f:
            found = re.search(r"^batch_norm_first='([^']+)'$", f.read(), re.M)
        self.assertIsNotNone(found, "gpu_check.sh has no batch_norm_first='...' line")
        said = "replayed at loss scale 512: forward: first non-finite layer output: {}, 3 inf, 0 NaN of 802816; loss inf"

        def matches(line):  # as the script's grep -Eq reads the log
            return subprocess.run(["grep", "-Eq", found.group(1)], input=line, text=True).returncode == 0

        for layer in ("bn1 (BatchNorm2d+ReLU)", "layer1.0.bn3 (BatchNorm2d+Add+ReLU)", "layer1.0.downsample.1 (BatchNorm2d)"):
            self.assertTrue(matches(said.format(layer)), layer)
        for layer in ("conv1 (Conv2d)", "fc (Linear)", "layer1.0 (Bottleneck)"):
            self.assertFalse(matches(said.format(layer)), layer)
        # A batch norm named in backward, not forward, is not this A/B's.
        self.assertFalse(matches("replayed at loss scale 512: forward: every layer output finite; loss 2.8; backward: "
                                 "first non-finite input gradient: bn1 (BatchNorm2d+ReLU), 3 inf, 0 NaN of 802816"))


class WorkerLogsThroughTheTable(unittest.TestCase):
    """The table reads a real worker's skipped-step lines and result, not only hand-written ones:
    amp on the CPU with fp16 emulated (every step of this small case skips, in layer4's batch
    norms over two values a channel), logged as gpu_check's real-data-amp-loss-scale step logs it."""

    def test_a_logged_amp_run_is_counted_and_its_replays_placed(self):
        with tempfile.TemporaryDirectory() as logs:
            with open(os.path.join(logs, "real-data-amp-loss-scale.log"), "w") as log:
                done = subprocess.run(
                    [os.path.join(BIN, "dlbench-worker"), "--precision", "amp", "--model", "resnet50", "--image-size",
                     "32", "--batch-size", "2", "--warmup-steps", "0", "--measure-steps", "3", "--repeats", "1",
                     "--extra-repeats", "0", "--output", os.path.join(logs, "real-data-amp-loss-scale.json")],
                    stdout=log, stderr=subprocess.STDOUT, timeout=240,
                    env={**os.environ, "DLBENCH_CPU_FP16": "emulated", "DLBENCH_LOG_LOSS_SCALE": "1"})
            self.assertEqual(done.returncode, 0)
            with open(os.path.join(logs, "real-data-amp-loss-scale.json")) as f:
                scaling = json.load(f)["lossScaling"]
            lines = table_lines(self, logs)
            # The script's own count of the skips, which decides whether PyTorch's run comes early.
            with open(SCRIPT) as f:
                found = re.search(r"^dlbench_skips=\$\(grep -c '([^']+)' ", f.read(), re.M)
            self.assertIsNotNone(found, "gpu_check.sh has no dlbench_skips=$(grep -c '...' line")
            counted = subprocess.run(["grep", "-c", found.group(1), os.path.join(logs, "real-data-amp-loss-scale.log")],
                                     capture_output=True, text=True).stdout.strip()
        skipped = scaling["skippedSteps"]
        self.assertGreater(skipped, 0)
        self.assertEqual(counted, str(skipped + 1))  # the repeats' skips and the trace's
        at = next(i for i, line in enumerate(lines) if line.startswith("  real-data-amp-loss-scale: "))
        # Each skipped step of the repeats is logged, and the trace after them logs one more.
        self.assertRegex(lines[at], rf"^  real-data-amp-loss-scale: {skipped + 1} steps skipped; step 1 skipped, loss "
                                    r"scale now 32768: loss ")
        self.assertEqual(lines[at + 1], f"    loss scaling: {skipped} of {scaling['steps']} steps skipped, the scale "
                                        f"ended at {scaling['finalScale']:g}")
        self.assertTrue(lines[at + 2].startswith("      untimed step "), lines[at + 2])  # lossScaling.overflow
        self.assertTrue(any(re.match(r"^    gradients first not finite: [\w.]+\.(weight|bias) \d+", line) for line in lines),
                        "\n".join(lines))
        # Every step replayed (the trace's too): forward finite, and the first inf in a batch norm's
        # input gradient.
        replayed = [line for line in lines if line.startswith("    ") and "replayed layer by layer" in line]
        self.assertEqual(len(replayed), 1, "\n".join(lines))
        self.assertRegex(replayed[0], rf"^    {skipped + 1} replayed layer by layer: forward all finite {skipped + 1}; "
                                      r"backward [\w.]+ \(BatchNorm2d[^)]*\) \d+")


if __name__ == "__main__":
    unittest.main(verbosity=2)
