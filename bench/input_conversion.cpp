// Where a real-data batch becomes the model's input type (issue 34's H200 run: ResNet-50 amp on
// JPEGs at 1,566 images/s against 7,231 on synthetic data). Side by side over one data set:
//   fp32-then-step-converts  the pipeline hands out floats and the consuming thread converts the
//                            batch to fp16 (what Trainer::load_batch did until 2026-11-29);
//   fp16 / bf16              the decoding threads convert each sample (the pipeline now);
//   fp32                     floats, no conversion anywhere (fp32 and tf32 runs).
// Each mode: images/s over BATCHES batches after the first, and the consuming thread's
// milliseconds per batch spent converting (the part a training step paid). Halves come from the
// CPU's F16C unit, or under DLBENCH_CPU_HALVES=software one by one (the modes then say so).
//
//   input_conversion DIR [THREADS=2] [BATCH=256] [BATCHES=8] [IMAGE=224]      (JSON lines)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "input/image_folder.hpp"
#include "input/input_pipeline.hpp"
#include "input/sample_source.hpp"
#include "tensor.hpp"

namespace {

using namespace dlbench;
using Clock = std::chrono::steady_clock;

int argument(int argc, char** argv, int i, int fallback) { return argc > i ? std::atoi(argv[i]) : fallback; }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: input_conversion DIR [THREADS=2] [BATCH=256] [BATCHES=8] [IMAGE=224]\n");
    return 2;
  }
  const int threads = argument(argc, argv, 2, 2), batch = argument(argc, argv, 3, 256);
  const int batches = argument(argc, argv, 4, 8), image = argument(argc, argv, 5, 224);
  const input::ImageFolder folder = input::scan_image_folder(argv[1]);
  const input::ImageFolderSource source(folder, image, input::PixelLayout::nhwc);
  const std::size_t values = source.pixel_floats() * static_cast<std::size_t>(batch);
  struct Mode {
    const char* name;
    worker::DType type;
    bool step_converts;
  };
  using worker::DType;
  for (const Mode mode : {Mode{"fp32-then-step-converts", DType::fp32, true}, Mode{"fp16", DType::fp16, false},
                          Mode{"bf16", DType::bf16, false}, Mode{"fp32", DType::fp32, false}}) {
    input::InputPipelineConfig config;
    config.batch_size = batch;
    config.threads = threads;
    config.pixel_type = mode.type;
    input::InputPipeline pipeline(source, config);
    pipeline.next();  // starting the threads and filling the ring: not timed
    double converting = 0;
    std::size_t checksum = 0;  // keeps the conversion from being optimised away
    const auto start = Clock::now();
    for (int b = 0; b < batches; ++b) {
      const input::Batch next = pipeline.next();
      if (mode.step_converts) {
        const auto begin = Clock::now();
        const std::vector<std::byte> half = worker::encode(next.floats(), values, worker::DType::fp16);
        converting += std::chrono::duration<double>(Clock::now() - begin).count();
        checksum += static_cast<std::size_t>(half[values]);
      }
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    // Halves come from the CPU's F16C unit unless DLBENCH_CPU_HALVES=software (before 2026-11-29).
    const bool halves = mode.type == DType::fp16 || mode.step_converts;
    const std::string name = std::string(mode.name) + (halves && !worker::halves_convert_on_f16c() ? " (software)" : "");
    std::printf("%s\n", nlohmann::json{{"mode", name},
                                       {"threads", threads},
                                       {"batch", batch},
                                       {"image", image},
                                       {"imagesPerSecond", batches * batch / seconds},
                                       {"stepConvertsMsPerBatch", 1e3 * converting / batches},
                                       {"checksum", checksum}}
                            .dump()
                            .c_str());
  }
  return 0;
}
