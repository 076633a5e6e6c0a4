// Which transport NCCL used, read from its own NCCL_DEBUG=INFO lines, and the verdict on a
// multi-node case that asked for RDMA devices: a run that fell back to TCP sockets publishes
// numbers that only look like bad scaling, so it must say so.
//
// The lines read (NCCL 2.x; the prefix "host:pid:tid [dev] NCCL INFO" is matched loosely):
//   NCCL INFO Using network IB                     the network between nodes (Socket, IB, a plugin's name)
//   NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ...  the IB devices and their link layer (IB or RoCE)
//   NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC         a channel's transport
//   NCCL INFO Channel 00/0 : 1[1] -> 2[0] [send] via NET/IB/0/GDRDMA
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "dlbench/core/benchmark_run.hpp"

namespace dlbench {

// Fed every output line (anything that is not NCCL's is ignored); its memory is bounded.
class NcclLogReader {
 public:
  void line(std::string_view text);
  // nullopt where NCCL said nothing of its transports (no INFO lines, or no NCCL at all).
  std::optional<NcclTransport> transport() const;

 private:
  std::string network_;
  bool roce_ = false;
  std::set<std::string> links_;
  bool gpu_direct_rdma_ = false;
};

// "NCCL_DEBUG" and the rest: what a process sets, unless the user set NCCL_DEBUG, so that NCCL
// tells its transports (initialisation and network lines only, not every collective).
inline constexpr const char* kNcclDebugLevel = "INFO";
inline constexpr const char* kNcclDebugSubsystems = "INIT,NET";

// A Succeeded multi-node case whose spec asked for RDMA (spec.worker.rdma) and whose NCCL used
// sockets between nodes, or never said: with rdma.required it becomes Failed, reason RdmaNotUsed,
// its throughput kept; without, it stays Succeeded with that reason. Anything else is untouched.
void judge_rdma(CaseResult& result, const std::optional<RdmaSpec>& rdma);

}  // namespace dlbench
