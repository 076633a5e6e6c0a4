#include "program/case_output.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include "cpu/cpu_backend.hpp"
#include "cpu_budget.hpp"
#include "dlbench/core/api_rules.hpp"
#include "dlbench/core/names.hpp"
#include "dlbench/core/status.hpp"
#include "dlbench/core/version.hpp"
#include "layer_profiler.hpp"
#include "layers/bottleneck.hpp"
#include "program/case_setup.hpp"
#ifdef DLBENCH_HAVE_CUDA
#include "cuda/cuda_backend.hpp"
#endif

namespace dlbench::worker {
namespace {

// "key=value;key=value" (Backend::version_info) -> the value of `key`, or "".
std::string info_value(const std::string& info, const std::string& key) {
  std::istringstream in(info);
  for (std::string item; std::getline(in, item, ';');) {
    if (item.rfind(key + "=", 0) == 0) return item.substr(key.size() + 1);
  }
  return "";
}

}  // namespace

std::vector<std::string> distinct(const std::vector<std::string>& hosts) {
  std::vector<std::string> out;
  for (const auto& h : hosts) {
    if (std::find(out.begin(), out.end(), h) == out.end()) out.push_back(h);
  }
  return out;
}

EnvironmentInfo environment(const Backend* backend, const Options& o, Communicator& communicator,
                            const std::vector<std::string>& hosts) {
  const long requested_threads = o.threads;  // 0: the default budget
  EnvironmentInfo e = host_environment();
  e.hosts = distinct(hosts);
  const ThreadBudget budget = default_thread_budget();
  e.cpu_cores = budget.threads;
  const std::string info = backend != nullptr ? backend->version_info() : "";
  if (const auto* cpu = dynamic_cast<const CpuBackend*>(backend)) {
    e.cpu_cores = cpu->threads();
    e.cpu_threads_reason = requested_threads > 0 ? "--threads " + std::to_string(requested_threads) : budget.reason;
    e.onednn_version = info_value(info, "onednn");
  }
#ifdef DLBENCH_HAVE_CUDA
  if (const auto* gpu = dynamic_cast<const CudaBackend*>(backend)) {
    e.gpu_model = gpu->properties().name;
    cudaGetDeviceCount(&e.gpu_count);
    e.driver_version = info_value(info, "driver");
    e.cuda_version = info_value(info, "cuda");
    e.cudnn_version = info_value(info, "cudnn");
  }
#endif
  if (backend != nullptr) e.backend_options = backend->options();
  // Whether the timed steps were one replayed graph, where the backend could have captured them.
  if (backend != nullptr && backend->can_capture()) e.backend_options["cudaGraph"] = o.cuda_graph ? "on" : "off";
  // Where an imagefolder case's images were resized (a refused choice has failed the case already).
  if (backend != nullptr && o.data == "imagefolder") {
    try {
      e.backend_options["inputResize"] = input_resized_on_device(o, *backend) ? "device" : "host";
    } catch (const std::invalid_argument&) {
    }
  }
  e.backend = o.backend;
  e.communicator = communicator.name();
  // Settings that shape what the ranks' reduction cost, recorded beside the backend's own.
  if (const std::string heap = communicator.reduction_heap(); !heap.empty()) e.backend_options["reductionHeap"] = heap;
  e.mpi_version = communicator.mpi_version();
  e.nccl_version = communicator.nccl_version();
  e.dlbench_version = version();
  return e;
}

void record_fused_blocks(Layer& network, std::map<std::string, std::string>& options) {
  const auto route = options.find("convBatchNorm");
  if (route == options.end() || route->second == "separate") return;
  const FusedBlocks count = count_fused_blocks(network);
  if (count.blocks == 0) return;
  options["convBatchNormBlocks"] = std::to_string(count.fused) + " of " + std::to_string(count.blocks);
  options["convBatchNormGradientBlocks"] = std::to_string(count.gradients) + " of " + std::to_string(count.blocks);
}

void print_table(std::ostream& out, const ResultDocument& doc, std::int64_t parameters) {
  const std::vector<double>& losses = doc.loss_after_repeats;
  out << "dlbench-worker: " << to_string(doc.model) << " on " << doc.environment.backend << " ("
      << doc.environment.cpu_model << ", " << doc.environment.cpu_cores << " threads), case " << case_id(doc.case_)
      << (doc.sequence_length > 0 ? ", sequence length " + std::to_string(doc.sequence_length)
                                  : ", image " + image_size_argument(doc.image_height, doc.image_width));
  // A case that failed before its model was built (no GPU, say) has no parameters or memory to tell.
  if (parameters > 0) {
    out << ", " << parameters << " parameters, activations " << std::fixed << std::setprecision(2)
        << (doc.memory ? doc.memory->activations : 0.0) / (1 << 30) << " GiB";
  }
  if (doc.memory && doc.memory->unshared_activations > 0) {
    out << " (" << std::setprecision(0) << 100.0 * doc.memory->activations / doc.memory->unshared_activations
        << "% of unshared)";
  }
  if (doc.memory && doc.memory->peak_resident) {
    out << ", peak resident " << std::setprecision(2) << *doc.memory->peak_resident / (1 << 30) << " GiB";
  }
  out << "\n";
  out << "  methodology: warm-up " << doc.methodology.warmup_steps << ", measure " << doc.methodology.measure_steps
      << ", repeats " << doc.methodology.repeats;
  if (const auto& t = doc.optimizer) {
    out << "; " << describe_optimizer(t->name, t->learning_rate, t->learning_rate_warmup_steps);
  }
  out << "\n";
  const std::string unit = doc.throughput ? doc.throughput->unit : "samples/s";
  out << "  repeat  " << std::setw(9) << unit << "   step ms   loss after\n";
  if (doc.throughput) {
    // Repeats measured again come first (discarded), then the reported ones; one loss per repeat.
    const std::size_t extra = doc.stability ? static_cast<std::size_t>(doc.stability->extra_repeats) : 0;
    for (std::size_t i = 0; i < extra + doc.throughput->repeats.size(); ++i) {
      const bool discarded = i < extra && i < doc.stability->discarded.size();
      if (i < extra && !discarded) continue;
      const double tp = discarded ? doc.stability->discarded[i] : doc.throughput->repeats[i - extra];
      out << "  " << std::setw(6) << i + 1 << "  " << std::setw(9) << std::fixed << std::setprecision(2) << tp << "  "
          << std::setw(8) << std::setprecision(2) << 1000.0 * static_cast<double>(doc.global_batch_size) / tp << "  "
          << std::setw(10) << std::setprecision(4) << (i < losses.size() ? losses[i] : 0.0)
          << (discarded ? "  (discarded: measured again)" : "") << "\n";
    }
    const auto& s = doc.throughput->summary;
    const double gflops = s.median * doc.flops_per_sample.training / 1e9;
    out << "  median " << std::setprecision(2) << s.median << " " << unit << " (min " << s.min << ", max " << s.max
        << ", cv " << std::setprecision(2) << 100.0 * s.cv << "%), " << std::setprecision(1) << gflops
        << " GFLOP/s of training arithmetic";
    if (doc.mfu) out << ", MFU " << std::setprecision(1) << 100.0 * *doc.mfu << "%";
    out << "\n";
    if (const auto energy = energy_report(doc)) {
      out << "  energy: " << std::setprecision(4) << energy->joules_per_sample << " J a sample ("
          << std::setprecision(1) << 1.0 / energy->joules_per_sample << " " << unit.substr(0, unit.find('/')) << " a joule), "
          << std::setprecision(0) << energy->watts_per_device << " W a device over the measured steps\n";
    }
    if (doc.stability) {
      out << "  stability: ";
      if (doc.stability->verdict == StabilityVerdict::unstable) {
        out << "UNSTABLE (" << doc.reason << "): " << doc.message << "\n";
      } else {
        out << "stable, cv " << std::setprecision(2) << 100.0 * doc.stability->cv << "% <= " << 100.0 * doc.stability->max_cv
            << "%";
        if (doc.stability->extra_repeats > 0) out << " after " << doc.stability->extra_repeats << " more repeats";
        out << "\n";
      }
    }
    if (doc.input) out << "  input: " << describe_input(*doc.input) << "\n";
    if (doc.interference) {
      out << "  other load: " << std::setprecision(1);
      if (doc.interference->cpu_pressure) out << "tasks waited for a CPU " << 100.0 * *doc.interference->cpu_pressure << "% of the time, ";
      out << "steal " << 100.0 * doc.interference->cpu_steal << "%";
      if (const auto& g = doc.interference->gpu) {
        out << "; GPU: " << g->other_processes << " other processes, SM clock " << std::setprecision(0)
            << g->sm_clock_min_mhz << "-" << g->sm_clock_median_mhz << " (median) of " << g->sm_clock_max_mhz << " MHz, "
            << g->temperature_max_c << " C at most, " << g->power_median_w << " W median";
        for (const GpuThrottleReason r : g->throttle_reasons) out << ", " << to_string(r);
      }
      out << ": " << to_string(doc.interference->verdict) << "\n";
    }
    if (const auto& l = doc.loss_scaling) {
      out << "  loss scaling: " << l->skipped_steps << " of " << l->steps
          << " steps skipped for an inf or NaN gradient, scale now " << std::defaultfloat << std::setprecision(6)
          << l->final_scale << std::fixed << "\n";
    }
    if (doc.profile) print_profile(out, *doc.profile);
  }
  // A diverged case (LossNotFinite) measured its repeats and still failed.
  if (doc.state != CaseState::Succeeded) out << "  FAILED: " << doc.reason << ": " << doc.message << "\n";
}

void print_check(std::ostream& out, const SelfTestCheck& c) {
  std::ostringstream error, bound;
  error << std::scientific << std::setprecision(2) << c.error;
  bound << std::scientific << std::setprecision(2) << c.bound;
  const bool measured = c.error != 0 || c.bound != 0;
  out << "  " << std::left << std::setw(5) << c.precision << " " << std::setw(40) << c.name << std::right << " "
      << std::setw(9) << (measured ? error.str() : "-") << " " << std::setw(9) << (measured ? bound.str() : "-") << "  "
      << std::left << std::setw(7) << to_string(c.outcome) << std::right << " " << c.detail << "\n";
  out.flush();  // line by line: a self-test killed at its deadline keeps the checks it printed
}

int write_document(const Options& o, const nlohmann::json& document, bool succeeded, DocumentWriter writer) {
  const std::string text = document.dump(2) + "\n";
  if (o.output.empty()) {
    std::cout << text;
  } else if (writer != DocumentWriter::the_case) {
    const int fd = open(o.output.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      if (errno != EEXIST || writer != DocumentWriter::after_rank_zero) {
        std::cerr << "dlbench-worker: " << o.output << " not written: "
                  << (errno == EEXIST ? "a result is there already" : std::strerror(errno)) << "\n";
      }
      return kExitFailed;
    }
    std::size_t written = 0;
    while (written < text.size()) {
      const ssize_t n = write(fd, text.data() + written, text.size() - written);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      written += static_cast<std::size_t>(n);
    }
    if (close(fd) != 0 || written < text.size()) {
      std::cerr << "dlbench-worker: cannot write " << o.output << "\n";
      return kExitFailed;
    }
  } else {
    std::ofstream out(o.output);
    out << text;
    if (!out) {
      std::cerr << "dlbench-worker: cannot write " << o.output << "\n";
      return kExitFailed;
    }
  }
  return succeeded ? 0 : kExitFailed;
}

}  // namespace dlbench::worker
