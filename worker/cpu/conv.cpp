// The CPU backend's convolutions: oneDNN's convolution primitives, and 1×1 convolutions as
// matrix products (why: the comment above CpuPointwiseConv's helpers).
#include "cpu/cpu_ops.hpp"
#include "cpu/conv_backward_data.hpp"

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

// The three primitives of a convolution: forward,
// backward-data and backward-weights, with the weights kept in the user's layout.
class ConvPrimitives {
 public:
  ConvPrimitives(CpuBackend& backend, const dnnl::convolution_forward::primitive_desc& fwd_pd,
                 const dnnl::convolution_backward_data::primitive_desc& bwd_data_pd,
                 const dnnl::convolution_backward_weights::primitive_desc& bwd_weights_pd, const memory::desc& src,
                 const memory::desc& dst, const memory::desc& weights_user, const memory::desc& bias)
      : b_(backend),
        src_(src),
        dst_(dst),
        bias_(bias),
        implementation_(fwd_pd.impl_info_str()),
        backward_data_implementation_(bwd_data_pd.impl_info_str()),
        fwd_(backend, fwd_pd),
        bwd_data_(backend, bwd_data_pd),
        bwd_weights_(backend, bwd_weights_pd),
        fwd_weights_(backend, weights_user, fwd_pd.weights_desc()),
        bwd_data_weights_(backend, weights_user, bwd_data_pd.weights_desc()),
        diff_weights_(backend, weights_user, bwd_weights_pd.diff_weights_desc()) {}

  void forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) {
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, mem(src_, b_.engine(), x.data)},
                                         {DNNL_ARG_WEIGHTS, fwd_weights_.in(weight.as<float>())},
                                         {DNNL_ARG_DST, mem(dst_, b_.engine(), y.data)}};
    if (bias != nullptr) args[DNNL_ARG_BIAS] = mem(bias_, b_.engine(), bias->as<float>());
    fwd_.execute(std::move(args));
  }

  void backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) {
    bwd_data_.execute({{DNNL_ARG_DIFF_DST, mem(dst_, b_.engine(), dy.data)},
                       {DNNL_ARG_WEIGHTS, bwd_data_weights_.in(weight.as<float>())},
                       {DNNL_ARG_DIFF_SRC, mem(src_, b_.engine(), dx.data)}});
  }

  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias) {
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, mem(src_, b_.engine(), x.data)},
                                         {DNNL_ARG_DIFF_DST, mem(dst_, b_.engine(), dy.data)},
                                         {DNNL_ARG_DIFF_WEIGHTS, diff_weights_.out(dweight.as<float>())}};
    if (dbias != nullptr) args[DNNL_ARG_DIFF_BIAS] = mem(bias_, b_.engine(), dbias->as<float>());
    bwd_weights_.execute(std::move(args));
    diff_weights_.finish(dweight.as<float>());
  }

  const std::string& implementation() const { return implementation_; }
  const std::string& backward_data_implementation() const { return backward_data_implementation_; }

 private:
  CpuBackend& b_;
  memory::desc src_, dst_, bias_;
  std::string implementation_, backward_data_implementation_;
  Primitive fwd_, bwd_data_, bwd_weights_;
  WeightFormat fwd_weights_, bwd_data_weights_, diff_weights_;
};

// Activations in the op's dtype; weights in it too inside the kernel (reordered from the fp32
// master copy each call), while weight and bias gradients come out in fp32 (oneDNN
// accumulates them in fp32 and writes them so, without a bf16 round trip).
ConvPrimitives make_conv_primitives(CpuBackend& backend, const Conv2dConfig& c) {
  const auto& engine = backend.engine();
  const memory::desc src = md_of(c.input, Layout::nhwc, c.dtype);
  const memory::desc dst = md_of(c.output(), Layout::nhwc, c.dtype);
  const memory::desc bias = c.bias ? md_of(Shape(c.out_channels), Layout::plain) : memory::desc();
  const memory::dims strides{c.stride, c.stride};
  const memory::dims padding{c.padding.h, c.padding.w};
  const memory::dims dilates{c.dilation - 1, c.dilation - 1};  // oneDNN counts the gaps: 0 is dense
  const auto algorithm = dnnl::algorithm::convolution_direct;
  const auto fwd_pd = DLBENCH_DNNL_CALL(dnnl::convolution_forward::primitive_desc(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algorithm, src, any_md(c.weight(), c.dtype),
                                      bias, dst, strides, dilates, padding, padding),
      user_scratchpad(), engine));
  const auto bwd_data_pd = DLBENCH_DNNL_CALL(dnnl::convolution_backward_data::primitive_desc(
      dnnl::convolution_backward_data::desc(algorithm, src, any_md(c.weight(), c.dtype), dst, strides, dilates, padding,
                                            padding),
      user_scratchpad(), engine, fwd_pd));
  const auto bwd_weights_pd = DLBENCH_DNNL_CALL(dnnl::convolution_backward_weights::primitive_desc(
      dnnl::convolution_backward_weights::desc(algorithm, src, any_md(c.weight()), bias, dst, strides, dilates,
                                               padding, padding),
      user_scratchpad(), engine, fwd_pd));
  return ConvPrimitives(backend, fwd_pd, bwd_data_pd, bwd_weights_pd, src, dst, md_of(c.weight(), Layout::plain), bias);
}

// A 1×1 convolution without padding, on NHWC data, is one matrix product over the output
// pixels: y[p, o] = Σ_i x[q(p), i] · w[o, i], where q(p) is the input pixel output pixel p
// reads (the same pixel at stride 1, every stride-th row and column otherwise). oneDNN 2.6's
// brgemm matmul runs these layers' three passes at least as fast as its 1×1 convolution
// kernels and writes the weight gradient straight into the OI layout the parameters keep,
// where the convolution's needs a reorder back (bench/RESULTS.md, 2026-11-25). fp32 on an AMD
// EPYC: ResNet-50 ~3% faster (the convolution's backward passes are jit_1x1 there, not
// brgemm). bf16 on that EPYC (AVX512_BF16): the same either way. bf16 with AMX (Intel Xeon):
// the stride-1 layers' three passes take 0.117 s a step as matmuls against 0.196 s as
// convolutions, the convolution's AMX backward kernels being 2-4 times slower than matmul's.
// A strided one gathers the pixels it reads into a dense matrix first and scatters their
// gradient back (zeros elsewhere), each a copy of rows of C values.
bool is_pointwise_matmul(const Conv2dConfig& c) {
  return c.kernel.h == 1 && c.kernel.w == 1 && c.padding.h == 0 && c.padding.w == 0 && !c.bias;
}

// The rows of an NHWC tensor that a stride-`stride` 1×1 convolution reads, as dense rows in
// output-pixel order; and back, where every input pixel is written: its gradient row if the
// convolution read it, zeros if not.
void gather_sampled_pixels(const std::byte* x, std::byte* sampled, const Shape& in, const Shape& out,
                           std::int64_t stride, std::size_t row_bytes) {
#pragma omp parallel for collapse(2) schedule(static)
  for (std::int64_t n = 0; n < out.n(); ++n) {
    for (std::int64_t i = 0; i < out.h(); ++i) {
      for (std::int64_t j = 0; j < out.w(); ++j) {
        const auto from = static_cast<std::size_t>((n * in.h() + stride * i) * in.w() + stride * j);
        const auto to = static_cast<std::size_t>((n * out.h() + i) * out.w() + j);
        std::memcpy(sampled + to * row_bytes, x + from * row_bytes, row_bytes);
      }
    }
  }
}

void scatter_sampled_pixels(const std::byte* sampled, std::byte* dx, const Shape& in, const Shape& out,
                            std::int64_t stride, std::size_t row_bytes) {
#pragma omp parallel for collapse(2) schedule(static)
  for (std::int64_t n = 0; n < in.n(); ++n) {
    for (std::int64_t h = 0; h < in.h(); ++h) {
      for (std::int64_t w = 0; w < in.w(); ++w) {
        std::byte* row = dx + static_cast<std::size_t>((n * in.h() + h) * in.w() + w) * row_bytes;
        if (h % stride == 0 && w % stride == 0) {
          const auto from = static_cast<std::size_t>((n * out.h() + h / stride) * out.w() + w / stride);
          std::memcpy(row, sampled + from * row_bytes, row_bytes);
        } else {
          std::memset(row, 0, row_bytes);
        }
      }
    }
  }
}

class CpuPointwiseConv final : public Conv2dOp {
 public:
  CpuPointwiseConv(CpuBackend& backend, const Conv2dConfig& c)
      : b_(backend), input_(c.input), output_(c.output()), stride_(c.stride),
        row_bytes_(static_cast<std::size_t>(c.input.c()) * dtype_size(c.dtype)),
        passes_(backend, output_.n() * output_.h() * output_.w(), c.input.c(), c.out_channels, c.dtype, false) {
    if (stride_ > 1) backend.reserve_activation_scratch(static_cast<std::size_t>(output_.numel() / c.out_channels) * row_bytes_);
  }

  void forward(const Tensor& x, const Tensor& weight, const Tensor* /*bias: none, see is_pointwise_matmul*/,
               Tensor& y) override {
    passes_.forward(read_pixels(x), weight.as<float>(), nullptr, y.data);
  }
  void backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) override {
    void* dense = stride_ > 1 ? b_.activation_scratch() : dx.data;
    passes_.backward_data(dy.data, weight.as<float>(), dense);
    if (stride_ > 1) {
      scatter_sampled_pixels(static_cast<const std::byte*>(dense), static_cast<std::byte*>(dx.data), input_, output_,
                             stride_, row_bytes_);
    }
  }
  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* /*dbias*/) override {
    passes_.backward_weights(read_pixels(x), dy.data, dweight.as<float>());
  }

 private:
  // The input pixels the matrix products read, as dense rows: x itself at stride 1, else those
  // pixels gathered into the activation scratch (valid until the op's next call).
  const void* read_pixels(const Tensor& x) {
    if (stride_ == 1) return x.data;
    void* sampled = b_.activation_scratch();
    gather_sampled_pixels(static_cast<const std::byte*>(x.data), static_cast<std::byte*>(sampled), input_, output_,
                          stride_, row_bytes_);
    return sampled;
  }

  CpuBackend& b_;
  Shape input_, output_;
  std::int64_t stride_;
  std::size_t row_bytes_;
  MatmulPasses passes_;
};

// The input gradient of a stride-1 convolution is a forward convolution of the output gradient:
// dx = dy ⋆ w̃ with w̃[i][o][a][b] = w[o][i][kh−1−a][kw−1−b] (input and output channels swapped,
// the kernel turned half a turn), padded by dilation·(k−1) − padding on each side
// (conv_backward_data.hpp says when and why).
class FlippedBackwardData {
 public:
  // The forward convolution's description, whose implementation the automatic rule reads.
  static dnnl::convolution_forward::primitive_desc describe(CpuBackend& backend, const Conv2dConfig& c) {
    const memory::dims padding{c.dilation * (c.kernel.h - 1) - c.padding.h, c.dilation * (c.kernel.w - 1) - c.padding.w};
    const memory::dims dilates{c.dilation - 1, c.dilation - 1};
    return DLBENCH_DNNL_CALL(dnnl::convolution_forward::primitive_desc(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                        md_of(c.output(), Layout::nhwc, c.dtype), any_md(flipped_shape(c), c.dtype),
                                        memory::desc(), md_of(c.input, Layout::nhwc, c.dtype), memory::dims{1, 1},
                                        dilates, padding, padding),
        user_scratchpad(), backend.engine()));
  }

  FlippedBackwardData(CpuBackend& backend, const Conv2dConfig& c, const dnnl::convolution_forward::primitive_desc& pd)
      : b_(backend),
        out_channels_(c.out_channels),
        in_channels_(c.input.c()),
        kh_(c.kernel.h),
        kw_(c.kernel.w),
        dy_(pd.src_desc()),
        dx_(pd.dst_desc()),
        weights_(backend, md_of(flipped_shape(c), Layout::plain), pd.weights_desc()),
        primitive_(backend, pd) {
    backend.reserve_weight_staging(static_cast<std::size_t>(flipped_shape(c).numel()) * sizeof(float));
  }

  void run(const Tensor& dy, const Tensor& weight, Tensor& dx) {
    auto* flipped = static_cast<float*>(b_.weight_staging());
    flip(weight.as<float>(), flipped);
    primitive_.execute({{DNNL_ARG_SRC, mem(dy_, b_.engine(), dy.data)},
                        {DNNL_ARG_WEIGHTS, weights_.in(flipped)},
                        {DNNL_ARG_DST, mem(dx_, b_.engine(), dx.data)}});
  }

 private:
  static Shape flipped_shape(const Conv2dConfig& c) { return {c.input.c(), c.out_channels, c.kernel.h, c.kernel.w}; }

  // w (O, I, kh, kw) into w̃ (I, O, kh, kw), each kernel turned half a turn. By tiles of 16 × 16
  // kernels, so that reads and writes both go along rows of 16 kernels rather than one of them
  // down a column whose kernels lie pages apart (VGG16's 512 × 512 layers: about 1 ms a call).
  void flip(const float* w, float* flipped) const {
    constexpr std::int64_t kTile = 16;
    const std::int64_t taps = kh_ * kw_;
#pragma omp parallel for collapse(2) schedule(static)
    for (std::int64_t i0 = 0; i0 < in_channels_; i0 += kTile) {
      for (std::int64_t o0 = 0; o0 < out_channels_; o0 += kTile) {
        const std::int64_t i_end = std::min(i0 + kTile, in_channels_), o_end = std::min(o0 + kTile, out_channels_);
        for (std::int64_t o = o0; o < o_end; ++o) {
          for (std::int64_t i = i0; i < i_end; ++i) {
            const float* from = w + (o * in_channels_ + i) * taps;
            float* to = flipped + (i * out_channels_ + o) * taps;
            for (std::int64_t t = 0; t < taps; ++t) to[t] = from[taps - 1 - t];
          }
        }
      }
    }
  }

  CpuBackend& b_;
  std::int64_t out_channels_, in_channels_, kh_, kw_;
  memory::desc dy_, dx_;
  WeightFormat weights_;
  Primitive primitive_;
};

// The flipped forward convolution for `c`'s input gradient where the backend's route takes it
// (conv_backward_data.hpp), given the backward-data primitive's implementation; nullopt where not.
std::optional<dnnl::convolution_forward::primitive_desc> flipped_route(CpuBackend& backend, const Conv2dConfig& c,
                                                                       const std::string& primitive) {
  if (!flippable(c) || backend.conv_backward_data() == ConvBackwardData::primitive) return std::nullopt;
  auto flipped = FlippedBackwardData::describe(backend, c);
  if (!flips_backward_data(c, backend.conv_backward_data(), {primitive, flipped.impl_info_str()})) return std::nullopt;
  return flipped;
}

// A convolution through its oneDNN primitives; its input gradient through the flipped forward
// convolution where conv_backward_data.hpp chooses it.
class CpuConv final : public Conv2dOp {
 public:
  CpuConv(CpuBackend& backend, const Conv2dConfig& c) : p_(make_conv_primitives(backend, c)) {
    if (const auto flipped = flipped_route(backend, c, p_.backward_data_implementation())) {
      flipped_.emplace(backend, c, *flipped);
    }
  }
  void forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) override { p_.forward(x, w, b, y); }
  void backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) override {
    if (flipped_) {
      flipped_->run(dy, w, dx);
    } else {
      p_.backward_data(dy, w, dx);
    }
  }
  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db) override {
    p_.backward_weights(x, dy, dw, db);
  }

 private:
  ConvPrimitives p_;
  std::optional<FlippedBackwardData> flipped_;
};

}  // namespace

bool CpuBackend::flips_input_gradient(const Conv2dConfig& c) {
  if (is_pointwise_matmul(c)) return false;
  return flipped_route(*this, c, make_conv_primitives(*this, c).backward_data_implementation()).has_value();
}

std::unique_ptr<Conv2dOp> CpuBackend::make_conv2d(const Conv2dConfig& c) {
  if (emulates(c.dtype)) return emulate_half(make_conv2d(in_fp32(c)), half_scratch_);
  if (is_pointwise_matmul(c)) return std::make_unique<CpuPointwiseConv>(*this, c);
  return std::make_unique<CpuConv>(*this, c);
}

}  // namespace dlbench::worker
