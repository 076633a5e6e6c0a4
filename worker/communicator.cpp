#include <unistd.h>

#include <charconv>
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

void Communicator::abort(int exit_code) { std::_Exit(exit_code); }

std::optional<int> repeats_deputy(const std::vector<std::string>& hosts) {
  if (hosts.size() < 2) return std::nullopt;
  for (std::size_t r = 1; r < hosts.size(); ++r) {
    if (hosts[r] != hosts[0]) return static_cast<int>(r);
  }
  return 1;
}

std::optional<double> sum_where_every_rank_has(const std::optional<double>& mine, Communicator& comm) {
  if (comm.size() == 1) return mine;
  // As text, exactly (the shortest form that reads back the same double); empty where missing.
  std::string text;
  if (mine) {
    char buffer[32];
    const auto written = std::to_chars(buffer, buffer + sizeof buffer, *mine);
    text.assign(buffer, written.ptr);
  }
  double sum = 0;
  for (const std::string& theirs : comm.allgather(text)) {
    double value = 0;
    const auto read = std::from_chars(theirs.data(), theirs.data() + theirs.size(), value);
    if (theirs.empty() || read.ec != std::errc() || read.ptr != theirs.data() + theirs.size()) return std::nullopt;
    sum += value;
  }
  return sum;
}

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
