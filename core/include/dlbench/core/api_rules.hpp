// Bounds and defaults of the BenchmarkRun API: the single C++ source of truth. The decoder
// enforces them, apply_defaults() applies them, and a test proves that crds/benchmarkrun.yaml
// declares exactly the same enums, minimums, maximums and defaults.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "dlbench/core/enums.hpp"

namespace dlbench {

struct IntBounds {
  std::int64_t min;
  std::int64_t max;
};

// `text` as a whole decimal number within `bounds` (no sign but '-', no spaces, no fraction),
// or nullopt: the one reading of numbers that arrive as text (environment variables, flags,
// marker lines).
std::optional<std::int64_t> whole_number(std::string_view text, IntBounds bounds);

struct RealBounds {
  double min;
  double max;
  bool exclusive_min = false;
  bool exclusive_max = false;

  bool contains(double v) const {
    return (exclusive_min ? v > min : v >= min) && (exclusive_max ? v < max : v <= max);  // false for NaN
  }
  // "greater than 0 and at most 100", as errors give the allowed range.
  std::string describe() const;
};

// `text` as a finite number within `bounds` (from_chars' reading: no spaces, no sign but '-'), or
// nullopt: whole_number's twin for the reals that arrive as text (environment variables, facts).
std::optional<double> real_number(std::string_view text, RealBounds bounds);

namespace bounds {
inline constexpr IntBounds kNodes{1, 1024};
inline constexpr IntBounds kGpusPerNode{1, 64};
inline constexpr IntBounds kBatchSizePerDevice{1, 65536};
// ResNet and VGG halve the image five times; below 32 pixels nothing is left to pool.
inline constexpr IntBounds kImageSize{32, 2048};
// InceptionV3's auxiliary classifier (a 5×5 convolution on Mixed_6e's output) needs 299×299 images.
inline constexpr int kInceptionV3MinImageSize = 299;
// AlexNet's 11×11 stride-4 convolution and first two max pools leave 2×2 of a 62-pixel image to
// its last 3×3 max pool: 63 is its smallest side (as torchvision's alexnet).
inline constexpr int kAlexNetMinImageSize = 63;
// Tokens per sequence of a transformer (bert-base): its position table has 512 rows; 8 leaves
// [CLS] A [SEP] B [SEP] room for the masked words.
inline constexpr IntBounds kSequenceLength{8, 512};
inline constexpr IntBounds kWarmupSteps{0, 100000};
inline constexpr IntBounds kMeasureSteps{1, 1000000};
inline constexpr IntBounds kRepeats{1, 1000};
// methodology.stability: a cv is a share of the mean; more repeats than that cost more than they tell.
inline constexpr RealBounds kMaxCv{0.0, 1.0, true, false};
inline constexpr IntBounds kExtraRepeats{0, 1000};
// Every repeat a case can run: its repeats and as many extra ones (a loss after each).
inline constexpr std::int64_t kMaxRepeatsRun = kRepeats.max + kExtraRepeats.max;
inline constexpr IntBounds kCaseTimeoutSeconds{1, 7 * 24 * 3600};
inline constexpr IntBounds kBackoffLimit{0, 10};
inline constexpr IntBounds kRdmaPerNode{1, 64};
inline constexpr IntBounds kDecodeThreads{1, 256};
inline constexpr IntBounds kPrefetchBatches{1, 64};
inline constexpr std::size_t kMaxDataPathLength = 4096;
inline constexpr RealBounds kLearningRate{0.0, 100.0, true, false};
inline constexpr RealBounds kMomentum{0.0, 1.0, false, true};  // 1 would never forget a gradient
inline constexpr RealBounds kWeightDecay{0.0, 1.0};
// Updates over which the learning rate rises linearly to its value (0: from the first update on).
inline constexpr IntBounds kLearningRateWarmupSteps{0, 1000000};
// Status: the share of a multi-rank case's step its gradient reduction added.
inline constexpr RealBounds kExposedShare{0.0, 1.0};
inline constexpr std::int64_t kMaxMatrixValues = 32;  // per matrix axis
// Each explicit case adds at most one baseline, so 500 cases never plan more than 1,000; the
// CRD can then check the planned count of a matrix with one CEL rule and of cases with maxItems.
inline constexpr std::int64_t kMaxExplicitCases = 500;
inline constexpr std::int64_t kMaxPlannedCases = 1000;  // after baselines are added
inline constexpr std::int64_t kMaxCommandArgs = 256;
inline constexpr std::int64_t kMaxNameLength = 63;  // a DNS-1123 label: children prefix it
inline constexpr std::size_t kMaxCommandArgLength = 4096;
inline constexpr std::size_t kMaxImageLength = 512;
inline constexpr std::size_t kMaxEnvNameLength = 256;
inline constexpr std::size_t kMaxEnvValueLength = 32768;
inline constexpr std::size_t kMaxNodeSelectorEntries = 64;
inline constexpr std::size_t kMaxMetadataEntries = 4096;  // labels or annotations of the BenchmarkRun itself
}  // namespace bounds

namespace defaults {
inline constexpr int kImageSize = 224;
inline constexpr int kSequenceLength = 128;  // DLPerf's BERT phase 1
inline constexpr int kWarmupSteps = 20;
inline constexpr int kMeasureSteps = 100;
inline constexpr int kRepeats = 7;
inline constexpr int kExtraRepeats = 7;
// The learning rate has no single default: see default_learning_rate.
inline constexpr double kMomentum = 0.9;
inline constexpr double kWeightDecay = 1e-4;
inline constexpr const char* kGpuResource = "nvidia.com/gpu";
inline constexpr int kCaseTimeoutSeconds = 3600;
inline constexpr int kBackoffLimit = 1;
inline constexpr int kRdmaPerNode = 1;
inline constexpr int kDecodeThreads = 4;
inline constexpr int kPrefetchBatches = 2;
}  // namespace defaults

// One constrained field of the API, in a path notation that maps 1:1 onto the CRD's
// OpenAPI schema: "spec.matrix.precision[]" is properties.spec.properties.matrix
// .properties.precision.items.
struct FieldRule {
  std::string path;
  std::vector<std::string> allowed;  // enum, empty when not an enum
  std::optional<double> minimum;
  std::optional<double> maximum;
  bool exclusive_minimum = false;
  bool exclusive_maximum = false;
  std::optional<std::int64_t> min_items;
  std::optional<std::int64_t> max_items;
  std::optional<std::int64_t> max_length;
  std::optional<nlohmann::json> default_value;
};

// Every enum, bound and default of the spec, parents before children.
const std::vector<FieldRule>& api_field_rules();

// spec.optimizer.learningRate when unset (and dlbench-worker's --learning-rate): the model's own
// recipe for that optimizer, so that the embedded default trains instead of diverging (at one
// rate for all, 0.1, VGG16's loss turned NaN within ten steps and BERT's rose above its start).
//   sgd:   ResNets and InceptionV3 0.1 (Goyal et al.; torchvision's recipe), AlexNet and VGG16
//          0.01 (torchvision's recipe), BERT-base 0.01, each at a global batch of 256;
//          DeepLabV3+ 0.007 at 16 (its paper);
//   adamw: BERT-base 1e-4 (BERT's paper), the CNNs 1e-3 (Adam's paper and PyTorch's default);
//   lamb:  1e-3 (apex FusedLAMB's and torch-optimizer's default).
// SGD's rate follows the linear scaling rule (Goyal et al.) below the recipe's global batch: at
// 32 samples ResNet-152 at 0.1 went from a loss of 7.1 to 20.1 on an H200, and ResNet-152 at 8 on
// the CPU to 19.7. Above the recipe's batch it stays the recipe's rate: scaling up needs a warm-up
// schedule a benchmark's few steps do not have, and a diverged case publishes nothing. AdamW and
// LAMB normalise their steps and keep the recipe's rate at every batch.
struct LearningRateRecipe {
  double rate = 0;
  std::int64_t global_batch = 0;  // the batch `rate` is for; 0: the same rate at every batch
};
LearningRateRecipe learning_rate_recipe(Model model, OptimizerName optimizer);
double default_learning_rate(Model model, OptimizerName optimizer, std::int64_t global_batch);
// "0.1 at a global batch of 256 and linearly less below it" or "0.001 at every batch".
std::string describe_learning_rate_recipe(const LearningRateRecipe& recipe);

// The smallest side (of the height and of the width) an image model trains on: what its layers
// leave to pool (bounds::kImageSize.min for most; 0 for a sequence model, which has no image).
// Core refuses a spec below it, the CRD's rules do, and the worker's model catalog takes it.
struct MinImageSize {
  int pixels;
  std::string_view needed_by;  // "its auxiliary classifier": what needs the size, for messages
};
MinImageSize min_image_size(Model model);

// The trainable parameters of the network dlbench-worker trains for `model`, whatever the image
// size: torchvision's counts for the classifiers (1,000 classes; inception_v3 with its auxiliary
// classifier), DeepLabV3+ with 19 classes, BERT-base with its decoder tied to the word
// embeddings. Under engine: command a script that states the fact `parameters` is held to it, so
// that both engines time the same network; the worker's tests build each model against it.
std::int64_t network_parameter_count(Model model);

// "sgd at learning rate 0.01": how a run or a case trains, in the CLI's and the worker's words.
// A learning rate as every summary, table and message prints it: 6 significant digits
// ("0.003125", "3.90625e-05").
std::string format_learning_rate(double learning_rate);
std::string describe_optimizer(OptimizerName optimizer, double learning_rate);
// ", reached linearly over the first 100 updates" (nothing without a warm-up), and the two together.
std::string describe_learning_rate_warmup(std::int64_t warmup_steps);
std::string describe_optimizer(OptimizerName optimizer, double learning_rate, std::int64_t warmup_steps);

}  // namespace dlbench
