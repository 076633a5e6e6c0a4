// What dlbench owns in the pods it creates, so that spec.podTemplateOverrides can be refused
// where it would take it away: the operator builds pods with these names, and the decoder and
// the CRD's CEL rules refuse overrides that touch them.
#pragma once

#include <array>
#include <string_view>

namespace dlbench {

// The pods' roles, as targetJobs and the container names spell them.
inline constexpr std::string_view kWorkerRole = "worker";
inline constexpr std::string_view kLauncherRole = "launcher";

inline constexpr const char* kConfigMount = "/etc/dlbench";
inline constexpr const char* kSshMount = "/etc/dlbench/ssh";
inline constexpr const char* kExecMount = "/dlbench";  // engine: command — dlbench-exec and examples
inline constexpr const char* kShmMount = "/dev/shm";
// Mount paths an override may not use, nor mount anything beneath.
inline constexpr std::array<std::string_view, 3> kOwnedMountPaths{"/etc/dlbench", "/dlbench", "/dev/shm"};
// The volumes dlbench adds: SSH keys, the hostfile, shared memory, the data set, dlbench-exec.
inline constexpr std::array<std::string_view, 5> kOwnedVolumes{"ssh", "hostfile", "dshm", "data", "dlbench"};
// Label keys under these prefixes select dlbench's pods (its Service, anti-affinity, Kueue group).
inline constexpr std::array<std::string_view, 2> kOwnedLabelPrefixes{"dlbench.io/", "app.kubernetes.io/"};
inline constexpr std::string_view kOwnedAnnotationPrefix = "dlbench.io/";
// Kueue's admission gate, which dlbench sets and Kueue removes (spec.worker.gang kueue).
inline constexpr const char* kKueueAdmissionGate = "kueue.x-k8s.io/admission";
// sshd's port on a worker with hostNetwork: the node's own sshd has 22.
inline constexpr int kSshPort = 22;
inline constexpr int kHostNetworkSshPort = 2222;

}  // namespace dlbench
