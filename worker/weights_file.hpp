// Weights and training-step records as safetensors files: an 8-byte little-endian header
// length, a JSON header {"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
// "__metadata__": {...}}, then the tensors' bytes, row-major, little-endian, back to back.
// PyTorch writes one with a few lines (tests/golden/golden.py) or with the safetensors package,
// and names tensors as its state_dict does, which is how dlbench names its parameters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "host_memory.hpp"
#include "tensor.hpp"

namespace dlbench::worker {

class Backend;
class ParameterStore;

struct WeightsFileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One tensor of a file: dtype as safetensors spells it (F32, F16, BF16, I32, I64 are read).
struct NamedTensor {
  std::string name;
  std::string dtype = "F32";
  std::vector<std::int64_t> shape;
  std::vector<std::byte, LargePageAllocator<std::byte>> bytes;  // a VGG16 record holds 1.6 GB

  static NamedTensor of_floats(std::string name, std::vector<std::int64_t> shape, const float* values);
  static NamedTensor of_ints(std::string name, std::vector<std::int64_t> shape, const std::int64_t* values);
  std::int64_t numel() const;
  // The values as fp32 (F16 and BF16 widened exactly); throws for integer tensors.
  std::vector<float> floats() const;
  std::vector<std::int64_t> ints() const;
};

// A tensor shape as a file's dimension list.
std::vector<std::int64_t> dims_of(const Shape& shape);

struct WeightsFile {
  std::vector<NamedTensor> tensors;  // in the order of their bytes in the file
  std::map<std::string, std::string> metadata;

  const NamedTensor* find(const std::string& name) const;
};

// Throws WeightsFileError naming the file and what is wrong with it: a header that does not
// parse or is larger than 100 MiB, an unknown dtype, a shape that does not match its bytes,
// offsets outside the file or overlapping, a truncated file.
WeightsFile read_weights_file(const std::string& path);
void write_weights_file(const std::string& path, const WeightsFile& file);

// The model's parameters by name (torchvision's state_dict names). Every parameter must be in
// the file with its shape; batch-norm buffers (running_mean, running_var, num_batches_tracked)
// are allowed and not used (training mode normalises with the batch's statistics); any other
// tensor is an error, since it means the file is for another model.
void load_parameters(const WeightsFile& file, const std::string& path, ParameterStore& store, Backend& backend);
// The parameters' values (or, with `gradients`, their gradients) as named fp32 tensors.
std::vector<NamedTensor> parameter_tensors(const ParameterStore& store, Backend& backend, const std::string& prefix,
                                           bool gradients = false);

}  // namespace dlbench::worker
