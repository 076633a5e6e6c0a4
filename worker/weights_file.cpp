#include "weights_file.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "backend.hpp"
#include "parameters.hpp"
#include "precision.hpp"

static_assert(std::endian::native == std::endian::little, "safetensors files are little-endian; so is this reader");

namespace dlbench::worker {
namespace {

constexpr std::uint64_t kMaxHeaderBytes = 100ull << 20;  // safetensors' own limit

std::size_t element_size(const std::string& dtype) {
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "F16" || dtype == "BF16") return 2;
  if (dtype == "I64") return 8;
  return 0;
}

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw WeightsFileError("weights file " + path + ": " + why);
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Names that a torchvision state_dict holds beside parameters: batch-norm buffers.
bool is_unused_buffer(const std::string& name) {
  for (const char* suffix : {".running_mean", ".running_var", ".num_batches_tracked"}) {
    if (name.ends_with(suffix)) return true;
  }
  return false;
}

std::string listed(const std::vector<std::string>& names) {
  std::string s;
  for (std::size_t i = 0; i < names.size() && i < 5; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > 5) s += " and " + std::to_string(names.size() - 5) + " more";
  return s;
}

}  // namespace

std::vector<std::int64_t> dims_of(const Shape& shape) {
  return {shape.dims.begin(), shape.dims.begin() + shape.rank};
}

NamedTensor NamedTensor::of_floats(std::string name, std::vector<std::int64_t> shape, const float* values) {
  NamedTensor t{std::move(name), "F32", std::move(shape), {}};
  t.bytes.resize(static_cast<std::size_t>(t.numel()) * sizeof(float));
  if (!t.bytes.empty()) std::memcpy(t.bytes.data(), values, t.bytes.size());
  return t;
}

NamedTensor NamedTensor::of_ints(std::string name, std::vector<std::int64_t> shape, const std::int64_t* values) {
  NamedTensor t{std::move(name), "I64", std::move(shape), {}};
  t.bytes.resize(static_cast<std::size_t>(t.numel()) * sizeof(std::int64_t));
  if (!t.bytes.empty()) std::memcpy(t.bytes.data(), values, t.bytes.size());
  return t;
}

std::int64_t NamedTensor::numel() const {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) n *= d;
  return n;
}

std::vector<float> NamedTensor::floats() const {
  const auto n = static_cast<std::size_t>(numel());
  std::vector<float> out(n);
  if (dtype == "F32") {
    std::memcpy(out.data(), bytes.data(), n * sizeof(float));
  } else if (dtype == "BF16" || dtype == "F16") {
    for (std::size_t i = 0; i < n; ++i) {
      std::uint16_t bits = 0;
      std::memcpy(&bits, bytes.data() + 2 * i, 2);
      out[i] = dtype == "BF16" ? bf16{bits}.to_float() : fp16{bits}.to_float();
    }
  } else {
    throw WeightsFileError("tensor " + name + " is " + dtype + ", not a floating-point tensor");
  }
  return out;
}

std::vector<std::int64_t> NamedTensor::ints() const {
  const auto n = static_cast<std::size_t>(numel());
  std::vector<std::int64_t> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (dtype == "I64") {
      std::memcpy(&out[i], bytes.data() + 8 * i, 8);
    } else if (dtype == "I32") {
      std::int32_t v = 0;
      std::memcpy(&v, bytes.data() + 4 * i, 4);
      out[i] = v;
    } else {
      throw WeightsFileError("tensor " + name + " is " + dtype + ", not an integer tensor");
    }
  }
  return out;
}

const NamedTensor* WeightsFile::find(const std::string& name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

WeightsFile read_weights_file(const std::string& path) {
  std::error_code ec;
  const auto file_size = std::filesystem::file_size(path, ec);
  if (ec) fail(path, "cannot read it: " + ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open it");
  std::uint64_t header_size = 0;
  if (file_size < 8 || !in.read(reinterpret_cast<char*>(&header_size), 8)) fail(path, "shorter than the 8-byte header length");
  if (header_size > kMaxHeaderBytes) fail(path, "header of " + std::to_string(header_size) + " bytes (at most 100 MiB)");
  if (header_size > file_size - 8) fail(path, "truncated: the header runs past the end of the file");
  std::string header(static_cast<std::size_t>(header_size), '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_size));
  const std::uint64_t data_size = file_size - 8 - header_size;

  nlohmann::json json;
  try {
    json = nlohmann::json::parse(header);
  } catch (const nlohmann::json::exception& e) {
    fail(path, std::string("header is not JSON: ") + e.what());
  }
  if (!json.is_object()) fail(path, "header is not a JSON object");

  WeightsFile file;
  struct Span {
    std::uint64_t begin, end;
    std::size_t index;
  };
  std::vector<Span> spans;
  for (const auto& [name, entry] : json.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(path, "__metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) fail(path, "__metadata__." + key + " is not a string");
        file.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor \"" + name + "\": ";
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets")) {
      fail(path, where + "needs dtype, shape and data_offsets");
    }
    NamedTensor t;
    t.name = name;
    if (!entry["dtype"].is_string()) fail(path, where + "dtype is not a string");
    t.dtype = entry["dtype"].get<std::string>();
    const std::size_t size = element_size(t.dtype);
    if (size == 0) fail(path, where + "dtype " + t.dtype + " is not one of F32, F16, BF16, I32, I64");
    if (!entry["shape"].is_array()) fail(path, where + "shape is not an array");
    std::uint64_t elements = 1;
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_unsigned()) fail(path, where + "shape " + entry["shape"].dump() + " has a non-natural dimension");
      const auto dim = d.get<std::uint64_t>();
      if (dim != 0 && elements > std::numeric_limits<std::uint64_t>::max() / dim) fail(path, where + "shape overflows");
      elements *= dim;
      t.shape.push_back(static_cast<std::int64_t>(dim));
    }
    const auto& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
      fail(path, where + "data_offsets is not [begin, end]");
    }
    const auto begin = offsets[0].get<std::uint64_t>(), end = offsets[1].get<std::uint64_t>();
    if (begin > end || end > data_size) {
      fail(path, where + "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] outside the " +
                     std::to_string(data_size) + " data bytes");
    }
    if (elements > data_size / size || end - begin != elements * size) {
      fail(path, where + std::to_string(end - begin) + " bytes do not hold " + t.dtype + " " + shape_text(t.shape));
    }
    spans.push_back({begin, end, file.tensors.size()});
    file.tensors.push_back(std::move(t));
  }
  // The tensors must tile the data exactly: no gaps, no overlaps (as safetensors validates).
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  std::uint64_t at = 0;
  for (const Span& s : spans) {
    if (s.begin != at) fail(path, "tensor \"" + file.tensors[s.index].name + "\" does not start where the previous one ends");
    at = s.end;
  }
  if (at != data_size) fail(path, std::to_string(data_size - at) + " bytes after the last tensor");

  std::vector<NamedTensor> ordered;
  ordered.reserve(spans.size());
  for (const Span& s : spans) {
    NamedTensor& t = file.tensors[s.index];
    t.bytes.resize(static_cast<std::size_t>(s.end - s.begin));
    in.seekg(static_cast<std::streamoff>(8 + header_size + s.begin));
    if (!in.read(reinterpret_cast<char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()))) {
      fail(path, "cannot read the bytes of tensor \"" + t.name + "\"");
    }
    ordered.push_back(std::move(t));
  }
  file.tensors = std::move(ordered);
  return file;
}

void write_weights_file(const std::string& path, const WeightsFile& file) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!file.metadata.empty()) header["__metadata__"] = file.metadata;
  std::uint64_t offset = 0;
  for (const auto& t : file.tensors) {
    if (element_size(t.dtype) == 0 || t.bytes.size() != static_cast<std::size_t>(t.numel()) * element_size(t.dtype)) {
      throw WeightsFileError("tensor " + t.name + ": " + std::to_string(t.bytes.size()) + " bytes do not hold " + t.dtype +
                             " " + shape_text(t.shape));
    }
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const std::uint64_t size = text.size();
  out.write(reinterpret_cast<const char*>(&size), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& t : file.tensors) out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
  out.close();
  if (!out) throw WeightsFileError("cannot write weights file " + path);
}

void load_parameters(const WeightsFile& file, const std::string& path, ParameterStore& store, Backend& backend) {
  std::set<std::string> wanted;
  std::vector<std::string> missing;
  for (Parameter* p : store.parameters()) {
    wanted.insert(p->name);
    const NamedTensor* t = file.find(p->name);
    if (t == nullptr) {
      missing.push_back(p->name);
      continue;
    }
    const std::vector<std::int64_t> shape = dims_of(p->value.shape);
    if (t->shape != shape) {
      fail(path, "tensor \"" + p->name + "\" is " + shape_text(t->shape) + "; the model's parameter is " + shape_text(shape));
    }
    if (t->dtype == "I32" || t->dtype == "I64") fail(path, "tensor \"" + p->name + "\" is " + t->dtype + ", not floating point");
    const std::vector<float> values = t->floats();
    backend.copy_from_host(p->value.data, values.data(), values.size() * sizeof(float));
  }
  if (!missing.empty()) {
    fail(path, "lacks " + std::to_string(missing.size()) + " of the model's " + std::to_string(wanted.size()) +
                   " parameters: " + listed(missing));
  }
  std::vector<std::string> unexpected;
  for (const auto& t : file.tensors) {
    if (!wanted.contains(t.name) && !is_unused_buffer(t.name)) unexpected.push_back(t.name);
  }
  if (!unexpected.empty()) {
    fail(path, "has " + std::to_string(unexpected.size()) + " tensors the model does not (is it for another model?): " +
                   listed(unexpected));
  }
}

std::vector<NamedTensor> parameter_tensors(const ParameterStore& store, Backend& backend, const std::string& prefix,
                                           bool gradients) {
  std::vector<NamedTensor> out;
  for (const Parameter* p : store.parameters()) {
    const Tensor& t = gradients ? p->grad : p->value;
    NamedTensor& named = out.emplace_back(NamedTensor{prefix + p->name, "F32", dims_of(t.shape), {}});
    named.bytes.resize(static_cast<std::size_t>(t.numel()) * sizeof(float));
    backend.copy_to_host(named.bytes.data(), t.data, named.bytes.size());
  }
  return out;
}

}  // namespace dlbench::worker
