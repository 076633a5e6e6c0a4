// dlbench-input: the worker's real-data pipeline on its own. It lists a data set and its shards,
// transforms one image with given crop parameters (the golden test against torchvision reads
// this), and measures how many images per second the pipeline prepares with N threads.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dlbench/core/api_rules.hpp"
#include "input/image_folder.hpp"
#include "input/image_transform.hpp"
#include "input/input_pipeline.hpp"

namespace {

using namespace dlbench;
using namespace dlbench::input;

constexpr const char* kUsage = R"(dlbench-input — the worker's ImageFolder input pipeline on its own

Usage:
  dlbench-input scan DIR                          classes, files and ignored files, as JSON
  dlbench-input shard DIR [--rank R] [--world W] [--epoch E] [--seed S]
                                                  the files rank R reads in epoch E, one per line
  dlbench-input transform FILE --top T --left L --height H --width W [--flip 0|1]
                [--image-size N] [--dct-scaling on|off] --output RAW
                                                  one sample as float32 (3, N, N): decode, crop,
                                                  resize, flip, normalise
  dlbench-input measure DIR [--batch-size B] [--image-size N] [--threads T] [--prefetch-batches P]
                [--batches K] [--rank R] [--world W] [--seed S] [--dct-scaling on|off]
                [--dump-first RAW]                images per second the pipeline prepares, as JSON
Exit codes: 0 done, 1 the data could not be used, 2 bad usage.
)";

struct Usage {
  std::string message;
};

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> options;

  long number(const std::string& key, long fallback, long lo, long hi) const {
    const auto it = options.find(key);
    if (it == options.end()) return fallback;
    const auto v = whole_number(it->second, {lo, hi});
    if (!v) throw Usage{"--" + key + ": \"" + it->second + "\" is not a whole number from " + std::to_string(lo) + " to " + std::to_string(hi)};
    return static_cast<long>(*v);
  }
  bool on_off(const std::string& key, bool fallback) const {
    const auto it = options.find(key);
    if (it == options.end()) return fallback;
    if (it->second != "on" && it->second != "off") throw Usage{"--" + key + ": \"" + it->second + "\" is not one of on, off"};
    return it->second == "on";
  }
  std::string text(const std::string& key) const {
    const auto it = options.find(key);
    return it == options.end() ? "" : it->second;
  }
};

Args parse(int argc, char** argv, const std::vector<std::string>& known) {
  Args a;
  for (int i = 2; i < argc; ++i) {
    std::string word = argv[i];
    if (!word.starts_with("--")) {
      a.positional.push_back(word);
      continue;
    }
    word = word.substr(2);
    if (std::find(known.begin(), known.end(), word) == known.end()) throw Usage{"unknown option --" + word + " (see --help)"};
    if (i + 1 >= argc) throw Usage{"--" + word + " needs a value"};
    a.options[word] = argv[++i];
  }
  return a;
}

std::string one_directory(const Args& a, const char* command) {
  if (a.positional.size() != 1) throw Usage{std::string(command) + " takes one directory"};
  return a.positional[0];
}

void write_floats(const std::string& path, const float* data, std::size_t count) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(count * sizeof(float)));
  if (!out) throw std::runtime_error("cannot write " + path);
}

int scan(const Args& a) {
  const ImageFolder folder = scan_image_folder(one_directory(a, "scan"));
  nlohmann::json out{{"classes", folder.classes}, {"files", folder.files.size()}, {"ignoredFiles", folder.ignored_files}};
  std::cout << out.dump() << "\n";
  return 0;
}

int shard(const Args& a) {
  const ImageFolder folder = scan_image_folder(one_directory(a, "shard"));
  const int world = static_cast<int>(a.number("world", 1, 1, 1 << 20));
  const int rank = static_cast<int>(a.number("rank", 0, 0, world - 1));
  const auto epoch = static_cast<std::uint64_t>(a.number("epoch", 0, 0, 1L << 40));
  const auto seed = static_cast<std::uint64_t>(a.number("seed", 42, 0, 1L << 62));
  for (const auto index : epoch_shard(folder.files.size(), seed, epoch, rank, world)) {
    std::cout << folder.files[index].path << "\t" << folder.files[index].label << "\n";
  }
  return 0;
}

int transform(const Args& a) {
  if (a.positional.size() != 1) throw Usage{"transform takes one JPEG file"};
  const int size = static_cast<int>(a.number("image-size", 224, 1, 4096));
  const CropBox crop{static_cast<int>(a.number("top", -1, 0, 1 << 20)), static_cast<int>(a.number("left", -1, 0, 1 << 20)),
                     static_cast<int>(a.number("height", -1, 1, 1 << 20)), static_cast<int>(a.number("width", -1, 1, 1 << 20))};
  if (crop.top < 0 || crop.left < 0 || crop.height < 0 || crop.width < 0) throw Usage{"transform needs --top, --left, --height and --width"};
  const std::string output = a.text("output");
  if (output.empty()) throw Usage{"transform needs --output"};
  std::ifstream in(a.positional[0], std::ios::binary);
  const std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TransformScratch scratch;
  Normalizer normalizer;
  std::vector<float> sample(3 * static_cast<std::size_t>(size) * static_cast<std::size_t>(size));
  std::string why;
  if (!transform_jpeg(bytes, crop, a.number("flip", 0, 0, 1) == 1, size, a.on_off("dct-scaling", false), PixelLayout::nchw,
                      normalizer, scratch, sample.data(), why)) {
    std::cerr << "dlbench-input: " << a.positional[0] << ": " << why << "\n";
    return 1;
  }
  write_floats(output, sample.data(), sample.size());
  return 0;
}

int measure(const Args& a) {
  const ImageFolder folder = scan_image_folder(one_directory(a, "measure"));
  InputPipelineConfig config;
  config.batch_size = static_cast<int>(a.number("batch-size", 32, 1, 65536));
  config.image_size = static_cast<int>(a.number("image-size", 224, 1, 4096));
  config.threads = static_cast<int>(a.number("threads", 1, bounds::kDecodeThreads.min, bounds::kDecodeThreads.max));
  config.prefetch_batches = static_cast<int>(a.number("prefetch-batches", 2, bounds::kPrefetchBatches.min, bounds::kPrefetchBatches.max));
  config.world = static_cast<int>(a.number("world", 1, 1, 1 << 20));
  config.rank = static_cast<int>(a.number("rank", 0, 0, config.world - 1));
  config.seed = static_cast<std::uint64_t>(a.number("seed", 42, 0, 1L << 62));
  config.dct_scaling = a.on_off("dct-scaling", true);
  const long batches = a.number("batches", 20, 1, 1 << 30);
  InputPipeline pipeline(folder, config);
  // The first batch includes starting the threads and filling the ring: not timed.
  const Batch first = pipeline.next();
  if (const std::string dump = a.text("dump-first"); !dump.empty()) {
    const auto side = static_cast<std::size_t>(config.image_size);
    write_floats(dump, first.pixels, 3 * side * side * static_cast<std::size_t>(config.batch_size));
    std::ofstream labels(dump + ".labels");
    for (int i = 0; i < config.batch_size; ++i) labels << first.labels[i] << "\n";
  }
  const auto start = std::chrono::steady_clock::now();
  for (long b = 0; b < batches; ++b) pipeline.next();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  nlohmann::json out{{"imagesPerSecond", static_cast<double>(batches) * config.batch_size / seconds},
                     {"seconds", seconds},
                     {"images", batches * config.batch_size},
                     {"threads", config.threads},
                     {"files", folder.files.size()},
                     {"shardFiles", pipeline.shard_size()},
                     {"skippedFiles", pipeline.skipped_count()}};
  out["skipped"] = nlohmann::json::array();
  for (const auto& s : pipeline.skipped_examples()) out["skipped"].push_back({{"path", s.path}, {"why", s.why}});
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string command = argc > 1 ? argv[1] : "--help";
    if (command == "--help" || command == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (command == "scan") return scan(parse(argc, argv, {}));
    if (command == "shard") return shard(parse(argc, argv, {"rank", "world", "epoch", "seed"}));
    if (command == "transform") {
      return transform(parse(argc, argv, {"top", "left", "height", "width", "flip", "image-size", "dct-scaling", "output"}));
    }
    if (command == "measure") {
      return measure(parse(argc, argv, {"batch-size", "image-size", "threads", "prefetch-batches", "batches", "rank",
                                        "world", "seed", "dct-scaling", "dump-first"}));
    }
    throw Usage{"unknown command \"" + command + "\"; allowed: scan, shard, transform, measure"};
  } catch (const Usage& u) {
    std::cerr << "dlbench-input: " << u.message << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "dlbench-input: " << e.what() << "\n";
    return 1;
  }
}
