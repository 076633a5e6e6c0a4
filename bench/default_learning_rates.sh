#!/usr/bin/env bash
# Does each model train at its default learning rate? For every model (and bert-base with each
# optimizer), the loss after each of 3 repeats of 10 steps on the CPU at batch 8: at the one rate
# of 0.1 every model once shared, and at the model's own default (no --learning-rate: the
# recipe's rate at this global batch). The untrained loss is about ln(1000) = 6.9 for the
# classifiers, ln(30522) = 10.3 for BERT's masked LM (plus its next-sentence term), ln(21) = 3.0
# for DeepLabV3+'s pixels.
#
#   bench/default_learning_rates.sh [BUILD_DIR]    (default build/ci)
set -euo pipefail
build=${1:-build/ci}
worker="$build/bin/dlbench-worker"
[[ -x $worker && -x $build/bin/dlbench ]] || { echo "no $worker or dlbench: build first (cmake --build --preset ci)" >&2; exit 2; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# The losses of one run, from its result document ("NaN" where the case stopped diverged).
losses() {
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$worker" "$@" --batch-size 8 --warmup-steps 2 --measure-steps 8 \
    --repeats 3 --max-cv 1 --output "$scratch/r.json" > /dev/null 2>&1 || true
  python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
cell = lambda v: v if isinstance(v, str) else ("%.3g" % v)
print(" ".join(cell(v) for v in d.get("lossAfterRepeats", [])) or "-", d.get("reason", ""))' "$scratch/r.json"
}

echo "| model | optimizer | input | loss after each repeat at 0.1 | default rate | loss after each repeat at the default |"
echo "|---|---|---|---|---|---|"
while read -r model optimizer input; do
  # The default as the API applies it at this global batch: dlbench validate's case.
  data=$([[ $model == bert-base ]] && echo "{sequenceLength: 32}" || echo "{imageSize: 299}")
  printf 'apiVersion: dlbench.io/v1alpha1\nkind: BenchmarkRun\nmetadata: {name: lr}\nspec:\n  model: %s\n  data: %s\n  matrix: {batchSizePerDevice: [8], precision: [fp32]}\n  optimizer: {name: %s}\n' \
    "$model" "$data" "$optimizer" > "$scratch/run.yaml"
  rate=$("$build/bin/dlbench" validate -f "$scratch/run.yaml" -o json |
    python3 -c 'import json, sys; print("%.6g" % json.load(sys.stdin)[0]["cases"][0]["optimizer"]["learningRate"])')
  at_shared=$(losses --model "$model" --optimizer "$optimizer" $input --learning-rate 0.1)
  at_default=$(losses --model "$model" --optimizer "$optimizer" $input)
  echo "| $model | $optimizer | ${input#--* } | $at_shared | $rate | $at_default |"
done <<'EOF'
resnet50 sgd --image-size 64
resnet152 sgd --image-size 64
inception_v3 sgd --image-size 299
alexnet sgd --image-size 64
vgg16 sgd --image-size 64
deeplabv3plus sgd --image-size 64
bert-base sgd --sequence-length 32
bert-base adamw --sequence-length 32
bert-base lamb --sequence-length 32
EOF
