// spec.podTemplateOverrides: decoded, checked against what dlbench owns (pod_ownership.hpp), and
// written back. The CRD's CEL rules refuse the same; tests/crd/agreement_test.py probes both.
#include <algorithm>
#include <set>

#include "decoder.hpp"
#include "dlbench/core/codec.hpp"
#include "dlbench/core/pod_ownership.hpp"

namespace dlbench {
namespace {

using namespace detail;
using json = nlohmann::json;

constexpr std::int64_t kMaxOverrides = 8;
constexpr std::size_t kMaxMetadataEntries = 64;
constexpr std::int64_t kMaxVolumes = 32;
constexpr std::int64_t kMaxNamedRefs = 16;  // imagePullSecrets, schedulingGates

bool is_role(std::string_view name) { return name == kWorkerRole || name == kLauncherRole; }

bool under(std::string_view path, std::string_view root) {
  return path == root || (path.starts_with(root) && path.size() > root.size() && path[root.size()] == '/');
}

std::string roles_text() { return "\"" + std::string(kWorkerRole) + "\" or \"" + std::string(kLauncherRole) + "\""; }

void decode_metadata(Decoder& d, const json& obj, const std::string& path, PodTemplateOverride& out) {
  if (!d.expect_object(obj, path)) return;
  d.reject_unknown(obj, path, {"labels", "annotations"});
  if (const json* labels = Decoder::find(obj, "labels")) {
    const std::string l_path = child(path, "labels");
    d.label_map(*labels, l_path, kMaxMetadataEntries, true, out.labels);
    for (const auto& [key, value] : out.labels) {
      for (std::string_view owned : kOwnedLabelPrefixes) {
        if (key.starts_with(owned)) {
          d.fail(child(l_path, printable(key)), "\"" + printable(key) + "\": labels under " + std::string(owned) +
                                                    " are dlbench's (its Service and anti-affinity select on them)");
        }
      }
    }
  }
  if (const json* annotations = Decoder::find(obj, "annotations")) {
    const std::string a_path = child(path, "annotations");
    d.label_map(*annotations, a_path, kMaxMetadataEntries, false, out.annotations);
    for (const auto& [key, value] : out.annotations) {
      if (key.starts_with(kOwnedAnnotationPrefix)) {
        d.fail(child(a_path, printable(key)),
               "\"" + printable(key) + "\": annotations under " + std::string(kOwnedAnnotationPrefix) + " are dlbench's");
      }
    }
  }
}

// [{name}], min_items to max_items of them, each name valid and used once.
std::vector<std::string> decode_names(Decoder& d, const json& list, const std::string& path, std::int64_t min_items,
                                      std::int64_t max_items, bool (*valid)(std::string_view), const std::string& what) {
  std::vector<std::string> out;
  const json* items = d.list(list, path, min_items, max_items);
  if (items == nullptr) return out;
  for (std::size_t i = 0; i < items->size(); ++i) {
    const std::string e_path = element(path, i);
    if (!d.expect_object((*items)[i], e_path)) continue;
    d.reject_unknown((*items)[i], e_path, {"name"});
    std::string name;
    if (d.require((*items)[i], e_path, "name", what)) d.read_name((*items)[i], e_path, "name", valid, what, name);
    if (name.empty()) continue;
    if (std::find(out.begin(), out.end(), name) != out.end()) d.fail(child(e_path, "name"), "\"" + name + "\" is listed twice");
    out.push_back(name);
  }
  return out;
}

// Passed through to the pod; only what dlbench must know is checked: a name of its own.
void decode_volumes(Decoder& d, const json& list, const std::string& path, json& out) {
  const json* items = d.list(list, path, 0, kMaxVolumes);
  if (items == nullptr) return;
  std::set<std::string> names;
  for (std::size_t i = 0; i < items->size(); ++i) {
    const std::string v_path = element(path, i);
    if (!d.expect_object((*items)[i], v_path)) continue;
    std::string name;
    if (!d.require((*items)[i], v_path, "name", "a volume name (a DNS-1123 label)")) continue;
    d.read_name((*items)[i], v_path, "name", [](const std::string& n) { return is_dns1123_label(n); },
                "a volume name (a DNS-1123 label: lowercase letters, digits and '-', at most 63)", name);
    if (name.empty()) continue;
    if (std::find(kOwnedVolumes.begin(), kOwnedVolumes.end(), name) != kOwnedVolumes.end()) {
      d.fail(child(v_path, "name"), "\"" + name + "\" is a volume of dlbench's (ssh, hostfile, dshm, data, dlbench)");
    } else if (!names.insert(name).second) {
      d.fail(child(v_path, "name"), "\"" + name + "\" is listed twice");
    }
    out.push_back((*items)[i]);
  }
}

void decode_mounts(Decoder& d, const json& list, const std::string& path, json& out) {
  const json* items = d.list(list, path, 0, kMaxVolumes);
  if (items == nullptr) return;
  for (std::size_t i = 0; i < items->size(); ++i) {
    const json& m = (*items)[i];
    const std::string m_path = element(path, i);
    if (!d.expect_object(m, m_path)) continue;
    d.reject_unknown(m, m_path, {"name", "mountPath", "readOnly", "subPath"});
    std::string name, mount_path, sub_path;
    bool read_only = false;
    if (d.require(m, m_path, "name", "the name of a volume in this override's spec.volumes")) {
      d.read_name(m, m_path, "name", [](const std::string& n) { return is_dns1123_label(n); }, "a volume name", name);
    }
    if (d.require(m, m_path, "mountPath", "an absolute path")) {
      d.read_name(m, m_path, "mountPath",
                  [](const std::string& p) { return p.size() > 1 && p.front() == '/' && has_no_backsteps(p); },
                  "an absolute path other than / without \"..\"", mount_path);
    }
    for (std::string_view owned : kOwnedMountPaths) {
      if (under(mount_path, owned)) {
        d.fail(child(m_path, "mountPath"), "\"" + printable(mount_path) + "\" is at or under " + std::string(owned) +
                                               ", where dlbench mounts its own volumes");
      }
    }
    d.read_bool(m, m_path, "readOnly", read_only);
    d.read_name(m, m_path, "subPath", [](const std::string& p) { return p.empty() || (p.front() != '/' && has_no_backsteps(p)); },
                "a relative path without \"..\"", sub_path);
    json mount{{"name", name}, {"mountPath", mount_path}};
    if (read_only) mount["readOnly"] = true;
    if (!sub_path.empty()) mount["subPath"] = sub_path;
    out.push_back(mount);
  }
}

void decode_resource_map(Decoder& d, const json& obj, const std::string& path, std::map<std::string, std::string>& out) {
  if (!d.expect_object(obj, path)) return;
  for (const auto& [name, value] : obj.items()) {
    const std::string r_path = child(path, printable(name));
    if (!is_compute_resource_name(name)) {
      d.fail(r_path, "\"" + printable(name) + "\" is not one of cpu, memory, ephemeral-storage, hugepages-<size>" +
                         (name.find('/') != std::string::npos
                              ? " (extended resources are dlbench's: spec.worker.gpuResource and spec.worker.rdma)"
                              : ""));
      continue;
    }
    auto text = d.string(value, r_path);
    if (!text) continue;
    if (!is_resource_quantity(*text)) {
      d.fail(r_path, "\"" + printable(*text) + "\" is not a quantity such as 4, 500m or 16Gi");
      continue;
    }
    out[name] = *text;
  }
}

void decode_containers(Decoder& d, const json& list, const std::string& path, PodTemplateOverride& out) {
  const json* items = d.list(list, path, 0, 2);
  if (items == nullptr) return;
  for (std::size_t i = 0; i < items->size(); ++i) {
    const json& c = (*items)[i];
    const std::string c_path = element(path, i);
    if (!d.expect_object(c, c_path)) continue;
    d.reject_unknown(c, c_path, {"name", "env", "volumeMounts", "resources"});
    ContainerOverride container;
    if (d.require(c, c_path, "name", roles_text())) {
      d.read_name(c, c_path, "name", [](const std::string& n) { return is_role(n); }, roles_text(), container.name);
    }
    if (const json* env = Decoder::find(c, "env")) detail::decode_env(d, *env, child(c_path, "env"), container.env);
    if (const json* mounts = Decoder::find(c, "volumeMounts")) {
      decode_mounts(d, *mounts, child(c_path, "volumeMounts"), container.volume_mounts);
    }
    if (const json* resources = Decoder::find(c, "resources")) {
      const std::string r_path = child(c_path, "resources");
      if (d.expect_object(*resources, r_path)) {
        d.reject_unknown(*resources, r_path, {"requests", "limits"});
        if (const json* r = Decoder::find(*resources, "requests")) decode_resource_map(d, *r, child(r_path, "requests"), container.requests);
        if (const json* l = Decoder::find(*resources, "limits")) decode_resource_map(d, *l, child(r_path, "limits"), container.limits);
      }
    }
    const bool twice = std::any_of(out.containers.begin(), out.containers.end(),
                                   [&](const ContainerOverride& o) { return o.name == container.name; });
    if (twice && !container.name.empty()) d.fail(child(c_path, "name"), "\"" + container.name + "\" is listed twice");
    out.containers.push_back(std::move(container));
  }
}

void decode_pod_spec(Decoder& d, const json& obj, const std::string& path, PodTemplateOverride& out) {
  if (!d.expect_object(obj, path)) return;
  d.reject_unknown(obj, path, {"serviceAccountName", "nodeSelector", "affinity", "tolerations", "volumes",
                               "imagePullSecrets", "schedulingGates", "hostNetwork", "securityContext", "containers"});
  d.read_name(obj, path, "serviceAccountName", [](const std::string& n) { return is_dns1123_subdomain(n); },
              "a service account name (a DNS-1123 subdomain)", out.service_account_name);
  if (const json* selector = Decoder::find(obj, "nodeSelector")) {
    d.label_map(*selector, child(path, "nodeSelector"), bounds::kMaxNodeSelectorEntries, true, out.node_selector);
  }
  if (const json* affinity = Decoder::find(obj, "affinity")) {
    const std::string a_path = child(path, "affinity");
    if (d.expect_object(*affinity, a_path)) {
      d.reject_unknown(*affinity, a_path, {"nodeAffinity", "podAffinity", "podAntiAffinity"});
      for (const auto& [kind, value] : affinity->items()) d.expect_object(value, child(a_path, kind));
      out.affinity = *affinity;
    }
  }
  if (const json* t = Decoder::find(obj, "tolerations")) detail::decode_tolerations(d, *t, child(path, "tolerations"), out.tolerations);
  if (const json* v = Decoder::find(obj, "volumes")) decode_volumes(d, *v, child(path, "volumes"), out.volumes);
  if (const json* s = Decoder::find(obj, "imagePullSecrets")) {
    out.image_pull_secrets = decode_names(d, *s, child(path, "imagePullSecrets"), 0, kMaxNamedRefs,
                                          [](std::string_view n) { return is_dns1123_subdomain(n); }, "a Secret's name");
  }
  if (const json* g = Decoder::find(obj, "schedulingGates")) {
    const std::string g_path = child(path, "schedulingGates");
    out.scheduling_gates = decode_names(d, *g, g_path, 0, kMaxNamedRefs, [](std::string_view n) { return is_qualified_name(n); },
                                        "a scheduling gate ([prefix/]name)");
    for (std::size_t i = 0; i < out.scheduling_gates.size(); ++i) {
      if (out.scheduling_gates[i] == kKueueAdmissionGate) {
        d.fail(child(element(g_path, i), "name"), std::string(kKueueAdmissionGate) +
                                                      " is dlbench's (spec.worker.gang with scheduler kueue sets it)");
      }
    }
  }
  if (Decoder::find(obj, "hostNetwork") != nullptr) {
    bool host = false;
    d.read_bool(obj, path, "hostNetwork", host);
    out.host_network = host;
  }
  if (const json* security = Decoder::find(obj, "securityContext")) {
    if (d.expect_object(*security, child(path, "securityContext"))) out.security_context = *security;
  }
  if (const json* c = Decoder::find(obj, "containers")) decode_containers(d, *c, child(path, "containers"), out);
}

}  // namespace

void detail::decode_pod_template_overrides(Decoder& d, const json& list, const std::string& path,
                                           std::vector<PodTemplateOverride>& out) {
  const json* items = d.list(list, path, 0, kMaxOverrides);
  if (items == nullptr) return;
  for (std::size_t i = 0; i < items->size(); ++i) {
    const json& o = (*items)[i];
    const std::string o_path = element(path, i);
    if (!d.expect_object(o, o_path)) continue;
    d.reject_unknown(o, o_path, {"targetJobs", "metadata", "spec"});
    PodTemplateOverride override_;
    if (const json* targets = d.require(o, o_path, "targetJobs", "[{name: worker}] and/or [{name: launcher}]")) {
      override_.target_jobs = decode_names(d, *targets, child(o_path, "targetJobs"), 1, 2, is_role, roles_text());
    }
    if (const json* m = Decoder::find(o, "metadata")) decode_metadata(d, *m, child(o_path, "metadata"), override_);
    if (const json* s = Decoder::find(o, "spec")) decode_pod_spec(d, *s, child(o_path, "spec"), override_);
    // A container is in the pods of its own role only; a mount names a volume of this override.
    for (std::size_t c = 0; c < override_.containers.size(); ++c) {
      const ContainerOverride& container = override_.containers[c];
      const std::string c_path = element(child(child(o_path, "spec"), "containers"), c);
      if (!container.name.empty() && std::find(override_.target_jobs.begin(), override_.target_jobs.end(),
                                               container.name) == override_.target_jobs.end()) {
        d.fail(child(c_path, "name"), "\"" + container.name + "\" is not in a pod this override targets (targetJobs)");
      }
      for (std::size_t m = 0; m < container.volume_mounts.size(); ++m) {
        const std::string& name = container.volume_mounts[m]["name"].get_ref<const std::string&>();
        const bool declared = std::any_of(override_.volumes.begin(), override_.volumes.end(),
                                          [&](const json& v) { return v.value("name", "") == name; });
        if (!name.empty() && !declared) {
          d.fail(child(element(child(c_path, "volumeMounts"), m), "name"),
                 "\"" + name + "\" is not a volume of this override's spec.volumes");
        }
      }
    }
    out.push_back(std::move(override_));
  }
}

// Rules across fields: what the engine has, and what Guaranteed QoS leaves to dlbench.
void detail::check_pod_template_overrides(Decoder& d, const BenchmarkRunSpec& spec, const std::string& path) {
  for (std::size_t i = 0; i < spec.pod_template_overrides.size(); ++i) {
    const PodTemplateOverride& o = spec.pod_template_overrides[i];
    const std::string o_path = element(path, i);
    if (spec.engine == Engine::command) {
      for (std::size_t t = 0; t < o.target_jobs.size(); ++t) {
        if (o.target_jobs[t] == kLauncherRole) {
          d.fail(child(element(child(o_path, "targetJobs"), t), "name"),
                 "engine: command has no launcher pod (its worker 0 reports); target worker");
        }
      }
    }
    if (spec.worker.qos_class == QosClass::Guaranteed) {
      for (std::size_t c = 0; c < o.containers.size(); ++c) {
        if (o.containers[c].name == kWorkerRole && !o.containers[c].limits.empty()) {
          d.fail(child(element(child(child(o_path, "spec"), "containers"), c), "resources.limits"),
                 "with spec.worker.qosClass Guaranteed dlbench sets the worker's limits to its requests: set requests only");
        }
      }
    }
  }
}

json detail::pod_template_overrides_to_json(const std::vector<PodTemplateOverride>& overrides) {
  json out = json::array();
  for (const PodTemplateOverride& o : overrides) {
    json targets = json::array();
    for (const std::string& t : o.target_jobs) targets.push_back({{"name", t}});
    json entry{{"targetJobs", targets}};
    if (!o.labels.empty()) entry["metadata"]["labels"] = o.labels;
    if (!o.annotations.empty()) entry["metadata"]["annotations"] = o.annotations;
    json spec = json::object();
    if (!o.service_account_name.empty()) spec["serviceAccountName"] = o.service_account_name;
    if (!o.node_selector.empty()) spec["nodeSelector"] = o.node_selector;
    if (o.affinity) spec["affinity"] = *o.affinity;
    if (!o.tolerations.empty()) {
      for (const auto& t : o.tolerations) spec["tolerations"].push_back(to_json(t));
    }
    if (!o.volumes.empty()) spec["volumes"] = o.volumes;
    for (const auto& s : o.image_pull_secrets) spec["imagePullSecrets"].push_back({{"name", s}});
    for (const auto& g : o.scheduling_gates) spec["schedulingGates"].push_back({{"name", g}});
    if (o.host_network) spec["hostNetwork"] = *o.host_network;
    if (o.security_context) spec["securityContext"] = *o.security_context;
    for (const ContainerOverride& c : o.containers) {
      json container{{"name", c.name}};
      for (const auto& e : c.env) container["env"].push_back(to_json(e));
      if (!c.volume_mounts.empty()) container["volumeMounts"] = c.volume_mounts;
      if (!c.requests.empty()) container["resources"]["requests"] = c.requests;
      if (!c.limits.empty()) container["resources"]["limits"] = c.limits;
      spec["containers"].push_back(container);
    }
    if (!spec.empty()) entry["spec"] = spec;
    out.push_back(entry);
  }
  return out;
}

}  // namespace dlbench
