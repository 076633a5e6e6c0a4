// A small, well-conditioned network for training tests and the self-test: conv (`channels`
// wide), batch norm, ReLU, max pool, dropout when `dropout` > 0, and a linear classifier over
// `image`×`image` inputs and 10 classes.
#pragma once

#include <memory>

#include "layers/batch_norm2d.hpp"
#include "layers/conv2d.hpp"
#include "layers/linear.hpp"
#include "layers/pool2d.hpp"
#include "layers/relu.hpp"
#include "layers/sequential.hpp"

namespace dlbench::worker {

inline std::unique_ptr<Sequential> small_conv_net(std::int64_t channels = 16, std::int64_t image = 16,
                                                  float dropout = 0.0f) {
  auto net = std::make_unique<Sequential>();
  net->add<Conv2d>(3, channels, 3, 1, 1);
  net->add<BatchNorm2d>(channels);
  net->add<ReLU>();
  net->add<Pool2d>(PoolKind::max, 2, 2);
  net->add<Flatten>();
  if (dropout > 0.0f) net->add<Dropout>(dropout, 1);
  net->add<Linear>(channels * (image / 2) * (image / 2), 10);
  return net;
}

}  // namespace dlbench::worker
