// DeepLabV3+ (Chen et al., 2018, "Encoder-Decoder with Atrous Separable Convolution") with a
// ResNet-50 backbone, built so that every parameter carries the name and shape of the reference
// tests/golden/reference_models.py assembles from torchvision parts:
//   backbone   torchvision resnet50(replace_stride_with_dilation=[False, False, True]) up to
//              layer4: output stride 16 (layer4 dilated by 2 instead of strided);
//   aspp       torchvision's ASPP(2048, [6, 12, 18], 256): 1×1, three atrous 3×3 (the paper's rates
//              at output stride 16) and image pooling, concatenated, projected to 256, dropout 0.5;
//   decoder    layer1's features (stride 4) through 1×1 conv to 48 + BN + ReLU ("project"),
//              concatenated with the ASPP output upsampled to their size, two 3×3 convs of 256
//              (the paper's best decoder) and a 1×1 conv to the classes ("classifier");
//   output     bilinear upsampling to the input size, per-pixel cross-entropy (ignore label 255).
// Convolutions are plain, not depthwise-separable (the paper's Xception variant); all upsampling is
// bilinear with align_corners=False, as torchvision's segmentation models do.
#include <cstdint>
#include <memory>
#include <string>

#include "layers/batch_norm2d.hpp"
#include "layers/concat.hpp"
#include "layers/conv2d.hpp"
#include "layers/linear.hpp"
#include "layers/pool2d.hpp"
#include "layers/resize.hpp"
#include "models/architectures.hpp"

namespace dlbench::worker {
namespace {

constexpr std::int64_t kAsppChannels = 256;
constexpr std::int64_t kLowLevelChannels = 48;
constexpr std::int64_t kAtrousRates[] = {6, 12, 18};
// torchvision's ASPP and heads keep PyTorch's default nn.Conv2d initialisation, U(±1/sqrt(fan_in)),
// where its ResNet backbone uses Kaiming normal (fan out).
constexpr ParameterInit kHeadInit = ParameterInit::linear_default;

// torchvision's ASPP: convs.0 (1×1), convs.1-3 (3×3 atrous), convs.4 (pooling), then project.
void aspp(Sequential& net, std::int64_t in) {
  auto& module = net.add_named<Sequential>("aspp");
  const auto input_size = std::make_shared<SizeNote>();
  module.add_named<NoteSize>("", input_size);
  auto& branches = module.add_named<Concat>("");
  const auto branch = [&](int index) -> Sequential& {
    return branches.add_branch().add_named<Sequential>("convs").add_named<Sequential>(std::to_string(index));
  };
  {
    auto& b = branch(0);
    b.add_named<Conv2d>("0", in, kAsppChannels, ConvSpec{.kernel = 1, .init = kHeadInit});
    b.add_named<BatchNorm2d>("1", kAsppChannels, Then::relu);
  }
  int index = 1;
  for (const std::int64_t rate : kAtrousRates) {
    auto& b = branch(index++);
    b.add_named<Conv2d>("0", in, kAsppChannels, ConvSpec{.kernel = 3, .padding = rate, .dilation = rate, .init = kHeadInit});
    b.add_named<BatchNorm2d>("1", kAsppChannels, Then::relu);
  }
  {  // ASPPPooling: image-level features, broadcast back by a bilinear resize of a 1×1 map.
    auto& b = branch(index);
    b.add_named<AdaptiveAvgPool2d>("0", 1, 1);
    b.add_named<Conv2d>("1", in, kAsppChannels, ConvSpec{.kernel = 1, .init = kHeadInit});
    b.add_named<BatchNorm2d>("2", kAsppChannels, Then::relu);
    b.add_named<BilinearResize>("", input_size);
  }
  auto& project = module.add_named<Sequential>("project");
  project.add_named<Conv2d>("0", 5 * kAsppChannels, kAsppChannels, ConvSpec{.kernel = 1, .init = kHeadInit});
  project.add_named<BatchNorm2d>("1", kAsppChannels, Then::relu);
  project.add_named<Dropout>("3", 0.5f, 1);
}

}  // namespace

std::unique_ptr<Sequential> deeplabv3plus(std::int64_t num_classes) {
  auto net = std::make_unique<Sequential>();
  const auto image_size = std::make_shared<SizeNote>();
  const auto low_level_size = std::make_shared<SizeNote>();
  net->add_named<NoteSize>("", image_size);

  // Stride 4: the stem and layer1, whose output the decoder reads.
  auto& stem = net->add_named<Sequential>("backbone");
  stem.add_named<Conv2d>("conv1", 3, 64, 7, 2, 3);
  stem.add_named<BatchNorm2d>("bn1", 64, Then::relu);
  stem.add_named<Pool2d>("maxpool", PoolKind::max, 3, 2, 1);
  std::int64_t channels = 64;
  add_resnet_stage(stem, "layer1", channels, 64, 3, 1, 1);
  const std::int64_t low_level_channels = channels;
  net->add_named<NoteSize>("", low_level_size);

  // Two branches over layer1's output, concatenated: the encoder (layer2-4 and ASPP, upsampled
  // back to stride 4) and the low-level projection.
  auto& decoder_input = net->add_named<Concat>("");
  auto& encoder = decoder_input.add_branch();
  auto& deep = encoder.add_named<Sequential>("backbone");
  add_resnet_stage(deep, "layer2", channels, 128, 4, 2, 1);
  add_resnet_stage(deep, "layer3", channels, 256, 6, 2, 1);
  add_resnet_stage(deep, "layer4", channels, 512, 3, 1, 2);
  aspp(encoder, channels);
  encoder.add_named<BilinearResize>("", low_level_size);
  auto& low_level = decoder_input.add_branch().add_named<Sequential>("project");
  low_level.add_named<Conv2d>("0", low_level_channels, kLowLevelChannels, ConvSpec{.kernel = 1, .init = kHeadInit});
  low_level.add_named<BatchNorm2d>("1", kLowLevelChannels, Then::relu);

  auto& classifier = net->add_named<Sequential>("classifier");
  const ConvSpec three_by_three{.kernel = 3, .padding = 1, .init = kHeadInit};
  classifier.add_named<Conv2d>("0", kAsppChannels + kLowLevelChannels, kAsppChannels, three_by_three);
  classifier.add_named<BatchNorm2d>("1", kAsppChannels, Then::relu);
  classifier.add_named<Conv2d>("3", kAsppChannels, kAsppChannels, three_by_three);
  classifier.add_named<BatchNorm2d>("4", kAsppChannels, Then::relu);
  classifier.add_named<Conv2d>("6", kAsppChannels, num_classes, ConvSpec{.kernel = 1, .bias = true, .init = kHeadInit});

  net->add_named<BilinearResize>("", image_size);
  return net;
}

}  // namespace dlbench::worker
