// The CPU backend runs a convolution by one of two routes: oneDNN's convolution primitives,
// or, for a 1×1 unpadded bias-free layer, three matrix products over the batch's pixels; and a
// linear layer as matrix products (fp32) or oneDNN's inner product (bf16). A gradient check cannot tell a wrong route that is consistent with itself (say,
// the weight read transposed in forward and backward alike), so each route is held here to
// the convolution's definition, written out in loops: forward, input gradient, weight and
// bias gradients, in fp32 and, where the CPU has it, bf16.
#include <cmath>
#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cpu/conv_backward_data.hpp"
#include "cpu/cpu_backend.hpp"
#include "self_test.hpp"
#include "tensor.hpp"

namespace dlbench::worker {
namespace {

struct Reference {
  std::vector<double> y, dx, dw, db;
};

// NHWC activations, OIHW weights, as the CPU backend keeps them.
Reference convolve_by_definition(const Conv2dConfig& c, const std::vector<float>& x, const std::vector<float>& w,
                                 const std::vector<float>& b, const std::vector<float>& dy) {
  const Shape in = c.input, out = c.output();
  const std::int64_t kh = c.kernel.h, kw = c.kernel.w;
  const auto x_at = [&](std::int64_t n, std::int64_t h, std::int64_t v, std::int64_t ch) {
    return ((n * in.h() + h) * in.w() + v) * in.c() + ch;
  };
  const auto y_at = [&](std::int64_t n, std::int64_t h, std::int64_t v, std::int64_t o) {
    return ((n * out.h() + h) * out.w() + v) * out.c() + o;
  };
  const auto w_at = [&](std::int64_t o, std::int64_t ch, std::int64_t i, std::int64_t j) {
    return ((o * in.c() + ch) * kh + i) * kw + j;
  };
  Reference r{std::vector<double>(static_cast<std::size_t>(out.numel())),
              std::vector<double>(x.size()), std::vector<double>(w.size()),
              std::vector<double>(static_cast<std::size_t>(c.out_channels))};
  for (std::int64_t n = 0; n < out.n(); ++n)
    for (std::int64_t oh = 0; oh < out.h(); ++oh)
      for (std::int64_t ow = 0; ow < out.w(); ++ow)
        for (std::int64_t o = 0; o < out.c(); ++o) {
          const auto yi = static_cast<std::size_t>(y_at(n, oh, ow, o));
          double sum = c.bias ? static_cast<double>(b[static_cast<std::size_t>(o)]) : 0.0;
          const double g = dy[yi];
          r.db[static_cast<std::size_t>(o)] += g;
          for (std::int64_t i = 0; i < kh; ++i)
            for (std::int64_t j = 0; j < kw; ++j) {
              const std::int64_t h = oh * c.stride - c.padding.h + i * c.dilation;
              const std::int64_t v = ow * c.stride - c.padding.w + j * c.dilation;
              if (h < 0 || h >= in.h() || v < 0 || v >= in.w()) continue;
              for (std::int64_t ch = 0; ch < in.c(); ++ch) {
                const auto xi = static_cast<std::size_t>(x_at(n, h, v, ch));
                const auto wi = static_cast<std::size_t>(w_at(o, ch, i, j));
                const double xv = x[xi], wv = w[wi];
                sum += xv * wv;
                r.dx[xi] += g * wv;
                r.dw[wi] += g * xv;
              }
            }
          r.y[yi] = sum;
        }
  return r;
}

std::vector<float> draws(std::size_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(count);
  for (float& e : v) e = normal(rng);
  return v;
}

std::vector<float> as_floats(const std::vector<double>& v) { return {v.begin(), v.end()}; }

// Runs the backend's op for `c` and compares every output with the definition evaluated on
// the values the op really saw (inputs rounded to the dtype). Outputs in the dtype carry one
// rounding (bf16: u = 2^-9); fp32 sums and the fp32 weight gradients only summation error.
// linear: the backend's linear op for the same numbers (a 1×1 convolution of an (N, C, 1, 1)
// input is a linear layer over N rows: the same memory, row-major).
void expect_matches_definition(const Conv2dConfig& c, const std::string& what, bool linear = false,
                               ConvBackwardData input_gradient = ConvBackwardData::automatic) {
  CpuBackend backend(2);
  backend.set_conv_backward_data(input_gradient);
  if (const auto why = backend.cannot_compute(c.dtype)) GTEST_SKIP() << *why;
  std::mt19937 rng(5);
  const Shape out = c.output();
  const auto round = [&](const std::vector<float>& v) { return rounded_to(v, c.dtype); };
  const std::vector<float> x = round(draws(static_cast<std::size_t>(c.input.numel()), rng));
  const std::vector<float> dy = round(draws(static_cast<std::size_t>(out.numel()), rng));
  // The fp32 master weights, drawn exact in the dtype: the op's own rounding keeps them as they are.
  std::vector<float> w = round(draws(static_cast<std::size_t>(c.weight().numel()), rng));
  std::vector<float> b = draws(static_cast<std::size_t>(c.out_channels), rng);
  const Reference r = convolve_by_definition(c, x, w, b, dy);

  auto x_bytes = encode(x.data(), x.size(), c.dtype), dy_bytes = encode(dy.data(), dy.size(), c.dtype);
  // Outputs start as NaN (all bits set, in fp32 and bf16): an element the op does not write fails.
  std::vector<std::byte> y_bytes(static_cast<std::size_t>(out.numel()) * dtype_size(c.dtype), std::byte{0xFF});
  std::vector<std::byte> dx_bytes(x_bytes.size(), std::byte{0xFF});
  std::vector<float> dw(w.size()), db(b.size());
  const Tensor tx{x_bytes.data(), c.input, Layout::nhwc, c.dtype}, tdy{dy_bytes.data(), out, Layout::nhwc, c.dtype};
  Tensor ty{y_bytes.data(), out, Layout::nhwc, c.dtype}, tdx{dx_bytes.data(), c.input, Layout::nhwc, c.dtype};
  const Tensor tw{w.data(), c.weight(), Layout::plain, DType::fp32};
  const Tensor tb{b.data(), Shape(c.out_channels), Layout::plain, DType::fp32};
  Tensor tdw{dw.data(), c.weight(), Layout::plain, DType::fp32};
  Tensor tdb{db.data(), Shape(c.out_channels), Layout::plain, DType::fp32};

  const auto run = [&](auto op) {
    op->forward(tx, tw, c.bias ? &tb : nullptr, ty);
    op->backward_data(tdy, tw, tdx);
    op->backward_weights(tx, tdy, tdw, c.bias ? &tdb : nullptr);
    backend.synchronize();
  };
  if (linear) {
    run(backend.make_linear({c.input.n(), c.input.c(), c.out_channels, c.bias, c.dtype}));
  } else {
    run(backend.make_conv2d(c));
  }

  const double rounded = c.dtype == DType::fp32 ? 1e-5 : 8e-3;  // one rounding to the dtype, u = 2^-9 for bf16
  const auto values = [&](const std::vector<std::byte>& bytes) {
    return decode(bytes.data(), bytes.size() / dtype_size(c.dtype), c.dtype);
  };
  EXPECT_LT(normwise_relative_error(values(y_bytes), as_floats(r.y)), rounded) << what << ": y";
  EXPECT_LT(normwise_relative_error(values(dx_bytes), as_floats(r.dx)), rounded) << what << ": dx";
  EXPECT_LT(normwise_relative_error(dw, as_floats(r.dw)), 1e-5) << what << ": dw (fp32)";
  if (c.bias) {
    EXPECT_LT(normwise_relative_error(db, as_floats(r.db)), 1e-5) << what << ": db (fp32)";
  }
}

Conv2dConfig config(Shape input, std::int64_t out_channels, std::int64_t kernel, std::int64_t stride,
                    std::int64_t padding, bool bias, DType dtype) {
  return Conv2dConfig{.input = input, .out_channels = out_channels, .kernel = Extent2{kernel}, .stride = stride,
                      .padding = Extent2{padding}, .bias = bias, .dtype = dtype};
}

class CpuConvolution : public ::testing::TestWithParam<DType> {};

// An unpadded bias-free 1×1 convolution takes the matrix-product route (see
// is_pointwise_matmul), a strided one through its sampled pixels; the next test holds the
// convolution kernels in the same dtype.
TEST_P(CpuConvolution, PointwiseMatchesTheDefinition) {
  // Channels that are not multiples of any kernel's block, a batch of 3, a non-square image.
  expect_matches_definition(config(Shape(3, 12, 5, 7), 20, 1, 1, 0, false, GetParam()), "1x1 stride 1");
  // Strided: the last row and column of an odd side are read, an even side's last is not; the
  // gradient of every pixel not read must be written as 0.
  expect_matches_definition(config(Shape(3, 12, 6, 7), 20, 1, 2, 0, false, GetParam()), "1x1 stride 2");
  expect_matches_definition(config(Shape(2, 12, 5, 9), 20, 1, 2, 0, false, GetParam()), "1x1 stride 2, odd sides");
  expect_matches_definition(config(Shape(2, 12, 7, 8), 20, 1, 3, 0, false, GetParam()), "1x1 stride 3");
}

TEST_P(CpuConvolution, ConvolutionPrimitivesMatchTheDefinition) {
  expect_matches_definition(config(Shape(2, 12, 5, 7), 20, 1, 1, 0, true, GetParam()), "1x1 with bias");
  expect_matches_definition(config(Shape(2, 8, 6, 5), 16, 3, 1, 1, true, GetParam()), "3x3 padded");
}

// A stride-1 convolution's input gradient as a forward convolution with the weights flipped
// (conv_backward_data.hpp), and through oneDNN's backward-data primitive: both the definition's,
// square, oblong (InceptionV3's 1x7 and 7x1), unpadded, dilated, and dilated past the image
// (DeepLabV3+'s rates on a small map: most taps fall in the padding).
TEST_P(CpuConvolution, TheInputGradientByEitherRouteMatchesTheDefinition) {
  const auto with = [](Conv2dConfig c, Extent2 kernel, Extent2 padding, std::int64_t dilation) {
    c.kernel = kernel;
    c.padding = padding;
    c.dilation = dilation;
    return c;
  };
  const Conv2dConfig base = config(Shape(2, 12, 6, 9), 20, 3, 1, 1, false, GetParam());
  const std::vector<std::pair<Conv2dConfig, std::string>> shapes{
      {base, "3x3 padded"},
      {with(base, Extent2{3}, Extent2{0}, 1), "3x3 unpadded"},
      {with(base, Extent2{1, 7}, Extent2{0, 3}, 1), "1x7"},
      {with(base, Extent2{7, 1}, Extent2{3, 0}, 1), "7x1"},
      {with(base, Extent2{5}, Extent2{2}, 1), "5x5"},
      {with(base, Extent2{3}, Extent2{2}, 2), "3x3 dilated 2"},
      {with(base, Extent2{3}, Extent2{7}, 7), "3x3 dilated past the image's height"},
  };
  for (const auto& [shape, what] : shapes) {
    ASSERT_TRUE(flippable(shape)) << what;
    expect_matches_definition(shape, what + ", flipped", false, ConvBackwardData::flipped);
    expect_matches_definition(shape, what + ", primitive", false, ConvBackwardData::primitive);
  }
  // Where it does not apply: strided, 1x1, and padded past the dilated kernel.
  EXPECT_FALSE(flippable(config(Shape(2, 12, 6, 9), 20, 3, 2, 1, false, GetParam())));
  EXPECT_FALSE(flippable(config(Shape(2, 12, 6, 9), 20, 1, 1, 0, true, GetParam())));
  EXPECT_FALSE(flippable(config(Shape(2, 12, 6, 9), 20, 3, 1, 3, false, GetParam())));
  expect_matches_definition(config(Shape(2, 12, 6, 9), 20, 3, 1, 3, false, GetParam()), "3x3 padded by 3",
                            false, ConvBackwardData::flipped);
}

// The automatic route follows the kernels oneDNN would run for each (conv_backward_data.hpp
// gives the timings): away from an im2col product, towards brgemm in fp32; the switch's other
// values decide alone.
TEST(ConvBackwardData, TheAutomaticRouteFollowsTheKernelsEachWouldRun) {
  const auto layer = [](DType dtype, std::int64_t side, std::int64_t stride = 1) {
    return config(Shape(2, 64, side, side), 64, 3, stride, 1, false, dtype);
  };
  const auto automatic = [](const Conv2dConfig& c, const char* primitive, const char* flipped) {
    return flips_backward_data(c, ConvBackwardData::automatic, {primitive, flipped});
  };
  for (const DType dtype : {DType::fp32, DType::bf16}) {
    EXPECT_TRUE(automatic(layer(dtype, 16), "x64:gemm:jit", "brgconv:avx512_core")) << to_string(dtype);
    EXPECT_TRUE(automatic(layer(dtype, 16), "x64:gemm:jit", "x64:gemm:jit")) << to_string(dtype);
    EXPECT_FALSE(automatic(layer(dtype, 64), "jit:avx2", "x64:gemm:jit")) << to_string(dtype);
    EXPECT_FALSE(automatic(layer(dtype, 64, 2), "x64:gemm:jit", "brgconv:avx512_core")) << "strided: " << to_string(dtype);
    EXPECT_FALSE(flips_backward_data(layer(dtype, 64), ConvBackwardData::primitive, {"x64:gemm:jit", "brgconv"}));
    EXPECT_TRUE(flips_backward_data(layer(dtype, 7), ConvBackwardData::flipped, {"jit:avx512_core", "x64:gemm:jit"}));
  }
  EXPECT_TRUE(automatic(layer(DType::fp32, 7), "jit:avx512_core", "brgconv:avx512_core"));
  EXPECT_FALSE(automatic(layer(DType::bf16, 64), "jit_bf16:avx512_core_bf16", "brgconv:avx512_core_bf16"));
  EXPECT_FALSE(automatic(layer(DType::fp32, 224), "jit:avx2", "jit:avx2"));
}

// Linear layers: matrix products in fp32, oneDNN's inner product in bf16 (make_linear says why).
// 150 outputs: the bias gradient's column blocks of 64 end in a partial one; 37 rows.
TEST_P(CpuConvolution, LinearMatchesTheDefinition) {
  expect_matches_definition(config(Shape(37, 19, 1, 1), 150, 1, 1, 0, true, GetParam()), "linear", true);
  expect_matches_definition(config(Shape(5, 64, 1, 1), 3, 1, 1, 0, true, GetParam()), "linear, 3 outputs", true);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CpuConvolution, ::testing::Values(DType::fp32, DType::bf16),
                         [](const ::testing::TestParamInfo<DType>& dtype) { return std::string(to_string(dtype.param)); });

}  // namespace
}  // namespace dlbench::worker
