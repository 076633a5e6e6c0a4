// A model: a network of layers, its parameters, and its arithmetic cost.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dlbench/core/enums.hpp"
#include "layers/sequential.hpp"

namespace dlbench::worker {

struct ModelInfo {
  Model model;              // core's enum: its spelling ("resnet50") is the API's
  std::string description;  // "ResNet-50 v1.5 (torchvision resnet50)"
  std::int64_t default_image_size = 224;  // its height, and its width unless default_image_width says
  std::int64_t min_image_size = 32;       // of the height and of the width
  std::int64_t classes = 1000;            // ImageNet's; Cityscapes' 19; a sequence model's vocabulary
  std::int64_t default_image_width = 0;   // 0: square
  // Segmentation: (N, classes, H, W) logits, one label per pixel (kIgnoreLabel for none).
  bool per_pixel_labels = false;
  // A sequence model (BERT pretraining): token sequences instead of images, no image size.
  bool sequences = false;
  std::int64_t default_sequence_length = 0;

  std::string name() const { return std::string(to_string(model)); }
  std::int64_t default_height() const { return default_image_size; }
  std::int64_t default_width() const { return default_image_width > 0 ? default_image_width : default_image_size; }
};

// Builds the model's network for `num_classes` outputs (a sequence model's are its vocabulary).
std::unique_ptr<Sequential> build_model(Model model, std::int64_t num_classes = 1000);
// One entry per Model, in the enum's order.
std::vector<ModelInfo> model_catalog();
ModelInfo model_info(Model model);

// By the API's spelling ("bert-base"), for tests and tools; throw std::invalid_argument naming
// the known models for any other text.
std::unique_ptr<Sequential> build_model(const std::string& name, std::int64_t num_classes = 1000);
ModelInfo model_info(const std::string& name);

}  // namespace dlbench::worker
