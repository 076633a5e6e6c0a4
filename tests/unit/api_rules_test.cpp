// The rule table is self-consistent: every default satisfies its own rule, and the C++
// struct initialisers agree with the table (so a default-constructed spec means the same
// thing as a defaulted document).
#include <limits>
#include <set>

#include <gtest/gtest.h>

#include "dlbench/core/api_rules.hpp"
#include "dlbench/core/benchmark_run.hpp"

namespace dlbench {
namespace {

TEST(ApiRules, PathsAreUnique) {
  std::set<std::string> seen;
  for (const auto& rule : api_field_rules()) EXPECT_TRUE(seen.insert(rule.path).second) << rule.path;
}

TEST(ApiRules, DefaultsSatisfyTheirOwnRule) {
  for (const auto& rule : api_field_rules()) {
    if (!rule.default_value) continue;
    const auto& def = *rule.default_value;
    if (!rule.allowed.empty()) {
      ASSERT_TRUE(def.is_string()) << rule.path;
      EXPECT_NE(std::find(rule.allowed.begin(), rule.allowed.end(), def.get<std::string>()), rule.allowed.end())
          << rule.path;
    }
    if (def.is_number()) {
      const double v = def.get<double>();
      if (rule.minimum) {
        EXPECT_TRUE(rule.exclusive_minimum ? v > *rule.minimum : v >= *rule.minimum) << rule.path;
      }
      if (rule.maximum) {
        EXPECT_TRUE(rule.exclusive_maximum ? v < *rule.maximum : v <= *rule.maximum) << rule.path;
      }
    }
  }
}

TEST(ApiRules, StructInitialisersAgreeWithTable) {
  const BenchmarkRunSpec spec;
  const auto default_of = [](const std::string& path) {
    for (const auto& rule : api_field_rules()) {
      if (rule.path == path && rule.default_value) return *rule.default_value;
    }
    ADD_FAILURE() << "no default for " << path;
    return nlohmann::json();
  };
  EXPECT_EQ(default_of("spec.engine"), to_string(spec.engine));
  EXPECT_EQ(default_of("spec.data.source"), to_string(spec.data.source));
  EXPECT_EQ(default_of("spec.data.imageSize"), spec.data.image_size);
  EXPECT_EQ(default_of("spec.methodology.warmupSteps"), spec.methodology.warmup_steps);
  EXPECT_EQ(default_of("spec.methodology.measureSteps"), spec.methodology.measure_steps);
  EXPECT_EQ(default_of("spec.methodology.repeats"), spec.methodology.repeats);
  EXPECT_EQ(default_of("spec.methodology.statistic"), to_string(spec.methodology.statistic));
  EXPECT_EQ(default_of("spec.optimizer.name"), to_string(spec.optimizer.name));
  for (const auto& rule : api_field_rules()) {  // by model and optimizer: no one default for the CRD
    if (rule.path == "spec.optimizer.learningRate") {
      EXPECT_FALSE(rule.default_value.has_value());
    }
  }
  EXPECT_EQ(default_of("spec.optimizer.momentum"), spec.optimizer.momentum);
  EXPECT_EQ(default_of("spec.optimizer.weightDecay"), spec.optimizer.weight_decay);
  EXPECT_EQ(default_of("spec.worker.gpuResource"), spec.worker.gpu_resource);
  EXPECT_EQ(default_of("spec.limits.caseTimeoutSeconds"), spec.limits.case_timeout_seconds);
  EXPECT_EQ(default_of("spec.limits.backoffLimit"), spec.limits.backoff_limit);
  EXPECT_EQ(default_of("spec.worker.rdma.perNode"), RdmaSpec{}.per_node);
}

}  // namespace
}  // namespace dlbench

namespace dlbench {
namespace {

TEST(WholeNumber, DecimalDigitsWithinBoundsOnly) {
  EXPECT_EQ(whole_number("0", {0, 10}), 0);
  EXPECT_EQ(whole_number("-3", {-5, 5}), -3);
  EXPECT_EQ(whole_number("65536", bounds::kBatchSizePerDevice), 65536);
  EXPECT_EQ(whole_number("9223372036854775807", {1, std::numeric_limits<std::int64_t>::max()}),
            std::numeric_limits<std::int64_t>::max());
  for (const char* bad : {"", " 5", "5 ", "+5", "5.0", "0x10", "1e3", "12abc", "9223372036854775808", "65537", "0"}) {
    EXPECT_FALSE(whole_number(bad, {1, 65536})) << bad;
  }
}

TEST(RealNumber, FiniteNumbersWithinBoundsWhoseEndsMayBeExclusive) {
  EXPECT_EQ(real_number("0.0001", bounds::kLearningRate), 0.0001);
  EXPECT_EQ(real_number("1e-3", bounds::kLearningRate), 0.001);
  EXPECT_EQ(real_number("100", bounds::kLearningRate), 100.0);
  EXPECT_EQ(real_number("0", bounds::kMomentum), 0.0);
  for (const char* bad : {"", "0", "100.5", " 0.1", "0.1 ", "+0.1", "0.1x", "nan", "inf", "1e999"}) {
    EXPECT_FALSE(real_number(bad, bounds::kLearningRate)) << bad;
  }
  EXPECT_FALSE(real_number("1", bounds::kMomentum)) << "an exclusive maximum";
  EXPECT_EQ(bounds::kLearningRate.describe(), "greater than 0 and at most 100");
  EXPECT_EQ(bounds::kMomentum.describe(), "at least 0 and less than 1");
}

}  // namespace
// SGD's default follows the linear scaling rule below the recipe's global batch and stops at
// the recipe's rate above it; AdamW and LAMB keep the recipe's rate at every batch.
TEST(LearningRateRecipe, SgdScalesDownLinearlyAndNeverUpAdaptiveOptimizersNever) {
  EXPECT_DOUBLE_EQ(default_learning_rate(Model::resnet152, OptimizerName::sgd, 256), 0.1);
  EXPECT_DOUBLE_EQ(default_learning_rate(Model::resnet152, OptimizerName::sgd, 255), 0.1 * 255 / 256);
  EXPECT_DOUBLE_EQ(default_learning_rate(Model::resnet152, OptimizerName::sgd, 1), 0.1 / 256);
  EXPECT_DOUBLE_EQ(default_learning_rate(Model::resnet152, OptimizerName::sgd, 65536), 0.1);
  EXPECT_DOUBLE_EQ(default_learning_rate(Model::deeplabv3plus, OptimizerName::sgd, 4), 0.007 / 4);
  EXPECT_DOUBLE_EQ(default_learning_rate(Model::bert_base, OptimizerName::adamw, 1), 1e-4);
  EXPECT_DOUBLE_EQ(default_learning_rate(Model::vgg16, OptimizerName::lamb, 4096), 1e-3);
  EXPECT_EQ(describe_learning_rate_recipe(learning_rate_recipe(Model::resnet50, OptimizerName::sgd)),
            "0.1 at a global batch of 256 and linearly less below it");
  EXPECT_EQ(describe_learning_rate_recipe(learning_rate_recipe(Model::bert_base, OptimizerName::adamw)),
            "0.0001 at every batch");
  // Every model and optimizer has a recipe within the API's bounds, at any batch it admits.
  for (const Model model : {Model::resnet50, Model::resnet152, Model::vgg16, Model::alexnet, Model::inception_v3,
                            Model::deeplabv3plus, Model::bert_base}) {
    for (const OptimizerName optimizer : {OptimizerName::sgd, OptimizerName::adamw, OptimizerName::lamb}) {
      for (const std::int64_t batch : {std::int64_t{1}, std::int64_t{256}, std::int64_t{1} << 30}) {
        const double rate = default_learning_rate(model, optimizer, batch);
        EXPECT_TRUE(bounds::kLearningRate.contains(rate)) << to_string(model) << " " << to_string(optimizer) << " " << batch;
      }
    }
  }
}

}  // namespace dlbench
