#include "parameters.hpp"

#include <cmath>
#include <numbers>
#include <random>
#include <vector>

#include "backend.hpp"
#include "host_memory.hpp"

namespace dlbench::worker {

void ParameterStore::bind(std::vector<Parameter*> parameters, Backend& backend) {
  parameters_ = std::move(parameters);
  count_ = 0;
  elements_ = 0;
  for (Parameter* p : parameters_) {
    p->offset = elements_;
    count_ += p->value.numel();
    elements_ += padded_parameter_elements(p->value.numel());
  }
  // Backend::allocate zero-fills: the padding starts, and stays, zero.
  const auto bytes = static_cast<std::size_t>(elements_) * sizeof(float);
  values_ = std::static_pointer_cast<float>(backend.allocate(bytes));
  grads_ = std::static_pointer_cast<float>(backend.allocate(bytes));
  momentum_ = std::static_pointer_cast<float>(backend.allocate(bytes));
  for (Parameter* p : parameters_) {
    p->value.data = values_.get() + p->offset;
    p->grad = p->value;
    p->grad.data = grads_.get() + p->offset;
  }
  backend.bind_parameters(values_, elements_);
}

void ParameterStore::allocate_second_moment(Backend& backend) {
  if (!second_moment_) {
    second_moment_ = std::static_pointer_cast<float>(backend.allocate(static_cast<std::size_t>(elements_) * sizeof(float)));
  }
}

void ParameterStore::initialize(std::uint64_t seed, Backend& backend) {
  std::vector<float, LargePageAllocator<float>> host;  // VGG16's classifier.0.weight is 411 MB
  for (std::size_t index = 0; index < parameters_.size(); ++index) {
    Parameter& p = *parameters_[index];
    host.assign(static_cast<std::size_t>(p.value.numel()), 0.0f);
    // One generator per parameter: adding a layer does not change the others' weights.
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + index);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    const auto normal = [&](double stddev) {  // Box–Muller, identical on every platform
      const double u1 = 1.0 - uniform(rng), u2 = uniform(rng);
      return stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    };
    switch (p.init) {
      case ParameterInit::kaiming_normal_fan_out: {
        const double stddev = std::sqrt(2.0 / static_cast<double>(p.fan_out));
        for (float& v : host) v = static_cast<float>(normal(stddev));
        break;
      }
      case ParameterInit::linear_default: {
        const double bound = 1.0 / std::sqrt(static_cast<double>(p.fan_in));
        for (float& v : host) v = static_cast<float>((2.0 * uniform(rng) - 1.0) * bound);
        break;
      }
      case ParameterInit::normal_0_01:
        for (float& v : host) v = static_cast<float>(normal(0.01));
        break;
      case ParameterInit::truncated_normal:
        for (float& v : host) {
          double draw = normal(p.init_std);
          while (std::fabs(draw) > 2.0) draw = normal(p.init_std);
          v = static_cast<float>(draw);
        }
        break;
      case ParameterInit::normal:
        for (float& v : host) v = static_cast<float>(normal(p.init_std));
        break;
      case ParameterInit::zeros: break;
      case ParameterInit::ones:
        for (float& v : host) v = 1.0f;
        break;
    }
    backend.copy_from_host(p.value.data, host.data(), host.size() * sizeof(float));
  }
}

}  // namespace dlbench::worker
