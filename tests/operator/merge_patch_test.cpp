// Merge patches between two statuses: applying the patch to the old document (RFC 7386, as the
// API server does) must give the new one, removed fields included.
#include <gtest/gtest.h>

#include "merge_patch.hpp"

namespace dlbench::operator_ {
namespace {

using nlohmann::json;

TEST(MergePatch, ClearsRemovedFieldsWithNull) {
  const json before = {{"phase", "Running"}, {"progress", {{"currentCase", "1x2"}, {"completedCases", 1}}}};
  const json after = {{"phase", "Succeeded"}, {"progress", {{"completedCases", 2}}}};
  const json patch = merge_patch_between(before, after);
  EXPECT_EQ(patch, json({{"phase", "Succeeded"}, {"progress", {{"currentCase", nullptr}, {"completedCases", 2}}}}));
  json applied = before;
  applied.merge_patch(patch);
  EXPECT_EQ(applied, after);
}

TEST(MergePatch, SendsNothingWhenNothingChanged) {
  const json status = {{"phase", "Running"}, {"results", json::array({{{"state", "Succeeded"}}})}};
  EXPECT_TRUE(merge_patch_between(status, status).empty());
}

TEST(MergePatch, ReplacesArraysWhole) {
  const json before = {{"results", json::array({1, 2})}, {"best", {{"case", "a"}}}};
  const json after = {{"results", json::array({1, 2, 3})}};
  const json patch = merge_patch_between(before, after);
  EXPECT_EQ(patch, json({{"results", {1, 2, 3}}, {"best", nullptr}}));
  json applied = before;
  applied.merge_patch(patch);
  EXPECT_EQ(applied, after);
}

TEST(MergePatch, FromNothingIsTheWholeDocument) {
  const json after = {{"phase", "Pending"}};
  EXPECT_EQ(merge_patch_between(json::object(), after), after);
}

}  // namespace
}  // namespace dlbench::operator_
