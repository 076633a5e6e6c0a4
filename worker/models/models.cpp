// ResNet-50/152 v1.5, VGG16 and AlexNet with torchvision's exact shapes; the catalog and build_model().
#include <stdexcept>
#include <string>

#include "dlbench/core/api_rules.hpp"
#include "layers/batch_norm2d.hpp"
#include "layers/bottleneck.hpp"
#include "layers/conv2d.hpp"
#include "layers/linear.hpp"
#include "layers/pool2d.hpp"
#include "layers/relu.hpp"
#include "models/architectures.hpp"
#include "models/bert.hpp"
#include "models/model.hpp"

namespace dlbench::worker {
namespace {

// Children are named as torchvision names its modules, so that parameters carry the
// state_dict's names ("layer1.0.conv1.weight", "features.0.weight", "classifier.6.bias").
std::unique_ptr<Sequential> resnet(const std::vector<int>& blocks_per_stage, std::int64_t num_classes) {
  auto net = std::make_unique<Sequential>();
  net->add_named<Conv2d>("conv1", 3, 64, 7, 2, 3);
  net->add_named<BatchNorm2d>("bn1", 64, Then::relu);
  net->add_named<Pool2d>("maxpool", PoolKind::max, 3, 2, 1);
  std::int64_t channels = 64;
  const std::int64_t widths[] = {64, 128, 256, 512};
  for (std::size_t stage = 0; stage < blocks_per_stage.size(); ++stage) {
    add_resnet_stage(*net, "layer" + std::to_string(stage + 1), channels, widths[stage], blocks_per_stage[stage],
                     stage > 0 ? 2 : 1, 1);
  }
  net->add_named<Pool2d>("avgpool", PoolKind::average, 0, 1, 0, true);
  net->add_named<Flatten>("flatten");
  net->add_named<Linear>("fc", channels, num_classes);
  return net;
}

std::unique_ptr<Sequential> vgg16(std::int64_t num_classes) {
  auto net = std::make_unique<Sequential>();
  auto& features = net->add_named<Sequential>("features");
  const int config[] = {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0};  // 0: max pool
  std::int64_t channels = 3;
  for (const int c : config) {
    if (c == 0) {
      features.add<Pool2d>(PoolKind::max, 2, 2);
      continue;
    }
    features.add<Conv2d>(channels, c, 3, 1, 1, true);
    features.add<ReLU>();
    channels = c;
  }
  net->add_named<AdaptiveAvgPool2d>("avgpool", 7, 7);
  net->add_named<Flatten>("flatten");
  auto& classifier = net->add_named<Sequential>("classifier");
  classifier.add<Linear>(512 * 7 * 7, 4096, ParameterInit::normal_0_01);
  classifier.add<ReLU>();
  classifier.add<Dropout>(0.5f, 1);
  classifier.add<Linear>(4096, 4096, ParameterInit::normal_0_01);
  classifier.add<ReLU>();
  classifier.add<Dropout>(0.5f, 2);
  classifier.add<Linear>(4096, num_classes, ParameterInit::normal_0_01);
  return net;
}

std::unique_ptr<Sequential> alexnet(std::int64_t num_classes) {
  auto net = std::make_unique<Sequential>();
  auto& features = net->add_named<Sequential>("features");
  const auto conv_relu = [&](std::int64_t in, std::int64_t out, std::int64_t k, std::int64_t s, std::int64_t p) {
    features.add<Conv2d>(in, out, k, s, p, true);
    features.add<ReLU>();
  };
  conv_relu(3, 64, 11, 4, 2);
  features.add<Pool2d>(PoolKind::max, 3, 2);
  conv_relu(64, 192, 5, 1, 2);
  features.add<Pool2d>(PoolKind::max, 3, 2);
  conv_relu(192, 384, 3, 1, 1);
  conv_relu(384, 256, 3, 1, 1);
  conv_relu(256, 256, 3, 1, 1);
  features.add<Pool2d>(PoolKind::max, 3, 2);
  net->add_named<AdaptiveAvgPool2d>("avgpool", 6, 6);
  net->add_named<Flatten>("flatten");
  auto& classifier = net->add_named<Sequential>("classifier");
  classifier.add<Dropout>(0.5f, 1);
  classifier.add<Linear>(256 * 6 * 6, 4096);
  classifier.add<ReLU>();
  classifier.add<Dropout>(0.5f, 2);
  classifier.add<Linear>(4096, 4096);
  classifier.add<ReLU>();
  classifier.add<Linear>(4096, num_classes);
  return net;
}

Model model_named(const std::string& name) {
  if (const auto model = enum_from_string<Model>(name)) return *model;
  throw std::invalid_argument("unknown model \"" + name + "\"; known models: " + allowed_values<Model>());
}

}  // namespace

void add_resnet_stage(Sequential& net, const std::string& name, std::int64_t& channels, std::int64_t width, int blocks,
                      std::int64_t stride, std::int64_t dilation) {
  auto& layer = net.add_named<Sequential>(name);
  // torchvision's _make_layer: a dilated stage's first block keeps the previous dilation (1 here)
  // and takes the stride 1 the dilation replaced; the others dilate.
  for (int block = 0; block < blocks; ++block) {
    layer.add<Bottleneck>(channels, width, block == 0 ? stride : 1, block == 0 ? 1 : dilation);
    channels = width * Bottleneck::kExpansion;
  }
}

std::vector<ModelInfo> model_catalog() {
  // The smallest sides are core's (min_image_size), which refuses a spec below them.
  const auto least = [](Model m) -> std::int64_t { return min_image_size(m).pixels; };
  return {{Model::resnet50, "ResNet-50 v1.5 (torchvision resnet50)", 224, least(Model::resnet50)},
          {Model::resnet152, "ResNet-152 v1.5 (torchvision resnet152)", 224, least(Model::resnet152)},
          {Model::vgg16, "VGG16 without batch norm (torchvision vgg16)", 224, least(Model::vgg16)},
          {Model::alexnet, "AlexNet (torchvision alexnet)", 224, least(Model::alexnet)},
          {Model::inception_v3, "InceptionV3 (torchvision inception_v3, auxiliary classifier on, loss weight 0.4)", 299,
           least(Model::inception_v3)},
          // Cityscapes' 19 classes on its usual training crop, 512×1024 (height × width).
          {Model::deeplabv3plus,
           "DeepLabV3+ (ResNet-50 backbone, output stride 16, ASPP rates 6/12/18, decoder on layer1 features)", 512,
           least(Model::deeplabv3plus), 19, 1024, true},
          {Model::bert_base,
           "BERT-base pretraining (12 layers, hidden 768, 12 heads; masked LM with tied decoder + next sentence)", 0,
           least(Model::bert_base), BertConfig{}.vocabulary, 0, false, true, 128}};
}

ModelInfo model_info(Model model) {
  for (auto& m : model_catalog()) {
    if (m.model == model) return m;
  }
  throw std::logic_error("model_catalog() has no entry for " + std::string(to_string(model)));
}

std::unique_ptr<Sequential> build_model(Model model, std::int64_t num_classes) {
  std::unique_ptr<Sequential> net;
  switch (model) {
    case Model::resnet50: net = resnet({3, 4, 6, 3}, num_classes); break;
    case Model::resnet152: net = resnet({3, 8, 36, 3}, num_classes); break;
    case Model::vgg16: net = vgg16(num_classes); break;
    case Model::alexnet: net = alexnet(num_classes); break;
    case Model::inception_v3: net = inception_v3(num_classes); break;
    case Model::deeplabv3plus: net = deeplabv3plus(num_classes); break;
    case Model::bert_base: net = bert_for_pretraining(BertConfig{}); break;  // its vocabulary is its "classes"
  }
  name_parameters(*net);
  return net;
}

ModelInfo model_info(const std::string& name) { return model_info(model_named(name)); }

std::unique_ptr<Sequential> build_model(const std::string& name, std::int64_t num_classes) {
  return build_model(model_named(name), num_classes);
}

}  // namespace dlbench::worker
