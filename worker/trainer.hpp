// One data-parallel-ready training step: forward, loss, backward, SGD — over a fixed
// synthetic batch that lives on the device, like tf_cnn_benchmarks' synthetic data.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "arena.hpp"
#include "backend.hpp"
#include "layers/sequential.hpp"
#include "layers/softmax_cross_entropy.hpp"
#include "loss_scaler.hpp"
#include "models/bert.hpp"
#include "parameters.hpp"

namespace dlbench::worker {

// A host copy of a 4-D (N, C, H, W) tensor in NHWC order.
std::vector<float> nchw_to_nhwc(const std::vector<float>& nchw, const Shape& shape);
// And back: an NHWC host copy in (N, C, H, W) order.
std::vector<float> nhwc_to_nchw(const std::vector<float>& nhwc, const Shape& shape);
// Host conversions between a tensor's logical (N, C, H, W) order and its layout: anything but a
// 4-D NHWC tensor is returned as given (a copy; from_layout moves a vector the caller gives up,
// as a download does).
std::vector<float> to_layout(const std::vector<float>& nchw, const Shape& shape, Layout layout);
std::vector<float> from_layout(const std::vector<float>& stored, const Shape& shape, Layout layout);
std::vector<float> from_layout(std::vector<float>&& stored, const Shape& shape, Layout layout);
// A tensor's values on the host as fp32, in logical (N, C, H, W) order whatever its dtype and layout.
std::vector<float> download(Backend& backend, const Tensor& t);
// `count` fp32 values from the device (a flat parameter buffer, say).
std::vector<float> download(Backend& backend, const float* device, std::int64_t count);
// And the other way: `logical` (fp32, logical order) written into `t` in its dtype and layout.
void upload(Backend& backend, const Tensor& t, const std::vector<float>& logical);

// The fewest tokens a pretraining sequence can have: [CLS] A [SEP] B [SEP] with a word in each.
inline constexpr std::int64_t kMinimumPretrainingTokens = 5;

// A pretraining batch as NVIDIA's and Google's data scripts make one, from `seed`: per sequence,
// [CLS] A [SEP] B [SEP] over random words (sentence A 1 to tokens − 4 long; token types 0 up to
// its [SEP], 1 after), P = masked_positions_per_sequence(tokens) distinct masked positions among
// the words (their tokens become [MASK] 80% of the time, a random word 10%, themselves 10%),
// and a random next-sentence label; no padding (every token real). `tokens` is (sequences, tokens)
// ids, `labels` the block.
void synthesize_pretraining_batch(const PretrainingBatchLayout& batch, std::int64_t vocabulary, std::uint64_t seed,
                                  std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& labels);

// Makes a batch what real data's is: each sequence padded after its first real_tokens[s] tokens
// (`padding_id`, token type 0), and its masked-LM slots at padding positions turned into slots
// without a prediction (kNoPrediction, reading the sequence's first row), as NVIDIA's shards pad
// them. For checks of the padded path (the self-test, the tests) without a shard at hand.
void pad_pretraining_batch(const PretrainingBatchLayout& batch, const std::vector<std::int32_t>& real_tokens,
                           std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& labels,
                           std::int32_t padding_id = 0);

// Where a trainer's first weights come from: drawn from its seed, all of them or one share
// (ParameterStore::Share: the ranks of a job each draw one and sum them), or set by its caller
// before the first step (--init-from's file). What is not drawn starts as zeros: drawing VGG16's
// 138 million weights only to overwrite them cost seconds.
struct InitialWeights {
  enum class Source { drawn, set_by_caller };
  Source source = Source::drawn;
  ParameterStore::Share share{};
  static InitialWeights drawn(ParameterStore::Share share = {}) { return {Source::drawn, share}; }
  static InitialWeights set_by_caller() { return {Source::set_by_caller, {}}; }
};

class Trainer {
 public:
  // input: (batch, 3, height, width). The network ends in (batch, num_classes) logits with a
  // label per sample, or (batch, num_classes, height, width) ones with a label per pixel. Weights come from `seed`
  // (unless `weights` leaves them to the caller); the synthetic batch from
  // `seed` and `data_rank` (ranks get different data, the same weights). Activation and
  // gradient buffers share memory by lifetime unless `reuse` says otherwise. Activations and
  // their gradients are `activations` (the input is converted to it); weights, their
  // gradients and the optimizer stay fp32.
  Trainer(Backend& backend, std::unique_ptr<Sequential> network, const Shape& input, std::int64_t num_classes,
          SgdConfig sgd, std::uint64_t seed, std::uint64_t data_rank = 0,
          MemoryReuse reuse = MemoryReuse::lifetime, DType activations = DType::fp32,
          InitialWeights weights = InitialWeights::drawn());
  // Pretraining on token sequences (BERT): the network takes int32 (sequences, tokens) token ids
  // and the labels block `batch` describes, and ends in (sequences, 2) next-sentence logits; its
  // masked-LM loss is a term of its own. The synthetic batch is drawn as NVIDIA's and Google's
  // pretraining data is made, over a `vocabulary` of token ids; batch.max_predictions sets the
  // masked-LM slots per sequence (real data's max_predictions_per_seq).
  Trainer(Backend& backend, std::unique_ptr<Sequential> network, PretrainingBatchLayout batch,
          std::int64_t vocabulary, SgdConfig sgd, std::uint64_t seed, std::uint64_t data_rank = 0,
          MemoryReuse reuse = MemoryReuse::lifetime, DType activations = DType::fp32,
          InitialWeights weights = InitialWeights::drawn());
  // Waits for a staged copy still reading host memory, which its owner may free next.
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Replaces the batch with real data: pixels in input().layout (batch × 3 × image × image values
  // of `pixel_type`: input().dtype is copied as it is, fp32 converted to it first) and one class
  // index per sample, copied to the device before the next step (one per pixel, (N, H, W) order,
  // for a segmentation network).
  void load_batch(const void* pixels, DType pixel_type, const std::int32_t* labels);
  // Replaces a pretraining batch with real data: (sequences, tokens) token ids and the labels block
  // as PretrainingBatchLayout lays it out, copied to the device before the next step.
  void load_sequences(const std::int32_t* token_ids, const std::int32_t* labels);
  // The next step's batch, given while the last step may still run (an input pipeline's, after
  // Trainer::step returned): where the backend overlaps host copies with its steps it is copied
  // now, into device memory of its own, and moved into place as the next step begins, so the copy
  // runs beside the step before; elsewhere it is loaded now (load_batch, load_sequences), the last
  // step being done. The host memory must stay as it is until release_staged_host_memory(), which
  // the destructor calls: memory freed before the trainer is would still be read.
  void stage_batch(const void* pixels, DType pixel_type, const std::int32_t* labels);
  void stage_sequences(const std::int32_t* token_ids, const std::int32_t* labels);
  // As stage_batch, for a batch packed for the device to resize (input/packed_images.hpp; the
  // pipeline's DLBENCH_INPUT_RESIZE=device): its first `bytes` copied into device memory of
  // `capacity` bytes, then resized there into the input's type, layout and `side` × `side` pixels.
  // Only where the backend overlaps host copies (the pipeline packs for no other).
  void stage_packed_images(const void* packed, std::size_t bytes, std::size_t capacity, int side, DType pixel_type,
                           const std::int32_t* labels);
  // Returns once the staged batch's host memory has been read (its copy done): the pipeline may
  // then reuse it. A no-op where nothing is staged or the backend does not overlap.
  void release_staged_host_memory();
  // The current pretraining batch, padded by pad_pretraining_batch, for the next step.
  void pad_sequences(const PretrainingBatchLayout& batch, const std::vector<std::int32_t>& real_tokens,
                     std::int32_t padding_id = 0);
  // The batch the next step trains on, as fp32 pixels in (N, C, H, W) order and class indices
  // (one per sample, or per pixel in (N, H, W) order).
  void copy_batch_to_host(std::vector<float>& pixels_nchw, std::vector<std::int32_t>& labels);

  // One step, queued: nothing waits for the device (last_loss() does).
  void step();
  // Capture the step once (after one eager step has chosen algorithms and sized the
  // workspace) and replay it from then on. Only where the backend can capture, and only
  // without hooks that talk to the host between backward and the update (one rank).
  void use_step_graph(bool on);
  bool step_graph_active() const { return graph_captured_; }
  // The loss of the last step that ran (waits for the device: once per repeat in a timed loop).
  float last_loss();
  // One step and its loss, for tests and diagnostics: waits for the device.
  float step_and_loss() {
    step();
    return last_loss();
  }
  // Forward, loss, backward and the before-update hook, without changing the weights. With
  // loss scaling the gradients are unscaled before this returns.
  float compute_gradients();
  // Dynamic loss scaling (for fp16): the loss gradient is multiplied by the scale, the
  // gradients divided by it after the before-update hook and checked; a step with an inf or
  // NaN leaves the weights and optimizer state untouched. The state lives in the backend's
  // memory and moves on there (LossScaleState, next_loss_scale), so no step waits for the host's
  // decision and a captured step graph skips and backs off by itself. Before any step is captured.
  void use_loss_scaling(LossScalingConfig config);
  // The loss scaling state after the last step (waits for the device), or nothing without.
  std::optional<LossScaleState> loss_scale();
  // Whether the last step's update was skipped (waits for the device).
  bool last_step_skipped();
  // Why the last step was skipped, for a person: its loss, and the parameters whose gradients hold
  // an inf or NaN, nearest the loss first (where backward met the overflow first). A non-finite
  // loss says the forward pass overflowed. Downloads every gradient: a diagnosis, never timed.
  std::string describe_skipped_step();
  // From the next step on, every skipped step is described on `out` as it happens (null: not);
  // each step then waits for the device (DLBENCH_LOG_LOSS_SCALE=1). An eager step is then run
  // again on its batch, weights and scale, layer by layer (trace_skipped_step), to name where its
  // values first stopped being finite.
  // `who` begins each account: "dlbench-worker" alone, "dlbench-worker rank 3" among ranks, whose
  // lines mpirun interleaves and whose replays differ (each rank's batch is its own).
  void log_skipped_steps(std::ostream* out, std::string who = "dlbench-worker") {
    skip_log_ = out;
    skip_log_who_ = std::move(who);
  }
  // The last step's forward and backward again, at `scale` (the loss scale it ran at), each
  // layer's output and input gradient counted for infs and NaNs (FirstNonFinite): the batch, the
  // first layer whose output holds any, the loss gradient, the first layer whose input gradient
  // holds any. Changes neither the weights nor the loss-scaling state nor the step count; the
  // gradients are left as the replay's backward wrote them (scaled: the step's own were skipped),
  // and batch norms' running statistics take the batch a second time (no step reads them). Not
  // after the step graph is captured. A diagnosis: waits for the device at every layer.
  std::string trace_skipped_step(float scale);
  // What trace_first_overflow found: `said`, the skipped step's two lines (the gradients that
  // overflowed, then the step replayed layer by layer) or that none skipped; and what the replay
  // found on this rank: located where it met an inf or NaN (in the batch, a layer's output, the
  // loss gradient or a layer's input gradient), its line then naming where. Each rank replays its
  // own batch (rank_overflow_trace.hpp puts the ranks' together).
  enum class ReplayFinding {
    none,        // nothing replayed: none skipped, or a step graph's replay skipped
    all_finite,  // replayed, and every value finite: the overflow came after backward
    located,     // replayed, and the line names the first inf or NaN
  };
  struct OverflowTrace {
    std::string said;
    ReplayFinding replay = ReplayFinding::none;
  };
  // Runs up to `max_steps` more steps through `step` (which calls step(): an input pipeline's
  // step takes its next batch too) under the skip log, stopping after the first skipped one, and
  // returns what the log said of it: the gradients that overflowed and, for an eager step, the
  // step replayed layer by layer, on two lines; or, where none skipped, that none did. For a
  // result whose loss scaling trained little (lossScaling.overflow), after the measured steps:
  // each step waits for the device. What the log said goes on to the skip log set before, if any.
  OverflowTrace trace_first_overflow(const std::function<void()>& step, int max_steps);
  // Forward and loss only (gradients and weights untouched).
  float loss();
  // AdamW with global-norm clipping instead of SGD, from the next step on (BERT's optimizer).
  // Decay applies to matrices and embeddings, not to vectors (biases, LayerNorm's and batch
  // norm's scale and shift), as BERT's recipes exclude them.
  void use_adamw(AdamWConfig config);
  // LAMB (Backend::lamb_update) with the same hyper-parameters, decay and clipping.
  void use_lamb(AdamWConfig config);
  // The token sequences the next step trains on (pretraining only): ids, and the labels block.
  void copy_sequences_to_host(std::vector<std::int32_t>& token_ids, std::vector<std::int32_t>& labels);

  // Runs between backward and the SGD update (the data-parallel allreduce goes here).
  void set_before_update(std::function<void()> hook) { before_update_ = std::move(hook); }
  void set_gradients_ready(std::function<void(const std::vector<Parameter*>&)> hook) {
    context_.gradients_ready = std::move(hook);
  }

  // Told about every layer a step runs (null: nobody); not with a captured step graph.
  void set_layer_observer(LayerObserver* observer) { context_.observer = observer; }

  ParameterStore& parameters() { return parameters_; }
  const ParameterStore& parameters() const { return parameters_; }
  Sequential& network() { return *network_; }
  const Tensor& input() const { return input_; }
  Backend& backend() { return backend_; }
  std::int64_t parameter_count() const { return parameters_.count(); }
  double forward_macs_per_sample() const { return network_->forward_macs_per_sample(); }
  // Activation and gradient memory: what the plan allocates (its placements, bytes unshared).
  std::size_t arena_bytes() const { return arena_.planned_bytes(); }
  const Arena& arena() const { return arena_; }
  std::uint64_t steps_done() const { return context_.step; }

 private:
  // What both constructors share: the network's setup on `input` (described; the arena fills
  // it), the labels block and the memory plan;
  // what the network outputs decides the number of labels (label_count_for_output, which
  // throws for an output the trainer cannot train).
  void setup_network(const Shape& input, DType input_dtype, DType activations, MemoryReuse reuse,
                       const InitialWeights& weights,
                       const std::function<std::int64_t(const Tensor&)>& label_count_for_output,
                       std::int64_t max_predictions = 0);
  void entering(StepPart part);  // tells the layer observer, where there is one
  void forward_and_loss();
  void queue_gradients();  // forward, loss, backward, the hook and unscaling; waits for nothing else
  void use_adam_family(AdamWConfig config, bool lamb);

  Backend& backend_;
  std::unique_ptr<Sequential> network_;
  Arena arena_;
  ParameterStore parameters_;
  SoftmaxCrossEntropy loss_;
  SgdConfig sgd_;
  Tensor input_;
  Tensor labels_storage_;  // int32: labels (and a pretraining batch's other data)
  std::int64_t label_count_ = 0;  // batch, or batch × height × width for per-pixel labels
  StepContext context_;
  std::function<void()> before_update_;
  std::optional<LossScalingConfig> loss_scaling_;
  std::shared_ptr<void> loss_scale_memory_;  // one LossScaleState in the backend's memory
  std::ostream* skip_log_ = nullptr;
  std::string skip_log_who_ = "dlbench-worker";
  bool searching_for_overflow_ = false;  // inside trace_first_overflow
  // With skip_log_ or the search: whether the last step ran eagerly (not captured, not replayed)
  // and the loss scale it ran at, for trace_skipped_step.
  bool last_step_eager_ = false;
  float last_step_scale_ = 0.0f;
  // trace_skipped_step's line, and what it found.
  struct Replay {
    std::string said;
    ReplayFinding found = ReplayFinding::all_finite;
  };
  Replay replay_skipped_step(float scale);
  // A skipped step's account: "step N skipped, loss scale now S: " and describe_skipped_step(),
  // and the step replayed layer by layer (trace_skipped_step), or why it was not.
  struct SkippedStep {
    std::string what;
    Replay replay;
  };
  // The last step's account where it was skipped (one read of the device's state), else nothing.
  std::optional<SkippedStep> last_skipped_step();
  // The skip log's two lines for it.
  void say(const SkippedStep& skipped);
  void say_if_skipped();
  LossScaleState* loss_scale_state() { return static_cast<LossScaleState*>(loss_scale_memory_.get()); }
  // Update calls queued, skipped or not: the first starts the momentum buffers (a skipped first
  // step leaves them zero, from which the next update starts them alike), and Adam counts its
  // applied updates from it less the skipped steps (applied_update_number).
  std::uint64_t updates_queued_ = 0;
  std::optional<AdamWConfig> adamw_;  // AdamW's, or LAMB's with lamb_
  bool lamb_ = false;
  std::vector<ParameterRange> decay_ranges_;  // runs of tensors for AdamW, one per tensor for LAMB
  bool use_graph_ = false;
  bool graph_captured_ = false;

  // Real data's batch in the input's type: `pixels` itself, or fp32 pixels converted into
  // `converted`; refuses token-id inputs and any other pairing, naming `caller`.
  const void* pixels_as_input(const char* caller, const void* pixels, DType pixel_type,
                              std::vector<std::byte>& converted) const;
  std::size_t label_bytes() const { return static_cast<std::size_t>(label_count_) * sizeof(std::int32_t); }
  // stage_batch's and stage_sequences's copies, into device buffers of their own (made at the
  // first), which the next step moves into input_ and labels_storage_.
  void stage_input_and_labels(const void* input, const std::int32_t* labels);
  // What every staging shares: refused while a staged batch is untaken; `stage_input` queues what
  // fills the staged input (made at the first), then the labels' copy follows.
  void stage_with_labels(const std::function<void(void* staged_input)>& stage_input, const std::int32_t* labels);
  void take_staged_batch();  // as a step begins, before any capture or replay
  std::shared_ptr<void> staged_input_, staged_labels_;
  std::shared_ptr<void> staged_packed_;  // a packed batch's bytes on the device, before stage_packed_images resizes them
  std::size_t staged_packed_capacity_ = 0;
  bool staged_pending_ = false;        // a batch staged and not yet taken by a step
  bool staged_unread_ = false;         // a staged copy whose host memory is not yet released
  std::vector<std::byte> converted_;   // fp32 pixels converted to the input's type, for a staged copy
};

}  // namespace dlbench::worker
