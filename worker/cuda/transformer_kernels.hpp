// dlbench's CUDA kernels for the transformer ops (BERT): layer normalization, row softmax, GELU and
// tanh, the attention heads' axis swap, embedding rows, and AdamW with global-norm clipping.
// Activations are `dtype` (fp32, fp16 or bf16), computed in fp32; parameters, statistics and
// optimizer state are fp32. Each launcher queues on `stream` and checks the launch. The CPU
// backend (oneDNN) is the reference they are checked against.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "dtype.hpp"
#include "loss_scaler.hpp"

namespace dlbench::worker::kernels {

// Per row of `features` values: mean, biased variance, y = (x - mean) / sqrt(variance + epsilon)
// · gamma + beta (torch.nn.LayerNorm; oneDNN's statistics).
void layer_norm_forward(DType dtype, const void* x, const float* gamma, const float* beta, void* y, float* mean,
                        float* variance, std::int64_t rows, int features, float epsilon, cudaStream_t stream);
// dx from the saved statistics; dgamma and dbeta summed over the rows (written, not added), in
// chunks of rows (column_reduction.hpp) whose partial sums go to `scratch`
// (layer_norm_backward_scratch_bytes of it; none for few rows), added in a fixed order.
std::size_t layer_norm_backward_scratch_bytes(std::int64_t rows, int features);
void layer_norm_backward(DType dtype, const void* x, const void* dy, const float* gamma, const float* mean,
                         const float* variance, void* dx, float* dgamma, float* dbeta, std::int64_t rows,
                         int features, float epsilon, float* scratch, cudaStream_t stream);
// Softmax over each row's `columns` values, or over the first lengths[row / rows_per_length] of
// them (on the device; null: all) with 0 after; backward from the output: dx = y (dy - Σ dy y).
void softmax_forward(DType dtype, const void* x, void* y, std::int64_t rows, int columns, const std::int32_t* lengths,
                     std::int64_t rows_per_length, cudaStream_t stream);
void softmax_backward(DType dtype, const void* y, const void* dy, void* dx, std::int64_t rows, int columns,
                      cudaStream_t stream);
// GELU with the exact erf, and tanh; backward reads the input.
void gelu_forward(DType dtype, const void* x, void* y, std::int64_t n, cudaStream_t stream);
void gelu_backward(DType dtype, const void* x, const void* dy, void* dx, std::int64_t n, cudaStream_t stream);
void tanh_forward(DType dtype, const void* x, void* y, std::int64_t n, cudaStream_t stream);
void tanh_backward(DType dtype, const void* x, const void* dy, void* dx, std::int64_t n, cudaStream_t stream);
// y[a][c][b][d] = x[a][b][c][d] for x of shape (a, b, c, d): a copy, so any element type.
void swap_axes(DType dtype, const void* x, void* y, std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d,
               cudaStream_t stream);
// y[i] = table[rows[i]] (or +=) for i < count, rows of `features`: embedding lookups (an fp32
// table) and gathering rows of an activation (the activations' dtype). A row index outside
// [0, table_rows) leaves y's row as it was (it cannot be an address outside the table).
void gather_rows(DType table_dtype, const void* table, const std::int32_t* rows, std::int64_t count, int features,
                 std::int64_t table_rows, DType y_dtype, void* y, bool accumulate, cudaStream_t stream);
// table_grad[rows[i]] += dy[i], rows repeating or not; indices outside the table skipped. The
// same bits every run: each row's entries are summed in fp32 in a fixed order (a stable sort by
// row, then windows of kScatterWindow sorted entries, then the windows in order) and added to
// table_grad once. `scratch` holds scatter_add_rows_scratch_bytes.
inline constexpr int kScatterWindow = 32;
std::size_t scatter_add_rows_scratch_bytes(std::int64_t count, int features, std::int64_t table_rows);
void scatter_add_rows(DType dy_dtype, const void* dy, const std::int32_t* rows, std::int64_t count, int features,
                      std::int64_t table_rows, DType table_dtype, void* table_grad, void* scratch,
                      cudaStream_t stream);

// AdamW and LAMB after clip_grad_norm_, all on the device so that a captured step replays it
// right: adam_prepare sums the gradients' squares into squares[0] (`squares` holds
// 1 + kAdamSquaresPartials doubles, the rest its blocks' partial sums, added in a fixed order) and,
// from the update number the device holds,
// writes {clip factor, lr_t / (1 - β1^t), sqrt(1 - β2^t), 1 - β1^t, 1 - β2^t, skip, lr_t} to
// `coefficients` (t the applied update's number, lr_t the rate warmed up to it (warmed_up_rate);
// skip 1 when loss_scale, null for none, says the step overflowed: then the apply kernels change
// nothing);
// adamw_apply updates the elements of each range (offsets sorted, `range_decays` 1 where weight
// decay applies). LAMB: lamb_moments clips, updates the moments and sums ‖w‖² and ‖u‖² per tensor
// into norms[2 · tensor] and norms[2 · tensor + 1] (`norms` holds lamb_norms_doubles: those, then
// the blocks' partial sums, added in a fixed order; left as they were on a skipped step);
// lamb_apply steps each tensor by its trust ratio.
struct AdamWScalars {
  float learning_rate, beta1, beta2, epsilon, weight_decay, max_grad_norm;
  std::uint64_t warmup_updates;
};
inline constexpr int kAdamSquaresPartials = 1024;
std::size_t lamb_norms_doubles(int tensors);
void adam_prepare(const float* grads, std::int64_t n, double* squares, const std::uint64_t* update_number,
                  const LossScaleState* loss_scale, const AdamWScalars& s, float* coefficients, cudaStream_t stream);
void adamw_apply(float* values, float* grads, float* first_moment, float* second_moment, std::int64_t n,
                 const std::int64_t* range_offsets, const std::int64_t* range_counts, const std::int32_t* range_decays,
                 int ranges, const AdamWScalars& s, const float* coefficients, cudaStream_t stream);
void lamb_moments(const float* values, float* grads, float* first_moment, float* second_moment,
                  const std::int64_t* tensor_offsets, const std::int64_t* tensor_counts, const std::int32_t* tensor_decays,
                  int tensors, const AdamWScalars& s, const float* coefficients, double* norms, cudaStream_t stream);
void lamb_apply(float* values, const float* first_moment, const float* second_moment,
                const std::int64_t* tensor_offsets, const std::int64_t* tensor_counts, const std::int32_t* tensor_decays,
                int tensors, const AdamWScalars& s, const float* coefficients, const double* norms,
                cudaStream_t stream);

}  // namespace dlbench::worker::kernels
