// The elementwise maps' split between 16-byte packs and a scalar tail, checked without a GPU.
#include <gtest/gtest.h>

#include <cstdint>

#include "cuda/vector_split.hpp"

namespace dlbench::worker {
namespace {

const void* at(std::uintptr_t address) { return reinterpret_cast<const void*>(address); }

TEST(VectorSplit, AlignedHalvesGoEightToAPackWithTheRestOneByOne) {
  const VectorSplit s = vector_split(1003, 2, {at(4096), at(8192), at(256)});
  EXPECT_EQ(s.width, 8);
  EXPECT_EQ(s.packs, 125);
  EXPECT_EQ(s.tail_start, 1000);
  const VectorSplit floats = vector_split(10, 4, {at(64), at(128)});
  EXPECT_EQ(floats.width, 4);
  EXPECT_EQ(floats.packs, 2);
  EXPECT_EQ(floats.tail_start, 8);
}

TEST(VectorSplit, OneMisalignedPointerSendsEveryElementOneByOne) {
  for (const std::uintptr_t off : {2u, 4u, 8u}) {
    const VectorSplit s = vector_split(1000, 2, {at(4096), at(8192 + off)});
    EXPECT_EQ(s.packs, 0) << off;
    EXPECT_EQ(s.tail_start, 0) << off;
  }
}

TEST(VectorSplit, FewerElementsThanAPackAndNothingAtAllAreAllTail) {
  EXPECT_EQ(vector_split(7, 2, {at(0)}).packs, 0);
  EXPECT_EQ(vector_split(7, 2, {at(0)}).tail_start, 0);
  EXPECT_EQ(vector_split(0, 2, {at(0)}).tail_start, 0);
  EXPECT_EQ(vector_split(8, 2, {at(0)}).packs, 1);
  EXPECT_EQ(vector_split(8, 2, {at(0)}).tail_start, 8);
}

}  // namespace
}  // namespace dlbench::worker
