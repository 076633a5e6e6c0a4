// The CPU backend's ops without weights: ReLU, layout reorders, channel slices, pooling,
// bilinear resize and the residual add (with its ReLU), each a oneDNN primitive.
#include "cpu/cpu_ops.hpp"

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

class CpuRelu final : public ReluOp {
 public:
  CpuRelu(CpuBackend& backend, const Shape& shape, DType dtype) : b_(backend) {
    data_ = md_of(shape, shape.rank == 4 ? Layout::nhwc : Layout::plain, dtype);
    const auto algorithm = dnnl::algorithm::eltwise_relu_use_dst_for_bwd;  // allows y to overwrite x
    const auto fwd_pd = DLBENCH_DNNL_CALL(dnnl::eltwise_forward::primitive_desc(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, algorithm, data_, 0.0f, 0.0f), user_scratchpad(),
        b_.engine()));
    const auto bwd_pd = DLBENCH_DNNL_CALL(dnnl::eltwise_backward::primitive_desc(
        dnnl::eltwise_backward::desc(algorithm, data_, data_, 0.0f, 0.0f), user_scratchpad(), b_.engine(), fwd_pd));
    fwd_ = Primitive(backend, fwd_pd);
    bwd_ = Primitive(backend, bwd_pd);
  }
  void forward(const Tensor& x, Tensor& y) override {
    fwd_.execute({{DNNL_ARG_SRC, mem(data_, b_.engine(), x.data)}, {DNNL_ARG_DST, mem(data_, b_.engine(), y.data)}});
  }
  void backward(const Tensor& y, const Tensor& dy, Tensor& dx) override {
    const auto& e = b_.engine();
    bwd_.execute({{DNNL_ARG_DST, mem(data_, e, y.data)},
                  {DNNL_ARG_DIFF_DST, mem(data_, e, dy.data)},
                  {DNNL_ARG_DIFF_SRC, mem(data_, e, dx.data)}});
  }

 private:
  CpuBackend& b_;
  memory::desc data_;
  Primitive fwd_, bwd_;
};

class CpuReorder final : public ReorderOp {
 public:
  CpuReorder(CpuBackend& backend, const Shape& shape, DType dtype, Layout from, Layout to)
      : b_(backend), from_(md_of(shape, from, dtype)), to_(md_of(shape, to, dtype)) {
    reorder_ = reorder(backend, from_, to_);
  }
  void run(const Tensor& x, Tensor& y) override {
    reorder_.execute(mem(from_, b_.engine(), x.data), mem(to_, b_.engine(), y.data));
  }

 private:
  CpuBackend& b_;
  memory::desc from_, to_;
  Primitive reorder_;
};

// A reorder between a whole tensor's channel slice (a oneDNN sub-memory: the whole's strides,
// offset by `offset` channels) and a dense part.
class CpuChannelSlice final : public ChannelSliceOp {
 public:
  CpuChannelSlice(CpuBackend& backend, const Shape& part, std::int64_t whole_channels, std::int64_t offset,
                  DType dtype)
      : b_(backend), part_(md_of(part, Layout::nhwc, dtype)) {
    const Shape whole_shape(part.n(), whole_channels, part.h(), part.w());
    whole_ = md_of(whole_shape, Layout::nhwc, dtype);
    slice_ = whole_.submemory_desc(dims_of(part), {0, offset, 0, 0});
    insert_ = reorder(backend, part_, slice_);
    extract_ = reorder(backend, slice_, part_);
  }
  // The slice's memory is the whole's buffer; the sub-memory descriptor carries the offset.
  void insert(const Tensor& part, Tensor& whole) override {
    insert_.execute(mem(part_, b_.engine(), part.data), mem(slice_, b_.engine(), whole.data));
  }
  void extract(const Tensor& whole, Tensor& part) override {
    extract_.execute(mem(slice_, b_.engine(), whole.data), mem(part_, b_.engine(), part.data));
  }

 private:
  CpuBackend& b_;
  memory::desc part_, whole_, slice_;
  Primitive insert_, extract_;
};

class CpuPool final : public PoolOp {
 public:
  CpuPool(CpuBackend& backend, const PoolConfig& c) : b_(backend) {
    src_ = md_of(c.input, Layout::nhwc, c.dtype);
    dst_ = md_of(c.output(), Layout::nhwc, c.dtype);
    // PyTorch's AvgPool2d counts padding by default (count_include_pad=True).
    const auto algorithm =
        c.kind == PoolKind::max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_include_padding;
    const memory::dims strides{c.stride, c.stride}, kernel{c.kernel.h, c.kernel.w}, padding{c.padding, c.padding};
    const auto fwd_pd = DLBENCH_DNNL_CALL(dnnl::pooling_forward::primitive_desc(
        dnnl::pooling_forward::desc(dnnl::prop_kind::forward_training, algorithm, src_, dst_, strides, kernel, padding,
                                    padding),
        user_scratchpad(), b_.engine()));
    const auto bwd_pd = DLBENCH_DNNL_CALL(dnnl::pooling_backward::primitive_desc(
        dnnl::pooling_backward::desc(algorithm, src_, dst_, strides, kernel, padding, padding), user_scratchpad(),
        b_.engine(), fwd_pd));
    fwd_ = Primitive(backend, fwd_pd);
    bwd_ = Primitive(backend, bwd_pd);
    workspace_ = fwd_pd.workspace_desc();
  }
  std::size_t workspace_bytes() const override { return workspace_.get_size(); }
  bool backward_reads_activations() const override { return false; }
  void forward(const Tensor& x, Tensor& y, void* workspace) override {
    const auto& e = b_.engine();
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, mem(src_, e, x.data)}, {DNNL_ARG_DST, mem(dst_, e, y.data)}};
    if (workspace_bytes() > 0) args[DNNL_ARG_WORKSPACE] = mem(workspace_, e, workspace);
    fwd_.execute(std::move(args));
  }
  void backward(const Tensor&, const Tensor&, const Tensor& dy, const void* workspace, Tensor& dx) override {
    const auto& e = b_.engine();
    std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, mem(dst_, e, dy.data)},
                                         {DNNL_ARG_DIFF_SRC, mem(src_, e, dx.data)}};
    if (workspace_bytes() > 0) args[DNNL_ARG_WORKSPACE] = mem(workspace_, e, workspace);
    bwd_.execute(std::move(args));
  }

 private:
  CpuBackend& b_;
  memory::desc src_, dst_, workspace_;
  Primitive fwd_, bwd_;
};

// oneDNN's linear resampling: the source coordinate (i + 0.5) · in/out - 0.5 with edge
// clamping, which is PyTorch's bilinear rule with align_corners=False.
class CpuResize final : public ResizeOp {
 public:
  CpuResize(CpuBackend& backend, const ResizeConfig& c)
      : b_(backend), src_(md_of(c.input, Layout::nhwc, c.dtype)), dst_(md_of(c.output_shape(), Layout::nhwc, c.dtype)) {
    const auto algorithm = dnnl::algorithm::resampling_linear;
    const auto fwd_pd = DLBENCH_DNNL_CALL(dnnl::resampling_forward::primitive_desc(
        dnnl::resampling_forward::desc(dnnl::prop_kind::forward_training, algorithm, src_, dst_), user_scratchpad(),
        b_.engine()));
    const auto bwd_pd = DLBENCH_DNNL_CALL(dnnl::resampling_backward::primitive_desc(
        dnnl::resampling_backward::desc(algorithm, src_, dst_), user_scratchpad(), b_.engine(), fwd_pd));
    fwd_ = Primitive(backend, fwd_pd);
    bwd_ = Primitive(backend, bwd_pd);
  }
  void forward(const Tensor& x, Tensor& y) override {
    const auto& e = b_.engine();
    fwd_.execute({{DNNL_ARG_SRC, mem(src_, e, x.data)}, {DNNL_ARG_DST, mem(dst_, e, y.data)}});
  }
  void backward(const Tensor& dy, Tensor& dx) override {
    const auto& e = b_.engine();
    bwd_.execute({{DNNL_ARG_DIFF_DST, mem(dst_, e, dy.data)}, {DNNL_ARG_DIFF_SRC, mem(src_, e, dx.data)}});
  }

 private:
  CpuBackend& b_;
  memory::desc src_, dst_;
  Primitive fwd_, bwd_;
};

// y = a + b, or max(a + b, 0) with `relu` (a ReLU post-op: one pass over y instead of two).
class CpuAdd final : public AddOp {
 public:
  CpuAdd(CpuBackend& backend, const Shape& shape, DType dtype, bool relu) : b_(backend) {
    data_ = md_of(shape, shape.rank == 4 ? Layout::nhwc : Layout::plain, dtype);
    dnnl::primitive_attr attr;
    if (relu) {
      dnnl::post_ops ops;
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
      attr.set_post_ops(ops);
    }
    add_ = Primitive(backend, DLBENCH_DNNL_CALL(dnnl::binary::primitive_desc(
                                  dnnl::binary::desc(dnnl::algorithm::binary_add, data_, data_, data_),
                                  user_scratchpad(attr), b_.engine())));
  }
  void forward(const Tensor& a, const Tensor& b, Tensor& y) override {
    const auto& e = b_.engine();
    add_.execute(
        {{DNNL_ARG_SRC_0, mem(data_, e, a.data)}, {DNNL_ARG_SRC_1, mem(data_, e, b.data)}, {DNNL_ARG_DST, mem(data_, e, y.data)}});
  }

 private:
  CpuBackend& b_;
  memory::desc data_;
  Primitive add_;
};


}  // namespace

std::unique_ptr<ReluOp> CpuBackend::make_relu(const Shape& shape, DType dtype) {
  if (emulates(dtype)) return emulate_half(make_relu(shape, DType::fp32), half_scratch_);
  return std::make_unique<CpuRelu>(*this, shape, dtype);
}
std::unique_ptr<PoolOp> CpuBackend::make_pool(const PoolConfig& c) {
  if (emulates(c.dtype)) return emulate_half(make_pool(in_fp32(c)), half_scratch_);
  return std::make_unique<CpuPool>(*this, c);
}
std::unique_ptr<AddOp> CpuBackend::make_add(const Shape& shape, DType dtype) {
  if (emulates(dtype)) return emulate_half(make_add(shape, DType::fp32), half_scratch_);
  return std::make_unique<CpuAdd>(*this, shape, dtype, false);
}
std::unique_ptr<AddOp> CpuBackend::make_add_relu(const Shape& shape, DType dtype) {
  if (emulates(dtype)) return emulate_half(make_add_relu(shape, DType::fp32), half_scratch_);
  return std::make_unique<CpuAdd>(*this, shape, dtype, true);
}
std::unique_ptr<ReorderOp> CpuBackend::make_reorder(const Shape& shape, DType dtype, Layout from, Layout to) {
  if (emulates(dtype)) return emulate_half(make_reorder(shape, DType::fp32, from, to), half_scratch_);
  return std::make_unique<CpuReorder>(*this, shape, dtype, from, to);
}
std::unique_ptr<ChannelSliceOp> CpuBackend::make_channel_slice(const Shape& part, std::int64_t whole_channels,
                                                               std::int64_t offset, DType dtype) {
  if (offset < 0 || offset + part.c() > whole_channels) {
    throw std::invalid_argument("channel slice [" + std::to_string(offset) + ", " + std::to_string(offset + part.c()) +
                                ") is outside " + std::to_string(whole_channels) + " channels");
  }
  if (emulates(dtype)) {
    return emulate_half(make_channel_slice(part, whole_channels, offset, DType::fp32), half_scratch_);
  }
  return std::make_unique<CpuChannelSlice>(*this, part, whole_channels, offset, dtype);
}
std::unique_ptr<ResizeOp> CpuBackend::make_bilinear_resize(const ResizeConfig& config) {
  if (emulates(config.dtype)) return emulate_half(make_bilinear_resize(in_fp32(config)), half_scratch_);
  return std::make_unique<CpuResize>(*this, config);
}

}  // namespace dlbench::worker
