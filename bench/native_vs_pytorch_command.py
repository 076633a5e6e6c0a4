#!/usr/bin/env python3
"""The same image classifier cases (ResNet-50 unless --model) with dlbench's own engine and with
PyTorch's script under engine: command, in one go, through `dlbench run`; prints one markdown
table (img/s each, ratio) for bench/RESULTS.md.

    bench/native_vs_pytorch_command.py [--build build/default] [--torch-python /usr/bin/python3]
        [--model resnet50] [--image-size 224] [--batch 16] [--devices 1,2] [--warmup 1] [--measure 3]
        [--repeats 3] [--huge-pages]

Both engines run the same BenchmarkRun apart from `engine`/`command`: the same matrix, methodology,
optimizer and OMP_NUM_THREADS split, one after the other on this host. PyTorch is
examples/pytorch/train_image_classifier.py (torchvision's network, channels_last, SGD, DDP over gloo
for two processes), timed by dlbench-exec from its step markers. --huge-pages gives PyTorch's run
spec.worker.env GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (bench_process.py): PyTorch frees its tensors
every step, and on a VM where a page fault is dear that tunable is its fair peer.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from bench_process import PYTORCH_HUGE_PAGES  # beside this script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "pytorch"))
from image_classifiers import CLASSIFIERS  # noqa: E402 (examples/pytorch, found above; no PyTorch needed)


def run_yaml(name, engine, args):
    command = ""
    if engine == "command":
        command = "  engine: command\n  command: [sh, -c, 'exec python3 \"$DLBENCH_HOME/examples/pytorch/train_image_classifier.py\"']\n"
        if args.huge_pages:
            command += f"  worker: {{env: [{{name: GLIBC_TUNABLES, value: '{PYTORCH_HUGE_PAGES}'}}]}}\n"
    devices = ", ".join(str(d) for d in args.devices)
    return f"""apiVersion: dlbench.io/v1alpha1
kind: BenchmarkRun
metadata: {{name: {name}}}
spec:
  model: {args.model}
{command}  data: {{source: synthetic, imageSize: {args.image_size}}}
  matrix: {{nodes: [1], gpusPerNode: [{devices}], batchSizePerDevice: [{args.batch}], precision: [fp32]}}
  methodology: {{warmupSteps: {args.warmup}, measureSteps: {args.measure}, repeats: {args.repeats}}}
  limits: {{caseTimeoutSeconds: 7200, backoffLimit: 0}}
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build", "default"))
    parser.add_argument("--torch-python", default="/usr/bin/python3")
    parser.add_argument("--model", choices=CLASSIFIERS, default="resnet50")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--devices", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2])
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--measure", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--huge-pages", action="store_true", help="PyTorch's run with glibc.malloc.hugetlb=1")
    args = parser.parse_args()
    dlbench = os.path.join(args.build, "bin", "dlbench")
    if not os.access(dlbench, os.X_OK):
        sys.exit(f"build first: {dlbench} not found (cmake --workflow --preset programs)")

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        bin_dir = os.path.join(tmp, "bin")
        os.makedirs(bin_dir)
        os.symlink(args.torch_python, os.path.join(bin_dir, "python3"))
        env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"])
        slug = args.model.replace("_", "-")
        for engine, name in (("native", "native-" + slug), ("command", "pytorch-" + slug)):
            spec = os.path.join(tmp, name + ".yaml")
            with open(spec, "w") as f:
                f.write(run_yaml(name, engine, args))
            status_file = os.path.join(tmp, name + ".status.json")
            p = subprocess.run([dlbench, "run", "-f", spec, "--output", status_file], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            print(f"{name}: exit {p.returncode}", file=sys.stderr)
            with open(status_file) as f:
                results[engine] = {r["case"]["id"]: r for r in json.load(f)["status"]["results"]}
        torch_version = subprocess.run([args.torch_python, "-c", "import torch; print(torch.__version__)"],
                                       capture_output=True, text=True).stdout.strip()

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"Machine: {cpu}, {os.cpu_count()} cores; dlbench {commit or '?'}; PyTorch {torch_version} (Debian).")
    print(f"Command: `bench/native_vs_pytorch_command.py --model {args.model} --image-size {args.image_size} --batch {args.batch} "
          f"--devices {','.join(map(str, args.devices))} --warmup {args.warmup} --measure {args.measure} "
          f"--repeats {args.repeats}{' --huge-pages' if args.huge_pages else ''}` (median of the repeats).\n")
    print("| case | dlbench-worker img/s | PyTorch (engine: command) img/s | dlbench / PyTorch | "
          "speed-up dlbench | speed-up PyTorch |")
    print("|---|---|---|---|---|---|")

    def cell(r):  # the median, with the repeats' spread and the stability verdict
        return (f"{r['throughput']['median']:.2f} (cv {100 * r['throughput']['cv']:.1f}%, "
                f"{r.get('stability', {}).get('verdict', '?')})")

    def speedup(r):  # none where the status refused it (an unstable case, a disturbed baseline)
        return f"{r['speedup']:.2f}" if "speedup" in r else "-"

    for case in results["native"]:
        native, torch = results["native"][case], results["command"].get(case, {})
        if native.get("state") != "Succeeded" or torch.get("state") != "Succeeded":
            print(f"| {case} | {native.get('state')} {native.get('reason', '')} | {torch.get('state')} "
                  f"{torch.get('reason', '')} | | | |")
            continue
        a, b = native["throughput"]["median"], torch["throughput"]["median"]
        print(f"| {case} | {cell(native)} | {cell(torch)} | {a / b:.2f} | {speedup(native)} | {speedup(torch)} |")


if __name__ == "__main__":
    main()
