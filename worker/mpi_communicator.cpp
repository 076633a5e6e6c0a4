#include <mpi.h>
#include <unistd.h>

#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "communicator.hpp"
#include "mpi_reduction_window.hpp"
#include "reduction_heap.hpp"

// The MPI check: any MPI error becomes an exception naming the call and file:line.
#define DLBENCH_MPI_CHECK(call)                                                                    \
  do {                                                                                            \
    const int dlbench_mpi_status = (call);                                                        \
    if (dlbench_mpi_status != MPI_SUCCESS) {                                                      \
      char dlbench_mpi_text[MPI_MAX_ERROR_STRING];                                                \
      int dlbench_mpi_length = 0;                                                                 \
      MPI_Error_string(dlbench_mpi_status, dlbench_mpi_text, &dlbench_mpi_length);                \
      throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " +    \
                               #call + ": " + std::string(dlbench_mpi_text, static_cast<std::size_t>(dlbench_mpi_length))); \
    }                                                                                             \
  } while (false)

namespace dlbench::worker {
namespace {

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(int* argc, char*** argv) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      DLBENCH_MPI_CHECK(MPI_Init(argc, argv));
      owns_mpi_ = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    DLBENCH_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    DLBENCH_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
    if (size_ > 1) reduction_heap_ = apply_reduction_heap_settings();  // one rank reduces nothing
  }
  ~MpiCommunicator() override {
    window_.abandon();
    if (owns_mpi_) MPI_Finalize();
  }

  std::string name() const override { return "mpi"; }
  std::string mpi_version() const override {
    char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int length = 0;
    if (MPI_Get_library_version(text, &length) != MPI_SUCCESS) return {};
    return mpi_library_name(std::string(text, static_cast<std::size_t>(length)));
  }
  std::string reduction_heap() const override { return reduction_heap_; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  [[noreturn]] void abort(int exit_code) override {
    MPI_Abort(MPI_COMM_WORLD, exit_code);  // mpirun ends every rank
    std::_Exit(exit_code);
  }

  std::vector<std::string> allgather(const std::string& mine) override {
    window_.complete();  // collectives in one order on every rank: the reductions added first
    if (mine.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      throw std::length_error("allgather: a text of " + std::to_string(mine.size()) + " bytes is more than MPI counts");
    }
    const int length = static_cast<int>(mine.size());
    std::vector<int> lengths(static_cast<std::size_t>(size_));
    DLBENCH_MPI_CHECK(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD));
    std::vector<int> offsets(lengths.size());
    long long total = 0;
    for (std::size_t r = 0; r < lengths.size(); ++r) {
      offsets[r] = static_cast<int>(total);
      total += lengths[r];
      if (total > std::numeric_limits<int>::max()) throw std::length_error("allgather: the ranks' texts are more than MPI counts");
    }
    std::string all(static_cast<std::size_t>(total), '\0');
    DLBENCH_MPI_CHECK(MPI_Allgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR,
                                     MPI_COMM_WORLD));
    std::vector<std::string> out;
    for (std::size_t r = 0; r < lengths.size(); ++r) {
      out.push_back(all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(lengths[r])));
    }
    return out;
  }

  void broadcast(float* data, std::int64_t count, int root) override {
    window_.complete();
    for_chunks(data, count, [&](float* p, int n) { DLBENCH_MPI_CHECK(MPI_Bcast(p, n, MPI_FLOAT, root, MPI_COMM_WORLD)); });
  }

  void start_allreduce(float* data, std::int64_t count, Reduction op) override {
    // MPI has no mean: each piece of the sum is scaled as it ends.
    window_.add(data, count, op == Reduction::average ? 1.0f / static_cast<float>(size_) : 1.0f);
  }

  void progress() override { window_.progress(); }

  void complete_reductions() override { window_.complete(); }

  void max(double* data, std::int64_t count) override {
    window_.complete();
    DLBENCH_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  }

 private:
  // MPI counts are int: split larger buffers.
  template <typename F>
  static void for_chunks(float* data, std::int64_t count, F&& f) {
    constexpr std::int64_t kChunk = 1 << 30;
    for (std::int64_t done = 0; done < count; done += kChunk) {
      f(data + done, static_cast<int>(std::min(kChunk, count - done)));
    }
  }

  // Pieces of 4 MiB, two in flight: libnbc's temporary buffers are 8 MiB a rank, which the heap
  // keeps for the next pieces (reduction_window.hpp and reduction_heap.hpp say why it matters).
  // Measured on two ranks of BERT-base, VGG16 and ResNet-50 beside 1 MiB x 4 and 4 and 8 MiB x 4,
  // all within the machine's noise of each other (bench/RESULTS.md, 2026-12-06).
  static constexpr std::int64_t kPieceElements = (4 << 20) / static_cast<std::int64_t>(sizeof(float));
  static constexpr std::size_t kPiecesInFlight = 2;

  int rank_ = 0, size_ = 1;
  bool owns_mpi_ = false;
  std::string reduction_heap_;
  ReductionWindow<MPI_Request> window_ = mpi_reduction_window(kPieceElements, kPiecesInFlight);
};

}  // namespace

ReductionWindow<MPI_Request> mpi_reduction_window(std::int64_t piece_elements, std::size_t in_flight) {
  return ReductionWindow<MPI_Request>(
      piece_elements, in_flight,
      [](float* data, std::int64_t count) {
        MPI_Request request;
        DLBENCH_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                                         MPI_COMM_WORLD, &request));
        return request;
      },
      [](MPI_Request& request) {
        int done = 0;
        DLBENCH_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
        return done != 0;
      },
      [](MPI_Request& request) { DLBENCH_MPI_CHECK(MPI_Wait(&request, MPI_STATUS_IGNORE)); });
}

std::unique_ptr<Communicator> make_mpi_communicator(int* argc, char*** argv) {
  return std::make_unique<MpiCommunicator>(argc, argv);
}

}  // namespace dlbench::worker
