// Exact torchvision shapes: parameter counts and forward arithmetic.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cpu/cpu_backend.hpp"
#include "dlbench/core/enums.hpp"
#include "models/model.hpp"

namespace dlbench::worker {
namespace {

std::int64_t parameter_count(Sequential& net) {
  std::vector<Parameter*> params;
  net.collect_parameters(params);
  std::int64_t total = 0;
  for (const Parameter* p : params) total += p->value.numel();
  return total;
}

// Forward MACs per sample at an image size: setup plans buffers but allocates nothing.
double macs(const std::string& name, std::int64_t image, std::int64_t width = 0) {
  CpuBackend backend(1);
  Arena arena;
  auto net = build_model(name, model_info(name).classes);
  SetupContext ctx{backend, arena, false};
  Tensor input = activation(Shape(1, 3, image, width > 0 ? width : image), Layout::nhwc, DType::fp32);
  net->setup(input, ctx);
  return net->forward_macs_per_sample();
}

TEST(Models, ParameterCountsMatchTorchvision) {
  EXPECT_EQ(parameter_count(*build_model("resnet50")), 25'557'032);
  EXPECT_EQ(parameter_count(*build_model("resnet152")), 60'192'808);
  EXPECT_EQ(parameter_count(*build_model("vgg16")), 138'357'544);
  EXPECT_EQ(parameter_count(*build_model("alexnet")), 61'100'840);
  // With the auxiliary classifier, as torchvision counts inception_v3(aux_logits=True).
  EXPECT_EQ(parameter_count(*build_model("inception_v3")), 27'161'264);
  // Against tests/golden/reference_models.py's DeepLabV3Plus (torchvision's resnet50 and ASPP
  // with the paper's decoder), 19 classes.
  EXPECT_EQ(parameter_count(*build_model("deeplabv3plus", 19)), 40'351'667);
}

TEST(Models, NumClassesChangesOnlyTheClassifier) {
  EXPECT_EQ(parameter_count(*build_model("resnet50", 10)), 25'557'032 - 990 * 2049);
}

TEST(Models, ForwardMacsPerSample) {
  // Convolutions and linear layers, as fvcore counts them: ResNet-50 4.09 G, ResNet-152
  // 11.51 G, VGG16 15.47 G, AlexNet 0.71 G multiply–accumulates at 224×224.
  EXPECT_NEAR(macs("resnet50", 224) / 1e9, 4.09, 0.01);
  EXPECT_NEAR(macs("resnet152", 224) / 1e9, 11.51, 0.03);
  EXPECT_NEAR(macs("vgg16", 224) / 1e9, 15.47, 0.03);
  EXPECT_NEAR(macs("alexnet", 224) / 1e9, 0.71, 0.01);
  // InceptionV3 at 299×299, counted by forward hooks on torchvision 0.14's modules in training
  // mode: 5,713,216,096 in the trunk and 5,683,200 in the auxiliary classifier.
  EXPECT_NEAR(macs("inception_v3", 299), 5'718'899'296.0, 1.0);
  // DeepLabV3+ by the same hooks on reference_models.py's network: at Cityscapes' 512×1024 crop,
  // and at a size whose strides round (65×97: layer1 at 17×25, layer4 at 5×7), where the
  // decoder's upsampling must return to layer1's size, not 4× layer4's.
  EXPECT_NEAR(macs("deeplabv3plus", 512, 1024), 138'429'333'504.0, 1.0);
  EXPECT_NEAR(macs("deeplabv3plus", 65, 97), 2'120'567'744.0, 1.0);
  // Convolution cost scales with the image area.
  EXPECT_LT(macs("resnet50", 112), macs("resnet50", 224) / 3.5);
}

TEST(Models, UnknownModelNamesTheKnownOnes) {
  try {
    build_model("resnet18");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("known models: resnet50, resnet152, vgg16, alexnet, inception_v3, deeplabv3plus"));
  }
}

TEST(Models, CatalogAgreesWithTheApi) {
  std::vector<std::string> names;
  for (const auto& m : model_catalog()) names.push_back(m.name());
  std::vector<std::string> api;
  for (const auto v : EnumSpellings<dlbench::Model>::values) api.emplace_back(v);
  EXPECT_EQ(names, api);
}

}  // namespace
}  // namespace dlbench::worker
