#!/usr/bin/env bash
# How the CPU backend hands linear layers their weights (worker/cpu/linear_weights.hpp), measured
# as a user would compare two builds: one BenchmarkRun per model measured twice by `dlbench run`,
# first with DLBENCH_CPU_LINEAR_WEIGHTS=blocked through spec.worker.env (every linear layer's
# weights reordered into the product's own format each call, as before 2026-12-01), then at the
# default (auto: plain weights where a layer has few rows for its input features), then
# `dlbench compare` of the two. AlexNet and VGG16 at 224x224 (their classifiers hold 94% and 90%
# of their weights), batches 8 and 64 for AlexNet; BERT-base at 128 tokens, whose encoder keeps
# the blocked route and whose masked-token decoder takes the plain one in bf16. fp32 and, where
# the CPU has AVX512_BF16, bf16. Run it on an otherwise idle machine: compare calls a case
# measured under other load `disturbed` and does not judge it.
#
#   bench/linear_weights_compare.sh [BUILD_DIR] [OUT_DIR]    (default build/ci, a temporary folder)
#   MAX_ISA=AVX2 bench/linear_weights_compare.sh ...          (both runs with oneDNN held to AVX2
#                                                              kernels, as on an AVX2-only CPU: fp32)
#   MODELS="alexnet bert-base" bench/linear_weights_compare.sh (those models only)
#
# Exit code: 0, or 2 where a run failed; each model's comparison is printed as markdown.
set -uo pipefail
build=${1:-build/ci}
dlbench="$build/bin/dlbench"
[[ -x $dlbench ]] || { echo "no $dlbench: build first (cmake --build --preset ci)" >&2; exit 2; }
out=${2:-$(mktemp -d)}
mkdir -p "$out"
precisions=fp32
grep -qw avx512_bf16 /proc/cpuinfo && precisions="fp32, bf16"
isa_env=""
if [[ -n ${MAX_ISA:-} ]]; then
  isa_env="{name: DNNL_MAX_CPU_ISA, value: $MAX_ISA}"
  [[ ${MAX_ISA^^} == *BF16* || ${MAX_ISA^^} == *AMX* || ${MAX_ISA^^} == ALL ]] || precisions=fp32
fi
run() {  # NAME MODEL DATA BATCHES [ENV YAML]
  cat > "$out/$1.yaml" <<YAML
apiVersion: dlbench.io/v1alpha1
kind: BenchmarkRun
metadata: {name: linear-weights}
spec:
  model: $2
  data: {$3}
  matrix: {batchSizePerDevice: [$4], precision: [$precisions], gpusPerNode: [1]}
  methodology: {warmupSteps: 2, measureSteps: 5, repeats: 5}
${5:-}
YAML
  "$dlbench" run -f "$out/$1.yaml" --backend cpu --output "$out/$1.status.json" > "$out/$1.out" 2>&1 ||
    { echo "dlbench run $1 failed: $out/$1.out" >&2; exit 2; }
}
echo "$(date -u +%F) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) CPUs; statuses in $out"
for spec in "alexnet|imageSize: 224|8, 64" "vgg16|imageSize: 224|8" "bert-base|sequenceLength: 128|8"; do
  IFS='|' read -r model data batches <<< "$spec"
  [[ -z ${MODELS:-} || " $MODELS " == *" $model "* ]] || continue
  run "$model-blocked" "$model" "$data" "$batches" \
    "  worker: {env: [{name: DLBENCH_CPU_LINEAR_WEIGHTS, value: blocked}${isa_env:+, $isa_env}]}"
  auto_env=""
  [[ -n $isa_env ]] && auto_env="  worker: {env: [$isa_env]}"
  run "$model-auto" "$model" "$data" "$batches" "$auto_env"
  echo
  echo "#### $model: blocked (before) against auto (after)"
  "$dlbench" compare "$out/$model-blocked.status.json" "$out/$model-auto.status.json" --format markdown
done
exit 0
