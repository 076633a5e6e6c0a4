// How ranks of a data-parallel job talk: `none` (one rank), `mpi` (Open MPI on host
// buffers), later `nccl` (device buffers, bootstrapped over MPI).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dlbench::worker {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank's host name, in rank order.
  virtual std::vector<std::string> hosts() = 0;

  virtual void broadcast(float* data, std::int64_t count, int root) = 0;
  // Starts summing [data, data + count) over all ranks in place, without waiting.
  virtual void start_sum(float* data, std::int64_t count) = 0;
  // Lets started reductions progress (MPI moves data only inside MPI calls).
  virtual void progress() = 0;
  // Waits for every started reduction.
  virtual void wait_all() = 0;
  // Element-wise maximum over ranks, in place (the slowest rank's times).
  virtual void max(double* data, std::int64_t count) = 0;
};

class NoCommunicator final : public Communicator {
 public:
  std::string name() const override { return "none"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::vector<std::string> hosts() override;
  void broadcast(float*, std::int64_t, int) override {}
  void start_sum(float*, std::int64_t) override {}
  void progress() override {}
  void wait_all() override {}
  void max(double*, std::int64_t) override {}
};

// MPI_COMM_WORLD; initialises MPI if nobody has yet and finalises it on destruction then.
std::unique_ptr<Communicator> make_mpi_communicator(int* argc, char*** argv);
// True when this process was started by an MPI launcher (mpirun sets these variables).
bool launched_by_mpi();
std::string local_host_name();

}  // namespace dlbench::worker
