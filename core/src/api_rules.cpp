#include "dlbench/core/api_rules.hpp"

#include <charconv>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "dlbench/core/benchmark_run.hpp"
#include "dlbench/core/enums.hpp"
#include "dlbench/core/pod_ownership.hpp"

namespace dlbench {
namespace {

template <typename E>
std::vector<std::string> spellings() {
  std::vector<std::string> out;
  for (const auto value : EnumSpellings<E>::values) out.emplace_back(value);
  return out;
}

FieldRule integer_rule(std::string path, IntBounds b, std::optional<nlohmann::json> def = {}) {
  FieldRule rule;
  rule.path = std::move(path);
  rule.minimum = static_cast<double>(b.min);
  rule.maximum = static_cast<double>(b.max);
  rule.default_value = std::move(def);
  return rule;
}

FieldRule real_rule(std::string path, RealBounds b, std::optional<double> def) {
  FieldRule rule;
  rule.path = std::move(path);
  rule.minimum = b.min;
  rule.maximum = b.max;
  rule.exclusive_minimum = b.exclusive_min;
  rule.exclusive_maximum = b.exclusive_max;
  if (def) rule.default_value = *def;
  return rule;
}

// A number with a floor and no ceiling (status counts and scales).
FieldRule floor_rule(std::string path, double minimum, bool exclusive) {
  FieldRule rule;
  rule.path = std::move(path);
  rule.minimum = minimum;
  rule.exclusive_minimum = exclusive;
  return rule;
}

template <typename E>
FieldRule enum_rule(std::string path, std::optional<nlohmann::json> def = {}) {
  FieldRule rule;
  rule.path = std::move(path);
  rule.allowed = spellings<E>();
  rule.default_value = std::move(def);
  return rule;
}

FieldRule object_default(std::string path) {
  FieldRule rule;
  rule.path = std::move(path);
  rule.default_value = nlohmann::json::object();
  return rule;
}

// A toleration's operator, effect and seconds, wherever a list of them is (`item`: the list's
// element path, "...tolerations[]").
void add_toleration_rules(std::vector<FieldRule>& r, const std::string& item) {
  r.push_back(enum_rule<TolerationOperator>(item + ".operator", nlohmann::json("Equal")));
  r.push_back(enum_rule<TaintEffect>(item + ".effect"));
  FieldRule seconds;
  seconds.path = item + ".tolerationSeconds";
  seconds.minimum = 0.0;
  r.push_back(seconds);
}

// Every list of the spec must have at least one entry when it is given.
FieldRule list_rule(std::string path, std::int64_t max_items, std::optional<nlohmann::json> def = {}) {
  FieldRule rule;
  rule.path = std::move(path);
  rule.min_items = 1;
  rule.max_items = max_items;
  rule.default_value = std::move(def);
  return rule;
}

std::vector<FieldRule> build_rules() {
  using nlohmann::json;
  std::vector<FieldRule> r;
  FieldRule name;
  name.path = "metadata.name";
  name.max_length = bounds::kMaxNameLength;
  r.push_back(name);

  r.push_back(enum_rule<Model>("spec.model"));
  r.push_back(enum_rule<Engine>("spec.engine", json(to_string(Engine::native))));
  r.push_back(list_rule("spec.command", bounds::kMaxCommandArgs));
  r.push_back(object_default("spec.data"));
  r.push_back(enum_rule<DataSource>("spec.data.source", json(to_string(DataSource::synthetic))));
  r.push_back(integer_rule("spec.data.imageSize", bounds::kImageSize, json(defaults::kImageSize)));
  r.push_back(integer_rule("spec.data.imageHeight", bounds::kImageSize));
  r.push_back(integer_rule("spec.data.imageWidth", bounds::kImageSize));
  r.push_back(integer_rule("spec.data.sequenceLength", bounds::kSequenceLength));
  r.push_back(integer_rule("spec.data.decodeThreads", bounds::kDecodeThreads, json(defaults::kDecodeThreads)));
  r.push_back(integer_rule("spec.data.prefetchBatches", bounds::kPrefetchBatches, json(defaults::kPrefetchBatches)));

  r.push_back(list_rule("spec.matrix.nodes", bounds::kMaxMatrixValues, json::array({1})));
  r.push_back(integer_rule("spec.matrix.nodes[]", bounds::kNodes));
  r.push_back(list_rule("spec.matrix.gpusPerNode", bounds::kMaxMatrixValues, json::array({1})));
  r.push_back(integer_rule("spec.matrix.gpusPerNode[]", bounds::kGpusPerNode));
  r.push_back(list_rule("spec.matrix.batchSizePerDevice", bounds::kMaxMatrixValues));
  r.push_back(integer_rule("spec.matrix.batchSizePerDevice[]", bounds::kBatchSizePerDevice));
  r.push_back(list_rule("spec.matrix.precision", bounds::kMaxMatrixValues));
  r.push_back(enum_rule<Precision>("spec.matrix.precision[]"));

  r.push_back(list_rule("spec.cases", bounds::kMaxExplicitCases));
  r.push_back(integer_rule("spec.cases[].nodes", bounds::kNodes, json(1)));
  r.push_back(integer_rule("spec.cases[].gpusPerNode", bounds::kGpusPerNode, json(1)));
  r.push_back(integer_rule("spec.cases[].batchSizePerDevice", bounds::kBatchSizePerDevice));
  r.push_back(enum_rule<Precision>("spec.cases[].precision"));

  r.push_back(object_default("spec.methodology"));
  r.push_back(integer_rule("spec.methodology.warmupSteps", bounds::kWarmupSteps, json(defaults::kWarmupSteps)));
  r.push_back(integer_rule("spec.methodology.measureSteps", bounds::kMeasureSteps, json(defaults::kMeasureSteps)));
  r.push_back(integer_rule("spec.methodology.repeats", bounds::kRepeats, json(defaults::kRepeats)));
  r.push_back(enum_rule<Statistic>("spec.methodology.statistic", json(to_string(Statistic::median))));
  r.push_back(object_default("spec.methodology.stability"));
  r.push_back(real_rule("spec.methodology.stability.maxCv", bounds::kMaxCv, std::nullopt));  // by device
  r.push_back(integer_rule("spec.methodology.stability.extraRepeats", bounds::kExtraRepeats,
                           json(defaults::kExtraRepeats)));
  FieldRule include_unstable;
  include_unstable.path = "spec.methodology.stability.includeUnstable";
  include_unstable.default_value = false;
  r.push_back(include_unstable);

  r.push_back(object_default("spec.optimizer"));
  r.push_back(enum_rule<OptimizerName>("spec.optimizer.name", json(to_string(OptimizerName::sgd))));
  r.push_back(real_rule("spec.optimizer.learningRate", bounds::kLearningRate, std::nullopt));  // by model
  r.push_back(real_rule("spec.optimizer.momentum", bounds::kMomentum, defaults::kMomentum));
  r.push_back(real_rule("spec.optimizer.weightDecay", bounds::kWeightDecay, defaults::kWeightDecay));
  r.push_back(integer_rule("spec.optimizer.learningRateWarmupSteps", bounds::kLearningRateWarmupSteps, json(0)));

  r.push_back(object_default("spec.worker"));
  FieldRule gpu;
  gpu.path = "spec.worker.gpuResource";
  gpu.default_value = defaults::kGpuResource;
  r.push_back(gpu);
  r.push_back(integer_rule("spec.worker.rdma.perNode", bounds::kRdmaPerNode, json(defaults::kRdmaPerNode)));
  FieldRule rdma_required;
  rdma_required.path = "spec.worker.rdma.required";
  rdma_required.default_value = true;
  r.push_back(rdma_required);
  add_toleration_rules(r, "spec.worker.tolerations[]");
  r.push_back(enum_rule<GangScheduler>("spec.worker.gang.scheduler"));
  r.push_back(enum_rule<QosClass>("spec.worker.qosClass", json(to_string(QosClass::Burstable))));

  // spec.podTemplateOverrides (pod_overrides.cpp): the pods' roles, and the same tolerations.
  for (const char* path : {"spec.podTemplateOverrides[].targetJobs[].name", "spec.podTemplateOverrides[].spec.containers[].name"}) {
    FieldRule role;
    role.path = path;
    role.allowed = {std::string(kWorkerRole), std::string(kLauncherRole)};
    r.push_back(role);
  }
  add_toleration_rules(r, "spec.podTemplateOverrides[].spec.tolerations[]");

  r.push_back(object_default("spec.limits"));
  r.push_back(integer_rule("spec.limits.caseTimeoutSeconds", bounds::kCaseTimeoutSeconds,
                           json(defaults::kCaseTimeoutSeconds)));
  r.push_back(integer_rule("spec.limits.backoffLimit", bounds::kBackoffLimit, json(defaults::kBackoffLimit)));

  FieldRule self_test;
  self_test.path = "spec.preflight.selfTest";
  self_test.default_value = false;
  r.push_back(self_test);

  // Status is written by the operator only; its enums are part of the contract all the same.
  r.push_back(enum_rule<Phase>("status.phase"));
  r.push_back(enum_rule<ConditionType>("status.conditions[].type"));
  r.push_back(enum_rule<ConditionStatus>("status.conditions[].status"));
  r.push_back(enum_rule<CaseState>("status.results[].state"));
  r.push_back(enum_rule<CaseState>("status.preflight.state"));
  r.push_back(enum_rule<Precision>("status.preflight.case.precision"));
  r.push_back(enum_rule<Precision>("status.results[].case.precision"));
  r.push_back(enum_rule<DataSource>("status.results[].input.source"));
  r.push_back(enum_rule<InputVerdict>("status.results[].input.verdict"));
  r.push_back(enum_rule<InterferenceVerdict>("status.results[].interference.verdict"));
  r.push_back(enum_rule<StabilityVerdict>("status.results[].stability.verdict"));
  r.push_back(enum_rule<GpuThrottleReason>("status.results[].interference.gpu.throttleReasons[]"));
  r.push_back(enum_rule<OptimizerName>("status.results[].optimizer.name"));
  r.push_back(list_rule("status.results[].lossAfterRepeats", bounds::kMaxRepeatsRun));
  // amp's loss scaling (the decoder also holds skippedSteps to steps).
  r.push_back(floor_rule("status.results[].lossScaling.finalScale", 0, true));
  r.push_back(floor_rule("status.results[].lossScaling.skippedSteps", 0, false));
  r.push_back(floor_rule("status.results[].lossScaling.steps", 1, false));
  FieldRule overflow;  // the worker's trace of the first overflow after the repeats
  overflow.path = "status.results[].lossScaling.overflow";
  overflow.max_length = static_cast<std::int64_t>(kLossScalingOverflowMaxLength);
  r.push_back(overflow);
  // A multi-rank case's gradient reduction (the decoder holds the same floors).
  r.push_back(floor_rule("status.results[].communication.gradientBytes", 1, false));
  r.push_back(floor_rule("status.results[].communication.buckets", 1, false));
  for (const char* positive : {"allreduceSeconds", "busBandwidth", "stepSeconds", "stepSecondsWithoutReduction"}) {
    r.push_back(floor_rule(std::string("status.results[].communication.") + positive, 0, true));
  }
  r.push_back(real_rule("status.results[].communication.exposedShare", bounds::kExposedShare, std::nullopt));
  return r;
}

}  // namespace

const std::vector<FieldRule>& api_field_rules() {
  static const std::vector<FieldRule> rules = build_rules();
  return rules;
}

std::optional<std::int64_t> whole_number(std::string_view text, IntBounds bounds) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < bounds.min ||
      value > bounds.max) {
    return std::nullopt;
  }
  return value;
}

std::optional<double> real_number(std::string_view text, RealBounds bounds) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !bounds.contains(value)) {
    return std::nullopt;  // contains() is false for NaN; the bounds are finite, so are the values inside
  }
  return value;
}

std::string RealBounds::describe() const {
  const auto number = [](double v) {
    std::ostringstream out;
    out << v;
    return out.str();
  };
  return (exclusive_min ? "greater than " : "at least ") + number(min) + " and " +
         (exclusive_max ? "less than " : "at most ") + number(max);
}

MinImageSize min_image_size(Model model) {
  switch (model) {
    case Model::inception_v3: return {bounds::kInceptionV3MinImageSize, "its auxiliary classifier"};
    case Model::alexnet: return {bounds::kAlexNetMinImageSize, "its last max pool"};
    case Model::bert_base: return {0, "nothing (it reads token sequences)"};
    case Model::resnet50:
    case Model::resnet152:
    case Model::vgg16:
    case Model::deeplabv3plus: break;
  }
  return {bounds::kImageSize.min, "its five halvings"};
}

std::int64_t network_parameter_count(Model model) {
  switch (model) {
    case Model::resnet50: return 25'557'032;
    case Model::resnet152: return 60'192'808;
    case Model::vgg16: return 138'357'544;
    case Model::alexnet: return 61'100'840;
    case Model::inception_v3: return 27'161'264;
    case Model::deeplabv3plus: return 40'351'667;
    case Model::bert_base: return 110'106'428;
  }
  return 0;
}

std::string format_learning_rate(double learning_rate) {
  std::ostringstream out;
  out << std::setprecision(6) << learning_rate;
  return out.str();
}

std::string describe_optimizer(OptimizerName optimizer, double learning_rate) {
  return std::string(to_string(optimizer)) + " at learning rate " + format_learning_rate(learning_rate);
}

std::string describe_learning_rate_warmup(std::int64_t warmup_steps) {
  if (warmup_steps == 0) return "";
  return ", reached linearly over the first " + std::to_string(warmup_steps) + (warmup_steps == 1 ? " update" : " updates");
}

std::string describe_optimizer(OptimizerName optimizer, double learning_rate, std::int64_t warmup_steps) {
  return describe_optimizer(optimizer, learning_rate) + describe_learning_rate_warmup(warmup_steps);
}

LearningRateRecipe learning_rate_recipe(Model model, OptimizerName optimizer) {
  constexpr std::int64_t kImageNetBatch = 256;  // torchvision's 8 GPUs x 32; He et al.'s and Goyal et al.'s base
  switch (optimizer) {
    case OptimizerName::sgd:
      switch (model) {
        case Model::alexnet:
        case Model::vgg16:
        case Model::bert_base:
          return {0.01, kImageNetBatch};
        case Model::deeplabv3plus:
          return {0.007, 16};
        case Model::resnet50:
        case Model::resnet152:
        case Model::inception_v3:
          return {0.1, kImageNetBatch};
      }
      break;
    case OptimizerName::adamw:
      return {model == Model::bert_base ? 1e-4 : 1e-3, 0};
    case OptimizerName::lamb:
      return {1e-3, 0};
  }
  return {0.1, kImageNetBatch};  // not reached: every enumerator is handled above
}

double default_learning_rate(Model model, OptimizerName optimizer, std::int64_t global_batch) {
  const LearningRateRecipe recipe = learning_rate_recipe(model, optimizer);
  if (recipe.global_batch == 0 || global_batch >= recipe.global_batch || global_batch <= 0) return recipe.rate;
  return recipe.rate * static_cast<double>(global_batch) / static_cast<double>(recipe.global_batch);
}

std::string describe_learning_rate_recipe(const LearningRateRecipe& recipe) {
  const std::string rate = format_learning_rate(recipe.rate);
  if (recipe.global_batch == 0) return rate + " at every batch";
  return rate + " at a global batch of " + std::to_string(recipe.global_batch) + " and linearly less below it";
}

}  // namespace dlbench
