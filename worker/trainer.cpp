#include "trainer.hpp"

#include <random>
#include <stdexcept>

namespace dlbench::worker {

std::vector<float> nchw_to_nhwc(const std::vector<float>& nchw, const Shape& s) {
  std::vector<float> nhwc(nchw.size());
  const std::int64_t c = s.c(), h = s.h(), w = s.w();
  for (std::int64_t b = 0; b < s.n(); ++b) {
    for (std::int64_t ch = 0; ch < c; ++ch) {
      for (std::int64_t y = 0; y < h; ++y) {
        for (std::int64_t x = 0; x < w; ++x) {
          nhwc[static_cast<std::size_t>(((b * h + y) * w + x) * c + ch)] =
              nchw[static_cast<std::size_t>(((b * c + ch) * h + y) * w + x)];
        }
      }
    }
  }
  return nhwc;
}

Trainer::Trainer(Backend& backend, std::unique_ptr<Sequential> network, const Shape& input, std::int64_t num_classes,
                 SgdConfig sgd, std::uint64_t seed, std::uint64_t data_rank)
    : backend_(backend), network_(std::move(network)), sgd_(sgd), context_{backend, seed, 0, {}} {
  std::vector<Parameter*> params;
  network_->collect_parameters(params);
  parameters_.bind(std::move(params), backend_);
  parameters_.initialize(seed, backend_);

  input_ = activation(input, backend_.activation_layout());
  arena_.request(input_);
  SetupContext setup{backend_, arena_, false};
  const Shape logits = network_->setup(input, setup);
  if (logits.rank != 2 || logits.c() != num_classes) {
    throw std::invalid_argument("network output " + logits.to_string() + " is not (batch, " +
                                std::to_string(num_classes) + ")");
  }
  loss_.setup(logits, setup);
  labels_storage_.shape = Shape(input.n());
  arena_.request(labels_storage_);
  arena_.commit(backend_);
  network_->reset_state(backend_);

  // The synthetic batch: N(0, 1) pixels and uniform labels, generated once.
  std::mt19937_64 rng(seed ^ (0xD1B54A32D192ED03ull * (data_rank + 1)));
  std::normal_distribution<float> pixel(0.0f, 1.0f);
  // Drawn in logical (N, C, H, W) order and stored in the backend's layout, so that every
  // backend trains on the same images.
  std::vector<float> host(static_cast<std::size_t>(input_.numel()));
  for (float& v : host) v = pixel(rng);
  if (input_.layout == Layout::nhwc) host = nchw_to_nhwc(host, input);
  backend_.copy_from_host(input_.data, host.data(), input_.bytes());
  std::uniform_int_distribution<std::int32_t> label(0, static_cast<std::int32_t>(num_classes - 1));
  std::vector<std::int32_t> labels(static_cast<std::size_t>(input.n()));
  for (auto& l : labels) l = label(rng);
  backend_.copy_from_host(labels_storage_.data, labels.data(), labels.size() * sizeof(std::int32_t));
}

float Trainer::loss() {
  const Tensor& logits = network_->forward(input_, context_);
  return loss_.forward_backward(logits, reinterpret_cast<const std::int32_t*>(labels_storage_.data), backend_);
}

float Trainer::compute_gradients() {
  const float value = loss();
  network_->backward(loss_.dlogits(), context_);
  if (before_update_) before_update_();
  return value;
}

float Trainer::step() {
  const float value = compute_gradients();
  backend_.sgd_update(parameters_.values(), parameters_.grads(), parameters_.momentum(), parameters_.count(),
                      sgd_.learning_rate, sgd_.momentum, sgd_.weight_decay, context_.step == 0);
  ++context_.step;
  return value;
}

}  // namespace dlbench::worker
