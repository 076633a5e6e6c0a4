#include "child_names.hpp"

#include <cstdint>
#include <cstdio>

namespace dlbench::operator_ {
namespace {

// FNV-1a, 32 bits: stable across platforms and releases, unlike std::hash.
std::uint32_t fnv1a(const std::string& text) {
  std::uint32_t h = 2166136261u;
  for (const char c : text) {
    h ^= static_cast<unsigned char>(c);
    h *= 16777619u;
  }
  return h;
}

// The longest role suffix is "-worker-NNNN" (12); names leave room for it.
constexpr std::size_t kRoleRoom = 12;

}  // namespace

std::string bounded_label(const std::string& natural, std::size_t max_length) {
  if (natural.size() <= max_length) return natural;
  char hash[9];
  std::snprintf(hash, sizeof hash, "%08x", fnv1a(natural));
  std::string cut = natural.substr(0, max_length - 9);
  while (!cut.empty() && cut.back() == '-') cut.pop_back();
  return cut + "-" + hash;
}

ChildNames child_names(const std::string& run, const std::string& case_id, int attempt) {
  ChildNames n;
  n.prefix = bounded_label(run + "-" + case_id + "-a" + std::to_string(attempt), 63 - kRoleRoom);
  n.secret = n.prefix + "-ssh";
  n.hostfile = n.prefix + "-hostfile";
  n.service = n.prefix + "-workers";
  n.launcher = n.prefix + "-launcher";
  n.group = n.prefix + "-group";
  n.budget = n.prefix + "-budget";
  n.started = n.prefix + "-started";
  return n;
}

std::string ChildNames::worker(int index) const { return prefix + "-worker-" + std::to_string(index); }

}  // namespace dlbench::operator_
