// The CPU backend: every layer on oneDNN primitives, created once per layer at setup.
// Activations are NHWC (oneDNN's JIT kernels handle it directly); parameters stay in the
// canonical plain layout (OIHW, OI) and are reordered into whatever weight format the chosen
// kernel wants, so that the optimizer and the tests see PyTorch's layout.
#include "cpu/cpu_backend.hpp"

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

#include "cpu/dnnl_check.hpp"
#include "cpu/onednn_memory.hpp"
#include "dropout_mask.hpp"

namespace dlbench::worker {
namespace {

using dnnl::memory;
using tag = dnnl::memory::format_tag;

memory::desc md_of(const Shape& shape, Layout layout, DType dtype = DType::fp32) {
  tag t = tag::undef;
  switch (shape.rank) {
    case 1: t = tag::a; break;
    case 2: t = tag::ab; break;
    case 4: t = layout == Layout::nhwc ? tag::nhwc : tag::nchw; break;  // plain 4-D is OIHW = nchw order
    default: throw std::invalid_argument("cpu backend: unsupported tensor rank " + std::to_string(shape.rank));
  }
  return memory::desc(dims_of(shape), dnnl_type(dtype), t);
}

memory::desc any_md(const Shape& shape, DType dtype = DType::fp32) {
  return memory::desc(dims_of(shape), dnnl_type(dtype), tag::any);
}

// Keeps a parameter in its canonical layout and gives a kernel the format it asked for:
// reorders user → kernel before use (weights) or kernel → user after (weight gradients).
// The kernel-format copy lives only during one call, so every layer uses the backend's one
// scratch buffer instead of keeping copies of its own (the model's weights, up to three times).
class WeightFormat {
 public:
  WeightFormat(CpuBackend& backend, const memory::desc& user, const memory::desc& kernel)
      : backend_(backend), user_(user), kernel_(kernel), needed_(user != kernel) {
    if (!needed_) return;
    backend_.reserve_weight_scratch(kernel.get_size());
    const memory a = mem(user, backend_.engine(), nullptr);
    const memory b = mem(kernel, backend_.engine(), nullptr);
    to_kernel_ = DLBENCH_DNNL_CALL(dnnl::reorder(a, b));
    to_user_ = DLBENCH_DNNL_CALL(dnnl::reorder(b, a));
  }

  // A kernel-format view of user-format weights, valid until the next use of the scratch.
  memory in(dnnl::stream& stream, const void* user_data) {
    if (!needed_) return mem(user_, backend_.engine(), user_data);
    memory user = mem(user_, backend_.engine(), user_data);
    memory kernel = mem(kernel_, backend_.engine(), backend_.weight_scratch());
    to_kernel_.execute(stream, user, kernel);
    return kernel;
  }
  // Where a kernel writes gradients; finish() moves them to user format.
  memory out(void* user_data) {
    return needed_ ? mem(kernel_, backend_.engine(), backend_.weight_scratch()) : mem(user_, backend_.engine(), user_data);
  }
  void finish(dnnl::stream& stream, void* user_data) {
    if (!needed_) return;
    memory kernel = mem(kernel_, backend_.engine(), backend_.weight_scratch());
    memory user = mem(user_, backend_.engine(), user_data);
    to_user_.execute(stream, kernel, user);
  }

 private:
  CpuBackend& backend_;
  memory::desc user_;
  memory::desc kernel_;
  bool needed_;
  dnnl::reorder to_kernel_;
  dnnl::reorder to_user_;
};

// The three primitives of a convolution: forward,
// backward-data and backward-weights, with the weights kept in the user's layout.
template <typename Forward, typename BackwardData, typename BackwardWeights>
class WeightedPrimitives {
 public:
  WeightedPrimitives(CpuBackend& backend, const typename Forward::primitive_desc& fwd_pd,
                     const typename BackwardData::primitive_desc& bwd_data_pd,
                     const typename BackwardWeights::primitive_desc& bwd_weights_pd, const memory::desc& src,
                     const memory::desc& dst, const memory::desc& weights_user, const memory::desc& bias)
      : b_(backend),
        src_(src),
        dst_(dst),
        bias_(bias),
        implementation_(fwd_pd.impl_info_str()),
        fwd_(fwd_pd),
        bwd_data_(bwd_data_pd),
        bwd_weights_(bwd_weights_pd),
        fwd_weights_(backend, weights_user, fwd_pd.weights_desc()),
        bwd_data_weights_(backend, weights_user, bwd_data_pd.weights_desc()),
        diff_weights_(backend, weights_user, bwd_weights_pd.diff_weights_desc()) {}

  void forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) {
    auto& s = b_.stream();
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, mem(src_, b_.engine(), x.data)},
                                         {DNNL_ARG_WEIGHTS, fwd_weights_.in(s, weight.as<float>())},
                                         {DNNL_ARG_DST, mem(dst_, b_.engine(), y.data)}};
    if (bias != nullptr) args[DNNL_ARG_BIAS] = mem(bias_, b_.engine(), bias->as<float>());
    fwd_.execute(s, args);
  }

  void backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) {
    auto& s = b_.stream();
    bwd_data_.execute(s, {{DNNL_ARG_DIFF_DST, mem(dst_, b_.engine(), dy.data)},
                          {DNNL_ARG_WEIGHTS, bwd_data_weights_.in(s, weight.as<float>())},
                          {DNNL_ARG_DIFF_SRC, mem(src_, b_.engine(), dx.data)}});
  }

  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias) {
    auto& s = b_.stream();
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, mem(src_, b_.engine(), x.data)},
                                         {DNNL_ARG_DIFF_DST, mem(dst_, b_.engine(), dy.data)},
                                         {DNNL_ARG_DIFF_WEIGHTS, diff_weights_.out(dweight.as<float>())}};
    if (dbias != nullptr) args[DNNL_ARG_DIFF_BIAS] = mem(bias_, b_.engine(), dbias->as<float>());
    bwd_weights_.execute(s, args);
    diff_weights_.finish(s, dweight.as<float>());
  }

  const std::string& implementation() const { return implementation_; }

 private:
  CpuBackend& b_;
  memory::desc src_, dst_, bias_;
  std::string implementation_;
  Forward fwd_;
  BackwardData bwd_data_;
  BackwardWeights bwd_weights_;
  WeightFormat fwd_weights_, bwd_data_weights_, diff_weights_;
};

using ConvPrimitives = WeightedPrimitives<dnnl::convolution_forward, dnnl::convolution_backward_data,
                                          dnnl::convolution_backward_weights>;

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
      engine));
  const auto bwd_data_pd = DLBENCH_DNNL_CALL(dnnl::convolution_backward_data::primitive_desc(
      dnnl::convolution_backward_data::desc(algorithm, src, any_md(c.weight(), c.dtype), dst, strides, dilates, padding,
                                            padding),
      engine, fwd_pd));
  const auto bwd_weights_pd = DLBENCH_DNNL_CALL(dnnl::convolution_backward_weights::primitive_desc(
      dnnl::convolution_backward_weights::desc(algorithm, src, any_md(c.weight()), bias, dst, strides, dilates,
                                               padding, padding),
      engine, fwd_pd));
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

// One layer's three matrix products on row-major data: y = x · wᵀ (+ bias), dx = dy · w and
// dw = dyᵀ · x, w in the parameters' [out, in] layout (the fp32 master, reordered to the kernels'
// dtype and format each call) and dw accumulated and written straight into it in fp32.
class MatmulPasses {
 public:
  // weight_gradient_only: just dw = dyᵀ · x (a layer whose other two passes run elsewhere).
  MatmulPasses(CpuBackend& backend, std::int64_t rows, std::int64_t in, std::int64_t out, DType dtype, bool bias,
               bool weight_gradient_only = false)
      : b_(backend) {
    const auto& engine = backend.engine();
    const auto data = dnnl_type(dtype), f32 = memory::data_type::f32;
    x_ = memory::desc({rows, in}, data, tag::ab);
    y_ = memory::desc({rows, out}, data, tag::ab);
    dy_transposed_ = memory::desc({out, rows}, data, tag::ba);
    dw_ = memory::desc({out, in}, f32, tag::ab);
    if (bias) bias_ = memory::desc({1, out}, f32, tag::ab);
    // dw = dyᵀ · x, accumulated and written in fp32.
    bwd_weights_ = dnnl::matmul(
        DLBENCH_DNNL_CALL(dnnl::matmul::primitive_desc(dnnl::matmul::desc(dy_transposed_, x_, dw_), engine)));
    if (weight_gradient_only) return;
    // y = x · wᵀ: the OI parameter read as an [in, out] matrix is its transpose, 'ba'.
    const auto fwd_pd = DLBENCH_DNNL_CALL(dnnl::matmul::primitive_desc(
        dnnl::matmul::desc(x_, memory::desc({in, out}, data, tag::any), bias_, y_), engine));
    // dx = dy · w.
    const auto bwd_data_pd = DLBENCH_DNNL_CALL(dnnl::matmul::primitive_desc(
        dnnl::matmul::desc(y_, memory::desc({out, in}, data, tag::any), x_), engine));
    fwd_ = dnnl::matmul(fwd_pd);
    bwd_data_ = dnnl::matmul(bwd_data_pd);
    fwd_weights_.emplace(backend, memory::desc({in, out}, f32, tag::ba), fwd_pd.weights_desc());
    bwd_data_weights_.emplace(backend, memory::desc({out, in}, f32, tag::ab), bwd_data_pd.weights_desc());
  }

  void forward(const void* x, const float* weight, const float* bias, void* y) {
    auto& s = b_.stream();
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, mem(x_, b_.engine(), x)},
                                         {DNNL_ARG_WEIGHTS, fwd_weights_->in(s, weight)},
                                         {DNNL_ARG_DST, mem(y_, b_.engine(), y)}};
    if (bias != nullptr) args[DNNL_ARG_BIAS] = mem(bias_, b_.engine(), bias);
    fwd_.execute(s, args);
  }
  void backward_data(const void* dy, const float* weight, void* dx) {
    auto& s = b_.stream();
    bwd_data_.execute(s, {{DNNL_ARG_SRC, mem(y_, b_.engine(), dy)},
                          {DNNL_ARG_WEIGHTS, bwd_data_weights_->in(s, weight)},
                          {DNNL_ARG_DST, mem(x_, b_.engine(), dx)}});
  }
  void backward_weights(const void* x, const void* dy, float* dweight) {
    bwd_weights_.execute(b_.stream(), {{DNNL_ARG_SRC, mem(dy_transposed_, b_.engine(), dy)},
                                       {DNNL_ARG_WEIGHTS, mem(x_, b_.engine(), x)},
                                       {DNNL_ARG_DST, mem(dw_, b_.engine(), dweight)}});
  }

 private:
  CpuBackend& b_;
  memory::desc x_, y_, dy_transposed_, dw_, bias_;
  dnnl::matmul fwd_, bwd_data_, bwd_weights_;
  std::optional<WeightFormat> fwd_weights_, bwd_data_weights_;
};

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

// Column sums of a row-major [rows, columns] matrix in fp32: a linear layer's bias gradient.
// Threads take blocks of columns and sum every row of them in order, so the result does not
// depend on the thread count.
template <typename T>
void column_sums(const T* dy, std::int64_t rows, std::int64_t columns, float* sums) {
  constexpr std::int64_t kBlock = 64;
  const std::int64_t blocks = (columns + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (std::int64_t block = 0; block < blocks; ++block) {
    const std::int64_t first = block * kBlock, count = std::min(kBlock, columns - first);
    float acc[kBlock] = {};
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* row = dy + r * columns + first;
#pragma omp simd
      for (std::int64_t j = 0; j < count; ++j) acc[j] += to_float(row[j]);
    }
    std::copy(acc, acc + count, sums + first);
  }
}

// oneDNN's inner product forward and backward-data passes, the weights reordered from the fp32
// master copy into the kernels' format each call.
class InnerProductPasses {
 public:
  InnerProductPasses(CpuBackend& backend, const LinearConfig& c)
      : b_(backend),
        src_(md_of(Shape(c.batch, c.in_features), Layout::plain, c.dtype)),
        dst_(md_of(Shape(c.batch, c.out_features), Layout::plain, c.dtype)),
        bias_(c.bias ? md_of(Shape(c.out_features), Layout::plain) : memory::desc()) {
    const Shape weight(c.out_features, c.in_features);
    const auto fwd_pd = DLBENCH_DNNL_CALL(dnnl::inner_product_forward::primitive_desc(
        dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_training, src_, any_md(weight, c.dtype), bias_,
                                          dst_),
        backend.engine()));
    const auto bwd_data_pd = DLBENCH_DNNL_CALL(dnnl::inner_product_backward_data::primitive_desc(
        dnnl::inner_product_backward_data::desc(src_, any_md(weight, c.dtype), dst_), backend.engine(), fwd_pd));
    fwd_ = dnnl::inner_product_forward(fwd_pd);
    bwd_data_ = dnnl::inner_product_backward_data(bwd_data_pd);
    fwd_weights_.emplace(backend, md_of(weight, Layout::plain), fwd_pd.weights_desc());
    bwd_data_weights_.emplace(backend, md_of(weight, Layout::plain), bwd_data_pd.weights_desc());
  }

  void forward(const void* x, const float* weight, const float* bias, void* y) {
    auto& s = b_.stream();
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, mem(src_, b_.engine(), x)},
                                         {DNNL_ARG_WEIGHTS, fwd_weights_->in(s, weight)},
                                         {DNNL_ARG_DST, mem(dst_, b_.engine(), y)}};
    if (bias != nullptr) args[DNNL_ARG_BIAS] = mem(bias_, b_.engine(), bias);
    fwd_.execute(s, args);
  }
  void backward_data(const void* dy, const float* weight, void* dx) {
    auto& s = b_.stream();
    bwd_data_.execute(s, {{DNNL_ARG_DIFF_DST, mem(dst_, b_.engine(), dy)},
                          {DNNL_ARG_WEIGHTS, bwd_data_weights_->in(s, weight)},
                          {DNNL_ARG_DIFF_SRC, mem(src_, b_.engine(), dx)}});
  }

 private:
  CpuBackend& b_;
  memory::desc src_, dst_, bias_;
  dnnl::inner_product_forward fwd_;
  dnnl::inner_product_backward_data bwd_data_;
  std::optional<WeightFormat> fwd_weights_, bwd_data_weights_;
};

// A linear layer. Its weight gradient is always matmul's dyᵀ · x, written straight into the
// fp32 parameter layout, and its bias gradient a column sum: oneDNN 2.6's inner product writes
// the weight gradient in a blocked format that needs a reorder back (62 ms a bf16 bert-base step
// with AMX), and in fp32 its kernel ran at about half its forward's rate (1.11 s a step against
// 0.60 s, Intel Xeon, 2 cores). fp32 runs forward and backward-data as matmuls too (bert-base
// +13%); bf16 keeps the inner product for them, because matmul's backward-data weights need a
// transposing reorder twice as slow as the inner product's (AlexNet bf16 4% slower as matmuls).
class CpuLinear final : public LinearOp {
 public:
  CpuLinear(CpuBackend& backend, const LinearConfig& c)
      : c_(c), matmul_(backend, c.batch, c.in_features, c.out_features, c.dtype, c.bias, c.dtype != DType::fp32) {
    if (c.dtype != DType::fp32) inner_product_.emplace(backend, c);
  }

  void forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) override {
    require_elements(x, c_.batch * c_.in_features, "linear", "x");
    require_elements(y, c_.batch * c_.out_features, "linear", "y");
    const float* b = bias == nullptr ? nullptr : bias->as<float>();
    if (inner_product_) {
      inner_product_->forward(x.data, weight.as<float>(), b, y.data);
    } else {
      matmul_.forward(x.data, weight.as<float>(), b, y.data);
    }
  }
  void backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) override {
    if (inner_product_) {
      inner_product_->backward_data(dy.data, weight.as<float>(), dx.data);
    } else {
      matmul_.backward_data(dy.data, weight.as<float>(), dx.data);
    }
  }
  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias) override {
    matmul_.backward_weights(x.data, dy.data, dweight.as<float>());
    if (dbias != nullptr) {
      with_element_type(dy.dtype, [&]<typename T>(T*) {
        column_sums(dy.as<T>(), c_.batch, c_.out_features, dbias->as<float>());
      });
    }
  }

 private:
  LinearConfig c_;
  MatmulPasses matmul_;
  std::optional<InnerProductPasses> inner_product_;
};

// A convolution through its three oneDNN primitives.
template <typename Interface, typename Primitives>
class CpuWeightedOp final : public Interface {
 public:
  explicit CpuWeightedOp(Primitives primitives) : p_(std::move(primitives)) {}
  void forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) override { p_.forward(x, w, b, y); }
  void backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) override { p_.backward_data(dy, w, dx); }
  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db) override {
    p_.backward_weights(x, dy, dw, db);
  }

 private:
  Primitives p_;
};

class CpuBatchNorm final : public BatchNormOp {
 public:
  CpuBatchNorm(CpuBackend& backend, const BatchNormConfig& c)
      : b_(backend), channels_(c.input.c()), momentum_(c.momentum), unbias_(unbias_factor(c.input)) {
    data_ = md_of(c.input, Layout::nhwc, c.dtype);
    channel_ = md_of(Shape(c.input.c()), Layout::plain);  // statistics, scale and shift: fp32
    auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
    // Fused, forward keeps a bit mask of where y > 0 and backward applies it to dy itself.
    if (c.relu) flags |= dnnl::normalization_flags::fuse_norm_relu;
    fwd_pd_ = DLBENCH_DNNL_CALL(dnnl::batch_normalization_forward::primitive_desc(
        dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_training, data_, c.epsilon, flags),
        b_.engine()));
    bwd_pd_ = DLBENCH_DNNL_CALL(dnnl::batch_normalization_backward::primitive_desc(
        dnnl::batch_normalization_backward::desc(dnnl::prop_kind::backward, data_, data_, c.epsilon, flags),
        b_.engine(), fwd_pd_));
    fwd_ = dnnl::batch_normalization_forward(fwd_pd_);
    bwd_ = dnnl::batch_normalization_backward(bwd_pd_);
    workspace_ = fwd_pd_.workspace_desc();
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
    fwd_.execute(b_.stream(), args);
    float* running_mean = statistics.running_mean.as<float>();
    float* running_var = statistics.running_var.as<float>();
    const float* m = mean.as<float>();
    const float* v = variance.as<float>();
    for (std::int64_t i = 0; i < channels_; ++i) {
      running_mean[i] = (1.0f - momentum_) * running_mean[i] + momentum_ * m[i];
      running_var[i] = (1.0f - momentum_) * running_var[i] + momentum_ * v[i] * unbias_;
    }
  }

  void backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const BatchNormStatistics& statistics,
                Tensor& dx, Tensor& dgamma, Tensor& dbeta, const void* workspace) override {
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
    bwd_.execute(b_.stream(), args);
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
  dnnl::batch_normalization_forward::primitive_desc fwd_pd_;
  dnnl::batch_normalization_backward::primitive_desc bwd_pd_;
  dnnl::batch_normalization_forward fwd_;
  dnnl::batch_normalization_backward bwd_;
};

class CpuRelu final : public ReluOp {
 public:
  CpuRelu(CpuBackend& backend, const Shape& shape, DType dtype) : b_(backend) {
    data_ = md_of(shape, shape.rank == 4 ? Layout::nhwc : Layout::plain, dtype);
    const auto algorithm = dnnl::algorithm::eltwise_relu_use_dst_for_bwd;  // allows y to overwrite x
    fwd_pd_ = DLBENCH_DNNL_CALL(dnnl::eltwise_forward::primitive_desc(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, algorithm, data_, 0.0f, 0.0f), b_.engine()));
    bwd_pd_ = DLBENCH_DNNL_CALL(dnnl::eltwise_backward::primitive_desc(
        dnnl::eltwise_backward::desc(algorithm, data_, data_, 0.0f, 0.0f), b_.engine(), fwd_pd_));
    fwd_ = dnnl::eltwise_forward(fwd_pd_);
    bwd_ = dnnl::eltwise_backward(bwd_pd_);
  }
  void forward(const Tensor& x, Tensor& y) override {
    fwd_.execute(b_.stream(), {{DNNL_ARG_SRC, mem(data_, b_.engine(), x.data)}, {DNNL_ARG_DST, mem(data_, b_.engine(), y.data)}});
  }
  void backward(const Tensor& y, const Tensor& dy, Tensor& dx) override {
    const auto& e = b_.engine();
    bwd_.execute(b_.stream(), {{DNNL_ARG_DST, mem(data_, e, y.data)},
                               {DNNL_ARG_DIFF_DST, mem(data_, e, dy.data)},
                               {DNNL_ARG_DIFF_SRC, mem(data_, e, dx.data)}});
  }

 private:
  CpuBackend& b_;
  memory::desc data_;
  dnnl::eltwise_forward::primitive_desc fwd_pd_;
  dnnl::eltwise_backward::primitive_desc bwd_pd_;
  dnnl::eltwise_forward fwd_;
  dnnl::eltwise_backward bwd_;
};

class CpuReorder final : public ReorderOp {
 public:
  CpuReorder(CpuBackend& backend, const Shape& shape, DType dtype, Layout from, Layout to)
      : b_(backend), from_(md_of(shape, from, dtype)), to_(md_of(shape, to, dtype)) {
    reorder_ = DLBENCH_DNNL_CALL(dnnl::reorder(mem(from_, b_.engine(), nullptr), mem(to_, b_.engine(), nullptr)));
  }
  void run(const Tensor& x, Tensor& y) override {
    reorder_.execute(b_.stream(), {{DNNL_ARG_FROM, mem(from_, b_.engine(), x.data)},
                                   {DNNL_ARG_TO, mem(to_, b_.engine(), y.data)}});
  }

 private:
  CpuBackend& b_;
  memory::desc from_, to_;
  dnnl::reorder reorder_;
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
    const auto& e = b_.engine();
    insert_ = DLBENCH_DNNL_CALL(dnnl::reorder(mem(part_, e, nullptr), mem(slice_, e, nullptr)));
    extract_ = DLBENCH_DNNL_CALL(dnnl::reorder(mem(slice_, e, nullptr), mem(part_, e, nullptr)));
  }
  // The slice's memory is the whole's buffer; the sub-memory descriptor carries the offset.
  void insert(const Tensor& part, Tensor& whole) override {
    insert_.execute(b_.stream(), {{DNNL_ARG_FROM, mem(part_, b_.engine(), part.data)},
                                  {DNNL_ARG_TO, mem(slice_, b_.engine(), whole.data)}});
  }
  void extract(const Tensor& whole, Tensor& part) override {
    extract_.execute(b_.stream(), {{DNNL_ARG_FROM, mem(slice_, b_.engine(), whole.data)},
                                   {DNNL_ARG_TO, mem(part_, b_.engine(), part.data)}});
  }

 private:
  CpuBackend& b_;
  memory::desc part_, whole_, slice_;
  dnnl::reorder insert_, extract_;
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
    fwd_pd_ = DLBENCH_DNNL_CALL(dnnl::pooling_forward::primitive_desc(
        dnnl::pooling_forward::desc(dnnl::prop_kind::forward_training, algorithm, src_, dst_, strides, kernel, padding,
                                    padding),
        b_.engine()));
    bwd_pd_ = DLBENCH_DNNL_CALL(dnnl::pooling_backward::primitive_desc(
        dnnl::pooling_backward::desc(algorithm, src_, dst_, strides, kernel, padding, padding), b_.engine(), fwd_pd_));
    fwd_ = dnnl::pooling_forward(fwd_pd_);
    bwd_ = dnnl::pooling_backward(bwd_pd_);
    workspace_ = fwd_pd_.workspace_desc();
  }
  std::size_t workspace_bytes() const override { return workspace_.get_size(); }
  bool backward_reads_activations() const override { return false; }
  void forward(const Tensor& x, Tensor& y, void* workspace) override {
    const auto& e = b_.engine();
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, mem(src_, e, x.data)}, {DNNL_ARG_DST, mem(dst_, e, y.data)}};
    if (workspace_bytes() > 0) args[DNNL_ARG_WORKSPACE] = mem(workspace_, e, workspace);
    fwd_.execute(b_.stream(), args);
  }
  void backward(const Tensor&, const Tensor&, const Tensor& dy, const void* workspace, Tensor& dx) override {
    const auto& e = b_.engine();
    std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, mem(dst_, e, dy.data)},
                                         {DNNL_ARG_DIFF_SRC, mem(src_, e, dx.data)}};
    if (workspace_bytes() > 0) args[DNNL_ARG_WORKSPACE] = mem(workspace_, e, workspace);
    bwd_.execute(b_.stream(), args);
  }

 private:
  CpuBackend& b_;
  memory::desc src_, dst_, workspace_;
  dnnl::pooling_forward::primitive_desc fwd_pd_;
  dnnl::pooling_backward::primitive_desc bwd_pd_;
  dnnl::pooling_forward fwd_;
  dnnl::pooling_backward bwd_;
};

// oneDNN's linear resampling: the source coordinate (i + 0.5) · in/out - 0.5 with edge
// clamping, which is PyTorch's bilinear rule with align_corners=False.
class CpuResize final : public ResizeOp {
 public:
  CpuResize(CpuBackend& backend, const ResizeConfig& c)
      : b_(backend), src_(md_of(c.input, Layout::nhwc, c.dtype)), dst_(md_of(c.output_shape(), Layout::nhwc, c.dtype)) {
    const auto algorithm = dnnl::algorithm::resampling_linear;
    fwd_pd_ = DLBENCH_DNNL_CALL(dnnl::resampling_forward::primitive_desc(
        dnnl::resampling_forward::desc(dnnl::prop_kind::forward_training, algorithm, src_, dst_), b_.engine()));
    bwd_pd_ = DLBENCH_DNNL_CALL(dnnl::resampling_backward::primitive_desc(
        dnnl::resampling_backward::desc(algorithm, src_, dst_), b_.engine(), fwd_pd_));
    fwd_ = dnnl::resampling_forward(fwd_pd_);
    bwd_ = dnnl::resampling_backward(bwd_pd_);
  }
  void forward(const Tensor& x, Tensor& y) override {
    const auto& e = b_.engine();
    fwd_.execute(b_.stream(), {{DNNL_ARG_SRC, mem(src_, e, x.data)}, {DNNL_ARG_DST, mem(dst_, e, y.data)}});
  }
  void backward(const Tensor& dy, Tensor& dx) override {
    const auto& e = b_.engine();
    bwd_.execute(b_.stream(), {{DNNL_ARG_DIFF_DST, mem(dst_, e, dy.data)}, {DNNL_ARG_DIFF_SRC, mem(src_, e, dx.data)}});
  }

 private:
  CpuBackend& b_;
  memory::desc src_, dst_;
  dnnl::resampling_forward::primitive_desc fwd_pd_;
  dnnl::resampling_backward::primitive_desc bwd_pd_;
  dnnl::resampling_forward fwd_;
  dnnl::resampling_backward bwd_;
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
    pd_ = DLBENCH_DNNL_CALL(dnnl::binary::primitive_desc(
        dnnl::binary::desc(dnnl::algorithm::binary_add, data_, data_, data_), attr, b_.engine()));
    add_ = dnnl::binary(pd_);
  }
  void forward(const Tensor& a, const Tensor& b, Tensor& y) override {
    const auto& e = b_.engine();
    add_.execute(b_.stream(),
                 {{DNNL_ARG_SRC_0, mem(data_, e, a.data)}, {DNNL_ARG_SRC_1, mem(data_, e, b.data)}, {DNNL_ARG_DST, mem(data_, e, y.data)}});
  }

 private:
  CpuBackend& b_;
  memory::desc data_;
  dnnl::binary::primitive_desc pd_;
  dnnl::binary add_;
};

std::string isa_name(dnnl::cpu_isa isa) {
  using dnnl::cpu_isa;
  switch (isa) {
    case cpu_isa::sse41: return "sse41";
    case cpu_isa::avx: return "avx";
    case cpu_isa::avx2: return "avx2";
    case cpu_isa::avx2_vnni: return "avx2_vnni";
    case cpu_isa::avx512_mic: return "avx512_mic";
    case cpu_isa::avx512_mic_4ops: return "avx512_mic_4ops";
    case cpu_isa::avx512_core: return "avx512_core";
    case cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "isa " + std::to_string(static_cast<unsigned>(isa));
  }
}

}  // namespace

CpuBackend::CpuBackend(int threads) : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
  if (threads > 0) omp_set_num_threads(threads);
}

CpuBackend::~CpuBackend() = default;

std::string CpuBackend::version_info() const {
  const dnnl_version_t* v = dnnl_version();
  return "onednn=" + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

std::optional<std::string> CpuBackend::cannot_compute(DType dtype) const {
  switch (dtype) {
    case DType::fp32: return std::nullopt;
    case DType::bf16: {
      // Without AVX512_BF16 oneDNN would emulate bf16 arithmetic, slower than fp32: that is
      // not a bf16 measurement.
      const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
      const auto needed = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
      if ((isa & needed) == needed) return std::nullopt;
      return "bf16 on the cpu backend needs oneDNN's avx512_core_bf16 ISA (the AVX512_BF16 instructions: Intel "
             "Cooper Lake, Sapphire Rapids and later, AMD Zen 4 and later), which this CPU does not have (oneDNN "
             "runs " + isa_name(dnnl::get_effective_cpu_isa()) + " here)";
    }
    case DType::int32: return "int32 holds indices; the cpu backend computes in fp32 or bf16";
    case DType::fp16:
      return "fp16 (amp) has no training kernels for x86 CPUs in oneDNN " + std::to_string(dnnl_version()->major) + "." +
             std::to_string(dnnl_version()->minor);
  }
  return "unknown dtype";
}

int CpuBackend::threads() const { return omp_get_max_threads(); }

std::shared_ptr<void> CpuBackend::allocate(std::size_t bytes) {
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return std::shared_ptr<void>(p, std::free);
}

void CpuBackend::copy_from_host(void* device_dst, const void* host_src, std::size_t bytes) {
  std::memcpy(device_dst, host_src, bytes);
}

void CpuBackend::copy_to_host(void* host_dst, const void* device_src, std::size_t bytes) {
  std::memcpy(host_dst, device_src, bytes);
}

void CpuBackend::poison(void* device_dst, std::size_t bytes) { std::memset(device_dst, 0xFF, bytes); }

void CpuBackend::synchronize() { stream_.wait(); }

std::unique_ptr<Conv2dOp> CpuBackend::make_conv2d(const Conv2dConfig& c) {
  if (is_pointwise_matmul(c)) return std::make_unique<CpuPointwiseConv>(*this, c);
  return std::make_unique<CpuWeightedOp<Conv2dOp, ConvPrimitives>>(make_conv_primitives(*this, c));
}
std::unique_ptr<BatchNormOp> CpuBackend::make_batch_norm(const BatchNormConfig& c) {
  return std::make_unique<CpuBatchNorm>(*this, c);
}
std::unique_ptr<ReluOp> CpuBackend::make_relu(const Shape& shape, DType dtype) {
  return std::make_unique<CpuRelu>(*this, shape, dtype);
}
std::unique_ptr<PoolOp> CpuBackend::make_pool(const PoolConfig& c) { return std::make_unique<CpuPool>(*this, c); }
std::unique_ptr<LinearOp> CpuBackend::make_linear(const LinearConfig& c) { return std::make_unique<CpuLinear>(*this, c); }
std::unique_ptr<AddOp> CpuBackend::make_add(const Shape& shape, DType dtype) {
  return std::make_unique<CpuAdd>(*this, shape, dtype, false);
}
std::unique_ptr<AddOp> CpuBackend::make_add_relu(const Shape& shape, DType dtype) {
  return std::make_unique<CpuAdd>(*this, shape, dtype, true);
}
std::unique_ptr<ReorderOp> CpuBackend::make_reorder(const Shape& shape, DType dtype, Layout from, Layout to) {
  return std::make_unique<CpuReorder>(*this, shape, dtype, from, to);
}
std::unique_ptr<ChannelSliceOp> CpuBackend::make_channel_slice(const Shape& part, std::int64_t whole_channels,
                                                               std::int64_t offset, DType dtype) {
  if (offset < 0 || offset + part.c() > whole_channels) {
    throw std::invalid_argument("channel slice [" + std::to_string(offset) + ", " + std::to_string(offset + part.c()) +
                                ") is outside " + std::to_string(whole_channels) + " channels");
  }
  return std::make_unique<CpuChannelSlice>(*this, part, whole_channels, offset, dtype);
}
std::unique_ptr<ResizeOp> CpuBackend::make_bilinear_resize(const ResizeConfig& config) {
  return std::make_unique<CpuResize>(*this, config);
}

bool CpuBackend::unscale_and_check_finite(float* grads, std::int64_t count, float inverse_scale) {
  int non_finite = 0;
#pragma omp parallel for simd schedule(static) reduction(| : non_finite)
  for (std::int64_t i = 0; i < count; ++i) {
    grads[i] *= inverse_scale;
    non_finite |= !std::isfinite(grads[i]);
  }
  return non_finite == 0;
}

namespace {

// PyTorch's adaptive pooling windows: [floor(i·in/out), ceil((i+1)·in/out)).
template <typename T>
void adaptive_avg_pool_forward_nhwc(const Tensor& x, Tensor& y) {
  const std::int64_t n = x.shape.n(), c = x.shape.c(), ih = x.shape.h(), iw = x.shape.w();
  const std::int64_t oh = y.shape.h(), ow = y.shape.w();
  const T* src = x.as<T>();
  T* dst = y.as<T>();
#pragma omp parallel for collapse(2) schedule(static)
  for (std::int64_t b = 0; b < n; ++b) {
    for (std::int64_t i = 0; i < oh; ++i) {
      std::vector<float> sum(static_cast<std::size_t>(c));
      const std::int64_t h0 = i * ih / oh, h1 = ((i + 1) * ih + oh - 1) / oh;
      for (std::int64_t j = 0; j < ow; ++j) {
        const std::int64_t w0 = j * iw / ow, w1 = ((j + 1) * iw + ow - 1) / ow;
        const float scale = 1.0f / static_cast<float>((h1 - h0) * (w1 - w0));
        std::fill(sum.begin(), sum.end(), 0.0f);
        for (std::int64_t h = h0; h < h1; ++h) {
          for (std::int64_t w = w0; w < w1; ++w) {
            const T* in = src + ((b * ih + h) * iw + w) * c;
            for (std::int64_t ch = 0; ch < c; ++ch) sum[static_cast<std::size_t>(ch)] += to_float(in[ch]);
          }
        }
        T* out = dst + ((b * oh + i) * ow + j) * c;
        for (std::int64_t ch = 0; ch < c; ++ch) out[ch] = from_float<T>(sum[static_cast<std::size_t>(ch)] * scale);
      }
    }
  }
}

template <typename T>
void adaptive_avg_pool_backward_nhwc(const Tensor& dy, Tensor& dx) {
  const std::int64_t n = dx.shape.n(), c = dx.shape.c(), ih = dx.shape.h(), iw = dx.shape.w();
  const std::int64_t oh = dy.shape.h(), ow = dy.shape.w();
  const T* grad = dy.as<T>();
  T* out = dx.as<T>();
#pragma omp parallel for schedule(static)
  for (std::int64_t b = 0; b < n; ++b) {
    // Windows may overlap: sum in fp32, round once.
    std::vector<float> sum(static_cast<std::size_t>(ih * iw * c), 0.0f);
    for (std::int64_t i = 0; i < oh; ++i) {
      const std::int64_t h0 = i * ih / oh, h1 = ((i + 1) * ih + oh - 1) / oh;
      for (std::int64_t j = 0; j < ow; ++j) {
        const std::int64_t w0 = j * iw / ow, w1 = ((j + 1) * iw + ow - 1) / ow;
        const float scale = 1.0f / static_cast<float>((h1 - h0) * (w1 - w0));
        const T* g = grad + ((b * oh + i) * ow + j) * c;
        for (std::int64_t h = h0; h < h1; ++h) {
          for (std::int64_t w = w0; w < w1; ++w) {
            float* acc = sum.data() + (h * iw + w) * c;
            for (std::int64_t ch = 0; ch < c; ++ch) acc[ch] += to_float(g[ch]) * scale;
          }
        }
      }
    }
    T* dst = out + b * ih * iw * c;
    for (std::size_t k = 0; k < sum.size(); ++k) dst[k] = from_float<T>(sum[k]);
  }
}

// y = x · mask for dropout's mask, hashed again for every pass (x null: y = mask), over one
// chunk of at most 2^32 elements inside one 2^32-element block, so that the loop runs over 32-bit
// indices, which the compiler vectorises. The chunk functions are cloned for AVX-512 and AVX2
// (the build targets generic x86-64); the OpenMP loop around them stays outside the clones,
// because its outlined body would not inherit their target.
template <typename T>
[[gnu::always_inline]] inline void dropout_chunk(const T* x, T* y, std::uint32_t count, DropoutKey key,
                                                 std::uint32_t block, std::uint32_t first, std::uint32_t threshold,
                                                 float keep_scale) {
  if (x == nullptr) {
#pragma omp simd
    for (std::uint32_t j = 0; j < count; ++j) {
      y[j] = from_float<T>(dropout_hash(key, block, first + j) >= threshold ? keep_scale : 0.0f);
    }
    return;
  }
#pragma omp simd
  for (std::uint32_t j = 0; j < count; ++j) {
    const float m = dropout_hash(key, block, first + j) >= threshold ? keep_scale : 0.0f;
    y[j] = from_float<T>(to_float(x[j]) * m);
  }
}

[[gnu::target_clones("avx512f", "avx2", "default")]] void dropout_chunk_fp32(const float* x, float* y,
                                                                              std::uint32_t count, DropoutKey key,
                                                                              std::uint32_t block, std::uint32_t first,
                                                                              std::uint32_t threshold, float keep_scale) {
  dropout_chunk(x, y, count, key, block, first, threshold, keep_scale);
}

[[gnu::target_clones("avx512f", "avx2", "default")]] void dropout_chunk_bf16(const bf16* x, bf16* y,
                                                                              std::uint32_t count, DropoutKey key,
                                                                              std::uint32_t block, std::uint32_t first,
                                                                              std::uint32_t threshold, float keep_scale) {
  dropout_chunk(x, y, count, key, block, first, threshold, keep_scale);
}

template <typename T>
void dropout_chunk_any(const T* x, T* y, std::uint32_t count, DropoutKey key, std::uint32_t block, std::uint32_t first,
                       std::uint32_t threshold, float keep_scale) {
  if constexpr (std::is_same_v<T, float>) {
    dropout_chunk_fp32(x, y, count, key, block, first, threshold, keep_scale);
  } else if constexpr (std::is_same_v<T, bf16>) {
    dropout_chunk_bf16(x, y, count, key, block, first, threshold, keep_scale);
  } else {
    dropout_chunk(x, y, count, key, block, first, threshold, keep_scale);
  }
}

// Chunks of 2^14 elements: a few per core per 2^20, and never across a 2^32 block.
constexpr std::int64_t kDropoutChunk = std::int64_t{1} << 14;

template <typename T>
void dropout_apply(const T* x, T* y, std::int64_t n, DropoutKey key, std::uint32_t threshold, float keep_scale) {
  const std::int64_t chunks = (n + kDropoutChunk - 1) / kDropoutChunk;
#pragma omp parallel for schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t begin = c * kDropoutChunk;
    dropout_chunk_any(x == nullptr ? nullptr : x + begin, y + begin,
                      static_cast<std::uint32_t>(std::min(kDropoutChunk, n - begin)), key,
                      static_cast<std::uint32_t>(begin >> 32), static_cast<std::uint32_t>(begin), threshold, keep_scale);
  }
}

void dropout_apply(const Tensor* x, Tensor& y, float p, DropoutKey key) {
  if (x != nullptr && x->numel() != y.numel()) {
    throw std::invalid_argument("dropout: input of " + std::to_string(x->numel()) + " elements, output of " +
                                std::to_string(y.numel()));
  }
  if (x != nullptr && x->dtype != y.dtype) throw std::invalid_argument("dropout: input and output dtypes differ");
  with_element_type(y.dtype, [&]<typename T>(T*) {
    dropout_apply(x == nullptr ? nullptr : x->as<T>(), y.as<T>(), y.numel(), key, dropout_threshold(p),
                  1.0f / (1.0f - p));
  });
}

// Computed in fp64 from the logits as stored (as autocast does: cross-entropy runs in fp32).
// Rows are samples of (N, classes) logits or pixels of NHWC (N, classes, H, W) ones: either way
// a row's classes are contiguous, and rows are in the labels' order.
template <typename T>
float softmax_cross_entropy_typed(const Tensor& logits, const std::int32_t* labels, Tensor& dlogits,
                                  float gradient_scale) {
  const bool per_pixel = logits.shape.rank == 4;
  const std::int64_t k = logits.shape.c(), rows = logits.numel() / k;
  const T* all_z = logits.as<T>();
  T* all_g = dlogits.as<T>();
  std::int64_t counted = rows;
  if (per_pixel) {
    counted = 0;
#pragma omp parallel for reduction(+ : counted) schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) counted += labels[r] != kIgnoreLabel ? 1 : 0;
  }
  const double divisor = static_cast<double>(std::max<std::int64_t>(counted, 1));
  double loss = 0.0;
#pragma omp parallel for reduction(+ : loss) schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* z = all_z + r * k;
    T* g = all_g + r * k;
    const std::int32_t label = labels[r];
    if (per_pixel && label == kIgnoreLabel) {
      for (std::int64_t j = 0; j < k; ++j) g[j] = from_float<T>(0.0f);
      continue;
    }
    float zmax = -std::numeric_limits<float>::infinity();
    for (std::int64_t j = 0; j < k; ++j) zmax = std::max(zmax, to_float(z[j]));
    double sum = 0.0;
    for (std::int64_t j = 0; j < k; ++j) sum += std::exp(static_cast<double>(to_float(z[j]) - zmax));
    const double log_sum = std::log(sum);
    loss += log_sum - static_cast<double>(to_float(z[label]) - zmax);
    for (std::int64_t j = 0; j < k; ++j) {
      const double prob = std::exp(static_cast<double>(to_float(z[j]) - zmax) - log_sum);
      const double grad = (prob - (j == label ? 1.0 : 0.0)) / divisor;
      g[j] = from_float<T>(static_cast<float>(grad * static_cast<double>(gradient_scale)));
    }
  }
  return static_cast<float>(loss / divisor);
}

}  // namespace

void CpuBackend::adaptive_avg_pool_forward(const Tensor& x, Tensor& y) {
  with_element_type(x.dtype, [&]<typename T>(T*) { adaptive_avg_pool_forward_nhwc<T>(x, y); });
}

void CpuBackend::adaptive_avg_pool_backward(const Tensor& dy, Tensor& dx) {
  with_element_type(dy.dtype, [&]<typename T>(T*) { adaptive_avg_pool_backward_nhwc<T>(dy, dx); });
}

void CpuBackend::dropout_forward(const Tensor& x, Tensor& y, float p, std::uint64_t layer_seed) {
  dropout_apply(&x, y, p, dropout_key(layer_seed, step_));
}

void CpuBackend::dropout_backward(const Tensor& dy, Tensor& dx, float p, std::uint64_t layer_seed) {
  dropout_apply(&dy, dx, p, dropout_key(layer_seed, step_));
}

void CpuBackend::dropout_mask(Tensor& mask, float p, std::uint64_t layer_seed) {
  dropout_apply(nullptr, mask, p, dropout_key(layer_seed, step_));
}

void CpuBackend::softmax_cross_entropy(const Tensor& logits, const std::int32_t* labels, Tensor& dlogits,
                                        float gradient_scale, LossTerm term) {
  float loss = 0;
  with_element_type(logits.dtype, [&]<typename T>(T*) {
    loss = softmax_cross_entropy_typed<T>(logits, labels, dlogits, gradient_scale * term.weight);
  });
  const double weighted = static_cast<double>(term.weight) * static_cast<double>(loss);
  step_loss_ = term.adds_to_step_loss ? step_loss_ + weighted : weighted;
}

void CpuBackend::sgd_update(float* values, const float* grads, float* momentum_buffer, std::int64_t count,
                            float learning_rate, float momentum, float weight_decay, bool first_step) {
  float* __restrict w = values;
  const float* __restrict g = grads;
  float* __restrict buf = momentum_buffer;
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < count; ++i) {
    const float d = g[i] + weight_decay * w[i];
    buf[i] = first_step ? d : momentum * buf[i] + d;
    w[i] -= learning_rate * buf[i];
  }
}

}  // namespace dlbench::worker
