// Convolution passes fused with the batch norm around them, as cuDNN graphs (cuda/conv_fusion.hpp).
#include "cuda/conv_fusion.hpp"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <initializer_list>
#include <string>
#include <utility>

#include "cuda/cuda_common.hpp"

namespace dlbench::worker::cuda_detail {

std::string_view to_string(ConvFusion fusion) {
  switch (fusion) {
    case ConvFusion::conv: return "conv";
    case ConvFusion::conv_genstats: return "conv+genstats";
    case ConvFusion::scale_bias_relu_conv_genstats: return "scale+bias+relu+conv+genstats";
    case ConvFusion::wgrad: return "wgrad";
    case ConvFusion::scale_bias_relu_wgrad: return "scale+bias+relu+wgrad";
    case ConvFusion::dgrad: return "dgrad";
    case ConvFusion::dgrad_drelu: return "dgrad+drelu";
    case ConvFusion::dgrad_scale_bias_drelu: return "dgrad+scale+bias+drelu";
    case ConvFusion::dgrad_drelu_dbn_weight: return "dgrad+drelu+dbn-weight";
    case ConvFusion::dgrad_add_drelu: return "dgrad+add+drelu";
    case ConvFusion::dgrad_add_drelu_dbn_weight: return "dgrad+add+drelu+dbn-weight";
    case ConvFusion::runtime_fusion_canary: return "conv+bias+scale+tanh";
  }
  throw std::invalid_argument("unknown convolution fusion");
}

ConvFusion baseline_of(ConvFusion fusion) {
  switch (fusion) {
    case ConvFusion::conv:
    case ConvFusion::conv_genstats:
    case ConvFusion::scale_bias_relu_conv_genstats:
    case ConvFusion::runtime_fusion_canary: return ConvFusion::conv;
    case ConvFusion::wgrad:
    case ConvFusion::scale_bias_relu_wgrad: return ConvFusion::wgrad;
    case ConvFusion::dgrad:
    case ConvFusion::dgrad_drelu:
    case ConvFusion::dgrad_scale_bias_drelu:
    case ConvFusion::dgrad_drelu_dbn_weight:
    case ConvFusion::dgrad_add_drelu:
    case ConvFusion::dgrad_add_drelu_dbn_weight: return ConvFusion::dgrad;
  }
  throw std::invalid_argument("unknown convolution fusion");
}

namespace {

// Virtual tensors' uids: never in a variant pack.
constexpr std::int64_t kFirstVirtualUid = 100;

// Builds a graph's parts in order, each kept in the graph's own deque.
class GraphParts {
 public:
  GraphParts(FusedConvGraph& graph, Layout layout) : graph_(graph), layout_(layout) {}

  const BackendDescriptor& tensor(std::int64_t uid, const std::array<std::int64_t, 4>& dims, cudnnDataType_t type) {
    const std::size_t values = static_cast<std::size_t>(dims[0] * dims[1] * dims[2] * dims[3]);
    graph_.tensors.push_back({uid, values * bytes_of(type), bytes_of(type)});
    return graph_.parts.emplace_back(make_graph_tensor(uid, dims, type, layout_));
  }
  const BackendDescriptor& intermediate(const std::array<std::int64_t, 4>& dims) {
    return graph_.parts.emplace_back(make_graph_tensor(next_virtual_++, dims, CUDNN_DATA_FLOAT, layout_, true));
  }

  // y = x <mode> (b_scale * b) (b: null for a unary mode), computed in fp32.
  const BackendDescriptor& pointwise(cudnnPointwiseMode_t mode, const BackendDescriptor& x, const BackendDescriptor* b,
                                     const BackendDescriptor& y, float b_scale = 1) {
    if (b == nullptr) {
      return pointwise_operation(mode, {{CUDNN_ATTR_OPERATION_POINTWISE_XDESC, &x}, {CUDNN_ATTR_OPERATION_POINTWISE_YDESC, &y}},
                                 "a pointwise operation");
    }
    return pointwise_operation(mode,
                               {{CUDNN_ATTR_OPERATION_POINTWISE_XDESC, &x},
                                {CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b},
                                {CUDNN_ATTR_OPERATION_POINTWISE_YDESC, &y}},
                               "a pointwise operation", b_scale);
  }

  // dx = dy where x > 0, else 0.
  const BackendDescriptor& relu_backward(const BackendDescriptor& dy, const BackendDescriptor& x,
                                         const BackendDescriptor& dx) {
    return pointwise_operation(CUDNN_POINTWISE_RELU_BWD,
                               {{CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, &dy},
                                {CUDNN_ATTR_OPERATION_POINTWISE_XDESC, &x},
                                {CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, &dx}},
                               "the ReLU backward");
  }

  // Σx and Σx² per channel.
  const BackendDescriptor& statistics(const BackendDescriptor& x, const BackendDescriptor& sum,
                                      const BackendDescriptor& square_sum) {
    BackendDescriptor& operation = graph_.parts.emplace_back(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
    const cudnnGenStatsMode_t mode = CUDNN_GENSTATS_SUM_SQSUM;
    const cudnnDataType_t precision = CUDNN_DATA_FLOAT;
    const cudnnBackendDescriptor_t raw_x = x.get(), raw_sum = sum.get(), raw_square_sum = square_sum.get();
    operation.set(CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, &mode);
    operation.set(CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &precision);
    operation.set(CUDNN_ATTR_OPERATION_GENSTATS_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &raw_x);
    operation.set(CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &raw_sum);
    operation.set(CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &raw_square_sum);
    operation.finalize("the statistics (genstats)");
    return add(operation);
  }

  // A batch norm's weight gradients from its input x, its saved statistics, its gamma and the
  // gradient dy of its output; and the coefficients of its input gradient, dx = A * dy + B * x + C.
  struct BatchNormWeightGradients {
    const BackendDescriptor *x, *mean, *inv_std, *gamma, *dy, *dgamma, *dbeta, *a, *b, *c;
  };
  const BackendDescriptor& batch_norm_weight_gradients(const BatchNormWeightGradients& t) {
    BackendDescriptor& operation = graph_.parts.emplace_back(CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR);
    const cudnnDataType_t precision = CUDNN_DATA_FLOAT;
    operation.set(CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &precision);
    const std::pair<cudnnBackendAttributeName_t, const BackendDescriptor*> operands[] = {
        {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_X_DESC, t.x},
        {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MEAN_DESC, t.mean},
        {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_INVSTD_DESC, t.inv_std},
        {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_BN_SCALE_DESC, t.gamma},
        {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DY_DESC, t.dy},
        {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_SCALE_DESC, t.dgamma},
        {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_BIAS_DESC, t.dbeta},
        {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_DY_SCALE_DESC, t.a},
        {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_X_SCALE_DESC, t.b},
        {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_BIAS, t.c}};
    for (const auto& [attribute, tensor] : operands) {
      const cudnnBackendDescriptor_t raw = tensor->get();
      operation.set(attribute, CUDNN_TYPE_BACKEND_DESCRIPTOR, &raw);
    }
    operation.finalize("the batch norm's weight gradients");
    return add(operation);
  }

  const BackendDescriptor& convolution(ConvPass pass, const Conv2dConfig& config, const BackendDescriptor& input,
                                       const BackendDescriptor& filter, const BackendDescriptor& output) {
    const BackendDescriptor& descriptor = graph_.parts.emplace_back(make_convolution(config));
    return add(graph_.parts.emplace_back(make_convolution_operation(pass, input, filter, output, descriptor)));
  }

  const std::vector<const BackendDescriptor*>& operations() const { return operations_; }

 private:
  // A pointwise operation of `mode`, computed in fp32, on the tensors its attributes name.
  const BackendDescriptor& pointwise_operation(
      cudnnPointwiseMode_t mode,
      std::initializer_list<std::pair<cudnnBackendAttributeName_t, const BackendDescriptor*>> operands,
      const std::string& what, float b_scale = 1) {
    BackendDescriptor& descriptor = graph_.parts.emplace_back(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    const cudnnDataType_t precision = CUDNN_DATA_FLOAT;
    descriptor.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, &mode);
    descriptor.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &precision);
    descriptor.finalize(what + "'s descriptor");
    BackendDescriptor& operation = graph_.parts.emplace_back(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    const cudnnBackendDescriptor_t raw_descriptor = descriptor.get();
    operation.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, &raw_descriptor);
    for (const auto& [attribute, tensor] : operands) {
      const cudnnBackendDescriptor_t raw = tensor->get();
      operation.set(attribute, CUDNN_TYPE_BACKEND_DESCRIPTOR, &raw);
    }
    if (b_scale != 1) operation.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, &b_scale);
    operation.finalize(what);
    return add(operation);
  }

  static std::size_t bytes_of(cudnnDataType_t type) {
    return type == CUDNN_DATA_FLOAT ? 4 : type == CUDNN_DATA_DOUBLE ? 8 : 2;
  }
  const BackendDescriptor& add(const BackendDescriptor& operation) {
    operations_.push_back(&operation);
    return operation;
  }
  FusedConvGraph& graph_;
  Layout layout_;
  std::int64_t next_virtual_ = kFirstVirtualUid;
  std::vector<const BackendDescriptor*> operations_;
};

BackendDescriptor fused_graph(FusedConvGraph& graph, const Conv2dConfig& config, cudnnHandle_t handle) {
  GraphParts parts(graph, Layout::nhwc);
  const ConvGraphShapes shapes = conv_graph_shapes(config);
  const cudnnDataType_t type = cudnn_type(config.dtype);
  const std::array<std::int64_t, 4> per_input_channel{1, shapes.input[1], 1, 1};
  const std::array<std::int64_t, 4> per_output_channel{1, shapes.output[1], 1, 1};
  // relu(x * s + b) as the convolution's input, never in memory.
  const auto normalised_input = [&]() -> const BackendDescriptor& {
    const BackendDescriptor& x = parts.tensor(kInputUid, shapes.input, type);
    const BackendDescriptor& scale = parts.tensor(kScaleUid, per_input_channel, type);
    const BackendDescriptor& bias = parts.tensor(kBiasUid, per_input_channel, type);
    const BackendDescriptor& scaled = parts.intermediate(shapes.input);
    parts.pointwise(CUDNN_POINTWISE_MUL, x, &scale, scaled);
    const BackendDescriptor& shifted = parts.intermediate(shapes.input);
    parts.pointwise(CUDNN_POINTWISE_ADD, scaled, &bias, shifted);
    const BackendDescriptor& activated = parts.intermediate(shapes.input);
    parts.pointwise(CUDNN_POINTWISE_RELU_FWD, shifted, nullptr, activated);
    return activated;
  };
  // dgrad(dy, w), virtual: what the data-gradient fusions mask.
  const auto data_gradient = [&]() -> const BackendDescriptor& {
    const BackendDescriptor& unmasked = parts.intermediate(shapes.input);
    const BackendDescriptor& w = parts.tensor(kFilterUid, shapes.filter, type);
    const BackendDescriptor& dy = parts.tensor(kOutputUid, shapes.output, type);
    parts.convolution(ConvPass::backward_data, config, unmasked, w, dy);
    return unmasked;
  };
  // A batch norm's fp32 value a channel of the convolution's input (read or written).
  const auto per_channel = [&](std::int64_t uid) -> const BackendDescriptor& {
    return parts.tensor(uid, per_input_channel, CUDNN_DATA_FLOAT);
  };
  // The batch norm's dγ, dβ and input-gradient coefficients, reduced from its input x and the
  // masked gradient dx the pass writes.
  const auto batch_norm_gradients = [&](const BackendDescriptor& x, const BackendDescriptor& mean,
                                        const BackendDescriptor& inv_std, const BackendDescriptor& gamma,
                                        const BackendDescriptor& dx) {
    parts.batch_norm_weight_gradients({&x, &mean, &inv_std, &gamma, &dx, &per_channel(kDgammaUid),
                                       &per_channel(kDbetaUid), &per_channel(kCoefficientDyUid),
                                       &per_channel(kCoefficientXUid), &per_channel(kCoefficientBiasUid)});
  };
  const auto output_statistics = [&](const BackendDescriptor& y) {
    parts.statistics(y, parts.tensor(kSumUid, per_output_channel, CUDNN_DATA_FLOAT),
                     parts.tensor(kSquareSumUid, per_output_channel, CUDNN_DATA_FLOAT));
  };

  switch (graph.fusion) {
    case ConvFusion::conv:
    case ConvFusion::conv_genstats: {
      const BackendDescriptor& x = parts.tensor(kInputUid, shapes.input, type);
      const BackendDescriptor& w = parts.tensor(kFilterUid, shapes.filter, type);
      const BackendDescriptor& y = parts.tensor(kOutputUid, shapes.output, type);
      parts.convolution(ConvPass::forward, config, x, w, y);
      if (graph.fusion == ConvFusion::conv_genstats) output_statistics(y);
      break;
    }
    case ConvFusion::runtime_fusion_canary: {
      const BackendDescriptor& x = parts.tensor(kInputUid, shapes.input, type);
      const BackendDescriptor& w = parts.tensor(kFilterUid, shapes.filter, type);
      const BackendDescriptor& convolved = parts.intermediate(shapes.output);
      parts.convolution(ConvPass::forward, config, x, w, convolved);
      const BackendDescriptor& biased = parts.intermediate(shapes.output);
      parts.pointwise(CUDNN_POINTWISE_ADD, convolved, &parts.tensor(kBiasUid, per_output_channel, type), biased);
      const BackendDescriptor& scaled = parts.intermediate(shapes.output);
      parts.pointwise(CUDNN_POINTWISE_MUL, biased, &parts.tensor(kScaleUid, per_output_channel, type), scaled);
      parts.pointwise(CUDNN_POINTWISE_TANH_FWD, scaled, nullptr, parts.tensor(kOutputUid, shapes.output, type));
      break;
    }
    case ConvFusion::scale_bias_relu_conv_genstats: {
      const BackendDescriptor& input = normalised_input();
      const BackendDescriptor& w = parts.tensor(kFilterUid, shapes.filter, type);
      const BackendDescriptor& y = parts.tensor(kOutputUid, shapes.output, type);
      parts.convolution(ConvPass::forward, config, input, w, y);
      output_statistics(y);
      break;
    }
    case ConvFusion::wgrad:
    case ConvFusion::scale_bias_relu_wgrad: {
      const BackendDescriptor& input = graph.fusion == ConvFusion::wgrad
                                           ? parts.tensor(kInputUid, shapes.input, type)
                                           : normalised_input();
      const BackendDescriptor& dw = parts.tensor(kFilterUid, shapes.filter, type);
      const BackendDescriptor& dy = parts.tensor(kOutputUid, shapes.output, type);
      parts.convolution(ConvPass::backward_filter, config, input, dw, dy);
      break;
    }
    case ConvFusion::dgrad: {
      const BackendDescriptor& dx = parts.tensor(kInputUid, shapes.input, type);
      const BackendDescriptor& w = parts.tensor(kFilterUid, shapes.filter, type);
      const BackendDescriptor& dy = parts.tensor(kOutputUid, shapes.output, type);
      parts.convolution(ConvPass::backward_data, config, dx, w, dy);
      break;
    }
    case ConvFusion::dgrad_drelu:
    case ConvFusion::dgrad_scale_bias_drelu: {
      const BackendDescriptor& unmasked = data_gradient();
      const BackendDescriptor* relu_input = nullptr;
      if (graph.fusion == ConvFusion::dgrad_drelu) {
        relu_input = &parts.tensor(kReluInputUid, shapes.input, type);
      } else {
        const BackendDescriptor& x = parts.tensor(kReluInputUid, shapes.input, type);
        const BackendDescriptor& scale = parts.tensor(kScaleUid, per_input_channel, type);
        const BackendDescriptor& bias = parts.tensor(kBiasUid, per_input_channel, type);
        const BackendDescriptor& scaled = parts.intermediate(shapes.input);
        parts.pointwise(CUDNN_POINTWISE_MUL, x, &scale, scaled);
        relu_input = &parts.intermediate(shapes.input);
        parts.pointwise(CUDNN_POINTWISE_ADD, scaled, &bias, *relu_input);
      }
      parts.relu_backward(unmasked, *relu_input, parts.tensor(kInputUid, shapes.input, type));
      break;
    }
    case ConvFusion::dgrad_drelu_dbn_weight: {
      const BackendDescriptor& unmasked = data_gradient();
      // The ReLU's input, the batch norm's output: ((x - mean) * inv_std) * gamma + beta.
      const BackendDescriptor& x = parts.tensor(kReluInputUid, shapes.input, type);
      const BackendDescriptor& mean = per_channel(kMeanUid);
      const BackendDescriptor& inv_std = per_channel(kInvStdUid);
      const BackendDescriptor& gamma = per_channel(kGammaUid);
      const BackendDescriptor& beta = per_channel(kBetaUid);
      const BackendDescriptor& centred = parts.intermediate(shapes.input);
      parts.pointwise(CUDNN_POINTWISE_ADD, x, &mean, centred, -1);
      const BackendDescriptor& normalised = parts.intermediate(shapes.input);
      parts.pointwise(CUDNN_POINTWISE_MUL, centred, &inv_std, normalised);
      const BackendDescriptor& scaled = parts.intermediate(shapes.input);
      parts.pointwise(CUDNN_POINTWISE_MUL, normalised, &gamma, scaled);
      const BackendDescriptor& relu_input = parts.intermediate(shapes.input);
      parts.pointwise(CUDNN_POINTWISE_ADD, scaled, &beta, relu_input);
      const BackendDescriptor& dx = parts.tensor(kInputUid, shapes.input, type);
      parts.relu_backward(unmasked, relu_input, dx);
      batch_norm_gradients(x, mean, inv_std, gamma, dx);
      break;
    }
    case ConvFusion::dgrad_add_drelu:
    case ConvFusion::dgrad_add_drelu_dbn_weight: {
      const BackendDescriptor& unmasked = data_gradient();
      const BackendDescriptor& summed = parts.intermediate(shapes.input);
      parts.pointwise(CUDNN_POINTWISE_ADD, unmasked, &parts.tensor(kShortcutGradientUid, shapes.input, type), summed);
      const BackendDescriptor& dx = parts.tensor(kInputUid, shapes.input, type);
      parts.relu_backward(summed, parts.tensor(kReluInputUid, shapes.input, type), dx);
      if (graph.fusion == ConvFusion::dgrad_add_drelu_dbn_weight) {
        const BackendDescriptor& x = parts.tensor(kBatchNormInputUid, shapes.input, type);
        const BackendDescriptor& mean = per_channel(kMeanUid);
        const BackendDescriptor& inv_std = per_channel(kInvStdUid);
        batch_norm_gradients(x, mean, inv_std, per_channel(kGammaUid), dx);
      }
      break;
    }
  }
  return make_operation_graph(parts.operations(), handle);
}

}  // namespace

FusedConvGraph::FusedConvGraph(const Conv2dConfig& config, ConvFusion fusion_, cudnnHandle_t handle)
    : fusion(fusion_), graph(fused_graph(*this, config, handle)) {}

EngineSearchResult search_engines(const FusedConvGraph& graph, cudnnHandle_t handle, const BackendDescriptor* device,
                                  PlanRules rules) {
  rules.fp32_data = false;
  rules.tensor_cores_allowed = true;
  rules.determinism = ConvDeterminism::any;
  EngineSearchResult result;
  result.built = build_plans(graph.graph, handle, device, rules, result.search, &result.first_unbuildable_reason);
  return result;
}

}  // namespace dlbench::worker::cuda_detail
