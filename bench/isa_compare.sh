#!/usr/bin/env bash
# What the CPU's widest instructions are worth: one BenchmarkRun measured twice by `dlbench run`,
# the second with oneDNN held to a narrower ISA through spec.worker.env (DNNL_MAX_CPU_ISA), then
# `dlbench compare` of the two. ResNet-50 at 64x64, batches 4 and 16, fp32 and bf16, 7 repeats of
# 5 steps: enough repeats for the rank test to reach p < 0.05. Run it on an otherwise idle
# machine: compare calls a case measured under other load `disturbed` and does not judge it.
#
#   bench/isa_compare.sh [BUILD_DIR] [ISA] [OUT_DIR]    (default build/ci, AVX2, a temporary folder)
#
# Exit code: dlbench compare's (1 where the narrower ISA is slower or cannot run a case).
set -uo pipefail
build=${1:-build/ci}
isa=${2:-AVX2}
dlbench="$build/bin/dlbench"
[[ -x $dlbench ]] || { echo "no $dlbench: build first (cmake --build --preset ci)" >&2; exit 2; }
out=${3:-$(mktemp -d)}
mkdir -p "$out"
run() {  # NAME [ENV YAML]
  cat > "$out/$1.yaml" <<YAML
apiVersion: dlbench.io/v1alpha1
kind: BenchmarkRun
metadata: {name: isa}
spec:
  model: resnet50
  data: {imageSize: 64}
  matrix: {batchSizePerDevice: [4, 16], precision: [fp32, bf16]}
  methodology: {warmupSteps: 2, measureSteps: 5, repeats: 7}
${2:-}
YAML
  "$dlbench" run -f "$out/$1.yaml" --backend cpu --output "$out/$1.status.json" > "$out/$1.out" 2>&1 ||
    { echo "dlbench run $1 failed: $out/$1.out" >&2; exit 2; }
}
run widest
run held "  worker: {env: [{name: DNNL_MAX_CPU_ISA, value: $isa}]}"
echo "$(date -u +%F) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) CPUs; statuses in $out"
"$dlbench" compare "$out/widest.status.json" "$out/held.status.json" --format markdown
