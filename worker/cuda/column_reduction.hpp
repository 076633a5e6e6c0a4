// How the column reductions (a bias gradient: Σ over rows of dy; layer norm's dγ and dβ) split
// their rows between blocks, apart from the kernels so that the rule is tested without a GPU.
// A block sums kColumnTile columns of one chunk of rows; with more than one chunk, each block
// writes its chunk's partial sums and a second kernel adds them in chunk order, so the result
// never depends on scheduling. One chunk per column tile left a GPU idle: BERT-base's 768
// features are 24 tiles, 24 blocks for 8,192 rows, each walking 1,024 rows a lane.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace dlbench::worker {

inline constexpr int kColumnTile = 32;          // columns a block sums, one a thread
inline constexpr int kColumnRowLanes = 8;       // threads a column has, each taking every 8th row
inline constexpr std::int64_t kColumnMinChunkRows = 64;     // below this a chunk's block barely starts
inline constexpr std::int64_t kColumnTargetBlocks = 1024;   // several waves on a 132-SM GPU
inline constexpr std::int64_t kColumnMaxChunks = 1024;      // bounds the scratch and the second pass

struct ColumnChunks {
  std::int64_t tiles = 0;       // blocks across the columns (0: no columns, nothing to launch)
  std::int64_t chunks = 1;      // blocks down the rows
  std::int64_t chunk_rows = 0;  // rows a chunk sums (the last may have fewer)
};

// Enough chunks for about kColumnTargetBlocks blocks in all, none shorter than
// kColumnMinChunkRows rows (unless the whole matrix is).
inline ColumnChunks column_chunks(std::int64_t rows, std::int64_t columns) {
  ColumnChunks plan;
  if (columns <= 0) return plan;
  plan.tiles = (columns + kColumnTile - 1) / kColumnTile;
  if (rows <= 0) return plan;  // one chunk of no rows: its blocks write sums of 0
  const std::int64_t wanted = (kColumnTargetBlocks + plan.tiles - 1) / plan.tiles;
  const std::int64_t most = std::max<std::int64_t>(1, rows / kColumnMinChunkRows);
  plan.chunks = std::clamp<std::int64_t>(std::min(wanted, most), 1, kColumnMaxChunks);
  plan.chunk_rows = (rows + plan.chunks - 1) / plan.chunks;
  plan.chunks = (rows + plan.chunk_rows - 1) / plan.chunk_rows;  // no chunk left empty by rounding up
  return plan;
}

// fp32 partial sums the chunks need for `outputs` reductions of the same rows (none with one chunk:
// its blocks write the sums themselves).
inline std::size_t column_chunks_scratch_bytes(const ColumnChunks& plan, std::int64_t columns, int outputs) {
  if (plan.chunks <= 1) return 0;
  return static_cast<std::size_t>(plan.chunks * columns * outputs) * sizeof(float);
}

}  // namespace dlbench::worker
