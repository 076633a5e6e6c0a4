// Which kept weight copies the CUDA backend makes, and when (cuda/weight_copies.hpp): no device
// needed, the bookkeeping is the host's.
#include "cuda/weight_copies.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>

namespace dlbench::worker {
namespace {

constexpr std::int64_t kElements = 1024;

std::shared_ptr<const void> values() { return std::shared_ptr<const float[]>(new float[kElements]()); }
const float* at(const std::shared_ptr<const void>& v, std::int64_t offset) { return static_cast<const float*>(v.get()) + offset; }

constexpr WeightCopyPlan kNothing{};
constexpr WeightCopyPlan kFlat{.flat = true};
constexpr WeightCopyPlan kFlatThenArranged{.flat = true, .arranged = true};
constexpr WeightCopyPlan kArranged{.arranged = true};
constexpr WeightCopyPlan kRefused{.refused = true};
constexpr FilterShape k3x3{4, 2, 3, 3};

TEST(WeightCopies, TheSwitchNamesItsValues) {
  EXPECT_EQ(weight_copies(nullptr), WeightCopies::per_pass);
  EXPECT_EQ(weight_copies(""), WeightCopies::per_pass);
  EXPECT_EQ(weight_copies("kept"), WeightCopies::kept);
  EXPECT_EQ(weight_copies("per-pass"), WeightCopies::per_pass);
  try {
    weight_copies("per-step");
    ADD_FAILURE() << "per-step accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "DLBENCH_CUDA_WEIGHT_COPIES: \"per-step\" is not one of per-pass, kept");
  }
}

// A half type's copy of every parameter is made by the first pass that asks after a write, and
// by no other; a write anywhere in the values, and only there, makes it stale.
TEST(WeightCopies, AHalfCopyIsMadeOnceForEachWriteToTheValues) {
  const auto v = values();
  KeptWeightCopies kept;
  kept.bind(v, kElements);
  EXPECT_EQ(kept.plan(DType::fp16, 0, std::nullopt), kFlat);
  EXPECT_EQ(kept.plan(DType::fp16, 64, std::nullopt), kNothing);
  EXPECT_EQ(kept.plan(DType::fp16, 0, std::nullopt), kNothing);

  kept.values_changed();  // an update
  EXPECT_EQ(kept.plan(DType::fp16, 64, std::nullopt), kFlat);
  EXPECT_EQ(kept.plan(DType::fp16, 0, std::nullopt), kNothing);

  const float outside[4] = {};
  kept.wrote(outside, sizeof outside);  // a batch copied in elsewhere
  kept.wrote(at(v, kElements), 64);     // just past the end
  kept.wrote(at(v, 0), 0);
  EXPECT_EQ(kept.plan(DType::fp16, 0, std::nullopt), kNothing);
  kept.wrote(at(v, kElements - 1), sizeof(float));  // the last value
  EXPECT_EQ(kept.plan(DType::fp16, 0, std::nullopt), kFlat);
  kept.wrote(static_cast<const char*>(v.get()) - 8, 12);  // from before the start into the first value
  EXPECT_EQ(kept.plan(DType::fp16, 0, std::nullopt), kFlat);

  EXPECT_EQ(kept.plan(DType::bf16, 0, std::nullopt), kFlat);  // each type its own copy
  EXPECT_EQ(kept.plan(DType::fp16, 0, std::nullopt), kNothing);
}

// A filter transposed for channels last lives in its plain copy's place: it is made after the
// flat copy, read again while the values stay, and made again after any flat copy, which
// overwrites it. fp32 has no flat copy: its own order is the values themselves.
TEST(WeightCopies, ATransposedFilterIsMadeAfterTheFlatCopyThatOverwritesIt) {
  const auto v = values();
  KeptWeightCopies kept;
  kept.bind(v, kElements);
  EXPECT_EQ(kept.plan(DType::fp16, 128, k3x3), kFlatThenArranged);
  EXPECT_EQ(kept.plan(DType::fp16, 128, k3x3), kNothing);  // its backward-data pass
  EXPECT_EQ(kept.plan(DType::fp16, 0, std::nullopt), kNothing);
  EXPECT_EQ(kept.plan(DType::fp16, 128, k3x3), kNothing);

  kept.values_changed();
  EXPECT_EQ(kept.plan(DType::fp16, 0, std::nullopt), kFlat);
  EXPECT_EQ(kept.plan(DType::fp16, 128, k3x3), kArranged);  // the flat copy wrote over it
  EXPECT_EQ(kept.plan(DType::fp16, 128, k3x3), kNothing);

  EXPECT_EQ(kept.plan(DType::fp32, 256, k3x3), kArranged);
  EXPECT_EQ(kept.plan(DType::fp32, 256, k3x3), kNothing);
  EXPECT_EQ(kept.plan(DType::fp32, 0, std::nullopt), kNothing);
  kept.values_changed();
  EXPECT_EQ(kept.plan(DType::fp32, 256, k3x3), kArranged);
  EXPECT_EQ(kept.plan(DType::fp32, 0, std::nullopt), kNothing);
}

// One parameter is kept in one order: a pass that reads it in another copies it for itself, and
// the first order stays kept.
TEST(WeightCopies, AParameterAskedForInTwoOrdersIsKeptInTheFirst) {
  const auto v = values();
  KeptWeightCopies kept;
  kept.bind(v, kElements);
  EXPECT_EQ(kept.plan(DType::fp16, 128, k3x3), kFlatThenArranged);
  EXPECT_EQ(kept.plan(DType::fp16, 128, std::nullopt), kRefused);
  EXPECT_EQ(kept.plan(DType::fp16, 128, FilterShape{2, 4, 3, 3}), kRefused);
  EXPECT_EQ(kept.plan(DType::fp16, 128, k3x3), kNothing);
  EXPECT_EQ(kept.plan(DType::fp16, 512, std::nullopt), kNothing);
  EXPECT_EQ(kept.plan(DType::fp16, 512, k3x3), kRefused);
}

// Only a weight wholly inside the bound values has a kept copy, and none once they are freed
// (memory at the same address later is someone else's); binding again forgets every order.
TEST(WeightCopies, OnlyWeightsInsideLiveBoundValuesAreKept) {
  auto v = values();
  KeptWeightCopies kept;
  EXPECT_EQ(kept.offset_of(at(v, 0), 1), std::nullopt);  // nothing bound
  kept.bind(v, kElements);
  EXPECT_EQ(kept.offset_of(at(v, 0), kElements), 0);
  EXPECT_EQ(kept.offset_of(at(v, 192), 64), 192);
  EXPECT_EQ(kept.offset_of(at(v, 1000), 24), 1000);
  EXPECT_EQ(kept.offset_of(at(v, 1000), 25), std::nullopt);  // runs past the end
  EXPECT_EQ(kept.offset_of(at(v, 0) - 1, 2), std::nullopt);
  EXPECT_EQ(kept.offset_of(static_cast<const char*>(v.get()) + 2, 1), std::nullopt);  // not on a float
  EXPECT_EQ(kept.offset_of(at(v, 0), 0), std::nullopt);
  const float elsewhere[8] = {};
  EXPECT_EQ(kept.offset_of(elsewhere, 8), std::nullopt);

  EXPECT_EQ(kept.plan(DType::fp16, 128, k3x3), kFlatThenArranged);
  const auto again = values();
  kept.bind(again, kElements);
  EXPECT_EQ(kept.plan(DType::fp16, 128, std::nullopt), kFlat);  // neither stale order nor copy

  EXPECT_EQ(kept.offset_of(at(v, 0), 1), std::nullopt);  // the first values, no longer bound
  kept.bind(v, kElements);
  const float* first = at(v, 0);
  EXPECT_EQ(kept.offset_of(first, 1), 0);
  v.reset();
  EXPECT_EQ(kept.offset_of(first, 1), std::nullopt);
}

}  // namespace
}  // namespace dlbench::worker
