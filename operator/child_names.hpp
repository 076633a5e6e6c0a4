// Deterministic names for the objects of one case attempt: "<run>-<case>-a<attempt>-<role>".
// Every name is a DNS-1123 label (pods are addressed as <pod>.<service> in DNS): when the
// natural name is longer than 63 characters it is cut and ends in 8 hex digits of a hash of
// the whole natural name, so distinct runs never collide and the same run always maps alike.
#pragma once

#include <string>

namespace dlbench::operator_ {

struct ChildNames {
  std::string prefix;  // "<run>-<case>-a<attempt>", shortened if needed
  std::string secret, hostfile, service, launcher;
  std::string group;  // the PodGroup (Volcano, scheduler-plugins) or Kueue pod group of the workers
  std::string budget;  // the PodDisruptionBudget over the attempt's pods
  std::string started;  // engine: command's record that every worker ran (a ConfigMap)
  std::string worker(int index) const;
};

ChildNames child_names(const std::string& run, const std::string& case_id, int attempt);
// A DNS-1123 label from `natural`, at most 63 characters, deterministic.
std::string bounded_label(const std::string& natural, std::size_t max_length = 63);

}  // namespace dlbench::operator_
