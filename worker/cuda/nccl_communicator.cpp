#include "cuda/nccl_communicator.hpp"

#include <mpi.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <vector>

#include "cuda/cuda_check.hpp"
#include "dlbench/core/nccl_log.hpp"

namespace dlbench::worker {
namespace {

// Unless the user chose NCCL's logging: its initialisation and network lines into a file of this
// process's, read back for the result's ncclTransport (a multi-node run that asked for RDMA is
// judged on it). Set before the first NCCL call, which reads them. Returns the file, or "".
std::string log_nccl_transports() {
  if (std::getenv("NCCL_DEBUG") != nullptr) return "";
  const std::string file = (std::filesystem::temp_directory_path() /
                            ("dlbench-nccl-" + std::to_string(getpid()) + ".log")).string();
  setenv("NCCL_DEBUG", kNcclDebugLevel, 1);
  setenv("NCCL_DEBUG_SUBSYS", kNcclDebugSubsystems, 1);
  setenv("NCCL_DEBUG_FILE", file.c_str(), 1);
  return file;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(int* argc, char*** argv, int device, cudaStream_t compute_stream)
      : host_(make_mpi_communicator(argc, argv)), compute_stream_(compute_stream), nccl_log_(log_nccl_transports()) {
    DLBENCH_CUDA_CHECK(cudaSetDevice(device));
    DLBENCH_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    DLBENCH_CUDA_CHECK(cudaEventCreateWithFlags(&gradients_written_, cudaEventDisableTiming));
    DLBENCH_CUDA_CHECK(cudaEventCreateWithFlags(&reductions_done_, cudaEventDisableTiming));
    ncclUniqueId id{};
    if (host_->rank() == 0) DLBENCH_NCCL_CHECK(ncclGetUniqueId(&id));
    if (MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS) {
      throw std::runtime_error("MPI_Bcast of the NCCL unique id failed");
    }
    DLBENCH_NCCL_CHECK(ncclCommInitRank(&comm_, host_->size(), id, host_->rank()));
  }
  ~NcclCommunicator() override {
    cudaStreamSynchronize(stream_);
    ncclCommDestroy(comm_);
    cudaEventDestroy(reductions_done_);
    cudaEventDestroy(gradients_written_);
    cudaStreamDestroy(stream_);
    if (!nccl_log_.empty()) std::filesystem::remove(nccl_log_);
  }

  std::optional<NcclTransport> transport() const override {
    if (nccl_log_.empty()) return std::nullopt;
    std::ifstream in(nccl_log_);
    NcclLogReader reader;
    for (std::string line; std::getline(in, line);) reader.line(line);
    return reader.transport();
  }

  [[noreturn]] void abort(int exit_code) override {
    ncclCommAbort(comm_);  // no wait for kernels that wait for the others
    host_->abort(exit_code);
    std::_Exit(exit_code);  // a virtual call is not known not to return
  }
  std::string name() const override { return "nccl"; }
  std::string mpi_version() const override { return host_->mpi_version(); }  // NCCL's bootstrap
  std::string reduction_heap() const override { return host_->reduction_heap(); }  // set by the bootstrap's MPI
  std::string nccl_version() const override {
    int code = 0;
    return ncclGetVersion(&code) == ncclSuccess ? nccl_version_text(code) : std::string();
  }
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::vector<std::string> allgather(const std::string& mine) override { return host_->allgather(mine); }

  void broadcast(float* data, std::int64_t count, int root) override {
    after_compute();
    DLBENCH_NCCL_CHECK(ncclBroadcast(data, data, static_cast<std::size_t>(count), ncclFloat, root, comm_, stream_));
    DLBENCH_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void start_allreduce(float* data, std::int64_t count, Reduction op) override {
    after_compute();
    DLBENCH_NCCL_CHECK(ncclAllReduce(data, data, static_cast<std::size_t>(count), ncclFloat,
                                     op == Reduction::average ? ncclAvg : ncclSum, comm_, stream_));
  }
  void progress() override {}
  // The compute stream waits for the reductions on the device; the host does not.
  void complete_reductions() override {
    DLBENCH_CUDA_CHECK(cudaEventRecord(reductions_done_, stream_));
    DLBENCH_CUDA_CHECK(cudaStreamWaitEvent(compute_stream_, reductions_done_, 0));
  }
  void max(double* data, std::int64_t count) override { host_->max(data, count); }

 private:
  // The reduction must see the gradients that the compute stream has written so far.
  void after_compute() {
    DLBENCH_CUDA_CHECK(cudaEventRecord(gradients_written_, compute_stream_));
    DLBENCH_CUDA_CHECK(cudaStreamWaitEvent(stream_, gradients_written_, 0));
  }

  std::unique_ptr<Communicator> host_;
  cudaStream_t compute_stream_;
  std::string nccl_log_;  // NCCL's INFO lines; empty where the user set NCCL_DEBUG
  cudaStream_t stream_ = nullptr;
  cudaEvent_t gradients_written_ = nullptr;
  cudaEvent_t reductions_done_ = nullptr;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(int* argc, char*** argv, int device, cudaStream_t compute_stream) {
  return std::make_unique<NcclCommunicator>(argc, argv, device, compute_stream);
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

}  // namespace dlbench::worker
