// Gradient averaging in buckets, overlapped with backward (like PyTorch DDP): parameters are
// grouped, last layer first, into contiguous slices of the flat gradient buffer of about
// `bucket_bytes`; a bucket's reduction starts as soon as backward has written all of its
// gradients, while earlier layers are still computing.
#pragma once

#include <cstddef>
#include <unordered_map>
#include <vector>

#include "communicator.hpp"
#include "parameters.hpp"

namespace dlbench::worker {

class GradientBuckets {
 public:
  static constexpr std::size_t kDefaultBucketBytes = 25u << 20;

  GradientBuckets(Communicator& communicator, const ParameterStore& parameters, std::size_t bucket_bytes);

  // From the backward pass: these parameters' gradients are final for this step.
  void gradients_ready(const std::vector<Parameter*>& parameters);
  // Before the optimizer: starts any bucket not started yet and orders the update after every
  // bucket's mean (a wait on host buffers; on a GPU, stream order without a host wait).
  void finish();

  struct Bucket {
    std::int64_t offset = 0;  // elements into the flat gradient buffer
    std::int64_t count = 0;               // elements of the slice, padding included
    std::int64_t parameter_elements = 0;  // of which the parameters' own
    std::int64_t pending = 0;  // parameters' elements whose gradients are not ready yet this step
    bool started = false;
  };
  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  Communicator& communicator_;
  float* grads_;
  std::vector<Bucket> buckets_;
  std::unordered_map<const Parameter*, std::size_t> bucket_of_;
  std::size_t started_ = 0;
};

}  // namespace dlbench::worker
