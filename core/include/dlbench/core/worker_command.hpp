// The dlbench-worker command line for one case: one definition for the local runner and the
// operator's launcher, so that both measure exactly the same thing.
#pragma once

#include <string>
#include <vector>

#include "dlbench/core/benchmark_run.hpp"

namespace dlbench {

struct WorkerInvocation {
  std::string program = "dlbench-worker";
  std::string backend = "cpu";        // cpu | cuda
  std::string communicator = "none";  // none | mpi | nccl
  int threads = 0;                    // 0: the worker's default
  int metrics_port = -1;              // -1: off
  std::string output;                 // empty: JSON on stdout
};

std::vector<std::string> worker_arguments(const BenchmarkRun& run, const CaseSpec& c, const WorkerInvocation& how);

}  // namespace dlbench
