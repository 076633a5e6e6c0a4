#include "dlbench/core/codec.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "dlbench/core/api_rules.hpp"
#include "dlbench/core/planner.hpp"
#include "decoder.hpp"

namespace dlbench {

using nlohmann::json;

namespace {

using namespace detail;

// ---- spec ------------------------------------------------------------------------------

std::vector<int> decode_int_set(Decoder& d, const json& value, const std::string& path, IntBounds b) {
  std::vector<int> out;
  const json* items = d.list(value, path, 1, bounds::kMaxMatrixValues);
  if (items == nullptr) return out;
  std::map<std::int64_t, std::size_t> seen;
  for (std::size_t i = 0; i < items->size(); ++i) {
    auto number = d.integer((*items)[i], element(path, i), b);
    if (!number) continue;
    if (auto [it, inserted] = seen.emplace(*number, i); !inserted) {
      d.fail(element(path, i), std::to_string(*number) + " is listed twice (also at " + element(path, it->second) + ")");
      continue;
    }
    out.push_back(static_cast<int>(*number));
  }
  return out;
}

Matrix decode_matrix(Decoder& d, const json& obj, const std::string& path) {
  Matrix m;
  if (!d.expect_object(obj, path)) return m;
  d.reject_unknown(obj, path, {"nodes", "gpusPerNode", "batchSizePerDevice", "precision"});
  if (const json* v = d.require(obj, path, "nodes", "for example [1, 2, 4]")) {
    m.nodes = decode_int_set(d, *v, child(path, "nodes"), bounds::kNodes);
  }
  if (const json* v = d.require(obj, path, "gpusPerNode", "for example [1, 8]")) {
    m.gpus_per_node = decode_int_set(d, *v, child(path, "gpusPerNode"), bounds::kGpusPerNode);
  }
  if (const json* v = d.require(obj, path, "batchSizePerDevice", "for example [64, 128]")) {
    m.batch_size_per_device = decode_int_set(d, *v, child(path, "batchSizePerDevice"), bounds::kBatchSizePerDevice);
  }
  if (const json* v = d.require(obj, path, "precision", "a list of " + allowed_values<Precision>())) {
    const std::string list_path = child(path, "precision");
    if (const json* items = d.list(*v, list_path, 1, bounds::kMaxMatrixValues)) {
      std::set<Precision> seen;
      for (std::size_t i = 0; i < items->size(); ++i) {
        auto p = d.enumeration<Precision>((*items)[i], element(list_path, i));
        if (!p) continue;
        if (!seen.insert(*p).second) {
          d.fail(element(list_path, i), quote((*items)[i]) + " is listed twice");
          continue;
        }
        m.precision.push_back(*p);
      }
    }
  }
  return m;
}

std::vector<CaseSpec> decode_cases(Decoder& d, const json& value, const std::string& path) {
  std::vector<CaseSpec> out;
  const json* items = d.list(value, path, 1, bounds::kMaxExplicitCases);
  if (items == nullptr) return out;
  std::map<std::string, std::size_t> seen;
  for (std::size_t i = 0; i < items->size(); ++i) {
    auto c = decode_case(d, (*items)[i], element(path, i), false);
    if (!c) continue;
    const std::string id = case_id(*c);
    if (auto [it, inserted] = seen.emplace(id, i); !inserted) {
      d.fail(element(path, i), "case " + id + " is listed twice (also at " + element(path, it->second) + ")");
      continue;
    }
    out.push_back(*c);
  }
  return out;
}

std::optional<DataVolume> decode_data_volume(Decoder& d, const json& obj, const std::string& path) {
  if (!d.expect_object(obj, path)) return std::nullopt;
  d.reject_unknown(obj, path, {"persistentVolumeClaim", "hostPath", "nfs", "subPath"});
  const std::size_t errors_before = d.errors.size();
  DataVolume v;
  int sources = 0;
  const auto absolute = [](const std::string& t) { return t.size() <= bounds::kMaxDataPathLength && t.starts_with('/'); };
  const std::string absolute_what = "an absolute path (starting with '/') of at most 4096 characters";
  if (const json* pvc = Decoder::find(obj, "persistentVolumeClaim")) {
    ++sources;
    const std::string p = child(path, "persistentVolumeClaim");
    if (d.expect_object(*pvc, p)) {
      d.reject_unknown(*pvc, p, {"claimName"});
      if (d.require(*pvc, p, "claimName", "the PersistentVolumeClaim's name, in the BenchmarkRun's namespace")) {
        d.read_name(*pvc, p, "claimName", [](const std::string& t) { return is_dns1123_subdomain(t); },
                    "a PersistentVolumeClaim name (a DNS-1123 subdomain)", v.claim_name);
      }
    }
  }
  if (const json* host = Decoder::find(obj, "hostPath")) {
    ++sources;
    const std::string p = child(path, "hostPath");
    if (d.expect_object(*host, p)) {
      d.reject_unknown(*host, p, {"path"});
      if (d.require(*host, p, "path", "the directory on every node")) d.read_name(*host, p, "path", absolute, absolute_what, v.host_path);
    }
  }
  if (const json* nfs = Decoder::find(obj, "nfs")) {
    ++sources;
    const std::string p = child(path, "nfs");
    if (d.expect_object(*nfs, p)) {
      d.reject_unknown(*nfs, p, {"server", "path"});
      if (d.require(*nfs, p, "server", "the NFS server's host name or IP address")) {
        d.read_name(*nfs, p, "server", [](const std::string& t) { return !t.empty() && t.size() <= 253; },
                    "a host name or IP address of 1 to 253 characters", v.nfs_server);
      }
      if (d.require(*nfs, p, "path", "the exported directory")) d.read_name(*nfs, p, "path", absolute, absolute_what, v.nfs_path);
    }
  }
  if (sources != 1) {
    d.fail(path, "set exactly one volume source: persistentVolumeClaim, hostPath or nfs (" + std::to_string(sources) +
                     " given)");
  }
  d.read_name(obj, path, "subPath",
              [](const std::string& t) {
                return !t.empty() && t.size() <= bounds::kMaxDataPathLength && !t.starts_with('/') && has_no_backsteps(t);
              },
              "a relative path inside the volume without '..' segments", v.sub_path);
  if (d.errors.size() != errors_before) return std::nullopt;
  return v;
}

void decode_data(Decoder& d, const json& obj, const std::string& path, DataSpec& out) {
  if (!d.expect_object(obj, path)) return;
  d.reject_unknown(obj, path,
                   {"source", "imageSize", "imageHeight", "imageWidth", "sequenceLength", "path", "volume", "decodeThreads",
                    "prefetchBatches"});
  d.read_enum(obj, path, "source", out.source);
  d.read_int(obj, path, "imageSize", bounds::kImageSize, out.image_size);
  d.read_int(obj, path, "imageHeight", bounds::kImageSize, out.image_height);
  d.read_int(obj, path, "imageWidth", bounds::kImageSize, out.image_width);
  d.read_int(obj, path, "sequenceLength", bounds::kSequenceLength, out.sequence_length);
  const bool has_height = Decoder::find(obj, "imageHeight") != nullptr, has_width = Decoder::find(obj, "imageWidth") != nullptr;
  if (has_height != has_width) {
    d.fail(child(path, has_height ? "imageWidth" : "imageHeight"),
           "required with " + std::string(has_height ? "imageHeight" : "imageWidth") +
               ": set both for a height x width input (e.g. imageHeight: 512, imageWidth: 1024), or neither");
  }
  d.read_int(obj, path, "decodeThreads", bounds::kDecodeThreads, out.decode_threads);
  d.read_int(obj, path, "prefetchBatches", bounds::kPrefetchBatches, out.prefetch_batches);
  const json* data_path = Decoder::find(obj, "path");
  const json* volume = Decoder::find(obj, "volume");
  if (out.source != DataSource::synthetic) {
    const char* what_path =
        out.source == DataSource::imagefolder
            ? "the directory of class folders of images (JPEG, PNG or WebP), the same absolute path on every node"
        : out.source == DataSource::cityscapes
            ? "Cityscapes' root (leftImg8bit/train and gtFine/train inside), the same absolute path on every node"
            : "the directory of BERT pretraining shards (NVIDIA's HDF5 files) or one shard, the same absolute path on "
              "every node";
    if (d.require(obj, path, "path", what_path)) {
      d.read_name(obj, path, "path",
                  [](const std::string& t) { return t.size() <= bounds::kMaxDataPathLength && is_data_mount_path(t); },
                  "an absolute directory path of at most 4096 characters, not '/', without '..' segments and "
                  "outside /dlbench",
                  out.path);
    }
    if (volume != nullptr) out.volume = decode_data_volume(d, *volume, child(path, "volume"));
  } else {
    const std::string source(to_string(out.source));
    if (data_path != nullptr) {
      d.fail(child(path, "path"),
             "only allowed when source is imagefolder, cityscapes or bertpretraining (source is " + source + ")");
    }
    if (volume != nullptr) {
      d.fail(child(path, "volume"),
             "only allowed when source is imagefolder, cityscapes or bertpretraining (source is " + source + ")");
    }
  }
}

void decode_methodology(Decoder& d, const json& obj, const std::string& path, Methodology& out) {
  if (!d.expect_object(obj, path)) return;
  d.reject_unknown(obj, path, {"warmupSteps", "measureSteps", "repeats", "statistic", "stability"});
  d.read_int(obj, path, "warmupSteps", bounds::kWarmupSteps, out.warmup_steps);
  d.read_int(obj, path, "measureSteps", bounds::kMeasureSteps, out.measure_steps);
  d.read_int(obj, path, "repeats", bounds::kRepeats, out.repeats);
  d.read_enum(obj, path, "statistic", out.statistic);
  const json* stability = Decoder::find(obj, "stability");
  if (stability == nullptr) return;
  const std::string s_path = child(path, "stability");
  if (!d.expect_object(*stability, s_path)) return;
  d.reject_unknown(*stability, s_path, {"maxCv", "extraRepeats", "includeUnstable"});
  d.read_number(*stability, s_path, "maxCv", bounds::kMaxCv, out.stability.max_cv);
  d.read_int(*stability, s_path, "extraRepeats", bounds::kExtraRepeats, out.stability.extra_repeats);
  d.read_bool(*stability, s_path, "includeUnstable", out.stability.include_unstable);
}

void decode_resource_name(Decoder& d, const json& obj, const std::string& path, std::string_view key,
                          std::string& out) {
  d.read_name(obj, path, key, [](const std::string& t) { return t.size() <= 253 && is_extended_resource_name(t); },
              "an extended resource name (domain/name of at most 253 characters, the domain not kubernetes.io), "
              "such as nvidia.com/gpu, amd.com/gpu or rdma/hca_shared_devices_a",
              out);
}

// DNS-1123 subdomains where Kubernetes wants them on the pod: schedulerName, priorityClassName.
void read_optional_subdomain(Decoder& d, const json& obj, const std::string& path, std::string_view key,
                             std::string& out) {
  d.read_name(obj, path, key, [](const std::string& t) { return t.empty() || is_dns1123_subdomain(t); },
              "a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', at most 253 characters)", out);
}

}  // namespace

void detail::decode_tolerations(Decoder& d, const json& list, const std::string& list_path, std::vector<Toleration>& out) {
  if (const json* items = d.list(list, list_path, 0, 64)) {
    for (std::size_t i = 0; i < items->size(); ++i) {
      const json& t = (*items)[i];
      const std::string t_path = element(list_path, i);
      if (!d.expect_object(t, t_path)) continue;
      d.reject_unknown(t, t_path, {"key", "operator", "value", "effect", "tolerationSeconds"});
      Toleration tol;
      d.read_name(t, t_path, "key", [](const std::string& k) { return k.empty() || is_qualified_name(k); },
                  "a taint key ([prefix/]name, as label keys are)", tol.key);
      d.read_enum(t, t_path, "operator", tol.operator_);
      d.read_name(t, t_path, "value", is_label_value,
                  "a taint value (empty, or up to 63 letters, digits, '-', '_' or '.', beginning and ending with a "
                  "letter or digit)",
                  tol.value);
      d.read_enum(t, t_path, "effect", tol.effect);
      if (const json* seconds = Decoder::find(t, "tolerationSeconds")) {
        tol.toleration_seconds =
            d.integer(*seconds, child(t_path, "tolerationSeconds"), {0, std::numeric_limits<std::int64_t>::max()});
        if (tol.effect != TaintEffect::NoExecute) {
          d.fail(child(t_path, "tolerationSeconds"), "only allowed with effect: NoExecute");
        }
      }
      if (tol.operator_ == TolerationOperator::Exists && !tol.value.empty()) {
        d.fail(child(t_path, "value"), "must be empty when operator is Exists");
      }
      if (tol.key.empty() && tol.operator_ == TolerationOperator::Equal) {
        d.fail(child(t_path, "key"), "required when operator is Equal (an empty key needs operator: Exists)");
      }
      out.push_back(tol);
    }
  }
}

void detail::decode_env(Decoder& d, const json& list, const std::string& list_path, std::vector<EnvVar>& out) {
  if (const json* items = d.list(list, list_path, 0, 256)) {
    for (std::size_t i = 0; i < items->size(); ++i) {
      const json& e = (*items)[i];
      const std::string e_path = element(list_path, i);
      if (!d.expect_object(e, e_path)) continue;
      d.reject_unknown(e, e_path, {"name", "value", "valueFrom"});
      EnvVar var;
      if (d.require(e, e_path, "name", "an environment variable name")) {
        d.read_name(e, e_path, "name",
                    [](const std::string& n) { return n.size() <= bounds::kMaxEnvNameLength && is_env_var_name(n); },
                    "a valid environment variable name (letters, digits, '_', '-' and '.', not beginning with a "
                    "digit, at most 256 characters)",
                    var.name);
      }
      if (const json* value = Decoder::find(e, "value")) {
        var.value = d.string(*value, child(e_path, "value"));
        if (var.value && !d.within_length(*var.value, child(e_path, "value"), bounds::kMaxEnvValueLength)) {
          var.value.reset();
        }
      }
      if (const json* from = Decoder::find(e, "valueFrom")) {
        const std::string from_path = child(e_path, "valueFrom");
        // Exactly one source, as Kubernetes requires; what the reference names is checked by
        // the API server when the operator creates the pod.
        if (d.expect_object(*from, from_path)) {
          d.reject_unknown(*from, from_path, {"fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef"});
          if (from->size() != 1) {
            d.fail(from_path, "must set exactly one of fieldRef, resourceFieldRef, configMapKeyRef, secretKeyRef");
          }
          for (const auto& [source, ref] : from->items()) d.expect_object(ref, child(from_path, source));
          var.value_from = *from;
        }
        if (var.value) d.fail(e_path, "set either value or valueFrom, not both");
      }
      out.push_back(var);
    }
  }
}

namespace {

void decode_worker(Decoder& d, const json& obj, const std::string& path, WorkerSpec& out) {
  if (!d.expect_object(obj, path)) return;
  d.reject_unknown(obj, path, {"image", "gpuResource", "rdma", "nodeSelector", "tolerations", "env",
                               "schedulerName", "priorityClassName", "shareNodes", "gang", "qosClass"});
  d.read_string(obj, path, "image", bounds::kMaxImageLength, out.image);
  if (out.image.find_first_of(" \t\n\r\f\v") != std::string::npos) {
    d.fail(child(path, "image"), "\"" + printable(out.image) + "\" must not contain whitespace");
  }
  decode_resource_name(d, obj, path, "gpuResource", out.gpu_resource);
  if (const json* rdma = Decoder::find(obj, "rdma")) {
    const std::string rdma_path = child(path, "rdma");
    if (d.expect_object(*rdma, rdma_path)) {
      d.reject_unknown(*rdma, rdma_path, {"resource", "perNode", "required"});
      RdmaSpec spec;
      if (d.require(*rdma, rdma_path, "resource", "an extended resource name such as rdma/hca_shared_devices_a")) {
        decode_resource_name(d, *rdma, rdma_path, "resource", spec.resource);
      }
      d.read_int(*rdma, rdma_path, "perNode", bounds::kRdmaPerNode, spec.per_node);
      d.read_bool(*rdma, rdma_path, "required", spec.required);
      out.rdma = spec;
    }
  }
  if (const json* selector = Decoder::find(obj, "nodeSelector")) {
    d.label_map(*selector, child(path, "nodeSelector"), bounds::kMaxNodeSelectorEntries, true, out.node_selector);
  }
  if (const json* tolerations = Decoder::find(obj, "tolerations")) {
    detail::decode_tolerations(d, *tolerations, child(path, "tolerations"), out.tolerations);
  }
  if (const json* env = Decoder::find(obj, "env")) detail::decode_env(d, *env, child(path, "env"), out.env);
  read_optional_subdomain(d, obj, path, "schedulerName", out.scheduler_name);
  read_optional_subdomain(d, obj, path, "priorityClassName", out.priority_class_name);
  d.read_bool(obj, path, "shareNodes", out.share_nodes);
  d.read_enum(obj, path, "qosClass", out.qos_class);
  if (const json* gang = Decoder::find(obj, "gang")) {
    const std::string g_path = child(path, "gang");
    if (d.expect_object(*gang, g_path)) {
      d.reject_unknown(*gang, g_path, {"scheduler", "queueName"});
      GangSpec g;
      if (d.require(*gang, g_path, "scheduler", "one of " + allowed_values<GangScheduler>())) {
        d.read_enum(*gang, g_path, "scheduler", g.scheduler);
      }
      d.read_string(*gang, g_path, "queueName", g.queue_name);
      const bool kueue = g.scheduler == GangScheduler::kueue;
      if (kueue && Decoder::find(*gang, "queueName") == nullptr) {
        d.fail(child(g_path, "queueName"), "required when scheduler is kueue (the LocalQueue's name)");
      } else if (!kueue && Decoder::find(*gang, "queueName") != nullptr) {
        d.fail(child(g_path, "queueName"), "only allowed when scheduler is kueue");
      } else if (kueue && !is_label_value(g.queue_name)) {
        d.fail(child(g_path, "queueName"), "\"" + printable(g.queue_name) +
                                               "\" is not a valid label value: up to 63 letters, digits, '-', '_' or "
                                               "'.', starting and ending with a letter or digit");
      }
      out.gang = g;
    }
  }
}

void decode_limits(Decoder& d, const json& obj, const std::string& path, Limits& out) {
  if (!d.expect_object(obj, path)) return;
  d.reject_unknown(obj, path, {"caseTimeoutSeconds", "backoffLimit"});
  d.read_int(obj, path, "caseTimeoutSeconds", bounds::kCaseTimeoutSeconds, out.case_timeout_seconds);
  d.read_int(obj, path, "backoffLimit", bounds::kBackoffLimit, out.backoff_limit);
}

// spec.cudaGraph: true needs dlbench-worker (engine native) and one device a case, the first
// multi-device value named.
void check_cuda_graph(Decoder& d, const BenchmarkRunSpec& spec, const std::string& path) {
  const std::string field = child(path, "cudaGraph");
  if (spec.engine != Engine::native) {
    d.fail(field, "only with engine: native (a step graph is dlbench-worker's; engine is " +
                      std::string(to_string(spec.engine)) + ")");
    return;
  }
  const auto one_device = [&](const std::string& where, int value) {
    d.fail(field, "true runs one device a case (the gradient allreduce is driven from the host, outside the graph), and " +
                      where + " is " + std::to_string(value) + "; allowed with cudaGraph true: 1");
  };
  if (spec.matrix) {
    for (std::size_t i = 0; i < spec.matrix->nodes.size(); ++i) {
      if (spec.matrix->nodes[i] != 1) return one_device(element(child(path, "matrix.nodes"), i), spec.matrix->nodes[i]);
    }
    for (std::size_t i = 0; i < spec.matrix->gpus_per_node.size(); ++i) {
      if (spec.matrix->gpus_per_node[i] != 1) {
        return one_device(element(child(path, "matrix.gpusPerNode"), i), spec.matrix->gpus_per_node[i]);
      }
    }
  }
  for (std::size_t i = 0; i < spec.cases.size(); ++i) {
    if (spec.cases[i].devices() != 1) {
      return one_device(element(child(path, "cases"), i) + "'s devices (nodes x gpusPerNode)", spec.cases[i].devices());
    }
  }
}

BenchmarkRunSpec decode_spec(Decoder& d, const json& obj, const std::string& path) {
  BenchmarkRunSpec spec;
  if (!d.expect_object(obj, path)) return spec;
  d.reject_unknown(obj, path, {"model", "engine", "command", "data", "matrix", "cases", "methodology", "optimizer",
                               "worker", "limits", "preflight", "podTemplateOverrides", "cudaGraph"});
  if (d.require(obj, path, "model", "one of " + allowed_values<Model>())) d.read_enum(obj, path, "model", spec.model);
  d.read_enum(obj, path, "engine", spec.engine);
  const json* command = Decoder::find(obj, "command");
  if (spec.engine == Engine::command) {
    if (command == nullptr) {
      d.fail(child(path, "command"), "required when engine is command: the training command's argv, run on every node of a case "
                                     "with the case in DLBENCH_* variables, e.g. [python3, train.py]");
    }
  } else if (command != nullptr) {
    d.fail(child(path, "command"), "only allowed when engine is command (engine is " +
                                       std::string(to_string(spec.engine)) + ")");
  }
  if (command != nullptr && spec.engine == Engine::command) {
    const std::string list_path = child(path, "command");
    if (const json* items = d.list(*command, list_path, 1, bounds::kMaxCommandArgs)) {
      for (std::size_t i = 0; i < items->size(); ++i) {
        if (auto arg = d.string((*items)[i], element(list_path, i))) {
          if (!d.within_length(*arg, element(list_path, i), bounds::kMaxCommandArgLength)) continue;
          if (i == 0 && arg->empty()) d.fail(element(list_path, i), "the program name must not be empty");
          spec.command.push_back(*arg);
        }
      }
    }
  }

  if (const json* data = Decoder::find(obj, "data")) decode_data(d, *data, child(path, "data"), spec.data);
  const std::string data_path = child(path, "data");
  const int shorter_side = std::min(spec.data.height(), spec.data.width());
  // Within the field's bounds, a model may need more.
  if (const MinImageSize least = min_image_size(spec.model); !is_sequence_model(spec.model) && shorter_side < least.pixels) {
    const std::string field =
        spec.data.image_height == 0 ? "imageSize" : (spec.data.height() == shorter_side ? "imageHeight" : "imageWidth");
    d.fail(child(data_path, field), std::to_string(shorter_side) + " is too small for " +
                                        std::string(to_string(spec.model)) + ": " + std::string(least.needed_by) +
                                        " needs " + std::to_string(least.pixels) + " or more (set data.imageSize: " +
                                        std::to_string(least.pixels) + ")");
  }
  if (spec.model == Model::deeplabv3plus && spec.data.source == DataSource::imagefolder) {
    d.fail(child(data_path, "source"), "imagefolder is not allowed for deeplabv3plus: it trains on a label per pixel and "
                                       "imagefolder data has one per image; allowed: synthetic, cityscapes");
  }
  if (spec.model == Model::bert_base && spec.data.source != DataSource::synthetic &&
      spec.data.source != DataSource::bertpretraining) {
    d.fail(child(data_path, "source"), std::string(to_string(spec.data.source)) +
                                           " is not allowed for bert-base: it trains on token sequences; allowed: "
                                           "synthetic, bertpretraining");
  }
  if (spec.data.source == DataSource::bertpretraining && !is_sequence_model(spec.model)) {
    d.fail(child(data_path, "source"), "bertpretraining is not allowed for " + std::string(to_string(spec.model)) +
                                           ": it trains on images and bertpretraining holds token sequences (for "
                                           "bert-base); allowed: synthetic, " +
                                           (spec.model == Model::deeplabv3plus ? "cityscapes" : "imagefolder"));
  }
  if (spec.data.source == DataSource::cityscapes && spec.model != Model::deeplabv3plus && !is_sequence_model(spec.model)) {
    d.fail(child(data_path, "source"), "cityscapes is not allowed for " + std::string(to_string(spec.model)) +
                                           ": it trains on a label per image and cityscapes has one per pixel "
                                           "(a segmentation data set, for deeplabv3plus); allowed: synthetic, imagefolder");
  }
  // A sequence model has no image size. imageSize keeps its default (224) because defaulting
  // writes it into every BenchmarkRun, the API server's as well as ours.
  if (is_sequence_model(spec.model)) {
    const auto refuse = [&](const char* field, int value) {
      d.fail(child(data_path, field), std::to_string(value) + " is not for " + std::string(to_string(spec.model)) +
                                          ": it trains on token sequences; set data.sequenceLength");
    };
    if (spec.data.image_size != defaults::kImageSize) refuse("imageSize", spec.data.image_size);
    if (spec.data.image_height > 0) refuse("imageHeight", spec.data.image_height);
  }
  if (!is_sequence_model(spec.model) && spec.data.sequence_length > 0) {
    d.fail(child(data_path, "sequenceLength"), "only for a sequence model (bert-base); " +
                                                   std::string(to_string(spec.model)) + " takes images (data.imageSize)");
  }
  if (spec.data.source == DataSource::imagefolder && spec.data.height() != spec.data.width()) {
    d.fail(child(data_path, "imageHeight"), "imagefolder crops are square: set imageSize, or use synthetic data for " +
                                                std::to_string(spec.data.height()) + " x " +
                                                std::to_string(spec.data.width()));
  }

  const json* matrix = Decoder::find(obj, "matrix");
  const json* cases = Decoder::find(obj, "cases");
  if (matrix != nullptr && cases != nullptr) {
    d.fail(path, "set either matrix or cases, not both");
  } else if (matrix == nullptr && cases == nullptr) {
    d.fail(child(path, "matrix"), "required: set matrix (nodes × gpusPerNode × batchSizePerDevice × precision) "
                                  "or an explicit list of cases");
  }
  if (matrix != nullptr) spec.matrix = decode_matrix(d, *matrix, child(path, "matrix"));
  if (cases != nullptr) spec.cases = decode_cases(d, *cases, child(path, "cases"));

  if (const json* m = Decoder::find(obj, "methodology")) {
    decode_methodology(d, *m, child(path, "methodology"), spec.methodology);
  }
  if (const json* o = Decoder::find(obj, "optimizer")) detail::decode_optimizer(d, *o, child(path, "optimizer"), spec.optimizer);
  if (const json* w = Decoder::find(obj, "worker")) decode_worker(d, *w, child(path, "worker"), spec.worker);
  if (const json* l = Decoder::find(obj, "limits")) decode_limits(d, *l, child(path, "limits"), spec.limits);
  if (const json* p = Decoder::find(obj, "preflight")) {
    const std::string p_path = child(path, "preflight");
    if (d.expect_object(*p, p_path)) {
      d.reject_unknown(*p, p_path, {"selfTest"});
      PreflightSpec preflight;
      d.read_bool(*p, p_path, "selfTest", preflight.self_test);
      if (preflight.self_test && spec.engine != Engine::native) {
        d.fail(child(p_path, "selfTest"), "only with engine: native (the self-test is dlbench-worker's; engine is " +
                                              std::string(to_string(spec.engine)) + ")");
      }
      spec.preflight = preflight;
    }
  }
  if (const json* o = Decoder::find(obj, "podTemplateOverrides")) {
    const std::string o_path = child(path, "podTemplateOverrides");
    detail::decode_pod_template_overrides(d, *o, o_path, spec.pod_template_overrides);
    detail::check_pod_template_overrides(d, spec, o_path);
  }
  d.read_bool(obj, path, "cudaGraph", spec.cuda_graph);
  if (spec.cuda_graph) check_cuda_graph(d, spec, path);
  return spec;
}

ObjectMeta decode_metadata(Decoder& d, const json& obj, const std::string& path) {
  ObjectMeta meta;
  if (!d.expect_object(obj, path)) return meta;
  // ObjectMeta's own fields: the API server refuses others (kubectl's strict field validation).
  d.reject_unknown(obj, path, {"name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
                               "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
                               "annotations", "ownerReferences", "finalizers", "managedFields"});
  for (const auto& [key, value] : obj.items()) {
    if (key == "name" || key == "namespace" || key == "uid" || key == "resourceVersion" || key == "generation" ||
        key == "labels" || key == "annotations") {
      continue;
    }
    meta.extra[key] = value;
  }
  if (d.require(obj, path, "name", "a DNS-1123 label (lowercase letters, digits and '-', at most 63 characters)")) {
    d.read_string(obj, path, "name", meta.name);
    if (obj["name"].is_string() && !is_dns1123_label(meta.name)) {
      d.fail(child(path, "name"), "\"" + printable(meta.name) +
                                      "\" is not a DNS-1123 label: lowercase letters, digits and '-', starting and "
                                      "ending with a letter or digit, at most 63 characters");
    }
  }
  d.read_name(obj, path, "namespace", [](const std::string& n) { return n.empty() || is_dns1123_label(n); },
              "a namespace name (a DNS-1123 label)", meta.namespace_);
  d.read_string(obj, path, "uid", meta.uid);
  d.read_string(obj, path, "resourceVersion", meta.resource_version);
  d.read_int64(obj, path, "generation", {0, std::numeric_limits<std::int64_t>::max()}, meta.generation);
  if (const json* labels = Decoder::find(obj, "labels")) {
    d.label_map(*labels, child(path, "labels"), bounds::kMaxMetadataEntries, true, meta.labels);
  }
  if (const json* annotations = Decoder::find(obj, "annotations")) {
    d.label_map(*annotations, child(path, "annotations"), bounds::kMaxMetadataEntries, false, meta.annotations);
  }
  return meta;
}

// ---- status ----------------------------------------------------------------------------

// `preflight`: status.preflight, a self-test's outcome (Succeeded without throughput).
std::optional<CaseResult> decode_result(Decoder& d, const json& obj, const std::string& path, bool preflight = false) {
  if (!d.expect_object(obj, path)) return std::nullopt;
  d.reject_unknown(obj, path, {"case", "state", "throughput", "stepTimeSeconds", "input", "interference", "stability", "ncclTransport", "optimizer",
                               "environment", "lossAfterRepeats", "lossScaling", "flops", "energy", "communication", "speedup", "scalingEfficiency", "scalingRefused", "reason", "message", "attempts", "startTime",
                               "completionTime", "ranAlone"});
  const std::size_t errors_before = d.errors.size();
  CaseResult r;
  if (const json* c = d.require(obj, path, "case", "{nodes, gpusPerNode, batchSizePerDevice, precision}")) {
    if (auto parsed = decode_case(d, *c, child(path, "case"), true)) r.case_ = *parsed;
  }
  if (d.require(obj, path, "state", "one of " + allowed_values<CaseState>())) d.read_enum(obj, path, "state", r.state);
  if (const json* t = Decoder::find(obj, "throughput")) r.throughput = decode_throughput(d, *t, child(path, "throughput"));
  if (const json* s = Decoder::find(obj, "stepTimeSeconds")) {
    r.step_time_seconds = decode_summary(d, *s, child(path, "stepTimeSeconds"), {});
  }
  if (const json* i = Decoder::find(obj, "input")) r.input = decode_input_report(d, *i, child(path, "input"));
  if (const json* i = Decoder::find(obj, "interference")) {
    r.interference = decode_interference(d, *i, child(path, "interference"));
  }
  if (const json* s = Decoder::find(obj, "stability")) r.stability = decode_stability(d, *s, child(path, "stability"));
  if (const json* t = Decoder::find(obj, "ncclTransport")) {
    r.nccl_transport = decode_nccl_transport(d, *t, child(path, "ncclTransport"));
  }
  if (const json* o = Decoder::find(obj, "optimizer")) r.optimizer = decode_optimizer_that_ran(d, *o, child(path, "optimizer"));
  if (const json* e = Decoder::find(obj, "environment")) {
    r.environment = decode_case_environment(d, *e, child(path, "environment"));
  }
  if (const json* l = Decoder::find(obj, "lossAfterRepeats")) {
    const std::string at = child(path, "lossAfterRepeats");
    if (const json* items = d.list(*l, at, 1, bounds::kMaxRepeatsRun)) {
      for (std::size_t i = 0; i < items->size(); ++i) {
        const json& loss = (*items)[i];
        if (loss.is_number()) {
          r.loss_after_repeats.push_back(loss.get<double>());
        } else {
          d.fail(element(at, i), "expected a number, got " + describe_type(loss));
        }
      }
    }
  }
  if (const json* l = Decoder::find(obj, "lossScaling")) r.loss_scaling = decode_loss_scaling(d, *l, child(path, "lossScaling"));
  if (const json* f = Decoder::find(obj, "flops")) r.flops = decode_flops(d, *f, child(path, "flops"));
  if (const json* e = Decoder::find(obj, "energy")) r.energy = decode_energy(d, *e, child(path, "energy"));
  if (const json* c = Decoder::find(obj, "communication")) {
    r.communication = decode_communication(d, *c, child(path, "communication"));
  }
  if (const json* v = Decoder::find(obj, "speedup")) r.speedup = d.measurement(*v, child(path, "speedup"));
  if (const json* v = Decoder::find(obj, "scalingEfficiency")) {
    r.scaling_efficiency = d.measurement(*v, child(path, "scalingEfficiency"));
  }
  d.read_string(obj, path, "scalingRefused", r.scaling_refused);
  d.read_string(obj, path, "reason", r.reason);
  d.read_string(obj, path, "message", r.message);
  d.read_int(obj, path, "attempts", {0, 1000}, r.attempts);
  d.read_string(obj, path, "startTime", r.start_time);
  d.read_string(obj, path, "completionTime", r.completion_time);
  if (Decoder::find(obj, "ranAlone") != nullptr) {
    bool alone = false;
    d.read_bool(obj, path, "ranAlone", alone);
    r.ran_alone = alone;
  }
  if (!preflight && r.state == CaseState::Succeeded && Decoder::find(obj, "throughput") == nullptr) {
    d.fail(child(path, "throughput"), "required when state is Succeeded");
  }
  if (r.state != CaseState::Succeeded && Decoder::find(obj, "state") != nullptr && r.reason.empty()) {
    d.fail(child(path, "reason"), "required when state is " + std::string(to_string(r.state)));
  }
  if (d.errors.size() != errors_before) return std::nullopt;
  return r;
}

BenchmarkRunStatus decode_status_object(Decoder& d, const json& obj, const std::string& path) {
  BenchmarkRunStatus status;
  if (!d.expect_object(obj, path)) return status;
  d.reject_unknown(obj, path, {"observedGeneration", "phase", "conditions", "progress", "results", "preflight", "best",
                               "startTime", "completionTime"});
  d.read_string(obj, path, "startTime", status.start_time);
  d.read_string(obj, path, "completionTime", status.completion_time);
  d.read_int64(obj, path, "observedGeneration", {0, std::numeric_limits<std::int64_t>::max()},
               status.observed_generation);
  d.read_enum(obj, path, "phase", status.phase);
  if (const json* conditions = Decoder::find(obj, "conditions")) {
    const std::string list_path = child(path, "conditions");
    if (const json* items = d.list(*conditions, list_path, 0, 16)) {
      for (std::size_t i = 0; i < items->size(); ++i) {
        const json& c = (*items)[i];
        const std::string c_path = element(list_path, i);
        if (!d.expect_object(c, c_path)) continue;
        d.reject_unknown(c, c_path, {"type", "status", "reason", "message", "lastTransitionTime", "observedGeneration"});
        Condition condition;
        if (d.require(c, c_path, "type", "one of " + allowed_values<ConditionType>())) {
          d.read_enum(c, c_path, "type", condition.type);
        }
        if (d.require(c, c_path, "status", "one of " + allowed_values<ConditionStatus>())) {
          d.read_enum(c, c_path, "status", condition.status);
        }
        d.read_string(c, c_path, "reason", condition.reason);
        d.read_string(c, c_path, "message", condition.message);
        d.read_string(c, c_path, "lastTransitionTime", condition.last_transition_time);
        d.read_int64(c, c_path, "observedGeneration", {0, std::numeric_limits<std::int64_t>::max()},
                     condition.observed_generation);
        status.conditions.push_back(condition);
      }
    }
  }
  if (const json* progress = Decoder::find(obj, "progress")) {
    const std::string p_path = child(path, "progress");
    if (d.expect_object(*progress, p_path)) {
      d.reject_unknown(*progress, p_path, {"completedCases", "totalCases", "currentCase", "currentAttempt", "summary",
                                                 "sharedNode"});
      d.read_int(*progress, p_path, "completedCases", {0, bounds::kMaxPlannedCases}, status.progress.completed_cases);
      d.read_int(*progress, p_path, "totalCases", {0, bounds::kMaxPlannedCases}, status.progress.total_cases);
      d.read_string(*progress, p_path, "currentCase", status.progress.current_case);
      d.read_int(*progress, p_path, "currentAttempt", {0, bounds::kBackoffLimit.max + 1}, status.progress.current_attempt);
      d.read_string(*progress, p_path, "summary", status.progress.summary);
      d.read_bool(*progress, p_path, "sharedNode", status.progress.shared_node);
    }
  }
  if (const json* results = Decoder::find(obj, "results")) {
    const std::string list_path = child(path, "results");
    if (const json* items = d.list(*results, list_path, 0, bounds::kMaxPlannedCases)) {
      for (std::size_t i = 0; i < items->size(); ++i) {
        if (auto r = decode_result(d, (*items)[i], element(list_path, i))) status.results.push_back(*r);
      }
    }
  }
  if (const json* preflight = Decoder::find(obj, "preflight")) {
    status.preflight = decode_result(d, *preflight, child(path, "preflight"), true);
  }
  if (const json* best = Decoder::find(obj, "best")) {
    const std::string b_path = child(path, "best");
    if (d.expect_object(*best, b_path)) {
      d.reject_unknown(*best, b_path, {"case", "throughput", "unit"});
      BestResult b;
      d.read_string(*best, b_path, "case", b.case_id);
      d.read_string(*best, b_path, "unit", b.unit);
      if (const json* t = Decoder::find(*best, "throughput")) {
        if (auto v = d.measurement(*t, child(b_path, "throughput"))) b.throughput = *v;
      }
      status.best = b;
    }
  }
  return status;
}

// Walks a rule path ("spec.cases[].nodes") over a document and calls visit(parent, key, path)
// for every place the last segment names.
template <typename Visit>
void walk_rule_path(json& node, std::string_view rest, const std::string& path, Visit&& visit) {
  const auto dot = rest.find('.');
  std::string_view segment = rest.substr(0, dot);
  const bool is_list = segment.ends_with("[]");
  if (is_list) segment.remove_suffix(2);
  if (!node.is_object()) return;
  const std::string key(segment);
  const std::string here = child(path, key);
  if (dot == std::string_view::npos && !is_list) {
    visit(node, key, here);
    return;
  }
  auto it = node.find(key);
  if (it == node.end() || it->is_null()) return;
  if (is_list) {
    if (!it->is_array()) return;
    if (dot == std::string_view::npos) return;  // rules on list items themselves have no defaults
    for (std::size_t i = 0; i < it->size(); ++i) {
      walk_rule_path((*it)[i], rest.substr(dot + 1), element(here, i), visit);
    }
  } else {
    walk_rule_path(*it, rest.substr(dot + 1), here, visit);
  }
}

}  // namespace

// ---- shared with the result-document decoder --------------------------------------

std::optional<CaseSpec> detail::decode_case(Decoder& d, const json& obj, const std::string& path, bool allow_id) {
  if (!d.expect_object(obj, path)) return std::nullopt;
  if (allow_id) {
    d.reject_unknown(obj, path, {"id", "nodes", "gpusPerNode", "batchSizePerDevice", "precision"});
  } else {
    d.reject_unknown(obj, path, {"nodes", "gpusPerNode", "batchSizePerDevice", "precision"});
  }
  const std::size_t errors_before = d.errors.size();
  CaseSpec c;
  d.require(obj, path, "nodes", "an integer from 1");
  d.require(obj, path, "gpusPerNode", "an integer from 1");
  d.require(obj, path, "batchSizePerDevice", "an integer from 1");
  d.require(obj, path, "precision", "one of " + allowed_values<Precision>());
  d.read_int(obj, path, "nodes", bounds::kNodes, c.nodes);
  d.read_int(obj, path, "gpusPerNode", bounds::kGpusPerNode, c.gpus_per_node);
  d.read_int(obj, path, "batchSizePerDevice", bounds::kBatchSizePerDevice, c.batch_size_per_device);
  d.read_enum(obj, path, "precision", c.precision);
  if (d.errors.size() != errors_before) return std::nullopt;
  if (allow_id) {
    std::string id;
    d.read_string(obj, path, "id", id);
    c.preflight = id.starts_with("preflight-");
    if (!id.empty() && id != case_id(c)) {
      d.fail(child(path, "id"), "\"" + id + "\" does not match the case fields (expected \"" + case_id(c) + "\")");
      return std::nullopt;
    }
  }
  return c;
}

std::optional<SampleSummary> detail::decode_summary(Decoder& d, const json& obj, const std::string& path,
                                            std::initializer_list<std::string_view> extra_fields) {
  if (!d.expect_object(obj, path)) return std::nullopt;
  std::vector<std::string_view> known{"median", "mean", "min", "max", "stddev", "cv"};
  known.insert(known.end(), extra_fields.begin(), extra_fields.end());
  for (const auto& [key, value] : obj.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      std::string allowed;
      for (const auto k : known) allowed += (allowed.empty() ? "" : ", ") + std::string(k);
      d.fail(child(path, key), "unknown field; allowed fields: " + allowed);
    }
  }
  const std::size_t errors_before = d.errors.size();
  SampleSummary s;
  const auto read = [&](std::string_view key, double& out, bool required) {
    const json* value = required ? d.require(obj, path, key, "a non-negative number") : Decoder::find(obj, key);
    if (value == nullptr) return;
    if (auto number = d.measurement(*value, child(path, key))) out = *number;
  };
  read("median", s.median, true);
  read("mean", s.mean, false);
  read("min", s.min, false);
  read("max", s.max, false);
  read("stddev", s.stddev, false);
  read("cv", s.cv, false);
  if (d.errors.size() != errors_before) return std::nullopt;
  return s;
}

void detail::decode_optimizer(Decoder& d, const json& obj, const std::string& path, OptimizerRequest& out) {
  if (!d.expect_object(obj, path)) return;
  d.reject_unknown(obj, path, {"name", "learningRate", "momentum", "weightDecay", "learningRateWarmupSteps"});
  d.read_enum(obj, path, "name", out.name);
  d.read_number(obj, path, "learningRate", bounds::kLearningRate, out.learning_rate);
  d.read_number(obj, path, "momentum", bounds::kMomentum, out.momentum);
  d.read_number(obj, path, "weightDecay", bounds::kWeightDecay, out.weight_decay);
  d.read_int64(obj, path, "learningRateWarmupSteps", bounds::kLearningRateWarmupSteps, out.learning_rate_warmup_steps);
}

std::optional<OptimizerSpec> detail::decode_optimizer_that_ran(Decoder& d, const json& obj, const std::string& path) {
  if (!d.expect_object(obj, path)) return std::nullopt;
  const std::size_t errors_before = d.errors.size();
  for (const char* key : {"name", "learningRate", "momentum", "weightDecay"}) d.require(obj, path, key, "what ran");
  OptimizerRequest read;
  decode_optimizer(d, obj, path, read);
  if (d.errors.size() != errors_before || !read.learning_rate) return std::nullopt;  // required above
  // A warm-up unstated is none: what a worker or a script from before the field trained with.
  return OptimizerSpec{read.name, *read.learning_rate, read.momentum, read.weight_decay, read.learning_rate_warmup_steps};
}

// learningRateWarmupSteps only where there is a warm-up: unstated is none, as documents and
// statuses written before the field say.
json detail::optimizer_to_json(const OptimizerSpec& optimizer) {
  json out{{"name", to_string(optimizer.name)},
           {"learningRate", optimizer.learning_rate},
           {"momentum", optimizer.momentum},
           {"weightDecay", optimizer.weight_decay}};
  if (optimizer.learning_rate_warmup_steps > 0) out["learningRateWarmupSteps"] = optimizer.learning_rate_warmup_steps;
  return out;
}

json detail::optimizer_to_json(const OptimizerRequest& optimizer) {
  json out{{"name", to_string(optimizer.name)}, {"momentum", optimizer.momentum}, {"weightDecay", optimizer.weight_decay}};
  if (optimizer.learning_rate) out["learningRate"] = *optimizer.learning_rate;
  if (optimizer.learning_rate_warmup_steps > 0) out["learningRateWarmupSteps"] = optimizer.learning_rate_warmup_steps;
  return out;
}

std::optional<Throughput> detail::decode_throughput(Decoder& d, const json& obj, const std::string& path) {
  auto summary = decode_summary(d, obj, path, {"unit", "repeats"});
  if (!summary) return std::nullopt;
  const std::size_t errors_before = d.errors.size();
  Throughput throughput;
  throughput.summary = *summary;
  d.read_string(obj, path, "unit", throughput.unit);
  if (const json* repeats = d.require(obj, path, "repeats", "the throughput of every repeat")) {
    const std::string r_path = child(path, "repeats");
    if (const json* items = d.list(*repeats, r_path, 1, bounds::kRepeats.max)) {
      for (std::size_t i = 0; i < items->size(); ++i) {
        if (auto v = d.measurement((*items)[i], element(r_path, i))) throughput.repeats.push_back(*v);
      }
    }
  }
  if (d.errors.size() != errors_before) return std::nullopt;
  return throughput;
}

json detail::throughput_to_json(const Throughput& throughput) {
  json t = to_json(throughput.summary);
  t["unit"] = throughput.unit;
  t["repeats"] = throughput.repeats;
  return t;
}

std::optional<InputReport> detail::decode_input_report(Decoder& d, const json& obj, const std::string& path) {
  if (!d.expect_object(obj, path)) return std::nullopt;
  d.reject_unknown(obj, path, {"source", "waitSeconds", "waitShare", "waitSecondsPerStep", "pipelineThroughput",
                               "verdict", "decodeThreads", "files", "skippedFiles", "skippedExamples"});
  const std::size_t errors_before = d.errors.size();
  InputReport r;
  d.read_enum(obj, path, "source", r.source);
  const auto read = [&](std::string_view key, double& out) {
    if (const json* v = d.require(obj, path, key, "a non-negative number")) {
      if (auto number = d.measurement(*v, child(path, key))) out = *number;
    }
  };
  read("waitSeconds", r.wait_seconds);
  read("waitShare", r.wait_share);
  read("pipelineThroughput", r.pipeline_throughput);
  if (r.wait_share > 1.0) d.fail(child(path, "waitShare"), format_number(r.wait_share) + " is out of range; allowed: 0 to 1");
  if (const json* s = Decoder::find(obj, "waitSecondsPerStep")) {
    r.wait_seconds_per_step = decode_summary(d, *s, child(path, "waitSecondsPerStep"), {});
  }
  if (d.require(obj, path, "verdict", "one of " + allowed_values<InputVerdict>())) d.read_enum(obj, path, "verdict", r.verdict);
  d.read_int(obj, path, "decodeThreads", {0, bounds::kDecodeThreads.max}, r.decode_threads);
  std::int64_t files = 0, skipped = 0;
  d.read_int64(obj, path, "files", {0, std::numeric_limits<std::int64_t>::max()}, files);
  d.read_int64(obj, path, "skippedFiles", {0, std::numeric_limits<std::int64_t>::max()}, skipped);
  r.files = static_cast<long>(files);
  r.skipped_files = static_cast<long>(skipped);
  if (const json* examples = Decoder::find(obj, "skippedExamples")) {
    const std::string e_path = child(path, "skippedExamples");
    if (const json* items = d.list(*examples, e_path, 0, 16)) {
      for (std::size_t i = 0; i < items->size(); ++i) {
        if (auto text = d.string((*items)[i], element(e_path, i))) r.skipped_examples.push_back(*text);
      }
    }
  }
  if (d.errors.size() != errors_before) return std::nullopt;
  return r;
}

std::optional<InterferenceReport> detail::decode_interference(Decoder& d, const json& obj, const std::string& path) {
  if (!d.expect_object(obj, path)) return std::nullopt;
  d.reject_unknown(obj, path, {"cpuPressure", "cpuSteal", "gpu", "verdict"});
  const std::size_t errors_before = d.errors.size();
  InterferenceReport r;
  d.read_number(obj, path, "cpuSteal", {0.0, 1.0, false, false}, r.cpu_steal);
  if (const json* g = Decoder::find(obj, "gpu")) r.gpu = decode_gpu_readings(d, *g, child(path, "gpu"));
  if (Decoder::find(obj, "cpuPressure") != nullptr) {
    double pressure = 0;
    d.read_number(obj, path, "cpuPressure", {0.0, 1.0, false, false}, pressure);
    r.cpu_pressure = pressure;
  }
  if (d.require(obj, path, "verdict", "one of " + allowed_values<InterferenceVerdict>())) {
    d.read_enum(obj, path, "verdict", r.verdict);
  }
  if (d.errors.size() != errors_before) return std::nullopt;
  return r;
}

json detail::interference_to_json(const InterferenceReport& r) {
  json out{{"cpuSteal", r.cpu_steal}, {"verdict", to_string(r.verdict)}};
  if (r.cpu_pressure) out["cpuPressure"] = *r.cpu_pressure;
  if (r.gpu) {
    json reasons = json::array();
    for (const GpuThrottleReason reason : r.gpu->throttle_reasons) reasons.push_back(to_string(reason));
    out["gpu"] = {{"otherProcesses", r.gpu->other_processes},     {"smClockMinMhz", r.gpu->sm_clock_min_mhz},
                  {"smClockMedianMhz", r.gpu->sm_clock_median_mhz}, {"smClockMaxMhz", r.gpu->sm_clock_max_mhz},
                  {"throttleReasons", reasons},                     {"temperatureMaxCelsius", r.gpu->temperature_max_c},
                  {"powerMedianWatts", r.gpu->power_median_w},      {"samples", r.gpu->samples}};
  }
  return out;
}

std::optional<GpuReadings> detail::decode_gpu_readings(Decoder& d, const json& obj, const std::string& path) {
  if (!d.expect_object(obj, path)) return std::nullopt;
  d.reject_unknown(obj, path, {"otherProcesses", "smClockMinMhz", "smClockMedianMhz", "smClockMaxMhz", "throttleReasons",
                               "temperatureMaxCelsius", "powerMedianWatts", "samples"});
  const std::size_t errors_before = d.errors.size();
  GpuReadings g;
  d.read_int(obj, path, "otherProcesses", {0, 1 << 20}, g.other_processes);
  d.read_int(obj, path, "samples", {0, 1 << 30}, g.samples);
  const auto measured = [&](const char* key, double& out) {
    if (const json* v = Decoder::find(obj, key)) {
      if (auto x = d.measurement(*v, child(path, key))) out = *x;
    }
  };
  measured("smClockMinMhz", g.sm_clock_min_mhz);
  measured("smClockMedianMhz", g.sm_clock_median_mhz);
  measured("smClockMaxMhz", g.sm_clock_max_mhz);
  measured("temperatureMaxCelsius", g.temperature_max_c);
  measured("powerMedianWatts", g.power_median_w);
  if (const json* reasons = Decoder::find(obj, "throttleReasons")) {
    const std::string r_path = child(path, "throttleReasons");
    if (const json* items = d.list(*reasons, r_path, 0, 4)) {
      for (std::size_t i = 0; i < items->size(); ++i) {
        if (auto reason = d.enumeration<GpuThrottleReason>((*items)[i], element(r_path, i))) {
          g.throttle_reasons.push_back(*reason);
        }
      }
    }
  }
  if (g.sm_clock_min_mhz > g.sm_clock_median_mhz) {
    d.fail(child(path, "smClockMinMhz"), "exceeds smClockMedianMhz");
  }
  if (d.errors.size() != errors_before) return std::nullopt;
  return g;
}

std::optional<StabilityReport> detail::decode_stability(Decoder& d, const json& obj, const std::string& path) {
  if (!d.expect_object(obj, path)) return std::nullopt;
  d.reject_unknown(obj, path, {"verdict", "maxCv", "cv", "extraRepeats", "discarded"});
  const std::size_t errors_before = d.errors.size();
  StabilityReport r;
  if (d.require(obj, path, "verdict", "one of " + allowed_values<StabilityVerdict>())) d.read_enum(obj, path, "verdict", r.verdict);
  if (d.require(obj, path, "maxCv", "the bound the repeats were judged against")) {
    d.read_number(obj, path, "maxCv", bounds::kMaxCv, r.max_cv);
  }
  if (const json* cv = d.require(obj, path, "cv", "the spread of the reported repeats")) {
    if (auto v = d.measurement(*cv, child(path, "cv"))) r.cv = *v;
  }
  d.read_int(obj, path, "extraRepeats", bounds::kExtraRepeats, r.extra_repeats);
  if (const json* discarded = Decoder::find(obj, "discarded")) {
    const std::string l_path = child(path, "discarded");
    if (const json* items = d.list(*discarded, l_path, 0, bounds::kExtraRepeats.max)) {
      for (std::size_t i = 0; i < items->size(); ++i) {
        if (auto v = d.measurement((*items)[i], element(l_path, i))) r.discarded.push_back(*v);
      }
    }
  }
  if (d.errors.size() != errors_before) return std::nullopt;
  // Measured again, every earlier repeat is kept (or all are dropped to fit a termination message).
  if (!r.discarded.empty() && r.discarded.size() != static_cast<std::size_t>(r.extra_repeats)) {
    d.fail(child(path, "discarded"), std::to_string(r.discarded.size()) + " throughputs for extraRepeats " +
                                         std::to_string(r.extra_repeats) + "; they must be as many, or none");
    return std::nullopt;
  }
  return r;
}

std::optional<FlopsReport> detail::decode_flops(Decoder& d, const json& obj, const std::string& path) {
  if (!d.expect_object(obj, path)) return std::nullopt;
  d.reject_unknown(obj, path, {"trainingPerSample", "perSecondPerDevice", "peakPerDevice", "mfu"});
  const std::size_t errors_before = d.errors.size();
  FlopsReport f;
  if (const json* v = d.require(obj, path, "trainingPerSample", "FLOPs of one sample's training step")) {
    if (auto x = d.measurement(*v, child(path, "trainingPerSample"))) f.training_per_sample = *x;
  }
  if (const json* v = d.require(obj, path, "perSecondPerDevice", "training FLOP/s per device")) {
    if (auto x = d.measurement(*v, child(path, "perSecondPerDevice"))) f.per_second_per_device = *x;
  }
  if (const json* v = Decoder::find(obj, "peakPerDevice")) f.peak_per_device = d.measurement(*v, child(path, "peakPerDevice"));
  if (const json* v = Decoder::find(obj, "mfu")) f.mfu = d.measurement(*v, child(path, "mfu"));
  if (d.errors.size() != errors_before) return std::nullopt;
  if (f.mfu.has_value() != f.peak_per_device.has_value()) {
    d.fail(child(path, f.mfu ? "peakPerDevice" : "mfu"), "mfu and peakPerDevice come together");
    return std::nullopt;
  }
  return f;
}

json detail::flops_to_json(const FlopsReport& f) {
  json out{{"trainingPerSample", f.training_per_sample}, {"perSecondPerDevice", f.per_second_per_device}};
  if (f.peak_per_device) out["peakPerDevice"] = *f.peak_per_device;
  if (f.mfu) out["mfu"] = *f.mfu;
  return out;
}

namespace {

// A required measurement above 0 (a status report's figure), into `out`.
void read_positive(Decoder& d, const json& obj, const std::string& path, const char* key, const char* what,
                   double& out) {
  if (const json* v = d.require(obj, path, key, what)) {
    if (auto x = d.measurement(*v, child(path, key))) {
      out = *x;
      if (*x <= 0.0) d.fail(child(path, key), "must be > 0");
    }
  }
}

}  // namespace

std::optional<EnergyReport> detail::decode_energy(Decoder& d, const json& obj, const std::string& path) {
  if (!d.expect_object(obj, path)) return std::nullopt;
  d.reject_unknown(obj, path, {"joulesPerSample", "wattsPerDevice"});
  const std::size_t errors_before = d.errors.size();
  EnergyReport e;
  read_positive(d, obj, path, "joulesPerSample", "the devices' energy per sample", e.joules_per_sample);
  read_positive(d, obj, path, "wattsPerDevice", "the average power per device over the measured steps",
                e.watts_per_device);
  if (d.errors.size() != errors_before) return std::nullopt;
  return e;
}

json detail::energy_to_json(const EnergyReport& e) {
  return json{{"joulesPerSample", e.joules_per_sample}, {"wattsPerDevice", e.watts_per_device}};
}

std::optional<CommunicationReport> detail::decode_communication(Decoder& d, const json& obj, const std::string& path) {
  if (!d.expect_object(obj, path)) return std::nullopt;
  d.reject_unknown(obj, path, {"gradientBytes", "buckets", "allreduceSeconds", "busBandwidth", "stepSeconds",
                               "stepSecondsWithoutReduction", "exposedShare"});
  const std::size_t errors_before = d.errors.size();
  CommunicationReport c;
  constexpr IntBounds kCount{1, std::numeric_limits<std::int64_t>::max()};
  if (d.require(obj, path, "gradientBytes", "the bytes of gradient each step reduces")) {
    d.read_int64(obj, path, "gradientBytes", kCount, c.gradient_bytes);
  }
  if (d.require(obj, path, "buckets", "the reductions a step's gradient is cut into")) {
    d.read_int64(obj, path, "buckets", kCount, c.buckets);
  }
  read_positive(d, obj, path, "allreduceSeconds", "the time to reduce the whole gradient alone", c.allreduce_seconds);
  read_positive(d, obj, path, "busBandwidth", "the reduction's bus bandwidth in bytes per second", c.bus_bandwidth);
  read_positive(d, obj, path, "stepSeconds", "a step's time with its reduction", c.step_seconds);
  read_positive(d, obj, path, "stepSecondsWithoutReduction", "a step's time without its reduction",
                c.step_seconds_without_reduction);
  if (d.require(obj, path, "exposedShare", "the part of a step its reduction added")) {
    d.read_number(obj, path, "exposedShare", bounds::kExposedShare, c.exposed_share);
  }
  if (d.errors.size() != errors_before) return std::nullopt;
  return c;
}

json detail::communication_to_json(const CommunicationReport& c) {
  return json{{"gradientBytes", c.gradient_bytes},
              {"buckets", c.buckets},
              {"allreduceSeconds", c.allreduce_seconds},
              {"busBandwidth", c.bus_bandwidth},
              {"stepSeconds", c.step_seconds},
              {"stepSecondsWithoutReduction", c.step_seconds_without_reduction},
              {"exposedShare", c.exposed_share}};
}

std::optional<LossScalingReport> detail::decode_loss_scaling(Decoder& d, const json& obj, const std::string& path) {
  if (!d.expect_object(obj, path)) return std::nullopt;
  d.reject_unknown(obj, path, {"finalScale", "skippedSteps", "steps", "overflow"});
  const std::size_t errors_before = d.errors.size();
  LossScalingReport report;
  if (const json* v = d.require(obj, path, "finalScale", "the scale the case ended at")) {
    if (auto x = d.measurement(*v, child(path, "finalScale"))) {
      report.final_scale = *x;
      if (*x <= 0.0) d.fail(child(path, "finalScale"), "must be > 0");
    }
  }
  if (d.require(obj, path, "steps", "the case's steps")) {
    d.read_int64(obj, path, "steps", {1, std::numeric_limits<std::int64_t>::max()}, report.steps);
  }
  if (d.require(obj, path, "skippedSteps", "steps skipped for an inf or NaN gradient")) {
    d.read_int64(obj, path, "skippedSteps", {0, std::numeric_limits<std::int64_t>::max()}, report.skipped_steps);
  }
  if (report.steps > 0 && report.skipped_steps > report.steps) d.fail(child(path, "skippedSteps"), "exceeds steps");
  d.read_string(obj, path, "overflow", kLossScalingOverflowMaxLength, report.overflow);
  if (d.errors.size() != errors_before) return std::nullopt;
  return report;
}

json detail::loss_scaling_to_json(const LossScalingReport& r) {
  json out = {{"finalScale", r.final_scale}, {"skippedSteps", r.skipped_steps}, {"steps", r.steps}};
  if (!r.overflow.empty()) out["overflow"] = r.overflow;
  return out;
}

std::optional<NcclTransport> detail::decode_nccl_transport(Decoder& d, const json& obj, const std::string& path) {
  if (!d.expect_object(obj, path)) return std::nullopt;
  d.reject_unknown(obj, path, {"network", "links", "gpuDirectRdma"});
  const std::size_t errors_before = d.errors.size();
  NcclTransport t;
  d.read_string(obj, path, "network", t.network);
  if (const json* links = Decoder::find(obj, "links")) {
    const std::string l_path = child(path, "links");
    if (const json* items = d.list(*links, l_path, 0, 32)) {
      for (std::size_t i = 0; i < items->size(); ++i) {
        if (auto l = d.string((*items)[i], element(l_path, i))) t.links.push_back(*l);
      }
    }
  }
  d.read_bool(obj, path, "gpuDirectRdma", t.gpu_direct_rdma);
  if (d.errors.size() != errors_before) return std::nullopt;
  return t;
}

json detail::nccl_transport_to_json(const NcclTransport& t) {
  json out{{"links", t.links}, {"gpuDirectRdma", t.gpu_direct_rdma}};
  if (!t.network.empty()) out["network"] = t.network;
  return out;
}

namespace {
constexpr std::size_t kMaxEnvironmentText = 1024;
constexpr std::size_t kMaxBackendOptions = 64;
}  // namespace

std::optional<CaseEnvironment> detail::decode_case_environment(Decoder& d, const json& obj, const std::string& path) {
  if (!d.expect_object(obj, path)) return std::nullopt;
  d.reject_unknown(obj, path, {"dlbenchVersion", "backend", "communicator", "cpuModel", "gpuModel", "driverVersion",
                               "cudaVersion", "cudnnVersion", "ncclVersion", "mpiVersion", "onednnVersion", "framework",
                               "frameworkVersion", "backendOptions"});
  const std::size_t errors_before = d.errors.size();
  CaseEnvironment e;
  for (const auto& [key, member] : case_environment_fields()) d.read_string(obj, path, key, kMaxEnvironmentText, e.*member);
  if (const json* options = Decoder::find(obj, "backendOptions")) {
    const std::string options_path = child(path, "backendOptions");
    if (d.expect_object(*options, options_path)) {
      if (options->size() > kMaxBackendOptions) {
        d.fail(options_path, "has " + std::to_string(options->size()) + " entries; at most " +
                                 std::to_string(kMaxBackendOptions));
      } else {
        for (const auto& [key, value] : options->items()) {
          std::string text;
          d.read_string(*options, options_path, key, kMaxEnvironmentText, text);
          e.backend_options[key] = text;
        }
      }
    }
  }
  if (d.errors.size() != errors_before) return std::nullopt;
  return e;
}

json detail::case_environment_to_json(const CaseEnvironment& e) {
  json out = json::object();
  for (const auto& [key, member] : case_environment_fields()) {
    if (!(e.*member).empty()) out[key] = e.*member;
  }
  if (!e.backend_options.empty()) out["backendOptions"] = e.backend_options;
  return out;
}

json detail::stability_to_json(const StabilityReport& r) {
  return {{"verdict", to_string(r.verdict)}, {"maxCv", r.max_cv},       {"cv", r.cv},
          {"extraRepeats", r.extra_repeats}, {"discarded", r.discarded}};
}

InterferenceVerdict interference_verdict(const std::optional<double>& cpu_pressure, double cpu_steal,
                                         const GpuReadings* gpu) {
  const bool pressed = cpu_pressure && *cpu_pressure > kInterferedShare;
  if (pressed || cpu_steal > kInterferedShare || (gpu != nullptr && gpu->other_processes > 0)) {
    return InterferenceVerdict::interfered;
  }
  if (gpu != nullptr) {
    for (const GpuThrottleReason r : gpu->throttle_reasons) {
      if (r != GpuThrottleReason::power_cap) return InterferenceVerdict::throttled;
    }
  }
  return InterferenceVerdict::clean;
}

json detail::input_report_to_json(const InputReport& r) {
  json out{{"source", to_string(r.source)},
           {"waitSeconds", r.wait_seconds},
           {"waitShare", r.wait_share},
           {"pipelineThroughput", r.pipeline_throughput},
           {"verdict", to_string(r.verdict)},
           {"decodeThreads", r.decode_threads},
           {"files", r.files},
           {"skippedFiles", r.skipped_files}};
  if (r.wait_seconds_per_step) out["waitSecondsPerStep"] = to_json(*r.wait_seconds_per_step);
  if (!r.skipped_examples.empty()) out["skippedExamples"] = r.skipped_examples;
  return out;
}

// ---- public decode ---------------------------------------------------------------------

std::vector<AppliedDefault> apply_defaults(json& benchmark_run) {
  std::vector<AppliedDefault> applied;
  if (!benchmark_run.is_object()) return applied;
  for (const FieldRule& rule : api_field_rules()) {
    if (!rule.default_value) continue;
    walk_rule_path(benchmark_run, rule.path, "", [&](json& parent, const std::string& key, const std::string& where) {
      auto it = parent.find(key);
      if (it != parent.end() && !it->is_null()) return;
      parent[key] = *rule.default_value;
      applied.push_back({where, *rule.default_value});
    });
  }
  return applied;
}

Decoded<BenchmarkRun> decode_benchmark_run(const json& document) {
  Decoder d;
  if (!document.is_object()) {
    d.fail("", "a BenchmarkRun must be an object (apiVersion, kind, metadata, spec), got " + describe_type(document));
    return d.finish(BenchmarkRun{});
  }
  json doc = document;
  std::vector<AppliedDefault> defaults;
  // Defaults only where the spec is an object; a spec of the wrong type is reported below.
  if (doc.contains("spec") && doc["spec"].is_object()) defaults = apply_defaults(doc);

  BenchmarkRun run;
  d.reject_unknown(doc, "", {"apiVersion", "kind", "metadata", "spec", "status"});
  if (d.require(doc, "", "apiVersion", std::string("must be ") + kApiVersion)) {
    d.read_string(doc, "", "apiVersion", run.api_version);
    if (doc["apiVersion"].is_string() && run.api_version != kApiVersion) {
      d.fail("apiVersion", "\"" + run.api_version + "\" is not supported; use " + kApiVersion);
    }
  }
  if (d.require(doc, "", "kind", std::string("must be ") + kKind)) {
    d.read_string(doc, "", "kind", run.kind);
    if (doc["kind"].is_string() && run.kind != kKind) {
      d.fail("kind", "\"" + run.kind + "\" is not supported; use " + kKind);
    }
  }
  if (const json* meta = d.require(doc, "", "metadata", "an object with at least a name")) {
    run.metadata = decode_metadata(d, *meta, "metadata");
  }
  if (const json* spec = d.require(doc, "", "spec", "model and matrix (or cases) at least")) {
    run.spec = decode_spec(d, *spec, "spec");
  }
  if (const json* status = Decoder::find(doc, "status")) run.status = decode_status_object(d, *status, "status");

  // Rules that need the whole spec: the planned sweep must stay within bounds.
  if (d.errors.empty()) {
    const auto planned = plan_cases(run.spec);
    if (static_cast<std::int64_t>(planned.size()) > bounds::kMaxPlannedCases) {
      d.fail(run.spec.matrix ? "spec.matrix" : "spec.cases",
             std::to_string(planned.size()) + " cases planned (baselines included); at most " +
                 std::to_string(bounds::kMaxPlannedCases) + " allowed");
    }
  }

  auto out = d.finish(std::move(run));
  out.defaults = std::move(defaults);
  return out;
}

Decoded<BenchmarkRunStatus> decode_status(const json& status) {
  Decoder d;
  auto decoded = decode_status_object(d, status, "status");
  return d.finish(std::move(decoded));
}

Decoded<CaseResult> decode_case_result(const json& result) {
  Decoder d;
  auto decoded = decode_result(d, result, "");
  if (!decoded) return d.finish(CaseResult{});  // errors are set whenever decoded is empty
  return d.finish(std::move(*decoded));
}

// ---- encode ----------------------------------------------------------------------------

json to_json(const OptimizerSpec& optimizer) { return detail::optimizer_to_json(optimizer); }

json to_json(const CaseSpec& c) {
  json out{{"nodes", c.nodes},
           {"gpusPerNode", c.gpus_per_node},
           {"batchSizePerDevice", c.batch_size_per_device},
           {"precision", to_string(c.precision)}};
  if (c.preflight) out["id"] = case_id(c);  // the id is what tells a preflight from a case
  return out;
}

json to_json(const Toleration& t) {
  json out{{"operator", to_string(t.operator_)}};
  if (!t.key.empty()) out["key"] = t.key;
  if (!t.value.empty()) out["value"] = t.value;
  if (t.effect != TaintEffect::Any) out["effect"] = to_string(t.effect);
  if (t.toleration_seconds) out["tolerationSeconds"] = *t.toleration_seconds;
  return out;
}

json to_json(const EnvVar& e) {
  json out{{"name", e.name}};
  if (e.value) out["value"] = *e.value;
  if (e.value_from) out["valueFrom"] = *e.value_from;
  return out;
}

json to_json(const SampleSummary& s) {
  return json{{"median", s.median}, {"mean", s.mean}, {"min", s.min},
              {"max", s.max},       {"stddev", s.stddev}, {"cv", s.cv}};
}

json to_json(const CaseResult& r) {
  json case_json = to_json(r.case_);
  case_json["id"] = case_id(r.case_);
  json out{{"case", case_json}, {"state", to_string(r.state)}, {"attempts", r.attempts}};
  if (r.throughput) out["throughput"] = detail::throughput_to_json(*r.throughput);
  if (r.step_time_seconds) out["stepTimeSeconds"] = to_json(*r.step_time_seconds);
  if (r.input) out["input"] = detail::input_report_to_json(*r.input);
  if (r.interference) out["interference"] = detail::interference_to_json(*r.interference);
  if (r.stability) out["stability"] = detail::stability_to_json(*r.stability);
  if (r.nccl_transport) out["ncclTransport"] = detail::nccl_transport_to_json(*r.nccl_transport);
  if (r.optimizer) out["optimizer"] = detail::optimizer_to_json(*r.optimizer);
  if (r.environment) out["environment"] = detail::case_environment_to_json(*r.environment);
  if (!r.loss_after_repeats.empty()) out["lossAfterRepeats"] = r.loss_after_repeats;
  if (r.loss_scaling) out["lossScaling"] = detail::loss_scaling_to_json(*r.loss_scaling);
  if (r.flops) out["flops"] = detail::flops_to_json(*r.flops);
  if (r.energy) out["energy"] = detail::energy_to_json(*r.energy);
  if (r.communication) out["communication"] = detail::communication_to_json(*r.communication);
  if (r.speedup) out["speedup"] = *r.speedup;
  if (r.scaling_efficiency) out["scalingEfficiency"] = *r.scaling_efficiency;
  if (!r.scaling_refused.empty()) out["scalingRefused"] = r.scaling_refused;
  if (!r.reason.empty()) out["reason"] = r.reason;
  if (!r.message.empty()) out["message"] = r.message;
  if (!r.start_time.empty()) out["startTime"] = r.start_time;
  if (!r.completion_time.empty()) out["completionTime"] = r.completion_time;
  if (r.ran_alone) out["ranAlone"] = *r.ran_alone;
  return out;
}

json to_json(const BenchmarkRunSpec& spec) {
  json out{{"model", to_string(spec.model)}, {"engine", to_string(spec.engine)}};
  if (!spec.command.empty()) out["command"] = spec.command;
  out["data"] = {{"source", to_string(spec.data.source)},
                 {"decodeThreads", spec.data.decode_threads},
                 {"prefetchBatches", spec.data.prefetch_batches}};
  if (!is_sequence_model(spec.model)) out["data"]["imageSize"] = spec.data.image_size;  // a sequence model has none
  if (spec.data.sequence_length > 0) out["data"]["sequenceLength"] = spec.data.sequence_length;
  if (spec.data.image_height > 0) {
    out["data"]["imageHeight"] = spec.data.image_height;
    out["data"]["imageWidth"] = spec.data.image_width;
  }
  if (!spec.data.path.empty()) out["data"]["path"] = spec.data.path;
  if (const auto& v = spec.data.volume) {
    json volume = json::object();
    if (!v->claim_name.empty()) volume["persistentVolumeClaim"] = {{"claimName", v->claim_name}};
    if (!v->host_path.empty()) volume["hostPath"] = {{"path", v->host_path}};
    if (!v->nfs_server.empty()) volume["nfs"] = {{"server", v->nfs_server}, {"path", v->nfs_path}};
    if (!v->sub_path.empty()) volume["subPath"] = v->sub_path;
    out["data"]["volume"] = volume;
  }
  if (spec.matrix) {
    json precision = json::array();
    for (const auto p : spec.matrix->precision) precision.push_back(to_string(p));
    out["matrix"] = {{"nodes", spec.matrix->nodes},
                     {"gpusPerNode", spec.matrix->gpus_per_node},
                     {"batchSizePerDevice", spec.matrix->batch_size_per_device},
                     {"precision", precision}};
  }
  if (!spec.cases.empty()) {
    json cases = json::array();
    for (const auto& c : spec.cases) cases.push_back(to_json(c));
    out["cases"] = cases;
  }
  const StabilitySpec& stability = spec.methodology.stability;
  out["methodology"] = {{"warmupSteps", spec.methodology.warmup_steps},
                        {"measureSteps", spec.methodology.measure_steps},
                        {"repeats", spec.methodology.repeats},
                        {"statistic", to_string(spec.methodology.statistic)},
                        {"stability", {{"extraRepeats", stability.extra_repeats},
                                       {"includeUnstable", stability.include_unstable}}}};
  if (stability.max_cv) out["methodology"]["stability"]["maxCv"] = *stability.max_cv;
  out["optimizer"] = detail::optimizer_to_json(spec.optimizer);
  json worker{{"gpuResource", spec.worker.gpu_resource}};
  if (!spec.worker.image.empty()) worker["image"] = spec.worker.image;
  if (spec.worker.rdma) {
    worker["rdma"] = {{"resource", spec.worker.rdma->resource}, {"perNode", spec.worker.rdma->per_node},
                      {"required", spec.worker.rdma->required}};
  }
  if (!spec.worker.node_selector.empty()) worker["nodeSelector"] = spec.worker.node_selector;
  if (!spec.worker.tolerations.empty()) {
    worker["tolerations"] = json::array();
    for (const auto& t : spec.worker.tolerations) worker["tolerations"].push_back(to_json(t));
  }
  if (!spec.worker.env.empty()) {
    worker["env"] = json::array();
    for (const auto& e : spec.worker.env) worker["env"].push_back(to_json(e));
  }
  if (!spec.worker.scheduler_name.empty()) worker["schedulerName"] = spec.worker.scheduler_name;
  if (!spec.worker.priority_class_name.empty()) worker["priorityClassName"] = spec.worker.priority_class_name;
  if (spec.worker.share_nodes) worker["shareNodes"] = true;
  if (spec.worker.gang) {
    worker["gang"] = {{"scheduler", to_string(spec.worker.gang->scheduler)}};
    if (!spec.worker.gang->queue_name.empty()) worker["gang"]["queueName"] = spec.worker.gang->queue_name;
  }
  worker["qosClass"] = to_string(spec.worker.qos_class);
  out["worker"] = worker;
  if (!spec.pod_template_overrides.empty()) {
    out["podTemplateOverrides"] = detail::pod_template_overrides_to_json(spec.pod_template_overrides);
  }
  out["limits"] = {{"caseTimeoutSeconds", spec.limits.case_timeout_seconds},
                   {"backoffLimit", spec.limits.backoff_limit}};
  if (spec.preflight) out["preflight"] = {{"selfTest", spec.preflight->self_test}};
  if (spec.cuda_graph) out["cudaGraph"] = true;
  return out;
}

json to_json(const BenchmarkRunStatus& status) {
  json conditions = json::array();
  for (const auto& c : status.conditions) {
    conditions.push_back({{"type", to_string(c.type)},
                          {"status", to_string(c.status)},
                          {"reason", c.reason},
                          {"message", c.message},
                          {"lastTransitionTime", c.last_transition_time},
                          {"observedGeneration", c.observed_generation}});
  }
  json results = json::array();
  for (const auto& r : status.results) results.push_back(to_json(r));
  json progress{{"completedCases", status.progress.completed_cases}, {"totalCases", status.progress.total_cases}};
  if (!status.progress.current_case.empty()) progress["currentCase"] = status.progress.current_case;
  if (status.progress.current_attempt > 0) progress["currentAttempt"] = status.progress.current_attempt;
  if (!status.progress.summary.empty()) progress["summary"] = status.progress.summary;
  if (status.progress.shared_node) progress["sharedNode"] = true;
  json out{{"observedGeneration", status.observed_generation},
           {"phase", to_string(status.phase)},
           {"conditions", conditions},
           {"progress", progress},
           {"results", results}};
  if (status.preflight) out["preflight"] = to_json(*status.preflight);
  if (status.best) {
    out["best"] = {{"case", status.best->case_id}, {"throughput", status.best->throughput}};
    if (!status.best->unit.empty()) out["best"]["unit"] = status.best->unit;
  }
  if (!status.start_time.empty()) out["startTime"] = status.start_time;
  if (!status.completion_time.empty()) out["completionTime"] = status.completion_time;
  return out;
}

json to_json(const BenchmarkRun& run) {
  json metadata = run.metadata.extra.is_object() ? run.metadata.extra : json::object();
  metadata["name"] = run.metadata.name;
  if (!run.metadata.namespace_.empty()) metadata["namespace"] = run.metadata.namespace_;
  if (!run.metadata.uid.empty()) metadata["uid"] = run.metadata.uid;
  if (!run.metadata.resource_version.empty()) metadata["resourceVersion"] = run.metadata.resource_version;
  if (run.metadata.generation != 0) metadata["generation"] = run.metadata.generation;
  if (!run.metadata.labels.empty()) metadata["labels"] = run.metadata.labels;
  if (!run.metadata.annotations.empty()) metadata["annotations"] = run.metadata.annotations;
  json out{{"apiVersion", run.api_version}, {"kind", run.kind}, {"metadata", metadata}, {"spec", to_json(run.spec)}};
  if (run.status) out["status"] = to_json(*run.status);
  return out;
}

}  // namespace dlbench
