#include <cmath>
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dlbench/core/codec.hpp"
#include "dlbench/core/device_peaks.hpp"
#include "dlbench/core/result_document.hpp"
#include "dlbench/core/run_state.hpp"
#include "dlbench/core/statistics.hpp"
#include "dlbench/core/status.hpp"

namespace dlbench {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using nlohmann::json;

ResultDocument sample_document() {
  ResultDocument doc;
  doc.run = "quickstart";
  doc.model = Model::resnet50;
  doc.case_ = {1, 8, 128, Precision::amp};
  doc.image_size = 224;
  doc.devices = 8;
  doc.global_batch_size = 1024;
  doc.methodology = {20, 100, 3, Statistic::median, {}};
  doc.optimizer = OptimizerSpec{OptimizerName::sgd, 0.01, 0.9, 1e-4};
  doc.flops_per_sample = {8.18e9, 24.54e9};
  const std::vector<double> repeats{7600.0, 7650.0, 7580.0};
  doc.throughput = Throughput{"samples/s", summarize(repeats), repeats};
  doc.step_time_seconds = summarize(std::vector<double>{0.134, 0.135, 0.133});
  doc.environment.host = "node-a";
  doc.environment.hosts = {"node-a"};
  doc.environment.gpu_model = "NVIDIA H100 80GB HBM3";
  doc.environment.gpu_count = 8;
  doc.environment.cuda_version = "13.0";
  doc.environment.backend = "cuda";
  doc.environment.communicator = "nccl";
  doc.environment.backend_options = {{"attention", "fused"}, {"conv", "graph"}};
  doc.start_time = "2026-11-21T05:00:00Z";
  doc.end_time = "2026-11-21T05:02:00Z";
  return doc;
}

std::vector<std::string> errors_of(const json& j) {
  std::vector<std::string> out;
  for (const auto& e : decode_result_document(j).errors) out.push_back(e.to_string());
  return out;
}

TEST(ResultDocument, RoundTrip) {
  const ResultDocument doc = sample_document();
  const json j = to_json(doc);
  EXPECT_EQ(j["schema"], "dlbench.result/v1");
  EXPECT_EQ(j["case"]["id"], "1x8-bs128-amp");
  EXPECT_EQ(j["environment"]["backendOptions"]["attention"], "fused");
  EXPECT_EQ(j["optimizer"], json::parse(R"({"name": "sgd", "learningRate": 0.01, "momentum": 0.9, "weightDecay": 0.0001})"));
  const auto decoded = decode_result_document(j);
  ASSERT_TRUE(decoded.ok()) << decoded.errors.front().to_string();
  EXPECT_EQ(*decoded.value, doc);
  EXPECT_EQ(to_json(*decoded.value), j);
}

// A result says how it trained, every field there (none defaulted), within the spec's bounds.
TEST(ResultDocument, TheOptimizerThatRanIsCheckedLikeTheSpecs) {
  json j = to_json(sample_document());
  j["optimizer"].erase("momentum");
  j["optimizer"]["learningRate"] = 0;
  EXPECT_THAT(errors_of(j), ::testing::UnorderedElementsAre(
                                "optimizer.momentum: required; what ran",
                                "optimizer.learningRate: 0 is out of range; allowed: greater than 0 and at most 100"));
  j.erase("optimizer");  // engine: command results cannot say
  EXPECT_THAT(errors_of(j), IsEmpty());
}

// The optimizer a worker says it trained with goes into the status (where a cluster keeps it:
// the stored spec may leave the learning rate to the model), and a worker that trained with
// another one than the spec asks is CaseMismatch: its figures time other work.
TEST(ResultDocument, TheOptimizerThatRanGoesIntoTheStatusAndIsJudged) {
  const ResultDocument doc = sample_document();
  const std::string text = to_json(doc).dump();
  const OptimizerSpec asked = *doc.optimizer;

  const auto judged = result_from_document(text, doc.case_, 1, std::nullopt, asked);
  ASSERT_TRUE(judged.has_value());
  EXPECT_EQ(judged->state, CaseState::Succeeded) << judged->message;
  EXPECT_EQ(judged->optimizer, asked);
  BenchmarkRunStatus status;
  status.results.push_back(*judged);
  const json written = to_json(status);
  EXPECT_EQ(written["results"][0]["optimizer"],
            json::parse(R"({"name": "sgd", "learningRate": 0.01, "momentum": 0.9, "weightDecay": 0.0001})"));
  const auto read = decode_status(written);
  ASSERT_TRUE(read.ok()) << read.errors.front().to_string();
  EXPECT_EQ(*read.value, status);

  OptimizerSpec other = asked;
  other.learning_rate = 0.0100000001;
  const auto off = result_from_document(text, doc.case_, 1, std::nullopt, other);
  ASSERT_TRUE(off.has_value());
  EXPECT_EQ(off->state, CaseState::Failed);
  EXPECT_EQ(off->reason, "CaseMismatch");
  EXPECT_EQ(off->message, "the worker trained 1x8-bs128-amp with another optimizer than the spec's: "
                          "learningRate 0.01 instead of 0.0100000001");
  EXPECT_EQ(off->optimizer, asked) << "the status says what ran";
  other = {OptimizerName::adamw, 0.01, 0.9, 0.01};
  EXPECT_EQ(result_from_document(text, doc.case_, 1, std::nullopt, other)->message,
            "the worker trained 1x8-bs128-amp with another optimizer than the spec's: "
            "name sgd instead of adamw, weightDecay 0.0001 instead of 0.01");
  // A warm-up is part of how a case trains: one the worker did not run (its document states
  // none, as a document from before the field does) is a mismatch; one it ran is in the status.
  other = asked;
  other.learning_rate_warmup_steps = 100;
  EXPECT_EQ(result_from_document(text, doc.case_, 1, std::nullopt, other)->message,
            "the worker trained 1x8-bs128-amp with another optimizer than the spec's: "
            "learningRateWarmupSteps 0 instead of 100");
  ResultDocument warmed = doc;
  warmed.optimizer->learning_rate_warmup_steps = 100;
  const auto warmed_judged = result_from_document(to_json(warmed).dump(), doc.case_, 1, std::nullopt, other);
  ASSERT_TRUE(warmed_judged.has_value());
  EXPECT_EQ(warmed_judged->state, CaseState::Succeeded) << warmed_judged->message;
  BenchmarkRunStatus warmed_status;
  warmed_status.results.push_back(*warmed_judged);
  EXPECT_EQ(to_json(warmed_status)["results"][0]["optimizer"]["learningRateWarmupSteps"], 100);
  EXPECT_EQ(*decode_status(to_json(warmed_status)).value, warmed_status);
  json negative = to_json(warmed_status);
  negative["results"][0]["optimizer"]["learningRateWarmupSteps"] = -1;
  EXPECT_THAT(decode_status(negative).errors.front().to_string(),
              ::testing::HasSubstr("status.results[0].optimizer.learningRateWarmupSteps"));

  json no_optimizer = json::parse(text);  // engine: command's documents cannot say
  no_optimizer.erase("optimizer");
  const auto command = result_from_document(no_optimizer.dump(), doc.case_, 1, std::nullopt, other);
  ASSERT_TRUE(command.has_value());
  EXPECT_EQ(command->state, CaseState::Succeeded) << command->message;
  EXPECT_FALSE(command->optimizer.has_value());
  EXPECT_FALSE(to_json(*command).contains("optimizer"));

  json partial = written;
  partial["results"][0]["optimizer"].erase("learningRate");
  partial["results"][0]["optimizer"]["momentum"] = 1;
  std::vector<std::string> errors;
  for (const auto& e : decode_status(partial).errors) errors.push_back(e.to_string());
  EXPECT_THAT(errors, ::testing::UnorderedElementsAre(
                          "status.results[0].optimizer.learningRate: required; what ran",
                          "status.results[0].optimizer.momentum: 1 is out of range; allowed: at least 0 and less than 1"));
}

// The status keeps the loss after each repeat where every one is finite (JSON numbers only),
// and a diverged case none: its message says which loss was not finite.
TEST(ResultDocument, TheStatusKeepsTheLossesAfterRepeatsWhenAllAreFinite) {
  ResultDocument doc = sample_document();
  doc.loss_after_repeats = {6.9, 6.1, 5.4};
  const CaseResult trained = to_case_result(doc);
  EXPECT_EQ(trained.loss_after_repeats, doc.loss_after_repeats);
  BenchmarkRunStatus status;
  status.results.push_back(trained);
  const json written = to_json(status);
  EXPECT_EQ(written["results"][0]["lossAfterRepeats"], json::parse("[6.9, 6.1, 5.4]"));
  const auto read = decode_status(written);
  ASSERT_TRUE(read.ok()) << read.errors.front().to_string();
  EXPECT_EQ(read.value->results[0].loss_after_repeats, doc.loss_after_repeats);

  doc.state = CaseState::Failed;
  doc.reason = kReasonLossNotFinite;
  doc.loss_after_repeats = {6.9, std::numeric_limits<double>::quiet_NaN(), 5.4};
  const CaseResult diverged = to_case_result(doc);
  EXPECT_TRUE(diverged.loss_after_repeats.empty());
  EXPECT_FALSE(to_json(diverged).contains("lossAfterRepeats"));

  json bad = written;
  bad["results"][0]["lossAfterRepeats"] = json::parse(R"([6.9, "NaN"])");
  std::vector<std::string> errors;
  for (const auto& e : decode_status(bad).errors) errors.push_back(e.to_string());
  EXPECT_THAT(errors, ::testing::ElementsAre("status.results[0].lossAfterRepeats[1]: expected a number, got a string"));
  bad["results"][0]["lossAfterRepeats"] = json::array();
  errors.clear();
  for (const auto& e : decode_status(bad).errors) errors.push_back(e.to_string());
  EXPECT_THAT(errors, ::testing::ElementsAre(::testing::StartsWith("status.results[0].lossAfterRepeats:")));
}

// amp's loss scaling goes into the status as the document says it (a case that skipped most of
// its steps trained little, whatever its throughput), and is checked there as in the document.
TEST(ResultDocument, TheStatusSaysHowManyStepsLossScalingSkippedAndWhereItsScaleEnded) {
  ResultDocument doc = sample_document();
  EXPECT_FALSE(to_case_result(doc).loss_scaling.has_value());  // bf16 and fp32 scale nothing
  EXPECT_FALSE(to_json(to_case_result(doc)).contains("lossScaling"));
  doc.loss_scaling = LossScalingReport{1.49e-8, 42, 400, {}};  // the H200's real-data run of 2026-11-29
  const CaseResult result = to_case_result(doc);
  EXPECT_EQ(result.loss_scaling, doc.loss_scaling);
  BenchmarkRunStatus status;
  status.results.push_back(result);
  const json written = to_json(status);
  EXPECT_EQ(written["results"][0]["lossScaling"], json::parse(R"({"finalScale": 1.49e-8, "skippedSteps": 42, "steps": 400})"));
  const auto read = decode_status(written);
  ASSERT_TRUE(read.ok()) << read.errors.front().to_string();
  EXPECT_EQ(read.value->results[0].loss_scaling, doc.loss_scaling);

  json bad = written;
  bad["results"][0]["lossScaling"]["skippedSteps"] = 401;
  bad["results"][0]["lossScaling"]["finalScale"] = 0.0;
  std::vector<std::string> errors;
  for (const auto& e : decode_status(bad).errors) errors.push_back(e.to_string());
  EXPECT_THAT(errors, ::testing::UnorderedElementsAre("status.results[0].lossScaling.skippedSteps: exceeds steps",
                                                      "status.results[0].lossScaling.finalScale: must be > 0"));
  bad["results"][0]["lossScaling"] = 3;
  errors.clear();
  for (const auto& e : decode_status(bad).errors) errors.push_back(e.to_string());
  EXPECT_THAT(errors, ::testing::ElementsAre(::testing::StartsWith("status.results[0].lossScaling:")));
}

// A measured case's training arithmetic goes into the status: the worker's FLOPs per sample,
// what the reported throughput makes of them per device, and the peak and MFU where known.
TEST(ResultDocument, TheStatusSaysTheTrainingArithmeticPerDeviceAndTheMfuWhereThePeakIsKnown) {
  ResultDocument doc = sample_document();  // 8 H100s, median 7600 images/s, 24.54 GFLOPs a sample
  const CaseResult cpu_like = to_case_result(doc);
  ASSERT_TRUE(cpu_like.flops.has_value());
  EXPECT_EQ(cpu_like.flops->training_per_sample, 24.54e9);
  EXPECT_DOUBLE_EQ(cpu_like.flops->per_second_per_device, 24.54e9 * 7600.0 / 8);
  EXPECT_FALSE(cpu_like.flops->mfu.has_value());
  EXPECT_FALSE(to_json(cpu_like)["flops"].contains("mfu"));

  doc.peak_flops_per_device = 989.4e12;
  doc.mfu = model_flops_utilization(24.54e9, 7600.0, 989.4e12, 8);
  const CaseResult gpu = to_case_result(doc);
  ASSERT_TRUE(gpu.flops.has_value());
  EXPECT_EQ(gpu.flops->peak_per_device, 989.4e12);
  EXPECT_NEAR(*gpu.flops->mfu, gpu.flops->per_second_per_device / 989.4e12, 1e-15);
  BenchmarkRunStatus status;
  status.results.push_back(gpu);
  const json written = to_json(status);
  EXPECT_EQ(written["results"][0]["flops"]["peakPerDevice"], 989.4e12);
  const auto read = decode_status(written);
  ASSERT_TRUE(read.ok()) << read.errors.front().to_string();
  EXPECT_EQ(read.value->results[0].flops, gpu.flops);

  json bad = written;
  bad["results"][0]["flops"].erase("peakPerDevice");
  bad["results"][0]["flops"].erase("trainingPerSample");
  std::vector<std::string> errors;
  for (const auto& e : decode_status(bad).errors) errors.push_back(e.to_string());
  EXPECT_THAT(errors, ::testing::ElementsAre(::testing::StartsWith("status.results[0].flops.trainingPerSample: required")));
  bad["results"][0]["flops"]["trainingPerSample"] = 24.54e9;
  errors.clear();
  for (const auto& e : decode_status(bad).errors) errors.push_back(e.to_string());
  EXPECT_THAT(errors, ::testing::ElementsAre("status.results[0].flops.peakPerDevice: mfu and peakPerDevice come together"));

  doc.state = CaseState::Failed;  // nothing published, no arithmetic claimed
  doc.reason = "LossNotFinite";
  EXPECT_FALSE(to_case_result(doc).flops.has_value());
  doc = sample_document();
  doc.flops_per_sample = {};  // engine: command's documents do not count
  EXPECT_FALSE(to_case_result(doc).flops.has_value());
}

// A GPU case's energy: the document keeps every device's joules, summed, for each reported
// repeat; the status says joules per sample and watts per device, the statistic over the repeats.
TEST(ResultDocument, TheStatusSaysTheEnergyPerSampleAndThePowerPerDevice) {
  ResultDocument doc = sample_document();  // 8 devices, 1024 a step, 100 measured steps a repeat
  EXPECT_FALSE(to_case_result(doc).energy.has_value());
  EXPECT_FALSE(to_json(doc).contains("energyJoules"));
  doc.energy_joules = {30720.0, 31744.0, 30208.0};  // 0.3, 0.31 and 0.295 J a sample
  const json written = to_json(doc);
  const auto decoded = decode_result_document(written);
  ASSERT_TRUE(decoded.ok()) << decoded.errors.front().to_string();
  EXPECT_EQ(decoded.value->energy_joules, doc.energy_joules);
  const CaseResult r = to_case_result(*decoded.value);
  ASSERT_TRUE(r.energy.has_value());
  EXPECT_DOUBLE_EQ(r.energy->joules_per_sample, 0.3);
  // A repeat's power per device: its joules a sample x its throughput / devices (0.3 x 7600 / 8).
  EXPECT_DOUBLE_EQ(r.energy->watts_per_device, 285.0);
  doc.methodology.statistic = Statistic::mean;
  EXPECT_DOUBLE_EQ(energy_report(doc)->joules_per_sample, (0.3 + 0.31 + 0.295) / 3);
  BenchmarkRunStatus status;
  status.results.push_back(r);
  const json in_status = to_json(status);
  EXPECT_EQ(in_status["results"][0]["energy"], json::parse(R"({"joulesPerSample": 0.3, "wattsPerDevice": 285.0})"));
  const auto read = decode_status(in_status);
  ASSERT_TRUE(read.ok()) << read.errors.front().to_string();
  EXPECT_EQ(read.value->results[0].energy, r.energy);

  json bad = in_status;
  bad["results"][0]["energy"] = json::parse(R"({"joulesPerSample": 0, "watts": 3})");
  std::vector<std::string> errors;
  for (const auto& e : decode_status(bad).errors) errors.push_back(e.to_string());
  EXPECT_THAT(errors, ::testing::UnorderedElementsAre(::testing::StartsWith("status.results[0].energy.watts: unknown"),
                                                      "status.results[0].energy.joulesPerSample: must be > 0",
                                                      ::testing::StartsWith("status.results[0].energy.wattsPerDevice: required")));
  json short_of_one = written;
  short_of_one["energyJoules"] = json::array({30720.0, 31744.0});
  EXPECT_THAT(errors_of(short_of_one),
              ::testing::ElementsAre("energyJoules: has 2 entries for 3 throughput repeats; they must be as many"));
  json negative = written;
  negative["energyJoules"][1] = -1.0;
  negative["energyJoules"][2] = 0.0;
  EXPECT_THAT(errors_of(negative), ::testing::ElementsAre(::testing::StartsWith("energyJoules[1]: -1.0 is not a finite"),
                                                          "energyJoules[2]: must be > 0"));
  json failed = written;
  failed["state"] = "Failed";
  failed["reason"] = "LossNotFinite";
  failed.erase("throughput");
  EXPECT_THAT(errors_of(failed), ::testing::Contains("energyJoules: only with a Succeeded case's throughput"));
}

// A multi-rank case's gradient reduction: nccl-tests' bus bandwidth (2 (n - 1) / n of the data
// crosses each link) and the part of a step the reduction added, from what the worker timed.
TEST(CommunicationReport, BusBandwidthAndTheExposedShareFromWhatWasTimed) {
  const CommunicationReport eight = communication_report(8, 100'000'000, 4, 0.01, 0.2, 0.15);
  EXPECT_DOUBLE_EQ(eight.bus_bandwidth, 1e10 * 2 * 7 / 8);  // 10 GB/s of data, 17.5 GB/s on each link
  EXPECT_DOUBLE_EQ(eight.exposed_share, 0.25);
  EXPECT_EQ(eight.gradient_bytes, 100'000'000);
  EXPECT_EQ(eight.buckets, 4);
  EXPECT_DOUBLE_EQ(communication_report(2, 100'000'000, 4, 0.01, 0.2, 0.15).bus_bandwidth, 1e10);  // 2 (2 - 1) / 2 = 1
  // Steps without the reduction no faster (it hid behind backward, or noise): none exposed, not less.
  EXPECT_DOUBLE_EQ(communication_report(2, 1000, 1, 0.01, 0.2, 0.21).exposed_share, 0.0);
}

TEST(ResultDocument, TheCommunicationRoundTripsReachesTheStatusAndIsChecked) {
  ResultDocument doc = sample_document();  // 8 devices
  EXPECT_FALSE(to_json(doc).contains("communication"));
  EXPECT_FALSE(to_case_result(doc).communication.has_value());
  doc.communication = communication_report(8, 102'236'160, 4, 0.0125, 0.134, 0.128);
  const json written = to_json(doc);
  EXPECT_EQ(written["communication"]["buckets"], 4);
  const auto decoded = decode_result_document(written);
  ASSERT_TRUE(decoded.ok()) << decoded.errors.front().to_string();
  EXPECT_EQ(decoded.value->communication, doc.communication);
  const CaseResult r = to_case_result(*decoded.value);
  EXPECT_EQ(r.communication, doc.communication);
  BenchmarkRunStatus status;
  status.results.push_back(r);
  const auto read = decode_status(to_json(status));
  ASSERT_TRUE(read.ok()) << read.errors.front().to_string();
  EXPECT_EQ(read.value->results[0].communication, doc.communication);

  json bad = written;
  bad["communication"]["exposedShare"] = 1.5;
  bad["communication"]["buckets"] = 0;
  bad["communication"].erase("allreduceSeconds");
  bad["communication"]["busBandwith"] = 1;
  EXPECT_THAT(errors_of(bad), ::testing::UnorderedElementsAre(
                                  ::testing::StartsWith("communication.busBandwith: unknown"),
                                  ::testing::StartsWith("communication.buckets: "),
                                  ::testing::StartsWith("communication.allreduceSeconds: required"),
                                  "communication.exposedShare: 1.5 is out of range; allowed: at least 0 and at most 1"));
  json one_rank = written;
  one_rank["case"]["gpusPerNode"] = 1;
  one_rank["devices"] = 1;
  one_rank["globalBatchSize"] = 128;
  EXPECT_THAT(errors_of(one_rank),
              ::testing::Contains("communication: only where more than one rank reduced gradients (devices is 1)"));
  json failed = written;
  failed["state"] = "Failed";
  failed["reason"] = "LossNotFinite";
  failed.erase("throughput");
  EXPECT_THAT(errors_of(failed), ::testing::Contains("communication: only with a Succeeded case's throughput"));
}

TEST(ResultDocument, MemoryReportRoundTripsAndIsChecked) {
  ResultDocument doc = sample_document();
  doc.memory = MemoryReport{1.25e9, 4.0e9, 3.0e8, 2.1e9};
  json j = to_json(doc);
  EXPECT_EQ(j["memory"]["activationBytes"], 1.25e9);
  EXPECT_EQ(j["memory"]["peakResidentBytes"], 2.1e9);
  const auto decoded = decode_result_document(j);
  ASSERT_TRUE(decoded.ok()) << decoded.errors.front().to_string();
  EXPECT_EQ(*decoded.value, doc);

  j["memory"]["activationBytes"] = 5.0e9;  // more than with no sharing at all
  j["memory"].erase("parameterBytes");
  j["memory"]["spare"] = 1;
  const auto bad = decode_result_document(j);
  ASSERT_FALSE(bad.ok());
  std::string errors;
  for (const auto& e : bad.errors) errors += e.to_string() + "\n";
  EXPECT_THAT(errors, ::testing::HasSubstr("memory.activationBytes: exceeds unsharedActivationBytes"));
  EXPECT_THAT(errors, ::testing::HasSubstr("memory.parameterBytes: required"));
  EXPECT_THAT(errors, ::testing::HasSubstr("memory.spare"));
}

TEST(ResultDocument, StepProfileRoundTripsIsCheckedAndGoesFirstFromATerminationMessage) {
  ResultDocument doc = sample_document();
  doc.profile = StepProfile{5, 0.072, 0.004,
                            {{"conv1", "Conv2d", 0.001, 0.002}, {"layer1.0", "Bottleneck", 0.0003, 0.0004}},
                            {{"", "Conv2d", 0.001, 0.002}, {"", "Bottleneck", 0.0003, 0.0004}},
                            {}};
  json j = to_json(doc);
  EXPECT_EQ(j["profile"]["layers"][0]["name"], "conv1");
  EXPECT_FALSE(j["profile"]["kinds"][0].contains("name"));
  const auto decoded = decode_result_document(j);
  ASSERT_TRUE(decoded.ok()) << decoded.errors.front().to_string();
  EXPECT_EQ(*decoded.value, doc);

  json bad = j;
  bad["profile"]["steps"] = 0;
  bad["profile"]["layers"][1]["backwardSeconds"] = -1.0;
  bad["profile"]["kinds"][0]["name"] = "conv1";
  bad["profile"].erase("stepSeconds");
  EXPECT_THAT(errors_of(bad),
              ::testing::UnorderedElementsAre("profile.steps: 0 is out of range; allowed: 1 to 1000000",
                                              "profile.stepSeconds: required; seconds per step",
                                              "profile.layers[1].backwardSeconds: -1.0 is not a finite, non-negative number",
                                              ::testing::StartsWith("profile.kinds[0].name: unknown field")));

  // The rest of the step by part: an object of seconds, read back the most first.
  doc.profile->outside_parts = {{"update", 0.003}, {"loss", 0.0006}, {"other", 0.0004}};
  j = to_json(doc);
  EXPECT_EQ(j["profile"]["outsideParts"], json({{"update", 0.003}, {"loss", 0.0006}, {"other", 0.0004}}));
  const auto with_parts = decode_result_document(j);
  ASSERT_TRUE(with_parts.ok()) << with_parts.errors.front().to_string();
  EXPECT_EQ(*with_parts.value, doc);
  bad = j;
  bad["profile"]["outsideParts"]["allreduce"] = 0.0;
  bad["profile"]["outsideParts"]["loss"] = -1.0;
  EXPECT_THAT(errors_of(bad),
              ::testing::UnorderedElementsAre(
                  "profile.outsideParts.allreduce: unknown part; allowed: input, loss, gradientReductionWait, lossScaling, "
                  "update, other",
                  "profile.outsideParts.loss: -1.0 is not a finite, non-negative number",
                  "profile.outsideParts: the parts sum to 0.0034 s, not outsideLayersSeconds (0.004 s)"));
  bad = j;
  bad["profile"]["outsideParts"] = json::array();
  EXPECT_THAT(errors_of(bad), ::testing::ElementsAre("profile.outsideParts: expected an object of seconds by part, got a list"));

  const std::string full = j.dump();
  const json compact = json::parse(compact_result_document(full, full.size() - 10));
  EXPECT_FALSE(compact.contains("profile"));
  EXPECT_TRUE(compact["environment"].contains("hosts")) << "the profile goes before anything else";
}

// amp's loss scaling outcome: how many of the case's steps were skipped and the scale it ended at.
TEST(ResultDocument, LossScalingRoundTripsAndIsChecked) {
  ResultDocument doc = sample_document();
  doc.loss_scaling = LossScalingReport{32768.0, 3, 130, {}};
  json j = to_json(doc);
  EXPECT_EQ(j["lossScaling"]["skippedSteps"], 3);
  EXPECT_EQ(j["lossScaling"]["finalScale"], 32768.0);
  const auto decoded = decode_result_document(j);
  ASSERT_TRUE(decoded.ok()) << decoded.errors.front().to_string();
  EXPECT_EQ(*decoded.value, doc);

  json bad = j;
  bad["lossScaling"]["skippedSteps"] = 131;
  bad["lossScaling"]["finalScale"] = 0.0;
  bad["lossScaling"]["growth"] = 2;
  EXPECT_THAT(errors_of(bad), ::testing::UnorderedElementsAre("lossScaling.skippedSteps: exceeds steps",
                                                              "lossScaling.finalScale: must be > 0",
                                                              ::testing::StartsWith("lossScaling.growth: unknown field")));
  bad = j;
  bad["lossScaling"].erase("steps");
  EXPECT_THAT(errors_of(bad), ::testing::ElementsAre(::testing::StartsWith("lossScaling.steps: required")));
}

// Where the repeats trained little, the worker's trace of the first overflow after them rides
// along (lossScaling.overflow): written only when said, at most 1,024 characters, and the first
// thing the termination message's compaction drops after the environment's details.
TEST(ResultDocument, ATracedOverflowRoundTripsWithinItsLengthAndIsDroppedBeforeTheMessage) {
  ResultDocument doc = sample_document();
  doc.loss_scaling = LossScalingReport{1.49e-8, 42, 400, {}};
  EXPECT_FALSE(to_json(doc)["lossScaling"].contains("overflow"));
  doc.loss_scaling->overflow =
      "untimed step 401 skipped, loss scale now 7.45e-09: loss 2.8; 0 of 161 parameters' gradients not finite\n"
      "replayed at loss scale 1.49e-08: forward: first non-finite layer output: layer1.0.bn1 (BatchNorm2d), 2 inf, "
      "0 NaN of 51380224; loss inf; backward: every input gradient finite";
  const json j = to_json(doc);
  EXPECT_EQ(j["lossScaling"]["overflow"], doc.loss_scaling->overflow);
  const auto decoded = decode_result_document(j);
  ASSERT_TRUE(decoded.ok()) << decoded.errors.front().to_string();
  EXPECT_EQ(*decoded.value, doc);
  BenchmarkRunStatus status;
  status.results.push_back(to_case_result(doc));
  const auto read = decode_status(to_json(status));
  ASSERT_TRUE(read.ok()) << read.errors.front().to_string();
  EXPECT_EQ(read.value->results[0].loss_scaling->overflow, doc.loss_scaling->overflow);

  json bad = j;
  bad["lossScaling"]["overflow"] = std::string(1025, 'x');
  EXPECT_THAT(errors_of(bad), ::testing::ElementsAre("lossScaling.overflow: is 1025 characters long; at most 1024 allowed"));
  bad["lossScaling"]["overflow"] = 7;
  EXPECT_THAT(errors_of(bad), ::testing::ElementsAre(::testing::StartsWith("lossScaling.overflow:")));

  // Compacted only as far as needed: the environment's details go before the trace, the trace
  // before the message. The largest limit at which each is gone, the limit lowered a byte at a time.
  doc.environment.cpu_model = "AMD EPYC";
  doc.message = "42 of 400 steps skipped for an inf or NaN gradient";
  const std::string full = to_json(doc).dump();
  std::size_t cpu_model_gone = 0, overflow_gone = 0, message_gone = 0;
  for (std::size_t limit = full.size(); limit > 0 && message_gone == 0; --limit) {
    json c;
    try {
      c = json::parse(compact_result_document(full, limit));
    } catch (const std::runtime_error&) {
      break;  // nothing more to drop
    }
    if (cpu_model_gone == 0 && !c["environment"].contains("cpuModel")) cpu_model_gone = limit;
    if (overflow_gone == 0 && !c["lossScaling"].contains("overflow")) overflow_gone = limit;
    if (message_gone == 0 && !c.contains("message")) message_gone = limit;
    EXPECT_EQ(c["lossScaling"]["skippedSteps"], 42);
  }
  EXPECT_GT(cpu_model_gone, overflow_gone);
  EXPECT_GT(overflow_gone, message_gone);
  EXPECT_GT(message_gone, 0u);
}

TEST(LossScalingReport, TrainedLittleAbove5PercentSkippedOrBelowAScaleOf1) {
  EXPECT_FALSE(loss_scaling_trained_little({65536.0, 20, 400, {}}));  // 5%: a scaler finding its scale
  EXPECT_TRUE(loss_scaling_trained_little({65536.0, 21, 400, {}}));
  EXPECT_TRUE(loss_scaling_trained_little({0.5, 1, 400, {}}));  // overflowed even unscaled
  EXPECT_FALSE(loss_scaling_trained_little({1.0, 0, 400, {}}));
}

// The loss after each repeat goes into the document, NaN and infinity in protobuf's JSON words;
// a loss that is not finite goes with reason LossNotFinite and a Failed state, and nothing else
// does; there is one loss per repeat run.
TEST(ResultDocument, LossAfterRepeatsRoundTripsAndIsChecked) {
  ResultDocument doc = sample_document();
  doc.loss_after_repeats = {6.9, 6.1, 5.4};
  json j = to_json(doc);
  EXPECT_EQ(j["lossAfterRepeats"], json::parse("[6.9, 6.1, 5.4]"));
  const auto decoded = decode_result_document(j);
  ASSERT_TRUE(decoded.ok()) << decoded.errors.front().to_string();
  EXPECT_EQ(*decoded.value, doc);

  ResultDocument diverged = sample_document();
  diverged.state = CaseState::Failed;
  diverged.reason = kReasonLossNotFinite;
  diverged.message = "the loss after repeat 3 was NaN";
  diverged.loss_after_repeats = {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                                 std::numeric_limits<double>::quiet_NaN()};
  j = to_json(diverged);
  EXPECT_EQ(j["lossAfterRepeats"], json::parse(R"(["Infinity", "-Infinity", "NaN"])"));
  const auto back = decode_result_document(j);
  ASSERT_TRUE(back.ok()) << back.errors.front().to_string();
  const std::vector<double>& losses = back.value->loss_after_repeats;
  ASSERT_EQ(losses.size(), 3u);
  EXPECT_EQ(losses[0], std::numeric_limits<double>::infinity());
  EXPECT_EQ(losses[1], -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(losses[2]));
  EXPECT_TRUE(failure_is_permanent(back.value->reason));

  json bad = j;
  bad["state"] = "Succeeded";
  bad.erase("reason");
  EXPECT_THAT(errors_of(bad),
              ::testing::UnorderedElementsAre(
                  "lossAfterRepeats: is LossNotFinite exactly when a loss after a repeat is NaN or infinite",
                  "state: cannot be Succeeded when the loss is not finite"));
  bad = to_json(doc);
  bad["reason"] = "LossNotFinite";
  bad["lossAfterRepeats"] = json::parse(R"([6.9, "nan"])");
  EXPECT_THAT(errors_of(bad),
              ::testing::UnorderedElementsAre(
                  R"(lossAfterRepeats[1]: expected a number, "NaN", "Infinity" or "-Infinity", got a string)",
                  "reason: is LossNotFinite exactly when a loss after a repeat is NaN or infinite",
                  "lossAfterRepeats: has 1 entries for 3 repeats run (throughput.repeats and stability.extraRepeats)"));
  bad = to_json(doc);
  bad["lossAfterRepeats"] = json::array();
  EXPECT_THAT(errors_of(bad), ::testing::ElementsAre(::testing::StartsWith("lossAfterRepeats:")));
}

// A document too long for a termination message drops its losses after stability's discarded
// repeats and keeps the rest valid; a diverged one still says why in its reason and message.
TEST(ResultDocument, CompactingDropsTheLossesAndStaysValid) {
  ResultDocument doc = sample_document();
  doc.state = CaseState::Failed;
  doc.reason = kReasonLossNotFinite;
  doc.message = "the loss after repeat 3 was NaN";
  doc.loss_after_repeats = {2.5, 2.5e30, std::numeric_limits<double>::quiet_NaN()};
  doc.environment.hosts.assign(300, "a-host-name-long-enough-to-push-the-document-over-its-limit");
  const std::string compact = compact_result_document(to_json(doc).dump(), 4096);
  ASSERT_LE(compact.size(), 4096u);
  const json j = json::parse(compact);
  EXPECT_FALSE(j.contains("lossAfterRepeats"));
  const auto decoded = decode_result_document(j);
  ASSERT_TRUE(decoded.ok()) << decoded.errors.front().to_string();
  EXPECT_EQ(decoded.value->reason, "LossNotFinite");
}

// A stability report must follow from the reported repeats: its cv is theirs, its verdict is cv
// against maxCv, and reason Unstable goes with an unstable verdict and nothing else.
TEST(ResultDocument, StabilityFollowsFromTheRepeatsAndReachesTheStatus) {
  ResultDocument doc = sample_document();
  const std::vector<double> measured{5000.0, 7600.0, 7650.0, 7580.0};  // one repeat measured again
  doc.stability = judge_stability(measured, 3, 0.02);
  ASSERT_EQ(doc.stability->verdict, StabilityVerdict::stable);
  json j = to_json(doc);
  EXPECT_EQ(j["stability"]["discarded"], json::array({5000.0}));
  const auto decoded = decode_result_document(j);
  ASSERT_TRUE(decoded.ok()) << decoded.errors.front().to_string();
  EXPECT_EQ(*decoded.value, doc);
  EXPECT_EQ(*to_case_result(doc).stability, *doc.stability);

  json wrong_cv = j;
  wrong_cv["stability"]["cv"] = 0.5;
  EXPECT_THAT(errors_of(wrong_cv), ElementsAre(::testing::StartsWith("stability.cv: does not match the repeats")));
  json tighter = j;  // the same repeats against a tighter bound are unstable, which the verdict must say
  tighter["stability"]["maxCv"] = 0.001;
  EXPECT_THAT(errors_of(tighter), ElementsAre("stability.verdict: stable does not follow from cv 0.004737912319926398 "
                                              "against maxCv 0.001"));
  tighter["stability"]["verdict"] = "unstable";
  EXPECT_THAT(errors_of(tighter), ElementsAre("reason: is Unstable exactly when stability.verdict is unstable"));
  tighter["reason"] = "Unstable";
  tighter["message"] = "cv 0.4% over the last 3 repeats is above the bound 0.1%";
  EXPECT_TRUE(decode_result_document(tighter).ok());

  // A termination message too small for every discarded repeat drops them first (the log keeps them).
  const std::string full = j.dump();
  const json compact = json::parse(compact_result_document(full, full.size() - 5));
  EXPECT_FALSE(compact["stability"].contains("discarded"));
  EXPECT_TRUE(decode_result_document(compact).ok());
}

TEST(ResultDocument, InterferenceRoundTripsReachesTheStatusAndIsChecked) {
  ResultDocument doc = sample_document();
  doc.interference = InterferenceReport{0.42, 0.01, std::nullopt, InterferenceVerdict::interfered};
  json j = to_json(doc);
  EXPECT_EQ(j["interference"]["verdict"], "interfered");
  const auto decoded = decode_result_document(j);
  ASSERT_TRUE(decoded.ok()) << decoded.errors.front().to_string();
  EXPECT_EQ(*decoded.value, doc);
  const CaseResult r = to_case_result(doc);
  ASSERT_TRUE(r.interference.has_value());
  EXPECT_EQ(*r.interference, *doc.interference);
  EXPECT_EQ(interference_verdict(std::nullopt, 0.0), InterferenceVerdict::clean);
  EXPECT_EQ(interference_verdict(0.11, 0.0), InterferenceVerdict::interfered);
  EXPECT_EQ(interference_verdict(std::nullopt, 0.11), InterferenceVerdict::interfered);
  j["interference"]["cpuPressure"] = 1.5;
  j["interference"]["verdict"] = "noisy";
  EXPECT_THAT(errors_of(j), ElementsAre("interference.cpuPressure: 1.5 is out of range; allowed: at least 0 and at most 1",
                                        R"(interference.verdict: "noisy" is not one of clean, interfered, throttled)"));

  // A GPU case's NVML readings travel with it, and are checked as they are read.
  doc.interference->gpu = GpuReadings{0, 1650, 1755, 1980, {GpuThrottleReason::power_cap}, 78, 690.5, 120};
  doc.interference->verdict = interference_verdict(0.42, 0.01, &*doc.interference->gpu);
  j = to_json(doc);
  EXPECT_EQ(j["interference"]["gpu"]["throttleReasons"], json::array({"power-cap"}));
  const auto with_gpu = decode_result_document(j);
  ASSERT_TRUE(with_gpu.ok()) << with_gpu.errors.front().to_string();
  EXPECT_EQ(*with_gpu.value, doc);
  j["interference"]["gpu"]["throttleReasons"] = {"too-hot"};
  j["interference"]["gpu"]["smClockMinMhz"] = 1900;
  EXPECT_THAT(errors_of(j), ElementsAre(R"(interference.gpu.throttleReasons[0]: "too-hot" is not one of thermal, hw-slowdown, power-brake, power-cap)",
                                        "interference.gpu.smClockMinMhz: exceeds smClockMedianMhz"));
}

TEST(ResultDocument, InputReportRoundTripsAndReachesTheStatus) {
  ResultDocument doc = sample_document();
  InputReport input;
  input.wait_seconds = 3.5;
  input.wait_share = 0.25;
  input.wait_seconds_per_step = summarize(std::vector<double>{0.01, 0.02, 0.04});
  input.pipeline_throughput = 950.5;
  input.verdict = input_verdict(input.wait_share);
  input.decode_threads = 8;
  input.files = 1281167;
  input.skipped_files = 1;
  input.skipped_examples = {"/data/n01739381/n01739381_1309.JPEG: Unsupported color conversion request"};
  doc.input = input;
  const json j = to_json(doc);
  EXPECT_EQ(j["input"]["verdict"], "input-bound");
  const auto decoded = decode_result_document(j);
  ASSERT_TRUE(decoded.ok()) << decoded.errors.front().to_string();
  EXPECT_EQ(*decoded.value, doc);
  EXPECT_EQ(to_case_result(doc).input, doc.input);
  EXPECT_EQ(to_json(to_case_result(doc))["input"], j["input"]);
  json bad = j;
  bad["input"]["waitShare"] = 1.5;
  bad["input"]["verdict"] = "disk-bound";
  EXPECT_THAT(errors_of(bad), ElementsAre("input.waitShare: 1.5 is out of range; allowed: 0 to 1",
                                          R"(input.verdict: "disk-bound" is not one of input-bound, compute-bound)"));
  EXPECT_EQ(input_verdict(0.10), InputVerdict::compute_bound);
  EXPECT_EQ(input_verdict(0.11), InputVerdict::input_bound);
}

TEST(ResultDocument, CompactingDropsTheInputDetailsBeforeTheEnvironment) {
  ResultDocument doc = sample_document();
  InputReport input;
  input.wait_seconds_per_step = summarize(std::vector<double>{0.01, 0.02});
  input.skipped_examples = {std::string(900, 'x'), std::string(900, 'y')};
  doc.input = input;
  doc.step_time_seconds.reset();
  const std::string full = to_json(doc).dump();
  const json compact = json::parse(compact_result_document(full, full.size() - 1000));
  EXPECT_FALSE(compact["input"].contains("skippedExamples"));
  EXPECT_FALSE(compact["input"].contains("waitSecondsPerStep"));
  EXPECT_TRUE(compact["environment"].contains("cudaVersion"));
  EXPECT_EQ(compact["input"]["verdict"], "compute-bound");
}

// What the status keeps of the environment (the driver, the CPU's model, dlbench's version) is
// dropped from a termination message only after what it does not (the OS, why so many threads).
TEST(ResultDocument, CompactingKeepsWhatTheStatusShowsOfTheEnvironmentLongest) {
  ResultDocument doc = sample_document();
  doc.environment.os = "Linux " + std::string(600, 'k');
  doc.environment.cpu_threads_reason = std::string(600, 'r');
  doc.environment.cpu_model = "Intel Xeon Platinum 8480C";
  doc.environment.driver_version = "580.159";
  doc.environment.dlbench_version = "0.1.0";
  doc.step_time_seconds.reset();
  const std::string full = to_json(doc).dump();
  const json compact = json::parse(compact_result_document(full, full.size() - 1000));
  EXPECT_FALSE(compact["environment"].contains("os"));
  EXPECT_FALSE(compact["environment"].contains("cpuThreadsReason"));
  EXPECT_EQ(compact["environment"]["driverVersion"], "580.159");
  EXPECT_EQ(compact["environment"]["cpuModel"], "Intel Xeon Platinum 8480C");
  const CaseResult r = to_case_result(decode_result_document(compact).value.value());
  EXPECT_EQ(r.environment->dlbench_version, "0.1.0");
}

TEST(DevicePeaks, DatasheetFiguresByNameAndPrecision) {
  EXPECT_DOUBLE_EQ(*peak_flops_per_second("NVIDIA H100 80GB HBM3", Precision::amp), 989.4e12);
  EXPECT_DOUBLE_EQ(*peak_flops_per_second("NVIDIA H100 80GB HBM3", Precision::tf32), 494.7e12);
  EXPECT_DOUBLE_EQ(*peak_flops_per_second("NVIDIA H100 80GB HBM3", Precision::fp32), 67e12);
  EXPECT_DOUBLE_EQ(*peak_flops_per_second("NVIDIA H100 PCIe", Precision::bf16), 756e12);  // not the SXM figure
  EXPECT_DOUBLE_EQ(*peak_flops_per_second("NVIDIA H200", Precision::bf16), 989.4e12);
  EXPECT_DOUBLE_EQ(*peak_flops_per_second("NVIDIA A100-SXM4-80GB", Precision::amp), 312e12);
  EXPECT_FALSE(peak_flops_per_second("NVIDIA GeForce GTX 1080", Precision::fp32).has_value());
  EXPECT_FALSE(peak_flops_per_second("", Precision::fp32).has_value());  // the CPU backend
}

TEST(ResultDocument, MfuIsCheckedAgainstThroughputAndPeak) {
  ResultDocument doc = sample_document();
  doc.peak_flops_per_device = *peak_flops_per_second(doc.environment.gpu_model, doc.case_.precision);
  doc.mfu = model_flops_utilization(doc.flops_per_sample.training, doc.throughput->summary.median,
                                    *doc.peak_flops_per_device, doc.devices);
  EXPECT_NEAR(*doc.mfu, 24.54e9 * 7600.0 / (989.4e12 * 8), 1e-12);  // about 2.4%
  const auto decoded = decode_result_document(to_json(doc));
  ASSERT_TRUE(decoded.ok()) << decoded.errors.front().to_string();
  EXPECT_EQ(*decoded.value, doc);

  json wrong = to_json(doc);
  wrong["mfu"] = 0.5;
  EXPECT_THAT(errors_of(wrong).front(), ::testing::HasSubstr("mfu: does not match modelFlopsPerSample.training"));
  json alone = to_json(doc);
  alone.erase("peakFlopsPerDevice");
  EXPECT_THAT(errors_of(alone), ElementsAre("peakFlopsPerDevice: mfu and peakFlopsPerDevice come together"));
  json over = to_json(doc);
  over["mfu"] = 1.5;
  EXPECT_THAT(errors_of(over).front(), ::testing::HasSubstr("mfu: must be in (0, 1]"));
}

TEST(ResultDocument, RejectsUnknownSchema) {
  json j = to_json(sample_document());
  j["schema"] = "dlbench.result/v2";
  EXPECT_THAT(errors_of(j), ElementsAre(R"(schema: "dlbench.result/v2" is not supported; this dlbench reads dlbench.result/v1)"));
}

TEST(ResultDocument, DevicesAndGlobalBatchMustMatchTheCase) {
  json j = to_json(sample_document());
  j["devices"] = 4;
  j["globalBatchSize"] = 512;
  EXPECT_THAT(errors_of(j), ElementsAre("devices: 4 does not match the case (8 = nodes × gpusPerNode)",
                                        "globalBatchSize: 512 does not match the case (1024 = batchSizePerDevice × devices)"));
}

TEST(ResultDocument, SucceededNeedsOneThroughputPerRepeat) {
  json j = to_json(sample_document());
  j["throughput"]["repeats"].erase(2);
  EXPECT_THAT(errors_of(j), ElementsAre("throughput.repeats: has 2 entries; methodology.repeats is 3"));
  json missing = to_json(sample_document());
  missing.erase("throughput");
  EXPECT_THAT(errors_of(missing), ElementsAre("throughput: required when state is Succeeded"));
}

TEST(ResultDocument, SummaryMustAgreeWithRepeats) {
  json j = to_json(sample_document());
  j["throughput"]["median"] = 9999.0;
  EXPECT_THAT(errors_of(j), ElementsAre("throughput.median: does not match the repeats (expected 7600)"));
}

TEST(ResultDocument, FailedDocumentNeedsReasonNotThroughput) {
  ResultDocument doc = sample_document();
  doc.state = CaseState::Failed;
  doc.throughput.reset();
  doc.step_time_seconds.reset();
  EXPECT_THAT(errors_of(to_json(doc)), ElementsAre("reason: required when state is Failed"));
  doc.reason = "OutOfMemory";
  doc.message = "cudaMalloc of 81604378624 bytes failed with 10737418240 bytes free";
  EXPECT_THAT(errors_of(to_json(doc)), IsEmpty());
}

TEST(ResultDocument, EnvironmentNeedsBackend) {
  json j = to_json(sample_document());
  j["environment"].erase("backend");
  j["environment"]["gpuName"] = "x";
  EXPECT_THAT(errors_of(j), ElementsAre(::testing::HasSubstr("environment.gpuName: unknown field"),
                                        ::testing::HasSubstr("environment.backend: required")));
}

TEST(ResultDocument, ToCaseResult) {
  const CaseResult r = to_case_result(sample_document(), 2);
  EXPECT_EQ(r.case_, (CaseSpec{1, 8, 128, Precision::amp}));
  EXPECT_EQ(r.state, CaseState::Succeeded);
  EXPECT_EQ(r.attempts, 2);
  ASSERT_TRUE(r.throughput.has_value());
  EXPECT_DOUBLE_EQ(r.throughput->summary.median, 7600.0);
  EXPECT_EQ(r.start_time, "2026-11-21T05:00:00Z");
  EXPECT_EQ(r.completion_time, "2026-11-21T05:02:00Z");
}

// A published figure names what measured it: the result document's environment reaches the
// status without the hosts, the OS or the thread counts, round-trips through the status codec,
// and is checked there like every other field.
TEST(ResultDocument, TheStatusSaysWhatMeasuredTheCase) {
  ResultDocument doc = sample_document();
  doc.environment.driver_version = "580.159";
  doc.environment.cudnn_version = "9.10.2";
  doc.environment.nccl_version = "2.27.3";
  doc.environment.cpu_model = "Intel Xeon Platinum 8480C";
  doc.environment.cpu_threads_reason = "2 cores in the affinity mask";
  doc.environment.dlbench_version = "0.1.0";
  const CaseResult r = to_case_result(doc);
  ASSERT_TRUE(r.environment.has_value());
  EXPECT_EQ(r.environment->gpu_model, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(r.environment->driver_version, "580.159");
  EXPECT_EQ(r.environment->backend_options.at("conv"), "graph");

  const json j = to_json(r);
  EXPECT_EQ(j["environment"], json::parse(R"({"dlbenchVersion": "0.1.0", "backend": "cuda", "communicator": "nccl",
      "cpuModel": "Intel Xeon Platinum 8480C", "gpuModel": "NVIDIA H100 80GB HBM3", "driverVersion": "580.159",
      "cudaVersion": "13.0", "cudnnVersion": "9.10.2", "ncclVersion": "2.27.3",
      "backendOptions": {"attention": "fused", "conv": "graph"}})"));
  EXPECT_EQ(describe(*r.environment),
            "cuda backend, NVIDIA H100 80GB HBM3, driver 580.159, CUDA 13.0, cuDNN 9.10.2, NCCL 2.27.3; CPU Intel "
            "Xeon Platinum 8480C; options attention=fused conv=graph; dlbench 0.1.0");

  BenchmarkRun run;
  run.metadata.name = "r";
  run.spec.cases = {r.case_};
  run.status = BenchmarkRunStatus{};
  run.status->results.push_back(r);
  const json written = to_json(run);
  const Decoded<BenchmarkRun> read = decode_benchmark_run(written);
  ASSERT_TRUE(read.ok()) << read.errors.front().to_string();
  EXPECT_EQ(read.value->status->results.at(0).environment, r.environment);

  json bad = written;
  bad["status"]["results"][0]["environment"]["gpuName"] = "x";
  bad["status"]["results"][0]["environment"]["backendOptions"]["layout"] = 3;
  bad["status"]["results"][0]["environment"]["driverVersion"] = std::string(1025, 'v');
  std::vector<std::string> errors;
  for (const auto& e : decode_benchmark_run(bad).errors) errors.push_back(e.to_string());
  EXPECT_THAT(errors, ::testing::UnorderedElementsAre(
                          ::testing::HasSubstr("status.results[0].environment.gpuName: unknown field"),
                          ::testing::HasSubstr("status.results[0].environment.backendOptions.layout: expected a string"),
                          ::testing::HasSubstr("status.results[0].environment.driverVersion: is 1025 characters long")));
}

// A script's framework leads the line; what was not reported is left out.
TEST(ResultDocument, AWrappedScriptsEnvironmentNamesItsFrameworkFirst) {
  EnvironmentInfo e;
  e.backend = "cuda";
  e.framework = "pytorch";
  e.framework_version = "2.11.0";
  e.gpu_model = "NVIDIA H200";
  e.host = "node-a";
  const CaseEnvironment c = case_environment(e);
  EXPECT_EQ(describe(c), "pytorch 2.11.0; cuda backend, NVIDIA H200");
  CaseResult r;
  r.environment = c;
  EXPECT_EQ(to_json(r)["environment"].size(), 4u);  // no host
}

}  // namespace
}  // namespace dlbench
