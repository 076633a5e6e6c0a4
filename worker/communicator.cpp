#include <unistd.h>

#include <cstdlib>
#include <string>

#include "communicator.hpp"

namespace dlbench::worker {

std::string local_host_name() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

std::vector<std::string> Communicator::hosts() { return allgather(local_host_name()); }

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
}

std::string mpi_library_name(const std::string& library_version) {
  std::string name = library_version.substr(0, library_version.find_first_of(",\n"));
  for (char& c : name) {
    if (c == '\t' || c == '\r') c = ' ';
  }
  const auto first = name.find_first_not_of(' ');
  if (first == std::string::npos) return {};
  return name.substr(first, name.find_last_not_of(' ') - first + 1);
}

std::string nccl_version_text(int code) {
  if (code <= 0) return {};
  // 2.9 and later: 20903; before: 2708 (major × 1000 + minor × 100 + patch).
  const bool wide = code >= 20900;
  const int major = wide ? code / 10000 : code / 1000;
  const int minor = wide ? code % 10000 / 100 : code % 1000 / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

}  // namespace dlbench::worker
