// engine: command's pure parts: the marker protocol, the methodology over marker arrival times,
// the case read back from the environment, and the reasons a result ends with.
#include <cmath>
#include <limits>
#include <map>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "command/command_runner.hpp"
#include "command/markers.hpp"
#include "command/step_timing.hpp"
#include "dlbench/core/result_document.hpp"
#include "dlbench/core/run_state.hpp"
#include "dlbench/core/worker_command.hpp"

namespace dlbench::command {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(Markers, StepFactUnsupportedAndOrdinaryLines) {
  EXPECT_EQ(parse_marker("@dlbench step 256").kind, Marker::Kind::step);
  EXPECT_EQ(parse_marker("@dlbench step 256").samples, 256);
  EXPECT_EQ(parse_marker("@dlbench step 8\r").samples, 8);  // CRLF from a Windows-minded script
  const Marker fact = parse_marker("@dlbench fact frameworkVersion 2.5.1+cu124 (custom build)");
  EXPECT_EQ(fact.kind, Marker::Kind::fact);
  EXPECT_EQ(fact.key, "frameworkVersion");
  EXPECT_EQ(fact.value, "2.5.1+cu124 (custom build)");
  const Marker unsupported = parse_marker("@dlbench unsupported bf16 needs Ampere");
  EXPECT_EQ(unsupported.kind, Marker::Kind::unsupported);
  EXPECT_EQ(unsupported.value, "bf16 needs Ampere");
  for (const char* ordinary : {"", "step 256", "Epoch 1: loss 6.9", " @dlbench step 1", "@dlbenchmark step 1"}) {
    EXPECT_EQ(parse_marker(ordinary).kind, Marker::Kind::none) << ordinary;
  }
}

// The loss as Python prints a float: a number, or nan, inf and -inf.
TEST(Markers, LossTakesNumbersAndTheValuesThatAreNotFinite) {
  EXPECT_EQ(parse_marker("@dlbench loss 6.9078").kind, Marker::Kind::loss);
  EXPECT_DOUBLE_EQ(parse_marker("@dlbench loss 6.9078").loss, 6.9078);
  EXPECT_DOUBLE_EQ(parse_marker("@dlbench loss 1e-05").loss, 1e-05);
  EXPECT_TRUE(std::isnan(parse_marker("@dlbench loss nan").loss));
  EXPECT_TRUE(std::isnan(parse_marker("@dlbench loss NaN").loss));
  EXPECT_EQ(parse_marker("@dlbench loss inf").loss, std::numeric_limits<double>::infinity());
  EXPECT_EQ(parse_marker("@dlbench loss -inf").loss, -std::numeric_limits<double>::infinity());
  for (const char* bad : {"@dlbench loss", "@dlbench loss six", "@dlbench loss 1.5x", "@dlbench loss 1 2",
                          "@dlbench loss 1e999"}) {
    const Marker m = parse_marker(bad);
    EXPECT_EQ(m.kind, Marker::Kind::invalid) << bad;
    EXPECT_THAT(m.error, HasSubstr("loss:")) << bad;
  }
}

TEST(Markers, MalformedMarkersSayWhatIsExpected) {
  for (const char* bad : {"@dlbench step", "@dlbench step 0", "@dlbench step -4", "@dlbench step 2.5",
                          "@dlbench step 12abc", "@dlbench step 99999999999999999999", "@dlbench step 4 extra"}) {
    const Marker m = parse_marker(bad);
    EXPECT_EQ(m.kind, Marker::Kind::invalid) << bad;
    EXPECT_THAT(m.error, HasSubstr("step")) << bad;
  }
  EXPECT_THAT(parse_marker("@dlbench fact").error, HasSubstr("<key>"));
  EXPECT_THAT(parse_marker("@dlbench fact 1x y").error, HasSubstr("starting with a letter"));
  EXPECT_THAT(parse_marker("@dlbench fact framework").error, HasSubstr("<value> is missing"));
  EXPECT_THAT(parse_marker("@dlbench unsupported").error, HasSubstr("say why"));
  EXPECT_THAT(parse_marker("@dlbench setp 4").error, HasSubstr("unknown marker \"setp\""));
  EXPECT_EQ(parse_marker("@dlbench fact k " + std::string(1000, 'v')).value.size(), kMaxFactValueLength);
}

std::vector<StepArrival> arrivals(const std::vector<double>& seconds, long samples) {
  std::vector<StepArrival> out;
  for (const double s : seconds) out.push_back({s, samples});
  return out;
}

// 2 repeats of (1 warm-up + 2 measured): repeat 1 measures steps 2-3 from step 1's arrival,
// repeat 2 steps 5-6 from step 4's.
TEST(StepTiming, SlicesRepeatsAsTheNativeWorkerDoes) {
  const Methodology m{1, 2, 2, Statistic::median, {}};
  const auto steps = arrivals({5.0, 5.5, 6.5, 7.0, 7.25, 7.75}, 32);
  const StepTimingResult r = time_steps(steps, m, 32);
  ASSERT_TRUE(r.ok) << r.message;
  EXPECT_THAT(r.repeats.measured_seconds, ElementsAre(1.5, 0.75));
  EXPECT_THAT(r.repeats.step_seconds, ElementsAre(0.5, 1.0, 0.25, 0.5));
  EXPECT_DOUBLE_EQ(r.repeats.throughput[0], 32.0 * 2 / 1.5);
  EXPECT_DOUBLE_EQ(r.repeats.throughput[1], 32.0 * 2 / 0.75);
}

TEST(StepTiming, WithoutWarmUpTheFirstRepeatStartsWithTheCommand) {
  const Methodology m{0, 2, 2, Statistic::median, {}};
  const StepTimingResult r = time_steps(arrivals({1.0, 2.0, 2.5, 3.0}, 4), m, 4);
  ASSERT_TRUE(r.ok);
  EXPECT_THAT(r.repeats.measured_seconds, ElementsAre(2.0, 1.0));
}

TEST(StepTiming, ExtraMarkersAreIgnored) {
  const Methodology m{1, 1, 1, Statistic::median, {}};
  const StepTimingResult r = time_steps(arrivals({1.0, 3.0, 3.1, 3.2}, 4), m, 4);
  ASSERT_TRUE(r.ok);
  EXPECT_THAT(r.repeats.measured_seconds, ElementsAre(2.0));
}

TEST(StepTiming, MissingOrWrongMarkersAreReasons) {
  const Methodology m{2, 3, 2, Statistic::median, {}};
  const StepTimingResult none = time_steps({}, m, 8);
  EXPECT_EQ(none.reason, "NoMeasurements");
  EXPECT_THAT(none.message, HasSubstr("10 were needed (2 repeats x (2 warm-up + 3 measured steps))"));
  const StepTimingResult short_of = time_steps(arrivals({1, 2, 3, 4, 5, 6, 7}, 8), m, 8);
  EXPECT_EQ(short_of.reason, "IncompleteMeasurement");
  EXPECT_THAT(short_of.message, HasSubstr("printed 7 step markers; 10 were needed"));
  EXPECT_THAT(short_of.message, HasSubstr("repeat 2 is incomplete"));
  auto steps = arrivals({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 8);
  steps[6].samples = 4;
  const StepTimingResult mismatch = time_steps(steps, m, 8);
  EXPECT_EQ(mismatch.reason, "SampleCountMismatch");
  EXPECT_THAT(mismatch.message, HasSubstr("step 7 reported 4 samples; the case's global batch is 8"));
  const StepTimingResult instant = time_steps(arrivals({1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 8), m, 8);
  EXPECT_EQ(instant.reason, "InvalidMeasurement");
}

// A command that ended early keeps what it completed: here 2 of 3 repeats of (1 warm-up + 2
// measured), timed as time_steps times them; the third's step is not a repeat.
TEST(StepTiming, AnEarlyEndKeepsTheRepeatsItCompleted) {
  const Methodology m{1, 2, 3, Statistic::median, {}};
  const auto steps = arrivals({5.0, 5.5, 6.5, 7.0, 7.25, 7.75, 8.0}, 32);
  const StepTimingResult r = time_complete_repeats(steps, m, 32);
  ASSERT_TRUE(r.ok) << r.message;
  EXPECT_THAT(r.repeats.measured_seconds, ElementsAre(1.5, 0.75));
  EXPECT_THAT(r.repeats.step_seconds, ElementsAre(0.5, 1.0, 0.25, 0.5));
  // Every repeat there: the same as time_steps; more markers than needed: no more repeats.
  const auto all = arrivals({5.0, 5.5, 6.5, 7.0, 7.25, 7.75, 8.0, 8.5, 9.0, 9.5}, 32);
  EXPECT_EQ(time_complete_repeats(all, m, 32).repeats.throughput, time_steps(all, m, 32).repeats.throughput);
  EXPECT_EQ(time_complete_repeats(all, m, 32).repeats.throughput.size(), 3u);
  // None complete, or another batch among them: nothing kept.
  EXPECT_FALSE(time_complete_repeats(arrivals({5.0, 5.5}, 32), m, 32).ok);
  EXPECT_FALSE(time_complete_repeats({}, m, 32).ok);
  auto other_batch = steps;
  other_batch[4].samples = 16;
  EXPECT_EQ(time_complete_repeats(other_batch, m, 32).reason, "SampleCountMismatch");
}

TEST(CaseFromEnvironment, RoundTripsTheEnvironmentDlbenchSets) {
  BenchmarkRun run;
  run.metadata.name = "pt";
  run.spec.model = Model::vgg16;
  run.spec.data.image_size = 128;
  run.spec.methodology = {3, 7, 2, Statistic::mean, {}};
  const CaseSpec c{2, 4, 16, Precision::bf16};
  std::map<std::string, std::string> env;
  for (const auto& [k, v] : command_environment(run, c, {1, "node0", 1234, "/dlbench"})) env[k] = v;
  EXPECT_EQ(env.at("DLBENCH_TOTAL_STEPS"), "20");
  EXPECT_EQ(env.at("DLBENCH_GLOBAL_BATCH_SIZE"), "128");
  // No learning rate in the spec: VGG16's 0.01 at a global batch of 256, halved at 128.
  EXPECT_DOUBLE_EQ(std::stod(env.at("DLBENCH_LEARNING_RATE")), 0.005);
  EXPECT_EQ(env.at("DLBENCH_LEARNING_RATE_WARMUP_STEPS"), "0");
  EXPECT_EQ(env.at("WORLD_SIZE"), "2");
  EXPECT_EQ(env.at("PET_NPROC_PER_NODE"), "4");
  std::string error;
  const auto parsed = case_from_environment(
      [&](const char* name) { return env.contains(name) ? env.at(name).c_str() : nullptr; }, error);
  ASSERT_TRUE(parsed) << error;
  EXPECT_EQ(parsed->run, "pt");
  EXPECT_EQ(parsed->model, Model::vgg16);
  EXPECT_EQ(parsed->image_size, 128);
  EXPECT_EQ(parsed->case_, c);
  EXPECT_EQ(parsed->methodology, run.spec.methodology);
  EXPECT_EQ(parsed->node_rank, 1);
  EXPECT_EQ(parsed->total_steps(), 20);

  const auto fails_with = [&](const std::string& name, const char* value) {
    auto changed = env;
    if (value == nullptr) changed.erase(name); else changed[name] = value;
    std::string why;
    EXPECT_FALSE(case_from_environment(
        [&](const char* n) { return changed.contains(n) ? changed.at(n).c_str() : nullptr; }, why));
    return why;
  };
  EXPECT_THAT(fails_with("DLBENCH_NODES", nullptr), HasSubstr("DLBENCH_NODES is not set"));
  EXPECT_THAT(fails_with("DLBENCH_BATCH_SIZE", "0"), HasSubstr("DLBENCH_BATCH_SIZE=\"0\": must be a whole number in [1, 65536]"));
  EXPECT_THAT(fails_with("DLBENCH_PRECISION", "fp8"), HasSubstr("allowed: fp32, tf32, amp, bf16"));
  EXPECT_THAT(fails_with("DLBENCH_NODE_RANK", "2"), HasSubstr("must be below DLBENCH_NODES (2)"));
  EXPECT_THAT(fails_with("DLBENCH_RUN", "Not_A_Name"), HasSubstr("DNS-1123"));
  EXPECT_THAT(fails_with("DLBENCH_MAX_CV", "0"), HasSubstr("DLBENCH_MAX_CV=\"0\": must be a number in (0, 1]"));
  EXPECT_THAT(fails_with("DLBENCH_MAX_CV", "2%"), HasSubstr("DLBENCH_MAX_CV=\"2%\""));

  // spec.methodology.stability.maxCv travels as DLBENCH_MAX_CV; a GPU given to the node sets the default.
  run.spec.methodology.stability.max_cv = 0.03;
  env.clear();
  for (const auto& [k, v] : command_environment(run, c, {1, "node0", 1234, "/dlbench"})) env[k] = v;
  env["NVIDIA_VISIBLE_DEVICES"] = "GPU-1";
  const auto with_bound = case_from_environment(
      [&](const char* name) { return env.contains(name) ? env.at(name).c_str() : nullptr; }, error);
  ASSERT_TRUE(with_bound) << error;
  EXPECT_EQ(with_bound->methodology.stability.max_cv, 0.03);
  EXPECT_TRUE(with_bound->gpu);
  env["NVIDIA_VISIBLE_DEVICES"] = "void";  // the NVIDIA runtime's "no GPU"
  EXPECT_FALSE(case_from_environment([&](const char* name) { return env.contains(name) ? env.at(name).c_str() : nullptr; },
                                     error)->gpu);

  // A sequence model's case carries its tokens per sequence (the spec's, or the model's default).
  run.spec.model = Model::bert_base;
  run.spec.data = {};
  run.spec.data.sequence_length = 512;
  env.clear();
  for (const auto& [k, v] : command_environment(run, c, {1, "node0", 1234, "/dlbench"})) env[k] = v;
  const auto bert = case_from_environment(
      [&](const char* name) { return env.contains(name) ? env.at(name).c_str() : nullptr; }, error);
  ASSERT_TRUE(bert) << error;
  EXPECT_EQ(bert->sequence_length, 512);
  EXPECT_THAT(fails_with("DLBENCH_SEQUENCE_LENGTH", nullptr), HasSubstr("DLBENCH_SEQUENCE_LENGTH is not set"));
  EXPECT_THAT(fails_with("DLBENCH_SEQUENCE_LENGTH", "0"), HasSubstr("DLBENCH_SEQUENCE_LENGTH=\"0\": must be a whole number in ["));
}

CommandCase small_case() {
  CommandCase c;
  c.run = "pt";
  c.case_ = {1, 2, 4, Precision::fp32};
  c.methodology = {1, 2, 1, Statistic::median, {}};
  return c;
}

TEST(CommandResult, SucceededWithTheScriptsFactsInTheEnvironment) {
  CommandOutcome o;
  o.exit_code = 0;
  o.started = true;
  o.steps = arrivals({1.0, 1.5, 2.0}, 8);
  o.facts = {{"framework", "pytorch"}, {"frameworkVersion", "1.13.1"}, {"backend", "cpu"}, {"threads", "2"}};
  const ResultDocument doc = command_result(small_case(), o, EnvironmentInfo{}, "t0", "t1");
  ASSERT_EQ(doc.state, CaseState::Succeeded) << doc.reason << ": " << doc.message;
  EXPECT_EQ(doc.engine, Engine::command);
  EXPECT_DOUBLE_EQ(doc.throughput->summary.median, 8.0 * 2 / 1.0);
  EXPECT_EQ(doc.throughput->unit, "samples/s");
  EXPECT_EQ(doc.environment.framework, "pytorch");
  EXPECT_EQ(doc.environment.framework_version, "1.13.1");
  EXPECT_EQ(doc.environment.backend, "cpu");
  EXPECT_EQ(doc.environment.facts.at("threads"), "2");
  // It is a valid dlbench.result/v1 document, as the operator and `dlbench run` read it.
  const auto decoded = decode_result_document(to_json(doc));
  ASSERT_TRUE(decoded.ok()) << decoded.errors.front().to_string();
  EXPECT_EQ(*decoded.value, doc);
  // One repeat cannot spread: stable, against the CPU's default bound, never measured again.
  EXPECT_EQ(doc.stability, (StabilityReport{StabilityVerdict::stable, kDefaultMaxCvCpu, 0.0, 0, {}}));
}

// A command may say how it trained, with four facts; the result then carries the optimizer, which
// `dlbench run` and the operator judge against the spec as they judge dlbench-worker's.
TEST(CommandResult, TheOptimizerACommandStatesIsTheResultsAndIsChecked) {
  const auto with_facts = [](std::map<std::string, std::string> facts) {
    CommandOutcome o;
    o.exit_code = 0;
    o.started = true;
    o.steps = arrivals({1.0, 1.5, 2.0}, 8);
    o.facts = std::move(facts);
    o.facts["framework"] = "pytorch";
    return command_result(small_case(), o, EnvironmentInfo{}, "t0", "t1");
  };
  const ResultDocument doc = with_facts({{"optimizer", "adamw"}, {"learningRate", "0.0001"}, {"momentum", "0.9"},
                                         {"weightDecay", "0.01"}});
  ASSERT_EQ(doc.state, CaseState::Succeeded) << doc.reason << ": " << doc.message;
  EXPECT_EQ(doc.optimizer, (OptimizerSpec{OptimizerName::adamw, 0.0001, 0.9, 0.01}));
  EXPECT_EQ(doc.environment.facts, (std::map<std::string, std::string>{})) << "taken out of the facts";
  EXPECT_TRUE(decode_result_document(to_json(doc)).ok());
  const auto judged = result_from_document(to_json(doc).dump(), doc.case_, 1, std::nullopt,
                                           OptimizerSpec{OptimizerName::adamw, 0.001, 0.9, 0.01});
  EXPECT_EQ(judged->reason, "CaseMismatch");
  EXPECT_THAT(judged->message, HasSubstr("learningRate 0.0001 instead of 0.001"));

  EXPECT_FALSE(with_facts({}).optimizer.has_value()) << "a command that says nothing is not judged on it";
  const ResultDocument partial = with_facts({{"optimizer", "sgd"}, {"learningRate", "0.1"}});
  EXPECT_EQ(partial.state, CaseState::Failed);
  EXPECT_EQ(partial.reason, "InvalidMarker");
  EXPECT_THAT(partial.message, HasSubstr("fact momentum is missing (a command states how it trained with all four facts"));
  const ResultDocument bad_name = with_facts({{"optimizer", "adam"}, {"learningRate", "0.1"}, {"momentum", "0.9"},
                                              {"weightDecay", "0"}});
  EXPECT_THAT(bad_name.message, HasSubstr("fact optimizer: \"adam\" is not one of sgd, adamw, lamb"));
  const ResultDocument bad_rate = with_facts({{"optimizer", "sgd"}, {"learningRate", "0"}, {"momentum", "0.9"},
                                              {"weightDecay", "0"}});
  EXPECT_THAT(bad_rate.message, HasSubstr("fact learningRate: \"0\" is not a number greater than 0 and at most 100"));
  EXPECT_THAT(with_facts({{"optimizer", "sgd"}, {"learningRate", "0.1"}, {"momentum", "0.9x"}, {"weightDecay", "0"}})
                  .message,
              HasSubstr("fact momentum: \"0.9x\" is not a number at least 0 and less than 1"));
  // A fifth fact may say how the rate warmed up; unstated, it is none.
  const ResultDocument warmed = with_facts({{"optimizer", "sgd"}, {"learningRate", "0.1"}, {"momentum", "0.9"},
                                            {"weightDecay", "0"}, {"learningRateWarmupSteps", "25"}});
  ASSERT_EQ(warmed.state, CaseState::Succeeded) << warmed.message;
  EXPECT_EQ(warmed.optimizer, (OptimizerSpec{OptimizerName::sgd, 0.1, 0.9, 0.0, 25}));
  EXPECT_EQ(warmed.environment.facts, (std::map<std::string, std::string>{}));
  EXPECT_EQ(doc.optimizer->learning_rate_warmup_steps, 0);
  EXPECT_THAT(with_facts({{"optimizer", "sgd"}, {"learningRate", "0.1"}, {"momentum", "0.9"}, {"weightDecay", "0"},
                          {"learningRateWarmupSteps", "2.5"}})
                  .message,
              HasSubstr("fact learningRateWarmupSteps: \"2.5\" is not a whole number in [0, 1000000]"));
  EXPECT_THAT(with_facts({{"learningRateWarmupSteps", "25"}}).message, HasSubstr("fact optimizer is missing"))
      << "a warm-up alone does not say how the command trained";
}

// An amp case of `model` (224 pixels; 128 tokens a sequence for bert-base) whose command stated
// `facts` and exited with `exit_code`.
ResultDocument amp_case_stating(Model model, std::map<std::string, std::string> facts, int exit_code = 0) {
  CommandOutcome o;
  o.exit_code = exit_code;
  o.started = true;
  o.steps = arrivals({1.0, 1.5, 2.0}, 8);
  o.facts = std::move(facts);
  CommandCase c = small_case();
  c.model = model;
  if (is_sequence_model(model)) c.sequence_length = 128;
  c.case_.precision = Precision::amp;
  return command_result(c, o, EnvironmentInfo{}, "t0", "t1");
}

ResultDocument vgg16_amp_stating(std::map<std::string, std::string> facts, int exit_code = 0) {
  return amp_case_stating(Model::vgg16, std::move(facts), exit_code);
}

// A command may say which network it trained, by name and by parameter count, in which precision
// and on which input size: the case's passes, another fails the case (its steps timed other work), and a name
// the API does not spell or a count that is no count is a malformed marker.
TEST(CommandResult, TheNetworkPrecisionAndInputACommandStatesAreJudgedAgainstTheCase) {
  const ResultDocument same = vgg16_amp_stating({{"framework", "pytorch"}, {"model", "vgg16"}});
  ASSERT_EQ(same.state, CaseState::Succeeded) << same.reason << ": " << same.message;
  EXPECT_EQ(same.model, Model::vgg16);
  EXPECT_EQ(same.environment.facts, (std::map<std::string, std::string>{})) << "judged, not kept as a loose fact";

  const ResultDocument other = vgg16_amp_stating({{"model", "resnet50"}});
  EXPECT_EQ(other.state, CaseState::Failed);
  EXPECT_EQ(other.reason, "CaseMismatch");
  EXPECT_THAT(other.message, HasSubstr("the command says it trained resnet50 instead of vgg16 (its fact model"));
  EXPECT_FALSE(other.throughput.has_value()) << "another network's speed is not this case's";
  EXPECT_TRUE(decode_result_document(to_json(other)).ok());
  EXPECT_EQ(vgg16_amp_stating({{"model", "resnet50"}}, 1).reason, "CaseMismatch") << "the root cause, before the command's exit";

  // Its parameter count, where it states one, is held to dlbench-worker's network for the case.
  const ResultDocument counted = vgg16_amp_stating({{"parameters", "138357544"}});
  ASSERT_EQ(counted.state, CaseState::Succeeded) << counted.message;
  EXPECT_EQ(counted.environment.facts, (std::map<std::string, std::string>{}));
  const ResultDocument bigger = vgg16_amp_stating({{"parameters", "138357545"}});
  EXPECT_EQ(bigger.reason, "CaseMismatch");
  EXPECT_THAT(bigger.message, HasSubstr("the command's network has 138357545 parameters (its fact parameters), "
                                        "dlbench-worker's vgg16 has 138357544: another network than the case's"));
  EXPECT_FALSE(bigger.throughput.has_value());
  EXPECT_EQ(vgg16_amp_stating({{"parameters", "1.4e8"}}).reason, "InvalidMarker");
  EXPECT_THAT(vgg16_amp_stating({{"parameters", "0"}}).message,
              HasSubstr("fact parameters: \"0\" is not a whole number of at least 1"));

  // And its precision: a script that ignores DLBENCH_PRECISION timed other arithmetic.
  const ResultDocument amp = vgg16_amp_stating({{"precision", "amp"}});
  EXPECT_EQ(amp.state, CaseState::Succeeded);
  EXPECT_EQ(amp.environment.facts, (std::map<std::string, std::string>{}));
  const ResultDocument fp32 = vgg16_amp_stating({{"precision", "fp32"}});
  EXPECT_EQ(fp32.reason, "CaseMismatch");
  EXPECT_THAT(fp32.message, HasSubstr("the command says it trained in fp32 instead of amp (its fact precision"));
  EXPECT_FALSE(fp32.throughput.has_value());
  EXPECT_THAT(vgg16_amp_stating({{"precision", "fp16"}}).message,
              HasSubstr("fact precision: \"fp16\" is not one of fp32, tf32, amp, bf16"));

  // And the input its steps took, square or height x width as DLBENCH_IMAGE_SIZE spells it (the
  // case is small_case()'s 224 pixels).
  EXPECT_EQ(vgg16_amp_stating({{"imageSize", "224"}}).state, CaseState::Succeeded);
  EXPECT_EQ(vgg16_amp_stating({{"imageSize", "224x224"}}).state, CaseState::Succeeded);
  const ResultDocument smaller = vgg16_amp_stating({{"imageSize", "112"}});
  EXPECT_EQ(smaller.reason, "CaseMismatch");
  EXPECT_THAT(smaller.message, HasSubstr("the command says its steps took 112x112 inputs instead of 224x224 (its fact "
                                         "imageSize"));
  EXPECT_EQ(vgg16_amp_stating({{"imageSize", "224x112"}}).reason, "CaseMismatch");
  for (const char* bad : {"224px", "x224", "224x", "0", "224x224x3"}) {
    EXPECT_EQ(vgg16_amp_stating({{"imageSize", bad}}).reason, "InvalidMarker") << bad;
  }

  // A sequence model's input is its tokens per sequence: the case's passes and is the result's
  // shape; another length, or images, is another case's; and an image model's steps took no sequences.
  const ResultDocument bert = amp_case_stating(Model::bert_base, {{"sequenceLength", "128"}});
  ASSERT_EQ(bert.state, CaseState::Succeeded) << bert.message;
  EXPECT_EQ(bert.sequence_length, 128);
  EXPECT_EQ(to_json(bert).at("sequenceLength"), 128);
  EXPECT_FALSE(to_json(bert).contains("imageSize")) << "a sequence model's result names no image size";
  EXPECT_EQ(vgg16_amp_stating({}).sequence_length, 0);
  const ResultDocument longer = amp_case_stating(Model::bert_base, {{"sequenceLength", "512"}});
  EXPECT_EQ(longer.reason, "CaseMismatch");
  EXPECT_THAT(longer.message, HasSubstr("the command says its steps took sequences of 512 tokens instead of 128 (its "
                                        "fact sequenceLength; the case's is in DLBENCH_SEQUENCE_LENGTH)"));
  EXPECT_FALSE(longer.throughput.has_value());
  EXPECT_THAT(amp_case_stating(Model::bert_base, {{"imageSize", "224"}}).message,
              HasSubstr("the command says its steps took 224x224 images (its fact imageSize); bert-base trains on "
                        "sequences of 128 tokens"));
  const ResultDocument sequences = vgg16_amp_stating({{"sequenceLength", "128"}});
  EXPECT_EQ(sequences.reason, "CaseMismatch");
  EXPECT_THAT(sequences.message, HasSubstr("the command says its steps took sequences of 128 tokens (its fact "
                                           "sequenceLength); vgg16 trains on 224x224 images"));
  for (const char* bad : {"128 tokens", "0", "-1", "1e3"}) {
    const ResultDocument malformed = amp_case_stating(Model::bert_base, {{"sequenceLength", bad}});
    EXPECT_EQ(malformed.reason, "InvalidMarker") << bad;
    EXPECT_THAT(malformed.message, HasSubstr("fact sequenceLength: \"")) << bad;
  }

  const ResultDocument unknown = vgg16_amp_stating({{"model", "resnet-50"}});
  EXPECT_EQ(unknown.reason, "InvalidMarker");
  EXPECT_THAT(unknown.message, HasSubstr("fact model: \"resnet-50\" is not one of resnet50, resnet152, vgg16, alexnet, "
                                         "inception_v3, deeplabv3plus, bert-base"));
}

// The loss a command reports after the last step of each repeat is the result's lossAfterRepeats;
// one that is not finite fails the case as dlbench-worker's does (LossNotFinite, repeats kept).
TEST(CommandResult, TheLossAfterEachRepeatIsKeptAndADivergedOneFailsTheCase) {
  const auto with_losses = [](std::vector<std::pair<long, double>> losses) {
    CommandOutcome o;
    o.exit_code = 0;
    o.started = true;
    o.steps = arrivals({1.0, 1.5, 2.0, 2.5, 3.0, 3.5}, 8);  // 2 repeats of 1 + 2 steps
    o.losses = std::move(losses);
    CommandCase c = small_case();
    c.methodology.repeats = 2;
    return command_result(c, o, EnvironmentInfo{}, "t0", "t1");
  };
  // Every step's loss (the last one of each repeat counts), or each repeat's last: the same.
  const ResultDocument every = with_losses({{1, 6.9}, {2, 6.5}, {3, 6.1}, {4, 5.8}, {5, 5.2}, {6, 4.9}});
  ASSERT_EQ(every.state, CaseState::Succeeded) << every.reason << ": " << every.message;
  EXPECT_EQ(every.loss_after_repeats, (std::vector<double>{6.1, 4.9}));
  EXPECT_TRUE(decode_result_document(to_json(every)).ok());
  EXPECT_EQ(with_losses({{0, 7.0}, {3, 6.1}, {6, 4.9}}).loss_after_repeats, (std::vector<double>{6.1, 4.9}));
  EXPECT_TRUE(with_losses({}).loss_after_repeats.empty()) << "a command that reports none";

  const ResultDocument diverged = with_losses({{3, 6.1}, {6, std::numeric_limits<double>::quiet_NaN()}});
  EXPECT_EQ(diverged.state, CaseState::Failed);
  EXPECT_EQ(diverged.reason, "LossNotFinite");
  EXPECT_EQ(diverged.message, "the loss after repeat 2 was NaN (after repeat 1: 6.1): training diverged, so the steps "
                              "timed did not train the model (the 2 repeats run are kept in the result, not published). "
                              "Lower the learning rate (spec.optimizer.learningRate) or warm it up "
                              "(spec.optimizer.learningRateWarmupSteps)");
  ASSERT_TRUE(diverged.throughput.has_value());
  EXPECT_EQ(diverged.throughput->repeats.size(), 2u);
  EXPECT_FALSE(diverged.stability.has_value());
  const auto decoded = decode_result_document(to_json(diverged));
  ASSERT_TRUE(decoded.ok()) << decoded.errors.front().to_string();

  const ResultDocument partial = with_losses({{3, 6.1}});
  EXPECT_EQ(partial.reason, "InvalidMarker");
  EXPECT_THAT(partial.message, HasSubstr("loss: reported in some repeats but not in repeat 2 of 2"));
}

// A command's repeats that spread are judged, not measured again (its steps are fixed): Unstable.
TEST(CommandResult, RepeatsThatSpreadAreUnstableAndSaySo) {
  CommandOutcome o;
  o.exit_code = 0;
  o.started = true;
  o.steps = arrivals({1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0}, 8);  // 2 repeats of 1 + 2 steps
  CommandCase c = small_case();
  c.methodology.repeats = 2;
  c.gpu = true;  // judged against a GPU's 2%
  const ResultDocument doc = command_result(c, o, EnvironmentInfo{}, "t0", "t1");
  ASSERT_EQ(doc.state, CaseState::Succeeded) << doc.reason << ": " << doc.message;
  ASSERT_TRUE(doc.stability.has_value());
  EXPECT_EQ(doc.stability->verdict, StabilityVerdict::unstable);
  EXPECT_DOUBLE_EQ(doc.stability->max_cv, kDefaultMaxCvGpu);
  EXPECT_EQ(doc.reason, "Unstable");
  EXPECT_THAT(doc.message, HasSubstr("above the bound 2.0% (not measured again)"));
  EXPECT_TRUE(decode_result_document(to_json(doc)).ok());
}

// Another framework's BERT counts what dlbench-worker's does, so that the two sit in one report.
TEST(CommandResult, ASequenceModelCountsSequences) {
  CommandOutcome o;
  o.exit_code = 0;
  o.started = true;
  o.steps = arrivals({1.0, 1.5, 2.0}, 8);
  CommandCase c = small_case();
  c.model = Model::bert_base;
  const ResultDocument doc = command_result(c, o, EnvironmentInfo{}, "t0", "t1");
  ASSERT_EQ(doc.state, CaseState::Succeeded) << doc.reason << ": " << doc.message;
  EXPECT_EQ(doc.throughput->unit, "sequences/s");
}

TEST(CommandResult, FailuresSayWhyWithTheLastLines) {
  const auto result = [](auto&& change) {
    CommandOutcome o;
    o.exit_code = 0;
    o.started = true;
    o.tail = {"Traceback (most recent call last):", "RuntimeError: CUDA error"};
    change(o);
    return command_result(small_case(), o, EnvironmentInfo{}, "", "");
  };
  const ResultDocument exited = result([](CommandOutcome& o) { o.exit_code = 1; });
  EXPECT_EQ(exited.reason, "CommandFailed");
  EXPECT_THAT(exited.message, HasSubstr("exited with code 1 after 0 of 3 step markers"));
  EXPECT_THAT(exited.message, HasSubstr("RuntimeError: CUDA error"));
  const ResultDocument killed = result([](CommandOutcome& o) {
    o.exit_code = 137;
    o.signal = 9;
  });
  EXPECT_THAT(killed.message, HasSubstr("killed by signal 9"));
  EXPECT_EQ(result([](CommandOutcome& o) {
              o.exit_code = 137;
              o.out_of_memory = true;
            }).reason,
            "OutOfMemory");
  EXPECT_EQ(result([](CommandOutcome& o) { o.timed_out = true; }).reason, "Timeout");
  EXPECT_EQ(result([](CommandOutcome&) {}).reason, "NoMeasurements");
  EXPECT_EQ(result([](CommandOutcome& o) { o.steps = arrivals({1.0}, 8); }).reason, "IncompleteMeasurement");
  EXPECT_EQ(result([](CommandOutcome& o) { o.unsupported = "amp needs CUDA"; }).reason, "Unsupported");
  EXPECT_EQ(result([](CommandOutcome& o) { o.invalid_marker = "step: …"; }).reason, "InvalidMarker");
  for (const auto& doc : {exited, killed}) {
    EXPECT_EQ(doc.state, CaseState::Failed);
    EXPECT_TRUE(decode_result_document(to_json(doc)).ok());
  }
}

// A command stopped, out of time, killed or failing (with several nodes, often for a peer lost)
// after completing some repeats keeps them in its Failed result, as dlbench-worker's Stopped
// result does; a failure that puts its figures in doubt keeps none.
TEST(CommandResult, ACommandThatEndedEarlyKeepsTheRepeatsItCompleted) {
  CommandCase c = small_case();
  c.methodology.repeats = 3;  // 9 steps; 7 arrive: repeats 1 and 2 complete
  const auto result = [&](auto&& change) {
    CommandOutcome o;
    o.exit_code = 0;
    o.started = true;
    o.steps = arrivals({1.0, 1.5, 2.0, 2.1, 2.35, 2.6, 3.0}, 8);
    o.tail = {"RuntimeError: Connection reset by peer"};
    o.losses = {{3, 2.25}, {6, 2.0}, {7, 1.75}};
    change(o);
    return command_result(c, o, EnvironmentInfo{}, "", "");
  };
  const std::vector<std::pair<std::string, ResultDocument>> ended_early{
      {"Interrupted", result([](CommandOutcome& o) { o.interrupted = true; o.exit_code = 143; })},
      {"Timeout", result([](CommandOutcome& o) { o.timed_out = true; o.exit_code = 143; })},
      {"OutOfMemory", result([](CommandOutcome& o) { o.out_of_memory = true; o.exit_code = 137; })},
      {"CommandFailed", result([](CommandOutcome& o) { o.exit_code = 1; })},
      {"IncompleteMeasurement", result([](CommandOutcome&) {})},
  };
  for (const auto& [reason, doc] : ended_early) {
    EXPECT_EQ(doc.state, CaseState::Failed) << reason;
    EXPECT_EQ(doc.reason, reason);
    EXPECT_THAT(doc.message, HasSubstr("; 2 of 3 repeats complete, kept here unjudged; last output:\n"
                                       "RuntimeError: Connection reset by peer")) << reason;
    ASSERT_TRUE(doc.throughput) << reason;
    EXPECT_EQ(doc.throughput->repeats.size(), 2u);
    EXPECT_DOUBLE_EQ(doc.throughput->repeats[0], 8.0 * 2 / 1.0);
    EXPECT_DOUBLE_EQ(doc.throughput->repeats[1], 8.0 * 2 / 0.5);
    EXPECT_THAT(doc.loss_after_repeats, ElementsAre(2.25, 2.0)) << reason;
    EXPECT_FALSE(doc.stability) << "unjudged";
    const auto decoded = decode_result_document(to_json(doc));
    ASSERT_TRUE(decoded.ok()) << decoded.errors.front().to_string();
    EXPECT_EQ(*decoded.value, doc);
  }
  // Before the first repeat ended: nothing to keep, and nothing said about it.
  const ResultDocument early = result([](CommandOutcome& o) {
    o.interrupted = true;
    o.steps.resize(2);
  });
  EXPECT_FALSE(early.throughput);
  EXPECT_THAT(early.message, Not(HasSubstr("kept")));
  // Figures in doubt keep nothing: another network, or markers of another batch.
  EXPECT_FALSE(result([](CommandOutcome& o) {
                 o.exit_code = 1;
                 o.facts = {{"model", "vgg16"}};
               }).throughput);
  EXPECT_FALSE(result([](CommandOutcome& o) {
                 o.exit_code = 1;
                 o.steps[4].samples = 4;
               }).throughput);
}

}  // namespace
}  // namespace dlbench::command
