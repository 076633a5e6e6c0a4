#include "dlbench/core/nccl_log.hpp"

#include <iomanip>
#include <sstream>

namespace dlbench {
namespace {

constexpr std::size_t kMaxLinks = 32;      // distinct transports kept
constexpr std::size_t kMaxNetworkName = 64;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r' || s.back() == '\n' || s.back() == '\t')) s.remove_suffix(1);
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

// "NET/IB/0/GDRDMA" -> "NET/IB", "P2P/IPC" -> "P2P", "SHM/direct/direct" -> "SHM".
std::string link_name(std::string_view token) {
  const auto first = token.find('/');
  if (first == std::string_view::npos) return std::string(token);
  if (token.substr(0, first) != "NET") return std::string(token.substr(0, first));
  const auto second = token.find('/', first + 1);
  return std::string(token.substr(0, second));
}

}  // namespace

void NcclLogReader::line(std::string_view text) {
  const auto info = text.find("NCCL INFO ");
  if (info == std::string_view::npos) return;
  const std::string_view message = trim(text.substr(info + 10));
  if (message.starts_with("Using network ")) {
    network_ = std::string(trim(message.substr(14)).substr(0, kMaxNetworkName));
    return;
  }
  if (message.starts_with("NET/IB") && message.find(": Using") != std::string_view::npos) {
    if (message.find("/RoCE") != std::string_view::npos) roce_ = true;
    return;
  }
  const auto via = message.find(" via ");
  if (!message.starts_with("Channel") || via == std::string_view::npos) return;
  std::string_view token = message.substr(via + 5);
  token = token.substr(0, token.find(' '));
  if (token.empty()) return;
  if (token.find("GDRDMA") != std::string_view::npos) gpu_direct_rdma_ = true;
  if (links_.size() < kMaxLinks) links_.insert(link_name(token));
}

std::optional<NcclTransport> NcclLogReader::transport() const {
  NcclTransport t;
  t.network = network_;
  if (t.network.empty()) {  // older lines or a log without the network line: the NET channels say
    for (const std::string& l : links_) {
      if (l.starts_with("NET/")) t.network = l.substr(4);
    }
  }
  if (t.network.empty() && links_.empty()) return std::nullopt;
  if (t.network == "IB" && roce_) t.network = "RoCE";  // NCCL's IB transport over Ethernet
  t.links.assign(links_.begin(), links_.end());
  t.gpu_direct_rdma = gpu_direct_rdma_;
  return t;
}

void judge_rdma(CaseResult& result, const std::optional<RdmaSpec>& rdma) {
  if (!rdma || result.state != CaseState::Succeeded || result.case_.nodes < 2) return;
  const auto& t = result.nccl_transport;
  if (t && !t->network.empty() && t->network != "Socket") return;  // IB, RoCE or a fabric's plugin
  std::ostringstream message;
  message << "asked for RDMA (spec.worker.rdma " << rdma->resource << ") but ";
  if (t && t->network == "Socket") {
    message << "NCCL used TCP sockets between the nodes";
  } else {
    message << "NCCL never said which network it used (no NCCL_DEBUG=INFO lines), so RDMA is not proven";
  }
  if (result.throughput) {
    message << "; measured " << std::fixed << std::setprecision(2) << result.throughput->summary.median << " "
            << result.throughput->unit << " that way";
  }
  message << (rdma->required ? "; check the RDMA devices, NCCL_IB_HCA and the network attachment"
                             : " (kept: spec.worker.rdma.required is false)");
  if (rdma->required) result.state = CaseState::Failed;
  result.reason = kReasonRdmaNotUsed;
  result.message = message.str() + (result.message.empty() ? "" : "; " + result.message);
}

}  // namespace dlbench
