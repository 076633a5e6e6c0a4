// benchdnn-style convolution throughput for the exact convolutions a dlbench model runs:
// the shapes are recorded while the model sets up on the CPU backend, then each distinct
// shape is timed with raw oneDNN primitives (NHWC data, weights already in the kernel's
// format, no dlbench code on the timed path). Comparing the sum with dlbench-worker's step
// time shows what the framework adds on top of the convolutions.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.hpp>

#include "cpu/cpu_backend.hpp"
#include "model_convolutions.hpp"

namespace {

using namespace dlbench::worker;
using dnnl::memory;

memory::dims dims(const Shape& s) { return {s.n(), s.c(), s.h(), s.w()}; }

template <typename Run>
double median_seconds(Run&& run, int iterations) {
  run();  // warm-up: first touch, JIT caches
  std::vector<double> t;
  for (int i = 0; i < iterations; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Timing {
  double forward = 0, backward_data = 0, backward_weights = 0;
  std::string implementation;
};

// Small non-zero normal values in the buffer's own type: denormals or NaNs would time something else.
void fill(memory& m) {
  const std::size_t bytes = m.get_desc().get_size();
  if (m.get_desc().data_type() == memory::data_type::bf16) {
    auto* v = static_cast<std::uint16_t*>(m.get_data_handle());
    for (std::size_t i = 0; i < bytes / 2; ++i)
      v[i] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(0.01f * static_cast<float>(1 + i % 97)) >> 16);
  } else {
    auto* v = static_cast<float*>(m.get_data_handle());
    for (std::size_t i = 0; i < bytes / 4; ++i) v[i] = 0.01f * static_cast<float>(1 + i % 97);
  }
}

struct Precision {
  memory::data_type data;            // activations and the weights the kernel reads
  memory::format_tag activations;    // nhwc as dlbench runs, or any: the kernel's own blocked layout
};

Timing time_convolution(const Conv2dConfig& c, const Precision& p, const dnnl::engine& engine, dnnl::stream& stream,
                        int iterations) {
  const memory::desc src(dims(c.input), p.data, p.activations);
  const memory::desc dst(dims(c.output()), p.data, p.activations);
  const memory::desc weights_any(dims(c.weight()), p.data, memory::format_tag::any);
  // Weight gradients stay fp32 (master weights) whatever the data type.
  const memory::desc diff_weights_any(dims(c.weight()), memory::data_type::f32, memory::format_tag::any);
  const memory::dims strides{c.stride, c.stride}, padding{c.padding.h, c.padding.w};
  const memory::dims dilates{c.dilation - 1, c.dilation - 1};
  const auto alg = dnnl::algorithm::convolution_direct;
  const dnnl::convolution_forward::primitive_desc fwd_pd(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, src, weights_any, memory::desc(), dst,
                                      strides, dilates, padding, padding),
      engine);
  const dnnl::convolution_backward_data::primitive_desc bwd_data_pd(
      dnnl::convolution_backward_data::desc(alg, src, weights_any, dst, strides, dilates, padding, padding), engine,
      fwd_pd);
  const dnnl::convolution_backward_weights::primitive_desc bwd_weights_pd(
      dnnl::convolution_backward_weights::desc(alg, src, diff_weights_any, memory::desc(), dst, strides, dilates, padding,
                                               padding),
      engine, fwd_pd);
  memory x(fwd_pd.src_desc(), engine), y(fwd_pd.dst_desc(), engine), dx(bwd_data_pd.diff_src_desc(), engine),
      dy(bwd_data_pd.diff_dst_desc(), engine);
  memory w(fwd_pd.weights_desc(), engine), w_bwd(bwd_data_pd.weights_desc(), engine),
      dw(bwd_weights_pd.diff_weights_desc(), engine);
  for (memory* m : {&x, &y, &dx, &dy, &w, &w_bwd, &dw}) fill(*m);
  const bool same_layouts = bwd_weights_pd.src_desc() == fwd_pd.src_desc() &&
                            bwd_weights_pd.diff_dst_desc() == bwd_data_pd.diff_dst_desc();
  if (!same_layouts) {
    std::cerr << "the backward-weights kernel wants other activation layouts than forward and backward-data\n";
    std::exit(1);
  }
  dnnl::convolution_forward fwd(fwd_pd);
  dnnl::convolution_backward_data bwd_data(bwd_data_pd);
  dnnl::convolution_backward_weights bwd_weights(bwd_weights_pd);
  Timing t;
  t.implementation = fwd_pd.impl_info_str();
  t.forward = median_seconds(
      [&] {
        fwd.execute(stream, {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, y}});
        stream.wait();
      },
      iterations);
  t.backward_data = median_seconds(
      [&] {
        bwd_data.execute(stream, {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_WEIGHTS, w_bwd}, {DNNL_ARG_DIFF_SRC, dx}});
        stream.wait();
      },
      iterations);
  t.backward_weights = median_seconds(
      [&] {
        bwd_weights.execute(stream, {{DNNL_ARG_SRC, x}, {DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_DIFF_WEIGHTS, dw}});
        stream.wait();
      },
      iterations);
  return t;
}

bool is_pointwise(const Conv2dConfig& c) {
  return c.kernel.h == 1 && c.kernel.w == 1 && c.stride == 1 && c.padding.h == 0 && c.padding.w == 0;
}

// The same 1×1, stride-1 convolution as three matrix products over the batch's N·H·W pixels
// of NHWC data: y = x·wᵀ, dx = dy·w, dw = dyᵀ·x (dw in fp32). Weights in the kernel's format,
// as for the convolutions: what is timed is the kernels alone.
Timing time_pointwise_as_matmul(const Conv2dConfig& c, const Precision& p, const dnnl::engine& engine,
                                dnnl::stream& stream, int iterations) {
  const memory::dim pixels = c.input.n() * c.input.h() * c.input.w(), in = c.input.c(), out = c.out_channels;
  const memory::desc x_md({pixels, in}, p.data, memory::format_tag::ab);
  const memory::desc y_md({pixels, out}, p.data, memory::format_tag::ab);
  const memory::desc dy_transposed({out, pixels}, p.data, memory::format_tag::ba);
  const memory::desc dw_md({out, in}, memory::data_type::f32, memory::format_tag::ab);
  const dnnl::matmul::primitive_desc fwd_pd(
      dnnl::matmul::desc(x_md, memory::desc({in, out}, p.data, memory::format_tag::any), y_md), engine);
  const dnnl::matmul::primitive_desc bwd_data_pd(
      dnnl::matmul::desc(y_md, memory::desc({out, in}, p.data, memory::format_tag::any), x_md), engine);
  const dnnl::matmul::primitive_desc bwd_weights_pd(dnnl::matmul::desc(dy_transposed, x_md, dw_md), engine);
  memory x(x_md, engine), y(y_md, engine), dx(x_md, engine), dy(y_md, engine), dw(dw_md, engine);
  memory w(fwd_pd.weights_desc(), engine), w_bwd(bwd_data_pd.weights_desc(), engine);
  for (memory* m : {&x, &y, &dx, &dy, &w, &w_bwd, &dw}) fill(*m);
  const memory dy_as_transposed(dy_transposed, engine, dy.get_data_handle());
  const dnnl::matmul fwd(fwd_pd), bwd_data(bwd_data_pd), bwd_weights(bwd_weights_pd);
  const auto run = [&](const dnnl::matmul& product, const memory& a, const memory& b, const memory& result) {
    return median_seconds(
        [&] {
          product.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, result}});
          stream.wait();
        },
        iterations);
  };
  Timing t;
  t.implementation = fwd_pd.impl_info_str();
  t.forward = run(fwd, x, w, y);
  t.backward_data = run(bwd_data, dy, w_bwd, dx);
  t.backward_weights = run(bwd_weights, dy_as_transposed, x, dw);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "resnet50";
  long batch = 32, image = 224;
  int iterations = 5, threads = 0;
  bool json = false;
  std::string precision = "fp32", layout = "nhwc";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model") model = next();
    else if (a == "--batch-size") batch = std::stol(next());
    else if (a == "--image-size") image = std::stol(next());
    else if (a == "--iterations") iterations = std::stoi(next());
    else if (a == "--threads") threads = std::stoi(next());
    else if (a == "--json") json = true;
    else if (a == "--precision") precision = next();
    else if (a == "--layout") layout = next();
    else {
      std::cerr << "usage: conv_throughput [--model M] [--batch-size N] [--image-size N] [--iterations N] "
                   "[--threads N] [--precision fp32|bf16] [--layout nhwc|blocked] [--json]\n";
      return 2;
    }
  }
  if (precision != "fp32" && precision != "bf16") {
    std::cerr << "--precision: '" << precision << "' is not one of fp32, bf16\n";
    return 2;
  }
  if (layout != "nhwc" && layout != "blocked") {
    std::cerr << "--layout: '" << layout << "' is not one of nhwc, blocked\n";
    return 2;
  }
  const Precision timed{precision == "bf16" ? memory::data_type::bf16 : memory::data_type::f32,
                        layout == "nhwc" ? memory::format_tag::nhwc : memory::format_tag::any};
  CpuBackend cpu(threads);
  const std::vector<dlbench::bench::ModelConvolution> shapes =
      dlbench::bench::model_convolutions(cpu, model, batch, image);
  std::size_t convolutions = 0;
  for (const auto& shape : shapes) convolutions += static_cast<std::size_t>(shape.count);

  double step = 0, flops = 0, pointwise_as_convolutions = 0, pointwise_as_matmuls = 0;
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [c, count, first] : shapes) {
    const Timing t = time_convolution(c, timed, cpu.engine(), cpu.stream(), iterations);
    const Shape o = c.output();
    const double macs = static_cast<double>(c.input.n() * o.c() * o.h() * o.w() * c.input.c() * c.kernel.h * c.kernel.w);
    const double seconds = t.forward + (first ? 0.0 : t.backward_data) + t.backward_weights;
    const double shape_flops = 2.0 * macs * (first ? 2.0 : 3.0);
    step += count * seconds;
    flops += count * shape_flops;
    nlohmann::json as_matmul = nullptr;
    if (is_pointwise(c) && !first) {
      const Timing m = time_pointwise_as_matmul(c, timed, cpu.engine(), cpu.stream(), iterations);
      const double matmul_seconds = m.forward + m.backward_data + m.backward_weights;
      as_matmul = {{"forwardMs", 1e3 * m.forward},
                   {"backwardDataMs", 1e3 * m.backward_data},
                   {"backwardWeightsMs", 1e3 * m.backward_weights},
                   {"implementation", m.implementation}};
      pointwise_as_convolutions += count * seconds;
      pointwise_as_matmuls += count * matmul_seconds;
    }
    rows.push_back({{"asMatmul", as_matmul},{"shape", "ic" + std::to_string(c.input.c()) + "ih" + std::to_string(c.input.h()) + "oc" +
                                  std::to_string(o.c()) + "k" + std::to_string(c.kernel.h) + "x" + std::to_string(c.kernel.w) + "s" +
                                  std::to_string(c.stride) + (c.dilation > 1 ? "d" + std::to_string(c.dilation) : "")},
                    {"count", count},
                    {"forwardMs", 1e3 * t.forward},
                    {"backwardDataMs", first ? 0.0 : 1e3 * t.backward_data},
                    {"backwardWeightsMs", 1e3 * t.backward_weights},
                    {"gflops", shape_flops / seconds / 1e9},
                    {"implementation", t.implementation}});
  }
  const nlohmann::json summary{{"model", model},
                               {"batchSize", batch},
                               {"imageSize", image},
                               {"threads", cpu.threads()},
                               {"convolutions", convolutions},
                               {"distinctShapes", shapes.size()},
                               {"convSecondsPerStep", step},
                               {"convGflopPerStep", flops / 1e9},
                               {"convGflops", flops / step / 1e9},
                               {"convSamplesPerSecond", static_cast<double>(batch) / step},
                               {"pointwiseAsConvolutionsSecondsPerStep", pointwise_as_convolutions},
                               {"pointwiseAsMatmulsSecondsPerStep", pointwise_as_matmuls},
                               {"shapes", rows}};
  if (json) {
    std::cout << summary.dump(2) << "\n";
    return 0;
  }
  std::printf("%s batch %ld at %ld×%ld, %d threads: %zu convolutions, %zu distinct shapes\n", model.c_str(), batch, image,
              image, cpu.threads(), convolutions, shapes.size());
  std::printf("%-22s %5s %10s %10s %10s %8s  %s\n", "shape", "count", "fwd ms", "bwd-d ms", "bwd-w ms", "GFLOP/s", "kernel");
  for (const auto& r : rows) {
    std::printf("%-22s %5d %10.2f %10.2f %10.2f %8.1f  %s\n", r["shape"].get<std::string>().c_str(), r["count"].get<int>(),
                r["forwardMs"].get<double>(), r["backwardDataMs"].get<double>(), r["backwardWeightsMs"].get<double>(),
                r["gflops"].get<double>(), r["implementation"].get<std::string>().c_str());
    if (const auto& m = r["asMatmul"]; !m.is_null()) {
      std::printf("%-22s %5s %10.2f %10.2f %10.2f %8s  %s\n", "  as matmul", "", m["forwardMs"].get<double>(),
                  m["backwardDataMs"].get<double>(), m["backwardWeightsMs"].get<double>(), "",
                  m["implementation"].get<std::string>().c_str());
    }
  }
  std::printf("1×1 stride-1 convolutions: %.3f s per step as convolutions, %.3f s as matmuls\n",
              pointwise_as_convolutions, pointwise_as_matmuls);
  std::printf("convolutions alone: %.3f s per training step, %.1f GFLOP, %.1f GFLOP/s, %.2f samples/s\n", step,
              flops / 1e9, flops / step / 1e9, static_cast<double>(batch) / step);
  return 0;
}
