#include "model_step_check.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "check_verdict.hpp"
#include "layers/layer.hpp"
#include "layers/sequential.hpp"
#include "residual_composing_backend.hpp"
#include "tensor.hpp"
#include "trainer.hpp"

namespace dlbench::worker {
namespace {

// One whole ResNet-50 step, layer by layer, each layer fed what the reference fed its twin: in
// forward its input is overwritten with the reference's x, in backward with the reference's dy,
// before it runs; its output is then compared with the reference's. So errors do not compound
// through the network (a whole untrained step is ill-conditioned: one ulp of noise in every
// convolution moves a late batch norm's input gradient by 7e-3), and the first layer off is the
// layer to look at. Then each layer's parameter gradients. Values are fp32 in logical order,
// backward ones divided by the loss scale.
struct StepTrace {
  struct Entry {
    std::string where;
    bool backward = false;
    std::vector<float> input, output;
    // A fed step compares each layer as it ends, against the reference's, and keeps only this:
    // the output's error (step_entry_error) and whether every value was finite.
    std::optional<double> error;
    bool finite = true;
  };
  std::vector<Entry> layers;  // in the order the layers began
  std::vector<Entry> gradients;  // output: each layer's parameter gradients, weight then bias
};

// A layer's output against the reference's, summed as it comes: whole, or a layer's parameter
// gradients one parameter at a time, each dropped once added (VGG16's are 553 MB, which the device's
// step need not keep beside the reference's). In backward a gradient that cancels to nearly zero
// (a batch norm's dx where dy is nearly constant per channel) is measured against the dy it came
// from: its rounding is a fraction of that, not of itself.
class EntryError {
 public:
  explicit EntryError(const StepTrace::Entry& want) : want_(want) {
    if (want.backward) {
      for (const float v : want.input) input_norm_ += static_cast<double>(v) * static_cast<double>(v);
    }
  }
  // The next values of the output, in order.
  void add(const std::vector<float>& got) {
    if (at_ + got.size() > want_.output.size()) {
      mismatched_ = true;
      finite_ = finite_ && std::all_of(got.begin(), got.end(), [](float v) { return std::isfinite(v); });
      return;
    }
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double w = want_.output[at_ + i];
      const double d = static_cast<double>(got[i]) - w;
      diff_ += d * d;
      norm_ += w * w;
      finite_ = finite_ && std::isfinite(got[i]);
    }
    at_ += got.size();
  }
  // Infinite where the values added are not as many as the reference's.
  double error() const {
    if (mismatched_ || at_ != want_.output.size()) return std::numeric_limits<double>::infinity();
    const double scale = std::max(norm_, input_norm_);
    return scale > 0 ? std::sqrt(diff_ / scale) : std::sqrt(diff_);
  }
  // Whether every value added was finite.
  bool finite() const { return finite_; }

 private:
  const StepTrace::Entry& want_;
  std::size_t at_ = 0;
  double diff_ = 0, norm_ = 0, input_norm_ = 0;
  bool finite_ = true, mismatched_ = false;
};

double step_entry_error(const std::vector<float>& got, const StepTrace::Entry& want) {
  EntryError error(want);
  error.add(got);
  return error.error();
}

// What a device in a half type will be fed: each value rounded to its activations' type, a
// gradient at its loss scale (a power of two) and unscaled again.
struct InputRounding {
  DType dtype = DType::fp32;
  float gradient_scale = 1.0f;
};

class StepRecorder final : public LayerObserver {
 public:
  // With `feed`, each layer's input is first overwritten with the one `feed` recorded. Without it,
  // with `rounding`, each layer's input is first rounded as the device's fed copy will be, so that
  // both sides compute from the same values.
  StepRecorder(Layer& network, Backend& backend, float gradient_scale, const StepTrace* feed,
               std::optional<InputRounding> rounding = std::nullopt)
      : network_(&network),
        paths_(layer_paths(network)),
        backend_(backend),
        scale_(gradient_scale),
        feed_(feed),
        rounding_(rounding) {}
  void before(const Layer& layer, bool backward, const Tensor& input) override {
    const std::string where = layer_where(paths_, layer, *network_);
    StepTrace::Entry entry{where + " (" + layer.kind() + ") " +
                               (backward ? "backward" : "forward"),
                           backward, {}, {}, std::nullopt, true};
    if (usable(input) && !composes_only(layer)) {
      if (feed_ != nullptr) {
        const StepTrace::Entry& twin = feed_->layers.at(trace.layers.size());
        if (twin.where != entry.where) throw std::logic_error("the step ran " + entry.where + " where the reference ran " + twin.where);
        if (backward && scale_ != 1.0f) {
          std::vector<float> values = twin.input;
          for (float& v : values) v *= scale_;
          upload(backend_, input, values);
        } else {
          upload(backend_, input, twin.input);
        }
      } else {
        std::vector<float> values = download(backend_, input);
        if (rounding_) {
          round_as_fed(values, backward);
          upload(backend_, input, values);
        }
        entry.input = unscaled(std::move(values), backward);
      }
    }
    open_.push_back(trace.layers.size());
    trace.layers.push_back(std::move(entry));
  }
  void after(const Layer& layer, bool backward, const Tensor& output) override {
    const std::size_t at = open_.back();
    open_.pop_back();
    if (!usable(output) || composes_only(layer)) return;
    StepTrace::Entry& entry = trace.layers[at];
    std::vector<float> values = unscaled(download(backend_, output), backward);
    if (feed_ == nullptr) {
      entry.output = std::move(values);
      return;
    }
    const StepTrace::Entry& twin = feed_->layers.at(at);
    entry.error = step_entry_error(values, twin);
    entry.finite = std::all_of(values.begin(), values.end(), [](float v) { return std::isfinite(v); });
    // Then the output is the reference's, as the next layer's fed input makes it anyway, so that
    // what this layer's backward reads of its own forward is the reference's too. A branch's last
    // layer has no next layer to feed it: InceptionV3's Mixed_6e.branch_pool.bn on an H200 kept a
    // ReLU output that one side computed a rounding above zero and the other at zero, and its input
    // gradient was off by 1/sqrt(166,464) = 2.5e-3, all of it that one element.
    if (!backward) upload(backend_, output, twin.output);
  }
  StepTrace trace;

 private:
  // A Sequential computes nothing of its own: its input is its first child's and its output its
  // last child's. It is neither fed nor compared, which keeps a deep model's trace to about half.
  static bool composes_only(const Layer& layer) { return dynamic_cast<const Sequential*>(&layer) != nullptr; }
  static bool usable(const Tensor& t) { return !t.empty() && t.dtype != DType::int32; }
  std::vector<float> unscaled(std::vector<float> values, bool backward) const {
    if (backward) {
      for (float& v : values) v /= scale_;
    }
    return values;
  }
  // `values` as the device's fed copy holds them. A value past the type's range stays as it was:
  // the device's step overflows there and halves its loss scale, and a reference of infinities
  // would feed every later try the same.
  void round_as_fed(std::vector<float>& values, bool backward) const {
    const float scale = backward ? rounding_->gradient_scale : 1.0f;
    std::vector<float> rounded = values;
    for (float& v : rounded) v *= scale;
    rounded = rounded_to(rounded, rounding_->dtype);
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (std::isfinite(rounded[i])) values[i] = rounded[i] / scale;
    }
  }
  const Layer* network_;
  std::unordered_map<const Layer*, std::string> paths_;
  Backend& backend_;
  float scale_;
  const StepTrace* feed_;
  std::optional<InputRounding> rounding_;
  std::vector<std::size_t> open_;
};

// What a device answered when asked to fuse a convolution with its batch norms
// (Backend::make_fused_conv2d): what was asked, and whether it fused, and with the batch norm's
// gradients.
struct FusionAnswer {
  FusedConv2dConfig asked;
  bool fused = false;
  bool gradients = false;
};

// The device's answer to `asked`, in `dtype`.
FusionAnswer ask_fusion(Backend& device, FusedConv2dConfig asked, DType dtype) {
  asked.conv.dtype = dtype;
  const std::unique_ptr<FusedConv2dOp> op = device.make_fused_conv2d(asked);
  return {asked, op != nullptr, op != nullptr && op->fuses_input_batch_norm_gradients()};
}

// A reference trace and the fusion answers it was composed from: it serves a later precision only
// where that precision's device answers each the same (an H200 fuses every block in fp16 and none
// in bf16, so amp's reference is not bf16's).
struct ReferenceStepTrace {
  StepTrace trace;
  std::vector<FusionAnswer> answers;
};


// Whether `device` answers every fusion question of `reference` as its trace's device did.
bool answers_alike(const ReferenceStepTrace& reference, Backend& device, DType dtype) {
  return std::ranges::all_of(reference.answers, [&](const FusionAnswer& then) {
    const FusionAnswer now = ask_fusion(device, then.asked, dtype);
    return now.fused == then.fused && now.gradients == then.gradients;
  });
}


// 64×64 images or the model's least (InceptionV3's 299: its auxiliary head needs it), 2 of them;
// 3 where a batch norm sees a 1×1 map (the ASPP's pooling branch, InceptionV3's auxiliary head):
// over 2 values its input gradient is zero in exact arithmetic (each normalised value is ±1), so
// what either side computes is rounding, which no bound can judge.
ModelStep model_step(Model model) {
  const ModelInfo info = model_info(model);
  const bool batch_norm_over_one_pixel = model == Model::deeplabv3plus || model == Model::inception_v3;
  const std::int64_t size = std::max<std::int64_t>(64, info.min_image_size);
  return {model, Shape(batch_norm_over_one_pixel ? 3 : 2, 3, size, size), info.per_pixel_labels ? info.classes : 10};
}


// amp: fp16 gradients need a loss scale, and the check starts at this one (a power of two, exact)
// and halves it while the step's gradients overflow, as dynamic loss scaling would: an untrained
// ResNet-50's conv1 gradient reaches about 110 here (PyTorch's too), past 65504 / 1024.
constexpr float kModelStepLossScale = 1024.0f;

// Images of i.i.d. noise all average to nearly the same value: a globally pooled feature then
// barely differs between the samples, and a batch norm over a 1×1 map divides rounding by that
// difference. So each image gets its own contrast and brightness, as real ones have: in bf16 on
// the CPU, the input gradients of DeepLabV3+'s ASPP pooling batch norm and InceptionV3's auxiliary
// one are then off by 9.5e-3 and 3.8e-3 instead of 2.2e-2 and 2.7e-2 (3 images; with 2, 0.63).
void spread_images_apart(Trainer& trainer) {
  std::vector<float> pixels;
  std::vector<std::int32_t> labels;
  trainer.copy_batch_to_host(pixels, labels);
  const Tensor& x = trainer.input();
  const auto per_image = static_cast<std::size_t>(x.shape.numel() / x.shape.n());
  for (std::size_t i = 0; i < pixels.size(); ++i) {
    const auto image = static_cast<float>(i / per_image);
    pixels[i] = pixels[i] * (0.5f + image) + (static_cast<int>(image) % 2 == 0 ? -0.5f : 0.5f);
  }
  trainer.load_batch(to_layout(pixels, x.shape, x.layout).data(), DType::fp32, labels.data());
}

// `loss_scale`: none, or the scale the step's loss gradient is multiplied by. `rounding`: the
// reference's, how the device's fed inputs will be rounded. `initial_weights`: the model's weights
// as first drawn; empty, they are drawn here and kept there. Drawing is most of a step check's
// time (ResNet-50's 25.6M values on the host, VGG16's 138M), and every trace of a model starts
// from the same seed's weights: a copy gives the same bits.
StepTrace model_step_trace(const ModelStep& model, Backend& backend, DType dtype, std::optional<float> loss_scale,
                           const StepTrace* feed, std::vector<float>& initial_weights,
                           std::optional<InputRounding> rounding = std::nullopt) {
  const bool draw = initial_weights.empty();
  Trainer trainer(backend, build_model(model.model, model.classes), model.input, model.classes, kSelfTestSgd, 3, 0,
                  MemoryReuse::lifetime, dtype, draw ? InitialWeights::drawn() : InitialWeights::set_by_caller());
  ParameterStore& weights = trainer.parameters();
  const auto weight_bytes = static_cast<std::size_t>(weights.elements()) * sizeof(float);
  if (draw) {
    initial_weights.resize(static_cast<std::size_t>(weights.elements()));
    backend.copy_to_host(initial_weights.data(), weights.values(), weight_bytes);
  } else {
    if (initial_weights.size() != static_cast<std::size_t>(weights.elements())) {
      throw std::logic_error("the step's model has " + std::to_string(weights.elements()) +
                             " parameter values, its first draw " + std::to_string(initial_weights.size()));
    }
    backend.copy_from_host(weights.values(), initial_weights.data(), weight_bytes);
  }
  spread_images_apart(trainer);
  if (loss_scale) trainer.use_loss_scaling({*loss_scale});
  StepRecorder recorder(trainer.network(), backend, loss_scale.value_or(1.0f), feed, rounding);
  trainer.set_layer_observer(&recorder);
  trainer.compute_gradients();  // unscaled on return
  trainer.set_layer_observer(nullptr);
  // A layer's parameters together ("conv1", "bn1": weight and bias): a batch norm's bias gradient
  // (the sum of dy) can cancel to nearly zero where its scale's does not. The reference keeps them;
  // a fed step compares each with the reference's as it comes.
  auto& gradients = recorder.trace.gradients;
  const std::vector<Parameter*>& parameters = weights.parameters();
  for (std::size_t first = 0; first < parameters.size();) {
    const std::string layer = parameters[first]->name.substr(0, parameters[first]->name.rfind('.'));
    std::size_t end = first;
    std::size_t values = 0;
    for (; end < parameters.size() && parameters[end]->name.substr(0, parameters[end]->name.rfind('.')) == layer; ++end) {
      values += static_cast<std::size_t>(parameters[end]->grad.numel());
    }
    StepTrace::Entry& entry = gradients.emplace_back(
        StepTrace::Entry{"gradients of " + layer, true, {}, {}, std::nullopt, true});
    const std::size_t at = gradients.size() - 1;
    const bool twinned = feed != nullptr && at < feed->gradients.size() && feed->gradients[at].where == entry.where;
    if (!twinned) {  // the reference's, or one compare_step_traces will find unlike the reference's
      entry.output.reserve(values);
      for (std::size_t i = first; i < end; ++i) {
        const std::vector<float> got = download(backend, parameters[i]->grad);
        entry.output.insert(entry.output.end(), got.begin(), got.end());
      }
    } else {
      EntryError error(feed->gradients[at]);
      for (std::size_t i = first; i < end; ++i) error.add(download(backend, parameters[i]->grad));
      entry.error = error.error();
      entry.finite = error.finite();
    }
    first = end;
  }
  return std::move(recorder.trace);
}

// Whether every gradient a step recorded is finite (else its loss scale overflowed fp16).
bool backward_finite(const StepTrace& t) {
  const auto finite = [](const StepTrace::Entry& e) {
    return e.finite && std::all_of(e.output.begin(), e.output.end(), [](float v) { return std::isfinite(v); });
  };
  return std::all_of(t.gradients.begin(), t.gradients.end(), finite) &&
         std::all_of(t.layers.begin(), t.layers.end(), [&](const StepTrace::Entry& e) { return !e.backward || finite(e); });
}

// A max pool's backward sends each window's gradient to its maximum as the device ranks the
// window's values, rounded to the activations' type: near-ties in fp32 rank otherwise, as rounding
// flips ReLU masks, so the error grows as the square root of the unit roundoff. On an H200
// (2026-12-04) it was every half-precision model step's worst layer: 4.29e-2 in amp ResNet-50,
// through cuDNN's pooling and dlbench's own alike, 5.74e-2 in VGG16, up to 0.156 in bf16 (AlexNet).
// The reference now ranks the same rounded values (InputRounding), which took those to 1.7e-4 and
// 1.7e-3 with fp16 and bf16 emulated on the CPU; but rounded values tie exactly more often, and a
// device may break a tie otherwise than oneDNN does. Held to the bound of blocks whose masks
// rounding flips; a wrong index is off by the gradient's size.
bool ranks_rounded_values(const StepTrace::Entry& e) {
  return e.backward && e.where.ends_with("(MaxPool2d) backward");
}

// Every layer's error within `bound`, a max pool's backward within `arg_max_bound`; the first off
// named, and the worst of the rest.
SelfTestCheck compare_step_traces(const StepTrace& got, const StepTrace& want, double bound, double arg_max_bound) {
  if (got.layers.size() != want.layers.size() || got.gradients.size() != want.gradients.size()) {
    return verdict(false, "the step recorded " + std::to_string(got.layers.size()) + " layers and " +
                              std::to_string(got.gradients.size()) + " gradients, the reference " +
                              std::to_string(want.layers.size()) + " and " + std::to_string(want.gradients.size()));
  }
  std::vector<std::pair<const StepTrace::Entry*, const StepTrace::Entry*>> pairs;
  for (std::size_t i = 0; i < want.layers.size(); ++i) pairs.emplace_back(&got.layers[i], &want.layers[i]);
  for (std::size_t i = 0; i < want.gradients.size(); ++i) pairs.emplace_back(&got.gradients[i], &want.gradients[i]);
  double worst = 0, worst_arg_max = 0;
  const StepTrace::Entry* worst_at = nullptr;
  const StepTrace::Entry* worst_arg_max_at = nullptr;
  struct Off {
    const StepTrace::Entry* where;
    double error, bound;
  };
  std::optional<Off> first_off;
  for (const auto& [g, w] : pairs) {
    if (w->output.empty()) continue;  // the first layer's dx, and what a Sequential passes on
    const double e = g->error ? *g->error : step_entry_error(g->output, *w);
    const bool arg_max = arg_max_bound != bound && ranks_rounded_values(*w);
    const double limit = arg_max ? arg_max_bound : bound;
    if (!first_off && (std::isnan(e) || e > limit)) first_off = Off{w, e, limit};
    double& worst_of_kind = arg_max ? worst_arg_max : worst;
    const StepTrace::Entry*& worst_of_kind_at = arg_max ? worst_arg_max_at : worst_at;
    if (worst_of_kind_at == nullptr || std::isnan(e) || e > worst_of_kind) {
      worst_of_kind = e;
      worst_of_kind_at = w;
      if (std::isnan(e)) break;
    }
  }
  if (worst_at == nullptr) {  // only max pools' entries, or a NaN among them first
    if (worst_arg_max_at == nullptr) return verdict(false, "the step recorded nothing");
    worst = worst_arg_max;
    worst_at = worst_arg_max_at;
  }
  // The max pools' backward, where its bound is not the step's: what they reached, and against what.
  std::string arg_max_said;
  if (worst_arg_max_at != nullptr) {
    arg_max_said = "; max pools' backward at most " + format_error(worst_arg_max) + " (" + worst_arg_max_at->where +
                   "), bound " + format_error(arg_max_bound) + ": near-ties rank as rounded";
  }
  if (first_off) {
    SelfTestCheck c = bounded(first_off->error, first_off->bound, "first off: " + first_off->where->where);
    c.detail += "; worst: " + worst_at->where + " (" + format_error(worst) + ")" + arg_max_said;
    return c;
  }
  SelfTestCheck c = bounded(worst, bound, "worst: " + worst_at->where);
  c.detail += arg_max_said;
  return c;
}

}  // namespace

// The reference's traces, by model, by what the device fuses (the residual into batch norm,
// branch gradients into a convolution's backward data, convolutions with batch norms) and by the
// type its inputs are rounded to.
struct ModelStepReferences::Traces {
  std::map<std::tuple<Model, bool, bool, bool, DType>, std::optional<ReferenceStepTrace>> by_key;
  std::map<Model, std::vector<float>> initial_weights;
};

ModelStepReferences::ModelStepReferences() : traces_(std::make_unique<Traces>()) {}
ModelStepReferences::~ModelStepReferences() = default;

std::vector<ModelStep> model_steps(const std::vector<Model>& models) {
  std::vector<ModelStep> steps{model_step(Model::resnet50)};
  for (const Model model : models) {
    const bool listed = std::any_of(steps.begin(), steps.end(), [&](const ModelStep& s) { return s.model == model; });
    if (!listed && !model_info(model).sequences) steps.push_back(model_step(model));
  }
  return steps;
}

SelfTestCheck model_step_check(const ModelStep& model, Backend& device, Backend& reference, DType dtype,
                               bool loss_scaled, ModelStepBounds bounds, ModelStepReferences& references) {
  // The reference runs the layers the device runs: where the device fuses a bottleneck's add
  // and ReLU into its last batch norm, adds a branch's input gradient into the other's in a
  // convolution's backward, or fuses a bottleneck's convolutions with the batch norms between
  // them (where its engines run the fused graphs: the device is asked of each), the reference
  // composes the same from its own ops.
  const bool residual_fused = device.fuses_batch_norm_add_relu();
  const bool accumulated = device.accumulates_conv_input_grad();
  const auto options = device.options();
  const bool conv_batch_norm = options.contains("convBatchNorm") && options.at("convBatchNorm") != "separate";
  std::optional<float> scale;
  if (loss_scaled) scale = kModelStepLossScale;
  // Each layer's input rounded as the device's fed copy is, so that a layer is judged on what
  // it computes from the values it was given, as the layer-norm check's are: a batch norm over
  // a few values per channel otherwise divides its input's rounding by their spread (amp
  // InceptionV3's AuxLogits.conv1.bn, 3 images of a 1x1 map: 5.21e-2 on an H200 and fp16
  // emulated on the CPU alike, against a bound of 5e-2).
  std::optional<InputRounding> rounding;
  if (dtype != DType::fp32) rounding = InputRounding{dtype, scale.value_or(1.0f)};
  std::optional<ReferenceStepTrace>& want =
      references.traces().by_key[{model.model, residual_fused, accumulated, conv_batch_norm, dtype}];
  std::vector<float>& initial_weights = references.traces().initial_weights[model.model];
  if (!want || !answers_alike(*want, device, dtype)) {
    std::vector<FusionAnswer> answers;
    ResidualComposingBackend::ConvolutionFusion fuses;
    if (conv_batch_norm) {
      fuses = [&](FusedConv2dConfig c) -> std::optional<FusedConv2dConfig> {
        const FusionAnswer answer = answers.emplace_back(ask_fusion(device, c, dtype));
        if (!answer.fused) return std::nullopt;
        c.input_batch_norm_gradients = answer.gradients;
        return c;
      };
    }
    ResidualComposingBackend composed(reference, residual_fused, accumulated, fuses);
    StepTrace trace = model_step_trace(
        model, residual_fused || accumulated || conv_batch_norm ? static_cast<Backend&>(composed) : reference,
        DType::fp32, std::nullopt, nullptr, initial_weights, rounding);
    want = ReferenceStepTrace{std::move(trace), std::move(answers)};
  }
  const StepTrace* want_step_trace = &want->trace;
  StepTrace got = model_step_trace(model, device, dtype, scale, want_step_trace, initial_weights);
  while (scale && *scale > 1.0f && !backward_finite(got)) {
    *scale /= 2.0f;
    got = model_step_trace(model, device, dtype, scale, want_step_trace, initial_weights);
  }
  SelfTestCheck c = compare_step_traces(got, *want_step_trace, bounds.layer, bounds.arg_max);
  if (scale) c.detail += "; loss scale " + std::to_string(static_cast<long>(*scale));
  return c;
}

}  // namespace dlbench::worker
