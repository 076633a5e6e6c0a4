#!/usr/bin/env bash
# How the CPU backend computes convolutions' input gradients (worker/cpu/conv_backward_data.hpp),
# measured as a user would compare two builds (bench/cpu_switch_compare.sh):
# DLBENCH_CPU_CONV_BACKWARD_DATA=primitive (oneDNN's backward-data primitive everywhere, as before
# 2026-12-01) against the default (auto: the flipped forward convolution where it runs faster
# kernels). The models whose 3x3 and larger stride-1 convolutions carry most of a step: VGG16,
# ResNet-50, InceptionV3, AlexNet and DeepLabV3+ (with its dilated ASPP convolutions).
#
#   bench/conv_backward_data_compare.sh [BUILD_DIR] [OUT_DIR]   (default build/ci, a temporary folder)
#   MAX_ISA=AVX2 ...; MODELS="vgg16 deeplabv3plus" ...; PRECISIONS=fp32 ...   (as cpu_switch_compare.sh)
exec "$(dirname "$0")/cpu_switch_compare.sh" DLBENCH_CPU_CONV_BACKWARD_DATA primitive "${1:-build/ci}" \
  "${2:-$(mktemp -d)}" "vgg16|imageSize: 224|8" "resnet50|imageSize: 224|16" "inception_v3|imageSize: 299|8" \
  "alexnet|imageSize: 224|16" "deeplabv3plus|imageHeight: 256, imageWidth: 512|2"
