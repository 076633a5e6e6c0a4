#include "program/case_setup.hpp"

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "cpu/cpu_backend.hpp"
#include "input_resize_route.hpp"
#include "models/bert.hpp"
#include "models/model.hpp"
#include "weights_file.hpp"
#ifdef DLBENCH_HAVE_CUDA
#include "cuda/cuda_backend.hpp"
#endif
#ifdef DLBENCH_HAVE_NCCL
#include "cuda/nccl_communicator.hpp"
#endif

namespace dlbench::worker {

std::unique_ptr<Backend> make_backend(const Options& o) {
#ifdef DLBENCH_HAVE_CUDA
  if (o.backend == "cuda") {
    const char* local_rank = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess) cudaGetLastError();
    // With no device the constructor throws, saying why.
    const int device = (local_rank != nullptr ? std::atoi(local_rank) : 0) % std::max(devices, 1);
    return std::make_unique<CudaBackend>(device, cuda_math(o.precision), activation_dtype(o.precision));
  }
#endif
  return std::make_unique<CpuBackend>(o.threads > 0 ? static_cast<int>(o.threads) : default_threads());
}

std::unique_ptr<Communicator> make_communicator(const Options& o, int* argc, char*** argv, Backend* backend) {
#ifdef DLBENCH_HAVE_NCCL
  auto* gpu = dynamic_cast<CudaBackend*>(backend);
  if (gpu != nullptr && (o.communicator == "nccl" || (o.communicator == "auto" && launched_by_mpi()))) {
    return make_nccl_communicator(argc, argv, gpu->device(), gpu->stream());
  }
#else
  (void)backend;
#endif
#ifdef DLBENCH_HAVE_MPI
  if (o.communicator == "mpi" || o.communicator == "nccl" || (o.communicator == "auto" && launched_by_mpi())) {
    return make_mpi_communicator(argc, argv);  // nccl without a GPU: MPI, so that the failure is reported
  }
#else
  (void)argc;
  (void)argv;
#endif
  (void)o;
  return std::make_unique<NoCommunicator>();
}

std::optional<std::string> unsupported_precision(const Options& o, const Backend* backend) {
  if (backend == nullptr) return std::nullopt;  // the backend's own failure says more
  const auto why = cannot_run(o.precision, *backend);
  if (!why) return std::nullopt;
  return *why + ". Allowed on the " + o.backend + " backend here: " + allowed_precisions(*backend, ", ");
}

InputResizeChoice input_resize_choice(const Options& o, const Backend& backend) {
  // A GPU resizes unless told host (input_resize_route.hpp); the CPU refuses device, whatever the data.
  const char* value = std::getenv("DLBENCH_INPUT_RESIZE");
  const InputResize where = input_resize(value, backend.overlaps_host_copies(), backend.name());
  return {o.data == "imagefolder" ? where : InputResize::host, value != nullptr && *value != '\0'};
}

bool input_resized_on_device(const Options& o, const Backend& backend) {
  return input_resize_choice(o, backend).where == InputResize::device;
}

std::optional<std::string> unsupported_step_graph(const Options& o, const Backend* backend) {
  if (!o.cuda_graph || backend == nullptr || backend->can_capture()) return std::nullopt;
  return "--cuda-graph on: the " + backend->name() + " backend cannot capture a step as a graph (CUDA graphs: "
         "--backend cuda). Allowed on the " + o.backend + " backend: --cuda-graph off";
}

std::unique_ptr<Trainer> make_trainer(const Options& o, Backend& device, int rank, bool keep_every_buffer,
                                      std::int64_t max_predictions, ParameterStore::Share share) {
  const ModelInfo model = model_info(o.model);
  const auto warmup = static_cast<std::uint64_t>(o.learning_rate_warmup_steps);
  const SgdConfig sgd{static_cast<float>(o.learning_rate), static_cast<float>(o.momentum),
                      static_cast<float>(o.weight_decay), warmup};
  const MemoryReuse reuse = keep_every_buffer ? MemoryReuse::none : o.memory_plan;
  // --init-from's file is read before the model is built (a file that is no weights file fails at
  // once), and its values replace the seed's: none are drawn.
  std::optional<WeightsFile> initial_file;
  if (!o.init_from.empty()) initial_file = read_weights_file(o.init_from);
  const InitialWeights weights = initial_file ? InitialWeights::set_by_caller() : InitialWeights::drawn(share);
  std::unique_ptr<Trainer> trainer;
  if (model.sequences) {
    if (const auto why = device.cannot_run_transformers()) throw Unsupported(*why);
    trainer = std::make_unique<Trainer>(device, build_model(o.model), PretrainingBatchLayout{o.batch_size, o.sequence_length, max_predictions},
                                        model.classes, sgd, o.seed, static_cast<std::uint64_t>(rank), reuse,
                                        activation_dtype(o.precision), weights);
  } else {
    trainer = std::make_unique<Trainer>(device, build_model(o.model, model.classes),
                                        Shape(o.batch_size, 3, o.image_height, o.image_width), model.classes, sgd, o.seed,
                                        static_cast<std::uint64_t>(rank), reuse, activation_dtype(o.precision),
                                        weights);
  }
  if (o.optimizer != OptimizerName::sgd) {
    if (const auto why = device.cannot_run_transformers()) throw Unsupported(std::string(to_string(o.optimizer)) + ": " + *why);
    const AdamWConfig adam{static_cast<float>(o.learning_rate), static_cast<float>(o.momentum), 0.999f, 1e-6f,
                           static_cast<float>(o.weight_decay), 1.0f, warmup};
    if (o.optimizer == OptimizerName::lamb) {
      trainer->use_lamb(adam);
    } else {
      trainer->use_adamw(adam);
    }
  }
  if (uses_loss_scaling(o.precision)) trainer->use_loss_scaling({});
  if (initial_file) load_parameters(*initial_file, o.init_from, trainer->parameters(), device);
  return trainer;
}

input::PretrainingReaderConfig pretraining_reader_config(const Options& o, int rank, int world) {
  input::PretrainingReaderConfig config;
  config.batch_size = static_cast<int>(o.batch_size);
  config.vocabulary = model_info(o.model).classes;
  config.seed = o.seed;
  config.rank = rank;
  config.world = world;
  return config;
}

input::PretrainingShards open_pretraining_shards(const Options& o) {
  input::PretrainingShards shards = input::scan_pretraining_shards(o.data_path);
  if (shards.sequence_length != o.sequence_length) {
    throw input::DataUnavailable("data.path " + o.data_path + " holds sequences of " +
                                 std::to_string(shards.sequence_length) + " tokens; the case's sequenceLength is " +
                                 std::to_string(o.sequence_length) + " (set it to " +
                                 std::to_string(shards.sequence_length) + ", or use shards made for " +
                                 std::to_string(o.sequence_length) + ")");
  }
  return shards;
}

}  // namespace dlbench::worker
