// How the CUDA kernels for BERT's layers split their work, checked without a GPU: the column
// reductions' chunks of rows (layer norm's dγ and dβ, bias gradients) and the axis swap's packs
// and source indices.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "cuda/column_reduction.hpp"
#include "cuda/swap_axes_plan.hpp"
#include "swapped_axes.hpp"

namespace dlbench::worker {
namespace {

const void* at(std::uintptr_t address) { return reinterpret_cast<const void*>(address); }

// Every row in exactly one chunk, no chunk empty, none needlessly short, within the bounds.
void expect_chunks_cover_the_rows(std::int64_t rows, std::int64_t columns) {
  const ColumnChunks plan = column_chunks(rows, columns);
  SCOPED_TRACE(::testing::Message() << rows << " rows, " << columns << " columns");
  EXPECT_EQ(plan.tiles, (columns + kColumnTile - 1) / kColumnTile);
  ASSERT_GE(plan.chunks, 1);
  EXPECT_LE(plan.chunks, kColumnMaxChunks);
  EXPECT_GE(plan.chunks * plan.chunk_rows, rows);
  EXPECT_LT((plan.chunks - 1) * plan.chunk_rows, rows);  // the last chunk has a row
  if (plan.chunks > 1) {
    EXPECT_GE(plan.chunk_rows, kColumnMinChunkRows);
    EXPECT_EQ(column_chunks_scratch_bytes(plan, columns, 2),
              static_cast<std::size_t>(plan.chunks * columns * 2) * sizeof(float));
  } else {
    EXPECT_EQ(column_chunks_scratch_bytes(plan, columns, 2), 0u);
  }
}

TEST(ColumnChunks, BertsLayerNormFillsTheGpuInsteadOfTwentyFourBlocks) {
  // 64 sequences of 128 tokens, 768 features: 24 column tiles.
  const ColumnChunks plan = column_chunks(8192, 768);
  EXPECT_EQ(plan.tiles, 24);
  EXPECT_EQ(plan.chunks, 43);
  EXPECT_EQ(plan.chunk_rows, 191);
  EXPECT_GE(plan.tiles * plan.chunks, kColumnTargetBlocks);
}

TEST(ColumnChunks, FewRowsStayOneChunkThatWritesTheSumsItself) {
  for (const std::int64_t rows : {1, 24, 100, 127}) {
    const ColumnChunks plan = column_chunks(rows, 96);
    EXPECT_EQ(plan.chunks, 1) << rows;
    EXPECT_EQ(plan.chunk_rows, rows) << rows;
    EXPECT_EQ(column_chunks_scratch_bytes(plan, 96, 1), 0u) << rows;
  }
}

TEST(ColumnChunks, ManyColumnsNeedFewChunksAndManyRowsAreBounded) {
  // BERT's vocabulary bias: 954 tiles already fill the GPU.
  EXPECT_EQ(column_chunks(8192, 30522).chunks, 2);
  // VGG's first convolution channels-last: 3.2 million pixels, 64 channels.
  const ColumnChunks vgg = column_chunks(64 * 224 * 224, 64);
  EXPECT_EQ(vgg.chunks, 512);
  EXPECT_EQ(vgg.chunk_rows, 6272);
  // One column, a billion rows: the chunk count stays bounded, the chunks grow.
  const ColumnChunks tall = column_chunks(std::int64_t{1} << 30, 1);
  EXPECT_EQ(tall.chunks, kColumnMaxChunks);
  EXPECT_EQ(tall.chunk_rows, (std::int64_t{1} << 30) / kColumnMaxChunks);
}

TEST(ColumnChunks, NoRowsIsOneEmptyChunkAndNoColumnsIsNothingToLaunch) {
  const ColumnChunks empty = column_chunks(0, 768);
  EXPECT_EQ(empty.tiles, 24);  // its blocks write sums of 0
  EXPECT_EQ(empty.chunks, 1);
  EXPECT_EQ(empty.chunk_rows, 0);
  EXPECT_EQ(column_chunks(100, 0).tiles, 0);
}

TEST(ColumnChunks, EveryShapeIsCoveredRowByRow) {
  for (const std::int64_t rows : {1, 63, 64, 65, 128, 129, 1000, 4095, 4096, 4097, 8192, 100003, 3211264}) {
    for (const std::int64_t columns : {1, 31, 32, 33, 96, 768, 1024, 3072, 30522}) {
      expect_chunks_cover_the_rows(rows, columns);
    }
  }
}

TEST(SwapAxesPlan, BertsHalfHeadsMoveSixteenBytesAThreadWithNarrowIndices) {
  // (sequences, tokens, heads, head size) = (64, 128, 12, 64) in fp16: 128-byte runs.
  const SwapAxesPlan plan = swap_axes_plan(64, 128, 12, 64, 2, at(4096), at(1 << 20));
  EXPECT_EQ(plan.pack_bytes, 16);
  EXPECT_EQ(plan.units, 8);
  EXPECT_EQ(plan.count, 64 * 128 * 12 * 8);
  EXPECT_TRUE(plan.narrow);
  EXPECT_EQ(swap_axes_plan(64, 128, 12, 64, 4, at(4096), at(8192)).units, 16);  // fp32
}

TEST(SwapAxesPlan, ThePackIsTheWidestTheRunAndBothPointersAllow) {
  struct Case {
    std::int64_t d;
    std::size_t element;
    std::uintptr_t y;
    int pack;
  };
  for (const Case c : {Case{64, 2, 4096 + 8, 8}, Case{64, 2, 4096 + 4, 4}, Case{64, 2, 4096 + 2, 2},
                       Case{3, 2, 4096, 2}, Case{2, 2, 4096, 4}, Case{4, 2, 4096, 8}, Case{12, 2, 4096, 8},
                       Case{2, 4, 4096, 8}, Case{3, 4, 4096, 4}, Case{5, 4, 4096, 4}, Case{8, 4, 4096 + 4, 4}}) {
    const SwapAxesPlan plan = swap_axes_plan(2, 3, 4, c.d, c.element, at(4096), at(c.y));
    EXPECT_EQ(plan.pack_bytes, c.pack) << "d " << c.d << ", " << c.element << "-byte elements, y at " << c.y;
    EXPECT_EQ(plan.units * plan.pack_bytes, c.d * static_cast<std::int64_t>(c.element));
  }
}

TEST(SwapAxesPlan, HugeTensorsKeepWideIndicesAndEmptyOnesMoveNothing) {
  EXPECT_FALSE(swap_axes_plan(1024, 1024, 1024, 64, 4, at(0), at(0)).narrow);
  EXPECT_EQ(swap_axes_plan(0, 128, 12, 64, 2, at(0), at(0)).count, 0);
  EXPECT_EQ(swap_axes_plan(64, 128, 12, 0, 2, at(0), at(0)).count, 0);
}

// The kernel's loop on the host: pack i of y from pack swap_axes_source(i) of x, against the
// definition y[a][c][b][d] = x[a][b][c][d] element by element.
template <typename Index>
void expect_the_packs_make_the_swap(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d, std::size_t element,
                                    std::uintptr_t y_offset) {
  SCOPED_TRACE(::testing::Message() << "(" << a << ", " << b << ", " << c << ", " << d << ") of " << element
                                    << "-byte elements, y offset " << y_offset);
  const std::int64_t n = a * b * c * d;
  std::vector<std::uint32_t> x(static_cast<std::size_t>(n));
  std::iota(x.begin(), x.end(), 1u);
  const std::vector<std::uint32_t> expected = swapped_axes(x, a, b, c, d);
  // Elements of `element` bytes as bytes (the low bytes of each value), copied pack by pack.
  std::vector<unsigned char> from(static_cast<std::size_t>(n) * element), to(from.size(), 0);
  for (std::size_t i = 0; i < x.size(); ++i) std::memcpy(&from[i * element], &x[i], element);
  const SwapAxesPlan plan = swap_axes_plan(a, b, c, d, element, at(4096), at(4096 + y_offset));
  ASSERT_GT(plan.count, 0);
  const auto pack = static_cast<std::size_t>(plan.pack_bytes);
  for (Index i = 0; i < static_cast<Index>(plan.count); ++i) {
    const Index source = swap_axes_source<Index>(i, static_cast<Index>(b), static_cast<Index>(c), static_cast<Index>(plan.units));
    ASSERT_GE(source, 0);
    ASSERT_LT(source, static_cast<Index>(plan.count));
    std::memcpy(&to[static_cast<std::size_t>(i) * pack], &from[static_cast<std::size_t>(source) * pack], pack);
  }
  const std::uint32_t mask = element == 2 ? 0xffffu : 0xffffffffu;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    std::uint32_t value = 0;
    std::memcpy(&value, &to[i * element], element);
    ASSERT_EQ(value, expected[i] & mask) << "element " << i;
  }
}

TEST(SwapAxesPlan, ThePacksMakeTheSameSwapAsElementByElement) {
  for (const std::size_t element : {2u, 4u}) {
    for (const std::uintptr_t offset : {0u, 2u, 4u, 8u}) {
      if (offset % element != 0) continue;
      expect_the_packs_make_the_swap<std::int32_t>(2, 3, 4, 8, element, offset);
      expect_the_packs_make_the_swap<std::int64_t>(2, 3, 4, 8, element, offset);
      expect_the_packs_make_the_swap<std::int32_t>(3, 5, 2, 3, element, offset);
      expect_the_packs_make_the_swap<std::int32_t>(2, 16, 12, 64, element, offset);  // BERT's heads, 2 sequences
      expect_the_packs_make_the_swap<std::int32_t>(1, 1, 7, 6, element, offset);
    }
  }
}

}  // namespace
}  // namespace dlbench::worker
