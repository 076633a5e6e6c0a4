#!/usr/bin/env python3
"""engine: command with a real peer: examples/pytorch/train_image_classifier.py (every classifier it names),
train_bert.py (synthetic and on NVIDIA's shards) and train_deeplabv3plus.py (Debian's PyTorch 1.13) through `dlbench run`
with 1 and 2 processes (gloo), the optimizer and model they state judged against the spec, and failing commands as
results with reasons.

    pytorch_run_test.py DLBENCH_BINARY TORCH_PYTHON
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

DLBENCH = TORCH_PYTHON = None
SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


RESNET_EXAMPLE = """[sh, -c, 'exec python3 "$DLBENCH_HOME/examples/pytorch/train_image_classifier.py"']"""


def command_run(name, command, rest, model="resnet50"):
    """A BenchmarkRun of `model` under engine: command; `rest` is the rest of its spec, indented."""
    return (f"apiVersion: dlbench.io/v1alpha1\nkind: BenchmarkRun\nmetadata: {{name: {name}}}\nspec:\n"
            f"  model: {model}\n  engine: command\n  command: {command}\n" + rest)


def run(spec_yaml, tmp):
    """`dlbench run` on a BenchmarkRun; python3 on PATH is the one with PyTorch."""
    bin_dir = os.path.join(tmp, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    if not os.path.exists(os.path.join(bin_dir, "python3")):
        os.symlink(TORCH_PYTHON, os.path.join(bin_dir, "python3"))
    path = os.path.join(tmp, "run.yaml")
    with open(path, "w") as f:
        f.write(spec_yaml)
    status_file = os.path.join(tmp, "status.json")
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"])
    p = subprocess.run([DLBENCH, "run", "-f", path, "--output", status_file, "--max-devices", "2"], env=env,
                       capture_output=True, text=True, timeout=900)
    with open(status_file) as f:
        return p, json.load(f)["status"]


class PyTorchThroughDlbenchRun(unittest.TestCase):
    def test_one_and_two_processes(self):
        with open(os.path.join(SOURCE, "crds", "examples", "pytorch-resnet50.yaml")) as f:
            example = f.read()
        # The shipped example, made small enough for two cores.
        small = (example.replace("imageSize: 224", "imageSize: 64")
                 .replace("batchSizePerDevice: [16]", "batchSizePerDevice: [4]")
                 .replace("warmupSteps: 5, measureSteps: 20, repeats: 3", "warmupSteps: 2, measureSteps: 4, repeats: 3"))
        self.assertNotEqual(small, example, "the example's shape changed; update this test")
        with tempfile.TemporaryDirectory() as tmp:
            p, status = run(small, tmp)
            report = subprocess.run([DLBENCH, "report", os.path.join(tmp, "status.json"), "--format", "csv"],
                                    capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual(status["phase"], "Succeeded")
        results = {r["case"]["gpusPerNode"]: r for r in status["results"]}
        # The loss the script printed after each repeat is in the status, and its last in the report.
        for devices, r in results.items():
            self.assertEqual(len(r["lossAfterRepeats"]), 3, r)
            self.assertTrue(all(0 < loss < 1000 for loss in r["lossAfterRepeats"]), r)
            row = f"loss,fp32,4,pytorch-resnet50,1,{devices},"
            cell = [line[len(row):] for line in report.stdout.splitlines() if line.startswith(row)]
            self.assertEqual(len(cell), 1, report.stdout)
            self.assertAlmostEqual(float(cell[0]), r["lossAfterRepeats"][-1], delta=1e-3 * r["lossAfterRepeats"][-1])
        self.assertEqual(sorted(results), [1, 2])
        for devices, r in results.items():
            self.assertEqual(r["state"], "Succeeded", r.get("message"))
            repeats = r["throughput"]["repeats"]
            self.assertEqual(len(repeats), 3)
            # Throughput and step time come from the same marker timestamps: the measured time
            # each repeat's throughput implies is the sum of its measured steps.
            global_batch, measured = 4 * devices, 4
            implied_seconds = sum(global_batch * measured / t for t in repeats)
            step_mean = r["stepTimeSeconds"]["mean"]
            self.assertAlmostEqual(implied_seconds, step_mean * measured * len(repeats), delta=1e-6 * implied_seconds)
            self.assertGreater(r["throughput"]["median"], 0)
            # The script states how it trained, read back from torch.optim: resnet50's default
            # rate, 0.1 at a global batch of 256, linearly less at the case's.
            self.assertEqual(r["optimizer"], {"name": "sgd", "learningRate": 0.1 * global_batch / 256,
                                              "momentum": 0.9, "weightDecay": 0.0001})
        one, two = results[1]["throughput"]["median"], results[2]["throughput"]["median"]
        # A command runs its steps once: its repeats are judged (CPU bound 5%), never measured again.
        verdicts = [results[d]["stability"]["verdict"] for d in (1, 2)]
        self.assertEqual([results[d]["stability"]["extraRepeats"] for d in (1, 2)], [0, 0])
        if "speedup" in results[2]:
            self.assertEqual(verdicts, ["stable", "stable"])
            self.assertAlmostEqual(results[2]["speedup"], two / one, places=9)
            self.assertAlmostEqual(results[2]["scalingEfficiency"], two / one / 2, places=9)
            self.assertAlmostEqual(results[1]["speedup"], 1.0)
        elif verdicts == ["stable", "stable"]:  # a baseline slowed by the shared machine: refused, and why
            self.assertIn("is impossible, so one of the two cases was disturbed", results[2]["scalingRefused"])
        else:  # a shared machine: left out, and said so
            self.assertIn("unstable (Unstable)", results[2]["scalingRefused"])
        self.assertIn("engine command", p.stdout)

    def test_the_image_classifier_trains_every_model_it_names(self):
        # resnet50 is timed above; the others at the smallest image each takes, two steps each.
        images = {"resnet152": 32, "vgg16": 32, "alexnet": 63, "inception_v3": 299}
        with tempfile.TemporaryDirectory() as tmp:
            runs = {model: run(command_run(f"pytorch-{model.replace('_', '-')}", RESNET_EXAMPLE, f"""\
  data: {{imageSize: {image}}}
  cases: [{{batchSizePerDevice: 2, precision: fp32}}]
  methodology: {{warmupSteps: 1, measureSteps: 1, repeats: 1}}
  limits: {{backoffLimit: 0}}
""", model=model), tmp) for model, image in images.items()}
        for model, (p, status) in runs.items():
            with self.subTest(model):
                self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
                result = status["results"][0]
                self.assertEqual(result["state"], "Succeeded", result.get("message"))
                self.assertEqual(result["throughput"]["unit"], "samples/s")
                # Two small steps from torchvision's initialisation: about chance over 1,000 classes,
                # InceptionV3's 1.4 times that (its auxiliary term): the network the case names.
                expected = math.log(1000) * (1.4 if model == "inception_v3" else 1)
                loss = result["lossAfterRepeats"][0]
                self.assertTrue(0.5 * expected < loss < 2 * expected, (model, loss, expected))
        # It says which network it trained, by name and parameter count, and in which precision, which dlbench-exec judges
        # against the case (the runs above passed that judgement for every example and model).
        env = dict(os.environ, DLBENCH_MODEL="alexnet", DLBENCH_IMAGE_SIZE="63", DLBENCH_NODES="1", DLBENCH_NODE_RANK="0",
                   DLBENCH_GPUS_PER_NODE="1", DLBENCH_BATCH_SIZE="2", DLBENCH_WARMUP_STEPS="0",
                   DLBENCH_MEASURE_STEPS="1", DLBENCH_REPEATS="1")
        direct = subprocess.run([TORCH_PYTHON, os.path.join(SOURCE, "examples", "pytorch", "train_image_classifier.py")],
                                env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(direct.returncode, 0, direct.stderr)
        self.assertIn("@dlbench fact model alexnet\n", direct.stdout)
        self.assertIn("@dlbench fact parameters 61100840\n", direct.stdout)  # torchvision's alexnet, as dlbench-worker's
        self.assertIn("@dlbench fact precision fp32\n", direct.stdout)
        self.assertIn("@dlbench fact imageSize 63x63\n", direct.stdout)
        self.assertEqual(direct.stdout.count("@dlbench step 2\n"), 1, direct.stdout)

    def test_pytorch_trains_on_the_same_imagefolder(self):
        # The data set dlbench-worker would read, with a broken file the example skips as dlbench does.
        with tempfile.TemporaryDirectory() as tmp:
            images = os.path.join(tmp, "images")
            subprocess.run([os.path.join(os.path.dirname(DLBENCH), "dlbench-input"), "generate", images,
                            "--classes", "2", "--per-class", "6", "--broken", "1"], check=True, capture_output=True)
            p, status = run(command_run("pytorch-real", RESNET_EXAMPLE, f"""\
  data: {{source: imagefolder, imageSize: 64, path: {images}, decodeThreads: 1}}
  matrix: {{gpusPerNode: [1, 2], batchSizePerDevice: [4], precision: [fp32]}}
  methodology: {{warmupSteps: 2, measureSteps: 3, repeats: 2}}
  limits: {{backoffLimit: 0}}
"""), tmp)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        # Two processes as well: their DataLoaders start workers from spawned processes.
        self.assertEqual(len(status["results"]), 2)
        for result in status["results"]:
            self.assertEqual(result["state"], "Succeeded", result.get("message"))
            self.assertEqual(len(result["throughput"]["repeats"]), 2)

    def test_bert_base_with_adamw_on_one_and_two_processes(self):
        with open(os.path.join(SOURCE, "crds", "examples", "pytorch-bert-base.yaml")) as f:
            example = f.read()
        # The shipped example, made small enough for two cores (the CPU has no amp).
        small = (example.replace("sequenceLength: 128", "sequenceLength: 16")
                 .replace("gpusPerNode: [1, 8]", "gpusPerNode: [1, 2]")
                 .replace("batchSizePerDevice: [64]", "batchSizePerDevice: [2]")
                 .replace("precision: [amp]", "precision: [fp32]")
                 .replace("warmupSteps: 20, measureSteps: 100, repeats: 7", "warmupSteps: 1, measureSteps: 2, repeats: 2")
                 .replace("weightDecay: 0.01}", "weightDecay: 0.01, learningRateWarmupSteps: 3}"))
        self.assertEqual(small.count("sequenceLength: 16") + small.count("[1, 2]") + small.count("[2]")
                         + small.count("[fp32]") + small.count("measureSteps: 2,")
                         + small.count("learningRateWarmupSteps: 3"), 6,
                         "the example's shape changed; update this test")
        with tempfile.TemporaryDirectory() as tmp:
            p, status = run(small, tmp)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        results = {r["case"]["gpusPerNode"]: r for r in status["results"]}
        self.assertEqual(sorted(results), [1, 2])
        for r in results.values():
            self.assertEqual(r["state"], "Succeeded", r.get("message"))
            self.assertEqual(r["throughput"]["unit"], "sequences/s")
            self.assertEqual(len(r["throughput"]["repeats"]), 2)
            # The script warmed the rate up as the spec asked, and said so.
            self.assertEqual(r["optimizer"], {"name": "adamw", "learningRate": 0.0001, "momentum": 0.9,
                                              "weightDecay": 0.01, "learningRateWarmupSteps": 3})

    def test_bert_base_on_nvidia_pretraining_shards(self):
        with open(os.path.join(SOURCE, "crds", "examples", "pytorch-bert-base.yaml")) as f:
            example = f.read()
        with tempfile.TemporaryDirectory() as tmp:
            # The shards dlbench-worker would read (NVIDIA's format), with a broken one the script skips too.
            shards = os.path.join(tmp, "shards")
            subprocess.run([os.path.join(os.path.dirname(DLBENCH), "dlbench-input"), "generate", shards, "--data",
                            "bertpretraining", "--shards", "3", "--per-shard", "8", "--sequence-length", "16",
                            "--max-predictions", "3", "--broken", "1"], check=True, capture_output=True)
            small = (example.replace("data: {source: synthetic, sequenceLength: 128}",
                                     f"data: {{source: bertpretraining, sequenceLength: 16, path: {shards}}}")
                     .replace("gpusPerNode: [1, 8]", "gpusPerNode: [1, 2]")
                     .replace("batchSizePerDevice: [64]", "batchSizePerDevice: [2]")
                     .replace("precision: [amp]", "precision: [fp32]")
                     .replace("warmupSteps: 20, measureSteps: 100, repeats: 7", "warmupSteps: 1, measureSteps: 2, repeats: 2"))
            self.assertEqual(sum(small.count(t) for t in (shards, "[1, 2]", "[2]", "[fp32]", "measureSteps: 2,")), 5,
                             "the example's shape changed; update this test")
            p, status = run(small, tmp)
            # Shards made for 32 tokens in a 16-token case: the script trains what the shards hold
            # (dlbench-worker refuses them), says so, and dlbench keeps no figures for the case.
            longer = os.path.join(tmp, "longer")
            subprocess.run([os.path.join(os.path.dirname(DLBENCH), "dlbench-input"), "generate", longer, "--data",
                            "bertpretraining", "--shards", "1", "--per-shard", "4", "--sequence-length", "32",
                            "--max-predictions", "5"], check=True, capture_output=True)
            other, other_status = run(small.replace(shards, longer).replace("[1, 2]", "[1]"), tmp)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        results = {r["case"]["gpusPerNode"]: r for r in status["results"]}
        self.assertEqual(sorted(results), [1, 2])
        for r in results.values():
            self.assertEqual(r["state"], "Succeeded", r.get("message"))
            self.assertEqual(r["throughput"]["unit"], "sequences/s")
            # About chance at the start: ln(30522) for the masked tokens plus ln 2.
            self.assertTrue(all(8 < loss < 13 for loss in r["lossAfterRepeats"]), r)
        self.assertEqual(other.returncode, 1, other.stdout + other.stderr)
        [result] = other_status["results"]
        self.assertEqual((result["state"], result["reason"]), ("Failed", "CaseMismatch"), result)
        self.assertIn("the command says its steps took sequences of 32 tokens instead of 16", result["message"])
        self.assertNotIn("throughput", result)

    def test_deeplabv3plus_on_synthetic_crops_and_on_cityscapes(self):
        with open(os.path.join(SOURCE, "crds", "examples", "pytorch-deeplabv3plus.yaml")) as f:
            example = f.read()
        with tempfile.TemporaryDirectory() as tmp:
            # The Cityscapes tree dlbench-worker would read, with a broken pair the script skips as it does.
            streets = os.path.join(tmp, "cityscapes")
            subprocess.run([os.path.join(os.path.dirname(DLBENCH), "dlbench-input"), "generate", streets, "--data",
                            "cityscapes", "--cities", "2", "--per-city", "3", "--width", "96", "--height", "48",
                            "--broken", "1"], check=True, capture_output=True)
            # The shipped example, made small enough for two cores (the CPU has no amp).
            small = (example.replace("imageHeight: 512", "imageHeight: 32").replace("imageWidth: 1024", "imageWidth: 64")
                     .replace("path: /data/cityscapes", f"path: {streets}")
                     .replace("decodeThreads: 8", "decodeThreads: 1")
                     .replace("gpusPerNode: [1, 8]", "gpusPerNode: [1, 2]")
                     .replace("batchSizePerDevice: [8]", "batchSizePerDevice: [2]")
                     .replace("precision: [amp]", "precision: [fp32]")
                     .replace("warmupSteps: 20, measureSteps: 100, repeats: 7",
                              "warmupSteps: 1, measureSteps: 2, repeats: 2"))
            self.assertEqual(sum(small.count(t) for t in ("imageHeight: 32", "imageWidth: 64", streets, "decodeThreads: 1",
                                                          "[1, 2]", "[2]", "[fp32]", "measureSteps: 2,")), 8,
                             "the example's shape changed; update this test")
            p, status = run(small, tmp)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            results = {r["case"]["gpusPerNode"]: r for r in status["results"]}
            self.assertEqual(sorted(results), [1, 2])
            for devices, r in results.items():
                self.assertEqual(r["state"], "Succeeded", r.get("message"))
                self.assertEqual(len(r["throughput"]["repeats"]), 2)
                self.assertTrue(all(0 < loss < 10 for loss in r["lossAfterRepeats"]), r)
                # DeepLabV3+'s recipe, 0.007 at a global batch of 16, linearly less at the case's.
                self.assertEqual(r["optimizer"], {"name": "sgd", "learningRate": 0.007 * 2 * devices / 16,
                                                  "momentum": 0.9, "weightDecay": 0.0001})
            # Synthetic height x width crops reach the script as DLBENCH_IMAGE_SIZE=32x64.
            synthetic = small[:small.index("  data:")] + "  data: {source: synthetic, imageHeight: 32, imageWidth: 64}\n" + \
                small[small.index("  matrix:"):].replace("gpusPerNode: [1, 2]", "gpusPerNode: [1]")
            p, status = run(synthetic, tmp)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual(status["results"][0]["state"], "Succeeded", status["results"][0].get("message"))

    def test_the_scripts_warm_the_rate_up_by_applied_updates(self):
        """dlbench_torch.Optimizer's rates, update by update, as dlbench-worker's warmed_up_rate: t / N
        of the rate at the t-th applied update; a step a GradScaler skipped (its scale backed off)
        does not count. Debian's PyTorch has no CUDA GradScaler, so a stand-in skips the third step."""
        program = r'''
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
from dlbench_torch import Optimizer

class SkipsThirdStep:
    def __init__(self):
        self.calls, self.scale = 0, 65536.0
    def is_enabled(self):
        return True
    def get_scale(self):
        return self.scale
    def step(self, optimizer):
        self.calls += 1
        if self.calls != 3:
            optimizer.step()
    def update(self):
        self.scale = self.scale / 2 if self.calls == 3 else self.scale

out = {}
for name in ("sgd", "adamw"):
    model = torch.nn.Linear(3, 2)
    inner = (torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if name == "sgd"
             else torch.optim.AdamW(model.parameters(), lr=0.1))
    for scaler in (None, SkipsThirdStep()):
        optimizer = Optimizer(inner, warmup_steps=4)
        for group in inner.param_groups:
            group["lr"] = 0.1
        rates = []
        for _ in range(6):
            model(torch.ones(1, 3)).sum().backward()
            optimizer.step(model, scaler)
            rates.append(inner.param_groups[0]["lr"])
        out[name + (" scaled" if scaler else "")] = rates
print(json.dumps(out))
'''
        p = subprocess.run([TORCH_PYTHON, "-c", program, os.path.join(SOURCE, "examples", "pytorch")],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        rates = json.loads(p.stdout.strip().splitlines()[-1])
        plain = [0.025, 0.05, 0.075, 0.1, 0.1, 0.1]
        skipped = [0.025, 0.05, 0.075, 0.075, 0.1, 0.1]  # the third step skipped: its rate is tried again
        for name in ("sgd", "adamw"):
            for got, want in zip(rates[name], plain):
                self.assertAlmostEqual(got, want, delta=1e-12, msg=(name, rates[name]))
            for got, want in zip(rates[name + " scaled"], skipped):
                self.assertAlmostEqual(got, want, delta=1e-12, msg=(name, rates[name + " scaled"]))

    def test_what_pytorch_cannot_train_and_what_trained_otherwise_are_no_figures(self):
        # lamb: torch.optim has none, so the example says so instead of training with another one.
        # A command that states another learning rate than the spec's timed other work. A rate at
        # which PyTorch's loss turns NaN is LossNotFinite, as for dlbench-worker: the example
        # reports the loss after each repeat.
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "other-rate.sh"), "w") as f:
                f.write("""for fact in "optimizer sgd" "learningRate 0.5" "momentum 0.9" "weightDecay 0.0001"; do
  echo "@dlbench fact $fact"
done
i=0
while [ $i -lt "$DLBENCH_TOTAL_STEPS" ]; do sleep 0.02; echo "@dlbench step $DLBENCH_GLOBAL_BATCH_SIZE"; i=$((i + 1)); done
""")
            lamb, lamb_status = run(command_run("pytorch-lamb", RESNET_EXAMPLE, """\
  data: {imageSize: 64}
  cases: [{batchSizePerDevice: 2, precision: fp32}]
  optimizer: {name: lamb}
  methodology: {warmupSteps: 1, measureSteps: 2, repeats: 1}
"""), tmp)
            other, other_status = run(command_run("other-rate", f"[sh, {os.path.join(tmp, 'other-rate.sh')}]", """\
  cases: [{batchSizePerDevice: 2, precision: fp32}]
  methodology: {warmupSteps: 1, measureSteps: 2, repeats: 1}
  limits: {backoffLimit: 0}
"""), tmp)
            with open(os.path.join(tmp, "other-model.sh"), "w") as f:
                f.write("""echo "@dlbench fact model vgg16"
i=0
while [ $i -lt "$DLBENCH_TOTAL_STEPS" ]; do sleep 0.02; echo "@dlbench step $DLBENCH_GLOBAL_BATCH_SIZE"; i=$((i + 1)); done
""")
            other_model, other_model_status = run(command_run("other-model", f"[sh, {os.path.join(tmp, 'other-model.sh')}]",
                                                              """\
  cases: [{batchSizePerDevice: 2, precision: fp32}]
  methodology: {warmupSteps: 1, measureSteps: 2, repeats: 1}
  limits: {backoffLimit: 0}
"""), tmp)
            bert, bert_status = run(command_run("classifier-for-bert", RESNET_EXAMPLE, """\
  data: {sequenceLength: 16}
  cases: [{batchSizePerDevice: 2, precision: fp32}]
  methodology: {warmupSteps: 1, measureSteps: 2, repeats: 1}
""", model="bert-base"), tmp)
            diverged, diverged_status = run(command_run("pytorch-diverges", RESNET_EXAMPLE, """\
  data: {imageSize: 64}
  cases: [{batchSizePerDevice: 4, precision: fp32}]
  optimizer: {learningRate: 100}
  methodology: {warmupSteps: 1, measureSteps: 2, repeats: 3}
  limits: {backoffLimit: 1}
"""), tmp)
        self.assertEqual(diverged.returncode, 1, diverged.stdout + diverged.stderr)
        result = diverged_status["results"][0]
        self.assertEqual((result["state"], result["reason"], result["attempts"]), ("Failed", "LossNotFinite", 1), result)
        self.assertRegex(result["message"], r"the loss after repeat \d was (NaN|[+-]infinity)")
        self.assertEqual(len(result["throughput"]["repeats"]), 3, "kept, not published")
        self.assertNotIn("stability", result)
        self.assertNotIn("measured again", diverged.stdout)
        self.assertEqual(lamb.returncode, 1, lamb.stdout + lamb.stderr)
        result = lamb_status["results"][0]
        self.assertEqual((result["state"], result["reason"]), ("Failed", "Unsupported"), result)
        self.assertIn("optimizer lamb: torch.optim has no such optimizer (allowed here: sgd, adamw)", result["message"])
        self.assertEqual(other.returncode, 1, other.stdout + other.stderr)
        result = other_status["results"][0]
        self.assertEqual((result["state"], result["reason"]), ("Failed", "CaseMismatch"), result)
        self.assertIn("learningRate 0.5 instead of 0.00078125", result["message"])  # resnet50's at batch 2
        self.assertEqual(result["optimizer"]["learningRate"], 0.5, "the status says what ran")
        # A script that says it trained another network timed other work: no figures.
        self.assertEqual(other_model.returncode, 1, other_model.stdout + other_model.stderr)
        result = other_model_status["results"][0]
        self.assertEqual((result["state"], result["reason"]), ("Failed", "CaseMismatch"), result)
        self.assertIn("the command says it trained vgg16 instead of resnet50", result["message"])
        self.assertNotIn("throughput", result)
        # The image classifier asked for BERT says which example trains it, instead of training another network.
        self.assertEqual(bert.returncode, 1, bert.stdout + bert.stderr)
        result = bert_status["results"][0]
        self.assertEqual((result["state"], result["reason"], result["attempts"]), ("Failed", "Unsupported", 1), result)
        self.assertIn("model bert-base: this script trains resnet50, resnet152, vgg16, alexnet, inception_v3; "
                      "train_bert.py in the same directory trains bert-base", result["message"])

    def test_failing_commands_are_results_with_reasons(self):
        # One run, one failure per case (chosen by the batch size the case gives the command).
        script = """case "$DLBENCH_BATCH_SIZE" in
  1) echo "ImportError: no module named torch" >&2; exit 1;;
  2) exit 0;;
  3) head -c 67108864 /dev/zero | tr '\\0' x; yes flood | head -n 200000; echo last words; exit 1;;
esac
"""
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "failing.sh"), "w") as f:
                f.write(script)
            spec = command_run("failing-commands", f"[sh, {os.path.join(tmp, 'failing.sh')}]", """\
  cases:
  - {nodes: 1, gpusPerNode: 1, batchSizePerDevice: 1, precision: fp32}
  - {nodes: 1, gpusPerNode: 1, batchSizePerDevice: 2, precision: fp32}
  - {nodes: 1, gpusPerNode: 1, batchSizePerDevice: 3, precision: fp32}
  methodology: {warmupSteps: 1, measureSteps: 2, repeats: 1}
  limits: {backoffLimit: 1}
""")
            p, status = run(spec, tmp)
        self.assertEqual(p.returncode, 1, "no case succeeded")
        self.assertEqual(status["phase"], "Failed")
        by_batch = {r["case"]["batchSizePerDevice"]: r for r in status["results"]}
        self.assertEqual(by_batch[1]["reason"], "CommandFailed")
        self.assertIn("ImportError: no module named torch", by_batch[1]["message"])
        self.assertEqual(by_batch[2]["reason"], "NoMeasurements")
        self.assertEqual(by_batch[3]["reason"], "CommandFailed")
        self.assertIn("last words", by_batch[3]["message"])
        self.assertLess(len(by_batch[3]["message"]), 4096, "the flood's message is bounded")
        for r in status["results"]:
            self.assertEqual(r["attempts"], 2, "a failed command is retried up to backoffLimit")


if __name__ == "__main__":
    DLBENCH, TORCH_PYTHON = os.path.abspath(sys.argv.pop(1)), sys.argv.pop(1)
    unittest.main(verbosity=2)
