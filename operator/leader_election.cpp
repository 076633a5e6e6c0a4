#include "leader_election.hpp"

#include "observed.hpp"
#include "reconciler.hpp"

namespace dlbench::operator_ {

using nlohmann::json;

namespace {

// Lease times are MicroTime: RFC 3339 with microseconds.
std::string micro_time(TimePoint t) {
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count() % 1000000;
  std::string base = rfc3339_utc(t);
  char fraction[16];
  std::snprintf(fraction, sizeof fraction, ".%06lld", static_cast<long long>(micros));
  return base.substr(0, base.size() - 1) + fraction + "Z";
}

}  // namespace

LeaderElector::LeaderElector(KubeClient& client, std::string ns, std::string name, std::string identity,
                             std::chrono::seconds lease_duration, Now now)
    : client_(client), namespace_(std::move(ns)), name_(std::move(name)), identity_(std::move(identity)),
      duration_(lease_duration), now_(std::move(now)) {}

bool LeaderElector::try_acquire_or_renew() {
  const auto now = now_();
  json lease;
  try {
    lease = client_.get(resources::kLeases, namespace_, name_);
  } catch (const KubeError& e) {
    if (e.status != 404) return false;
    try {
      client_.create(resources::kLeases, namespace_,
                     {{"apiVersion", "coordination.k8s.io/v1"},
                      {"kind", "Lease"},
                      {"metadata", {{"name", name_}, {"namespace", namespace_}}},
                      {"spec", {{"holderIdentity", identity_}, {"leaseDurationSeconds", duration_.count()},
                                {"acquireTime", micro_time(now)}, {"renewTime", micro_time(now)},
                                {"leaseTransitions", 0}}}});
      return true;
    } catch (const KubeError&) {
      return false;  // someone else created it first
    }
  }
  const json spec = lease.value("spec", json::object());
  const std::string holder = spec.value("holderIdentity", "");
  const auto renewed = parse_rfc3339(spec.value("renewTime", ""));
  const auto duration = std::chrono::seconds(spec.value("leaseDurationSeconds", duration_.count()));
  const bool ours = holder == identity_;
  const bool expired = holder.empty() || !renewed || now > *renewed + duration;
  if (!ours && !expired) return false;
  json patch{{"metadata", {{"resourceVersion", lease["metadata"]["resourceVersion"]}}},
             {"spec", {{"holderIdentity", identity_}, {"leaseDurationSeconds", duration_.count()},
                       {"renewTime", micro_time(now)}}}};
  if (!ours) {
    patch["spec"]["acquireTime"] = micro_time(now);
    patch["spec"]["leaseTransitions"] = spec.value("leaseTransitions", 0) + 1;
  }
  try {
    client_.merge_patch(resources::kLeases, namespace_, name_, patch);
    return true;
  } catch (const KubeError&) {
    return false;  // 409: another replica updated it first
  }
}

}  // namespace dlbench::operator_
