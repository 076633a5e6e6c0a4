#include "cached.hpp"

namespace dlbench::operator_ {

using nlohmann::json;

CachedRun cache_run(const json& run) {
  CachedRun out;
  const json& meta = run.at("metadata");
  out.ns = meta.value("namespace", "");
  out.name = meta.value("name", "");
  out.uid = meta.value("uid", "");
  out.resource_version = meta.value("resourceVersion", "");
  out.created = meta.value("creationTimestamp", "");
  out.deleting = meta.contains("deletionTimestamp");
  const auto status = run.find("status");
  out.phase = status != run.end() && status->is_object() ? status->value("phase", "Pending") : "Pending";
  json slim = run;
  auto& slim_meta = slim["metadata"];
  slim_meta.erase("managedFields");
  if (slim_meta.contains("annotations")) {
    slim_meta["annotations"].erase("kubectl.kubernetes.io/last-applied-configuration");
    if (slim_meta["annotations"].empty()) slim_meta.erase("annotations");
  }
  out.document = json::to_msgpack(slim);
  return out;
}

namespace {

template <typename Facts>
CachedChild<Facts> cached(const json& object, Facts facts) {
  const json& meta = object.at("metadata");
  CachedChild<Facts> out{.ns = meta.value("namespace", ""), .run = "", .facts = std::move(facts)};
  const auto labels = meta.find("labels");
  if (labels != meta.end() && labels->is_object()) out.run = labels->value("dlbench.io/run", "");
  return out;
}

// The reconciler reads a uid only of a pod (worker 0 owns its PodGroup): others keep none.
template <typename Facts>
Facts without_uid(Facts facts) {
  facts.uid.clear();
  facts.uid.shrink_to_fit();  // clear() alone keeps the allocation
  return facts;
}

}  // namespace

CachedPod cache_pod(const json& pod) { return cached(pod, observe_pod(pod)); }
CachedJob cache_job(const json& job) { return cached(job, without_uid(observe_job(job))); }
CachedObject cache_object(const json& object) { return cached(object, without_uid(observe_object(object))); }

}  // namespace dlbench::operator_
