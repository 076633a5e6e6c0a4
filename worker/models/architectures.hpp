// The networks build_model() knows, one builder per architecture (models/*.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "layers/sequential.hpp"

namespace dlbench::worker {

std::unique_ptr<Sequential> inception_v3(std::int64_t num_classes);
std::unique_ptr<Sequential> deeplabv3plus(std::int64_t num_classes);

// A ResNet stage of `blocks` bottlenecks named `name` ("layer3"), from `channels` inputs (updated
// to its output's): the first block takes `stride`; `dilation` > 1 dilates the blocks after it.
void add_resnet_stage(Sequential& net, const std::string& name, std::int64_t& channels, std::int64_t width, int blocks,
                      std::int64_t stride, std::int64_t dilation);

}  // namespace dlbench::worker
