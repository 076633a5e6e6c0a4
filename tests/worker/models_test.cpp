// Exact torchvision shapes: parameter counts and forward arithmetic.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cpu/cpu_backend.hpp"
#include "dlbench/core/api_rules.hpp"
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

// Core's count, which engine: command holds a script's stated `parameters` to, is the network this
// worker builds for each image model at its catalog's classes (BERT-base's: transformer_test.cpp).
TEST(Models, CoresParameterCountIsTheNetworkTheWorkerBuilds) {
  for (const ModelInfo& info : model_catalog()) {
    if (info.sequences) continue;
    EXPECT_EQ(parameter_count(*build_model(info.name(), info.classes)), network_parameter_count(info.model)) << info.name();
  }
}

// The API admits each image model down to core's min_image_size: every model sets up there, and
// where a model needs more than the API's 32 pixels (AlexNet, InceptionV3) one pixel less is
// too few for its layers, so the bound is the network's own, not a guess.
TEST(Models, EveryImageModelSetsUpAtTheSmallestSideTheApiAdmits) {
  for (const ModelInfo& info : model_catalog()) {
    if (info.sequences) continue;
    const MinImageSize least = min_image_size(info.model);
    EXPECT_EQ(info.min_image_size, least.pixels) << info.name();
    EXPECT_NO_THROW(macs(info.name(), least.pixels)) << info.name();
    if (least.pixels > bounds::kImageSize.min) {
      EXPECT_ANY_THROW(macs(info.name(), least.pixels - 1)) << info.name();
      EXPECT_ANY_THROW(macs(info.name(), least.pixels, least.pixels - 1)) << info.name();
    }
  }
}

// A window that does not fit its padded input is refused, as torch refuses it, instead of the
// truncating division's one position ((2 - 3) / 2 + 1 == 1 in C++): AlexNet at 62 pixels gave
// its last max pool a 2×2 input and a 1×1 output.
TEST(Geometry, AWindowThatDoesNotFitItsInputIsRefused) {
  const PoolConfig pool{Shape(1, 256, 2, 2), PoolKind::max, 3, 2, 0};
  try {
    (void)pool.output();
    ADD_FAILURE() << "a 3-wide window over 2 pixels";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "pooling (height): a window of 3 does not fit an input of 2 with padding 0 on each side (stride 2)");
  }
  EXPECT_EQ((PoolConfig{Shape(1, 256, 3, 3), PoolKind::max, 3, 2, 0}.output()), Shape(1, 256, 1, 1));
  EXPECT_EQ((PoolConfig{Shape(1, 64, 112, 112), PoolKind::max, 3, 2, 1}.output()), Shape(1, 64, 56, 56));

  Conv2dConfig conv{Shape(1, 8, 8, 16), 4, 5, 1, 0};
  conv.dilation = 2;  // a 9-wide footprint
  EXPECT_THROW((void)conv.output(), std::invalid_argument);
  conv.padding = Extent2(1);
  EXPECT_EQ(conv.output(), Shape(1, 4, 2, 10));
  EXPECT_EQ((Conv2dConfig{Shape(2, 3, 224, 224), 64, 11, 4, 2}.output()), Shape(2, 64, 55, 55));  // AlexNet's first
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
