// The host memory check (memory_headroom.hpp) sees every large host buffer a training step makes:
// the CPU backend's tensors and scratch, and oneDNN's scratchpads, which oneDNN would otherwise
// allocate itself inside a primitive's first call, unchecked. This binary replaces malloc's entry
// points with ones that note each allocation of 2 MiB or more made anywhere but inside host_block
// (host_memory.hpp), the one place that checks before it allocates, and then hand it to glibc's
// own allocator. It is a binary of its own so that no other test runs under that allocator.
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cpu/cpu_backend.hpp"
#include "cpu/cpu_ops.hpp"
#include "host_memory.hpp"
#include "input/cityscapes.hpp"
#include "input/input_pipeline.hpp"
#include "input/png_codec.hpp"
#include "input/pretraining_shards.hpp"
#include "input/sample_source.hpp"
#include "../input/write_jpeg.hpp"

#include <webp/encode.h>
#include "layers/bert_config.hpp"
#include "models/bert.hpp"
#include "models/model.hpp"
#include "trainer.hpp"

namespace dlbench::worker {
namespace {

// Written by the allocator below: no allocation, no lock (it runs inside malloc, on any thread).
struct UncheckedAllocations {
  static constexpr std::size_t kKept = 32;
  std::atomic<bool> recording{false};
  std::atomic<std::size_t> count{0};
  std::atomic<std::size_t> sizes[kKept]{};

  void note(std::size_t bytes) {
    if (bytes < huge_page_bytes || making_checked_host_block || !recording.load(std::memory_order_relaxed)) return;
    const std::size_t at = count.fetch_add(1);
    if (at < kKept) sizes[at].store(bytes);
  }
};
UncheckedAllocations unchecked;

}  // namespace
}  // namespace dlbench::worker

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAllocatorReplaced = false;  // ASan's runtime replaces malloc itself
#else
constexpr bool kAllocatorReplaced = true;

// glibc's allocator under its other names: what these replacements hand every call to.
extern "C" {
void* __libc_malloc(std::size_t bytes);
void* __libc_calloc(std::size_t count, std::size_t bytes);
void* __libc_realloc(void* p, std::size_t bytes);
void* __libc_memalign(std::size_t alignment, std::size_t bytes);

void* malloc(std::size_t bytes) {
  dlbench::worker::unchecked.note(bytes);
  return __libc_malloc(bytes);
}
void* calloc(std::size_t count, std::size_t bytes) {
  dlbench::worker::unchecked.note(count * bytes);
  return __libc_calloc(count, bytes);
}
void* realloc(void* p, std::size_t bytes) {
  dlbench::worker::unchecked.note(bytes);
  return __libc_realloc(p, bytes);
}
void* memalign(std::size_t alignment, std::size_t bytes) {
  dlbench::worker::unchecked.note(bytes);
  return __libc_memalign(alignment, bytes);
}
void* aligned_alloc(std::size_t alignment, std::size_t bytes) {
  dlbench::worker::unchecked.note(bytes);
  return __libc_memalign(alignment, bytes);
}
// oneDNN's own allocations (its scratchpads among them) come through here.
int posix_memalign(void** p, std::size_t alignment, std::size_t bytes) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment % sizeof(void*) != 0) return EINVAL;
  dlbench::worker::unchecked.note(bytes);
  void* block = __libc_memalign(alignment, bytes);
  if (block == nullptr) return ENOMEM;
  *p = block;
  return 0;
}
}
#endif

namespace dlbench::worker {
namespace {

// The sizes of the large allocations `body` made outside the check, in MiB, as a readable list.
template <typename Body>
std::vector<double> unchecked_during(Body&& body) {
  unchecked.count = 0;
  unchecked.recording = true;
  body();
  unchecked.recording = false;
  std::vector<double> mib;
  const std::size_t count = unchecked.count.load();
  for (std::size_t i = 0; i < count && i < UncheckedAllocations::kKept; ++i) {
    mib.push_back(static_cast<double>(unchecked.sizes[i].load()) / (1 << 20));
  }
  return mib;
}

// The sizes kept, and how many there were in all where more than those.
std::string listed(const std::vector<double>& mib) {
  std::string out;
  for (const double m : mib) out += (out.empty() ? "" : ", ") + std::to_string(m) + " MiB";
  if (const std::size_t count = unchecked.count.load(); count > mib.size()) {
    out += " (" + std::to_string(count) + " in all)";
  }
  return out.empty() ? "none" : out;
}

#define SKIP_UNLESS_ALLOCATOR_REPLACED() \
  if (!kAllocatorReplaced) GTEST_SKIP() << "built with AddressSanitizer, whose runtime replaces malloc itself"

// The harness itself: a large vector is seen, a checked buffer and a small vector are not.
TEST(HostAllocation, TheReplacedAllocatorSeesLargeAllocationsOutsideTheCheckOnly) {
  SKIP_UNLESS_ALLOCATOR_REPLACED();
  const auto seen = unchecked_during([] {
    const std::vector<char> large(3 * huge_page_bytes);
    const std::vector<char> small(huge_page_bytes - 1);
    const auto checked = zeroed_large_memory(5 * huge_page_bytes);
    void* aligned = nullptr;
    ASSERT_EQ(::posix_memalign(&aligned, 64, 4 * huge_page_bytes), 0);
    std::free(aligned);
  });
  EXPECT_EQ(seen, (std::vector<double>{6.0, 8.0})) << listed(seen);
}

// A primitive whose descriptor leaves the scratchpad to oneDNN would allocate it unchecked: the
// backend refuses to make one, naming it, so that an op added later cannot slip past the check.
TEST(HostAllocation, APrimitiveInOneDnnsOwnScratchpadModeIsRefused) {
  CpuBackend backend(1);
  const auto data = cpu_ops::md_of(Shape(2, 3), Layout::plain);
  const auto own = dnnl::eltwise_forward::primitive_desc(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::eltwise_relu, data, 0.0f, 0.0f),
      backend.engine());
  try {
    cpu_ops::Primitive refused(backend, own);
    ADD_FAILURE() << "a primitive in oneDNN's own scratchpad mode was made";
  } catch (const std::logic_error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("made without user_scratchpad() would allocate its scratchpad itself"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("eltwise"));
  }
  const auto user = dnnl::eltwise_forward::primitive_desc(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::eltwise_relu, data, 0.0f, 0.0f),
      cpu_ops::user_scratchpad(), backend.engine());
  EXPECT_NO_THROW(cpu_ops::Primitive(backend, user));
}

// A trainer made and two steps taken, on the CPU backend with `threads` threads: the sizes of the
// large allocations that bypassed the check, and the oneDNN scratchpad the backend made.
struct StepAllocations {
  std::vector<double> unchecked_mib;
  std::size_t scratchpad_bytes = 0;
};

StepAllocations allocations_of_two_steps(const std::string& model, DType dtype, int threads) {
  CpuBackend backend(threads);
  std::unique_ptr<Trainer> trainer;
  StepAllocations made;
  made.unchecked_mib = unchecked_during([&] {
    if (model == "bert-base") {
      const BertConfig config;
      trainer = std::make_unique<Trainer>(backend, bert_for_pretraining(config), PretrainingBatchLayout{2, 64},
                                          config.vocabulary, SgdConfig{}, 3, 0, MemoryReuse::lifetime, dtype);
    } else {
      trainer = std::make_unique<Trainer>(backend, build_model(model, 10), Shape(8, 3, 64, 64), 10,
                                          SgdConfig{0.01f, 0.9f, 0.0f}, 3, 0, MemoryReuse::lifetime, dtype);
    }
    trainer->step_and_loss();
    trainer->step_and_loss();
  });
  made.scratchpad_bytes = backend.primitive_scratchpad_bytes();
  return made;
}

// oneDNN sizes its scratchpads by the threads it runs: this case's, 16 threads' worth, is 4.0 MiB
// with AVX-512's brgemm kernels and 577 MiB with AVX2's (a gemm-based convolution's, 36 MiB a
// thread). In oneDNN's own mode this test saw it made outside the check (in
// pieces of 2.5 to 4 MiB as it grew, on AVX-512); made by the backend, it is checked.
TEST(HostAllocation, OneDnnsScratchpadIsCheckedAsTheBackendsOtherBuffersAre) {
  SKIP_UNLESS_ALLOCATOR_REPLACED();
  const StepAllocations made = allocations_of_two_steps("resnet50", DType::fp32, 16);
  EXPECT_TRUE(made.unchecked_mib.empty()) << "made outside the host memory check: " << listed(made.unchecked_mib);
  EXPECT_GE(made.scratchpad_bytes, huge_page_bytes)
      << "this case's scratchpad is under 2 MiB, so it no longer shows that a large one is checked";
}

// Every large buffer of a step is made through the check, whatever the model and precision.
struct StepCase {
  const char* model;
  DType dtype;
};

class HostAllocationOfAStep : public ::testing::TestWithParam<StepCase> {};

TEST_P(HostAllocationOfAStep, MakesEveryLargeBufferThroughTheCheck) {
  SKIP_UNLESS_ALLOCATOR_REPLACED();
  const StepCase c = GetParam();
  if (const auto why = CpuBackend(1).cannot_compute(c.dtype)) GTEST_SKIP() << *why;
  const StepAllocations made = allocations_of_two_steps(c.model, c.dtype, 4);
  EXPECT_TRUE(made.unchecked_mib.empty()) << "made outside the host memory check: " << listed(made.unchecked_mib);
}

INSTANTIATE_TEST_SUITE_P(Models, HostAllocationOfAStep,
                         ::testing::Values(StepCase{"resnet50", DType::fp32}, StepCase{"resnet50", DType::bf16},
                                           StepCase{"bert-base", DType::fp32}, StepCase{"bert-base", DType::bf16}),
                         [](const auto& param_info) {
                           std::string name = std::string(param_info.param.model) + "_" + std::string(to_string(param_info.param.dtype));
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

// The input pipeline's decoding threads decode whole files at their full size: a photo of 1600 x
// 1200 pixels is 5.5 MiB of RGB, a Cityscapes frame 6 MiB, its PNG file's bytes and a label map
// beside them, each thread's own. Those buffers are checked as a step's are, so that a data set of
// large images on many threads ends the case as OutOfMemory, not in the OOM killer.
class HostAllocationOfTheInput : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() / ("dlbench_host_allocation_" + std::to_string(::getpid()));
    std::mt19937 rng(7);
    for (const char* label : {"a", "b"}) {
      std::filesystem::create_directories(root_ / "images" / label);
      for (int i = 0; i < 2; ++i) {
        input::testing::write_jpeg(root_ / "images" / label / ("photo" + std::to_string(i) + ".jpg"),
                                   noise(1600 * 1200 * 3, rng), 1600, 1200);
      }
      input::write_png((root_ / "images" / label / "scan.png").string(), 1400, 1000, 3, noise(1400 * 1000 * 3, rng).data());
      write_webp(root_ / "images" / label / "still.webp", 1200, 900, noise(1200 * 900 * 3, rng));
    }
    const auto frames = root_ / "cityscapes" / "leftImg8bit" / "train" / "bonn";
    const auto labels = root_ / "cityscapes" / "gtFine" / "train" / "bonn";
    std::filesystem::create_directories(frames);
    std::filesystem::create_directories(labels);
    for (int i = 0; i < 2; ++i) {
      const std::string stem = "bonn_00000" + std::to_string(i) + "_000019";
      input::write_png((frames / (stem + "_leftImg8bit.png")).string(), 2048, 1024, 3, noise(2048 * 1024 * 3, rng).data());
      std::vector<std::uint8_t> ids = noise(2048 * 1024, rng);
      for (auto& id : ids) id %= 34;
      input::write_png((labels / (stem + "_gtFine_labelIds.png")).string(), 2048, 1024, 1, ids.data());
    }
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  static void write_webp(const std::filesystem::path& path, int width, int height, const std::vector<std::uint8_t>& rgb) {
    std::uint8_t* encoded = nullptr;
    const std::size_t size = WebPEncodeRGB(rgb.data(), width, height, width * 3, 80, &encoded);
    ASSERT_GT(size, 0u);
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(encoded), static_cast<std::streamsize>(size));
    WebPFree(encoded);
  }

  static std::vector<std::uint8_t> noise(std::size_t bytes, std::mt19937& rng) {
    std::vector<std::uint8_t> out(bytes);
    for (auto& v : out) v = static_cast<std::uint8_t>(rng());
    return out;
  }

  // The large allocations outside the check while `source`'s pipeline makes 6 batches of 2 on 2 threads.
  static std::vector<double> unchecked_batches(const input::SampleSource& source) {
    return unchecked_during([&] {
      input::InputPipelineConfig config;
      config.batch_size = 2;
      config.threads = 2;
      input::InputPipeline pipeline(source, config);
      for (int b = 0; b < 6; ++b) pipeline.next();
      EXPECT_EQ(pipeline.skipped_count(), 0);
    });
  }

  std::filesystem::path root_;
};

TEST_F(HostAllocationOfTheInput, JpegPngAndWebpImagesAreDecodedThroughTheCheck) {
  SKIP_UNLESS_ALLOCATOR_REPLACED();
  const input::ImageFolder folder = input::scan_image_folder((root_ / "images").string());
  ASSERT_EQ(folder.files.size(), 8u);
  const input::ImageFolderSource source(folder, 64, input::PixelLayout::nchw, input::JpegDecoding{false, false});
  const auto seen = unchecked_batches(source);
  EXPECT_TRUE(seen.empty()) << "made outside the host memory check: " << listed(seen);
}

// BERT's reader loads a whole shard at a time: 8,192 sequences of 128 tokens are 4 MiB an int32
// dataset (NVIDIA's phase-1 shards hold some 200,000 sequences each, 100 MiB a dataset).
TEST_F(HostAllocationOfTheInput, ABertShardIsLoadedThroughTheCheck) {
  SKIP_UNLESS_ALLOCATOR_REPLACED();
  std::filesystem::create_directories(root_ / "shards");
  input::write_pretraining_shard((root_ / "shards" / "a.hdf5").string(),
                                 input::synthesize_pretraining_shard(8192, 128, 20, 30522, 5));
  const input::PretrainingShards shards = input::scan_pretraining_shards((root_ / "shards").string());
  const auto seen = unchecked_during([&] {
    input::PretrainingReaderConfig config;
    config.batch_size = 2;
    input::PretrainingReader reader(shards, config);
    for (int b = 0; b < 4; ++b) reader.next();
    EXPECT_EQ(reader.skipped_count(), 0);
  });
  EXPECT_TRUE(seen.empty()) << "made outside the host memory check: " << listed(seen);
}

TEST_F(HostAllocationOfTheInput, CityscapesPairsAreDecodedThroughTheCheck) {
  SKIP_UNLESS_ALLOCATOR_REPLACED();
  const input::CityscapesSet set = input::scan_cityscapes((root_ / "cityscapes").string());
  ASSERT_EQ(set.pairs.size(), 2u);
  const input::CityscapesSource source(set, 512, 1024, input::PixelLayout::nchw);
  const auto seen = unchecked_batches(source);
  EXPECT_TRUE(seen.empty()) << "made outside the host memory check: " << listed(seen);
}

}  // namespace
}  // namespace dlbench::worker
