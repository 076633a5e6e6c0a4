// InceptionV3 as torchvision builds it (inception_v3(aux_logits=True, transform_input=False)):
// the same blocks, shapes, module names and initialisation, trained with its auxiliary classifier.
#include <cstdint>
#include <memory>
#include <string>

#include "layers/auxiliary_classifier.hpp"
#include "layers/batch_norm2d.hpp"
#include "layers/concat.hpp"
#include "layers/conv2d.hpp"
#include "layers/linear.hpp"
#include "layers/pool2d.hpp"
#include "models/architectures.hpp"

namespace dlbench::worker {
namespace {

// torchvision's BasicConv2d: convolution without bias, batch norm (eps 0.001), ReLU. Weights are
// N(0, 0.1²) truncated to [-2, 2] unless a module sets its own stddev.
void basic_conv(Sequential& into, const std::string& name, std::int64_t in, std::int64_t out, Extent2 kernel,
                std::int64_t stride = 1, Extent2 padding = 0, float init_std = 0.1f) {
  auto& block = into.add_named<Sequential>(name);
  block.add_named<Conv2d>("conv", in, out,
                          ConvSpec{.kernel = kernel,
                                   .stride = stride,
                                   .padding = padding,
                                   .init = ParameterInit::truncated_normal,
                                   .init_std = init_std});
  block.add_named<BatchNorm2d>("bn", out, Then::relu, 0.001f);
}

// F.avg_pool2d(x, 3, stride=1, padding=1) (padding counted, PyTorch's default), then a 1×1 conv.
void pool_branch(Concat& block, std::int64_t in, std::int64_t out) {
  auto& branch = block.add_branch();
  branch.add_named<Pool2d>("avg_pool", PoolKind::average, 3, 1, 1);
  basic_conv(branch, "branch_pool", in, out, 1);
}

void max_pool_branch(Concat& block) { block.add_branch().add_named<Pool2d>("max_pool", PoolKind::max, 3, 2); }

void inception_a(Sequential& net, const std::string& name, std::int64_t in, std::int64_t pool_features) {
  auto& block = net.add_named<Concat>(name);
  basic_conv(block.add_branch(), "branch1x1", in, 64, 1);
  auto& b5 = block.add_branch();
  basic_conv(b5, "branch5x5_1", in, 48, 1);
  basic_conv(b5, "branch5x5_2", 48, 64, 5, 1, 2);
  auto& b3 = block.add_branch();
  basic_conv(b3, "branch3x3dbl_1", in, 64, 1);
  basic_conv(b3, "branch3x3dbl_2", 64, 96, 3, 1, 1);
  basic_conv(b3, "branch3x3dbl_3", 96, 96, 3, 1, 1);
  pool_branch(block, in, pool_features);
}

void inception_b(Sequential& net, const std::string& name, std::int64_t in) {
  auto& block = net.add_named<Concat>(name);
  basic_conv(block.add_branch(), "branch3x3", in, 384, 3, 2);
  auto& b3 = block.add_branch();
  basic_conv(b3, "branch3x3dbl_1", in, 64, 1);
  basic_conv(b3, "branch3x3dbl_2", 64, 96, 3, 1, 1);
  basic_conv(b3, "branch3x3dbl_3", 96, 96, 3, 2);
  max_pool_branch(block);
}

// The factorised 7×7: 1×7 and 7×1 convolutions.
void inception_c(Sequential& net, const std::string& name, std::int64_t in, std::int64_t c7) {
  auto& block = net.add_named<Concat>(name);
  basic_conv(block.add_branch(), "branch1x1", in, 192, 1);
  auto& b7 = block.add_branch();
  basic_conv(b7, "branch7x7_1", in, c7, 1);
  basic_conv(b7, "branch7x7_2", c7, c7, {1, 7}, 1, {0, 3});
  basic_conv(b7, "branch7x7_3", c7, 192, {7, 1}, 1, {3, 0});
  auto& b77 = block.add_branch();
  basic_conv(b77, "branch7x7dbl_1", in, c7, 1);
  basic_conv(b77, "branch7x7dbl_2", c7, c7, {7, 1}, 1, {3, 0});
  basic_conv(b77, "branch7x7dbl_3", c7, c7, {1, 7}, 1, {0, 3});
  basic_conv(b77, "branch7x7dbl_4", c7, c7, {7, 1}, 1, {3, 0});
  basic_conv(b77, "branch7x7dbl_5", c7, 192, {1, 7}, 1, {0, 3});
  pool_branch(block, in, 192);
}

void inception_d(Sequential& net, const std::string& name, std::int64_t in) {
  auto& block = net.add_named<Concat>(name);
  auto& b3 = block.add_branch();
  basic_conv(b3, "branch3x3_1", in, 192, 1);
  basic_conv(b3, "branch3x3_2", 192, 320, 3, 2);
  auto& b7 = block.add_branch();
  basic_conv(b7, "branch7x7x3_1", in, 192, 1);
  basic_conv(b7, "branch7x7x3_2", 192, 192, {1, 7}, 1, {0, 3});
  basic_conv(b7, "branch7x7x3_3", 192, 192, {7, 1}, 1, {3, 0});
  basic_conv(b7, "branch7x7x3_4", 192, 192, 3, 2);
  max_pool_branch(block);
}

// The expanded filter bank: 1×3 and 3×1 side by side, concatenated inside the branch.
void inception_e(Sequential& net, const std::string& name, std::int64_t in) {
  auto& block = net.add_named<Concat>(name);
  basic_conv(block.add_branch(), "branch1x1", in, 320, 1);
  auto& b3 = block.add_branch();
  basic_conv(b3, "branch3x3_1", in, 384, 1);
  auto& b3_split = b3.add_named<Concat>("");
  basic_conv(b3_split.add_branch(), "branch3x3_2a", 384, 384, {1, 3}, 1, {0, 1});
  basic_conv(b3_split.add_branch(), "branch3x3_2b", 384, 384, {3, 1}, 1, {1, 0});
  auto& b33 = block.add_branch();
  basic_conv(b33, "branch3x3dbl_1", in, 448, 1);
  basic_conv(b33, "branch3x3dbl_2", 448, 384, 3, 1, 1);
  auto& b33_split = b33.add_named<Concat>("");
  basic_conv(b33_split.add_branch(), "branch3x3dbl_3a", 384, 384, {1, 3}, 1, {0, 1});
  basic_conv(b33_split.add_branch(), "branch3x3dbl_3b", 384, 384, {3, 1}, 1, {1, 0});
  pool_branch(block, in, 192);
}

// InceptionAux: avg_pool2d(5, stride 3), 1×1 to 128, 5×5 to 768 (stddev 0.01), global average,
// fc (stddev 0.001). Needs a 17×17 input (299×299 images): the 5×5 convolution needs 5×5.
std::unique_ptr<Sequential> auxiliary_head(std::int64_t num_classes) {
  auto head = std::make_unique<Sequential>();
  head->add_named<Pool2d>("avg_pool", PoolKind::average, 5, 3);
  basic_conv(*head, "conv0", 768, 128, 1);
  basic_conv(*head, "conv1", 128, 768, 5, 1, 0, 0.01f);
  head->add_named<Pool2d>("adaptive_avg_pool", PoolKind::average, 0, 1, 0, true);
  head->add_named<Flatten>("flatten");
  auto& fc = head->add_named<Linear>("fc", 768, num_classes);
  fc.weight().init = ParameterInit::truncated_normal;
  fc.weight().init_std = 0.001f;
  return head;
}

}  // namespace

std::unique_ptr<Sequential> inception_v3(std::int64_t num_classes) {
  auto net = std::make_unique<Sequential>();
  basic_conv(*net, "Conv2d_1a_3x3", 3, 32, 3, 2);
  basic_conv(*net, "Conv2d_2a_3x3", 32, 32, 3);
  basic_conv(*net, "Conv2d_2b_3x3", 32, 64, 3, 1, 1);
  net->add_named<Pool2d>("maxpool1", PoolKind::max, 3, 2);
  basic_conv(*net, "Conv2d_3b_1x1", 64, 80, 1);
  basic_conv(*net, "Conv2d_4a_3x3", 80, 192, 3);
  net->add_named<Pool2d>("maxpool2", PoolKind::max, 3, 2);
  inception_a(*net, "Mixed_5b", 192, 32);
  inception_a(*net, "Mixed_5c", 256, 64);
  inception_a(*net, "Mixed_5d", 288, 64);
  inception_b(*net, "Mixed_6a", 288);
  inception_c(*net, "Mixed_6b", 768, 128);
  inception_c(*net, "Mixed_6c", 768, 160);
  inception_c(*net, "Mixed_6d", 768, 160);
  inception_c(*net, "Mixed_6e", 768, 192);
  net->add_named<AuxiliaryClassifier>("AuxLogits", auxiliary_head(num_classes), 0.4f);
  inception_d(*net, "Mixed_7a", 768);
  inception_e(*net, "Mixed_7b", 1280);
  inception_e(*net, "Mixed_7c", 2048);
  net->add_named<Pool2d>("avgpool", PoolKind::average, 0, 1, 0, true);
  net->add_named<Flatten>("flatten");
  net->add_named<Dropout>("dropout", 0.5f, 1);
  auto& fc = net->add_named<Linear>("fc", 2048, num_classes);
  fc.weight().init = ParameterInit::truncated_normal;
  fc.weight().init_std = 0.1f;
  return net;
}

}  // namespace dlbench::worker
