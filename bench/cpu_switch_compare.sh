#!/usr/bin/env bash
# One of the CPU backend's developer switches (DLBENCH_CPU_LINEAR_WEIGHTS,
# DLBENCH_CPU_CONV_BACKWARD_DATA, ...) measured as a user would compare two builds: one
# BenchmarkRun per model measured twice by `dlbench run`, first with VARIABLE=BEFORE through
# spec.worker.env, then at the default, then `dlbench compare` of the two. fp32 and, where the CPU
# has AVX512_BF16, bf16. Run it on an otherwise idle machine: compare calls a case measured under
# other load `disturbed` and does not judge it.
#
#   bench/cpu_switch_compare.sh VARIABLE BEFORE BUILD_DIR OUT_DIR "MODEL|DATA|BATCHES" ...
#       e.g. "vgg16|imageSize: 224|8" or "bert-base|sequenceLength: 128|8, 64"
#   MAX_ISA=AVX2 ...        both runs with oneDNN held to AVX2 kernels, as on an AVX2-only CPU (fp32)
#   MODELS="alexnet" ...    those models only
#   PRECISIONS="fp32" ...   those precisions only
#
# Exit code: 0, or 2 where a run failed; each model's comparison is printed as markdown.
set -uo pipefail
[[ $# -ge 5 ]] || { sed -n 2,15p "$0" >&2; exit 2; }
variable=$1 before=$2 build=$3 out=$4
shift 4
dlbench="$build/bin/dlbench"
[[ -x $dlbench ]] || { echo "no $dlbench: build first (cmake --build --preset ci)" >&2; exit 2; }
mkdir -p "$out"
precisions=fp32
grep -qw avx512_bf16 /proc/cpuinfo && precisions="fp32, bf16"
isa_env=""
if [[ -n ${MAX_ISA:-} ]]; then
  isa_env="{name: DNNL_MAX_CPU_ISA, value: $MAX_ISA}"
  [[ ${MAX_ISA^^} == *BF16* || ${MAX_ISA^^} == *AMX* || ${MAX_ISA^^} == ALL ]] || precisions=fp32
fi
precisions=${PRECISIONS:-$precisions}
run() {  # NAME MODEL DATA BATCHES [ENV YAML]
  cat > "$out/$1.yaml" <<YAML
apiVersion: dlbench.io/v1alpha1
kind: BenchmarkRun
metadata: {name: cpu-switch}
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
echo "$(date -u +%F) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) CPUs; $variable; statuses in $out"
for spec in "$@"; do
  IFS='|' read -r model data batches <<< "$spec"
  [[ -z ${MODELS:-} || " $MODELS " == *" $model "* ]] || continue
  run "$model-before" "$model" "$data" "$batches" \
    "  worker: {env: [{name: $variable, value: $before}${isa_env:+, $isa_env}]}"
  default_env=""
  [[ -n $isa_env ]] && default_env="  worker: {env: [$isa_env]}"
  run "$model-default" "$model" "$data" "$batches" "$default_env"
  echo
  echo "#### $model: $variable=$before (before) against the default (after)"
  "$dlbench" compare "$out/$model-before.status.json" "$out/$model-default.status.json" --format markdown
done
exit 0
