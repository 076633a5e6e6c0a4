// cuDNN convolution: descriptors built once per layer, algorithms measured once per distinct
// convolution (conv_algorithms.hpp and conv_engines.hpp hold the rules), run on the backend's
// stream through the legacy calls or the graph API (conv_graph.cpp).
#include <array>
#include <cstdlib>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>

#include "cuda/conv_algorithms.hpp"
#include "cuda/conv_engines.hpp"
#include "cuda/conv_graph.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/cuda_common.hpp"
#include "cuda/kernels.hpp"
#include "cuda/padded_channels.hpp"

namespace dlbench::worker::cuda_detail {
namespace {

// One measurement per distinct convolution in the process: ResNet repeats its shapes.
std::mutex algorithm_cache_mutex;
std::map<ConvAlgorithmKey, AlgorithmChoice> algorithm_cache;

// The legacy calls: each pass's algorithm measured by cudnnFind*AlgorithmEx on the pass's own
// buffers (once per distinct convolution in the process), then run by cudnnConvolution*.
class LegacyConvPasses {
 public:
  LegacyConvPasses(CudaBackend& backend, const Conv2dConfig& config, Layout layout, bool tensor_cores)
      : backend_(backend), config_(config), layout_(layout), tensor_cores_(tensor_cores),
        x_desc_(config.input, config.dtype, layout), y_desc_(config.output(), config.dtype, layout) {
    DLBENCH_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w_desc_));
    DLBENCH_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w_desc_, cudnn_type(config.dtype),
                                                   layout == Layout::nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                                   as_int(config.out_channels), as_int(config.input.c()),
                                                   as_int(config.kernel.h), as_int(config.kernel.w)));
    // One descriptor per pass: each runs with the math type its algorithm was measured with.
    for (cudnnConvolutionDescriptor_t& desc : conv_desc_) {
      DLBENCH_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&desc));
      // Products accumulate in fp32 whatever the data type (PyTorch's choice for half too).
      DLBENCH_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(desc, as_int(config.padding.h), as_int(config.padding.w),
                                                          as_int(config.stride), as_int(config.stride),
                                                          as_int(config.dilation), as_int(config.dilation),
                                                          CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
      // fp32 means fp32: FMA math keeps cuDNN off TF32 tensor cores, which its default allows.
      DLBENCH_CUDNN_CHECK(cudnnSetConvolutionMathType(desc, tensor_cores ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
    }
  }
  ~LegacyConvPasses() {
    for (cudnnConvolutionDescriptor_t desc : conv_desc_) cudnnDestroyConvolutionDescriptor(desc);
    cudnnDestroyFilterDescriptor(w_desc_);
  }
  LegacyConvPasses(const LegacyConvPasses&) = delete;
  LegacyConvPasses& operator=(const LegacyConvPasses&) = delete;

  void run(ConvPass pass, const ConvOperands& o) {
    switch (pass) {
      case ConvPass::forward: {
        const AlgorithmChoice& a = choose(pass, [&](void* ws, std::size_t limit) {
          std::array<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT> perf{};
          int count = 0;
          DLBENCH_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
              backend_.cudnn(), x_desc_.handle, o.input, w_desc_, o.filter, desc(pass), y_desc_.handle, o.output,
              static_cast<int>(perf.size()), &count, perf.data(), ws, limit));
          return fastest(perf.data(), count, tensor_cores_, "forward", config_.dtype == DType::fp16,
                         backend_.conv_determinism());
        });
        DLBENCH_CUDNN_CHECK(cudnnConvolutionForward(backend_.cudnn(), &kOne, x_desc_.handle, o.input, w_desc_, o.filter,
                                                    desc(pass), static_cast<cudnnConvolutionFwdAlgo_t>(a.algorithm),
                                                    backend_.workspace(a.workspace), a.workspace, &kZero,
                                                    y_desc_.handle, o.output));
        return;
      }
      case ConvPass::backward_data:
      case ConvPass::backward_data_accumulate: {
        const bool accumulate = pass == ConvPass::backward_data_accumulate;
        const AlgorithmChoice& a = choose(pass, [&](void* ws, std::size_t limit) {
          // The search overwrites its output: accumulating, dx holds the other branch's gradient,
          // so the search writes scratch memory instead.
          const std::shared_ptr<void> scratch =
              accumulate ? backend_.allocate(static_cast<std::size_t>(config_.input.numel()) * dtype_size(config_.dtype))
                         : nullptr;
          std::array<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT> perf{};
          int count = 0;
          DLBENCH_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
              backend_.cudnn(), w_desc_, o.filter, y_desc_.handle, o.output, desc(pass), x_desc_.handle,
              accumulate ? scratch.get() : o.input, static_cast<int>(perf.size()), &count, perf.data(), ws, limit));
          return fastest(perf.data(), count, tensor_cores_, "backward-data", config_.dtype == DType::fp16,
                         backend_.conv_determinism());
        });
        DLBENCH_CUDNN_CHECK(cudnnConvolutionBackwardData(
            backend_.cudnn(), &kOne, w_desc_, o.filter, y_desc_.handle, o.output, desc(pass),
            static_cast<cudnnConvolutionBwdDataAlgo_t>(a.algorithm), backend_.workspace(a.workspace), a.workspace,
            accumulate ? &kOne : &kZero, x_desc_.handle, o.input));
        return;
      }
      case ConvPass::backward_filter: {
        const AlgorithmChoice& a = choose(pass, [&](void* ws, std::size_t limit) {
          std::array<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT> perf{};
          int count = 0;
          DLBENCH_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
              backend_.cudnn(), x_desc_.handle, o.input, y_desc_.handle, o.output, desc(pass), w_desc_, o.filter,
              static_cast<int>(perf.size()), &count, perf.data(), ws, limit));
          return fastest(perf.data(), count, tensor_cores_, "backward-filter", config_.dtype == DType::fp16,
                         backend_.conv_determinism());
        });
        DLBENCH_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
            backend_.cudnn(), &kOne, x_desc_.handle, o.input, y_desc_.handle, o.output, desc(pass),
            static_cast<cudnnConvolutionBwdFilterAlgo_t>(a.algorithm), backend_.workspace(a.workspace), a.workspace,
            &kZero, w_desc_, o.filter));
        return;
      }
    }
  }

 private:
  cudnnConvolutionDescriptor_t desc(ConvPass pass) const { return conv_desc_[static_cast<std::size_t>(pass)]; }

  // The algorithm for one pass: measured once (on the real buffers, in the first step) and
  // cached for every convolution with the same key. The search borrows its workspace and gives
  // it back; the backend's workspace grows only to what the chosen algorithms need.
  template <typename Find>
  const AlgorithmChoice& choose(ConvPass pass, Find&& find) {
    auto& mine = chosen_[static_cast<std::size_t>(pass)];
    if (mine) return *mine;
    const ConvAlgorithmKey key =
        conv_algorithm_key(config_, layout_, tensor_cores_, pass, backend_.conv_determinism());
    std::optional<AlgorithmChoice> choice;
    {
      std::lock_guard lock(algorithm_cache_mutex);
      if (const auto it = algorithm_cache.find(key); it != algorithm_cache.end()) choice = it->second;
    }
    if (!choice) {
      std::size_t free = 0, total = 0;
      DLBENCH_CUDA_CHECK(cudaMemGetInfo(&free, &total));
      const std::size_t bytes = search_workspace_bytes(backend_.workspace_limit(), free);
      const std::shared_ptr<void> borrowed = bytes > 0 ? backend_.allocate(bytes) : nullptr;
      choice = find(borrowed.get(), bytes);
      // Which algorithms a run took, once each (numerics and speed depend on them): on request.
      if (log_algorithms()) {
        std::cerr << "dlbench-worker: cudnn " + describe_choice(key, *choice) + "\n";
      }
      std::lock_guard lock(algorithm_cache_mutex);
      algorithm_cache[key] = *choice;
    }
    DLBENCH_CUDNN_CHECK(cudnnSetConvolutionMathType(desc(pass), choice->math));
    return *(mine = choice);
  }

  CudaBackend& backend_;
  Conv2dConfig config_;
  Layout layout_;
  bool tensor_cores_;
  TensorDescriptor x_desc_, y_desc_;
  cudnnFilterDescriptor_t w_desc_ = nullptr;
  std::array<cudnnConvolutionDescriptor_t, kConvPasses> conv_desc_{};
  std::array<std::optional<AlgorithmChoice>, kConvPasses> chosen_;
};

// fp32 activations are NCHW and take PyTorch's OIHW fp32 filter as it is. Half activations are
// NHWC: the filter is rounded into the backend's parameter scratch as OHWI (cuDNN's NHWC filter)
// before each pass that reads it, or read from the backend's kept copies (cuda/weight_copies.hpp),
// and the filter gradient, computed there in the half type, is widened back into the fp32 OIHW
// gradient. With DLBENCH_CUDA_PAD_INPUT_CHANNELS a channels-last input of fewer channels (a stem's
// 3) is read padded with zero channels (cuda/padded_channels.hpp), the filter's copy padded with
// zero taps to match. The passes themselves take the legacy calls or the graph API's engines, as
// the backend says (cuda/conv_engines.hpp).
class CudaConv final : public Conv2dOp {
 public:
  CudaConv(CudaBackend& backend, const Conv2dConfig& config)
      : backend_(backend), config_(config), layout_(backend.activation_layout()),
        passes_config_(with_pass_input_channels(config, layout_, backend.padded_input_channels())),
        y_desc_(config.output(), config.dtype, layout_), bias_desc_(Shape(1, config.out_channels, 1, 1)) {
    if (backend.conv_calls_api() == ConvCallsApi::graph) {
      graph_ = std::make_unique<GraphConvPasses>(backend, passes_config_, layout_, tensor_cores());
    } else {
      legacy_ = std::make_unique<LegacyConvPasses>(backend, passes_config_, layout_, tensor_cores());
    }
  }

  void forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) override {
    require_dtype("convolution", config_.dtype, {&x, &y});
    run(ConvPass::forward, {input(x), filter(weight), y.data});
    if (bias == nullptr) return;
    if (filter_as_given()) {
      DLBENCH_CUDNN_CHECK(
          cudnnAddTensor(backend_.cudnn(), &kOne, bias_desc_.handle, bias->as<float>(), &kOne, y_desc_.handle, y.data));
    } else {
      kernels::add_channel_bias(config_.dtype, y.data, bias->as<float>(), geometry_of(y.shape, layout_),
                                backend_.stream());
    }
  }

  void backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) override {
    require_dtype("convolution", config_.dtype, {&dy, &dx});
    if (padded()) return padded_backward_data(dy, weight, dx, false);
    run(ConvPass::backward_data, {dx.data, filter(weight), dy.data});
  }
  void backward_data_accumulate(const Tensor& dy, const Tensor& weight, Tensor& dx) override {
    require_dtype("convolution", config_.dtype, {&dy, &dx});
    if (padded()) return padded_backward_data(dy, weight, dx, true);
    run(ConvPass::backward_data_accumulate, {dx.data, filter(weight), dy.data});
  }

  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias) override {
    require_dtype("convolution", config_.dtype, {&x, &dy});
    void* dw = gradient_in_place() ? dweight.as<float>() : backend_.parameter_scratch(filter_bytes());
    run(ConvPass::backward_filter, {input(x), dw, dy.data});
    if (!gradient_in_place()) {
      kernels::filter_to_fp32(config_.dtype, dw, channels_last(), dweight.as<float>(), as_int(config_.out_channels),
                              as_int(config_.input.c()), as_int(passes_config_.input.c()), as_int(config_.kernel.h),
                              as_int(config_.kernel.w), backend_.stream());
    }
    if (dbias == nullptr) return;
    if (filter_as_given()) {
      DLBENCH_CUDNN_CHECK(cudnnConvolutionBackwardBias(backend_.cudnn(), &kOne, y_desc_.handle, dy.data, &kZero,
                                                       bias_desc_.handle, dbias->as<float>()));
    } else {
      // Channels last, dy is a (pixels of every sample) x channels matrix: its column sums.
      const Shape out = config_.output();
      const std::int64_t rows = out.n() * out.h() * out.w();
      auto* scratch = static_cast<float*>(backend_.workspace(kernels::column_sums_scratch_bytes(rows, as_int(out.c()))));
      kernels::column_sums(config_.dtype, dy.data, dbias->as<float>(), rows, as_int(out.c()), scratch,
                           backend_.stream());
    }
  }

 private:
  // `config` as the passes run it: its input padded to more channels where the backend pads them.
  static Conv2dConfig with_pass_input_channels(Conv2dConfig config, Layout layout, int pad_to) {
    const Shape in = config.input;
    config.input = Shape(in.n(), conv_pass_input_channels(in.c(), layout == Layout::nhwc, pad_to), in.h(), in.w());
    return config;
  }
  void run(ConvPass pass, const ConvOperands& operands) {
    if (graph_) {
      graph_->run(pass, operands);
    } else {
      legacy_->run(pass, operands);
    }
  }
  bool channels_last() const { return layout_ == Layout::nhwc; }
  bool padded() const { return passes_config_.input.c() != config_.input.c(); }
  std::int64_t input_pixels() const { return config_.input.n() * config_.input.h() * config_.input.w(); }
  std::size_t padded_input_bytes() const {
    return static_cast<std::size_t>(passes_config_.input.numel()) * dtype_size(config_.dtype);
  }
  // x as the passes read it: itself, or its copy padded with zero channels in this op's own memory
  // (made again by each pass that reads it: backward's x is forward's, but nothing says so).
  void* input(const Tensor& x) {
    if (!padded()) return x.data;
    if (!padded_input_) padded_input_ = backend_.allocate(padded_input_bytes());
    kernels::copy_channels(config_.dtype, x.data, as_int(config_.input.c()), padded_input_.get(),
                           as_int(passes_config_.input.c()), input_pixels(), false, backend_.stream());
    return padded_input_.get();
  }
  // The gradient of the padded input, then its real channels written (or added) into dx.
  void padded_backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx, bool accumulate) {
    if (!padded_input_grad_) padded_input_grad_ = backend_.allocate(padded_input_bytes());
    run(ConvPass::backward_data, {padded_input_grad_.get(), filter(weight), dy.data});
    kernels::copy_channels(config_.dtype, padded_input_grad_.get(), as_int(passes_config_.input.c()), dx.data,
                           as_int(config_.input.c()), input_pixels(), accumulate, backend_.stream());
  }
  // fp32 NCHW convolutions read PyTorch's OIHW fp32 filter (and write its gradient) in place.
  bool filter_as_given() const { return config_.dtype == DType::fp32 && !channels_last(); }
  // With kept weight copies (cuda/weight_copies.hpp), an fp32 1x1 filter's gradient is written
  // straight into the fp32 OIHW gradient, which is OHWI there.
  bool gradient_in_place() const {
    return filter_as_given() || (backend_.weight_copies() == WeightCopies::kept && config_.dtype == DType::fp32 &&
                                 config_.kernel.h == 1 && config_.kernel.w == 1 && !padded());
  }
  bool tensor_cores() const { return backend_.math() == CudaMath::tf32 || config_.dtype != DType::fp32; }
  // The filter as the passes read it, in the activations' type (padded: with its zero taps).
  std::size_t filter_bytes() const {
    return static_cast<std::size_t>(passes_config_.weight().numel()) * dtype_size(config_.dtype);
  }
  // The filter as cuDNN reads it here: the fp32 parameter itself, its kept copy, or its rounded
  // OHWI copy made for this pass. cuDNN's operands are untyped and mutable; a filter is only read.
  void* filter(const Tensor& weight) {
    if (filter_as_given()) return weight.as<float>();
    if (!padded()) return rounded_filter(backend_, weight, config_, channels_last());
    void* copy = backend_.parameter_scratch(filter_bytes());
    kernels::padded_filter_from_fp32(weight.as<float>(), config_.dtype, copy, as_int(config_.out_channels),
                                     as_int(config_.input.c()), as_int(passes_config_.input.c()),
                                     as_int(config_.kernel.h), as_int(config_.kernel.w), backend_.stream());
    return copy;
  }

  CudaBackend& backend_;
  Conv2dConfig config_;
  Layout layout_;
  Conv2dConfig passes_config_;  // config_, its input padded to more channels where the backend pads them
  TensorDescriptor y_desc_, bias_desc_;
  std::unique_ptr<LegacyConvPasses> legacy_;
  std::unique_ptr<GraphConvPasses> graph_;
  std::shared_ptr<void> padded_input_, padded_input_grad_;  // allocated by the first pass that needs them
};

}  // namespace

void* rounded_filter(CudaBackend& backend, const Tensor& weight, const Conv2dConfig& config, bool channels_last) {
  // The order a channels-last pass reads the filter in where it is not the parameter's own: OHWI,
  // unless the filter is 1x1.
  std::optional<FilterShape> arranged;
  if (channels_last && (config.kernel.h != 1 || config.kernel.w != 1)) {
    arranged = FilterShape{config.out_channels, config.input.c(), config.kernel.h, config.kernel.w};
  }
  if (const void* kept = backend.kept_weight(weight.as<float>(), weight.numel(), config.dtype, arranged)) {
    return const_cast<void*>(kept);  // cuDNN's operands are untyped and mutable; a filter is only read
  }
  void* copy = backend.parameter_scratch(static_cast<std::size_t>(config.weight().numel()) * dtype_size(config.dtype));
  kernels::filter_from_fp32(weight.as<float>(), config.dtype, copy, channels_last, as_int(config.out_channels),
                            as_int(config.input.c()), as_int(config.kernel.h), as_int(config.kernel.w),
                            backend.stream());
  return copy;
}

std::unique_ptr<Conv2dOp> make_conv(CudaBackend& backend, const Conv2dConfig& config) {
  return std::make_unique<CudaConv>(backend, config);
}

}  // namespace dlbench::worker::cuda_detail
