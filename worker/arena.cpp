#include "arena.hpp"

#include <stdexcept>

#include "backend.hpp"

namespace dlbench::worker {

void Arena::request(Tensor& tensor) {
  if (block_) throw std::logic_error("Arena::request after commit");
  requests_.push_back({&tensor, planned_bytes_});
  planned_bytes_ += (tensor.bytes() + kAlignment - 1) / kAlignment * kAlignment;
}

void Arena::commit(Backend& backend) {
  if (block_) throw std::logic_error("Arena::commit twice");
  block_ = backend.allocate(planned_bytes_);
  auto* base = static_cast<unsigned char*>(block_.get());
  for (const Request& r : requests_) r.tensor->data = reinterpret_cast<float*>(base + r.offset);
}

}  // namespace dlbench::worker
