// Issue 35: which transport NCCL used, from its own INFO lines, and the RDMA verdict.
#include "dlbench/core/nccl_log.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dlbench/core/codec.hpp"
#include "dlbench/core/result_document.hpp"
#include "dlbench/core/run_state.hpp"
#include "dlbench/core/statistics.hpp"
#include "dlbench/core/status.hpp"

namespace dlbench {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

NcclTransport read(std::initializer_list<const char*> lines) {
  NcclLogReader reader;
  for (const char* l : lines) reader.line(l);
  const auto t = reader.transport();
  EXPECT_TRUE(t.has_value());
  return t.value_or(NcclTransport{});
}

TEST(NcclLog, InfiniBandWithGpuDirectAndNvlinkInsideTheNode) {
  const NcclTransport t = read({
      "gpu-a:4242:4242 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.11<0>",
      "gpu-a:4242:4242 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.11<0>",
      "gpu-a:4242:4242 [0] NCCL INFO Using network IB",
      "gpu-a:4242:4290 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
      "gpu-a:4242:4290 [0] NCCL INFO Channel 00/0 : 3[3] -> 4[0] [send] via NET/IB/0/GDRDMA",
      "gpu-a:4242:4290 [0] NCCL INFO Channel 01/0 : 7[3] -> 0[0] [receive] via NET/IB/1/GDRDMA",
      "step 12 loss 6.91",  // not NCCL's
  });
  EXPECT_EQ(t.network, "IB");
  EXPECT_THAT(t.links, ElementsAre("NET/IB", "P2P"));
  EXPECT_TRUE(t.gpu_direct_rdma);
}

TEST(NcclLog, RoceIsNcclsIbTransportOverEthernet) {
  const NcclTransport t = read({
      "n1:7:7 [0] NCCL INFO NET/IB : Using [0]mlx5_2:1/RoCE [RO]; OOB ens1f0:192.168.4.2<0>",
      "n1:7:7 [0] NCCL INFO Using network IB",
      "n1:7:31 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0",
  });
  EXPECT_EQ(t.network, "RoCE");
  EXPECT_FALSE(t.gpu_direct_rdma);
}

TEST(NcclLog, SocketsAndSharedMemory) {
  const NcclTransport t = read({
      "n1:7:7 [0] NCCL INFO NET/IB : No device found.",
      "n1:7:7 [0] NCCL INFO NET/Socket : Using [0]eth0:10.244.1.7<0>\r",
      "n1:7:7 [0] NCCL INFO Using network Socket\r",
      "n1:7:31 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct",
      "n1:7:31 [0] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [send] via NET/Socket/0",
  });
  EXPECT_EQ(t.network, "Socket");
  EXPECT_THAT(t.links, ElementsAre("NET/Socket", "SHM"));
}

TEST(NcclLog, ThePluginsNameAndTheChannelsWhenTheNetworkLineIsMissing) {
  EXPECT_EQ(read({"ip-10-0-0-1:9:9 [0] NCCL INFO Using network AWS Libfabric"}).network, "AWS Libfabric");
  EXPECT_EQ(read({"h:1:2 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0"}).network, "Socket");
  NcclLogReader silent;
  silent.line("NCCL WARN Using network IB");  // a warning is not what it used
  silent.line("epoch 1 done");
  EXPECT_FALSE(silent.transport().has_value());
}

TEST(NcclLog, MemoryIsBoundedWhateverTheLinesSay) {
  NcclLogReader reader;
  for (int i = 0; i < 10000; ++i) {
    reader.line("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via X" + std::to_string(i) + "/y");
  }
  reader.line("h:1:2 [0] NCCL INFO Using network " + std::string(10000, 'N'));
  const auto t = reader.transport();
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->links.size(), 32u);
  EXPECT_EQ(t->network.size(), 64u);
}

CaseResult two_node_result(std::optional<NcclTransport> transport) {
  CaseResult r;
  r.case_ = {2, 4, 64, Precision::amp};
  const std::vector<double> repeats{9000, 9100, 9050};
  r.throughput = Throughput{"samples/s", summarize(repeats), repeats};
  r.nccl_transport = std::move(transport);
  return r;
}

TEST(RdmaVerdict, SocketsBetweenNodesFailARunThatAskedForRdmaAndKeepTheThroughput) {
  const RdmaSpec rdma{"rdma/hca", 1, true};
  CaseResult r = two_node_result(NcclTransport{"Socket", {"NET/Socket", "P2P"}, false});
  judge_rdma(r, rdma);
  EXPECT_EQ(r.state, CaseState::Failed);
  EXPECT_EQ(r.reason, "RdmaNotUsed");
  EXPECT_EQ(r.message, "asked for RDMA (spec.worker.rdma rdma/hca) but NCCL used TCP sockets between the nodes; "
                       "measured 9050.00 samples/s that way; check the RDMA devices, NCCL_IB_HCA and the network attachment");
  ASSERT_TRUE(r.throughput.has_value());  // nothing measured is lost
  EXPECT_TRUE(failure_is_permanent(r.reason));

  CaseResult silent = two_node_result(std::nullopt);
  judge_rdma(silent, rdma);
  EXPECT_EQ(silent.reason, "RdmaNotUsed");
  EXPECT_THAT(silent.message, HasSubstr("NCCL never said which network it used (no NCCL_DEBUG=INFO lines)"));
}

TEST(RdmaVerdict, NotRequiredKeepsTheCaseSucceededWithTheReason) {
  CaseResult r = two_node_result(NcclTransport{"Socket", {}, false});
  judge_rdma(r, RdmaSpec{"rdma/hca", 1, false});
  EXPECT_EQ(r.state, CaseState::Succeeded);
  EXPECT_EQ(r.reason, "RdmaNotUsed");
  EXPECT_THAT(r.message, HasSubstr("(kept: spec.worker.rdma.required is false)"));
}

TEST(RdmaVerdict, RdmaNetworksOneNodeAndNoRdmaSpecAreLeftAlone) {
  for (const char* network : {"IB", "RoCE", "AWS Libfabric"}) {
    CaseResult r = two_node_result(NcclTransport{network, {}, true});
    const CaseResult before = r;
    judge_rdma(r, RdmaSpec{"rdma/hca", 1, true});
    EXPECT_EQ(r, before) << network;
  }
  CaseResult one_node = two_node_result(NcclTransport{"Socket", {}, false});
  one_node.case_.nodes = 1;  // no network between nodes to prove
  judge_rdma(one_node, RdmaSpec{"rdma/hca", 1, true});
  EXPECT_EQ(one_node.state, CaseState::Succeeded);
  CaseResult no_rdma = two_node_result(NcclTransport{"Socket", {}, false});
  judge_rdma(no_rdma, std::nullopt);
  EXPECT_EQ(no_rdma.reason, "");
}

// The transport travels from the worker's document into the status, and the document is judged.
TEST(RdmaVerdict, ResultDocumentsCarryTheTransportIntoTheStatus) {
  ResultDocument doc;
  doc.case_ = {2, 1, 8, Precision::fp32};
  doc.devices = 2;
  doc.global_batch_size = 16;
  doc.methodology.repeats = 3;
  const std::vector<double> repeats{100, 101, 99};
  doc.throughput = Throughput{"samples/s", summarize(repeats), repeats};
  doc.step_time_seconds = summarize(std::vector<double>{0.16, 0.16});
  doc.environment.backend = "cuda";
  doc.environment.nccl_transport = NcclTransport{"Socket", {"NET/Socket"}, false};
  const std::string text = to_json(doc).dump();
  EXPECT_THAT(text, HasSubstr(R"("ncclTransport":{"gpuDirectRdma":false,"links":["NET/Socket"],"network":"Socket"})"));
  const auto judged = result_from_document(text, doc.case_, 1, RdmaSpec{"rdma/hca", 1, true}, {});
  ASSERT_TRUE(judged.has_value());
  EXPECT_EQ(judged->state, CaseState::Failed);
  EXPECT_EQ(judged->reason, "RdmaNotUsed") << judged->message;
  ASSERT_TRUE(judged->nccl_transport.has_value());
  EXPECT_EQ(judged->nccl_transport->network, "Socket");
  const auto plain = result_from_document(text, doc.case_, 1, std::nullopt, {});
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(plain->state, CaseState::Succeeded) << plain->message;

  BenchmarkRunStatus status;
  status.results.push_back(*judged);
  const auto back = decode_status(to_json(status));
  ASSERT_TRUE(back.ok()) << back.errors.front().to_string();
  EXPECT_EQ(back.value->results[0], *judged);
}

}  // namespace
}  // namespace dlbench
