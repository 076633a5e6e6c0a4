#include <unistd.h>

#include <cstdlib>

#include "communicator.hpp"

namespace dlbench::worker {

std::string local_host_name() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

std::vector<std::string> NoCommunicator::hosts() { return {local_host_name()}; }

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
}

}  // namespace dlbench::worker
