// What the operator's caches keep of an object: only the facts the controller and reconciler
// read. At 1,000 runs a parsed JSON tree per object cost tens of MiB (a tree is ~10x its text);
// a child is kept as its typed facts, a run as its compact encoding plus the few fields the
// controller's scans read, parsed again only when that run is reconciled.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "observed.hpp"

namespace dlbench::operator_ {

struct CachedRun {
  std::string ns, name, uid, resource_version;
  std::string created;  // creationTimestamp (RFC 3339 UTC: sorts in time order)
  std::string phase;    // status.phase; Pending without one
  bool deleting = false;
  // The run as MessagePack (smaller than its JSON text, and quicker to read back), without
  // managedFields and kubectl's last-applied copy of the spec.
  std::vector<std::uint8_t> document;

  std::string key() const { return ns + "/" + name; }
  nlohmann::json parsed() const { return nlohmann::json::from_msgpack(document); }
};

// A child: its owner run (the dlbench.io/run label) and the reconciler's facts about it, typed by
// kind (a Secret does not pay for a Pod's facts).
template <typename Facts>
struct CachedChild {
  std::string ns;
  std::string run;
  Facts facts;

  std::string key() const { return ns + "/" + facts.name; }
  std::string run_key() const { return ns + "/" + run; }
  bool owned_by(const std::string& run_namespace, const std::string& run_name) const {
    return run == run_name && ns == run_namespace;
  }
};
using CachedPod = CachedChild<ObservedPod>;
using CachedJob = CachedChild<ObservedJob>;
using CachedObject = CachedChild<ObservedObject>;  // Secrets, ConfigMaps, Services

CachedRun cache_run(const nlohmann::json& run);
// The facts as observe_pod, observe_job and observe_object see them.
CachedPod cache_pod(const nlohmann::json& pod);
CachedJob cache_job(const nlohmann::json& job);
CachedObject cache_object(const nlohmann::json& object);

}  // namespace dlbench::operator_
