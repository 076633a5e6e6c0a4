// A case from start to finish: set up, measure, and write what was measured or why it failed.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <optional>
#include <iomanip>
#include <iostream>
#include <limits>
#include <mutex>
#include <new>
#include <sstream>
#include <thread>

#include "dlbench/core/device_peaks.hpp"
#include "dlbench/core/names.hpp"
#include "dlbench/core/statistics.hpp"
#include "dlbench/core/status.hpp"
#include "dlbench/core/version.hpp"
#include "dlbench/core/worker_command.hpp"
#include "gpu_monitor.hpp"
#include "gradient_buckets.hpp"
#include "input/cityscapes.hpp"
#include "input/input_pipeline.hpp"
#include "interference.hpp"
#include "layer_profiler.hpp"
#include "memory_headroom.hpp"
#include "methodology.hpp"
#include "program/case_output.hpp"
#include "program/case_setup.hpp"
#include "program/commands.hpp"
#include "program/stop_signals.hpp"
#include "rank_overflow_trace.hpp"
#include "worker_metrics.hpp"
#ifdef DLBENCH_HAVE_CUDA
#include "cuda/cuda_backend.hpp"
#endif

namespace dlbench::worker {
namespace {

// Every model here ends in ImageNet's 1,000 classes; an imagefolder data set may not have more.
constexpr std::int64_t kModelClasses = 1000;
// How many untimed steps after the repeats may look for a skipped one to trace: at 5% skipped,
// 50 steps miss one 8% of the time; a step of ResNet-50 amp on an H200 takes 35 ms.
constexpr int kOverflowSearchSteps = 50;

// A data path no rank can use, or a shard whose every file is unreadable.
using input::DataUnavailable;

// The process's peak resident set, as the kernel counts it (Linux: KiB).
std::optional<double> peak_resident_bytes() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return std::nullopt;
  return static_cast<double>(usage.ru_maxrss) * 1024.0;
}

// The real-data side of a case: the pipeline and what the steps waited for it.
struct RealData {
  input::ImageFolder folder;          // imagefolder
  input::CityscapesSet cityscapes;    // cityscapes
  std::unique_ptr<input::SampleSource> source;
  std::unique_ptr<input::InputPipeline> pipeline;
  std::optional<input::PretrainingShards> shards;        // bertpretraining
  std::unique_ptr<input::PretrainingReader> reader;
  std::deque<double> waits;  // each step's, until the methodology reports its time
  std::vector<double> measured_waits;
  double measured_seconds = 0;     // this rank's own measured time
  double pipeline_throughput = 0;  // images/s, training idle
  // Data parallel: why this rank's feed failed inside the steps. The rank goes on training on its
  // last batch, in step with the others' collectives, until the ranks agree at the repeat's end.
  std::exception_ptr feed_failure;
};

// The pipeline alone: the batches prefetched while the model was set up are drained, then
// batches are timed until a second has passed (at least two, at most fifty).
double measure_pipeline_alone(const std::function<void()>& next, int prefetch_batches, long batch_size) {
  using clock = std::chrono::steady_clock;
  for (int i = 0; i <= prefetch_batches; ++i) next();
  const auto start = clock::now();
  long batches = 0;
  double seconds = 0;
  do {
    next();
    ++batches;
    seconds = std::chrono::duration<double>(clock::now() - start).count();
  } while (batches < 50 && (batches < 2 || seconds < 1.0));
  return static_cast<double>(batches * batch_size) / seconds;
}

// The worst GPU of the case speaks for it: the most other processes, the lowest clocks, every
// reason any GPU saw, the hottest, the most power. Ranks without readings (no NVML) send nothing.
std::optional<GpuReadings> worst_gpu(const std::optional<GpuReadings>& mine, Communicator& comm) {
  if (comm.size() == 1) return mine;
  constexpr double kNone = -1e30;  // loses every max
  constexpr GpuThrottleReason kReasons[] = {GpuThrottleReason::thermal, GpuThrottleReason::hw_slowdown,
                                            GpuThrottleReason::power_brake, GpuThrottleReason::power_cap};
  std::vector<double> worst(12, kNone);
  if (mine) {
    worst = {1.0, static_cast<double>(mine->other_processes), -mine->sm_clock_min_mhz, -mine->sm_clock_median_mhz,
             mine->sm_clock_max_mhz, mine->temperature_max_c, mine->power_median_w, static_cast<double>(mine->samples)};
    for (const GpuThrottleReason r : kReasons) {
      const auto& seen = mine->throttle_reasons;
      worst.push_back(std::find(seen.begin(), seen.end(), r) != seen.end() ? 1.0 : 0.0);
    }
  }
  comm.max(worst.data(), static_cast<std::int64_t>(worst.size()));
  if (worst[0] < 0) return std::nullopt;
  GpuReadings g;
  g.other_processes = static_cast<int>(worst[1]);
  g.sm_clock_min_mhz = -worst[2];
  g.sm_clock_median_mhz = -worst[3];
  g.sm_clock_max_mhz = worst[4];
  g.temperature_max_c = worst[5];
  g.power_median_w = worst[6];
  g.samples = static_cast<int>(worst[7]);
  for (std::size_t i = 0; i < std::size(kReasons); ++i) {
    if (worst[8 + i] > 0) g.throttle_reasons.push_back(kReasons[i]);
  }
  return g;
}

// Other load over the measured repeats, as the busiest node saw it (every rank reads its own),
// and the worst GPU's readings where there are any.
InterferenceReport node_interference(InterferenceReport mine, const std::optional<GpuReadings>& gpu, Communicator& comm) {
  if (comm.size() > 1) {
    std::vector<double> worst{mine.cpu_pressure.value_or(-1.0), mine.cpu_steal};
    comm.max(worst.data(), static_cast<std::int64_t>(worst.size()));
    mine.cpu_pressure = worst[0] >= 0 ? std::optional<double>(worst[0]) : std::nullopt;
    mine.cpu_steal = worst[1];
  }
  mine.gpu = worst_gpu(gpu, comm);
  mine.verdict = interference_verdict(mine.cpu_pressure, mine.cpu_steal, mine.gpu ? &*mine.gpu : nullptr);
  return mine;
}

// This rank's GPU through NVML, for a case on the CUDA backend; nullptr (and a note) without it.
std::unique_ptr<GpuMonitor> open_gpu_monitor([[maybe_unused]] const Backend& device, [[maybe_unused]] int rank) {
#ifdef DLBENCH_HAVE_CUDA
  if (const auto* gpu = dynamic_cast<const CudaBackend*>(&device)) {
    const cudaDeviceProp& p = gpu->properties();
    char bus_id[32];
    std::snprintf(bus_id, sizeof bus_id, "%08x:%02x:%02x.0", static_cast<unsigned>(p.pciDomainID),
                  static_cast<unsigned>(p.pciBusID), static_cast<unsigned>(p.pciDeviceID));
    std::string why;
    auto monitor = GpuMonitor::open(bus_id, why);
    if (!monitor) std::cerr << "dlbench-worker rank " << rank << ": no GPU readings: " << why << "\n";
    return monitor;
  }
#endif
  return nullptr;
}

// A multi-rank case's gradient reduction (CommunicationReport), timed after everything the case
// reports of its training: the whole gradient reduced alone, bucket by bucket as a step reduces it
// (5 times after one untimed), then steps with and without their reduction, in two turns of
// `steps_a_turn` each, every one synchronised and the slowest rank's, medians. Without its
// reduction each rank trains apart, so nothing after this may need the ranks' weights equal.
// `reductions(false)` takes the step's reduction out, `reductions(true)` puts it back.
CommunicationReport time_communication(Backend& device, Communicator& comm, GradientBuckets& buckets,
                                       const ParameterStore& store, const std::function<void()>& step,
                                       const std::function<void(bool)>& reductions, int steps_a_turn) {
  using Clock = std::chrono::steady_clock;
  const auto since = [](Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); };
  const auto slowest_median = [&comm](std::vector<double> seconds) {
    comm.max(seconds.data(), static_cast<std::int64_t>(seconds.size()));
    return summarize(seconds).median;
  };
  constexpr int kAllreduces = 5;
  buckets.finish();  // untimed: a first reduction may set up the library's paths
  device.synchronize();
  std::vector<double> allreduce;
  for (int i = 0; i < kAllreduces; ++i) {
    double here = 0;
    comm.max(&here, 1);  // every rank here before the clock starts
    const auto start = Clock::now();
    buckets.finish();  // starts every bucket, and waits for their means
    device.synchronize();
    allreduce.push_back(since(start));
  }
  std::vector<double> with, without;
  const auto timed_steps = [&](std::vector<double>& into) {
    for (int i = 0; i < steps_a_turn; ++i) {
      const auto start = Clock::now();
      step();
      device.synchronize();
      into.push_back(since(start));
    }
  };
  for (int turn = 0; turn < 2; ++turn) {
    timed_steps(with);
    reductions(false);
    timed_steps(without);
    reductions(true);
  }
  return communication_report(comm.size(), store.elements() * static_cast<std::int64_t>(sizeof(float)),
                              static_cast<std::int64_t>(buckets.buckets().size()), slowest_median(allreduce),
                              slowest_median(with), slowest_median(without));
}

// One case on one rank. The steps in order: describe the case, serve live metrics, open the
// data, build the trainer, measure, and report; a failure anywhere is the case's reason.
class CaseRun {
 public:
  CaseRun(const Options& o, Communicator& comm, Backend* backend)
      : o_(o), comm_(comm), backend_(backend), unit_(throughput_unit(o.model)) {}

  int run(const std::string& backend_error) {
    describe();
    start_live_metrics();
    // Rank 0's repeats outlive a stop signal: mpirun's SIGTERM when another rank ended, a pod's
    // deletion (stop_signals.hpp). Until the case's own document is written. Its deputy's too,
    // for a rank 0 ended outright (the OOM killer's SIGKILL, its node lost), which writes nothing.
    // The other ranks end a little later than they would: Open MPI kills every rank at once once
    // one has ended after its SIGTERM, and the deputy must outlive them to write.
    std::optional<StopGuard> stop_guard;
    if (keeps_the_repeats()) {
      stop_guard.emplace([this](int signal_number, const char* name) { return last_words(signal_number, name); },
                         comm_.rank() == 0);
    } else if (comm_.size() > 1) {
      stop_guard.emplace(
          [](int, const char*) {
            std::this_thread::sleep_for(kOthersStopDelay);
            return std::optional<int>();
          },
          false);
    }
    bool left_the_others = false;
    try {
      // What each rank's node can run, agreed: a node without bf16 among nodes with it must not
      // leave the others waiting in the first broadcast.
      agree([&] {
        if (const auto why = unsupported_precision(o_, backend_)) throw Unsupported(*why);
        if (backend_ == nullptr) throw BackendUnavailable(backend_error);
        if (const auto why = unsupported_step_graph(o_, backend_)) throw FailedAs(kReasonUnsupported, *why);
      });
      measure(*backend_);
    } catch (...) {
      const std::exception_ptr error = std::current_exception();
      const CaseFailure failure = failure_of(error);
      left_the_others = comm_.size() > 1 && !agreed(error);
      // Named as an agreed failure names the rank: this rank's document may be the case's (finish).
      const bool named = left_the_others && comm_.rank() != 0;
      fail(failure.reason, named ? "rank " + std::to_string(comm_.rank()) + ": " + failure.message : failure.message);
    }
    stop_guard.reset();
    const int exit_code = finish(left_the_others);
    // A failure the ranks did not agree on left the others inside a collective, where they would
    // wait until the case's timeout: this rank, having said why, ends the whole job.
    if (left_the_others) {
      std::cout.flush();
      std::cerr << "dlbench-worker rank " << comm_.rank() << ": ending the job: the other ranks wait in a collective"
                << std::endl;
      comm_.abort(exit_code == 0 ? kExitFailed : exit_code);
    }
    return exit_code;
  }

 private:
  // The case as this job runs it: ranks per node as they ran (an uneven spread is recorded as
  // ranks / nodes rounded up), the methodology, the environment.
  void describe() {
    const std::vector<std::string> hosts = comm_.hosts();
    const auto nodes = static_cast<int>(distinct(hosts).size());
    deputy_ = repeats_deputy(hosts);
    doc_.run = o_.run;
    doc_.model = o_.model;
    doc_.case_ = {nodes, (comm_.size() + nodes - 1) / nodes, static_cast<int>(o_.batch_size), o_.precision};
    doc_.image_size = static_cast<int>(o_.image_height);
    doc_.image_height = static_cast<int>(o_.image_height);
    doc_.image_width = static_cast<int>(o_.image_width);
    doc_.sequence_length = static_cast<int>(o_.sequence_length);
    doc_.devices = doc_.case_.devices();
    doc_.global_batch_size = static_cast<long>(doc_.case_.global_batch_size());
    doc_.methodology = {static_cast<int>(o_.warmup_steps), static_cast<int>(o_.measure_steps),
                        static_cast<int>(o_.repeats), o_.statistic,
                        StabilitySpec{o_.max_cv, static_cast<int>(o_.extra_repeats), false}};
    doc_.optimizer = OptimizerSpec{o_.optimizer, o_.learning_rate, o_.momentum, o_.weight_decay, o_.learning_rate_warmup_steps};
    doc_.environment = environment(backend_, o_, comm_, hosts);
    doc_.start_time = rfc3339_utc_now();
  }

  // Live metrics are an aid: without them the measurement goes on rather than being lost.
  void start_live_metrics() {
    if (o_.metrics_port < 0) return;
    const char* local_rank = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    const int port = o_.metrics_port == 0 ? 0 : static_cast<int>(o_.metrics_port) + (local_rank ? std::atoi(local_rank) : 0);
    try {
      live_ = std::make_unique<WorkerMetrics>(
          WorkerIdentity{o_.run, case_id(doc_.case_), std::string(to_string(o_.model)), std::string(to_string(o_.precision)),
                         o_.backend, comm_.name(), std::string(version()), backend_ != nullptr ? backend_->version_info() : "",
                         comm_.rank(), doc_.global_batch_size, std::string(unit_)},
          port);
      std::cerr << "dlbench-worker rank " << comm_.rank() << ": metrics on port " << live_->port() << "\n";
    } catch (const std::exception& e) {
      std::cerr << "dlbench-worker rank " << comm_.rank() << ": warning: no live metrics: " << e.what() << "\n";
    }
  }

  // What a failure means for the case: the reason and message its result gives it.
  struct CaseFailure {
    std::string reason;
    std::string message;
  };
  CaseFailure failure_of(const std::exception_ptr& error) const {
    try {
      std::rethrow_exception(error);
    } catch (const Agreed& e) {
      return failure_of(e.failure());
    } catch (const FailedAs& e) {
      return {e.reason(), e.what()};
    } catch (const Unsupported& e) {
      return {kReasonUnsupported,
              "--precision " + std::string(to_string(o_.precision)) + " on --backend " + o_.backend + ": " + e.what()};
    } catch (const DataUnavailable& e) {
      return {"DataUnavailable", e.what()};
    } catch (const BackendUnavailable& e) {
      return {"BackendUnavailable", "--backend " + o_.backend + ": " + e.what()};
#ifdef DLBENCH_HAVE_CUDA
    } catch (const CudaOutOfMemory& e) {
      return {"OutOfMemory", "device memory exhausted at batch size " + std::to_string(o_.batch_size) + ": asked for " +
                                 std::to_string(e.requested) + " bytes, " + std::to_string(e.free) + " of " +
                                 std::to_string(e.total) + " free"};
#endif
    } catch (const HostOutOfMemory& e) {
      return {"OutOfMemory", "at batch size " + std::to_string(o_.batch_size) + ", " + e.what()};
    } catch (const std::bad_alloc&) {
      return {"OutOfMemory", "host memory exhausted at batch size " + std::to_string(o_.batch_size)};
    } catch (const std::exception& e) {
      return {"WorkerError", e.what()};
    } catch (...) {
      return {"WorkerError", "an exception that is not a std::exception"};
    }
  }

  // A failure whose reason is given: another rank's, agreed on, or a case the backend cannot run.
  class FailedAs : public std::runtime_error {
   public:
    FailedAs(std::string reason, const std::string& message)
        : std::runtime_error(message), reason_(std::move(reason)) {}
    const std::string& reason() const { return reason_; }

   private:
    std::string reason_;
  };

  // What agree throws: a failure every rank throws at once, this rank's own or the first failed
  // rank's (`failure`), so that no rank is left in a collective and none ends the job for it.
  class Agreed : public std::runtime_error {
   public:
    explicit Agreed(std::exception_ptr failure)
        : std::runtime_error("a failure every rank agreed on"), failure_(std::move(failure)) {}
    const std::exception_ptr& failure() const { return failure_; }

   private:
    std::exception_ptr failure_;
  };
  static bool agreed(const std::exception_ptr& error) {
    try {
      std::rethrow_exception(error);
    } catch (const Agreed&) {
      return true;
    } catch (...) {
      return false;
    }
  }

  // Runs one step of the setup on every rank, then every rank learns whether any failed before
  // any of them enters a collective: a rank whose data path is missing, or whose buffers do not
  // fit in its pod's memory, must not leave the others waiting in a broadcast or an allreduce
  // (two ranks under one 2 GiB limit: rank 0 failed and wrote its result, rank 1 waited until
  // the job was killed). A rank that failed throws its own failure; the others the first failed
  // rank's reason, its message prefixed with the rank. Every rank then leaves together.
  void agree(const std::function<void()>& step) {
    if (comm_.size() == 1) {
      step();
      return;
    }
    std::exception_ptr mine;
    try {
      step();
    } catch (...) {
      mine = std::current_exception();
    }
    std::string said;
    if (mine) {
      const CaseFailure failure = failure_of(mine);
      said = failure.reason + "\n" + failure.message;
    }
    const std::vector<std::string> all = comm_.allgather(said);
    if (mine) throw Agreed(mine);
    for (std::size_t rank = 0; rank < all.size(); ++rank) {
      const auto split = all[rank].find('\n');
      if (split == std::string::npos) continue;
      throw Agreed(std::make_exception_ptr(
          FailedAs(all[rank].substr(0, split), "rank " + std::to_string(rank) + ": " + all[rank].substr(split + 1))));
    }
  }

  // After a repeat, and before a case is called a success: whether any rank's feed failed inside
  // the steps (its data path gone on its node), agreed on as the setup's failures are.
  void agree_on_feed() {
    if (!real_ || comm_.size() == 1) return;
    agree([this] {
      if (real_->feed_failure) std::rethrow_exception(real_->feed_failure);
    });
  }

  void open_data_set() {
    real_ = std::make_unique<RealData>();
    agree([this] {
      if (o_.data == "bertpretraining") {
        real_->shards = open_pretraining_shards(o_);
      } else if (o_.data == "cityscapes") {
        real_->cityscapes = input::scan_cityscapes(o_.data_path);
      } else {
        real_->folder = input::scan_image_folder(o_.data_path);
        if (real_->folder.classes.size() > static_cast<std::size_t>(kModelClasses)) {
          throw DataUnavailable("data.path " + o_.data_path + " has " + std::to_string(real_->folder.classes.size()) +
                                " class folders; the models have " + std::to_string(kModelClasses) + " outputs");
        }
      }
    });
  }

  // The pipeline for this rank's shard, timed alone; each step then waits for its next batch,
  // and the wait is part of the step: the methodology times it with the rest.
  void start_pipeline(Trainer& trainer, Workload& workload) {
    if (real_->shards) {
      // BERT's shards: the reader loads the rank's next shard while this one is read; only a
      // shard's load ever makes a step wait. Nothing is prefetched beyond that.
      const input::PretrainingReaderConfig config = pretraining_reader_config(o_, comm_.rank(), comm_.size());
      start_feed(
          trainer, workload, 0, [&] { real_->reader = std::make_unique<input::PretrainingReader>(*real_->shards, config); },
          [this] { real_->reader->next(); },
          [this](Trainer& t) {
            const input::SequenceBatch& batch = real_->reader->next();
            return [&t, &batch] { t.stage_sequences(batch.token_ids.data(), batch.block.data()); };
          });
      // The batches timed came from a shard in memory; its load, in the background, bounds the rate too.
      if (const double loads = real_->reader->load_rate(); loads > 0) {
        real_->pipeline_throughput = std::min(real_->pipeline_throughput, loads);
        if (live_) live_->set_input_pipeline_throughput(real_->pipeline_throughput);
      }
      return;
    }
    const auto layout = trainer.input().layout == Layout::nhwc ? input::PixelLayout::nhwc : input::PixelLayout::nchw;
    if (o_.data == "cityscapes") {
      real_->source = std::make_unique<input::CityscapesSource>(real_->cityscapes, static_cast<int>(o_.image_height),
                                                                static_cast<int>(o_.image_width), layout);
    } else {  // square: checked with the options
      real_->source = std::make_unique<input::ImageFolderSource>(real_->folder, static_cast<int>(o_.image_height), layout);
    }
    input::InputPipelineConfig config;
    config.batch_size = static_cast<int>(o_.batch_size);
    config.threads = static_cast<int>(o_.decode_threads);
    config.prefetch_batches = static_cast<int>(o_.prefetch_batches);
    config.seed = o_.seed;
    config.rank = comm_.rank();
    config.world = comm_.size();
    // The decoding threads convert to the input's type and write where the device copies from fastest.
    config.pixel_type = trainer.input().dtype;
    config.allocate_pixels = [&device = trainer.backend()](std::size_t bytes) { return device.allocate_host(bytes); };
    // Or they only decode, and the GPU resizes (its kernel beside the step before, as the copy),
    // unless that was only the default and its ring does not fit in the memory left.
    const InputResizeChoice resize = input_resize_choice(o_, trainer.backend());
    const auto open_pipeline = [&](bool resize_on_device) {
      config.resize_on_device = resize_on_device;
      return std::make_unique<input::InputPipeline>(*real_->source, config);
    };
    start_feed(
        trainer, workload, config.prefetch_batches,
        [&] {
          ResizeRouteTaken taken;
          real_->pipeline = open_on_resize_route(resize.where, resize.asked, open_pipeline, taken);
          if (!taken.why_host.empty()) {
            std::cerr << "dlbench-worker: " << taken.why_host << "\n";
            doc_.environment.backend_options["inputResize"] = "host";
            doc_.environment.backend_options["inputResizeReason"] = taken.why_host;
          }
        },
        [this] { real_->pipeline->next(); },
        [this](Trainer& t) -> std::function<void()> {
          const input::Batch batch = real_->pipeline->next();
          if (batch.packed_bytes != 0) {
            return [&t, batch, capacity = real_->pipeline->packed_capacity()] {
              t.stage_packed_images(batch.pixels, batch.packed_bytes, capacity, batch.packed_side, batch.pixel_type,
                                    batch.labels);
            };
          }
          return [&t, batch] { t.stage_batch(batch.pixels, batch.pixel_type, batch.labels); };
        });
  }

  // What both feeds share: `open` makes the feed and `skip` takes a batch from it, to time it
  // alone (after `prefetched` batches made while the model was set up), its failure (data
  // unavailable, a ring beyond the memory left) agreed on by every rank; then the first batch is staged, and each step trains on the batch staged
  // before it and, once queued, takes the next with `take` and stages it with what `take`
  // returns (Trainer::stage_batch: on a GPU its copy runs beside the step). The wait for the next
  // batch is timed: it is part of the step, whose time it overlaps on a GPU.
  void start_feed(Trainer& trainer, Workload& workload, int prefetched, const std::function<void()>& open,
                  const std::function<void()>& skip,
                  std::function<std::function<void()>(Trainer&)> take) {
    agree([&] {
      open();
      real_->pipeline_throughput = measure_pipeline_alone(skip, prefetched, o_.batch_size);
    });
    if (live_) live_->set_input_pipeline_throughput(real_->pipeline_throughput);
    take(trainer)();
    workload.step = [this, &trainer, take = std::move(take)] {
      train(trainer);
      // The staged batch's memory goes back to the pipeline when the next is taken.
      trainer.release_staged_host_memory();
      const auto begin = std::chrono::steady_clock::now();
      std::function<void()> stage;  // none once the feed failed: the next step trains on the batch it has
      if (!real_->feed_failure) {
        try {
          stage = take(trainer);
        } catch (...) {
          // Alone, the case ends here. With other ranks, leaving now would leave them in the
          // gradients' allreduce until the case's timeout, with no result: this rank keeps step.
          if (comm_.size() == 1) throw;
          real_->feed_failure = std::current_exception();
          std::cerr << "dlbench-worker rank " << comm_.rank() << ": " << failure_of(real_->feed_failure).message
                    << "; training on its last batch until the ranks agree at the end of this repeat\n";
        }
      }
      real_->waits.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
      if (stage) stage();
    };
  }

  // A step as the case runs it, from the warm-up on: the one DLBENCH_INJECT_FAILURE names throws
  // before it starts.
  void train(Trainer& trainer) {
    failpoint_.before_step();
    trainer.step();
  }

  // Steps are reported in the order they ran, once their repeat's marks are read.
  void on_step(int repeat, bool measured, double seconds) {
    double wait = 0;
    if (real_) {
      wait = real_->waits.front();
      real_->waits.pop_front();
      if (measured) {
        real_->measured_waits.push_back(wait);
        real_->measured_seconds += seconds;
      }
    }
    if (!live_) return;
    if (real_) live_->on_input_wait(wait);
    live_->on_step(repeat, measured, seconds);
  }

  void measure(Backend& device) {
    if (o_.data != "synthetic") open_data_set();
    // Every rank starts from the same weights. Drawn from the seed, each rank draws its share and
    // the ranks sum them (a value plus zeros is that value, bit for bit); each rank of a node
    // drawing all of them on its part of the cores cost two CPU ranks of BERT-base 3.5 s. From
    // --init-from's file, every rank reads it and rank 0's values are broadcast.
    const bool drawn_in_shares = o_.init_from.empty() && comm_.size() > 1;
    const ParameterStore::Share share =
        drawn_in_shares ? ParameterStore::Share{comm_.rank(), comm_.size()} : ParameterStore::Share{};
    std::unique_ptr<Trainer> owner;
    agree([&] {
      owner = make_trainer(o_, device, comm_.rank(), false, real_ && real_->shards ? real_->shards->max_predictions : 0,
                           share);
    });
    Trainer& trainer = *owner;
    // DLBENCH_LOG_LOSS_SCALE (set, not empty, not 0): each skipped step said as it happens, with
    // the loss, the gradients that overflowed and the first layers whose values did (the step run
    // again layer by layer; every step then waits for the device).
    if (const char* log = std::getenv("DLBENCH_LOG_LOSS_SCALE"); log != nullptr && *log != '\0' && *log != '0') {
      trainer.log_skipped_steps(&std::cerr, comm_.size() > 1 ? "dlbench-worker rank " + std::to_string(comm_.rank())
                                                              : "dlbench-worker");
    }
    ParameterStore& store = trainer.parameters();
    const auto bucket_bytes = static_cast<std::size_t>(o_.bucket_mb) << 20;
    if (drawn_in_shares) {
      // A gradient bucket at a time, so that the library's scratch stays a bucket's size.
      const auto chunk = std::max<std::int64_t>(1, static_cast<std::int64_t>(bucket_bytes / sizeof(float)));
      for (std::int64_t begin = 0; begin < store.elements(); begin += chunk) {
        comm_.start_allreduce(store.values() + begin, std::min(chunk, store.elements() - begin), Reduction::sum);
        comm_.complete_reductions();
      }
    } else {
      comm_.broadcast(store.values(), store.elements(), 0);
    }
    device.parameters_written();
    GradientBuckets buckets(comm_, store, bucket_bytes);
    const auto reductions = [&](bool on) {
      if (on) {
        trainer.set_gradients_ready([&](const std::vector<Parameter*>& ready) { buckets.gradients_ready(ready); });
        trainer.set_before_update([&] { buckets.finish(); });
      } else {
        trainer.set_gradients_ready(nullptr);
        trainer.set_before_update(nullptr);
      }
    };
    if (comm_.size() > 1) reductions(true);
    parameters_ = trainer.parameter_count();
    doc_.memory = MemoryReport{static_cast<double>(trainer.arena().planned_bytes()),
                               static_cast<double>(trainer.arena().unshared_bytes()), static_cast<double>(store.bytes()),
                               std::nullopt};
    if (live_) live_->set_memory(doc_.memory->activations, doc_.memory->parameters);
    const double macs = trainer.forward_macs_per_sample();
    doc_.flops_per_sample = {2.0 * macs, 6.0 * macs};  // backward ≈ 2 × forward
    trainer.use_step_graph(o_.cuda_graph);
    const std::unique_ptr<StepMarks> marks = device.make_step_marks();
    Workload workload{[&] { train(trainer); }, [&] { device.synchronize(); }, {}, {}, marks.get()};
    if (live_ || real_) workload.on_step = [this](int repeat, bool measured, double s) { on_step(repeat, measured, s); };
    if (real_) start_pipeline(trainer, workload);
    if (comm_.size() > 1) {
      workload.slowest_rank = [&](std::vector<double>& seconds) {
        comm_.max(seconds.data(), static_cast<std::int64_t>(seconds.size()));
      };
    }
    measure_repeats(trainer, device, workload);
    record_fused_blocks(trainer.network(), doc_.environment.backend_options);  // set up by the first step
    if (const auto state = trainer.loss_scale()) {  // amp: what the device decided, read once
      doc_.loss_scaling = LossScalingReport{state->scale, state->skipped, static_cast<std::int64_t>(trainer.steps_done()), {}};
      if (loss_scaling_trained_little(*doc_.loss_scaling)) doc_.loss_scaling->overflow = trace_an_overflow(trainer, workload);
    }
    doc_.environment.nccl_transport = comm_.transport();  // after the collectives: NCCL connects lazily
    if (real_) report_input();
    if (diverged()) {
      fail(kReasonLossNotFinite, describe_divergence());
      return;
    }
    if (comm_.size() > 1) {
      const int steps_a_turn = static_cast<int>(std::clamp<std::int64_t>(o_.measure_steps / 10, 1, 3));
      try {  // a failure here costs this diagnosis only, as the overflow trace's does
        doc_.communication = time_communication(device, comm_, buckets, store, workload.step, reductions, steps_a_turn);
        say_communication(*doc_.communication);
      } catch (const std::exception& e) {
        reductions(true);
        std::cerr << "dlbench-worker rank " << comm_.rank() << ": gradient reduction not timed: " << e.what() << "\n";
      }
    }
    if (o_.profile_steps > 0) doc_.profile = profile_steps(trainer, device, static_cast<int>(o_.profile_steps));
    agree_on_feed();  // the steps after the repeats (the reduction's timing, the profile) took batches too
    doc_.state = CaseState::Succeeded;
    if (const auto peak = peak_flops_per_second(doc_.environment.gpu_model, doc_.case_.precision)) {
      doc_.peak_flops_per_device = *peak;
      doc_.mfu = model_flops_utilization(doc_.flops_per_sample.training,
                                         reported_value(doc_.throughput->summary, doc_.methodology.statistic), *peak,
                                         doc_.devices);
    }
  }

  void say_communication(const CommunicationReport& c) const {
    if (comm_.rank() != 0) return;
    std::cerr << "  case " << case_id(doc_.case_) << " gradient reduction: " << std::fixed << std::setprecision(1)
              << static_cast<double>(c.gradient_bytes) / (1 << 20) << " MiB in " << c.buckets << " buckets, "
              << std::setprecision(2) << c.allreduce_seconds * 1e3 << " ms alone (bus bandwidth "
              << c.bus_bandwidth / 1e9 << " GB/s); a step " << c.step_seconds * 1e3 << " ms with it, "
              << c.step_seconds_without_reduction * 1e3 << " ms without: " << std::setprecision(1)
              << c.exposed_share * 100 << "% of the step\n";
  }

  // Where the repeats' loss scaling trained little: up to kOverflowSearchSteps more steps, untimed
  // and after everything measured, the first skipped one said and replayed layer by layer, so
  // that the result says where amp overflowed without a second run. Every rank runs the same
  // steps (a skip is decided on the reduced gradients, the same on each); each replays its own
  // batch, and rank 0's result carries every rank's, the ranks that located an inf or NaN first
  // (compose_rank_traces). A failure here costs the diagnosis only.
  std::string trace_an_overflow(Trainer& trainer, Workload& workload) {
    Trainer::OverflowTrace mine;
    try {
      mine = trainer.trace_first_overflow(workload.step, kOverflowSearchSteps);
    } catch (const std::exception& e) {
      mine = {std::string("not traced: ") + e.what(), Trainer::ReplayFinding::none};
    }
    std::string said = compose_rank_traces(gather_traces(comm_, mine));
    if (said.size() > kLossScalingOverflowMaxLength) said = said.substr(0, kLossScalingOverflowMaxLength - 3) + "...";
    return said;
  }

  // The repeats, measured again while they spread too much; the last --repeats are reported, the
  // earlier ones kept as discarded. Other load on the node and the GPU is read around them.
  void measure_repeats(Trainer& trainer, Backend& device, const Workload& unmetered) {
    const double bound = max_cv(doc_.methodology.stability, o_.backend == "cuda");
    std::vector<double> measured;  // every repeat's throughput, in run order
    std::vector<std::optional<double>> energies;  // a GPU case's: every device's joules, summed, in run order
    const std::unique_ptr<GpuMonitor> gpu_monitor = open_gpu_monitor(device, comm_.rank());
    Workload workload = unmetered;
    if (gpu_monitor) workload.energy_joules = [&] { return gpu_monitor->energy_joules(); };
    // The driver's own version where NVML tells it; CUDA's runtime knows only the CUDA version it supports.
    if (gpu_monitor && !gpu_monitor->driver_version().empty()) {
      doc_.environment.driver_version = gpu_monitor->driver_version();
    }
    if (gpu_monitor) gpu_monitor->start(std::chrono::milliseconds(100));
    const CpuCounters load_before = read_cpu_counters();
    std::vector<RepeatMeasurement> repeats;
    try {
      repeats = run_methodology(
          workload, doc_.methodology, doc_.global_batch_size,
          [&](int r, const RepeatMeasurement& m) {
            agree_on_feed();
            const double loss = loss_after_repeat(trainer);  // untimed
            doc_.loss_after_repeats.push_back(loss);
            measured.push_back(m.throughput);
            if (o_.backend == "cuda") energies.push_back(sum_where_every_rank_has(m.energy_joules, comm_));
            if (live_) {
              live_->on_repeat(m.throughput);
              live_->set_loss(loss);
            }
            if (keeps_the_repeats()) keep_for_a_stop(measured);
            if (comm_.rank() == 0) {
              std::cerr << "  case " << case_id(doc_.case_) << " repeat " << r + 1 << "/" << o_.repeats
                        << (r >= o_.repeats ? " (again: the last repeats spread too much)" : "") << ": " << std::fixed
                        << std::setprecision(2) << m.throughput << " " << unit_
                        << (std::isfinite(loss) ? "" : ", loss not finite: stopping") << "\n";
            }
            // More repeats would time steps that train nothing (an amp step that overflows is skipped).
            return std::isfinite(loss) ? AfterRepeat::go_on : AfterRepeat::stop;
          },
          [&] { return measure_again(measured, doc_.methodology.repeats, doc_.methodology.stability, bound); });
    } catch (...) {
      // Nothing measured is lost: the repeats that ended before the failure (a rank's data gone in
      // the third) stay in the Failed result, unjudged and never published, as a diverged case's.
      if (!measured.empty()) doc_.throughput = Throughput{std::string(unit_), summarize(measured), measured};
      throw;
    }
    // A diverged case keeps every repeat it ran, unjudged; otherwise the last `repeats` are reported.
    const auto reported = diverged() ? static_cast<std::ptrdiff_t>(measured.size()) : std::ptrdiff_t{doc_.methodology.repeats};
    if (!diverged()) doc_.stability = judge_stability(measured, doc_.methodology.repeats, bound);
    const std::vector<double> throughputs(measured.end() - reported, measured.end());
    std::vector<double> all_steps;
    for (auto r = repeats.end() - reported; r != repeats.end(); ++r) {
      all_steps.insert(all_steps.end(), r->step_seconds.begin(), r->step_seconds.end());
    }
    doc_.throughput = Throughput{std::string(unit_), summarize(throughputs), throughputs};
    // The reported repeats' energy, where every device counted it over every one of them.
    if (!diverged() && energies.size() == measured.size() &&
        std::all_of(energies.end() - reported, energies.end(), [](const auto& e) { return e && *e > 0; })) {
      for (auto e = energies.end() - reported; e != energies.end(); ++e) doc_.energy_joules.push_back(**e);
    }
    doc_.step_time_seconds = summarize(all_steps);
    if (doc_.stability && doc_.stability->verdict == StabilityVerdict::unstable) {
      doc_.reason = kReasonUnstable;
      doc_.message = describe_unstable(*doc_.stability, doc_.methodology.repeats, doc_.throughput->summary);
    }
    const InterferenceReport cpu_load = interference_between(load_before, read_cpu_counters());
    doc_.interference = node_interference(cpu_load, gpu_monitor ? std::optional(gpu_monitor->stop()) : std::nullopt, comm_);
  }

  // The loss after a repeat, the same on every rank: the highest rank's, or NaN where any rank's
  // was NaN. So every rank stops after the same repeat, and the result shows what stopped it.
  double loss_after_repeat(Trainer& trainer) {
    const double own = trainer.last_loss();
    if (comm_.size() == 1) return own;
    double worst[2] = {std::isnan(own) ? 1.0 : 0.0, std::isnan(own) ? -std::numeric_limits<double>::infinity() : own};
    comm_.max(worst, 2);
    return worst[0] > 0 ? std::numeric_limits<double>::quiet_NaN() : worst[1];
  }

  bool diverged() const {
    const std::vector<double>& losses = doc_.loss_after_repeats;
    return !losses.empty() && !std::isfinite(losses.back());
  }

  // Why a diverged case is not a result, what was kept, and what a user changes.
  std::string describe_divergence() const {
    const std::vector<double>& losses = doc_.loss_after_repeats;
    std::ostringstream m;
    m << dlbench::describe_divergence(losses) << " and the case stopped there ("
      << (losses.size() == 1 ? "the repeat run is" : "the " + std::to_string(losses.size()) + " repeats run are")
      << " kept in the result, not published). Lower the learning rate ("
      << o_.learning_rate << " here: spec.optimizer.learningRate, --learning-rate) or warm it up (spec.optimizer."
      << "learningRateWarmupSteps, --learning-rate-warmup-steps)";
    if (doc_.loss_scaling) {
      m << "; loss scaling skipped " << doc_.loss_scaling->skipped_steps << " of " << doc_.loss_scaling->steps
        << " steps, ending at scale " << doc_.loss_scaling->final_scale;
    }
    return m.str();
  }

  // The rank that waited longest and the slowest pipeline speak for the job.
  void report_input() {
    InputReport report;
    double total_wait = 0;
    for (const double w : real_->measured_waits) total_wait += w;
    const bool sequences = real_->reader != nullptr;
    const long skipped_count = sequences ? real_->reader->skipped_count() : real_->pipeline->skipped_count();
    std::vector<double> worst{total_wait, real_->measured_seconds > 0 ? total_wait / real_->measured_seconds : 0.0,
                              -real_->pipeline_throughput, static_cast<double>(skipped_count)};
    if (comm_.size() > 1) comm_.max(worst.data(), static_cast<std::int64_t>(worst.size()));
    report.wait_seconds = worst[0];
    report.wait_share = std::clamp(worst[1], 0.0, 1.0);
    report.wait_seconds_per_step = summarize(real_->measured_waits);
    report.pipeline_throughput = -worst[2];
    report.verdict = input_verdict(report.wait_share);
    report.decode_threads = sequences ? 1 : static_cast<int>(o_.decode_threads);  // the reader's one loading thread
    report.source = enum_from_string<DataSource>(o_.data).value_or(DataSource::imagefolder);
    report.files = sequences ? static_cast<long>(real_->shards->sequences) : static_cast<long>(real_->source->samples());
    report.skipped_files = static_cast<long>(worst[3]);
    for (const auto& skipped : sequences ? real_->reader->skipped_examples() : real_->pipeline->skipped_examples()) {
      report.skipped_examples.push_back(printable(skipped.path + ": " + skipped.why, 300));
    }
    doc_.input = report;
    if (live_) live_->set_input_verdict(report.wait_share, report.verdict == InputVerdict::input_bound);
  }

  void fail(const std::string& reason, const std::string& message) { mark_failed(doc_, reason, message); }
  static void mark_failed(ResultDocument& doc, const std::string& reason, const std::string& message) {
    doc.state = CaseState::Failed;
    doc.reason = reason;
    doc.message = message;
    // What only a success carries, dropped where the case failed after it was measured (in the
    // profile's steps, or a rank's feed there): the document would otherwise be invalid.
    doc.communication.reset();
    doc.energy_joules.clear();
    doc.mfu.reset();
  }

  // Rank 0 and its deputy: each has every repeat's throughput (the slowest rank's time) and loss.
  bool keeps_the_repeats() const { return comm_.rank() == 0 || comm_.rank() == deputy_; }

  // Rank 0 and its deputy, after each repeat: the document a stop signal writes, the repeats so far in it.
  void keep_for_a_stop(const std::vector<double>& measured) {
    ResultDocument doc = doc_;
    doc.throughput = Throughput{std::string(unit_), summarize(measured), measured};
    const std::lock_guard lock(stop_mutex_);
    measured_so_far_ = std::move(doc);
  }

  // After a stop signal, inside the second Open MPI gives a rank before its SIGKILL
  // (odls_base_sigkill_timeout, 1 s, named on every mpirun's command line by
  // mpirun_stop_arguments): rank 0 writes at once, and once it has ended Open MPI kills
  // the others at once, so that the deputy, later, writes only where rank 0 could not; the other
  // ranks end later still, since any rank's end brings that SIGKILL.
  static constexpr auto kDeputyDelay = std::chrono::milliseconds(300);
  static constexpr auto kOthersStopDelay = std::chrono::milliseconds(600);
  static_assert(kDeputyDelay < kOthersStopDelay && kOthersStopDelay < std::chrono::seconds(kRankSigkillGraceSeconds),
                "the deputy writes after rank 0 and before the others end, all inside the grace mpirun is given");

  // On the stop signals' thread: the repeats measured so far as a Failed result, and the exit
  // code of a process ended by the signal; before the first repeat, nothing (the signal's own
  // action: nothing measured is lost, and the launcher keeps the last lines). The deputy's
  // names its rank, and gives way to a document rank 0 wrote.
  std::optional<int> last_words(int signal_number, const char* name) {
    const bool deputy = comm_.rank() != 0;
    if (deputy) std::this_thread::sleep_for(kDeputyDelay);
    const std::lock_guard lock(stop_mutex_);
    if (!measured_so_far_) return std::nullopt;
    ResultDocument doc = *measured_so_far_;
    const std::size_t kept = doc.throughput->repeats.size();
    mark_failed(doc, kReasonStopped,
                (deputy ? "rank " + std::to_string(comm_.rank()) + ": " : std::string()) + "stopped by " + name + " after " +
                    std::to_string(kept) + (kept == 1 ? " repeat" : " repeats") + ", kept here unjudged" +
                    (deputy ? " for rank 0, which may have ended without writing them" : "") +
                    ": mpirun stops every rank so when one ends (the lines after this name it), "
                    "as do a pod's deletion and an interrupted run");
    doc.end_time = rfc3339_utc_now();
    if (doc.memory) doc.memory->peak_resident = peak_resident_bytes();
    std::cerr << "dlbench-worker" << (deputy ? " " : ": ") << doc.message << "\n";  // the deputy's names its rank
    write_document(o_, to_json(doc), false, deputy ? DocumentWriter::after_rank_zero : DocumentWriter::where_none_is);
    return 128 + signal_number;
  }

  // Rank 0 prints the table and writes the case's document; the others say why they failed, if
  // they did. A rank that `left_the_others` writes one too: rank 0 waits in a collective it will
  // never enter, and the abort that follows ends it unwritten (or stopped, writing what it
  // measured); this rank's document, its repeats before the failure kept, is the case's.
  int finish(bool left_the_others) {
    doc_.end_time = rfc3339_utc_now();
    if (doc_.memory) doc_.memory->peak_resident = peak_resident_bytes();
    if (live_) live_->finished(doc_.state == CaseState::Succeeded);
    const bool succeeded = doc_.state == CaseState::Succeeded;
    if (comm_.rank() != 0 && !left_the_others) {
      if (!succeeded) std::cerr << "dlbench-worker rank " << comm_.rank() << ": " << doc_.message << "\n";
      return succeeded ? 0 : kExitFailed;
    }
    print_table(o_.output.empty() ? std::cerr : std::cout, doc_, parameters_);
    return write_document(o_, to_json(doc_), succeeded,
                          comm_.rank() == 0 ? DocumentWriter::the_case : DocumentWriter::where_none_is);
  }

  const Options& o_;
  Communicator& comm_;
  Backend* backend_;
  const std::string_view unit_;  // core's word: sequences/s for bert-base
  ResultDocument doc_;
  std::unique_ptr<WorkerMetrics> live_;
  std::unique_ptr<RealData> real_;
  std::int64_t parameters_ = 0;
  StepFailpoint failpoint_{o_.inject_failure, comm_.rank()};
  std::mutex stop_mutex_;  // measured_so_far_, between the case and the stop signals' thread
  std::optional<ResultDocument> measured_so_far_;
  std::optional<int> deputy_;  // repeats_deputy: keeps the repeats beside rank 0
};

}  // namespace

int run_case(const Options& o, Communicator& comm, Backend* backend, const std::string& backend_error) {
  return CaseRun(o, comm, backend).run(backend_error);
}

}  // namespace dlbench::worker
