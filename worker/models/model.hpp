// A model: a network of layers, its parameters, and its arithmetic cost.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "layers/sequential.hpp"

namespace dlbench::worker {

struct ModelInfo {
  std::string name;         // "resnet50"
  std::string description;  // "ResNet-50 v1.5 (torchvision resnet50)"
  std::int64_t default_image_size = 224;
  std::int64_t min_image_size = 32;
};

// Builds the named network for `num_classes` outputs; throws std::invalid_argument for an
// unknown name (see model_names()).
std::unique_ptr<Sequential> build_model(const std::string& name, std::int64_t num_classes = 1000);
std::vector<ModelInfo> model_catalog();

}  // namespace dlbench::worker
