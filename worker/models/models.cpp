// ResNet-50/152 v1.5, VGG16 and AlexNet with torchvision's exact shapes.
#include <stdexcept>

#include "layers/batch_norm2d.hpp"
#include "layers/bottleneck.hpp"
#include "layers/conv2d.hpp"
#include "layers/linear.hpp"
#include "layers/pool2d.hpp"
#include "layers/relu.hpp"
#include "models/model.hpp"

namespace dlbench::worker {
namespace {

std::unique_ptr<Sequential> resnet(const std::vector<int>& blocks_per_stage, std::int64_t num_classes) {
  auto net = std::make_unique<Sequential>();
  net->add<Conv2d>(3, 64, 7, 2, 3);
  net->add<BatchNorm2d>(64, Then::relu);
  net->add<Pool2d>(PoolKind::max, 3, 2, 1);
  std::int64_t channels = 64;
  const std::int64_t widths[] = {64, 128, 256, 512};
  for (std::size_t stage = 0; stage < blocks_per_stage.size(); ++stage) {
    for (int block = 0; block < blocks_per_stage[stage]; ++block) {
      const std::int64_t stride = (stage > 0 && block == 0) ? 2 : 1;
      net->add<Bottleneck>(channels, widths[stage], stride);
      channels = widths[stage] * Bottleneck::kExpansion;
    }
  }
  net->add<Pool2d>(PoolKind::average, 0, 1, 0, true);
  net->add<Flatten>();
  net->add<Linear>(channels, num_classes);
  return net;
}

std::unique_ptr<Sequential> vgg16(std::int64_t num_classes) {
  auto net = std::make_unique<Sequential>();
  const int config[] = {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0};  // 0: max pool
  std::int64_t channels = 3;
  for (const int c : config) {
    if (c == 0) {
      net->add<Pool2d>(PoolKind::max, 2, 2);
      continue;
    }
    net->add<Conv2d>(channels, c, 3, 1, 1, true);
    net->add<ReLU>();
    channels = c;
  }
  net->add<AdaptiveAvgPool2d>(7, 7);
  net->add<Flatten>();
  net->add<Linear>(512 * 7 * 7, 4096, ParameterInit::normal_0_01);
  net->add<ReLU>();
  net->add<Dropout>(0.5f, 1);
  net->add<Linear>(4096, 4096, ParameterInit::normal_0_01);
  net->add<ReLU>();
  net->add<Dropout>(0.5f, 2);
  net->add<Linear>(4096, num_classes, ParameterInit::normal_0_01);
  return net;
}

std::unique_ptr<Sequential> alexnet(std::int64_t num_classes) {
  auto net = std::make_unique<Sequential>();
  const auto conv_relu = [&](std::int64_t in, std::int64_t out, std::int64_t k, std::int64_t s, std::int64_t p) {
    net->add<Conv2d>(in, out, k, s, p, true);
    net->add<ReLU>();
  };
  conv_relu(3, 64, 11, 4, 2);
  net->add<Pool2d>(PoolKind::max, 3, 2);
  conv_relu(64, 192, 5, 1, 2);
  net->add<Pool2d>(PoolKind::max, 3, 2);
  conv_relu(192, 384, 3, 1, 1);
  conv_relu(384, 256, 3, 1, 1);
  conv_relu(256, 256, 3, 1, 1);
  net->add<Pool2d>(PoolKind::max, 3, 2);
  net->add<AdaptiveAvgPool2d>(6, 6);
  net->add<Flatten>();
  net->add<Dropout>(0.5f, 1);
  net->add<Linear>(256 * 6 * 6, 4096);
  net->add<ReLU>();
  net->add<Dropout>(0.5f, 2);
  net->add<Linear>(4096, 4096);
  net->add<ReLU>();
  net->add<Linear>(4096, num_classes);
  return net;
}

}  // namespace

std::vector<ModelInfo> model_catalog() {
  return {{"resnet50", "ResNet-50 v1.5 (torchvision resnet50)", 224, 32},
          {"resnet152", "ResNet-152 v1.5 (torchvision resnet152)", 224, 32},
          {"vgg16", "VGG16 without batch norm (torchvision vgg16)", 224, 32},
          {"alexnet", "AlexNet (torchvision alexnet)", 224, 64}};
}

std::unique_ptr<Sequential> build_model(const std::string& name, std::int64_t num_classes) {
  if (name == "resnet50") return resnet({3, 4, 6, 3}, num_classes);
  if (name == "resnet152") return resnet({3, 8, 36, 3}, num_classes);
  if (name == "vgg16") return vgg16(num_classes);
  if (name == "alexnet") return alexnet(num_classes);
  std::string known;
  for (const auto& m : model_catalog()) known += (known.empty() ? "" : ", ") + m.name;
  throw std::invalid_argument("unknown model \"" + name + "\"; known models: " + known);
}

}  // namespace dlbench::worker
