// cuDNN convolution: descriptors built once per layer, algorithms measured once per distinct
// convolution in the process (conv_algorithms.hpp holds the rules), run on the backend's stream.
#include <array>
#include <map>
#include <mutex>
#include <optional>

#include "cuda/conv_algorithms.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/cuda_common.hpp"

namespace dlbench::worker::cuda_detail {
namespace {

// One measurement per distinct convolution in the process: ResNet repeats its shapes.
std::mutex algorithm_cache_mutex;
std::map<ConvAlgorithmKey, AlgorithmChoice> algorithm_cache;

class CudaConv final : public Conv2dOp {
 public:
  CudaConv(CudaBackend& backend, const Conv2dConfig& config)
      : backend_(backend), config_(config), x_desc_(config.input), y_desc_(config.output()),
        bias_desc_(Shape(1, config.out_channels, 1, 1)) {
    DLBENCH_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w_desc_));
    DLBENCH_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w_desc_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                                   as_int(config.out_channels), as_int(config.input.c()),
                                                   as_int(config.kernel.h), as_int(config.kernel.w)));
    // One descriptor per pass: each runs with the math type its algorithm was measured with.
    for (cudnnConvolutionDescriptor_t& desc : conv_desc_) {
      DLBENCH_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&desc));
      DLBENCH_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(desc, as_int(config.padding.h), as_int(config.padding.w),
                                                          as_int(config.stride), as_int(config.stride),
                                                          as_int(config.dilation), as_int(config.dilation),
                                                          CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
      // fp32 means fp32: FMA math keeps cuDNN off TF32 tensor cores, which its default allows.
      DLBENCH_CUDNN_CHECK(cudnnSetConvolutionMathType(desc, tensor_cores() ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
    }
  }
  ~CudaConv() override {
    for (cudnnConvolutionDescriptor_t desc : conv_desc_) cudnnDestroyConvolutionDescriptor(desc);
    cudnnDestroyFilterDescriptor(w_desc_);
  }

  void forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) override {
    const AlgorithmChoice& a = choose(ConvPass::forward, [&](void* ws, std::size_t limit) {
      std::array<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT> perf{};
      int count = 0;
      DLBENCH_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
          backend_.cudnn(), x_desc_.handle, x.as<float>(), w_desc_, weight.as<float>(), desc(ConvPass::forward), y_desc_.handle,
          y.as<float>(), static_cast<int>(perf.size()), &count, perf.data(), ws, limit));
      return fastest(perf.data(), count, tensor_cores(), "forward");
    });
    DLBENCH_CUDNN_CHECK(cudnnConvolutionForward(backend_.cudnn(), &kOne, x_desc_.handle, x.as<float>(), w_desc_, weight.as<float>(),
                                                desc(ConvPass::forward),
                                                static_cast<cudnnConvolutionFwdAlgo_t>(a.algorithm),
                                                backend_.workspace(a.workspace), a.workspace, &kZero, y_desc_.handle,
                                                y.as<float>()));
    if (bias != nullptr) {
      DLBENCH_CUDNN_CHECK(
          cudnnAddTensor(backend_.cudnn(), &kOne, bias_desc_.handle, bias->as<float>(), &kOne, y_desc_.handle, y.as<float>()));
    }
  }

  void backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) override {
    const AlgorithmChoice& a = choose(ConvPass::backward_data, [&](void* ws, std::size_t limit) {
      std::array<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT> perf{};
      int count = 0;
      DLBENCH_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
          backend_.cudnn(), w_desc_, weight.as<float>(), y_desc_.handle, dy.as<float>(), desc(ConvPass::backward_data),
          x_desc_.handle, dx.as<float>(), static_cast<int>(perf.size()), &count, perf.data(), ws, limit));
      return fastest(perf.data(), count, tensor_cores(), "backward-data");
    });
    DLBENCH_CUDNN_CHECK(cudnnConvolutionBackwardData(
        backend_.cudnn(), &kOne, w_desc_, weight.as<float>(), y_desc_.handle, dy.as<float>(), desc(ConvPass::backward_data),
        static_cast<cudnnConvolutionBwdDataAlgo_t>(a.algorithm), backend_.workspace(a.workspace), a.workspace, &kZero,
        x_desc_.handle, dx.as<float>()));
  }

  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias) override {
    const AlgorithmChoice& a = choose(ConvPass::backward_filter, [&](void* ws, std::size_t limit) {
      std::array<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT> perf{};
      int count = 0;
      DLBENCH_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
          backend_.cudnn(), x_desc_.handle, x.as<float>(), y_desc_.handle, dy.as<float>(), desc(ConvPass::backward_filter), w_desc_,
          dweight.as<float>(), static_cast<int>(perf.size()), &count, perf.data(), ws, limit));
      return fastest(perf.data(), count, tensor_cores(), "backward-filter");
    });
    DLBENCH_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
        backend_.cudnn(), &kOne, x_desc_.handle, x.as<float>(), y_desc_.handle, dy.as<float>(), desc(ConvPass::backward_filter),
        static_cast<cudnnConvolutionBwdFilterAlgo_t>(a.algorithm), backend_.workspace(a.workspace), a.workspace,
        &kZero, w_desc_, dweight.as<float>()));
    if (dbias != nullptr) {
      DLBENCH_CUDNN_CHECK(cudnnConvolutionBackwardBias(backend_.cudnn(), &kOne, y_desc_.handle, dy.as<float>(), &kZero,
                                                       bias_desc_.handle, dbias->as<float>()));
    }
  }

 private:
  bool tensor_cores() const { return backend_.math() == CudaMath::tf32; }
  cudnnConvolutionDescriptor_t desc(ConvPass pass) const { return conv_desc_[static_cast<std::size_t>(pass)]; }

  // The algorithm for one pass: measured once (on the real buffers, in the first step) and
  // cached for every convolution with the same key. The search borrows its workspace and gives
  // it back; the backend's workspace grows only to what the chosen algorithms need.
  template <typename Find>
  const AlgorithmChoice& choose(ConvPass pass, Find&& find) {
    auto& mine = chosen_[static_cast<std::size_t>(pass)];
    if (mine) return *mine;
    const ConvAlgorithmKey key{config_.input.dims, config_.out_channels, config_.kernel,  config_.stride,
                               config_.padding,    config_.dilation,     DType::fp32,     Layout::nchw,
                               tensor_cores(),     pass};
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
      std::lock_guard lock(algorithm_cache_mutex);
      algorithm_cache[key] = *choice;
    }
    DLBENCH_CUDNN_CHECK(cudnnSetConvolutionMathType(desc(pass), choice->math));
    return *(mine = choice);
  }

  CudaBackend& backend_;
  Conv2dConfig config_;
  TensorDescriptor x_desc_, y_desc_, bias_desc_;
  cudnnFilterDescriptor_t w_desc_ = nullptr;
  std::array<cudnnConvolutionDescriptor_t, 3> conv_desc_{};
  std::array<std::optional<AlgorithmChoice>, 3> chosen_;
};

}  // namespace

std::unique_ptr<Conv2dOp> make_conv(CudaBackend& backend, const Conv2dConfig& config) {
  return std::make_unique<CudaConv>(backend, config);
}

}  // namespace dlbench::worker::cuda_detail
