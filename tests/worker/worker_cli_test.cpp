// The real dlbench-worker binary: its result documents pass core's validation.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>

#include "dlbench/core/result_document.hpp"

namespace dlbench {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Outcome {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::filesystem::path scratch() {
  auto dir = std::filesystem::temp_directory_path() / ("dlbench-worker-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

// `environment`: extra VAR=value settings for the worker.
Outcome worker(const std::string& args, const std::string& environment = "") {
  const auto dir = scratch();
  const std::string command = std::string("cd ") + dir.string() + " && OMP_NUM_THREADS=2 " + environment + " " +
                              DLBENCH_WORKER_BINARY + " " + args + " > out 2> err";
  const int status = std::system(command.c_str());
  Outcome o;
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  o.out = slurp(dir / "out");
  o.err = slurp(dir / "err");
  return o;
}

ResultDocument decoded(const std::string& json_text) {
  const auto d = decode_result_document(nlohmann::json::parse(json_text));
  EXPECT_TRUE(d.ok()) << (d.errors.empty() ? "" : d.errors.front().to_string());
  return d.value.value_or(ResultDocument{});
}

// A case the worker could not run on its backend: a Failed result with reason Unsupported, exit 1.
void expect_unsupported(const Outcome& o, const std::string& precision, const std::string& backend,
                        const std::string& allowed) {
  EXPECT_EQ(o.exit_code, 1) << precision << ": " << o.err;
  const ResultDocument doc = decoded(o.out);
  EXPECT_EQ(doc.state, CaseState::Failed) << precision;
  EXPECT_EQ(doc.reason, "Unsupported") << precision;
  EXPECT_THAT(doc.message, HasSubstr("--precision " + precision + " on --backend " + backend));
  EXPECT_THAT(doc.message, HasSubstr("Allowed on the " + backend + " backend here: " + allowed));
  EXPECT_EQ(to_string(doc.case_.precision), precision);
}

TEST(WorkerCli, ResNet50WritesAValidResultWithThreeRepeats) {
  const Outcome o = worker(
      "--model resnet50 --backend cpu --image-size 64 --batch-size 4 --warmup-steps 2 --measure-steps 3 "
      "--repeats 3 --output r.json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_THAT(o.out, HasSubstr("median"));
  const ResultDocument doc = decoded(slurp(scratch() / "r.json"));
  EXPECT_EQ(doc.state, CaseState::Succeeded);
  EXPECT_EQ(doc.model, Model::resnet50);
  ASSERT_TRUE(doc.throughput.has_value());
  EXPECT_EQ(doc.throughput->repeats.size(), 3u);
  EXPECT_GT(doc.throughput->summary.median, 0.0);
  EXPECT_EQ(doc.methodology.measure_steps, 3);
  EXPECT_EQ(doc.environment.backend, "cpu");
  EXPECT_FALSE(doc.environment.onednn_version.empty());
  EXPECT_NEAR(doc.flops_per_sample.forward, 2 * 4.09e9 * (64.0 * 64.0) / (224.0 * 224.0), 0.05e9);
  ASSERT_TRUE(doc.memory.has_value());
  // Values, gradients and momentum in fp32, each of ResNet-50's 161 tensors starting on a 256-byte
  // boundary: at most 63 elements of padding each.
  EXPECT_GE(doc.memory->parameters, 3.0 * 25'557'032 * 4);
  EXPECT_LE(doc.memory->parameters, 3.0 * (25'557'032 + 161 * 63) * 4);
  EXPECT_GT(doc.memory->activations, 0.0);
  EXPECT_LT(doc.memory->activations, 0.4 * doc.memory->unshared_activations);
  ASSERT_TRUE(doc.memory->peak_resident.has_value());
  EXPECT_GT(*doc.memory->peak_resident, doc.memory->activations + doc.memory->parameters);
  // The loss after each repeat run, as the table prints it (repeats measured again included).
  ASSERT_TRUE(doc.stability.has_value());
  ASSERT_EQ(doc.loss_after_repeats.size(), 3u + static_cast<std::size_t>(doc.stability->extra_repeats));
  for (const double loss : doc.loss_after_repeats) EXPECT_TRUE(std::isfinite(loss) && loss > 0) << loss;
}

// Without --learning-rate a model trains at its own recipe's rate: AlexNet's 0.01 at a global
// batch of 256, linearly less at 8 (0.0003125), where the rate once shared by every model (0.1)
// took its loss to 1e33 within ten steps.
TEST(WorkerCli, AModelTrainsAtItsOwnDefaultLearningRate) {
  const Outcome o = worker(
      "--model alexnet --image-size 64 --batch-size 8 --warmup-steps 2 --measure-steps 8 --repeats 3 --max-cv 1 "
      "--output alexnet.json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const ResultDocument doc = decoded(slurp(scratch() / "alexnet.json"));
  ASSERT_TRUE(doc.optimizer.has_value());  // the result says which rate ran
  EXPECT_EQ(*doc.optimizer, (OptimizerSpec{OptimizerName::sgd, 0.01 * 8 / 256, 0.9, 1e-4}));
  EXPECT_THAT(o.out, HasSubstr("; sgd at learning rate 0.0003125\n"));
  ASSERT_EQ(doc.loss_after_repeats.size(), 3u);
  for (const double loss : doc.loss_after_repeats) EXPECT_LT(loss, std::log(1000.0)) << "above an untrained model's";
  EXPECT_LT(doc.loss_after_repeats.back(), doc.loss_after_repeats.front());
}

// --learning-rate-warmup-steps: the result and the table say it, and the first updates train at
// less than the rate (the same seed and threads train bit for bit alike, so any change is its).
TEST(WorkerCli, TheLearningRateWarmsUpOverTheUpdatesAsked) {
  const std::string common =
      "--model alexnet --image-size 64 --batch-size 4 --warmup-steps 1 --measure-steps 2 --repeats 1 --max-cv 1 "
      "--threads 2 --learning-rate 0.001 ";
  const Outcome plain = worker(common + "--output plain.json");
  const Outcome warmed = worker(common + "--learning-rate-warmup-steps 10 --output warmed.json");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(warmed.exit_code, 0) << warmed.err;
  const ResultDocument p = decoded(slurp(scratch() / "plain.json"));
  const ResultDocument w = decoded(slurp(scratch() / "warmed.json"));
  ASSERT_TRUE(p.optimizer && w.optimizer);
  EXPECT_EQ(p.optimizer->learning_rate_warmup_steps, 0);
  EXPECT_EQ(*w.optimizer, (OptimizerSpec{OptimizerName::sgd, 0.001, 0.9, 1e-4, 10}));
  EXPECT_THAT(warmed.out, HasSubstr("; sgd at learning rate 0.001, reached linearly over the first 10 updates\n"));
  EXPECT_THAT(plain.out, HasSubstr("; sgd at learning rate 0.001\n"));
  ASSERT_EQ(p.loss_after_repeats.size(), 1u);
  ASSERT_EQ(w.loss_after_repeats.size(), 1u);
  EXPECT_NE(p.loss_after_repeats[0], w.loss_after_repeats[0]);
  const Outcome bad = worker("--learning-rate-warmup-steps -1");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--learning-rate-warmup-steps"));
}

// AlexNet at a learning rate of 100 reaches a NaN loss in its first repeat: the case stops there
// and fails with LossNotFinite, keeping the repeat it timed and saying what to change.
TEST(WorkerCli, ADivergedTrainingStopsAndFailsWithItsRepeatsKept) {
  const Outcome o = worker(
      "--model alexnet --image-size 64 --batch-size 2 --warmup-steps 1 --measure-steps 2 --repeats 4 "
      "--learning-rate 100 --output diverged.json");
  EXPECT_EQ(o.exit_code, 1) << o.err;
  EXPECT_THAT(o.err, HasSubstr("loss not finite: stopping"));
  EXPECT_THAT(o.out, HasSubstr("FAILED: LossNotFinite"));
  const ResultDocument doc = decoded(slurp(scratch() / "diverged.json"));
  EXPECT_EQ(doc.state, CaseState::Failed);
  EXPECT_EQ(doc.reason, "LossNotFinite");
  ASSERT_FALSE(doc.loss_after_repeats.empty());
  EXPECT_LT(doc.loss_after_repeats.size(), 4u);  // stopped before the last repeat
  EXPECT_FALSE(std::isfinite(doc.loss_after_repeats.back()));
  ASSERT_TRUE(doc.throughput.has_value());  // nothing measured is lost
  EXPECT_EQ(doc.throughput->repeats.size(), doc.loss_after_repeats.size());
  EXPECT_GT(doc.throughput->summary.median, 0.0);
  EXPECT_FALSE(doc.stability.has_value());  // not judged: not a result
  EXPECT_FALSE(doc.mfu.has_value());
  EXPECT_THAT(doc.message, HasSubstr("training diverged"));
  EXPECT_THAT(doc.message, HasSubstr("Lower the learning rate (100 here: spec.optimizer.learningRate"));
}

// --memory-plan none gives every buffer its own memory: the same losses, more memory; poison too.
TEST(WorkerCli, MemoryPlanNoneTrainsTheSameWithMoreMemory) {
  const std::string args = "--model resnet50 --image-size 32 --batch-size 2 --warmup-steps 1 --measure-steps 2 "
                           "--repeats 1 --output ";
  const Outcome planned = worker(args + "planned.json");
  const Outcome unshared = worker(args + "unshared.json --memory-plan none");
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  ASSERT_EQ(unshared.exit_code, 0) << unshared.err;
  const ResultDocument a = decoded(slurp(scratch() / "planned.json"));
  const ResultDocument b = decoded(slurp(scratch() / "unshared.json"));
  ASSERT_TRUE(a.memory && b.memory);
  EXPECT_EQ(a.memory->unshared_activations, b.memory->unshared_activations);
  EXPECT_EQ(b.memory->activations, b.memory->unshared_activations);
  EXPECT_LT(a.memory->activations, b.memory->activations);
  // The loss after the repeat, from the table, is the same to the printed digit.
  const auto loss = [](const std::string& table) {
    const auto row = table.find("\n       1 ");
    return row == std::string::npos ? std::string() : table.substr(row, table.find('\n', row + 1) - row);
  };
  EXPECT_FALSE(loss(planned.out).empty()) << planned.out;
  EXPECT_EQ(loss(planned.out).substr(30), loss(unshared.out).substr(30)) << planned.out << unshared.out;
  // poison: unshared memory, NaN in each buffer past its declared lifetime; the same loss.
  const Outcome poisoned = worker(args + "poisoned.json --memory-plan poison");
  ASSERT_EQ(poisoned.exit_code, 0) << poisoned.err;
  const ResultDocument c = decoded(slurp(scratch() / "poisoned.json"));
  ASSERT_TRUE(c.memory);
  EXPECT_EQ(c.memory->activations, c.memory->unshared_activations);
  EXPECT_EQ(loss(poisoned.out).substr(30), loss(unshared.out).substr(30)) << poisoned.out << unshared.out;
  const Outcome bad = worker("--memory-plan greedy");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--memory-plan: \"greedy\" is not one of lifetime, none, poison"));
}

TEST(WorkerCli, ATakenMetricsPortCostsTheMetricsNotTheMeasurement) {
  // Hold a port, then ask the worker to serve its metrics there.
  const int holder = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(holder, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t length = sizeof address;
  ASSERT_EQ(::bind(holder, reinterpret_cast<sockaddr*>(&address), length), 0);
  ASSERT_EQ(::listen(holder, 1), 0);
  ASSERT_EQ(::getsockname(holder, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const int port = ntohs(address.sin_port);
  const Outcome o = worker("--model alexnet --image-size 64 --batch-size 2 --warmup-steps 0 --measure-steps 1 "
                           "--repeats 1 --metrics-port " + std::to_string(port) + " --output r.json");
  ::close(holder);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_THAT(o.err, HasSubstr("warning: no live metrics"));
  EXPECT_EQ(decoded(slurp(scratch() / "r.json")).state, CaseState::Succeeded);
}

TEST(WorkerCli, NoGpuForTheCudaBackendIsAFailedResultThatSaysWhy) {
  const Outcome o = worker("--backend cuda --model resnet50 --image-size 64 --batch-size 2 --warmup-steps 0 "
                           "--measure-steps 1 --repeats 1 --output r.json");
  if (o.exit_code == 2) GTEST_SKIP() << "built without CUDA: " << o.err;
  if (o.exit_code == 0) GTEST_SKIP() << "this machine has a GPU (the gpu tests cover it)";
  ASSERT_EQ(o.exit_code, 1) << o.err;
  const ResultDocument doc = decoded(slurp(scratch() / "r.json"));
  EXPECT_EQ(doc.state, CaseState::Failed);
  EXPECT_EQ(doc.reason, "BackendUnavailable");
  EXPECT_THAT(doc.message, HasSubstr("--backend cuda: "));
  EXPECT_EQ(doc.environment.backend, "cuda");
}

TEST(WorkerCli, EveryModelRuns) {
  for (const std::string model : {"resnet152", "vgg16", "alexnet"}) {
    const std::string size = model == "alexnet" ? "64" : "32";
    const Outcome o = worker("--model " + model + " --image-size " + size +
                             " --batch-size 2 --warmup-steps 1 --measure-steps 1 --repeats 1");
    ASSERT_EQ(o.exit_code, 0) << model << ": " << o.err;
    const ResultDocument doc = decoded(o.out);  // JSON on stdout, table on stderr
    EXPECT_EQ(to_string(doc.model), model);
    EXPECT_EQ(doc.throughput->repeats.size(), 1u);
    EXPECT_THAT(o.err, HasSubstr("samples/s"));
  }
}

// A height × width crop: the result records both sides, the table shows HxW; the sides are checked
// one by one, and a per-pixel model refuses imagefolder data.
TEST(WorkerCli, DeepLabV3PlusRunsOnAHeightByWidthCrop) {
  const Outcome o = worker("--model deeplabv3plus --image-size 64x96 --batch-size 2 --warmup-steps 1 --measure-steps 1 "
                           "--repeats 1");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const ResultDocument doc = decoded(o.out);
  EXPECT_EQ(doc.model, Model::deeplabv3plus);
  EXPECT_EQ(doc.image_height, 64);
  EXPECT_EQ(doc.image_width, 96);
  EXPECT_THAT(o.err, HasSubstr("image 64x96, 40351667 parameters"));
  EXPECT_THAT(o.out, HasSubstr("\"imageWidth\": 96"));
  const Outcome wide = worker("--model deeplabv3plus --image-size 64x4096");
  EXPECT_EQ(wide.exit_code, 2);
  EXPECT_THAT(wide.err, HasSubstr("--image-size: 4096 is out of range; allowed: 32 to 2048"));
  const Outcome folder = worker("--model deeplabv3plus --data imagefolder --data-path /nonexistent");
  EXPECT_EQ(folder.exit_code, 2);
  EXPECT_THAT(folder.err, HasSubstr("--data imagefolder: deeplabv3plus trains on a label per pixel"));
  EXPECT_THAT(folder.err, HasSubstr("allowed: synthetic, cityscapes"));
  // Cityscapes is its real data, and no classifier's; a missing tree is a Failed result naming it.
  const Outcome classifier = worker("--model resnet50 --data cityscapes --data-path /nonexistent");
  EXPECT_EQ(classifier.exit_code, 2);
  EXPECT_THAT(classifier.err, HasSubstr("--data cityscapes: resnet50 trains on a label per image"));
  EXPECT_EQ(worker("--model deeplabv3plus --data cityscapes").exit_code, 2);
  const Outcome missing = worker("--model deeplabv3plus --image-size 64x96 --batch-size 1 --warmup-steps 0 "
                                 "--measure-steps 1 --repeats 1 --data cityscapes --data-path /nonexistent-cityscapes");
  EXPECT_EQ(missing.exit_code, 1) << missing.err;
  const ResultDocument failed = decoded(missing.out);
  EXPECT_EQ(failed.state, CaseState::Failed);
  EXPECT_EQ(failed.reason, "DataUnavailable");
  EXPECT_THAT(failed.message, HasSubstr("/nonexistent-cityscapes does not exist"));
}

// bert-base's real data is BERT's pretraining shards, and no image model's; shards of another
// sequence length, or none at the path, are a Failed DataUnavailable result naming them.
TEST(WorkerCli, BertPretrainingShardsAreBertBasesData) {
  const Outcome image = worker("--model resnet50 --data bertpretraining --data-path /nonexistent");
  EXPECT_EQ(image.exit_code, 2);
  EXPECT_THAT(image.err, HasSubstr("--data bertpretraining: resnet50 trains on images"));
  EXPECT_THAT(image.err, HasSubstr("allowed: synthetic, imagefolder"));
  const Outcome folder = worker("--model bert-base --data imagefolder --data-path /nonexistent");
  EXPECT_EQ(folder.exit_code, 2);
  EXPECT_THAT(folder.err, HasSubstr("allowed: synthetic, bertpretraining"));
  EXPECT_EQ(worker("--model bert-base --data bertpretraining").exit_code, 2);
  const Outcome missing = worker("--model bert-base --sequence-length 16 --batch-size 1 --warmup-steps 0 "
                                 "--measure-steps 1 --repeats 1 --data bertpretraining --data-path /nonexistent-shards");
  EXPECT_EQ(missing.exit_code, 1) << missing.err;
  const ResultDocument failed = decoded(missing.out);
  EXPECT_EQ(failed.state, CaseState::Failed);
  EXPECT_EQ(failed.reason, "DataUnavailable");
  EXPECT_THAT(failed.message, HasSubstr("/nonexistent-shards does not exist"));
  // Shards of 32 tokens for a case of 16.
  const std::string dir = (scratch() / "shards").string();
  const std::string generate = std::string(DLBENCH_INPUT_BINARY) + " generate " + dir +
                               " --data bertpretraining --shards 1 --per-shard 8 --sequence-length 32 > /dev/null";
  ASSERT_EQ(std::system(generate.c_str()), 0);
  const Outcome longer = worker("--model bert-base --sequence-length 16 --batch-size 1 --warmup-steps 0 "
                                "--measure-steps 1 --repeats 1 --data bertpretraining --data-path " + dir);
  EXPECT_EQ(longer.exit_code, 1) << longer.err;
  EXPECT_THAT(decoded(longer.out).message,
              HasSubstr("holds sequences of 32 tokens; the case's sequenceLength is 16 (set it to 32"));
}

// Where an imagefolder case's images are resized is in its result (backendOptions.inputResize): on
// the cpu backend by the decoding threads (a GPU resizes them unless told host,
// InputResizeRoute.*); DLBENCH_INPUT_RESIZE=device is refused there naming the variable, and a value
// it does not know is refused with the ones it does.
TEST(WorkerCli, AnImageFolderCaseSaysWhereItsImagesWereResized) {
  const std::string dir = (scratch() / "resized-images").string();
  const std::string generate =
      std::string(DLBENCH_INPUT_BINARY) + " generate " + dir + " --classes 2 --per-class 4 > /dev/null";
  ASSERT_EQ(std::system(generate.c_str()), 0);
  const std::string args = "--model resnet50 --image-size 32 --batch-size 2 --warmup-steps 0 --measure-steps 1 "
                           "--repeats 1 --data imagefolder --decode-threads 1 --data-path " + dir;
  const Outcome host = worker(args);
  ASSERT_EQ(host.exit_code, 0) << host.err;
  EXPECT_EQ(decoded(host.out).environment.backend_options.at("inputResize"), "host");
  const Outcome device = worker(args, "DLBENCH_INPUT_RESIZE=device");
  EXPECT_EQ(device.exit_code, 1) << device.err;
  const ResultDocument refused = decoded(device.out);
  EXPECT_EQ(refused.state, CaseState::Failed);
  EXPECT_THAT(refused.message, HasSubstr("DLBENCH_INPUT_RESIZE: \"device\" resizes the images on a GPU; on the cpu "
                                         "backend the decoding threads resize them (unset it, or host)"));
  const Outcome unknown = worker(args, "DLBENCH_INPUT_RESIZE=gpu");
  EXPECT_EQ(unknown.exit_code, 1) << unknown.err;
  EXPECT_THAT(decoded(unknown.out).message, HasSubstr("DLBENCH_INPUT_RESIZE: \"gpu\" is not one of host, device"));
  // Synthetic data has nothing to resize and says nothing of it.
  const Outcome synthetic = worker("--model resnet50 --image-size 32 --batch-size 1 --warmup-steps 0 --measure-steps 1 "
                                   "--repeats 1");
  ASSERT_EQ(synthetic.exit_code, 0) << synthetic.err;
  EXPECT_EQ(decoded(synthetic.out).environment.backend_options.count("inputResize"), 0u);
}

// bert-base: sequences instead of images (its length in the result, sequences/s as the unit),
// AdamW; image flags are refused for it and the sequence length for image models.
TEST(WorkerCli, BertBaseTrainsSequencesAndCountsThem) {
  const Outcome o = worker("--model bert-base --sequence-length 16 --batch-size 2 --optimizer adamw "
                           "--learning-rate 0.0001 --weight-decay 0.01 --warmup-steps 1 --measure-steps 1 --repeats 2");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const ResultDocument doc = decoded(o.out);
  EXPECT_EQ(doc.model, Model::bert_base);
  EXPECT_EQ(doc.sequence_length, 16);
  ASSERT_TRUE(doc.throughput);
  EXPECT_EQ(doc.throughput->unit, "sequences/s");
  EXPECT_EQ(doc.throughput->repeats.size(), 2u);
  EXPECT_THAT(o.out, Not(HasSubstr("imageSize")));
  EXPECT_THAT(o.err, HasSubstr("sequence length 16, 110106428 parameters"));
  // The result says which attention ran: composed by default, fused on request (LAMB's run);
  // how linear layers took their weights (linear_weights.hpp) and convolutions computed their
  // input gradients (conv_backward_data.hpp); whether fp16 is emulated (half_emulation.hpp);
  // whether bottlenecks' convolutions fuse their batch norms (conv_batch_norm_route.hpp); and
  // which ISA oneDNN's kernels ran, this CPU's best (avx2 on some machines, avx512_core_bf16 on
  // others) or less where DNNL_MAX_CPU_ISA says.
  EXPECT_EQ(doc.environment.backend_options.size(), 6u);
  EXPECT_EQ(doc.environment.backend_options.at("convBatchNorm"), "separate");
  EXPECT_EQ(doc.environment.backend_options.at("fp16"), "refused");
  EXPECT_EQ(doc.environment.backend_options.at("attention"), "composed");
  EXPECT_EQ(doc.environment.backend_options.at("linearWeights"), "auto");
  EXPECT_EQ(doc.environment.backend_options.at("convBackwardData"), "auto");
  EXPECT_THAT(doc.environment.backend_options.at("isa"), ::testing::MatchesRegex("(sse41|avx|avx2|avx512).*"));
  const Outcome limited = worker("--model resnet50 --image-size 32 --batch-size 1 --warmup-steps 0 --measure-steps 1 "
                                 "--repeats 1",
                                 "DNNL_MAX_CPU_ISA=SSE41 DLBENCH_CPU_LINEAR_WEIGHTS=blocked "
                                 "DLBENCH_CPU_CONV_BACKWARD_DATA=flipped DLBENCH_CPU_CONV_BATCH_NORM=fused");
  ASSERT_EQ(limited.exit_code, 0) << limited.err;
  EXPECT_EQ(decoded(limited.out).environment.backend_options.at("convBatchNorm"), "fused");
  // And what the route did: ResNet-50's 16 bottlenecks, all fused on the CPU, data gradients too.
  EXPECT_EQ(decoded(limited.out).environment.backend_options.at("convBatchNormBlocks"), "16 of 16");
  EXPECT_EQ(decoded(limited.out).environment.backend_options.at("convBatchNormGradientBlocks"), "16 of 16");
  EXPECT_EQ(decoded(limited.out).environment.backend_options.at("isa"), "sse41");
  EXPECT_EQ(decoded(limited.out).environment.backend_options.at("linearWeights"), "blocked");
  EXPECT_EQ(decoded(limited.out).environment.backend_options.at("convBackwardData"), "flipped");
  const Outcome lamb = worker("--model bert-base --sequence-length 8 --batch-size 1 --optimizer lamb "
                              "--learning-rate 0.001 --warmup-steps 0 --measure-steps 2 --repeats 1",
                              "DLBENCH_CPU_ATTENTION=fused");
  ASSERT_EQ(lamb.exit_code, 0) << lamb.err;
  EXPECT_EQ(decoded(lamb.out).state, CaseState::Succeeded);
  EXPECT_EQ(decoded(lamb.out).environment.backend_options.at("attention"), "fused");
  // A switch's value it does not know fails the case, naming the variable and what it allows.
  const Outcome unknown = worker("--model bert-base --sequence-length 8 --batch-size 1 --measure-steps 1 --repeats 1",
                                 "DLBENCH_CPU_ATTENTION=flash");
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_EQ(decoded(unknown.out).state, CaseState::Failed);
  EXPECT_THAT(unknown.err, HasSubstr("DLBENCH_CPU_ATTENTION: \"flash\" is not one of composed, fused"));
  const Outcome unknown_weights = worker("--model resnet50 --image-size 32 --batch-size 1 --measure-steps 1 "
                                         "--repeats 1",
                                         "DLBENCH_CPU_LINEAR_WEIGHTS=fast");
  EXPECT_EQ(unknown_weights.exit_code, 1);
  EXPECT_THAT(unknown_weights.err,
              HasSubstr("DLBENCH_CPU_LINEAR_WEIGHTS: \"fast\" is not one of auto, blocked, plain"));
  const Outcome unknown_route = worker("--model resnet50 --image-size 32 --batch-size 1 --measure-steps 1 --repeats 1",
                                       "DLBENCH_CPU_CONV_BACKWARD_DATA=transposed");
  EXPECT_EQ(unknown_route.exit_code, 1);
  EXPECT_THAT(unknown_route.err,
              HasSubstr("DLBENCH_CPU_CONV_BACKWARD_DATA: \"transposed\" is not one of auto, primitive, flipped"));
  const Outcome image = worker("--model bert-base --image-size 224");
  EXPECT_EQ(image.exit_code, 2);
  EXPECT_THAT(image.err, HasSubstr("--image-size: bert-base takes token sequences; use --sequence-length"));
  const Outcome length = worker("--model resnet50 --sequence-length 128");
  EXPECT_EQ(length.exit_code, 2);
  EXPECT_THAT(length.err, HasSubstr("--sequence-length: resnet50 takes images"));
  const Outcome too_long = worker("--model bert-base --sequence-length 513");
  EXPECT_EQ(too_long.exit_code, 2);
  EXPECT_THAT(too_long.err, HasSubstr("--sequence-length: 513 is out of range; allowed: 8 to 512"));
}

TEST(WorkerCli, BadInputExitsTwoNamingTheFlag) {
  const Outcome model = worker("--model resnet18");
  EXPECT_EQ(model.exit_code, 2);
  EXPECT_THAT(model.err, HasSubstr("--model: \"resnet18\" is not one of resnet50, resnet152, vgg16, alexnet, inception_v3, deeplabv3plus, bert-base"));
  const Outcome nan = worker("--learning-rate nan");
  EXPECT_EQ(nan.exit_code, 2);
  EXPECT_THAT(nan.err, HasSubstr("--learning-rate: nan is out of range; allowed: greater than 0 and at most 100"));
  const Outcome run = worker("--run 'Not A Name'");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr("--run: \"Not A Name\" is not a BenchmarkRun name"));
  const Outcome batch = worker("--batch-size 0");
  EXPECT_EQ(batch.exit_code, 2);
  EXPECT_THAT(batch.err, HasSubstr("--batch-size: 0 is out of range; allowed: 1 to 65536"));
  EXPECT_EQ(worker("--measure-steps -3").exit_code, 2);
  EXPECT_EQ(worker("--image-size abc").exit_code, 2);
  EXPECT_EQ(worker("--model alexnet --image-size 32").exit_code, 2);
  EXPECT_EQ(worker("--frobnicate 1").exit_code, 2);
}

// Every model the API admits is named by --help and described by --list-models.
TEST(WorkerCli, HelpAndListModelsNameEveryModelOfTheApi) {
  const Outcome help = worker("--help");
  const Outcome list = worker("--list-models");
  ASSERT_EQ(help.exit_code, 0);
  ASSERT_EQ(list.exit_code, 0);
  const std::string lines = "\n" + list.out;  // a model's line starts with its name
  for (const std::string_view name : EnumSpellings<Model>::values) {
    const std::string model(name);
    EXPECT_THAT(help.out, HasSubstr(" " + model + " ")) << "--help does not name " << model;
    EXPECT_THAT(lines, HasSubstr("\n" + model + " ")) << "--list-models does not list " << model;
  }
}

// --record-step writes a safetensors record; --init-from takes weights files only: a record (its
// tensors are "initial.*", "grad.*", ...) is a Failed result naming what is missing, a missing file a
// usage error, and a record of more than one rank or of real data is refused up front.
TEST(WorkerCli, RecordStepAndInitFromSayWhatIsWrong) {
  const auto dir = scratch();
  const std::string common = "--model alexnet --image-size 64 --batch-size 2 --threads 2 ";
  const Outcome record = worker(common + "--record-step step.safetensors");
  ASSERT_EQ(record.exit_code, 0) << record.err;
  EXPECT_THAT(record.err, HasSubstr("recorded one alexnet step"));
  const std::string bytes = slurp(dir / "step.safetensors");
  EXPECT_THAT(bytes, HasSubstr("\"initial.features.0.weight\""));
  EXPECT_THAT(bytes, HasSubstr("\"grad.classifier.6.bias\""));
  EXPECT_THAT(bytes, HasSubstr("\"state.classifier.3.mask\""));
  EXPECT_THAT(bytes, HasSubstr("\"format\":\"dlbench.step/v1\""));

  const Outcome wrong = worker(common + "--warmup-steps 0 --measure-steps 1 --repeats 1 --init-from step.safetensors");
  EXPECT_EQ(wrong.exit_code, 1);
  const ResultDocument doc = decoded(wrong.out);
  EXPECT_EQ(doc.state, CaseState::Failed);
  EXPECT_EQ(doc.reason, "WorkerError");
  EXPECT_THAT(doc.message, HasSubstr("lacks 16 of the model's 16 parameters: features.0.weight, features.0.bias"));

  const Outcome missing = worker(common + "--init-from nowhere.safetensors");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("--init-from: cannot read nowhere.safetensors"));
  const Outcome ranks = worker(common + "--record-step x.safetensors", "OMPI_COMM_WORLD_SIZE=2");
  EXPECT_EQ(ranks.exit_code, 2);
  EXPECT_THAT(ranks.err, HasSubstr("--record-step: records one rank's step"));
  const Outcome data = worker(common + "--record-step x.safetensors --data imagefolder --data-path .");
  EXPECT_EQ(data.exit_code, 2);
  EXPECT_THAT(data.err, HasSubstr("--record-step: records a step on synthetic data"));
}

// The API admits every precision; one the backend cannot run is a result that says why (reason
// Unsupported, exit 1, never retried by the executors), not a usage error. oneDNN held to
// avx512_core (no AVX512_BF16, on any CPU) makes bf16 one of them, naming the missing ISA.
TEST(WorkerCli, PrecisionsTheCpuBackendCannotRunAreUnsupportedResults) {
  const std::string without_bf16 = "ONEDNN_MAX_CPU_ISA=AVX512_CORE";
  for (const std::string precision : {"tf32", "amp", "bf16"}) {
    const Outcome o = worker("--precision " + precision +
                                 " --model alexnet --image-size 64 --batch-size 1 --warmup-steps 0 --measure-steps 1 "
                                 "--repeats 1",
                             without_bf16);
    expect_unsupported(o, precision, "cpu", "fp32");
    if (precision == "bf16") {
      EXPECT_THAT(decoded(o.out).message, HasSubstr("needs oneDNN's avx512_core_bf16 ISA"));
    } else if (precision == "amp") {
      EXPECT_THAT(decoded(o.out).message, HasSubstr("fp16 (amp) has no training kernels"));
      EXPECT_THAT(decoded(o.out).message, HasSubstr("DLBENCH_CPU_FP16=emulated"));
    }
  }
  // Emulated (half_emulation.hpp), amp trains on the CPU with its loss scale, and the result says
  // its fp16 was emulated; a value the switch does not know fails the case, naming what it allows.
  const Outcome emulated = worker("--precision amp --model alexnet --image-size 64 --batch-size 2 --warmup-steps 0 "
                                  "--measure-steps 2 --repeats 1",
                                  "DLBENCH_CPU_FP16=emulated");
  ASSERT_EQ(emulated.exit_code, 0) << emulated.err;
  EXPECT_EQ(decoded(emulated.out).state, CaseState::Succeeded);
  const auto scaling = decoded(emulated.out).loss_scaling;
  ASSERT_TRUE(scaling);
  EXPECT_GE(scaling->steps, 2);
  EXPECT_GT(scaling->final_scale, 0.0);
  EXPECT_EQ(decoded(emulated.out).environment.backend_options.at("fp16"), "emulated");
  const Outcome unknown = worker("--precision amp --model alexnet --image-size 64 --batch-size 1 --measure-steps 1 "
                                 "--repeats 1",
                                 "DLBENCH_CPU_FP16=native");
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_THAT(unknown.err, HasSubstr("DLBENCH_CPU_FP16: \"native\" is not one of refused, emulated"));
  const Outcome devices = worker("--list-devices", without_bf16);
  EXPECT_THAT(devices.out, ::testing::ContainsRegex("^cpu [0-9]+ precisions=fp32\n"));  // cores vary by machine
}

// --profile N: N more steps after the repeats, layer by layer; the table and the document say
// where a step goes, and the parts add up to the step. One thread, as ctest gives it one core: two
// threads, one of them waiting for the core another test holds at each of a layer's parallel
// regions, made the short batch norms outweigh the convolutions (seen in CI beside other tests).
TEST(WorkerCli, ProfileSaysWhereAStepGoes) {
  const Outcome o = worker("--model resnet50 --image-size 32 --batch-size 2 --warmup-steps 1 --measure-steps 2 "
                           "--repeats 1 --profile 2 --threads 1 --output profile.json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_THAT(o.out, HasSubstr("profile: "));
  EXPECT_THAT(o.out, HasSubstr("by kind"));
  EXPECT_THAT(o.out, HasSubstr("slowest layers"));
  const ResultDocument doc = decoded(slurp(scratch() / "profile.json"));
  ASSERT_TRUE(doc.profile.has_value());
  const StepProfile& p = *doc.profile;
  EXPECT_EQ(p.steps, 2);
  EXPECT_GT(p.step_seconds, 0.0);
  double sum = p.outside_layers_seconds;
  bool first_conv = false;
  for (const LayerTime& l : p.layers) {
    sum += l.forward_seconds + l.backward_seconds;
    if (l.name == "conv1") first_conv = l.kind == "Conv2d" && l.forward_seconds > 0 && l.backward_seconds > 0;
  }
  EXPECT_NEAR(sum, p.step_seconds, 1e-6 * p.step_seconds);
  // The rest by part: one rank, fp32 and SGD, so no wait for gradients and no loss scaling.
  std::set<std::string> parts;
  double outside = 0;
  for (const StepPartTime& t : p.outside_parts) {
    parts.insert(t.part);
    outside += t.seconds;
  }
  EXPECT_THAT(parts, ::testing::ElementsAre("input", "loss", "other", "update"));
  EXPECT_NEAR(outside, p.outside_layers_seconds, 1e-9);
  EXPECT_THAT(o.out, ::testing::ContainsRegex("ms of it outside the layers: [a-z]+ [0-9.]+, "));
  EXPECT_TRUE(first_conv) << "ResNet-50's conv1 is timed in both passes";
  EXPECT_GE(p.layers.size(), 16u + 53u) << "every bottleneck and every convolution has a row";
  ASSERT_FALSE(p.kinds.empty());
  EXPECT_EQ(p.kinds.front().kind, "Conv2d") << "ResNet-50's step is mostly convolutions";
  const Outcome graph = worker("--backend cuda --cuda-graph on --profile 2");
  EXPECT_EQ(graph.exit_code, 2);
  EXPECT_THAT(graph.err, ::testing::AnyOf(HasSubstr("--backend: \"cuda\""), HasSubstr("not with --cuda-graph on")));
  const Outcome zero = worker("--profile 0");
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_THAT(zero.err, HasSubstr("--profile"));
}

// Under a CPU quota (a pod's CPU limit) the default thread count is what the quota allows, not
// the cores the affinity mask shows, and the result says why. A real cgroup v1 cpu controller,
// where this machine lets the test make one (as root); skipped elsewhere, saying why.
TEST(WorkerCli, TheDefaultThreadsFitTheCgroupsCpuQuota) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0 || CPU_COUNT(&allowed) < 2) {
    GTEST_SKIP() << "one core in the affinity mask: a quota of one core changes nothing";
  }
  const std::filesystem::path cgroup = "/sys/fs/cgroup/cpu/dlbench-quota-" + std::to_string(::getpid());
  std::error_code error;
  if (!std::filesystem::create_directory(cgroup, error) || !std::filesystem::exists(cgroup / "cpu.cfs_quota_us")) {
    GTEST_SKIP() << "cannot make a cgroup v1 cpu controller group at " << cgroup << " (" << error.message()
                 << "): not root, or no cgroup v1 cpu controller here";
  }
  std::ofstream(cgroup / "cpu.cfs_period_us") << "100000\n";
  std::ofstream(cgroup / "cpu.cfs_quota_us") << "100000\n";  // one core
  const auto dir = scratch();
  const std::string run = "cd " + dir.string() + " && sh -c 'echo $$ > " + (cgroup / "cgroup.procs").string() +
                          " && exec env -u OMP_NUM_THREADS " + DLBENCH_WORKER_BINARY + " \"$@\"' sh ";
  const int listed = std::system((run + "--list-devices > quota-devices").c_str());
  const int ran = std::system((run + "--model alexnet --image-size 64 --batch-size 1 --warmup-steps 0 "
                                     "--measure-steps 1 --repeats 1 --output quota.json > /dev/null 2>&1").c_str());
  std::filesystem::remove(cgroup, error);  // empty again: its processes have exited
  ASSERT_EQ(listed, 0);
  ASSERT_EQ(ran, 0);
  EXPECT_THAT(slurp(dir / "quota-devices"), ::testing::StartsWith("cpu 1 precisions="));
  const ResultDocument doc = decoded(slurp(dir / "quota.json"));
  EXPECT_EQ(doc.environment.cpu_cores, 1);
  EXPECT_THAT(doc.environment.cpu_threads_reason, HasSubstr("the CPU quota allows 1 core (cpu.cfs_quota_us 100000"));
  // Outside the cgroup the same worker takes the mask's cores, and says so.
  const Outcome free = worker("--list-devices", "env -u OMP_NUM_THREADS");
  EXPECT_THAT(free.out, ::testing::StartsWith("cpu " + std::to_string(CPU_COUNT(&allowed)) + " "));
}

// Other load on the node is recorded, not hidden: a busy loop per core beside the worker makes
// tasks wait for CPUs, and the result (and the table) say the case was interfered with. The loops
// run at the lowest priority, so that tests running beside this one hardly feel them; the node's
// pressure counts their waiting as well as the worker's.
TEST(WorkerCli, OtherLoadOnTheNodeIsRecordedAsInterference) {
  if (!std::filesystem::exists("/proc/pressure/cpu")) GTEST_SKIP() << "this kernel has no CPU pressure information (PSI)";
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  const int cores = CPU_COUNT(&allowed);
  const auto dir = scratch();
  std::filesystem::remove(dir / "load-pids");
  for (int i = 0; i < cores; ++i) {
    const std::string spin = "sh -c 'echo $$ >> " + (dir / "load-pids").string() +
                             "; exec nice -n 19 timeout 120 sh -c \"while :; do :; done\"' > /dev/null 2>&1 &";
    ASSERT_EQ(std::system(spin.c_str()), 0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const Outcome o = worker("--model alexnet --image-size 64 --batch-size 2 --warmup-steps 1 --measure-steps 10 --repeats 2 "
                           "--threads " + std::to_string(cores) + " --output interfered.json");
  std::system(("kill $(cat " + (dir / "load-pids").string() + ") 2> /dev/null").c_str());
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const ResultDocument doc = decoded(slurp(dir / "interfered.json"));
  ASSERT_TRUE(doc.interference.has_value());
  ASSERT_TRUE(doc.interference->cpu_pressure.has_value());
  EXPECT_GT(*doc.interference->cpu_pressure, kInterferedShare);
  EXPECT_EQ(doc.interference->verdict, InterferenceVerdict::interfered);
  EXPECT_THAT(o.out, HasSubstr("  other load: tasks waited for a CPU "));
  EXPECT_THAT(o.out, HasSubstr(": interfered\n"));
}

// Repeats that spread more than --max-cv are measured again, one at a time, up to --extra-repeats
// more; the last --repeats are reported, the earlier ones kept as discarded; still spread: Unstable.
// A bound no real measurement meets (1e-9) makes this certain; a bound of 1 accepts any spread.
TEST(WorkerCli, RepeatsThatSpreadAreMeasuredAgainAndAnUnstableCaseSaysSo) {
  const std::string common = "--model alexnet --image-size 64 --batch-size 2 --warmup-steps 0 --measure-steps 2 "
                             "--repeats 2 --threads 1 ";
  const Outcome o = worker(common + "--max-cv 1e-9 --extra-repeats 2 --output unstable.json");
  ASSERT_EQ(o.exit_code, 0) << o.err;  // a measurement, with its verdict: not a failure
  const ResultDocument doc = decoded(slurp(scratch() / "unstable.json"));
  EXPECT_EQ(doc.state, CaseState::Succeeded);
  ASSERT_TRUE(doc.stability.has_value());
  EXPECT_EQ(doc.stability->verdict, StabilityVerdict::unstable);
  EXPECT_EQ(doc.stability->extra_repeats, 2);
  EXPECT_EQ(doc.stability->discarded.size(), 2u);
  EXPECT_DOUBLE_EQ(doc.stability->max_cv, 1e-9);
  ASSERT_TRUE(doc.throughput.has_value());
  EXPECT_EQ(doc.throughput->repeats.size(), 2u);
  EXPECT_EQ(doc.reason, "Unstable");
  EXPECT_THAT(doc.message, HasSubstr("over the last 2 repeats is above the bound 0.0% after 2 more repeats"));
  EXPECT_THAT(o.err, HasSubstr("repeat 3/2 (again: the last repeats spread too much)"));
  EXPECT_THAT(o.err, HasSubstr("repeat 4/2 (again"));
  EXPECT_THAT(o.err, Not(HasSubstr("repeat 5/2")));
  EXPECT_THAT(o.out, HasSubstr("(discarded: measured again)"));
  EXPECT_THAT(o.out, HasSubstr("stability: UNSTABLE (Unstable): cv "));

  const Outcome any = worker(common + "--max-cv 1 --output stable.json");
  ASSERT_EQ(any.exit_code, 0) << any.err;
  const ResultDocument calm = decoded(slurp(scratch() / "stable.json"));
  ASSERT_TRUE(calm.stability.has_value());
  EXPECT_EQ(calm.stability->verdict, StabilityVerdict::stable);
  EXPECT_EQ(calm.stability->extra_repeats, 0);
  EXPECT_TRUE(calm.reason.empty());
  EXPECT_THAT(any.out, HasSubstr("stability: stable, cv "));
  EXPECT_THAT(any.err, Not(HasSubstr("repeat 3/2")));

  // Defaults by backend, and bad bounds refused naming the flag.
  const Outcome plain = worker(common + "--repeats 1 --output plain.json");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_DOUBLE_EQ(decoded(slurp(scratch() / "plain.json")).stability->max_cv, kDefaultMaxCvCpu);
  const Outcome zero = worker("--max-cv 0");
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_THAT(zero.err, HasSubstr("--max-cv"));
  EXPECT_EQ(worker("--extra-repeats -1").exit_code, 2);
}

// A CUDA build on a machine without a GPU lists the backend with no device and no precision
// (it once listed all four, and a case's header then counted 0 parameters).
TEST(WorkerCli, ListDevicesNamesNoPrecisionWithoutADevice) {
  const Outcome devices = worker("--list-devices");
  ASSERT_EQ(devices.exit_code, 0) << devices.err;
  const auto cuda = devices.out.find("\ncuda ");
  if (cuda == std::string::npos) GTEST_SKIP() << "built without CUDA: " << devices.out;
  const std::string line = devices.out.substr(cuda + 1, devices.out.find('\n', cuda + 1) - cuda - 1);
  if (line.rfind("cuda 0 ", 0) != 0) {
    EXPECT_THAT(line, ::testing::MatchesRegex("cuda [1-9][0-9]* precisions=fp32,.*")) << devices.out;
  } else {
    EXPECT_EQ(line, "cuda 0 precisions=") << devices.out;
  }
}

// A CUDA build opens cuBLASLt when it makes a CUDA backend, not when it starts
// (cuda/cublas_lt_library.hpp): linked, the library's initialisers took half a second of every
// start. The dynamic loader's own record (LD_DEBUG=files) says what a start mapped.
TEST(WorkerCli, AStartWithoutACudaBackendLoadsNoCublasLt) {
  const Outcome devices = worker("--list-devices");
  ASSERT_EQ(devices.exit_code, 0) << devices.err;
  if (devices.out.find("\ncuda ") == std::string::npos) GTEST_SKIP() << "built without CUDA: " << devices.out;
  std::vector<std::string> starts{"--help"};
  // Without a GPU, listing the devices makes no backend either (with one, it makes a CUDA backend).
  if (devices.out.find("\ncuda 0 ") != std::string::npos) starts.emplace_back("--list-devices");
  for (const std::string& args : starts) {
    const Outcome o = worker(args, "LD_DEBUG=files");
    EXPECT_EQ(o.exit_code, 0) << args << ": " << o.err.substr(0, 2000);
    EXPECT_THAT(o.err, HasSubstr("libcudart.so")) << args << ": the loader's record lacks the CUDA runtime";
    EXPECT_THAT(o.err, Not(HasSubstr("libcublasLt"))) << args;
  }
}

// Where oneDNN finds AVX512_BF16, bf16 trains: a valid result whose activations take half of
// fp32's memory, with a finite loss.
TEST(WorkerCli, Bf16TrainsWhereTheCpuHasAvx512Bf16) {
  const Outcome devices = worker("--list-devices");
  // The cpu line alone: a CUDA build lists "cuda 0 precisions=...,bf16" on a machine without GPUs.
  const std::string cpu_line = devices.out.substr(0, devices.out.find('\n'));
  ASSERT_THAT(cpu_line, ::testing::StartsWith("cpu ")) << devices.out;
  if (cpu_line.find("bf16") == std::string::npos) {
    GTEST_SKIP() << "this CPU has no AVX512_BF16 (oneDNN's avx512_core_bf16): " << cpu_line;
  }
  const std::string args =
      "--model resnet50 --image-size 64 --batch-size 4 --warmup-steps 1 --measure-steps 2 --repeats 1 --precision ";
  const Outcome bf16 = worker(args + "bf16");
  ASSERT_EQ(bf16.exit_code, 0) << bf16.err;
  const ResultDocument half = decoded(bf16.out);
  const Outcome fp32 = worker(args + "fp32");
  ASSERT_EQ(fp32.exit_code, 0) << fp32.err;
  const ResultDocument full = decoded(fp32.out);
  EXPECT_EQ(half.state, CaseState::Succeeded);
  EXPECT_EQ(to_string(half.case_.precision), "bf16");
  ASSERT_TRUE(half.memory && full.memory);
  // Half, but for what stays fp32 whatever the activations (batch-norm statistics, masks).
  EXPECT_GT(half.memory->unshared_activations / full.memory->unshared_activations, 0.5);
  EXPECT_LT(half.memory->unshared_activations / full.memory->unshared_activations, 0.51);
  EXPECT_DOUBLE_EQ(half.memory->parameters, full.memory->parameters) << "master weights stay fp32";
  // The table's repeat row ends with the loss after it: a number (not nan or inf).
  EXPECT_THAT(bf16.err, ::testing::ContainsRegex("\n +1 +[0-9.]+ +[0-9.]+ +[0-9]+\\.[0-9]+\n")) << bf16.err;
}

SelfTestDocument decoded_self_test(const std::string& json_text) {
  const auto d = decode_self_test_document(nlohmann::json::parse(json_text));
  EXPECT_TRUE(d.ok()) << (d.errors.empty() ? "" : d.errors.front().to_string());
  return d.value.value_or(SelfTestDocument{});
}

// --self-test on the CPU: a table for people, a dlbench.selftest/v1 document for programs, exit
// 0. The precisions this CPU cannot run are skipped with the reason (tf32 and amp always; bf16
// with oneDNN held below AVX512_BF16), never failed.
TEST(WorkerCli, SelfTestPassesOnTheCpuAndSkipsWhatItCannotRun) {
  const Outcome o = worker("--self-test", "ONEDNN_MAX_CPU_ISA=AVX512_CORE");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_THAT(o.err, HasSubstr("dlbench-worker --self-test: cpu against cpu fp32 (oneDNN), 1 rank (none)"));
  EXPECT_THAT(o.err, ::testing::ContainsRegex("fp32 +conv 3x3 stride 1 with bias +[0-9.e+-]+ +1.00e-05 +passed"));
  const SelfTestDocument doc = decoded_self_test(o.out);
  EXPECT_EQ(doc.state, CaseState::Succeeded);
  EXPECT_EQ(doc.failed, 0);
  EXPECT_EQ(doc.skipped, 3);  // tf32, amp and bf16, each as a whole
  EXPECT_GE(doc.passed, 18);
  ASSERT_EQ(doc.checks.size(), 3u);
  EXPECT_EQ(doc.checks[2].precision, "bf16");
  EXPECT_THAT(doc.checks[2].detail, HasSubstr("avx512_core_bf16"));
  EXPECT_THAT(doc.message, HasSubstr("checks passed, 3 skipped on 1 device (cpu, none)"));
  EXPECT_EQ(doc.precisions, (std::vector<std::string>{"fp32", "tf32", "amp", "bf16"}));
}

// amp's self-test on the CPU with fp16 emulated (cpu/half_emulation.hpp): every amp check, the
// whole-step and memory-plan ones included, against the CPU's fp32, and the loss-scaling checks.
// The bottleneck's gradient error is the H200's own (9.11e-2 there, on cuDNN's half kernels).
TEST(WorkerCli, SelfTestRunsAmpOnTheCpuWithFp16Emulated) {
  const Outcome o = worker("--self-test --precision amp", "DLBENCH_CPU_FP16=emulated");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const SelfTestDocument doc = decoded_self_test(o.out);
  EXPECT_EQ(doc.state, CaseState::Succeeded);
  EXPECT_EQ(doc.failed, 0);
  EXPECT_EQ(doc.skipped, 0);
  EXPECT_GE(doc.passed, 30);
  EXPECT_EQ(doc.environment.backend_options.at("fp16"), "emulated");
  EXPECT_THAT(o.err, ::testing::ContainsRegex("amp +training, 5 steps +[0-9.e+-]+ +1.00e-02 +passed"));
  EXPECT_THAT(o.err, ::testing::ContainsRegex("amp +bottleneck with projection +[0-9.e+-]+ +1.50e-01 +passed"));
  EXPECT_THAT(o.err, ::testing::ContainsRegex("amp +resnet50 step, each layer fed the reference's input +[0-9.e+-]+ "
                                              "+5.00e-02 +passed"));
}

// An amp case whose loss scaling trained little carries, in its result, its first overflow after
// the repeats traced layer by layer (lossScaling.overflow): run_case's wiring of the trace, which
// until fp16 was emulated only a GPU reached. At 32 px and batch 2, layer4's batch norms normalise
// two values a channel, and their input gradients pass fp16's range at every scale the first
// steps try (1e-2 and 100 as rates alike, tried): every step skips.
TEST(WorkerCli, AnAmpCaseThatTrainedLittleCarriesItsFirstOverflowTraced) {
  const std::string common = "--precision amp --model resnet50 --image-size 32 --batch-size 2 --warmup-steps 0 "
                             "--measure-steps 4 --repeats 1 --extra-repeats 0 ";
  const Outcome o = worker(common, "DLBENCH_CPU_FP16=emulated");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const ResultDocument skipping = decoded(o.out);
  EXPECT_EQ(skipping.state, CaseState::Succeeded) << skipping.message;
  ASSERT_TRUE(skipping.loss_scaling);
  EXPECT_GT(skipping.loss_scaling->skipped_steps, 0);
  EXPECT_TRUE(loss_scaling_trained_little(*skipping.loss_scaling));
  const std::string& trace = skipping.loss_scaling->overflow;
  EXPECT_THAT(trace, ::testing::ContainsRegex("^untimed step [0-9]+ skipped, loss scale now [0-9.e+-]+: loss "));
  EXPECT_THAT(trace, HasSubstr("\nreplayed at loss scale "));
  // The replay names a layer of the model, by its index and kind, where the first inf or NaN lay.
  EXPECT_THAT(trace, ::testing::ContainsRegex("first non-finite (layer output|input gradient): [^ ]+ \\((Conv2d|"
                                              "BatchNorm2d|BatchNorm2d\\+ReLU|Linear|MaxPool2d|Bottleneck)"));
  EXPECT_LE(trace.size(), kLossScalingOverflowMaxLength);
}

// No GPU for --backend cuda: a Failed self-test document that says why (as a case says it), exit 1.
TEST(WorkerCli, SelfTestWithoutItsBackendFailsSayingWhy) {
  const Outcome o = worker("--self-test --backend cuda");
  if (o.exit_code == 2) GTEST_SKIP() << "built without CUDA: " << o.err;
  if (o.exit_code == 0) GTEST_SKIP() << "this machine has a GPU (the gpu tests cover it)";
  ASSERT_EQ(o.exit_code, 1) << o.err;
  const SelfTestDocument doc = decoded_self_test(o.out);
  EXPECT_EQ(doc.state, CaseState::Failed);
  EXPECT_EQ(doc.reason, "BackendUnavailable");
  EXPECT_THAT(doc.message, HasSubstr("--backend cuda: "));
  EXPECT_EQ(doc.failed_ranks, std::vector<int>{0});
}

// A self-test stopped at its deadline (bench/gpu_check.sh's `timeout`) keeps every check it printed:
// each line reaches a file as it is printed, not when a 4 KiB buffer fills or the process exits. On
// an H200 the amp models' self-test ran past its 150 s and left an empty log.
TEST(WorkerCli, ASelfTestKilledAtItsDeadlineKeepsTheChecksItPrinted) {
  const auto table = scratch() / "killed-self-test.txt";
  std::filesystem::remove(table);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::string command = std::string("exec env OMP_NUM_THREADS=2 ") + DLBENCH_WORKER_BINARY +
                                " --self-test --precision fp32,bf16 --output " + (scratch() / "killed.json").string() +
                                " > " + table.string() + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // The first bytes to reach the file, while the self-test still runs (it takes seconds, most of
  // its checks tens of milliseconds): a block buffer's first write would be a whole 4 KiB at once.
  std::string first;
  bool still_running = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (first.empty() && std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    still_running = ::waitpid(child, &status, WNOHANG) == 0;
    first = slurp(table);
    if (!still_running) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (still_running) {
    ::kill(child, SIGTERM);  // as timeout(1) does: no exit handlers, no flush
    int status = 0;
    ::waitpid(child, &status, 0);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  }
  EXPECT_TRUE(still_running) << "nothing reached the file before the self-test ended:\n" << first;
  EXPECT_THAT(first, HasSubstr("dlbench-worker --self-test: cpu against cpu fp32 (oneDNN)"));
  EXPECT_LT(first.size(), 4096u) << first;
  EXPECT_THAT(slurp(table), Not(HasSubstr("self-test passed")));  // it was stopped first
}

TEST(WorkerCli, SelfTestTakesAListOfPrecisionsAndACaseDoesNot) {
  const Outcome o = worker("--self-test --precision fp32,tf32 --output st.json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_THAT(o.out, HasSubstr("self-test passed"));  // with --output the table goes to stdout
  const SelfTestDocument doc = decoded_self_test(slurp(scratch() / "st.json"));
  EXPECT_EQ(doc.precisions, (std::vector<std::string>{"fp32", "tf32"}));
  EXPECT_EQ(doc.skipped, 1);
  const Outcome list = worker("--precision fp32,bf16");
  EXPECT_EQ(list.exit_code, 2);
  EXPECT_THAT(list.err, HasSubstr("--precision: a list (fp32,...) only with --self-test"));
  const Outcome bad = worker("--self-test --precision fp32,fp8");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--precision: \"fp8\" is not one of fp32, tf32, amp, bf16"));
}

// --model with --self-test: a list, each image model's whole step checked beside ResNet-50's (a
// sequence model's layers are the transformer checks); a case trains one model.
TEST(WorkerCli, SelfTestTakesAListOfModelsAndACaseDoesNot) {
  const Outcome o = worker("--self-test --precision fp32 --model alexnet,bert-base --output st.json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_THAT(o.out, ::testing::ContainsRegex("fp32 +resnet50 step, each layer fed the reference's input .* passed"));
  EXPECT_THAT(o.out, ::testing::ContainsRegex("fp32 +alexnet step, each layer fed the reference's input .* passed"));
  EXPECT_THAT(o.out, ::testing::Not(HasSubstr("bert-base step")));
  const Outcome list = worker("--model resnet50,vgg16");
  EXPECT_EQ(list.exit_code, 2);
  EXPECT_THAT(list.err, HasSubstr("--model: a list (resnet50,...) only with --self-test"));
  const Outcome bad = worker("--self-test --model resnet50,lenet");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--model: \"lenet\" is not one of resnet50, resnet152"));
}

// --self-test-checks: only the checks whose name contains one of its parts run (the GPU check
// runs each model's whole step in a process of its own without the rest again); a choice that
// finds no check fails saying so, and bad text is refused naming the flag.
TEST(WorkerCli, SelfTestChecksRunsOnlyTheChecksItNames) {
  const Outcome o = worker("--self-test --precision fp32 --model alexnet --self-test-checks "
                           "'alexnet step|softmax cross-entropy' --output st.json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_THAT(o.out, ::testing::ContainsRegex("fp32 +alexnet step, each layer fed the reference's input .* passed"));
  EXPECT_THAT(o.out, ::testing::ContainsRegex("fp32 +softmax cross-entropy .* passed"));
  EXPECT_THAT(o.out, Not(HasSubstr("resnet50 step")));
  EXPECT_THAT(o.out, Not(HasSubstr("training, 5 steps")));
  EXPECT_THAT(o.out, HasSubstr("those chosen by --self-test-checks"));
  const SelfTestDocument doc = decoded_self_test(slurp(scratch() / "st.json"));
  EXPECT_EQ(doc.passed, 2);
  EXPECT_EQ(doc.failed + doc.skipped, 0);

  const Outcome none = worker("--self-test --precision fp32 --self-test-checks 'no such check'");
  EXPECT_EQ(none.exit_code, 1) << none.err;
  EXPECT_THAT(none.err, HasSubstr("--self-test-checks: no check's name contains any of \"no such check\""));
  for (const char* bad : {"'vgg16 step|'", "'|vgg16 step'", "'vgg16||alexnet'", "''"}) {
    const Outcome refused = worker(std::string("--self-test --self-test-checks ") + bad);
    EXPECT_EQ(refused.exit_code, 2) << bad;
    EXPECT_THAT(refused.err, HasSubstr("--self-test-checks: ")) << bad;
    EXPECT_THAT(refused.err, HasSubstr("allowed: parts of the checks' names")) << bad;
  }
  const Outcome without = worker("--self-test-checks training");
  EXPECT_EQ(without.exit_code, 2);
  EXPECT_THAT(without.err, HasSubstr("--self-test-checks: only with --self-test"));
}

TEST(WorkerCli, CombinationsTheBackendsCannotRunAreRefused) {
  const Outcome nccl = worker("--backend cpu --communicator nccl");
  EXPECT_EQ(nccl.exit_code, 2);
  EXPECT_THAT(nccl.err, HasSubstr("--communicator: nccl"));
  // A step graph on a backend that cannot capture one is the case's result, as a precision it
  // cannot run is (spec.cudaGraph reaches a CPU worker that way), before any step.
  const Outcome graph = worker("--backend cpu --cuda-graph on --image-size 32 --batch-size 2");
  EXPECT_EQ(graph.exit_code, 1) << graph.err;
  const ResultDocument refused = decoded(graph.out);
  EXPECT_EQ(refused.state, CaseState::Failed);
  EXPECT_EQ(refused.reason, "Unsupported");
  EXPECT_EQ(refused.message,
            "--cuda-graph on: the cpu backend cannot capture a step as a graph (CUDA graphs: --backend cuda). Allowed "
            "on the cpu backend: --cuda-graph off");
  EXPECT_FALSE(refused.throughput);
  // An eager CPU case does not mention graphs: its backend has none to choose.
  const Outcome eager = worker("--backend cpu --cuda-graph off --image-size 32 --batch-size 2 --warmup-steps 1 "
                               "--measure-steps 1 --repeats 1");
  ASSERT_EQ(eager.exit_code, 0) << eager.err;
  EXPECT_FALSE(decoded(eager.out).environment.backend_options.contains("cudaGraph"));
  // Built with CUDA: amp trains on a GPU (fp16, channels last, loss scaling), eagerly or as a
  // replayed step graph (the loss scale moves on on the device: no longer refused), or, with no
  // GPU here, the case fails saying so; without CUDA: cuda is refused.
  for (const std::string step_graph : {"off", "on"}) {
    const Outcome cuda =
        worker("--backend cuda --precision amp --batch-size 2 --image-size 32 --repeats 1 --cuda-graph " + step_graph);
    if (cuda.exit_code == 2) {
      EXPECT_THAT(cuda.err, HasSubstr("--backend: \"cuda\"")) << step_graph;
    } else if (decoded(cuda.out).reason == "BackendUnavailable") {
      EXPECT_THAT(decoded(cuda.out).message, HasSubstr("no usable CUDA device")) << step_graph;
    } else {
      EXPECT_EQ(cuda.exit_code, 0) << cuda.err;
      EXPECT_EQ(decoded(cuda.out).state, CaseState::Succeeded) << step_graph << ": " << cuda.out;
      // The result says whether its timed steps were a replayed graph.
      EXPECT_EQ(decoded(cuda.out).environment.backend_options.at("cudaGraph"), step_graph);
      ASSERT_TRUE(decoded(cuda.out).loss_scaling) << "amp's result says how many steps it skipped";
      EXPECT_LE(decoded(cuda.out).loss_scaling->skipped_steps, decoded(cuda.out).loss_scaling->steps);
    }
  }
  const Outcome mpi = worker("--backend cuda --communicator mpi");
  EXPECT_EQ(mpi.exit_code, 2);
  EXPECT_THAT(mpi.err, ::testing::AnyOf(HasSubstr("allowed with --backend cuda: auto, none, nccl"),
                                        HasSubstr("--backend: \"cuda\"")));
  const Outcome devices = worker("--list-devices");
  EXPECT_EQ(devices.exit_code, 0);
  EXPECT_THAT(devices.out, ::testing::StartsWith("cpu "));
}

}  // namespace
}  // namespace dlbench
