// The self-test harness on the CPU: it passes a backend that computes right, and it catches
// one that does not — a convolution a little off, an overflow check that sees nothing, a
// communicator that does not sum — naming the check, while the other checks still pass.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cpu/cpu_backend.hpp"
#include "delegating_backend.hpp"
#include "self_test.hpp"

namespace dlbench::worker {
namespace {

using ::testing::HasSubstr;

struct OwnCpuBackend {
  CpuBackend cpu{2};
};

// The CPU backend with chosen faults.
class FaultyBackend final : private OwnCpuBackend, public DelegatingBackend {
 public:
  FaultyBackend() : DelegatingBackend(cpu) {}
  bool conv_off = false;        // convolution outputs 0.1% too large
  bool blind_overflow = false;  // unscale_and_check_finite never sees an inf or NaN

  std::string name() const override { return "faulty"; }
  std::unique_ptr<Conv2dOp> make_conv2d(const Conv2dConfig& c) override {
    auto op = inner_.make_conv2d(c);
    if (!conv_off) return op;
    return std::make_unique<OffConv>(std::move(op));
  }
  bool unscale_and_check_finite(float* g, std::int64_t n, float inverse_scale) override {
    const bool finite = inner_.unscale_and_check_finite(g, n, inverse_scale);
    return blind_overflow || finite;
  }

 private:
  class OffConv final : public Conv2dOp {
   public:
    explicit OffConv(std::unique_ptr<Conv2dOp> op) : op_(std::move(op)) {}
    void forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) override {
      op_->forward(x, w, b, y);
      if (y.dtype != DType::fp32) return;
      for (std::int64_t i = 0; i < y.numel(); ++i) y.as<float>()[i] *= 1.001f;
    }
    void backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) override { op_->backward_data(dy, w, dx); }
    void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db) override {
      op_->backward_weights(x, dy, dw, db);
    }

   private:
    std::unique_ptr<Conv2dOp> op_;
  };
};

// Two ranks as seen from rank 0: the other rank holds twice rank 0's values (what (rank + 1)
// patterns give), and `broken` drops its contribution.
class TwoRanks final : public Communicator {
 public:
  bool broken = false;
  std::string name() const override { return "fake"; }
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::vector<std::string> hosts() override { return {"a", "b"}; }
  void broadcast(float*, std::int64_t, int) override {}
  void start_allreduce(float* data, std::int64_t count, Reduction) override {
    if (!broken) std::transform(data, data + count, data, [](float v) { return 3.0f * v; });
  }
  void progress() override {}
  void complete_reductions() override {}
  void max(double* data, std::int64_t count) override {
    // The other rank's values: rank 1, and -1 for the negated one.
    if (count == 2) data[0] = std::max(data[0], 1.0);
  }
};

std::vector<SelfTestCheck> run_on(FaultyBackend& subject_backend, Communicator& comm,
                                  std::vector<std::string> precisions = {"fp32"}) {
  CpuBackend reference(2);
  SelfTestSubject subject{subject_backend, [&](const std::string&) -> std::unique_ptr<Backend> {
                            auto b = std::make_unique<FaultyBackend>();
                            b->conv_off = subject_backend.conv_off;
                            b->blind_overflow = subject_backend.blind_overflow;
                            return b;
                          },
                          std::move(precisions)};
  return run_self_test(subject, reference, comm);
}

std::vector<std::string> failed_names(const std::vector<SelfTestCheck>& checks) {
  std::vector<std::string> names;
  for (const auto& c : checks) {
    if (c.outcome == CheckOutcome::failed) names.push_back(c.precision + " " + c.name);
  }
  return names;
}

TEST(SelfTest, ACorrectBackendPassesEveryCheck) {
  FaultyBackend backend;
  NoCommunicator one;
  const auto checks = run_on(backend, one);
  EXPECT_THAT(failed_names(checks), ::testing::IsEmpty());
  // 12 layers, the loss, training; SGD, unscaling, loss scaling; the communicator.
  EXPECT_EQ(checks.size(), 18u);
  for (const auto& c : checks) EXPECT_LE(c.error, c.bound == 0 ? 0.0 : c.bound) << c.name;
}

TEST(SelfTest, AConvolutionOffByATenthOfAPercentFailsTheConvolutionChecks) {
  FaultyBackend backend;
  backend.conv_off = true;
  NoCommunicator one;
  const auto checks = run_on(backend, one);
  EXPECT_THAT(failed_names(checks),
              ::testing::IsSupersetOf({"fp32 conv 3x3 stride 1 with bias", "fp32 conv 1x1 stride 2",
                                       "fp32 conv 7x7 stride 2 (stem)"}));
  for (const auto& c : checks) {
    if (c.name.starts_with("conv")) {
      EXPECT_NEAR(c.error, 1e-3, 2e-4) << c.name;
      EXPECT_THAT(c.detail, HasSubstr("y off by")) << c.name;
    }
    if (c.name == "relu" || c.name == "linear" || c.name == "sgd update") {
      EXPECT_EQ(c.outcome, CheckOutcome::passed) << c.name;
    }
  }
}

TEST(SelfTest, AnOverflowCheckThatSeesNothingFailsTheLossScalingChecks) {
  FaultyBackend backend;
  backend.blind_overflow = true;
  NoCommunicator one;
  const auto checks = run_on(backend, one);
  EXPECT_THAT(failed_names(checks), ::testing::UnorderedElementsAre("- unscale and overflow check",
                                                                   "- loss scaling skips an overflowing step"));
  for (const auto& c : checks) {
    if (c.name == "loss scaling skips an overflowing step") {
      EXPECT_THAT(c.detail, HasSubstr("was applied"));
    }
  }
}

TEST(SelfTest, AnAllreduceThatDropsARankFails) {
  FaultyBackend backend;
  TwoRanks good, broken;
  broken.broken = true;
  EXPECT_THAT(failed_names(run_on(backend, good)), ::testing::IsEmpty());
  const auto checks = run_on(backend, broken);
  EXPECT_THAT(failed_names(checks), ::testing::ElementsAre("- allreduce over 2 ranks (fake)"));
  EXPECT_THAT(checks.back().detail, HasSubstr("sums wrong, the first at 0"));
}

TEST(SelfTest, APrecisionTheBackendCannotRunIsSkippedSayingWhy) {
  FaultyBackend backend;
  NoCommunicator one;
  const auto checks = run_on(backend, one, {"tf32", "amp"});
  ASSERT_GE(checks.size(), 2u);
  EXPECT_EQ(checks[0].outcome, CheckOutcome::skipped);
  EXPECT_THAT(checks[0].detail, HasSubstr("tensor cores"));
  EXPECT_EQ(checks[1].outcome, CheckOutcome::skipped);
  EXPECT_THAT(checks[1].detail, HasSubstr("fp16"));
  EXPECT_THAT(failed_names(checks), ::testing::IsEmpty());
}

// bf16 where the CPU has it: the half-precision path against fp32, with its floors (a layer
// that silently computed fp32 would fail them).
TEST(SelfTest, Bf16PassesWithinItsBoundsAndAboveItsFloors) {
  FaultyBackend backend;
  if (const auto why = backend.cannot_compute(DType::bf16)) GTEST_SKIP() << *why;
  NoCommunicator one;
  const auto checks = run_on(backend, one, {"bf16"});
  EXPECT_THAT(failed_names(checks), ::testing::IsEmpty());
  int floored = 0;
  for (const auto& c : checks) {
    if (c.floor > 0) {
      ++floored;
      EXPECT_GT(c.error, c.floor) << c.name;
    }
  }
  EXPECT_EQ(floored, 9);  // every layer but the three exact ones
}

}  // namespace
}  // namespace dlbench::worker
