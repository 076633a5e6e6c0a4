#include "trainer.hpp"

#include <algorithm>
#include <functional>
#include <cmath>
#include <ostream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "non_finite_trace.hpp"

namespace dlbench::worker {

namespace {

// Whether a tensor's stored order is not its logical one: a 4-D NHWC tensor.
bool reordered(const Shape& shape, Layout layout) { return shape.rank == 4 && layout == Layout::nhwc; }

// A 4-D host copy between NCHW and NHWC order, either way.
std::vector<float> transpose_channels(const std::vector<float>& from, const Shape& s, bool to_nhwc) {
  std::vector<float> to(from.size());
  const std::int64_t c = s.c(), h = s.h(), w = s.w();
  for (std::int64_t b = 0; b < s.n(); ++b) {
    for (std::int64_t ch = 0; ch < c; ++ch) {
      for (std::int64_t y = 0; y < h; ++y) {
        for (std::int64_t x = 0; x < w; ++x) {
          const auto nchw = static_cast<std::size_t>(((b * c + ch) * h + y) * w + x);
          const auto nhwc = static_cast<std::size_t>(((b * h + y) * w + x) * c + ch);
          to[to_nhwc ? nhwc : nchw] = from[to_nhwc ? nchw : nhwc];
        }
      }
    }
  }
  return to;
}

}  // namespace

std::vector<float> nchw_to_nhwc(const std::vector<float>& nchw, const Shape& s) { return transpose_channels(nchw, s, true); }

std::vector<float> nhwc_to_nchw(const std::vector<float>& nhwc, const Shape& s) {
  return transpose_channels(nhwc, s, false);
}

std::vector<float> to_layout(const std::vector<float>& nchw, const Shape& shape, Layout layout) {
  return reordered(shape, layout) ? nchw_to_nhwc(nchw, shape) : nchw;
}

std::vector<float> from_layout(const std::vector<float>& stored, const Shape& shape, Layout layout) {
  return reordered(shape, layout) ? nhwc_to_nchw(stored, shape) : stored;
}

std::vector<float> from_layout(std::vector<float>&& stored, const Shape& shape, Layout layout) {
  return reordered(shape, layout) ? nhwc_to_nchw(stored, shape) : std::move(stored);
}

// fp32 comes straight into the result: the self-test downloads every layer's input, output and
// gradients, and VGG16's classifier alone is 411 MB that a copy through bytes and a decoded copy
// tripled (a quarter of its whole-step check's time went to copying and faulting pages in).
std::vector<float> download(Backend& backend, const Tensor& t) {
  if (t.dtype == DType::fp32) {
    std::vector<float> values(static_cast<std::size_t>(t.numel()));
    backend.copy_to_host(values.data(), t.data, t.bytes());
    return from_layout(std::move(values), t.shape, t.layout);
  }
  std::vector<std::byte> bytes(t.bytes());
  backend.copy_to_host(bytes.data(), t.data, t.bytes());
  return from_layout(decode(bytes.data(), static_cast<std::size_t>(t.numel()), t.dtype), t.shape, t.layout);
}

std::vector<float> download(Backend& backend, const float* device, std::int64_t count) {
  std::vector<float> host(static_cast<std::size_t>(count));
  backend.copy_to_host(host.data(), device, host.size() * sizeof(float));
  return host;
}

void upload(Backend& backend, const Tensor& t, const std::vector<float>& logical) {
  require_elements(t, static_cast<std::int64_t>(logical.size()), "upload", "the tensor");
  if (t.dtype == DType::fp32 && !reordered(t.shape, t.layout)) {
    backend.copy_from_host(t.data, logical.data(), t.bytes());
    return;
  }
  const auto bytes = encode(to_layout(logical, t.shape, t.layout).data(), logical.size(), t.dtype);
  backend.copy_from_host(t.data, bytes.data(), t.bytes());
}

void Trainer::setup_network(const Shape& input, DType input_dtype, DType activations, MemoryReuse reuse,
                              const InitialWeights& weights,
                              const std::function<std::int64_t(const Tensor&)>& label_count_for_output,
                              std::int64_t max_predictions) {
  if (const auto why = backend_.cannot_compute(activations)) throw std::invalid_argument(*why);
  std::vector<Parameter*> params;
  network_->collect_parameters(params);
  parameters_.bind(std::move(params), backend_);
  if (weights.source == InitialWeights::Source::drawn) parameters_.initialize(context_.seed, backend_, weights.share);

  input_ = input_dtype == DType::int32 ? activation(input, Layout::plain, DType::int32)
                                       : activation(input, backend_.activation_layout(), activations);
  arena_.request(input_);  // the batch lives across steps
  SetupContext setup{backend_, arena_, false};
  setup.compute = activations;
  setup.max_predictions = max_predictions;
  const Tensor logits = network_->setup(input_, setup);
  label_count_ = label_count_for_output(logits);
  loss_.setup(logits, setup);
  labels_storage_.shape = Shape(label_count_);
  labels_storage_.dtype = DType::int32;
  arena_.request(labels_storage_);
  arena_.commit(backend_, reuse);
  if (reuse == MemoryReuse::poison) context_.plan = &arena_;
  network_->reset_state(backend_);
}

Trainer::Trainer(Backend& backend, std::unique_ptr<Sequential> network, const Shape& input, std::int64_t num_classes,
                 SgdConfig sgd, std::uint64_t seed, std::uint64_t data_rank, MemoryReuse reuse, DType activations,
                 InitialWeights weights)
    : backend_(backend), network_(std::move(network)), sgd_(sgd), context_{backend, seed, 0, {}} {
  bool segments = false;
  setup_network(input, activations, activations, reuse, weights, [&](const Tensor& logits) {
    const bool classifies = logits.shape.rank == 2 && logits.shape.n() == input.n() && logits.shape.c() == num_classes;
    segments = logits.shape.rank == 4 && logits.shape.n() == input.n() && logits.shape.c() == num_classes &&
               logits.shape.h() == input.h() && logits.shape.w() == input.w();
    if (!classifies && !segments) {
      throw std::invalid_argument("network output " + logits.shape.to_string() + " is neither (batch, " +
                                  std::to_string(num_classes) + ") nor (batch, " + std::to_string(num_classes) +
                                  ", height, width) at the input's size");
    }
    return segments ? input.n() * input.h() * input.w() : input.n();
  });

  // The synthetic batch: N(0, 1) pixels and uniform labels, generated once.
  std::mt19937_64 rng(seed ^ (0xD1B54A32D192ED03ull * (data_rank + 1)));
  std::normal_distribution<float> pixel(0.0f, 1.0f);
  // Drawn in logical (N, C, H, W) order and stored in the backend's layout, so that every
  // backend trains on the same images.
  std::vector<float> host(static_cast<std::size_t>(input_.numel()));
  for (float& v : host) v = pixel(rng);
  if (input_.layout == Layout::nhwc) host = nchw_to_nhwc(host, input);
  const std::vector<std::byte> pixels = encode(host.data(), host.size(), input_.dtype);
  backend_.copy_from_host(input_.data, pixels.data(), input_.bytes());
  // Per-pixel labels: uniform over the classes and one value more, which stands for the ignore
  // label, so that about 1 pixel in (classes + 1) is left out of the loss as Cityscapes' void is.
  const auto label_max = static_cast<std::int32_t>(segments ? num_classes : num_classes - 1);
  std::uniform_int_distribution<std::int32_t> label(0, label_max);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(label_count_));
  for (auto& l : labels) {
    l = label(rng);
    if (segments && l == num_classes) l = kIgnoreLabel;
  }
  backend_.copy_from_host(labels_storage_.data, labels.data(), labels.size() * sizeof(std::int32_t));
}

Trainer::Trainer(Backend& backend, std::unique_ptr<Sequential> network, PretrainingBatchLayout batch,
                 std::int64_t vocabulary, SgdConfig sgd, std::uint64_t seed, std::uint64_t data_rank,
                 MemoryReuse reuse, DType activations, InitialWeights weights)
    : backend_(backend), network_(std::move(network)), sgd_(sgd), context_{backend, seed, 0, {}} {
  if (const auto why = backend_.cannot_run_transformers()) throw std::invalid_argument(*why);
  if (batch.sequences < 1 || batch.tokens < kMinimumPretrainingTokens) {
    throw std::invalid_argument("pretraining needs at least one sequence of " + std::to_string(kMinimumPretrainingTokens) +
                                " or more tokens, not " + std::to_string(batch.sequences) + " × " +
                                std::to_string(batch.tokens));
  }
  const Shape token_ids(batch.sequences, batch.tokens);
  setup_network(token_ids, DType::int32, activations, reuse, weights, [&](const Tensor& logits) {
    if (logits.shape != Shape(batch.sequences, 2)) {
      throw std::invalid_argument("network output " + logits.shape.to_string() + " is not (sequences, 2) next-sentence logits");
    }
    return batch.total();
  }, batch.max_predictions);
  context_.real_tokens = static_cast<const std::int32_t*>(labels_storage_.data) + batch.real_tokens();
  std::vector<std::int32_t> tokens, labels;
  synthesize_pretraining_batch(batch, vocabulary, seed ^ (0xD1B54A32D192ED03ull * (data_rank + 1)), tokens, labels);
  backend_.copy_from_host(input_.data, tokens.data(), tokens.size() * sizeof(std::int32_t));
  backend_.copy_from_host(labels_storage_.data, labels.data(), labels.size() * sizeof(std::int32_t));
}

void synthesize_pretraining_batch(const PretrainingBatchLayout& batch, std::int64_t vocabulary, std::uint64_t seed,
                                  std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& labels) {
  // BERT's wordpiece vocabulary keeps [CLS] 101, [SEP] 102, [MASK] 103 and words from 999 on; a
  // small test vocabulary keeps them at 1, 2, 3 and words from 4 on.
  const bool wordpiece = vocabulary > 1000;
  const std::int32_t cls = wordpiece ? 101 : 1, sep = wordpiece ? 102 : 2, mask = wordpiece ? 103 : 3;
  const std::int32_t first_word = wordpiece ? 999 : 4;
  if (vocabulary <= first_word) throw std::invalid_argument("a vocabulary of " + std::to_string(vocabulary) + " tokens holds no words");
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> word(first_word, static_cast<std::int32_t>(vocabulary - 1));
  std::uniform_real_distribution<double> chance(0.0, 1.0);
  const std::int64_t n = batch.sequences, length = batch.tokens, predictions = batch.predictions();
  tokens.assign(static_cast<std::size_t>(n * length), 0);
  labels.assign(static_cast<std::size_t>(batch.total()), 0);
  const auto at = [](std::vector<std::int32_t>& v, std::int64_t i) -> std::int32_t& { return v[static_cast<std::size_t>(i)]; };
  std::vector<std::int64_t> candidates;
  for (std::int64_t s = 0; s < n; ++s) {
    // [CLS] A [SEP] B [SEP], sentence A of 1 to length − 4 tokens.
    const std::int64_t a = std::uniform_int_distribution<std::int64_t>(1, length - 4)(rng);
    std::int32_t* ids = &at(tokens, s * length);
    for (std::int64_t i = 0; i < length; ++i) {
      ids[i] = i == 0 ? cls : (i == a + 1 || i == length - 1) ? sep : word(rng);
      at(labels, batch.token_types() + s * length + i) = i <= a + 1 ? 0 : 1;
    }
    at(labels, batch.next_sentence_labels() + s) = static_cast<std::int32_t>(rng() & 1u);
    at(labels, batch.real_tokens() + s) = static_cast<std::int32_t>(length);  // no padding
    // Masked positions: distinct, never a special token, in increasing order.
    candidates.clear();
    for (std::int64_t i = 1; i < length - 1; ++i) {
      if (i != a + 1) candidates.push_back(i);
    }
    // Slots past the candidates (a short sequence) predict nothing, as padding slots of real data.
    const auto masked = std::min<std::int64_t>(predictions, static_cast<std::int64_t>(candidates.size()));
    for (std::int64_t k = 0; k < masked; ++k) {
      const auto pick = std::uniform_int_distribution<std::size_t>(static_cast<std::size_t>(k), candidates.size() - 1)(rng);
      std::swap(candidates[static_cast<std::size_t>(k)], candidates[pick]);
    }
    std::sort(candidates.begin(), candidates.begin() + masked);
    for (std::int64_t k = masked; k < predictions; ++k) {
      at(labels, batch.masked_rows() + s * predictions + k) = static_cast<std::int32_t>(s * length);
      at(labels, batch.masked_tokens() + s * predictions + k) = kNoPrediction;
    }
    for (std::int64_t k = 0; k < masked; ++k) {
      const std::int64_t position = candidates[static_cast<std::size_t>(k)];
      at(labels, batch.masked_rows() + s * predictions + k) = static_cast<std::int32_t>(s * length + position);
      at(labels, batch.masked_tokens() + s * predictions + k) = ids[position];
      // BERT's rule: [MASK] 80% of the time, a random word 10%, the token itself 10%.
      const double draw = chance(rng);
      if (draw < 0.8) {
        ids[position] = mask;
      } else if (draw < 0.9) {
        ids[position] = word(rng);
      }
    }
  }
}

const void* Trainer::pixels_as_input(const char* caller, const void* pixels, DType pixel_type,
                                     std::vector<std::byte>& converted) const {
  if (input_.dtype == DType::int32) {
    throw std::logic_error(std::string(caller) + ": this trainer's input is token ids, not pixels");
  }
  if (pixel_type == input_.dtype) return pixels;
  if (pixel_type != DType::fp32) {
    throw std::logic_error(std::string(caller) + ": pixels of " + std::string(to_string(pixel_type)) +
                           " for an input of " + std::string(to_string(input_.dtype)));
  }
  converted = encode(static_cast<const float*>(pixels), static_cast<std::size_t>(input_.numel()), input_.dtype);
  return converted.data();
}

void Trainer::load_batch(const void* pixels, DType pixel_type, const std::int32_t* labels) {
  std::vector<std::byte> converted;
  backend_.copy_from_host(input_.data, pixels_as_input("load_batch", pixels, pixel_type, converted), input_.bytes());
  backend_.copy_from_host(labels_storage_.data, labels, label_bytes());
}

void Trainer::load_sequences(const std::int32_t* token_ids, const std::int32_t* labels) {
  if (input_.dtype != DType::int32) throw std::logic_error("load_sequences: this trainer's input is images");
  backend_.copy_from_host(input_.data, token_ids, input_.bytes());
  backend_.copy_from_host(labels_storage_.data, labels, label_bytes());
}

void Trainer::stage_batch(const void* pixels, DType pixel_type, const std::int32_t* labels) {
  if (!backend_.overlaps_host_copies()) {
    load_batch(pixels, pixel_type, labels);
    return;
  }
  // Released only with the batch (release_staged_host_memory), as the pipeline's own memory is.
  stage_input_and_labels(pixels_as_input("stage_batch", pixels, pixel_type, converted_), labels);
}

void Trainer::stage_sequences(const std::int32_t* token_ids, const std::int32_t* labels) {
  if (!backend_.overlaps_host_copies()) {
    load_sequences(token_ids, labels);
    return;
  }
  if (input_.dtype != DType::int32) throw std::logic_error("stage_sequences: this trainer's input is images");
  stage_input_and_labels(token_ids, labels);
}

void Trainer::stage_input_and_labels(const void* input, const std::int32_t* labels) {
  stage_with_labels([&](void* staged_input) { backend_.stage_from_host(staged_input, input, input_.bytes()); }, labels);
}

void Trainer::stage_with_labels(const std::function<void(void* staged_input)>& stage_input, const std::int32_t* labels) {
  if (staged_pending_) throw std::logic_error("stage_batch: the batch staged before has not been trained on");
  if (!staged_input_) {
    staged_input_ = backend_.allocate(input_.bytes());
    staged_labels_ = backend_.allocate(label_bytes());
  }
  stage_input(staged_input_.get());
  backend_.stage_from_host(staged_labels_.get(), labels, label_bytes());
  staged_pending_ = staged_unread_ = true;
}

void Trainer::stage_packed_images(const void* packed, std::size_t bytes, std::size_t capacity, int side,
                                  DType pixel_type, const std::int32_t* labels) {
  if (!backend_.overlaps_host_copies()) {
    throw std::logic_error("stage_packed_images: the " + backend_.name() + " backend resizes no images");
  }
  const Shape& s = input_.shape;
  const bool images = s.rank == 4 && s.c() == 3 && s.h() == side && s.w() == side;
  if (!images || pixel_type != input_.dtype || bytes > capacity) {
    throw std::logic_error("stage_packed_images: " + std::to_string(side) + " x " + std::to_string(side) + " " +
                           std::string(to_string(pixel_type)) + " images (" + std::to_string(bytes) + " of " +
                           std::to_string(capacity) + " bytes) for an input " + s.to_string() + " of " +
                           std::string(to_string(input_.dtype)));
  }
  stage_with_labels(
      [&](void* staged_input) {
        if (staged_packed_capacity_ < capacity) {
          staged_packed_ = backend_.allocate(capacity);
          staged_packed_capacity_ = capacity;
        }
        backend_.stage_from_host(staged_packed_.get(), packed, bytes);
        backend_.expand_staged_images(staged_input, staged_packed_.get(), s.n(), side, input_.dtype,
                                      input_.layout == Layout::nhwc);
      },
      labels);
}

void Trainer::take_staged_batch() {
  if (!staged_pending_) return;
  backend_.take_staged(input_.data, staged_input_.get(), input_.bytes());
  backend_.take_staged(labels_storage_.data, staged_labels_.get(), label_bytes());
  staged_pending_ = false;
}

Trainer::~Trainer() {
  try {
    release_staged_host_memory();
  } catch (...) {  // a lost device has nothing left to read; a destructor must not throw
  }
}

void Trainer::release_staged_host_memory() {
  if (!staged_unread_) return;
  backend_.wait_staged_reads();
  staged_unread_ = false;
}

void pad_pretraining_batch(const PretrainingBatchLayout& batch, const std::vector<std::int32_t>& real_tokens,
                           std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& labels,
                           std::int32_t padding_id) {
  const std::int64_t length = batch.tokens, p = batch.predictions();
  const auto at = [](std::vector<std::int32_t>& v, std::int64_t i) -> std::int32_t& { return v[static_cast<std::size_t>(i)]; };
  for (std::int64_t s = 0; s < batch.sequences; ++s) {
    const std::int32_t real = real_tokens.at(static_cast<std::size_t>(s));
    at(labels, batch.real_tokens() + s) = real;
    for (std::int64_t j = real; j < length; ++j) {
      at(tokens, s * length + j) = padding_id;
      at(labels, batch.token_types() + s * length + j) = 0;
    }
    for (std::int64_t k = 0; k < p; ++k) {
      std::int32_t& row = at(labels, batch.masked_rows() + s * p + k);
      if (row - s * length >= real) {
        row = static_cast<std::int32_t>(s * length);
        at(labels, batch.masked_tokens() + s * p + k) = kNoPrediction;
      }
    }
  }
}

void Trainer::pad_sequences(const PretrainingBatchLayout& batch, const std::vector<std::int32_t>& real_tokens,
                            std::int32_t padding_id) {
  std::vector<std::int32_t> tokens, labels;
  copy_sequences_to_host(tokens, labels);
  pad_pretraining_batch(batch, real_tokens, tokens, labels, padding_id);
  load_sequences(tokens.data(), labels.data());
}

void Trainer::copy_batch_to_host(std::vector<float>& pixels_nchw, std::vector<std::int32_t>& labels) {
  if (input_.dtype == DType::int32) throw std::logic_error("copy_batch_to_host: this trainer's input is token ids");
  take_staged_batch();  // a staged batch is the next step's
  pixels_nchw = download(backend_, input_);
  labels.resize(static_cast<std::size_t>(label_count_));
  backend_.copy_to_host(labels.data(), labels_storage_.data, labels.size() * sizeof(std::int32_t));
}

void Trainer::entering(StepPart part) {
  if (context_.observer != nullptr) context_.observer->outside(part);
}

void Trainer::forward_and_loss() {
  entering(StepPart::other);
  backend_.begin_step(context_.step);  // inside a capture this becomes "the step after the last"
  arena_.begin_step();  // poison mode: every buffer dies again this step
  const auto* labels = static_cast<const std::int32_t*>(labels_storage_.data);
  // The scale as the backend holds it: a replayed step reads the current one.
  const float* gradient_scale = loss_scaling_ ? &loss_scale_state()->scale : nullptr;
  context_.labels = labels;
  context_.gradient_scale = gradient_scale;
  context_.loss_terms = 0;
  const Tensor& logits = network_->forward(input_, context_);
  entering(StepPart::loss);
  // The main classifier's term adds to the auxiliary ones forward computed (InceptionV3's).
  loss_.forward_backward(logits, labels, backend_, gradient_scale, LossTerm{1.0f, context_.loss_terms > 0});
}

float Trainer::loss() {
  forward_and_loss();
  return backend_.last_loss();
}

float Trainer::compute_gradients() {
  take_staged_batch();
  queue_gradients();
  return backend_.last_loss();
}

void Trainer::queue_gradients() {
  forward_and_loss();  // with loss scaling, dlogits is already scaled
  network_->backward(loss_.dlogits(), context_);
  if (before_update_) {
    entering(StepPart::gradient_reduction_wait);
    before_update_();
  }
  if (loss_scaling_) {
    entering(StepPart::loss_scaling);
    backend_.unscale_and_check_finite(parameters_.grads(), parameters_.elements(), loss_scale_state(), *loss_scaling_);
  }
}

void Trainer::use_loss_scaling(LossScalingConfig config) {
  check_loss_scaling(config);
  if (graph_captured_) throw std::logic_error("use_loss_scaling: a step graph is already captured without it");
  if (!loss_scale_memory_) loss_scale_memory_ = backend_.allocate(sizeof(LossScaleState));
  const LossScaleState initial = starting_loss_scale(config);
  backend_.copy_from_host(loss_scale_memory_.get(), &initial, sizeof initial);
  loss_scaling_ = config;
}

std::optional<LossScaleState> Trainer::loss_scale() {
  if (!loss_scaling_) return std::nullopt;
  LossScaleState state;
  backend_.copy_to_host(&state, loss_scale_memory_.get(), sizeof state);
  return state;
}

bool Trainer::last_step_skipped() {
  const auto state = loss_scale();
  return state && update_skipped(&*state);
}

std::string Trainer::describe_skipped_step() {
  std::vector<float> grads(static_cast<std::size_t>(parameters_.elements()));
  backend_.copy_to_host(grads.data(), parameters_.grads(), grads.size() * sizeof(float));
  const float loss = backend_.last_loss();
  const std::vector<Parameter*>& all = parameters_.parameters();
  std::vector<std::string> overflowed;
  for (auto p = all.rbegin(); p != all.rend(); ++p) {  // backward's order: nearest the loss first
    const std::int64_t values = (*p)->value.numel();
    const NonFiniteCount count = count_non_finite(grads.data() + (*p)->offset, values);
    if (count.total() > 0) overflowed.push_back((*p)->name + " (" + describe_non_finite(count, values) + ")");
  }
  std::ostringstream out;
  out << "loss " << loss << (std::isfinite(loss) ? "" : " (not finite: the forward pass overflowed)") << "; "
      << overflowed.size() << " of " << all.size() << " parameters' gradients not finite";
  for (std::size_t i = 0; i < overflowed.size() && i < 3; ++i) out << (i == 0 ? ", nearest the loss first: " : ", ") << overflowed[i];
  if (overflowed.size() > 3) out << ", ...";
  return out.str();
}

void Trainer::step() {
  entering(StepPart::input);
  take_staged_batch();  // outside the step graph: the copy it waits for is not part of the step
  if (graph_captured_) {
    backend_.replay();
    ++context_.step;
    last_step_eager_ = false;
    say_if_skipped();
    return;
  }
  const bool capture = use_graph_ && context_.step >= 1;  // the first step runs eagerly: algorithms, workspace
  last_step_eager_ = !capture;
  if ((skip_log_ != nullptr || searching_for_overflow_) && last_step_eager_) {
    if (const auto state = loss_scale()) last_step_scale_ = state->scale;  // waits: the log's steps do anyway
  }
  if (capture) backend_.begin_capture();
  queue_gradients();
  // Whether the update applies is the backend's to decide, on the device (loss scaling's state):
  // the host queues it either way.
  const LossScaleState* loss_scale = loss_scaling_ ? loss_scale_state() : nullptr;
  entering(StepPart::update);
  // Captured at step >= 1, so the recorded update is never the first (momentum buffer = grad).
  if (adamw_ && lamb_) {
    backend_.lamb_update(parameters_.values(), parameters_.grads(), parameters_.momentum(), parameters_.second_moment(),
                         parameters_.elements(), decay_ranges_, *adamw_, updates_queued_ + 1, loss_scale);
  } else if (adamw_) {
    backend_.adamw_update(parameters_.values(), parameters_.grads(), parameters_.momentum(), parameters_.second_moment(),
                          parameters_.elements(), decay_ranges_, *adamw_, updates_queued_ + 1, loss_scale);
  } else {
    backend_.sgd_update(parameters_.values(), parameters_.grads(), parameters_.momentum(), parameters_.elements(), sgd_,
                        updates_queued_ + 1, loss_scale);
  }
  ++updates_queued_;
  if (capture) {
    backend_.end_capture();
    graph_captured_ = true;
    backend_.replay();  // capturing recorded the step without running it
  }
  ++context_.step;
  say_if_skipped();
}

std::optional<Trainer::SkippedStep> Trainer::last_skipped_step() {
  const auto state = loss_scale();  // one read of the device's state: skipped, and the scale it left
  if (!state || !update_skipped(&*state)) return std::nullopt;
  std::ostringstream what;
  what << "step " << context_.step << " skipped, loss scale now " << state->scale << ": " << describe_skipped_step();
  if (!last_step_eager_) {
    return SkippedStep{what.str(), {"a step graph's replay: not traced layer by layer", ReplayFinding::none}};
  }
  return SkippedStep{what.str(), replay_skipped_step(last_step_scale_)};
}

void Trainer::say(const SkippedStep& skipped) {
  *skip_log_ << skip_log_who_ << ": " << skipped.what << "\n  " << skipped.replay.said << std::endl;
}

void Trainer::say_if_skipped() {
  if (skip_log_ == nullptr) return;
  if (const auto skipped = last_skipped_step()) say(*skipped);
}

std::string Trainer::trace_skipped_step(float scale) { return replay_skipped_step(scale).said; }

Trainer::Replay Trainer::replay_skipped_step(float scale) {
  if (!loss_scaling_) throw std::logic_error("trace_skipped_step: no loss scaling");
  if (graph_captured_) throw std::logic_error("trace_skipped_step: the step is a captured graph");
  const LossScaleState after = *loss_scale();
  LossScaleState replayed = after;
  replayed.scale = scale;
  backend_.copy_from_host(loss_scale_memory_.get(), &replayed, sizeof replayed);
  FirstNonFinite finder(*network_, backend_);
  // The step as it ran: its dropout masks, no gradient buckets sent, no before-update hook.
  auto gradients_ready = std::exchange(context_.gradients_ready, nullptr);
  LayerObserver* const observer = std::exchange(context_.observer, &finder);
  --context_.step;
  const auto restore = [&] {
    ++context_.step;
    context_.observer = observer;
    context_.gradients_ready = std::move(gradients_ready);
    backend_.copy_from_host(loss_scale_memory_.get(), &after, sizeof after);
  };
  NonFiniteCount batch, loss_gradient;
  float loss = 0.0f;
  try {
    batch = backend_.count_non_finite(input_);
    forward_and_loss();
    loss = backend_.last_loss();
    loss_gradient = backend_.count_non_finite(loss_.dlogits());
    network_->backward(loss_.dlogits(), context_);
  } catch (...) {
    restore();
    throw;
  }
  restore();
  const auto finding = [](const char* what, const std::optional<FirstNonFinite::Finding>& f) {
    if (!f) return std::string("every ") + what + " finite";
    return std::string("first non-finite ") + what + ": " + f->where + ", " + describe_non_finite(f->count, f->values);
  };
  std::ostringstream out;
  out << "replayed at loss scale " << scale << ": ";
  if (batch.total() > 0) out << "the batch holds " << describe_non_finite(batch, input_.numel()) << "; ";
  out << "forward: " << finding("layer output", finder.forward()) << "; loss " << loss << "; ";
  if (loss_gradient.total() > 0) {
    out << "the loss gradient holds " << describe_non_finite(loss_gradient, loss_.dlogits().numel()) << "; ";
  }
  out << "backward: " << finding("input gradient", finder.backward());
  const bool located = batch.total() > 0 || finder.forward() || loss_gradient.total() > 0 || finder.backward();
  return Replay{out.str(), located ? ReplayFinding::located : ReplayFinding::all_finite};
}

Trainer::OverflowTrace Trainer::trace_first_overflow(const std::function<void()>& step, int max_steps) {
  if (!loss_scaling_) throw std::logic_error("trace_first_overflow: no loss scaling");
  // The steps say nothing themselves: the skipped one is said below, once, where a log is set.
  std::ostream* const log = std::exchange(skip_log_, nullptr);
  searching_for_overflow_ = true;
  const auto restore = [&] {
    skip_log_ = log;
    searching_for_overflow_ = false;
  };
  std::optional<SkippedStep> found;
  int ran = 0;
  try {
    while (ran < max_steps && !found) {
      step();
      ++ran;
      found = last_skipped_step();
    }
  } catch (...) {
    restore();
    throw;
  }
  restore();
  if (!found) {
    std::ostringstream none;
    none << "none of " << ran << " untimed steps after the repeats skipped; the scale stayed at " << loss_scale()->scale;
    return {none.str(), ReplayFinding::none};
  }
  if (skip_log_ != nullptr) say(*found);
  return {"untimed " + found->what + "\n" + found->replay.said, found->replay.found};
}

void Trainer::use_adamw(AdamWConfig config) { use_adam_family(config, false); }

void Trainer::use_lamb(AdamWConfig config) { use_adam_family(config, true); }

// AdamW updates runs of tensors alike in decay (fewer ranges); LAMB's trust ratio is per tensor.
void Trainer::use_adam_family(AdamWConfig config, bool lamb) {
  if (!adamw_) parameters_.allocate_second_moment(backend_);
  adamw_ = config;
  lamb_ = lamb;
  decay_ranges_.clear();
  // Each range takes its parameters' padding too (zeros, which stay zero), so neighbours alike in
  // decay still make one range.
  for (const Parameter* p : parameters_.parameters()) {
    const bool decays = p->value.shape.rank >= 2;
    const std::int64_t extent = padded_parameter_elements(p->value.numel());
    if (!lamb && !decay_ranges_.empty() && decay_ranges_.back().decays == decays &&
        decay_ranges_.back().offset + decay_ranges_.back().count == p->offset) {
      decay_ranges_.back().count += extent;
    } else {
      decay_ranges_.push_back({p->offset, extent, decays});
    }
  }
}

void Trainer::copy_sequences_to_host(std::vector<std::int32_t>& token_ids, std::vector<std::int32_t>& labels) {
  if (input_.dtype != DType::int32) throw std::logic_error("copy_sequences_to_host: this trainer's input is images");
  take_staged_batch();  // a staged batch is the next step's
  token_ids.resize(static_cast<std::size_t>(input_.numel()));
  backend_.copy_to_host(token_ids.data(), input_.data, input_.bytes());
  labels.resize(static_cast<std::size_t>(label_count_));
  backend_.copy_to_host(labels.data(), labels_storage_.data, labels.size() * sizeof(std::int32_t));
}

void Trainer::use_step_graph(bool on) {
  if (on && !backend_.can_capture()) {
    throw std::invalid_argument("the " + backend_.name() + " backend cannot capture a step as a graph");
  }
  use_graph_ = on;
}

float Trainer::last_loss() { return backend_.last_loss(); }

}  // namespace dlbench::worker
