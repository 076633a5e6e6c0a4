#include "backend.hpp"

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "host_memory.hpp"

namespace dlbench::worker {

void HostClockMarks::mark() {
  if (wait_) wait_();
  marks_.push_back(std::chrono::steady_clock::now());
}

std::vector<double> HostClockMarks::drain(bool wait) {
  std::vector<double> seconds;  // every mark was taken after its work: all are complete
  for (std::size_t i = returned_ + 1; i < marks_.size(); ++i) {
    seconds.push_back(std::chrono::duration<double>(marks_[i] - marks_[i - 1]).count());
  }
  returned_ = marks_.empty() ? 0 : marks_.size() - 1;
  if (wait) {
    marks_.clear();
    returned_ = 0;
  }
  return seconds;
}

namespace {

class AddThenRelu final : public AddOp {
 public:
  AddThenRelu(std::unique_ptr<AddOp> add, std::unique_ptr<ReluOp> relu) : add_(std::move(add)), relu_(std::move(relu)) {}
  void forward(const Tensor& a, const Tensor& b, Tensor& y) override {
    add_->forward(a, b, y);
    relu_->forward(y, y);
  }

 private:
  std::unique_ptr<AddOp> add_;
  std::unique_ptr<ReluOp> relu_;
};

// Reached only by code that skipped cannot_run_transformers(): a logic error, named.
[[noreturn]] void no_transformer_op(const Backend& backend, const char* op) {
  throw std::logic_error(std::string(op) + " called on the " + backend.name() + " backend: " +
                         backend.cannot_run_transformers().value_or("it has none"));
}

}  // namespace

NonFiniteCount count_non_finite(const float* values, std::int64_t n) {
  NonFiniteCount count;
  for (std::int64_t i = 0; i < n; ++i) {
    count.inf += std::isinf(values[i]) ? 1 : 0;
    count.nan += std::isnan(values[i]) ? 1 : 0;
  }
  return count;
}

NonFiniteCount Backend::count_non_finite(const Tensor& t) {
  if (t.empty() || t.dtype == DType::int32) return {};
  std::vector<std::byte> bytes(t.bytes());
  copy_to_host(bytes.data(), t.data, bytes.size());
  const std::vector<float> values = decode(bytes.data(), static_cast<std::size_t>(t.numel()), t.dtype);
  return worker::count_non_finite(values.data(), t.numel());
}

std::unique_ptr<AddOp> Backend::make_add_relu(const Shape& shape, DType dtype) {
  return std::make_unique<AddThenRelu>(make_add(shape, dtype), make_relu(shape, dtype));
}

std::unique_ptr<BatchedMatmulOp> Backend::make_batched_matmul(const BatchedMatmulConfig&) {
  no_transformer_op(*this, "make_batched_matmul");
}
std::unique_ptr<LayerNormOp> Backend::make_layer_norm(const LayerNormConfig&) { no_transformer_op(*this, "make_layer_norm"); }
std::unique_ptr<SoftmaxOp> Backend::make_softmax(std::int64_t, std::int64_t, DType) {
  no_transformer_op(*this, "make_softmax");
}
std::unique_ptr<ActivationOp> Backend::make_activation(ActivationKind, std::int64_t, DType) {
  no_transformer_op(*this, "make_activation");
}
std::unique_ptr<SwapAxesOp> Backend::make_swap_axes(const Shape&, DType) { no_transformer_op(*this, "make_swap_axes"); }
void Backend::gather_rows(const Tensor&, const std::int32_t*, std::int64_t, Tensor&, bool) {
  no_transformer_op(*this, "gather_rows");
}
void Backend::scatter_add_rows(const Tensor&, const std::int32_t*, std::int64_t, Tensor&) {
  no_transformer_op(*this, "scatter_add_rows");
}
void Conv2dOp::backward_data_accumulate(const Tensor&, const Tensor&, Tensor&) {
  throw std::logic_error("this backend does not accumulate convolution input gradients "
                         "(Backend::accumulates_conv_input_grad)");
}
void BatchNormOp::forward_training_add_relu(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&,
                                            BatchNormStatistics&, void*) {
  throw std::logic_error("this batch norm was not made with add_relu (BatchNormConfig::add_relu)");
}
void BatchNormOp::backward_add_relu(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                    const BatchNormStatistics&, Tensor&, Tensor&, Tensor&, Tensor&, const void*) {
  throw std::logic_error("this batch norm was not made with add_relu (BatchNormConfig::add_relu)");
}
void BatchNormOp::forward_deferred(const Tensor&, const Tensor&, const Tensor&, Tensor&, BatchNormStatistics&) {
  throw std::logic_error("this batch norm was not made deferred (BatchNormConfig::deferred)");
}
void BatchNormOp::backward_deferred(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                    const BatchNormStatistics&, Tensor&, Tensor&, Tensor&) {
  throw std::logic_error("this batch norm was not made deferred (BatchNormConfig::deferred)");
}
void BatchNormOp::backward_deferred_apply(const Tensor&, const Tensor&, const Tensor&, Tensor&) {
  throw std::logic_error("this batch norm was not made deferred (BatchNormConfig::deferred)");
}
void FusedConv2dOp::backward_data_batch_norm(const Tensor&, const Tensor&, const Tensor&, const BatchNormStatistics&,
                                             const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&, Tensor&) {
  throw std::logic_error(
      "this fused convolution does not take its batch norm's gradients (fuses_input_batch_norm_gradients)");
}

std::shared_ptr<void> Backend::allocate_host(std::size_t bytes) { return zeroed_large_memory(bytes); }

namespace {
[[noreturn]] void no_overlapped_copies(const Backend& backend, const char* call) {
  throw std::logic_error(std::string(call) + ": the " + backend.name() +
                         " backend does not overlap host copies with its steps (overlaps_host_copies)");
}
}  // namespace

void Backend::stage_from_host(void*, const void*, std::size_t) { no_overlapped_copies(*this, "stage_from_host"); }
void Backend::take_staged(void*, const void*, std::size_t) { no_overlapped_copies(*this, "take_staged"); }
void Backend::wait_staged_reads() { no_overlapped_copies(*this, "wait_staged_reads"); }
void Backend::expand_staged_images(void*, const void*, std::int64_t, int, DType, bool) {
  no_overlapped_copies(*this, "expand_staged_images");
}

void Backend::poison(void* device_dst, std::size_t bytes) {
  const std::vector<unsigned char> all_ones(bytes, 0xFF);
  copy_from_host(device_dst, all_ones.data(), bytes);
}
void Backend::fill_zero(Tensor&) { no_transformer_op(*this, "fill_zero"); }
void Backend::adamw_update(float*, float*, float*, float*, std::int64_t, const std::vector<ParameterRange>&,
                           const AdamWConfig&, std::uint64_t, const LossScaleState*) {
  no_transformer_op(*this, "adamw_update");
}
void Backend::lamb_update(float*, float*, float*, float*, std::int64_t, const std::vector<ParameterRange>&,
                          const AdamWConfig&, std::uint64_t, const LossScaleState*) {
  no_transformer_op(*this, "lamb_update");
}

DType activation_dtype(Precision precision) {
  switch (precision) {
    case Precision::bf16: return DType::bf16;
    case Precision::amp: return DType::fp16;
    case Precision::fp32:
    case Precision::tf32: break;
  }
  return DType::fp32;
}

std::optional<std::string> cannot_run(Precision precision, const Backend& backend) {
  if (precision == Precision::tf32 && backend.name() != "cuda") {
    return "tf32 is a math mode of NVIDIA tensor cores (Ampere and later); the " + backend.name() +
           " backend computes fp32";
  }
  return backend.cannot_compute(activation_dtype(precision));
}

std::string allowed_precisions(const Backend& backend, const std::string& separator) {
  std::string allowed;
  for (const Precision p : enum_values<Precision>()) {
    if (!cannot_run(p, backend)) allowed += (allowed.empty() ? "" : separator) + std::string(to_string(p));
  }
  return allowed;
}

void require_attention_tensors(const AttentionConfig& config, std::initializer_list<const Tensor*> rows,
                               const Tensor& statistics) {
  for (const Tensor* t : rows) {
    require_elements(*t, config.sequences * config.tokens * config.heads * config.head_size, "fused attention",
                     "q, k, v, the context or a gradient");
    if (t->dtype != config.dtype) {
      throw std::invalid_argument("fused attention: a " + std::string(to_string(t->dtype)) + " tensor where " +
                                  std::string(to_string(config.dtype)) + " was expected");
    }
  }
  require_elements(statistics, config.sequences * config.heads * config.tokens, "fused attention", "statistics");
  if (statistics.dtype != DType::fp32) throw std::invalid_argument("fused attention: statistics must be fp32");
}

}  // namespace dlbench::worker
