#include "reduction_heap.hpp"

#include <malloc.h>

#include <cstdlib>
#include <string_view>

namespace dlbench::worker {

namespace {

// Whether GLIBC_TUNABLES ("name=value:name=value") names `tunable`.
bool tunables_name(const char* tunables, std::string_view tunable) {
  if (tunables == nullptr) return false;
  std::string_view rest(tunables);
  while (!rest.empty()) {
    const std::size_t end = rest.find(':');
    const std::string_view item = rest.substr(0, end);
    if (item.substr(0, item.find('=')) == tunable) return true;
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end + 1);
  }
  return false;
}

}  // namespace

std::vector<HeapSetting> reduction_heap_settings(const std::function<const char*(const char*)>& environment) {
  const std::vector<HeapSetting> wanted = {
      {M_MMAP_THRESHOLD, 32 << 20, "MALLOC_MMAP_THRESHOLD_", "glibc.malloc.mmap_threshold"},
      {M_TOP_PAD, 64 << 20, "MALLOC_TOP_PAD_", "glibc.malloc.top_pad"},
  };
  const char* tunables = environment("GLIBC_TUNABLES");
  std::vector<HeapSetting> settings;
  for (const HeapSetting& s : wanted) {
    if (environment(s.variable.c_str()) != nullptr || tunables_name(tunables, s.tunable)) continue;
    settings.push_back(s);
  }
  return settings;
}

std::string apply_reduction_heap_settings() {
  std::string applied;
  for (const HeapSetting& s : reduction_heap_settings([](const char* name) { return std::getenv(name); })) {
    // The process's malloc says no: glibc to a value past its bounds, AddressSanitizer's to any.
    if (mallopt(s.option, s.value) == 0) return "malloc refused " + s.tunable + "=" + std::to_string(s.value);
    applied += (applied.empty() ? "" : ":") + s.tunable + "=" + std::to_string(s.value);
  }
  return applied;
}

}  // namespace dlbench::worker
