// How ranks of a data-parallel job talk: `none` (one rank), `mpi` (Open MPI on host
// buffers), later `nccl` (device buffers, bootstrapped over MPI).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dlbench/core/benchmark_run.hpp"

namespace dlbench::worker {

enum class Reduction { sum, average };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank's `mine`, in rank order, on every rank (a collective: every rank calls it). Texts
  // of any length, an empty one too.
  virtual std::vector<std::string> allgather(const std::string& mine) = 0;
  // Every rank's host name, in rank order.
  virtual std::vector<std::string> hosts();

  virtual void broadcast(float* data, std::int64_t count, int root) = 0;
  // Starts reducing [data, data + count) over all ranks in place, without waiting: the sum, or
  // the mean (the data-parallel gradient), computed by the library where it can (NCCL's ncclAvg).
  virtual void start_allreduce(float* data, std::int64_t count, Reduction op) = 0;
  // Lets started reductions progress (MPI moves data only inside MPI calls).
  virtual void progress() = 0;
  // Makes every started reduction's result visible to the work queued after this call. On host
  // buffers (MPI) that is a wait; on a GPU (NCCL) the compute stream is ordered after the
  // reductions and the host goes on at once.
  virtual void complete_reductions() = 0;
  // Element-wise maximum over ranks, in place (the slowest rank's times).
  virtual void max(double* data, std::int64_t count) = 0;
  // The transports this rank's NCCL said it used so far (NCCL only; nullopt elsewhere, or where
  // the user's own NCCL_DEBUG setting sent NCCL's lines where dlbench does not read them).
  virtual std::optional<NcclTransport> transport() const { return std::nullopt; }
  // The libraries the ranks talk through, for the result's environment ("Open MPI v4.1.4",
  // "2.27.3"); empty where none is used (one rank talks to nobody).
  virtual std::string mpi_version() const { return {}; }
  virtual std::string nccl_version() const { return {}; }
  // What this rank asked of glibc's malloc for host reductions over MPI (reduction_heap.hpp), as
  // GLIBC_TUNABLES would say it; empty where it asked nothing. NCCL's ranks ask it too, through
  // the MPI communicator they bootstrap with: a process-wide setting, so their results say it.
  virtual std::string reduction_heap() const { return {}; }
  // Ends every rank of the job with `exit_code`, for a rank that must leave while the others
  // wait for it in a collective (they would wait until the case's timeout). Alone, this process.
  [[noreturn]] virtual void abort(int exit_code);
};

// The sum over ranks of a reading each rank may lack (its GPU's energy over a repeat): nullopt on
// every rank unless every rank has one. A collective: every rank calls it.
std::optional<double> sum_where_every_rank_has(const std::optional<double>& mine, Communicator& comm);

// The rank that keeps the measured repeats beside rank 0, for a stop that rank 0 cannot answer (the
// OOM killer's SIGKILL, its node lost): the lowest rank on another host than rank 0's, which a
// lost node does not take with it; on one host, rank 1. None for one rank. `hosts`: every rank's,
// in rank order.
std::optional<int> repeats_deputy(const std::vector<std::string>& hosts);

// MPI_Get_library_version's text cut to its name and version: its first line up to the first
// comma ("Open MPI v4.1.4, package: Debian OpenMPI, ..." is "Open MPI v4.1.4").
std::string mpi_library_name(const std::string& library_version);
// NCCL's version code (ncclGetVersion: major × 10000 + minor × 100 + patch since 2.9) as text.
std::string nccl_version_text(int code);

class NoCommunicator final : public Communicator {
 public:
  std::string name() const override { return "none"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::vector<std::string> allgather(const std::string& mine) override { return {mine}; }
  void broadcast(float*, std::int64_t, int) override {}
  void start_allreduce(float*, std::int64_t, Reduction) override {}
  void progress() override {}
  void complete_reductions() override {}
  void max(double*, std::int64_t) override {}
};

// MPI_COMM_WORLD; initialises MPI if nobody has yet and finalises it on destruction then.
std::unique_ptr<Communicator> make_mpi_communicator(int* argc, char*** argv);
// True when this process was started by an MPI launcher (mpirun sets these variables).
bool launched_by_mpi();
std::string local_host_name();

}  // namespace dlbench::worker
