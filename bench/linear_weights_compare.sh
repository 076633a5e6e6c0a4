#!/usr/bin/env bash
# How the CPU backend hands linear layers their weights (worker/cpu/linear_weights.hpp), measured
# as a user would compare two builds (bench/cpu_switch_compare.sh): DLBENCH_CPU_LINEAR_WEIGHTS=blocked
# (every linear layer's weights reordered into the product's own format each call, as before
# 2026-12-01) against the default (auto: plain weights where a layer has few rows for its input
# features). AlexNet and VGG16 at 224x224 (their classifiers hold 94% and 90% of their weights),
# batches 8 and 64 for AlexNet; BERT-base at 128 tokens, whose encoder keeps the blocked route and
# whose masked-token decoder takes the plain one in bf16.
#
#   bench/linear_weights_compare.sh [BUILD_DIR] [OUT_DIR]    (default build/ci, a temporary folder)
#   MAX_ISA=AVX2 bench/linear_weights_compare.sh ...          (both runs with oneDNN held to AVX2
#                                                              kernels, as on an AVX2-only CPU: fp32)
#   MODELS="alexnet bert-base" bench/linear_weights_compare.sh (those models only)
exec "$(dirname "$0")/cpu_switch_compare.sh" DLBENCH_CPU_LINEAR_WEIGHTS blocked "${1:-build/ci}" "${2:-$(mktemp -d)}" \
  "alexnet|imageSize: 224|8, 64" "vgg16|imageSize: 224|8" "bert-base|sequenceLength: 128|8"
