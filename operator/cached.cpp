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
  CachedChild<Facts> out{.ns = object.at("metadata").value("namespace", ""), .run = "", .facts = std::move(facts)};
  const json& meta = object.at("metadata");
  const auto labels = meta.find("labels");
  if (labels != meta.end() && labels->is_object()) out.run = labels->value("dlbench.io/run", "");
  return out;
}

}  // namespace

CachedPod cache_pod(const json& pod) { return cached(pod, observe_pod(pod)); }
// The reconciler reads a uid only of a pod (worker 0 owns its PodGroup): others keep none.
CachedJob cache_job(const json& job) {
  auto facts = observe_job(job);
  facts.uid.clear();
  facts.uid.shrink_to_fit();
  return cached(job, std::move(facts));
}

CachedObject cache_object(const json& object) {
  auto facts = observe_object(object);
  facts.uid.clear();
  facts.uid.shrink_to_fit();
  return cached(object, std::move(facts));
}

}  // namespace dlbench::operator_
