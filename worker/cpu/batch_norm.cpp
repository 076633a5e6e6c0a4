// The CPU backend's batch normalization: oneDNN's primitive, ReLU fused where the model asks.
#include "cpu/cpu_ops.hpp"
#include "cpu/conv_batch_norm.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

namespace dlbench::worker {
namespace {

using namespace cpu_ops;

class CpuBatchNorm final : public BatchNormOp {
 public:
  CpuBatchNorm(CpuBackend& backend, const BatchNormConfig& c)
      : b_(backend), channels_(c.input.c()), momentum_(c.momentum), unbias_(unbias_factor(c.input)) {
    data_ = md_of(c.input, Layout::nhwc, c.dtype);
    channel_ = md_of(Shape(c.input.c()), Layout::plain);  // statistics, scale and shift: fp32
    auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
    // Fused, forward keeps a bit mask of where y > 0 and backward applies it to dy itself.
    if (c.relu) flags |= dnnl::normalization_flags::fuse_norm_relu;
    const auto fwd_pd = DLBENCH_DNNL_CALL(dnnl::batch_normalization_forward::primitive_desc(
        dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_training, data_, c.epsilon, flags),
        user_scratchpad(), b_.engine()));
    const auto bwd_pd = DLBENCH_DNNL_CALL(dnnl::batch_normalization_backward::primitive_desc(
        dnnl::batch_normalization_backward::desc(dnnl::prop_kind::backward, data_, data_, c.epsilon, flags),
        user_scratchpad(), b_.engine(), fwd_pd));
    fwd_ = Primitive(backend, fwd_pd);
    bwd_ = Primitive(backend, bwd_pd);
    workspace_ = fwd_pd.workspace_desc();
  }

  std::size_t workspace_bytes() const override { return workspace_.get_size(); }

  void forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                        BatchNormStatistics& statistics, void* workspace) override {
    const Tensor& mean = statistics.mean;
    const Tensor& variance = statistics.spread;  // oneDNN's: the biased variance
    const auto& e = b_.engine();
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, mem(data_, e, x.data)},
                                         {DNNL_ARG_DST, mem(data_, e, y.data)},
                                         {DNNL_ARG_SCALE, mem(channel_, e, gamma.as<float>())},
                                         {DNNL_ARG_SHIFT, mem(channel_, e, beta.as<float>())},
                                         {DNNL_ARG_MEAN, mem(channel_, e, mean.as<float>())},
                                         {DNNL_ARG_VARIANCE, mem(channel_, e, variance.as<float>())}};
    if (workspace_bytes() > 0) args[DNNL_ARG_WORKSPACE] = mem(workspace_, e, workspace);
    fwd_.execute(std::move(args));
    float* running_mean = statistics.running_mean.as<float>();
    float* running_var = statistics.running_var.as<float>();
    const float* m = mean.as<float>();
    const float* v = variance.as<float>();
    for (std::int64_t i = 0; i < channels_; ++i) {
      running_mean[i] = (1.0f - momentum_) * running_mean[i] + momentum_ * m[i];
      running_var[i] = (1.0f - momentum_) * running_var[i] + momentum_ * v[i] * unbias_;
    }
  }

  void backward(const Tensor& x, const Tensor&, const Tensor& dy, const Tensor& gamma, const Tensor&,
                const BatchNormStatistics& statistics, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                const void* workspace) override {
    const Tensor& mean = statistics.mean;
    const Tensor& variance = statistics.spread;
    const auto& e = b_.engine();
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, mem(data_, e, x.data)},
                               {DNNL_ARG_DIFF_DST, mem(data_, e, dy.data)},
                               {DNNL_ARG_SCALE, mem(channel_, e, gamma.data)},
                               // oneDNN 2.6 refuses to execute use_shift backward without a SHIFT
                               // argument, although the gradients do not depend on its values.
                               {DNNL_ARG_SHIFT, mem(channel_, e, gamma.data)},
                               {DNNL_ARG_MEAN, mem(channel_, e, mean.data)},
                               {DNNL_ARG_VARIANCE, mem(channel_, e, variance.data)},
                               {DNNL_ARG_DIFF_SRC, mem(data_, e, dx.data)},
                               {DNNL_ARG_DIFF_SCALE, mem(channel_, e, dgamma.data)},
                               {DNNL_ARG_DIFF_SHIFT, mem(channel_, e, dbeta.data)}};
    if (workspace_bytes() > 0) args[DNNL_ARG_WORKSPACE] = mem(workspace_, e, workspace);
    bwd_.execute(std::move(args));
  }

 private:
  // n / (n − 1) over the n values per channel: the unbiased variance for the running one.
  static float unbias_factor(const Shape& input) {
    const auto n = static_cast<double>(input.n() * input.h() * input.w());
    return n > 1 ? static_cast<float>(n / (n - 1)) : 1.0f;
  }

  CpuBackend& b_;
  std::int64_t channels_;
  float momentum_, unbias_;
  memory::desc data_, channel_, workspace_;
  Primitive fwd_, bwd_;
};


}  // namespace

std::unique_ptr<FusedConv2dOp> CpuBackend::make_fused_conv2d(const FusedConv2dConfig& c) {
  const std::optional<FusedConv2dConfig> made = routed(conv_batch_norm_route_, c);
  if (!made) return nullptr;
  return make_host_fused_conv2d(*this, *made);
}

std::unique_ptr<BatchNormOp> CpuBackend::make_batch_norm(const BatchNormConfig& c) {
  if (c.deferred || c.from_sums) return make_host_batch_norm_from_sums(c);  // any dtype, emulated fp16 included
  if (emulates(c.dtype)) return emulate_half(make_batch_norm(in_fp32(c)), half_scratch_);
  return std::make_unique<CpuBatchNorm>(*this, c);
}

}  // namespace dlbench::worker
