// The syntax of names that Kubernetes checks on the objects the operator creates, checked here
// first so that a BenchmarkRun the operator cannot turn into pods is refused at the door, and
// the text helpers that keep hostile input out of messages and JSON.
#pragma once

#include <string>
#include <string_view>

namespace dlbench {

// metadata.name of a BenchmarkRun, namespace names: [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63.
bool is_dns1123_label(std::string_view text);
// A DNS-1123 subdomain: dot-separated labels, at most 253.
bool is_dns1123_subdomain(std::string_view text);
// Label and annotation keys, taint and toleration keys: [prefix/]name, the prefix a DNS-1123
// subdomain, the name [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])? of at most 63.
bool is_qualified_name(std::string_view text);
// Label values: empty, or a name as above of at most 63.
bool is_label_value(std::string_view text);
// Extended resources are domain-qualified: nvidia.com/gpu, rdma/hca_shared_devices_a.
bool is_extended_resource_name(std::string_view text);
// A resource quantity as a pod spec writes it: digits, an optional fraction, an optional suffix
// (m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei): "500m", "1.5", "16Gi". No signs or exponents.
bool is_resource_quantity(std::string_view text);
// A resource a podTemplateOverrides container may ask for: cpu, memory, ephemeral-storage,
// hugepages-<size>. Extended resources (a "/" in the name) are dlbench's: GPUs and RDMA devices.
bool is_compute_resource_name(std::string_view text);
// Container environment variable names as Kubernetes validates them: [-._a-zA-Z][-._a-zA-Z0-9]*.
bool is_env_var_name(std::string_view text);
// A path that never climbs: no ".." segment (Kubernetes refuses mount and sub paths with one).
bool has_no_backsteps(std::string_view path);
// Where a data set is mounted in a pod: absolute, not "/" itself, no "..", and clear of /dlbench,
// where the command engine's init container installs dlbench-exec.
bool is_data_mount_path(std::string_view path);

// Well-formed UTF-8 (no overlong forms, surrogates or code points above U+10FFFF). When it is
// not, *offset (if given) is the byte offset of the first bad byte.
bool is_valid_utf8(std::string_view text, std::size_t* offset = nullptr);
// The text for an error message: control characters and bytes that are not UTF-8 escaped
// (\n, \x00), cut to max_chars with "...".
std::string printable(std::string_view text, std::size_t max_chars = 60);

}  // namespace dlbench
