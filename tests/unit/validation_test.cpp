// One test per validation rule: the error names the field path and what is allowed.
#include <algorithm>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../support/test_support.hpp"
#include "dlbench/core/codec.hpp"
#include "dlbench/core/worker_command.hpp"

namespace dlbench {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using testing::error_strings;
using testing::minimal_run;
using nlohmann::json;

// Applies a JSON merge patch to the minimal run and returns its errors.
std::vector<std::string> errors_with(const json& patch) {
  json doc = minimal_run();
  doc.merge_patch(patch);
  return error_strings(doc);
}

TEST(Validation, MinimalRunIsValid) { EXPECT_THAT(error_strings(minimal_run()), IsEmpty()); }

TEST(Validation, ErrorNamesIndexedPathAndAllowedValues) {
  EXPECT_THAT(errors_with({{"spec", {{"matrix", {{"precision", {"fp32", "fp8"}}}}}}}),
              ElementsAre(R"(spec.matrix.precision[1]: "fp8" is not one of fp32, tf32, amp, bf16)"));
}

TEST(Validation, ReportsEveryProblemAtOnce) {
  const auto errors = errors_with({{"spec",
                                    {{"model", "resnet18"},
                                     {"methodology", {{"repeats", 0}, {"statistic", "p90"}}},
                                     {"limits", {{"backoffLimit", -1}}},
                                     {"worker", {{"gpuResource", "gpu"}}}}}});
  EXPECT_THAT(errors, SizeIs(5));
}

TEST(Validation, NotAnObject) {
  EXPECT_THAT(error_strings(json::array()), ElementsAre(HasSubstr("must be an object")));
}

TEST(Validation, ApiVersionAndKind) {
  EXPECT_THAT(errors_with({{"apiVersion", "dlbench.io/v1"}}),
              ElementsAre(R"(apiVersion: "dlbench.io/v1" is not supported; use dlbench.io/v1alpha1)"));
  EXPECT_THAT(errors_with({{"kind", "Job"}}), ElementsAre(R"(kind: "Job" is not supported; use BenchmarkRun)"));
  json doc = minimal_run();
  doc.erase("apiVersion");
  EXPECT_THAT(error_strings(doc), ElementsAre(HasSubstr("apiVersion: required")));
}

TEST(Validation, UnknownTopLevelField) {
  EXPECT_THAT(errors_with({{"specs", json::object()}}),
              ElementsAre("specs: unknown field; allowed fields: apiVersion, kind, metadata, spec, status"));
}

TEST(Validation, MetadataName) {
  json doc = minimal_run();
  doc["metadata"].erase("name");
  EXPECT_THAT(error_strings(doc), ElementsAre(HasSubstr("metadata.name: required")));
  EXPECT_THAT(errors_with({{"metadata", {{"name", "Big_Name"}}}}),
              ElementsAre(HasSubstr("metadata.name: \"Big_Name\" is not a DNS-1123 label")));
  EXPECT_THAT(errors_with({{"metadata", {{"name", std::string(64, 'a')}}}}),
              ElementsAre(HasSubstr("is not a DNS-1123 label")));
  EXPECT_THAT(errors_with({{"metadata", {{"name", std::string(63, 'a')}}}}), IsEmpty());
}

TEST(Validation, SpecRequired) {
  json doc = minimal_run();
  doc.erase("spec");
  EXPECT_THAT(error_strings(doc), ElementsAre(HasSubstr("spec: required")));
  EXPECT_THAT(errors_with({{"spec", "resnet50"}}), ElementsAre("spec: expected an object, got a string (\"resnet50\")"));
}

TEST(Validation, Model) {
  EXPECT_THAT(errors_with({{"spec", {{"model", "resnet18"}}}}),
              ElementsAre(R"(spec.model: "resnet18" is not one of resnet50, resnet152, vgg16, alexnet, inception_v3, deeplabv3plus, bert-base)"));
  json doc = minimal_run();
  doc["spec"].erase("model");
  EXPECT_THAT(error_strings(doc),
              ElementsAre("spec.model: required; one of resnet50, resnet152, vgg16, alexnet, inception_v3, "
                          "deeplabv3plus, bert-base"));
}

TEST(Validation, InceptionV3NeedsImagesOf299PixelsOrMore) {
  EXPECT_THAT(errors_with({{"spec", {{"model", "inception_v3"}}}}),
              ElementsAre("spec.data.imageSize: 224 is too small for inception_v3: its auxiliary classifier needs 299 or "
                          "more (set data.imageSize: 299)"));
  EXPECT_THAT(errors_with({{"spec", {{"model", "inception_v3"}, {"data", {{"imageSize", 299}}}}}}), IsEmpty());
  EXPECT_THAT(errors_with({{"spec", {{"model", "alexnet"}, {"data", {{"imageSize", 224}}}}}}), IsEmpty());
}

// What the API admits the worker runs: AlexNet's last max pool needs 63 pixels (the worker used
// to refuse below 64 after the API had admitted 32, and the case failed twice as WorkerExited).
TEST(Validation, AlexNetNeedsImagesOf63PixelsOrMore) {
  EXPECT_THAT(errors_with({{"spec", {{"model", "alexnet"}, {"data", {{"imageSize", 62}}}}}}),
              ElementsAre("spec.data.imageSize: 62 is too small for alexnet: its last max pool needs 63 or more (set "
                          "data.imageSize: 63)"));
  EXPECT_THAT(errors_with({{"spec", {{"model", "alexnet"}, {"data", {{"imageSize", 63}}}}}}), IsEmpty());
  EXPECT_THAT(errors_with({{"spec", {{"model", "alexnet"}, {"data", {{"imageHeight", 63}, {"imageWidth", 40}}}}}}),
              ElementsAre(HasSubstr("spec.data.imageWidth: 40 is too small for alexnet")));
  EXPECT_THAT(errors_with({{"spec", {{"model", "vgg16"}, {"data", {{"imageSize", 32}}}}}}), IsEmpty());
}

TEST(Validation, EngineAndCommand) {
  EXPECT_THAT(errors_with({{"spec", {{"engine", "pytorch"}}}}),
              ElementsAre(R"(spec.engine: "pytorch" is not one of native, command)"));
  EXPECT_THAT(errors_with({{"spec", {{"engine", "command"}}}}),
              ElementsAre(HasSubstr("spec.command: required when engine is command")));
  EXPECT_THAT(errors_with({{"spec", {{"command", {"python3", "train.py"}}}}}),
              ElementsAre("spec.command: only allowed when engine is command (engine is native)"));
  EXPECT_THAT(errors_with({{"spec", {{"engine", "command"}, {"command", json::array()}}}}),
              ElementsAre("spec.command: must have at least 1 entry"));
  EXPECT_THAT(errors_with({{"spec", {{"engine", "command"}, {"command", {"", "x"}}}}}),
              ElementsAre("spec.command[0]: the program name must not be empty"));
  EXPECT_THAT(errors_with({{"spec", {{"engine", "command"}, {"command", {"python3", 7}}}}}),
              ElementsAre("spec.command[1]: expected a string, got an integer (7)"));
  EXPECT_THAT(errors_with({{"spec", {{"engine", "command"}, {"command", {"python3", std::string(4097, 'x')}}}}}),
              ElementsAre("spec.command[1]: is 4097 characters long; at most 4096 allowed"));
  EXPECT_THAT(errors_with({{"spec", {{"engine", "command"}, {"command", {"python3", "train.py"}}}}}), IsEmpty());
}

TEST(Validation, Data) {
  EXPECT_THAT(errors_with({{"spec", {{"data", {{"source", "imagenet"}}}}}}),
              ElementsAre(R"(spec.data.source: "imagenet" is not one of synthetic, imagefolder, cityscapes, bertpretraining)"));
  EXPECT_THAT(errors_with({{"spec", {{"data", {{"imageSize", 31}}}}}}),
              ElementsAre("spec.data.imageSize: 31 is out of range; allowed: 32 to 2048"));
  EXPECT_THAT(errors_with({{"spec", {{"data", {{"imageSize", 2049}}}}}}),
              ElementsAre("spec.data.imageSize: 2049 is out of range; allowed: 32 to 2048"));
  EXPECT_THAT(errors_with({{"spec", {{"data", {{"imageSize", 224.5}}}}}}),
              ElementsAre("spec.data.imageSize: expected an integer from 32 to 2048, got a number (224.5)"));
  EXPECT_THAT(errors_with({{"spec", {{"data", {{"size", 224}}}}}}),
              ElementsAre("spec.data.size: unknown field; allowed fields: source, imageSize, imageHeight, "
                          "imageWidth, sequenceLength, path, volume, decodeThreads, prefetchBatches"));
}

// A sequence model's length: bert-base only, 8 to 512, synthetic data; the worker gets it with
// the optimizer, and the spec echoes it.
TEST(Validation, SequenceLengthAndAdamW) {
  const auto bert = [](json d) { return errors_with({{"spec", {{"model", "bert-base"}, {"data", std::move(d)}}}}); };
  EXPECT_THAT(bert({{"sequenceLength", 512}}), IsEmpty());
  EXPECT_THAT(bert({{"sequenceLength", 7}}), ElementsAre("spec.data.sequenceLength: 7 is out of range; allowed: 8 to 512"));
  EXPECT_THAT(bert({{"source", "imagefolder"}, {"path", "/data/train"}}),
              ElementsAre(HasSubstr("spec.data.source: imagefolder is not allowed for bert-base")));
  EXPECT_THAT(errors_with({{"spec", {{"data", {{"sequenceLength", 128}}}}}}),
              ElementsAre("spec.data.sequenceLength: only for a sequence model (bert-base); resnet50 takes images "
                          "(data.imageSize)"));
  // No image size for it, but the default every BenchmarkRun is given (Kubernetes writes it too).
  EXPECT_THAT(bert({{"imageSize", 224}}), IsEmpty());
  EXPECT_THAT(bert({{"imageSize", 300}}),
              ElementsAre("spec.data.imageSize: 300 is not for bert-base: it trains on token sequences; set "
                          "data.sequenceLength"));
  EXPECT_THAT(bert({{"imageHeight", 64}, {"imageWidth", 96}}),
              ElementsAre(HasSubstr("spec.data.imageHeight: 64 is not for bert-base")));

  json doc = minimal_run();
  doc.merge_patch({{"spec", {{"model", "bert-base"}, {"data", {{"sequenceLength", 64}}},
                             {"optimizer", {{"name", "adamw"}, {"learningRate", 1e-4}}}}}});
  const auto run = decode_benchmark_run(doc);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(sequence_length(run.value->spec.data), 64);
  EXPECT_EQ(to_json(run.value->spec)["data"]["sequenceLength"], 64);
  EXPECT_EQ(to_json(run.value->spec)["optimizer"]["name"], "adamw");
  EXPECT_FALSE(to_json(run.value->spec)["data"].contains("imageSize"));  // meaningless for it
  const std::vector<std::string> args = worker_arguments(*run.value, CaseSpec{1, 1, 8, Precision::fp32}, WorkerInvocation{});
  const auto after = [&](const std::string& flag) {
    const auto it = std::find(args.begin(), args.end(), flag);
    return it != args.end() && it + 1 != args.end() ? *(it + 1) : std::string("(absent)");
  };
  EXPECT_EQ(after("--sequence-length"), "64");
  EXPECT_EQ(after("--optimizer"), "adamw");
  json lamb = doc;
  lamb["spec"]["optimizer"]["name"] = "lamb";
  const auto lamb_run = decode_benchmark_run(lamb);
  ASSERT_TRUE(lamb_run.ok());
  EXPECT_EQ(lamb_run.value->spec.optimizer.name, OptimizerName::lamb);
  EXPECT_EQ(after("--image-size"), "(absent)");
  json plain = minimal_run();
  const auto image_run = decode_benchmark_run(plain);
  ASSERT_TRUE(image_run.ok());
  const std::vector<std::string> image_args =
      worker_arguments(*image_run.value, CaseSpec{1, 1, 8, Precision::fp32}, WorkerInvocation{});
  EXPECT_EQ(std::find(image_args.begin(), image_args.end(), "--sequence-length"), image_args.end());
  // A warm-up travels to the worker; none is the worker's default and is not spelled out.
  EXPECT_EQ(std::find(image_args.begin(), image_args.end(), "--learning-rate-warmup-steps"), image_args.end());
  plain["spec"]["optimizer"] = {{"learningRateWarmupSteps", 50}};
  const auto warmed_run = decode_benchmark_run(plain);
  ASSERT_TRUE(warmed_run.ok());
  const std::vector<std::string> warmed_args =
      worker_arguments(*warmed_run.value, CaseSpec{1, 1, 8, Precision::fp32}, WorkerInvocation{});
  const auto warmup = std::find(warmed_args.begin(), warmed_args.end(), "--learning-rate-warmup-steps");
  ASSERT_NE(warmup, warmed_args.end());
  EXPECT_EQ(*(warmup + 1), "50");
}

// Cityscapes-like crops: height × width, both or neither, each within imageSize's bounds.
TEST(Validation, ImageHeightAndWidth) {
  const auto data = [](json d, const char* model = "deeplabv3plus") {
    return errors_with({{"spec", {{"model", model}, {"data", std::move(d)}}}});
  };
  EXPECT_THAT(data({{"imageHeight", 512}, {"imageWidth", 1024}}), IsEmpty());
  EXPECT_THAT(data({{"imageHeight", 512}}),
              ElementsAre("spec.data.imageWidth: required with imageHeight: set both for a height x width input (e.g. "
                          "imageHeight: 512, imageWidth: 1024), or neither"));
  EXPECT_THAT(data({{"imageWidth", 1024}}), ElementsAre(HasSubstr("spec.data.imageHeight: required with imageWidth")));
  EXPECT_THAT(data({{"imageHeight", 512}, {"imageWidth", 4096}}),
              ElementsAre("spec.data.imageWidth: 4096 is out of range; allowed: 32 to 2048"));
  EXPECT_THAT(data({{"imageHeight", 299}, {"imageWidth", 298}}, "inception_v3"),
              ElementsAre(HasSubstr("spec.data.imageWidth: 298 is too small for inception_v3")));
  EXPECT_THAT(data({{"source", "imagefolder"}, {"path", "/data/train"}}),
              ElementsAre(HasSubstr("spec.data.source: imagefolder is not allowed for deeplabv3plus")));
  EXPECT_THAT(data({{"source", "imagefolder"}, {"path", "/data/train"}, {"imageHeight", 224}, {"imageWidth", 256}},
                   "resnet50"),
              ElementsAre(HasSubstr("spec.data.imageHeight: imagefolder crops are square")));

  json doc = minimal_run();
  doc.merge_patch({{"spec", {{"model", "deeplabv3plus"}, {"data", {{"imageHeight", 512}, {"imageWidth", 1024}}}}}});
  const auto run = decode_benchmark_run(doc);
  ASSERT_TRUE(run.ok()) << error_strings(doc).size();
  EXPECT_EQ(run.value->spec.data.height(), 512);
  EXPECT_EQ(run.value->spec.data.width(), 1024);
  EXPECT_EQ(image_size_argument(run.value->spec.data), "512x1024");
  // The pair survives an encode/decode round trip (the status echoes the spec).
  const json encoded = to_json(run.value->spec);
  EXPECT_EQ(encoded["data"]["imageHeight"], 512);
  EXPECT_EQ(encoded["data"]["imageWidth"], 1024);
}

TEST(Validation, ImageFolderData) {
  const auto data = [](json d) { return errors_with({{"spec", {{"data", std::move(d)}}}}); };
  EXPECT_THAT(data({{"source", "imagefolder"}, {"path", "/data/train"}}), IsEmpty());
  EXPECT_THAT(data({{"source", "imagefolder"}}),
              ElementsAre(HasSubstr("spec.data.path: required; the directory of class folders of images (JPEG, PNG or WebP)")));
  EXPECT_THAT(data({{"path", "/data"}}),
              ElementsAre("spec.data.path: only allowed when source is imagefolder, cityscapes or bertpretraining (source is synthetic)"));
  EXPECT_THAT(data({{"volume", {{"hostPath", {{"path", "/srv"}}}}}}),
              ElementsAre("spec.data.volume: only allowed when source is imagefolder, cityscapes or bertpretraining (source is synthetic)"));
  for (const char* bad : {"data", "/", "/a/../b", "/..", "/dlbench", "/dlbench/x"}) {
    EXPECT_THAT(data({{"source", "imagefolder"}, {"path", bad}}),
                ElementsAre(HasSubstr("spec.data.path: \"" + std::string(bad) + "\" is not an absolute directory path")))
        << bad;
  }
  EXPECT_THAT(data({{"source", "imagefolder"}, {"path", "/dlbench-data/a..b"}}), IsEmpty());
  const json pvc{{"persistentVolumeClaim", {{"claimName", "imagenet"}}}};
  EXPECT_THAT(data({{"source", "imagefolder"}, {"path", "/data"}, {"volume", pvc}}), IsEmpty());
  json two = pvc;
  two["nfs"] = {{"server", "10.0.0.2"}, {"path", "/exports"}};
  EXPECT_THAT(data({{"source", "imagefolder"}, {"path", "/data"}, {"volume", two}}),
              ElementsAre("spec.data.volume: set exactly one volume source: persistentVolumeClaim, hostPath or nfs (2 given)"));
  EXPECT_THAT(data({{"source", "imagefolder"}, {"path", "/data"}, {"volume", {{"subPath", "train"}}}}),
              ElementsAre("spec.data.volume: set exactly one volume source: persistentVolumeClaim, hostPath or nfs (0 given)"));
  EXPECT_THAT(data({{"source", "imagefolder"}, {"path", "/data"},
                    {"volume", {{"persistentVolumeClaim", {{"claimName", "ImageNet"}}}}}}),
              ElementsAre(HasSubstr("spec.data.volume.persistentVolumeClaim.claimName: \"ImageNet\" is not a")));
  EXPECT_THAT(data({{"source", "imagefolder"}, {"path", "/data"}, {"volume", {{"hostPath", {{"path", "srv"}}}}}}),
              ElementsAre(HasSubstr("spec.data.volume.hostPath.path: \"srv\" is not an absolute path")));
  EXPECT_THAT(data({{"source", "imagefolder"}, {"path", "/data"},
                    {"volume", {{"hostPath", {{"path", "/srv"}}}, {"subPath", "../x"}}}}),
              ElementsAre(HasSubstr("spec.data.volume.subPath: \"../x\" is not a relative path")));
  EXPECT_THAT(data({{"decodeThreads", 0}}), ElementsAre("spec.data.decodeThreads: 0 is out of range; allowed: 1 to 256"));
  EXPECT_THAT(data({{"prefetchBatches", 65}}),
              ElementsAre("spec.data.prefetchBatches: 65 is out of range; allowed: 1 to 64"));
}

// Cityscapes is DeepLabV3+'s real data: a label per pixel, so no classifier or BERT takes it, and
// its crops may be height x width; it needs its root and may come from a volume.
TEST(Validation, CityscapesDataIsForDeepLabV3Plus) {
  const auto with = [](const std::string& model, json d) {
    return errors_with({{"spec", {{"model", model}, {"data", std::move(d)}}}});
  };
  const json streets{{"source", "cityscapes"}, {"path", "/data/cityscapes"}, {"imageHeight", 512}, {"imageWidth", 1024}};
  EXPECT_THAT(with("deeplabv3plus", streets), IsEmpty());
  json from_volume = streets;
  from_volume["volume"] = {{"persistentVolumeClaim", {{"claimName", "cityscapes"}}}};
  EXPECT_THAT(with("deeplabv3plus", from_volume), IsEmpty());
  EXPECT_THAT(with("deeplabv3plus", {{"source", "cityscapes"}}),
              ElementsAre(HasSubstr("spec.data.path: required; Cityscapes' root (leftImg8bit/train and gtFine/train")));
  EXPECT_THAT(with("resnet50", {{"source", "cityscapes"}, {"path", "/data/cityscapes"}}),
              ElementsAre("spec.data.source: cityscapes is not allowed for resnet50: it trains on a label per image and "
                          "cityscapes has one per pixel (a segmentation data set, for deeplabv3plus); allowed: synthetic, "
                          "imagefolder"));
  EXPECT_THAT(with("bert-base", {{"source", "cityscapes"}, {"path", "/data/cityscapes"}}),
              Contains(HasSubstr("spec.data.source: cityscapes is not allowed for bert-base")));
  EXPECT_THAT(with("deeplabv3plus", {{"source", "imagefolder"}, {"path", "/data/train"}}),
              Contains(HasSubstr("allowed: synthetic, cityscapes")));

  json doc = minimal_run();
  doc.merge_patch({{"spec", {{"model", "deeplabv3plus"}, {"data", streets}}}});
  const auto run = decode_benchmark_run(doc);
  ASSERT_TRUE(run.ok());
  const auto args = worker_arguments(*run.value, CaseSpec{1, 1, 8, Precision::fp32}, WorkerInvocation{});
  const auto at = std::find(args.begin(), args.end(), "--data");
  ASSERT_NE(at, args.end());
  EXPECT_EQ(*(at + 1), "cityscapes");
  EXPECT_EQ(*(at + 3), "/data/cityscapes");
  EXPECT_NE(std::find(args.begin(), args.end(), "512x1024"), args.end());
}

// BERT's pretraining shards are bert-base's real data and no image model's; they need their
// directory and may come from a volume.
TEST(Validation, BertPretrainingDataIsForBertBase) {
  const auto with = [](const std::string& model, json d) {
    return errors_with({{"spec", {{"model", model}, {"data", std::move(d)}}}});
  };
  const json shards{{"source", "bertpretraining"}, {"path", "/data/hdf5_lower_case_1_seq_len_128"}, {"sequenceLength", 128}};
  EXPECT_THAT(with("bert-base", shards), IsEmpty());
  json from_volume = shards;
  from_volume["volume"] = {{"persistentVolumeClaim", {{"claimName", "wikipedia"}}}};
  EXPECT_THAT(with("bert-base", from_volume), IsEmpty());
  EXPECT_THAT(with("bert-base", {{"source", "bertpretraining"}}),
              ElementsAre(HasSubstr("spec.data.path: required; the directory of BERT pretraining shards")));
  EXPECT_THAT(with("resnet50", {{"source", "bertpretraining"}, {"path", "/data/shards"}}),
              ElementsAre("spec.data.source: bertpretraining is not allowed for resnet50: it trains on images and "
                          "bertpretraining holds token sequences (for bert-base); allowed: synthetic, imagefolder"));
  EXPECT_THAT(with("deeplabv3plus", {{"source", "bertpretraining"}, {"path", "/data/shards"}}),
              Contains(HasSubstr("allowed: synthetic, cityscapes")));
  EXPECT_THAT(with("bert-base", {{"source", "imagefolder"}, {"path", "/data/train"}}),
              ElementsAre("spec.data.source: imagefolder is not allowed for bert-base: it trains on token sequences; "
                          "allowed: synthetic, bertpretraining"));

  json doc = minimal_run();
  doc.merge_patch({{"spec", {{"model", "bert-base"}, {"data", shards}}}});
  const auto run = decode_benchmark_run(doc);
  ASSERT_TRUE(run.ok());
  const auto args = worker_arguments(*run.value, CaseSpec{1, 1, 8, Precision::fp32}, WorkerInvocation{});
  const auto at = std::find(args.begin(), args.end(), "--data");
  ASSERT_NE(at, args.end());
  EXPECT_EQ(*(at + 1), "bertpretraining");
  EXPECT_EQ(*(at + 3), "/data/hdf5_lower_case_1_seq_len_128");
}

TEST(Validation, MatrixOrCasesExactlyOne) {
  EXPECT_THAT(errors_with({{"spec", {{"cases", {{{"batchSizePerDevice", 64}, {"precision", "amp"}}}}}}}),
              ElementsAre("spec: set either matrix or cases, not both"));
  json doc = minimal_run();
  doc["spec"].erase("matrix");
  EXPECT_THAT(error_strings(doc), ElementsAre(HasSubstr("spec.matrix: required: set matrix")));
}

TEST(Validation, MatrixValues) {
  EXPECT_THAT(errors_with({{"spec", {{"matrix", {{"nodes", {1, 0, 2000}}}}}}}),
              ElementsAre("spec.matrix.nodes[1]: 0 is out of range; allowed: 1 to 1024",
                          "spec.matrix.nodes[2]: 2000 is out of range; allowed: 1 to 1024"));
  EXPECT_THAT(errors_with({{"spec", {{"matrix", {{"gpusPerNode", {8, 65}}}}}}}),
              ElementsAre("spec.matrix.gpusPerNode[1]: 65 is out of range; allowed: 1 to 64"));
  EXPECT_THAT(errors_with({{"spec", {{"matrix", {{"batchSizePerDevice", {0}}}}}}}),
              ElementsAre("spec.matrix.batchSizePerDevice[0]: 0 is out of range; allowed: 1 to 65536"));
  EXPECT_THAT(errors_with({{"spec", {{"matrix", {{"batchSizePerDevice", {64, 128, 64}}}}}}}),
              ElementsAre("spec.matrix.batchSizePerDevice[2]: 64 is listed twice (also at spec.matrix.batchSizePerDevice[0])"));
  EXPECT_THAT(errors_with({{"spec", {{"matrix", {{"precision", {"amp", "amp"}}}}}}}),
              ElementsAre("spec.matrix.precision[1]: \"amp\" is listed twice"));
  EXPECT_THAT(errors_with({{"spec", {{"matrix", {{"nodes", json::array()}}}}}}),
              ElementsAre("spec.matrix.nodes: must have at least 1 entry"));
  EXPECT_THAT(errors_with({{"spec", {{"matrix", {{"nodes", 4}}}}}}),
              ElementsAre("spec.matrix.nodes: expected a list, got an integer (4)"));
  std::vector<int> many(33);
  for (int i = 0; i < 33; ++i) many[static_cast<std::size_t>(i)] = i + 1;
  EXPECT_THAT(errors_with({{"spec", {{"matrix", {{"batchSizePerDevice", many}}}}}}),
              ElementsAre("spec.matrix.batchSizePerDevice: has 33 entries; at most 32 allowed"));
  EXPECT_THAT(errors_with({{"spec", {{"matrix", {{"typo", {1}}}}}}}),
              ElementsAre("spec.matrix.typo: unknown field; allowed fields: nodes, gpusPerNode, batchSizePerDevice, precision"));
  json doc = minimal_run();
  doc["spec"]["matrix"].erase("precision");
  EXPECT_THAT(error_strings(doc), ElementsAre("spec.matrix.precision: required; a list of fp32, tf32, amp, bf16"));
}

TEST(Validation, ExplicitCases) {
  const auto with_cases = [](json cases) {
    json doc = minimal_run();
    doc["spec"].erase("matrix");
    doc["spec"]["cases"] = std::move(cases);
    return error_strings(doc);
  };
  EXPECT_THAT(with_cases({{{"batchSizePerDevice", 64}}}),
              ElementsAre("spec.cases[0].precision: required; one of fp32, tf32, amp, bf16"));
  EXPECT_THAT(with_cases({{{"batchSizePerDevice", 64}, {"precision", "fp16"}}}),
              ElementsAre(R"(spec.cases[0].precision: "fp16" is not one of fp32, tf32, amp, bf16)"));
  EXPECT_THAT(with_cases({{{"nodes", 2}, {"gpusPerNode", 8}, {"batchSizePerDevice", 64}, {"precision", "amp"}},
                          {{"nodes", 2}, {"gpusPerNode", 8}, {"batchSizePerDevice", 64}, {"precision", "amp"}}}),
              ElementsAre("spec.cases[1]: case 2x8-bs64-amp is listed twice (also at spec.cases[0])"));
  EXPECT_THAT(with_cases({{{"id", "x"}, {"batchSizePerDevice", 64}, {"precision", "amp"}}}),
              ElementsAre(HasSubstr("spec.cases[0].id: unknown field")));
  EXPECT_THAT(with_cases(json::array()), ElementsAre("spec.cases: must have at least 1 entry"));
  EXPECT_THAT(with_cases({{{"batchSizePerDevice", 64}, {"precision", "amp"}, {"nodes", 0}}}),
              ElementsAre("spec.cases[0].nodes: 0 is out of range; allowed: 1 to 1024"));
}

// spec.cudaGraph: dlbench-worker's step graphs, one device a case, travelling as --cuda-graph on.
TEST(Validation, CudaGraphRunsTheNativeEngineOnOneDeviceACase) {
  const auto run_with = [](const json& patch) {
    json doc = minimal_run();
    doc.merge_patch(patch);
    return decode_benchmark_run(doc);
  };
  const auto graphs = run_with({{"spec", {{"cudaGraph", true}, {"matrix", {{"precision", {"amp", "bf16"}}}}}}});
  ASSERT_TRUE(graphs.ok());
  EXPECT_TRUE(graphs.value->spec.cuda_graph);
  EXPECT_EQ(to_json(graphs.value->spec)["cudaGraph"], true);
  const auto args = worker_arguments(*graphs.value, CaseSpec{1, 1, 64, Precision::amp}, WorkerInvocation{});
  const auto flag = std::find(args.begin(), args.end(), "--cuda-graph");
  ASSERT_NE(flag, args.end());
  ASSERT_NE(flag + 1, args.end());
  EXPECT_EQ(*(flag + 1), "on");
  // Eager steps, the default, are the worker's default too: not spelled out, and not in the spec.
  const auto eager = run_with({{"spec", {{"cudaGraph", false}}}});
  ASSERT_TRUE(eager.ok());
  EXPECT_FALSE(to_json(eager.value->spec).contains("cudaGraph"));
  const auto eager_args = worker_arguments(*eager.value, CaseSpec{1, 1, 64, Precision::fp32}, WorkerInvocation{});
  EXPECT_EQ(std::find(eager_args.begin(), eager_args.end(), "--cuda-graph"), eager_args.end());

  EXPECT_THAT(errors_with({{"spec", {{"cudaGraph", "yes"}}}}), ElementsAre(HasSubstr("spec.cudaGraph: expected")));
  EXPECT_THAT(errors_with({{"spec", {{"cudaGraph", true}, {"engine", "command"}, {"command", {"python3", "train.py"}}}}}),
              ElementsAre("spec.cudaGraph: only with engine: native (a step graph is dlbench-worker's; engine is "
                          "command)"));
  EXPECT_THAT(errors_with({{"spec", {{"cudaGraph", true}, {"matrix", {{"nodes", {1, 2}}}}}}}),
              ElementsAre("spec.cudaGraph: true runs one device a case (the gradient allreduce is driven from the host, "
                          "outside the graph), and spec.matrix.nodes[1] is 2; allowed with cudaGraph true: 1"));
  EXPECT_THAT(errors_with({{"spec", {{"cudaGraph", true}, {"matrix", {{"gpusPerNode", {8}}}}}}}),
              ElementsAre(HasSubstr("spec.matrix.gpusPerNode[0] is 8; allowed with cudaGraph true: 1")));
  json cases = minimal_run();
  cases["spec"].erase("matrix");
  cases["spec"]["cudaGraph"] = true;
  cases["spec"]["cases"] = {{{"batchSizePerDevice", 64}, {"precision", "amp"}},
                            {{"nodes", 2}, {"batchSizePerDevice", 64}, {"precision", "amp"}}};
  EXPECT_THAT(error_strings(cases),
              ElementsAre(HasSubstr("spec.cases[1]'s devices (nodes x gpusPerNode) is 2; allowed with cudaGraph true: 1")));
  cases["spec"]["cases"].erase(1);
  EXPECT_THAT(error_strings(cases), IsEmpty());
}

TEST(Validation, Methodology) {
  EXPECT_THAT(errors_with({{"spec", {{"methodology", {{"warmupSteps", -1}}}}}}),
              ElementsAre("spec.methodology.warmupSteps: -1 is out of range; allowed: 0 to 100000"));
  EXPECT_THAT(errors_with({{"spec", {{"methodology", {{"measureSteps", 0}}}}}}),
              ElementsAre("spec.methodology.measureSteps: 0 is out of range; allowed: 1 to 1000000"));
  EXPECT_THAT(errors_with({{"spec", {{"methodology", {{"repeats", 1001}}}}}}),
              ElementsAre("spec.methodology.repeats: 1001 is out of range; allowed: 1 to 1000"));
  EXPECT_THAT(errors_with({{"spec", {{"methodology", {{"repeats", "7"}}}}}}),
              ElementsAre(R"(spec.methodology.repeats: expected an integer from 1 to 1000, got a string ("7"))"));
  EXPECT_THAT(errors_with({{"spec", {{"methodology", {{"statistic", "p50"}}}}}}),
              ElementsAre(R"(spec.methodology.statistic: "p50" is not one of median, mean)"));
  EXPECT_THAT(errors_with({{"spec", {{"methodology", {{"warmupSteps", 0}}}}}}), IsEmpty());
}

TEST(Validation, Optimizer) {
  EXPECT_THAT(errors_with({{"spec", {{"optimizer", {{"name", "adam"}}}}}}),
              ElementsAre(R"(spec.optimizer.name: "adam" is not one of sgd, adamw, lamb)"));
  EXPECT_THAT(errors_with({{"spec", {{"optimizer", {{"learningRate", 0}}}}}}),
              ElementsAre("spec.optimizer.learningRate: 0 is out of range; allowed: greater than 0 and at most 100"));
  EXPECT_THAT(errors_with({{"spec", {{"optimizer", {{"momentum", 1.0}}}}}}),
              ElementsAre("spec.optimizer.momentum: 1.0 is out of range; allowed: at least 0 and less than 1"));
  EXPECT_THAT(errors_with({{"spec", {{"optimizer", {{"weightDecay", -0.001}}}}}}),
              ElementsAre("spec.optimizer.weightDecay: -0.001 is out of range; allowed: at least 0 and at most 1"));
  EXPECT_THAT(errors_with({{"spec", {{"optimizer", {{"learningRate", "0.1"}}}}}}),
              ElementsAre(HasSubstr("spec.optimizer.learningRate: expected a number greater than 0")));
  EXPECT_THAT(errors_with({{"spec", {{"optimizer", {{"momentum", 0}}}}}}), IsEmpty());
  EXPECT_THAT(errors_with({{"spec", {{"optimizer", {{"learningRateWarmupSteps", 1000001}}}}}}),
              ElementsAre("spec.optimizer.learningRateWarmupSteps: 1000001 is out of range; allowed: 0 to 1000000"));
  EXPECT_THAT(errors_with({{"spec", {{"optimizer", {{"learningRateWarmupSteps", 2.5}}}}}}),
              ElementsAre(HasSubstr("spec.optimizer.learningRateWarmupSteps")));
  EXPECT_THAT(errors_with({{"spec", {{"optimizer", {{"learningRateWarmupSteps", 500}}}}}}), IsEmpty());
}

TEST(Validation, WorkerResources) {
  EXPECT_THAT(errors_with({{"spec", {{"worker", {{"gpuResource", "gpu"}}}}}}),
              ElementsAre(HasSubstr("spec.worker.gpuResource: \"gpu\" is not an extended resource name")));
  EXPECT_THAT(errors_with({{"spec", {{"worker", {{"gpuResource", "amd.com/gpu"}}}}}}), IsEmpty());
  EXPECT_THAT(errors_with({{"spec", {{"worker", {{"rdma", {{"perNode", 1}}}}}}}}),
              ElementsAre(HasSubstr("spec.worker.rdma.resource: required")));
  EXPECT_THAT(errors_with({{"spec", {{"worker", {{"rdma", {{"resource", "rdma/hca"}, {"perNode", 0}}}}}}}}),
              ElementsAre("spec.worker.rdma.perNode: 0 is out of range; allowed: 1 to 64"));
  EXPECT_THAT(errors_with({{"spec", {{"worker", {{"rdma", {{"resource", "hca"}}}}}}}}),
              ElementsAre(HasSubstr("spec.worker.rdma.resource: \"hca\" is not an extended resource name")));
  EXPECT_THAT(errors_with({{"spec", {{"worker", {{"nodeSelector", {{"gpu", 1}}}}}}}}),
              ElementsAre("spec.worker.nodeSelector.gpu: expected a string, got an integer (1)"));
  EXPECT_THAT(errors_with({{"spec", {{"worker", {{"replicas", 2}}}}}}),
              ElementsAre(HasSubstr("spec.worker.replicas: unknown field; allowed fields: image, gpuResource")));
}

TEST(Validation, WorkerTolerations) {
  const auto with = [](json toleration) { return errors_with({{"spec", {{"worker", {{"tolerations", {toleration}}}}}}}); };
  EXPECT_THAT(with({{"key", "k"}, {"operator", "In"}}),
              ElementsAre(R"(spec.worker.tolerations[0].operator: "In" is not one of Exists, Equal)"));
  EXPECT_THAT(with({{"key", "k"}, {"effect", "NoRun"}}),
              ElementsAre(R"(spec.worker.tolerations[0].effect: "NoRun" is not one of "", NoSchedule, PreferNoSchedule, NoExecute)"));
  EXPECT_THAT(with({{"key", "k"}, {"operator", "Exists"}, {"value", "v"}}),
              ElementsAre("spec.worker.tolerations[0].value: must be empty when operator is Exists"));
  EXPECT_THAT(with({{"key", "k"}, {"effect", "NoSchedule"}, {"tolerationSeconds", 30}}),
              ElementsAre("spec.worker.tolerations[0].tolerationSeconds: only allowed with effect: NoExecute"));
  EXPECT_THAT(with({{"operator", "Equal"}, {"value", "v"}}),
              ElementsAre(HasSubstr("spec.worker.tolerations[0].key: required when operator is Equal")));
  EXPECT_THAT(with({{"operator", "Exists"}}), IsEmpty());
  EXPECT_THAT(with({{"key", "k"}, {"effect", "NoExecute"}, {"tolerationSeconds", 30}}), IsEmpty());
}

TEST(Validation, WorkerEnv) {
  const auto with = [](json env) { return errors_with({{"spec", {{"worker", {{"env", {env}}}}}}}); };
  EXPECT_THAT(with({{"value", "x"}}), ElementsAre(HasSubstr("spec.worker.env[0].name: required")));
  EXPECT_THAT(with({{"name", "A=B"}}), ElementsAre(HasSubstr("spec.worker.env[0].name: \"A=B\" is not a valid")));
  EXPECT_THAT(with({{"name", "A"}, {"value", "1"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "x"}}}}}}),
              ElementsAre("spec.worker.env[0]: set either value or valueFrom, not both"));
  EXPECT_THAT(with({{"name", "POD"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.name"}}}}}}), IsEmpty());
}

TEST(Validation, Limits) {
  EXPECT_THAT(errors_with({{"spec", {{"limits", {{"caseTimeoutSeconds", 0}}}}}}),
              ElementsAre("spec.limits.caseTimeoutSeconds: 0 is out of range; allowed: 1 to 604800"));
  EXPECT_THAT(errors_with({{"spec", {{"limits", {{"backoffLimit", 11}}}}}}),
              ElementsAre("spec.limits.backoffLimit: 11 is out of range; allowed: 0 to 10"));
}

TEST(Validation, PlannedCasesBounded) {
  std::vector<int> values(32);
  for (int i = 0; i < 32; ++i) values[static_cast<std::size_t>(i)] = i + 1;
  EXPECT_THAT(errors_with({{"spec", {{"matrix", {{"nodes", values}, {"gpusPerNode", values}}}}}}),
              ElementsAre("spec.matrix: 1024 cases planned (baselines included); at most 1000 allowed"));
}

TEST(Validation, HugeIntegerIsOutOfRangeNotACrash) {
  json doc = minimal_run();
  doc["spec"]["methodology"] = {{"repeats", std::numeric_limits<std::uint64_t>::max()}};
  EXPECT_THAT(error_strings(doc),
              ElementsAre("spec.methodology.repeats: 18446744073709551615 is out of range; allowed: 1 to 1000"));
}

}  // namespace
}  // namespace dlbench
