#!/usr/bin/env bash
# BERT-base the way a user compares engines: one spec, run by dlbench-worker (engine: native) and
# by examples/pytorch/train_bert.py (engine: command), through `dlbench run`, side by side in
# `dlbench report --relative`. Same model shape (110,106,428 parameters), synthetic batch, AdamW recipe and
# methodology; alternated ROUNDS times (this machine is shared and noisy), each round's report
# printed, then each engine's median of the rounds' medians per case.
#
#   bench/bert_native_vs_pytorch_command.sh [BUILD_DIR] [ROUNDS] [SEQUENCE_LENGTH] [BATCH]
#       (defaults: build/ci 3 128 8; python3 on PATH must have torch, or set TORCH_PYTHON)
set -euo pipefail
build=${1:-build/ci}
rounds=${2:-3}
length=${3:-128}
batch=${4:-8}
dlbench="$build/bin/dlbench"
[[ -x $dlbench ]] || { echo "no $dlbench: build first (cmake --build --preset ci)" >&2; exit 2; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/bin"
ln -s "${TORCH_PYTHON:-$(command -v python3)}" "$scratch/bin/python3"

spec() {  # NAME ENGINE_LINES
  cat <<EOF
apiVersion: dlbench.io/v1alpha1
kind: BenchmarkRun
metadata: {name: $1}
spec:
  model: bert-base
$2
  data: {source: synthetic, sequenceLength: $length}
  matrix: {gpusPerNode: [1, 2], batchSizePerDevice: [$batch], precision: [fp32]}
  methodology: {warmupSteps: 1, measureSteps: 3, repeats: 3, stability: {includeUnstable: true}}
  optimizer: {name: adamw, learningRate: 0.0001, momentum: 0.9, weightDecay: 0.01}
  limits: {backoffLimit: 0}
EOF
}
spec native "  engine: native" > "$scratch/native.yaml"
spec pytorch "  engine: command
  command: [sh, -c, 'exec python3 \"\$DLBENCH_HOME/examples/pytorch/train_bert.py\"']" > "$scratch/pytorch.yaml"

for round in $(seq "$rounds"); do
  for engine in native pytorch; do
    PATH="$scratch/bin:$PATH" "$dlbench" run -f "$scratch/$engine.yaml" --output "$scratch/$engine-$round.json" \
      > "$scratch/$engine-$round.log" 2>&1 || { cat "$scratch/$engine-$round.log" >&2; exit 1; }
  done
  echo "## round $round"
  # PyTorch first: the relative table is then dlbench-worker's throughput as a multiple of PyTorch's.
  "$dlbench" report "$scratch/pytorch-$round.json" "$scratch/native-$round.json" --relative --format markdown
done

python3 - "$scratch" "$rounds" <<'PY'
import json, statistics, sys
scratch, rounds = sys.argv[1], int(sys.argv[2])
medians = {}
for engine in ("native", "pytorch"):
    for r in range(1, rounds + 1):
        for result in json.load(open(f"{scratch}/{engine}-{r}.json"))["status"]["results"]:
            key = (engine, result["case"]["id"])
            medians.setdefault(key, []).append(result["throughput"]["median"])
print("\n| case | dlbench-worker sequences/s (median of rounds; range) | PyTorch under engine: command | dlbench / PyTorch |")
print("|---|---|---|---|")
for case in sorted({c for _, c in medians}):
    n, p = medians[("native", case)], medians[("pytorch", case)]
    print(f"| {case} | {statistics.median(n):.2f} ({min(n):.2f}-{max(n):.2f}) | "
          f"{statistics.median(p):.2f} ({min(p):.2f}-{max(p):.2f}) | {statistics.median(n) / statistics.median(p):.2f} |")
PY
