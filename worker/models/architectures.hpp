// The networks build_model() knows, one builder per architecture (models/*.cpp).
#pragma once

#include <cstdint>
#include <memory>

#include "layers/sequential.hpp"

namespace dlbench::worker {

std::unique_ptr<Sequential> inception_v3(std::int64_t num_classes);

}  // namespace dlbench::worker
