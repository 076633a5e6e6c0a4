#include "dlbench/core/result_document.hpp"

#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "decoder.hpp"
#include "dlbench/core/device_peaks.hpp"
#include "dlbench/core/statistics.hpp"

namespace dlbench {

using nlohmann::json;
using namespace detail;

namespace {

bool close(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(1.0, std::max(std::fabs(a), std::fabs(b))); }

json environment_to_json(const EnvironmentInfo& e) {
  json out = json::object();
  const auto put = [&](const char* key, const std::string& value) {
    if (!value.empty()) out[key] = value;
  };
  put("host", e.host);
  if (!e.hosts.empty()) out["hosts"] = e.hosts;
  put("os", e.os);
  put("cpuModel", e.cpu_model);
  if (e.cpu_cores > 0) out["cpuCores"] = e.cpu_cores;
  put("cpuThreadsReason", e.cpu_threads_reason);
  put("gpuModel", e.gpu_model);
  if (e.gpu_count > 0) out["gpuCount"] = e.gpu_count;
  put("driverVersion", e.driver_version);
  put("cudaVersion", e.cuda_version);
  put("cudnnVersion", e.cudnn_version);
  put("ncclVersion", e.nccl_version);
  put("mpiVersion", e.mpi_version);
  put("onednnVersion", e.onednn_version);
  put("backend", e.backend);
  put("communicator", e.communicator);
  put("dlbenchVersion", e.dlbench_version);
  put("framework", e.framework);
  put("frameworkVersion", e.framework_version);
  if (!e.facts.empty()) out["facts"] = e.facts;
  if (!e.backend_options.empty()) out["backendOptions"] = e.backend_options;
  if (e.nccl_transport) out["ncclTransport"] = nccl_transport_to_json(*e.nccl_transport);
  return out;
}

EnvironmentInfo decode_environment(Decoder& d, const json& obj, const std::string& path) {
  EnvironmentInfo e;
  if (!d.expect_object(obj, path)) return e;
  d.reject_unknown(obj, path, {"host", "hosts", "os", "cpuModel", "cpuCores", "cpuThreadsReason", "gpuModel", "gpuCount", "driverVersion",
                               "cudaVersion", "cudnnVersion", "ncclVersion", "mpiVersion", "onednnVersion", "backend",
                               "communicator", "dlbenchVersion", "framework", "frameworkVersion", "facts", "backendOptions",
                               "ncclTransport"});
  d.read_string(obj, path, "host", e.host);
  if (const json* hosts = Decoder::find(obj, "hosts")) {
    if (const json* items = d.list(*hosts, child(path, "hosts"), 0, 4096)) {
      for (std::size_t i = 0; i < items->size(); ++i) {
        if (auto h = d.string((*items)[i], element(child(path, "hosts"), i))) e.hosts.push_back(*h);
      }
    }
  }
  d.read_string(obj, path, "os", e.os);
  d.read_string(obj, path, "cpuModel", e.cpu_model);
  d.read_int(obj, path, "cpuCores", {0, 1 << 20}, e.cpu_cores);
  d.read_string(obj, path, "cpuThreadsReason", e.cpu_threads_reason);
  d.read_string(obj, path, "gpuModel", e.gpu_model);
  d.read_int(obj, path, "gpuCount", {0, 1 << 20}, e.gpu_count);
  d.read_string(obj, path, "driverVersion", e.driver_version);
  d.read_string(obj, path, "cudaVersion", e.cuda_version);
  d.read_string(obj, path, "cudnnVersion", e.cudnn_version);
  d.read_string(obj, path, "ncclVersion", e.nccl_version);
  d.read_string(obj, path, "mpiVersion", e.mpi_version);
  d.read_string(obj, path, "onednnVersion", e.onednn_version);
  if (d.require(obj, path, "backend", "the backend that ran the case, e.g. cpu or cuda")) {
    d.read_string(obj, path, "backend", e.backend);
  }
  d.read_string(obj, path, "communicator", e.communicator);
  d.read_string(obj, path, "dlbenchVersion", e.dlbench_version);
  d.read_string(obj, path, "framework", e.framework);
  d.read_string(obj, path, "frameworkVersion", e.framework_version);
  if (const json* facts = Decoder::find(obj, "facts")) {
    const std::string facts_path = child(path, "facts");
    if (d.expect_object(*facts, facts_path)) {
      for (const auto& [key, value] : facts->items()) {
        if (auto text = d.string(value, child(facts_path, key))) e.facts[key] = *text;
      }
    }
  }
  if (const json* options = Decoder::find(obj, "backendOptions")) {
    const std::string options_path = child(path, "backendOptions");
    if (d.expect_object(*options, options_path)) {
      for (const auto& [key, value] : options->items()) {
        if (auto text = d.string(value, child(options_path, key))) e.backend_options[key] = *text;
      }
    }
  }
  if (const json* t = Decoder::find(obj, "ncclTransport")) {
    e.nccl_transport = decode_nccl_transport(d, *t, child(path, "ncclTransport"));
  }
  return e;
}

// The document's "schema" tag must be `expected`.
void require_schema(Decoder& d, const json& document, const char* expected) {
  if (d.require(document, "", "schema", std::string("must be ") + expected)) {
    std::string schema;
    d.read_string(document, "", "schema", schema);
    if (document["schema"].is_string() && schema != expected) {
      d.fail("schema", "\"" + schema + "\" is not supported; this dlbench reads " + expected);
    }
  }
}

// A loss as JSON: a number, or protobuf's JSON spelling of a value JSON numbers cannot hold.
json loss_to_json(double loss) {
  if (std::isnan(loss)) return "NaN";
  if (std::isinf(loss)) return loss > 0 ? "Infinity" : "-Infinity";
  return loss;
}

std::optional<double> decode_loss(Decoder& d, const json& value, const std::string& path) {
  if (value.is_number()) return value.get<double>();
  if (value.is_string()) {
    const std::string text = value.get<std::string>();
    if (text == "NaN") return std::numeric_limits<double>::quiet_NaN();
    if (text == "Infinity") return std::numeric_limits<double>::infinity();
    if (text == "-Infinity") return -std::numeric_limits<double>::infinity();
  }
  d.fail(path, "expected a number, \"NaN\", \"Infinity\" or \"-Infinity\", got " + describe_type(value));
  return std::nullopt;
}

json layer_time_to_json(const LayerTime& t) {
  json out{{"kind", t.kind}, {"forwardSeconds", t.forward_seconds}, {"backwardSeconds", t.backward_seconds}};
  if (!t.name.empty()) out["name"] = t.name;
  return out;
}

json profile_to_json(const StepProfile& p) {
  json layers = json::array(), kinds = json::array();
  for (const LayerTime& t : p.layers) layers.push_back(layer_time_to_json(t));
  for (const LayerTime& t : p.kinds) kinds.push_back(layer_time_to_json(t));
  json out{{"steps", p.steps},
           {"stepSeconds", p.step_seconds},
           {"outsideLayersSeconds", p.outside_layers_seconds},
           {"layers", std::move(layers)},
           {"kinds", std::move(kinds)}};
  if (!p.outside_parts.empty()) {
    json parts = json::object();
    for (const StepPartTime& t : p.outside_parts) parts[t.part] = t.seconds;
    out["outsideParts"] = std::move(parts);
  }
  return out;
}

// lossAfterRepeats, where present (a compacted document may lack it), agrees with the rest: one
// loss per repeat run (the reported ones and the extra ones), and a loss that is not finite
// exactly when the reason is LossNotFinite.
void check_losses(Decoder& d, const ResultDocument& doc) {
  const auto& losses = doc.loss_after_repeats;
  if (losses.empty()) return;
  const bool diverged = std::any_of(losses.begin(), losses.end(), [](double l) { return !std::isfinite(l); });
  if (diverged != (doc.reason == kReasonLossNotFinite)) {
    d.fail(diverged ? "lossAfterRepeats" : "reason",
           "is " + std::string(kReasonLossNotFinite) + " exactly when a loss after a repeat is NaN or infinite");
  }
  if (diverged && doc.state == CaseState::Succeeded) d.fail("state", "cannot be Succeeded when the loss is not finite");
  if (!doc.throughput) return;
  const std::size_t run =
      doc.throughput->repeats.size() + (doc.stability ? static_cast<std::size_t>(doc.stability->extra_repeats) : 0);
  if (losses.size() != run) {
    d.fail("lossAfterRepeats", "has " + std::to_string(losses.size()) + " entries for " + std::to_string(run) +
                                   " repeats run (throughput.repeats and stability.extraRepeats)");
  }
}

void read_seconds(Decoder& d, const json& obj, const std::string& path, const char* key, double& out) {
  if (const json* v = d.require(obj, path, key, "seconds per step")) {
    if (auto x = d.measurement(*v, path + "." + key)) out = *x;
  }
}

// A profile's layers (named) or kinds (not).
std::vector<LayerTime> decode_layer_times(Decoder& d, const json& list, const std::string& path, bool named) {
  std::vector<LayerTime> out;
  if (!list.is_array()) {
    d.fail(path, "expected a list of {" + std::string(named ? "name, " : "") + "kind, forwardSeconds, backwardSeconds}");
    return out;
  }
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string at = path + "[" + std::to_string(i) + "]";
    if (!d.expect_object(list[i], at)) continue;
    if (named) {
      d.reject_unknown(list[i], at, {"name", "kind", "forwardSeconds", "backwardSeconds"});
    } else {
      d.reject_unknown(list[i], at, {"kind", "forwardSeconds", "backwardSeconds"});
    }
    LayerTime t;
    if (named && d.require(list[i], at, "name", "the layer's path")) d.read_string(list[i], at, "name", t.name);
    if (d.require(list[i], at, "kind", "the layer's kind")) d.read_string(list[i], at, "kind", t.kind);
    read_seconds(d, list[i], at, "forwardSeconds", t.forward_seconds);
    read_seconds(d, list[i], at, "backwardSeconds", t.backward_seconds);
    out.push_back(std::move(t));
  }
  return out;
}

// outsideParts: seconds by part, each a part of kStepParts, summing to outsideLayersSeconds.
std::vector<StepPartTime> decode_step_parts(Decoder& d, const json& parts, const std::string& path, double outside) {
  std::vector<StepPartTime> out;
  if (!parts.is_object()) {
    d.fail(path, "expected an object of seconds by part, got " + describe_type(parts));
    return out;
  }
  double sum = 0;
  for (const auto& [part, seconds] : parts.items()) {
    if (std::find(kStepParts.begin(), kStepParts.end(), part) == kStepParts.end()) {
      d.fail(path + "." + part, "unknown part; allowed: " + join(kStepParts));
      continue;
    }
    if (const auto s = d.measurement(seconds, path + "." + part)) {
      out.push_back({part, *s});
      sum += *s;
    }
  }
  // The parts are the rest of the step, whole: a sum that differs says the profile is not one.
  if (std::fabs(sum - outside) > 1e-9 * std::max(1.0, outside)) {
    std::ostringstream said;
    said << "the parts sum to " << sum << " s, not outsideLayersSeconds (" << outside << " s)";
    d.fail(path, said.str());
  }
  order_step_parts(out);
  return out;
}

std::optional<StepProfile> decode_profile(Decoder& d, const json& obj, const std::string& path) {
  if (!d.expect_object(obj, path)) return std::nullopt;
  d.reject_unknown(obj, path, {"steps", "stepSeconds", "outsideLayersSeconds", "layers", "kinds", "outsideParts"});
  StepProfile p;
  if (d.require(obj, path, "steps", "how many steps were profiled")) d.read_int(obj, path, "steps", {1, 1000000}, p.steps);
  read_seconds(d, obj, path, "stepSeconds", p.step_seconds);
  read_seconds(d, obj, path, "outsideLayersSeconds", p.outside_layers_seconds);
  if (const json* l = d.require(obj, path, "layers", "a list")) p.layers = decode_layer_times(d, *l, path + ".layers", true);
  if (const json* k = d.require(obj, path, "kinds", "a list")) p.kinds = decode_layer_times(d, *k, path + ".kinds", false);
  if (const json* parts = Decoder::find(obj, "outsideParts")) {
    p.outside_parts = decode_step_parts(d, *parts, path + ".outsideParts", p.outside_layers_seconds);
  }
  return p;
}

}  // namespace

void order_step_parts(std::vector<StepPartTime>& parts) {
  std::sort(parts.begin(), parts.end(), [](const StepPartTime& a, const StepPartTime& b) {
    return a.seconds != b.seconds ? a.seconds > b.seconds : a.part < b.part;
  });
}

EnvironmentInfo host_environment() {
  EnvironmentInfo e;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  e.host = host;
  utsname u{};
  if (uname(&u) == 0) e.os = std::string(u.sysname) + " " + u.release + " " + u.machine;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.starts_with("model name") && line.find(':') != std::string::npos) {
      e.cpu_model = line.substr(line.find(':') + 2);
      break;
    }
  }
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  e.cpu_cores = sched_getaffinity(0, sizeof allowed, &allowed) == 0
                    ? CPU_COUNT(&allowed)
                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return e;
}

json to_json(const ResultDocument& doc) {
  json case_json = to_json(doc.case_);
  case_json["id"] = case_id(doc.case_);
  json out{{"schema", kResultSchema},
           {"model", to_string(doc.model)},
           {"engine", to_string(doc.engine)},
           {"case", case_json},
           {"devices", doc.devices},
           {"globalBatchSize", doc.global_batch_size},
           {"methodology",
            {{"warmupSteps", doc.methodology.warmup_steps},
             {"measureSteps", doc.methodology.measure_steps},
             {"repeats", doc.methodology.repeats},
             {"statistic", to_string(doc.methodology.statistic)}}},
           {"modelFlopsPerSample", {{"forward", doc.flops_per_sample.forward}, {"training", doc.flops_per_sample.training}}},
           {"state", to_string(doc.state)},
           {"environment", environment_to_json(doc.environment)}};
  if (doc.sequence_length > 0) {
    out["sequenceLength"] = doc.sequence_length;
  } else if (doc.image_height > 0 && doc.image_width > 0 && doc.image_height != doc.image_width) {
    out["imageHeight"] = doc.image_height;
    out["imageWidth"] = doc.image_width;
  } else {
    out["imageSize"] = doc.image_height > 0 ? doc.image_height : doc.image_size;
  }
  if (!doc.run.empty()) out["run"] = doc.run;
  if (doc.optimizer) out["optimizer"] = optimizer_to_json(*doc.optimizer);
  if (!doc.reason.empty()) out["reason"] = doc.reason;
  if (!doc.message.empty()) out["message"] = doc.message;
  if (doc.throughput) out["throughput"] = throughput_to_json(*doc.throughput);
  if (doc.step_time_seconds) out["stepTimeSeconds"] = to_json(*doc.step_time_seconds);
  if (doc.input) out["input"] = input_report_to_json(*doc.input);
  if (doc.interference) out["interference"] = interference_to_json(*doc.interference);
  if (doc.stability) out["stability"] = stability_to_json(*doc.stability);
  if (doc.memory) {
    json memory{{"activationBytes", doc.memory->activations},
                {"unsharedActivationBytes", doc.memory->unshared_activations},
                {"parameterBytes", doc.memory->parameters}};
    if (doc.memory->peak_resident) memory["peakResidentBytes"] = *doc.memory->peak_resident;
    out["memory"] = std::move(memory);
  }
  if (doc.profile) out["profile"] = profile_to_json(*doc.profile);
  if (doc.loss_scaling) out["lossScaling"] = detail::loss_scaling_to_json(*doc.loss_scaling);
  if (!doc.loss_after_repeats.empty()) {
    json losses = json::array();
    for (const double loss : doc.loss_after_repeats) losses.push_back(loss_to_json(loss));
    out["lossAfterRepeats"] = std::move(losses);
  }
  if (doc.peak_flops_per_device) out["peakFlopsPerDevice"] = *doc.peak_flops_per_device;
  if (doc.mfu) out["mfu"] = *doc.mfu;
  if (!doc.energy_joules.empty()) out["energyJoules"] = doc.energy_joules;
  if (doc.communication) out["communication"] = detail::communication_to_json(*doc.communication);
  if (!doc.start_time.empty()) out["startTime"] = doc.start_time;
  if (!doc.end_time.empty()) out["endTime"] = doc.end_time;
  return out;
}

Decoded<ResultDocument> decode_result_document(const json& document) {
  Decoder d;
  ResultDocument doc;
  if (!d.expect_object(document, "")) return d.finish(std::move(doc));
  d.reject_unknown(document, "", {"schema", "run", "model", "engine", "case", "imageSize", "imageHeight", "imageWidth", "sequenceLength", "devices", "globalBatchSize",
                                  "methodology", "optimizer", "modelFlopsPerSample", "state", "reason", "message", "throughput",
                                  "peakFlopsPerDevice", "mfu", "stepTimeSeconds", "input", "memory", "profile", "lossScaling",
                                  "lossAfterRepeats", "interference", "stability", "energyJoules", "communication",
                                  "environment", "startTime", "endTime"});
  require_schema(d, document, kResultSchema);
  d.read_string(document, "", "run", doc.run);
  if (d.require(document, "", "model", "one of " + allowed_values<Model>())) d.read_enum(document, "", "model", doc.model);
  d.read_enum(document, "", "engine", doc.engine);
  bool case_ok = false;
  if (const json* c = d.require(document, "", "case", "{nodes, gpusPerNode, batchSizePerDevice, precision}")) {
    if (auto parsed = decode_case(d, *c, "case", true)) {
      doc.case_ = *parsed;
      case_ok = true;
    }
  }
  d.read_int(document, "", "imageSize", bounds::kImageSize, doc.image_size);
  d.read_int(document, "", "imageHeight", bounds::kImageSize, doc.image_height);
  d.read_int(document, "", "imageWidth", bounds::kImageSize, doc.image_width);
  d.read_int(document, "", "sequenceLength", bounds::kSequenceLength, doc.sequence_length);
  if ((doc.image_height > 0) != (doc.image_width > 0)) {
    d.fail(doc.image_height > 0 ? "imageWidth" : "imageHeight", "required with the other side (imageHeight and imageWidth)");
  }
  if (d.require(document, "", "devices", "nodes × gpusPerNode")) {
    d.read_int(document, "", "devices", {1, bounds::kNodes.max * bounds::kGpusPerNode.max}, doc.devices);
  }
  if (d.require(document, "", "globalBatchSize", "batchSizePerDevice × devices")) {
    std::int64_t global = 0;
    d.read_int64(document, "", "globalBatchSize", {1, std::numeric_limits<std::int64_t>::max()}, global);
    doc.global_batch_size = static_cast<long>(global);
  }
  if (case_ok && doc.devices != doc.case_.devices()) {
    d.fail("devices", std::to_string(doc.devices) + " does not match the case (" + std::to_string(doc.case_.devices()) +
                          " = nodes × gpusPerNode)");
  }
  if (case_ok && doc.global_batch_size != doc.case_.global_batch_size()) {
    d.fail("globalBatchSize", std::to_string(doc.global_batch_size) + " does not match the case (" +
                                  std::to_string(doc.case_.global_batch_size()) + " = batchSizePerDevice × devices)");
  }
  if (const json* o = Decoder::find(document, "optimizer")) doc.optimizer = decode_optimizer_that_ran(d, *o, "optimizer");
  if (const json* m = Decoder::find(document, "methodology")) {
    if (d.expect_object(*m, "methodology")) {
      d.reject_unknown(*m, "methodology", {"warmupSteps", "measureSteps", "repeats", "statistic"});
      d.read_int(*m, "methodology", "warmupSteps", bounds::kWarmupSteps, doc.methodology.warmup_steps);
      d.read_int(*m, "methodology", "measureSteps", bounds::kMeasureSteps, doc.methodology.measure_steps);
      d.read_int(*m, "methodology", "repeats", bounds::kRepeats, doc.methodology.repeats);
      d.read_enum(*m, "methodology", "statistic", doc.methodology.statistic);
    }
  } else {
    d.fail("methodology", "required; {warmupSteps, measureSteps, repeats, statistic}");
  }
  if (const json* f = Decoder::find(document, "modelFlopsPerSample")) {
    if (d.expect_object(*f, "modelFlopsPerSample")) {
      d.reject_unknown(*f, "modelFlopsPerSample", {"forward", "training"});
      if (const json* v = Decoder::find(*f, "forward")) {
        if (auto x = d.measurement(*v, "modelFlopsPerSample.forward")) doc.flops_per_sample.forward = *x;
      }
      if (const json* v = Decoder::find(*f, "training")) {
        if (auto x = d.measurement(*v, "modelFlopsPerSample.training")) doc.flops_per_sample.training = *x;
      }
    }
  }
  if (d.require(document, "", "state", "one of " + allowed_values<CaseState>())) {
    d.read_enum(document, "", "state", doc.state);
  }
  d.read_string(document, "", "reason", doc.reason);
  d.read_string(document, "", "message", doc.message);
  if (const json* t = Decoder::find(document, "throughput")) doc.throughput = decode_throughput(d, *t, "throughput");
  if (const json* s = Decoder::find(document, "stepTimeSeconds")) {
    doc.step_time_seconds = decode_summary(d, *s, "stepTimeSeconds", {});
  }
  if (const json* i = Decoder::find(document, "input")) doc.input = decode_input_report(d, *i, "input");
  if (const json* i = Decoder::find(document, "interference")) doc.interference = decode_interference(d, *i, "interference");
  if (const json* s = Decoder::find(document, "stability")) doc.stability = decode_stability(d, *s, "stability");
  if (const json* m = Decoder::find(document, "memory"); m != nullptr && d.expect_object(*m, "memory")) {
    d.reject_unknown(*m, "memory", {"activationBytes", "unsharedActivationBytes", "parameterBytes", "peakResidentBytes"});
    MemoryReport memory;
    const auto read = [&](const char* key, double& out) {
      if (const json* v = d.require(*m, "memory", key, "bytes")) {
        if (auto x = d.measurement(*v, std::string("memory.") + key)) out = *x;
      }
    };
    read("activationBytes", memory.activations);
    read("unsharedActivationBytes", memory.unshared_activations);
    read("parameterBytes", memory.parameters);
    if (const json* v = Decoder::find(*m, "peakResidentBytes")) memory.peak_resident = d.measurement(*v, "memory.peakResidentBytes");
    if (memory.activations > memory.unshared_activations) {
      d.fail("memory.activationBytes", "exceeds unsharedActivationBytes: sharing memory cannot take more");
    }
    doc.memory = memory;
  }
  if (const json* p = Decoder::find(document, "profile")) doc.profile = decode_profile(d, *p, "profile");
  if (const json* l = Decoder::find(document, "lossScaling")) doc.loss_scaling = detail::decode_loss_scaling(d, *l, "lossScaling");
  if (const json* c = Decoder::find(document, "communication")) {
    doc.communication = detail::decode_communication(d, *c, "communication");
  }
  if (const json* l = Decoder::find(document, "lossAfterRepeats")) {
    if (const json* items = d.list(*l, "lossAfterRepeats", 1, bounds::kMaxRepeatsRun)) {
      for (std::size_t i = 0; i < items->size(); ++i) {
        if (auto loss = decode_loss(d, (*items)[i], element("lossAfterRepeats", i))) doc.loss_after_repeats.push_back(*loss);
      }
    }
  }
  if (const json* p = Decoder::find(document, "peakFlopsPerDevice")) {
    doc.peak_flops_per_device = d.measurement(*p, "peakFlopsPerDevice");
  }
  if (const json* m = Decoder::find(document, "mfu")) {
    doc.mfu = d.measurement(*m, "mfu");
    if (doc.mfu && (*doc.mfu <= 0.0 || *doc.mfu > 1.0)) d.fail("mfu", "must be in (0, 1]");
  }
  if (doc.mfu.has_value() != doc.peak_flops_per_device.has_value()) {
    d.fail(doc.mfu ? "peakFlopsPerDevice" : "mfu", "mfu and peakFlopsPerDevice come together");
  }
  if (const json* e = Decoder::find(document, "energyJoules")) {
    if (const json* items = d.list(*e, "energyJoules", 1, bounds::kMaxRepeatsRun)) {
      for (std::size_t i = 0; i < items->size(); ++i) {
        // Kept in place when wrong, so that the count is judged apart from the values.
        const auto joules = d.measurement((*items)[i], element("energyJoules", i));
        if (joules && *joules == 0.0) d.fail(element("energyJoules", i), "must be > 0");
        doc.energy_joules.push_back(joules.value_or(0.0));
      }
    }
  }
  if (const json* e = d.require(document, "", "environment", "at least the backend")) {
    doc.environment = decode_environment(d, *e, "environment");
  }
  d.read_string(document, "", "startTime", doc.start_time);
  d.read_string(document, "", "endTime", doc.end_time);

  if (doc.state == CaseState::Succeeded) {
    if (Decoder::find(document, "throughput") == nullptr) {
      d.fail("throughput", "required when state is Succeeded");
    } else if (doc.throughput) {
      const auto& repeats = doc.throughput->repeats;
      if (static_cast<int>(repeats.size()) != doc.methodology.repeats) {
        d.fail("throughput.repeats", "has " + std::to_string(repeats.size()) + " entries; methodology.repeats is " +
                                         std::to_string(doc.methodology.repeats));
      } else {
        const SampleSummary expected = summarize(repeats);
        const SampleSummary& got = doc.throughput->summary;
        if (!close(got.median, expected.median)) {
          d.fail("throughput.median", "does not match the repeats (expected " + format_number(expected.median) + ")");
        }
        if (document["throughput"].contains("mean") && !close(got.mean, expected.mean)) {
          d.fail("throughput.mean", "does not match the repeats (expected " + format_number(expected.mean) + ")");
        }
        if (doc.stability) {
          const StabilityReport& st = *doc.stability;
          if (!close(st.cv, expected.cv)) {
            d.fail("stability.cv", "does not match the repeats (expected " + format_number(expected.cv) + ")");
          } else if ((st.verdict == StabilityVerdict::unstable) != (st.cv > st.max_cv)) {
            d.fail("stability.verdict", std::string(to_string(st.verdict)) + " does not follow from cv " +
                                            format_number(st.cv) + " against maxCv " + format_number(st.max_cv));
          }
          if ((st.verdict == StabilityVerdict::unstable) != (doc.reason == kReasonUnstable)) {
            d.fail("reason", "is " + std::string(kReasonUnstable) + " exactly when stability.verdict is unstable");
          }
        }
      }
    }
    if (!doc.energy_joules.empty() && doc.throughput && doc.energy_joules.size() != doc.throughput->repeats.size()) {
      d.fail("energyJoules", "has " + std::to_string(doc.energy_joules.size()) + " entries for " +
                                 std::to_string(doc.throughput->repeats.size()) + " throughput repeats; they must be as many");
    }
    if (doc.mfu && doc.peak_flops_per_device && doc.throughput) {
      const double expected = model_flops_utilization(doc.flops_per_sample.training,
                                                      reported_value(doc.throughput->summary, doc.methodology.statistic),
                                                      *doc.peak_flops_per_device, doc.devices);
      if (!close(*doc.mfu, expected)) {
        d.fail("mfu", "does not match modelFlopsPerSample.training x throughput / (peakFlopsPerDevice x devices) = " +
                          format_number(expected));
      }
    }
  } else if (doc.reason.empty() && Decoder::find(document, "state") != nullptr) {
    d.fail("reason", "required when state is " + std::string(to_string(doc.state)));
  }
  if (doc.state != CaseState::Succeeded && !doc.energy_joules.empty()) {
    d.fail("energyJoules", "only with a Succeeded case's throughput");
  }
  if (Decoder::find(document, "communication") != nullptr) {
    if (doc.state != CaseState::Succeeded) d.fail("communication", "only with a Succeeded case's throughput");
    if (doc.devices < 2) d.fail("communication", "only where more than one rank reduced gradients (devices is 1)");
  }
  check_losses(d, doc);

  return d.finish(std::move(doc));
}

namespace {

// Drops parts of a document, in the caller's order, only while its compact form is over `limit`.
class Shrinker {
 public:
  Shrinker(const std::string& json_text, std::size_t limit) : doc(json::parse(json_text)), text_(doc.dump()), limit_(limit) {}
  json doc;

  bool over() const { return text_.size() > limit_; }
  template <typename Drop>
  void shrink(Drop&& drop) {
    if (!over()) return;
    drop();
    text_ = doc.dump();
  }
  // What the status does not keep goes first; then what it does (status.results[].environment).
  void drop_environment_details() {
    shrink([&] {
      for (const char* key : {"os", "cpuThreadsReason"}) doc["environment"].erase(key);
    });
    shrink([&] {
      for (const char* key : {"cpuModel", "driverVersion", "onednnVersion", "dlbenchVersion", "mpiVersion"}) {
        doc["environment"].erase(key);
      }
    });
  }
  std::string finish(const std::string& what) const {
    if (over()) {
      throw std::runtime_error(what + " of " + std::to_string(text_.size()) + " bytes does not fit a termination message");
    }
    return text_;
  }

 private:
  std::string text_;
  std::size_t limit_;
};

}  // namespace

std::string compact_result_document(const std::string& json_text, std::size_t limit) {
  Shrinker s(json_text, limit);
  json& doc = s.doc;
  s.shrink([&] { doc.erase("profile"); });
  s.shrink([&] {
    if (doc.contains("stability")) doc["stability"].erase("discarded");  // the worker's log lists every repeat
  });
  s.shrink([&] { doc.erase("lossAfterRepeats"); });  // and every loss; a LossNotFinite message says which
  s.shrink([&] { doc["environment"].erase("hosts"); });
  s.shrink([&] { doc["environment"].erase("facts"); });
  s.shrink([&] { doc.erase("stepTimeSeconds"); });
  s.shrink([&] { doc.erase("memory"); });
  s.shrink([&] { doc.erase("communication"); });  // the status loses where a multi-rank case's time went
  s.shrink([&] {
    if (doc.contains("input")) {
      doc["input"].erase("waitSecondsPerStep");
      doc["input"].erase("skippedExamples");
    }
  });
  s.drop_environment_details();
  s.shrink([&] {
    if (doc.contains("lossScaling")) doc["lossScaling"].erase("overflow");  // the worker's log says it too
  });
  s.shrink([&] { doc.erase("message"); });
  return s.finish("result document");
}

std::string describe_divergence(const std::vector<double>& losses) {
  const auto printable = [](double loss) -> std::string {
    if (std::isnan(loss)) return "NaN";
    if (std::isinf(loss)) return loss > 0 ? "+infinity" : "-infinity";
    std::ostringstream out;
    out << std::setprecision(4) << loss;
    return out.str();
  };
  const auto first = std::find_if(losses.begin(), losses.end(), [](double l) { return !std::isfinite(l); });
  if (first == losses.end()) return "every loss after a repeat was finite";
  const auto repeat = first - losses.begin() + 1;
  std::string m = "the loss after repeat " + std::to_string(repeat) + " was " + printable(*first);
  if (repeat > 1) m += " (after repeat 1: " + printable(losses.front()) + ")";
  return m + ": training diverged, so the steps timed did not train the model";
}

CaseEnvironment case_environment(const EnvironmentInfo& e) {
  return {.dlbench_version = e.dlbench_version,
          .backend = e.backend,
          .communicator = e.communicator,
          .cpu_model = e.cpu_model,
          .gpu_model = e.gpu_model,
          .driver_version = e.driver_version,
          .cuda_version = e.cuda_version,
          .cudnn_version = e.cudnn_version,
          .nccl_version = e.nccl_version,
          .mpi_version = e.mpi_version,
          .onednn_version = e.onednn_version,
          .framework = e.framework,
          .framework_version = e.framework_version,
          .backend_options = e.backend_options};
}

std::optional<EnergyReport> energy_report(const ResultDocument& doc) {
  if (doc.state != CaseState::Succeeded || !doc.throughput || doc.energy_joules.empty() ||
      doc.energy_joules.size() != doc.throughput->repeats.size()) {
    return std::nullopt;
  }
  const double samples = static_cast<double>(doc.global_batch_size) * doc.methodology.measure_steps;
  std::vector<double> per_sample, watts;
  for (std::size_t r = 0; r < doc.energy_joules.size(); ++r) {
    per_sample.push_back(doc.energy_joules[r] / samples);
    // A repeat's measured time is samples / its throughput.
    watts.push_back(per_sample.back() * doc.throughput->repeats[r] / doc.devices);
  }
  return EnergyReport{reported_value(summarize(per_sample), doc.methodology.statistic),
                      reported_value(summarize(watts), doc.methodology.statistic)};
}

CaseResult to_case_result(const ResultDocument& document, int attempts) {
  CaseResult r;
  r.case_ = document.case_;
  r.state = document.state;
  r.throughput = document.throughput;
  r.step_time_seconds = document.step_time_seconds;
  r.input = document.input;
  r.interference = document.interference;
  r.stability = document.stability;
  r.nccl_transport = document.environment.nccl_transport;
  r.optimizer = document.optimizer;
  r.environment = case_environment(document.environment);
  if (std::all_of(document.loss_after_repeats.begin(), document.loss_after_repeats.end(),
                  [](double loss) { return std::isfinite(loss); })) {
    r.loss_after_repeats = document.loss_after_repeats;
  }
  r.loss_scaling = document.loss_scaling;
  // The arithmetic of a measured case whose worker counted it (engine: command's cannot).
  if (document.state == CaseState::Succeeded && document.throughput && document.flops_per_sample.training > 0) {
    FlopsReport flops;
    flops.training_per_sample = document.flops_per_sample.training;
    flops.per_second_per_device = document.flops_per_sample.training *
                                  reported_value(document.throughput->summary, document.methodology.statistic) /
                                  static_cast<double>(document.devices);
    flops.peak_per_device = document.peak_flops_per_device;
    flops.mfu = document.mfu;
    r.flops = flops;
  }
  r.energy = energy_report(document);
  r.communication = document.communication;
  r.reason = document.reason;
  r.message = document.message;
  r.attempts = attempts;
  r.start_time = document.start_time;
  r.completion_time = document.end_time;
  return r;
}

json to_json(const SelfTestDocument& doc) {
  json checks = json::array();
  for (const SelfTestEntry& c : doc.checks) {
    checks.push_back({{"rank", c.rank}, {"precision", c.precision}, {"name", c.name}, {"outcome", c.outcome},
                      {"error", std::isfinite(c.error) ? json(c.error) : json(nullptr)}, {"bound", c.bound},
                      {"detail", c.detail}});
  }
  json out{{"schema", kSelfTestSchema},
           {"nodes", doc.nodes},
           {"devices", doc.devices},
           {"precisions", doc.precisions},
           {"state", to_string(doc.state)},
           {"summary", {{"passed", doc.passed}, {"failed", doc.failed}, {"skipped", doc.skipped}}},
           {"failedRanks", doc.failed_ranks},
           {"checks", checks},
           {"environment", environment_to_json(doc.environment)},
           {"startTime", doc.start_time},
           {"endTime", doc.end_time}};
  if (!doc.run.empty()) out["run"] = doc.run;
  if (!doc.reason.empty()) out["reason"] = doc.reason;
  if (!doc.message.empty()) out["message"] = doc.message;
  return out;
}

Decoded<SelfTestDocument> decode_self_test_document(const json& document) {
  Decoder d;
  SelfTestDocument doc;
  if (!d.expect_object(document, "")) return d.finish(std::move(doc));
  d.reject_unknown(document, "", {"schema", "run", "nodes", "devices", "precisions", "state", "reason", "message",
                                  "summary", "failedRanks", "checks", "environment", "startTime", "endTime"});
  require_schema(d, document, kSelfTestSchema);
  d.read_string(document, "", "run", doc.run);
  d.read_int(document, "", "nodes", bounds::kNodes, doc.nodes);
  if (d.require(document, "", "devices", "the ranks that ran the self-test")) {
    d.read_int(document, "", "devices", {1, bounds::kNodes.max * bounds::kGpusPerNode.max}, doc.devices);
  }
  if (const json* precisions = Decoder::find(document, "precisions")) {
    if (const json* items = d.list(*precisions, "precisions", 0, 4)) {
      for (std::size_t i = 0; i < items->size(); ++i) {
        if (auto p = d.enumeration<Precision>((*items)[i], element("precisions", i))) {
          doc.precisions.emplace_back(to_string(*p));
        }
      }
    }
  }
  if (d.require(document, "", "state", "Succeeded or Failed")) d.read_enum(document, "", "state", doc.state);
  d.read_string(document, "", "reason", doc.reason);
  d.read_string(document, "", "message", doc.message);
  if (doc.state != CaseState::Succeeded && doc.reason.empty()) d.fail("reason", "required when state is Failed");
  if (const json* summary = d.require(document, "", "summary", "{passed, failed, skipped}")) {
    if (d.expect_object(*summary, "summary")) {
      d.reject_unknown(*summary, "summary", {"passed", "failed", "skipped"});
      d.read_int(*summary, "summary", "passed", {0, 1 << 30}, doc.passed);
      d.read_int(*summary, "summary", "failed", {0, 1 << 30}, doc.failed);
      d.read_int(*summary, "summary", "skipped", {0, 1 << 30}, doc.skipped);
    }
  }
  if (doc.state == CaseState::Succeeded && doc.failed > 0) {
    d.fail("state", "Succeeded with " + std::to_string(doc.failed) + " failed checks");
  }
  if (const json* ranks = Decoder::find(document, "failedRanks")) {
    if (const json* items = d.list(*ranks, "failedRanks", 0, 1 << 20)) {
      for (std::size_t i = 0; i < items->size(); ++i) {
        if (auto r = d.integer((*items)[i], element("failedRanks", i), {0, doc.devices - 1})) {
          doc.failed_ranks.push_back(static_cast<int>(*r));
        }
      }
    }
  }
  if (const json* checks = Decoder::find(document, "checks")) {
    if (const json* items = d.list(*checks, "checks", 0, static_cast<std::int64_t>(kSelfTestListedChecks))) {
      for (std::size_t i = 0; i < items->size(); ++i) {
        const json& c = (*items)[i];
        const std::string path = element("checks", i);
        if (!d.expect_object(c, path)) continue;
        d.reject_unknown(c, path, {"rank", "precision", "name", "outcome", "error", "bound", "detail"});
        SelfTestEntry e;
        d.read_int(c, path, "rank", {0, doc.devices - 1}, e.rank);
        d.read_string(c, path, "precision", e.precision);
        d.read_string(c, path, "name", e.name);
        d.read_string(c, path, "outcome", e.outcome);
        if (e.outcome != "failed" && e.outcome != "skipped") {
          d.fail(child(path, "outcome"), "\"" + e.outcome + "\" is not one of failed, skipped (passed checks are counted, not listed)");
        }
        // A NaN error is written as null.
        if (const json* error = Decoder::find(c, "error"); error != nullptr && !error->is_null()) {
          if (auto v = d.measurement(*error, child(path, "error"))) e.error = *v;
        } else if (error != nullptr) {
          e.error = std::numeric_limits<double>::quiet_NaN();
        }
        if (const json* bound = Decoder::find(c, "bound")) {
          if (auto v = d.measurement(*bound, child(path, "bound"))) e.bound = *v;
        }
        d.read_string(c, path, "detail", e.detail);
        doc.checks.push_back(e);
      }
    }
  }
  if (const json* env = d.require(document, "", "environment", "{host, backend, ...}")) {
    doc.environment = decode_environment(d, *env, "environment");
  }
  d.read_string(document, "", "startTime", doc.start_time);
  d.read_string(document, "", "endTime", doc.end_time);
  return d.finish(std::move(doc));
}

std::string compact_self_test_document(const std::string& json_text, std::size_t limit) {
  Shrinker s(json_text, limit);
  json& doc = s.doc;
  s.shrink([&] { doc["environment"].erase("hosts"); });
  s.drop_environment_details();
  while (s.over() && doc.contains("checks") && !doc["checks"].empty()) {
    s.shrink([&] { doc["checks"].erase(doc["checks"].size() - 1); });
  }
  s.shrink([&] { doc["failedRanks"] = json::array(); });
  s.shrink([&] {
    if (!doc.contains("message")) return;
    std::string message = doc["message"].get<std::string>();
    message.resize(std::min(message.size(), std::size_t{200}));
    doc["message"] = message;
  });
  return s.finish("self-test document");
}

CaseResult to_case_result(const SelfTestDocument& document, const CaseSpec& preflight, int attempts) {
  CaseResult r;
  r.case_ = preflight;
  r.state = document.state;
  r.environment = case_environment(document.environment);
  r.reason = document.reason;
  r.message = document.message;
  r.attempts = attempts;
  r.start_time = document.start_time;
  r.completion_time = document.end_time;
  return r;
}

}  // namespace dlbench
