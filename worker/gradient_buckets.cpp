#include "gradient_buckets.hpp"

#include <stdexcept>

#include "backend.hpp"

namespace dlbench::worker {

GradientBuckets::GradientBuckets(Communicator& communicator, const ParameterStore& parameters,
                                 std::size_t bucket_bytes)
    : communicator_(communicator), grads_(parameters.grads()) {
  const auto& params = parameters.parameters();
  const auto limit = static_cast<std::int64_t>(bucket_bytes / sizeof(float));
  // Backward produces gradients from the last parameter to the first; those are contiguous
  // at the end of the flat buffer, so each bucket is one slice (the zero padding between its
  // parameters included).
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    const Parameter* p = *it;
    const std::int64_t extent = padded_parameter_elements(p->value.numel());
    if (buckets_.empty() || (buckets_.back().count > 0 && buckets_.back().count + extent > limit)) buckets_.push_back({});
    Bucket& b = buckets_.back();
    b.offset = p->offset;  // moves down as earlier parameters join
    b.count += extent;
    b.parameter_elements += p->value.numel();
    bucket_of_[p] = buckets_.size() - 1;
  }
  for (Bucket& b : buckets_) b.pending = b.parameter_elements;
}

void GradientBuckets::gradients_ready(const std::vector<Parameter*>& parameters) {
  for (const Parameter* p : parameters) {
    const auto it = bucket_of_.find(p);
    if (it == bucket_of_.end()) throw std::logic_error("gradient for a parameter outside the buckets: " + p->name);
    Bucket& b = buckets_[it->second];
    b.pending -= p->value.numel();
    if (b.pending == 0 && !b.started) {
      communicator_.start_allreduce(grads_ + b.offset, b.count, Reduction::average);
      b.started = true;
      ++started_;
    }
  }
  communicator_.progress();
}

void GradientBuckets::finish() {
  // Buckets whose parameters were not all reported (a layer without a hook) still go.
  for (Bucket& b : buckets_) {
    if (!b.started) communicator_.start_allreduce(grads_ + b.offset, b.count, Reduction::average);
  }
  communicator_.complete_reductions();  // the mean, in the reduction itself: no second pass
  for (Bucket& b : buckets_) {
    b.pending = b.parameter_elements;
    b.started = false;
  }
  started_ = 0;
}

}  // namespace dlbench::worker
