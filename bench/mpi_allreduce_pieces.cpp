// Open MPI's nonblocking allreduce on host buffers, as a rank's gradient reduction uses it: a
// buffer of ELEMENTS floats cut into pieces of PIECE elements, at most IN_FLIGHT pieces running at
// once (0: every piece started at once, as dlbench did before 2026-12-06) through the window
// dlbench's MPI ranks reduce through (mpi_reduction_window.hpp), with glibc's defaults or with the heap settings dlbench's MPI ranks ask for
// (reduction_heap.hpp). RESULT is what the gradient's reduction leaves: the sum, or the mean
// (the data-parallel gradient) scaled by 1 / ranks either in one pass over the whole buffer after
// the last piece ends (`mean-after`, as dlbench did before 2026-12-06) or piece by piece as each
// ends (`mean-pieces`, the window's own scaling, as dlbench does now). After one untimed reduction,
// REPEATS timed ones; rank 0 prints the median seconds, bus bandwidth (bytes x 2 (n - 1) / n /
// seconds, nccl-tests' convention) and the median page faults a reduction cost it.
//
//   mpirun -np 2 mpi_allreduce_pieces ELEMENTS PIECE IN_FLIGHT default|dlbench [REPEATS [sum|mean-after|mean-pieces]]
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "dlbench/core/statistics.hpp"
#include "mpi_reduction_window.hpp"
#include "reduction_heap.hpp"

namespace {

long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::string result = argc > 6 ? argv[6] : "sum";
  if (argc < 5 || (std::string(argv[4]) != "default" && std::string(argv[4]) != "dlbench") ||
      (result != "sum" && result != "mean-after" && result != "mean-pieces")) {
    if (rank == 0) {
      std::fprintf(stderr, "usage: %s ELEMENTS PIECE IN_FLIGHT default|dlbench [REPEATS [sum|mean-after|mean-pieces]]\n",
                   argv[0]);
    }
    MPI_Finalize();
    return 2;
  }
  const std::int64_t elements = std::atoll(argv[1]);
  const std::int64_t piece = std::atoll(argv[2]);
  const long in_flight = std::atol(argv[3]);
  const bool dlbench_heap = std::string(argv[4]) == "dlbench";
  const int repeats = argc > 5 ? std::atoi(argv[5]) : 5;
  if (elements < 1 || piece < 1 || in_flight < 0 || repeats < 1) {
    if (rank == 0) std::fprintf(stderr, "ELEMENTS, PIECE and REPEATS must be >= 1, IN_FLIGHT >= 0\n");
    MPI_Finalize();
    return 2;
  }
  const std::string heap = dlbench_heap ? dlbench::worker::apply_reduction_heap_settings() : "glibc's defaults";
  std::vector<float> data(static_cast<std::size_t>(elements), 1.0f);
  const std::size_t pieces = static_cast<std::size_t>((elements + piece - 1) / piece);
  auto window = dlbench::worker::mpi_reduction_window(piece, in_flight == 0 ? pieces : static_cast<std::size_t>(in_flight));
  std::vector<double> seconds, faults;
  for (int i = 0; i <= repeats; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const long faults_before = minor_faults();
    const double start = MPI_Wtime();
    const float inverse = 1.0f / static_cast<float>(size);
    window.add(data.data(), elements, result == "mean-pieces" ? inverse : 1.0f);
    window.complete();
    if (result == "mean-after") {
      float* values = data.data();
#pragma omp simd
      for (std::int64_t e = 0; e < elements; ++e) values[e] *= inverse;
    }
    const double elapsed = MPI_Wtime() - start;
    double slowest = elapsed;
    MPI_Allreduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (i == 0) continue;  // the first makes the library's buffers
    seconds.push_back(slowest);
    faults.push_back(static_cast<double>(minor_faults() - faults_before));
  }
  if (rank == 0) {
    const double bytes = static_cast<double>(elements) * sizeof(float);
    const double s = dlbench::median(seconds);
    std::printf("%d ranks, %.1f MiB in %zu pieces of %.2f MiB, %s in flight, heap: %s, %s: %.1f ms, bus bandwidth "
                "%.2f GB/s, %.0f page faults a reduction on rank 0 (medians of %d)\n",
                size, bytes / (1 << 20), pieces, static_cast<double>(std::min(piece, elements)) * sizeof(float) / (1 << 20),
                in_flight == 0 ? "all" : std::to_string(in_flight).c_str(), heap.c_str(), result.c_str(), s * 1e3,
                bytes * 2 * (size - 1) / size / s / 1e9, dlbench::median(faults), repeats);
  }
  MPI_Finalize();
  return 0;
}
