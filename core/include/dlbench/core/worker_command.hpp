// The dlbench-worker command line for one case: one definition for the local runner and the
// operator's launcher, so that both measure exactly the same thing.
#pragma once

#include <string>
#include <utility>
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

// A preflight case (c.preflight) gets `dlbench-worker --self-test` for the run's precisions.
std::vector<std::string> worker_arguments(const BenchmarkRun& run, const CaseSpec& c, const WorkerInvocation& how);

// What a stopped case's repeats rest on, for every mpirun dlbench starts (the operator's launcher
// and `dlbench run`): once one rank has ended, Open MPI stops the others with SIGTERM and kills
// them this long after (odls_base_sigkill_timeout), and inside that second rank 0's deputy writes
// the repeats where rank 0 could not (worker/program/run_case.cpp). It is Open MPI's default,
// named on the command line so that a site's openmpi-mca-params.conf or an OMPI_MCA_ variable in
// the run's env cannot take that second away.
inline constexpr int kRankSigkillGraceSeconds = 1;
inline std::vector<std::string> mpirun_stop_arguments() {
  return {"--mca", "odls_base_sigkill_timeout", std::to_string(kRankSigkillGraceSeconds)};
}

// engine: command — what the wrapped command finds in its environment on one node of a case:
// the case (DLBENCH_*), and the rendezvous variables torchrun and torch.distributed read, in
// the Kubeflow PyTorchJob convention: one entry per node (WORLD_SIZE = nodes, RANK = NODE_RANK =
// the node's index), so that `torchrun --nnodes $DLBENCH_NODES --nproc_per_node
// $DLBENCH_GPUS_PER_NODE --node_rank $DLBENCH_NODE_RANK --master_addr $MASTER_ADDR
// --master_port $MASTER_PORT script.py` starts the whole job. The operator and `dlbench run`
// both build it here.
struct CommandNode {
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";  // node 0's address
  int master_port = 29500;                // torch.distributed's customary port
  std::string home;  // DLBENCH_HOME: where dlbench-exec, the Python helper and the examples are
};
inline constexpr int kDefaultMasterPort = 29500;
std::vector<std::pair<std::string, std::string>> command_environment(const BenchmarkRun& run, const CaseSpec& c,
                                                                     const CommandNode& where);

}  // namespace dlbench
