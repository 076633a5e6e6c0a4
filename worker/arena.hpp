// The activation arena: every buffer a model needs for one training step is requested at
// setup, then allocated as one aligned block. Steps reuse the same addresses, so nothing is
// allocated on the hot path (and CUDA graphs can later capture stable pointers).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "tensor.hpp"

namespace dlbench::worker {

class Backend;

class Arena {
 public:
  static constexpr std::size_t kAlignment = 64;  // a cache line and an AVX-512 vector

  // Plans room for `tensor` (its shape must be set); its data pointer is filled in by commit().
  // The Tensor must stay at the same address until then.
  void request(Tensor& tensor);
  // Allocates one block for every request on `backend` and points each tensor into it.
  void commit(Backend& backend);

  std::size_t planned_bytes() const { return planned_bytes_; }
  std::size_t request_count() const { return requests_.size(); }

 private:
  struct Request {
    Tensor* tensor;
    std::size_t offset;
  };
  std::vector<Request> requests_;
  std::size_t planned_bytes_ = 0;
  std::shared_ptr<void> block_;
};

}  // namespace dlbench::worker
