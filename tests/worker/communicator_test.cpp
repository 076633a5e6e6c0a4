// What the result's environment says of the libraries the ranks talk through, and which rank keeps
// the repeats beside rank 0.
#include <gtest/gtest.h>

#include <malloc.h>

#include <map>

#include "communicator.hpp"
#include "reduction_heap.hpp"

namespace dlbench::worker {
namespace {

TEST(Communicator, TheMpiLibraryIsItsNameAndVersion) {
  EXPECT_EQ(mpi_library_name("Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4, May 26, 2022\n"),
            "Open MPI v4.1.4");
  EXPECT_EQ(mpi_library_name("MPICH Version:\t4.0\nMPICH Release date:\tFri Jan 21 2022\n"), "MPICH Version: 4.0");
  EXPECT_EQ(mpi_library_name("  \n"), "");
  EXPECT_EQ(mpi_library_name(""), "");
}

TEST(Communicator, NcclsVersionCodeReadsInBothItsForms) {
  EXPECT_EQ(nccl_version_text(22703), "2.27.3");  // 2.9 and later
  EXPECT_EQ(nccl_version_text(21805), "2.18.5");
  EXPECT_EQ(nccl_version_text(2708), "2.7.8");  // before 2.9
  EXPECT_EQ(nccl_version_text(0), "");
}

// None says no library: one rank talks to nobody.
// One rank's reading is the job's, or none; several ranks' are summed under mpirun (mpi.DataParallel).
TEST(Communicator, OneRanksReadingIsTheSum) {
  NoCommunicator one;
  EXPECT_EQ(sum_where_every_rank_has(537.625, one), std::optional<double>(537.625));
  EXPECT_EQ(sum_where_every_rank_has(std::nullopt, one), std::nullopt);
}

TEST(Communicator, OneRankNamesNoLibrary) {
  NoCommunicator none;
  EXPECT_EQ(none.mpi_version(), "");
  EXPECT_EQ(none.nccl_version(), "");
}

// What a rank asks of malloc for its reductions, and that a user's own setting of either stays.
TEST(Communicator, TheReductionHeapSettingsLeaveTheUsersOwnAlone) {
  const auto names = [](const std::map<std::string, std::string>& env) {
    const auto found = reduction_heap_settings([&env](const char* name) -> const char* {
      const auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    });
    std::string out;
    for (const HeapSetting& s : found) out += s.tunable + "=" + std::to_string(s.value) + ";";
    return out;
  };
  EXPECT_EQ(names({}), "glibc.malloc.mmap_threshold=33554432;glibc.malloc.top_pad=67108864;");
  EXPECT_EQ(names({{"MALLOC_TOP_PAD_", "0"}}), "glibc.malloc.mmap_threshold=33554432;");
  EXPECT_EQ(names({{"MALLOC_MMAP_THRESHOLD_", "131072"}}), "glibc.malloc.top_pad=67108864;");
  EXPECT_EQ(names({{"GLIBC_TUNABLES", "glibc.malloc.hugetlb=1:glibc.malloc.top_pad=0"}}),
            "glibc.malloc.mmap_threshold=33554432;");
  EXPECT_EQ(names({{"GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=65536"}}), "glibc.malloc.top_pad=67108864;");
  // A tunable that only begins like one of them, or an empty list, is not theirs.
  EXPECT_EQ(names({{"GLIBC_TUNABLES", "glibc.malloc.top_pad_x=1:"}}),
            "glibc.malloc.mmap_threshold=33554432;glibc.malloc.top_pad=67108864;");
  EXPECT_EQ(names({{"GLIBC_TUNABLES", ""}}), "glibc.malloc.mmap_threshold=33554432;glibc.malloc.top_pad=67108864;");
  for (const HeapSetting& s : reduction_heap_settings([](const char*) -> const char* { return nullptr; })) {
    EXPECT_TRUE(s.option == M_MMAP_THRESHOLD || s.option == M_TOP_PAD) << s.tunable;
    // glibc refuses a threshold over 32 MiB (half its heaps' largest size) on 64-bit.
    if (s.option == M_MMAP_THRESHOLD) {
      EXPECT_LE(s.value, 32 << 20);
    }
  }
}

TEST(Communicator, TheRepeatsDeputyIsTheFirstRankOffRankZerosHost) {
  EXPECT_EQ(repeats_deputy({}), std::nullopt);
  EXPECT_EQ(repeats_deputy({"node-a"}), std::nullopt);
  EXPECT_EQ(repeats_deputy({"node-a", "node-a"}), 1);  // one host: for a rank 0 killed alone
  EXPECT_EQ(repeats_deputy({"node-a", "node-a", "node-a", "node-b", "node-b"}), 3);
  EXPECT_EQ(repeats_deputy({"node-a", "node-b", "node-a", "node-c"}), 1);
}

}  // namespace
}  // namespace dlbench::worker
