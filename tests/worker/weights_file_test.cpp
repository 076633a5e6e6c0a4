// Weights files (safetensors) and parameter names: the round trip, torchvision's names, loading
// into a model, and every malformed file refused with what is wrong.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "cpu/cpu_backend.hpp"
#include "models/model.hpp"
#include "parameters.hpp"
#include "weights_file.hpp"

namespace dlbench::worker {
namespace {

using ::testing::HasSubstr;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("dlbench-weights-" + name)).string();
}

void write_raw(const std::string& path, const std::string& header, std::size_t data_bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const std::uint64_t size = header.size();
  out.write(reinterpret_cast<const char*>(&size), 8);
  out << header;
  out << std::string(data_bytes, '\0');
}

std::string read_error(const std::string& path) {
  try {
    read_weights_file(path);
  } catch (const WeightsFileError& e) {
    return e.what();
  }
  return "";
}

std::vector<std::string> parameter_names(const std::string& model) {
  auto net = build_model(model);
  std::vector<Parameter*> params;
  net->collect_parameters(params);
  std::vector<std::string> names;
  for (const Parameter* p : params) names.push_back(p->name);
  return names;
}

TEST(WeightsFile, RoundTripKeepsNamesShapesValuesAndMetadata) {
  const float values[] = {1.5f, -2.25f, 3.0f, 0.0f, 1e-30f, -7.0f};
  const std::int64_t labels[] = {3, 999};
  WeightsFile file;
  file.metadata = {{"format", "test"}};
  file.tensors.push_back(NamedTensor::of_floats("a.weight", {2, 3}, values));
  file.tensors.push_back(NamedTensor::of_ints("labels", {2}, labels));
  file.tensors.push_back(NamedTensor::of_floats("loss", {}, values));
  const std::string path = temp_path("roundtrip");
  write_weights_file(path, file);
  const WeightsFile back = read_weights_file(path);
  ASSERT_EQ(back.tensors.size(), 3u);
  EXPECT_EQ(back.metadata.at("format"), "test");
  EXPECT_EQ(back.find("a.weight")->shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(back.find("a.weight")->floats(), std::vector<float>(values, values + 6));
  EXPECT_EQ(back.find("labels")->ints(), (std::vector<std::int64_t>{3, 999}));
  EXPECT_EQ(back.find("loss")->floats(), std::vector<float>{1.5f});
  EXPECT_THROW(back.find("labels")->floats(), WeightsFileError);
  std::filesystem::remove(path);
}

TEST(WeightsFile, HalfPrecisionTensorsAreWidenedExactly) {
  const std::string path = temp_path("half");
  // bf16 1.5 = 0x3FC0, fp16 -2.0 = 0xC000
  const std::string header =
      R"({"b":{"dtype":"BF16","shape":[1],"data_offsets":[0,2]},"h":{"dtype":"F16","shape":[1],"data_offsets":[2,4]}})";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const std::uint64_t size = header.size();
  out.write(reinterpret_cast<const char*>(&size), 8);
  out << header;
  const unsigned char data[] = {0xC0, 0x3F, 0x00, 0xC0};
  out.write(reinterpret_cast<const char*>(data), 4);
  out.close();
  const WeightsFile file = read_weights_file(path);
  EXPECT_EQ(file.find("b")->floats(), std::vector<float>{1.5f});
  EXPECT_EQ(file.find("h")->floats(), std::vector<float>{-2.0f});
  std::filesystem::remove(path);
}

TEST(WeightsFile, MalformedFilesAreRefusedSayingWhat) {
  const std::string path = temp_path("bad");
  EXPECT_THAT(read_error(path + "-missing"), HasSubstr("cannot read it"));
  std::ofstream(path, std::ios::binary | std::ios::trunc) << "abc";
  EXPECT_THAT(read_error(path), HasSubstr("shorter than the 8-byte header length"));
  write_raw(path, "{not json", 0);
  EXPECT_THAT(read_error(path), HasSubstr("header is not JSON"));
  write_raw(path, R"({"x":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8);
  EXPECT_THAT(read_error(path), HasSubstr("dtype F64 is not one of F32, F16, BF16, I32, I64"));
  write_raw(path, R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8);
  EXPECT_THAT(read_error(path), HasSubstr("8 bytes do not hold F32 [3]"));
  write_raw(path, R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8);
  EXPECT_THAT(read_error(path), HasSubstr("outside the 8 data bytes"));
  write_raw(path, R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8);
  EXPECT_THAT(read_error(path), HasSubstr("does not start where the previous one ends"));
  write_raw(path, R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8);
  EXPECT_THAT(read_error(path), HasSubstr("4 bytes after the last tensor"));
  write_raw(path, R"({"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4);
  EXPECT_THAT(read_error(path), HasSubstr("non-natural dimension"));
  write_raw(path, R"({"x":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}})", 4);
  EXPECT_THAT(read_error(path), HasSubstr("shape overflows"));
  {  // a header length beyond the file: refused before allocating it
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    const std::uint64_t size = 1ull << 40;
    out.write(reinterpret_cast<const char*>(&size), 8);
  }
  EXPECT_THAT(read_error(path), HasSubstr("at most 100 MiB"));
  std::filesystem::remove(path);
}

TEST(ParameterNames, AreTorchvisionStateDictNames) {
  const auto resnet = parameter_names("resnet50");
  ASSERT_EQ(resnet.size(), 161u);
  EXPECT_EQ(resnet[0], "conv1.weight");
  EXPECT_EQ(resnet[1], "bn1.weight");
  EXPECT_EQ(resnet[2], "bn1.bias");
  EXPECT_EQ(resnet[3], "layer1.0.conv1.weight");
  EXPECT_THAT(resnet, ::testing::Contains("layer1.0.downsample.0.weight"));
  EXPECT_THAT(resnet, ::testing::Contains("layer4.2.bn3.bias"));
  EXPECT_EQ(resnet.back(), "fc.bias");
  const auto vgg = parameter_names("vgg16");
  EXPECT_EQ(vgg.front(), "features.0.weight");
  EXPECT_THAT(vgg, ::testing::Contains("features.28.bias"));
  EXPECT_THAT(vgg, ::testing::Contains("classifier.3.weight"));
  EXPECT_EQ(vgg.back(), "classifier.6.bias");
  const auto alexnet = parameter_names("alexnet");
  EXPECT_THAT(alexnet, ::testing::Contains("features.10.weight"));
  EXPECT_THAT(alexnet, ::testing::Contains("classifier.1.weight"));
  for (const auto& model : {"resnet50", "resnet152", "vgg16", "alexnet"}) {
    auto names = parameter_names(model);
    std::sort(names.begin(), names.end());
    EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end()) << model << " has a name twice";
  }
}

// A model's parameters bound to `backend`, drawn from `seed` if given (zeros otherwise: drawing
// AlexNet's 61M weights takes seconds).
struct BoundModel {
  std::unique_ptr<Sequential> net;
  ParameterStore store;

  BoundModel(const std::string& model, std::int64_t classes, Backend& backend, std::optional<std::uint64_t> seed)
      : net(build_model(model, classes)) {
    std::vector<Parameter*> params;
    net->collect_parameters(params);
    store.bind(params, backend);
    if (seed) store.initialize(*seed, backend);
  }
};

std::string load_error(const std::string& path, BoundModel& model, Backend& backend) {
  try {
    load_parameters(read_weights_file(path), path, model.store, backend);
  } catch (const WeightsFileError& e) {
    return e.what();
  }
  return "";
}

TEST(LoadParameters, LoadsByNameAndRefusesAnotherModelsFile) {
  CpuBackend backend(1);
  BoundModel source("alexnet", 10, backend, 1);
  const std::string path = temp_path("alexnet");
  WeightsFile file;
  file.tensors = parameter_tensors(source.store, backend, "");
  // Written in reverse order with a batch-norm buffer beside them: order is not meaning, buffers are allowed.
  std::reverse(file.tensors.begin(), file.tensors.end());
  const std::int64_t tracked = 7;
  file.tensors.push_back(NamedTensor::of_ints("features.bn.num_batches_tracked", {}, &tracked));
  write_weights_file(path, file);

  BoundModel other("alexnet", 10, backend, 2);
  EXPECT_EQ(load_error(path, other, backend), "");
  EXPECT_EQ(std::memcmp(source.store.values(), other.store.values(),
                        static_cast<std::size_t>(source.store.elements()) * sizeof(float)),
            0);
  // The same file against a model with 1000 classes: the classifier's shape is named.
  BoundModel big("alexnet", 1000, backend, std::nullopt);
  EXPECT_THAT(load_error(path, big, backend),
              HasSubstr("tensor \"classifier.6.weight\" is [10, 4096]; the model's parameter is [1000, 4096]"));
  // Against ResNet-50: the missing parameters are listed (five, then a count).
  BoundModel resnet("resnet50", 1000, backend, std::nullopt);
  const std::string error = load_error(path, resnet, backend);
  EXPECT_THAT(error, HasSubstr("lacks 161 of the model's 161 parameters: conv1.weight, bn1.weight"));
  EXPECT_THAT(error, HasSubstr("and 156 more"));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace dlbench::worker
