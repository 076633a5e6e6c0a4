// dlbench-input: the worker's real-data pipeline on its own. It writes and lists a data set
// (ImageFolder JPEGs, Cityscapes' PNG images and labels, or BERT's HDF5 pretraining shards) and its shards, transforms one sample
// with given draws (the golden tests against torchvision read this), and measures how many
// images per second the pipeline prepares with N threads.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <thread>
#include <cstdio>
#include <filesystem>
#include <random>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dlbench/core/api_rules.hpp"
#include <turbojpeg.h>

#include "input/batch_values.hpp"
#include "input/cityscapes.hpp"
#include "input/image_folder.hpp"
#include "dlbench/core/command_line.hpp"
#include "dlbench/core/version.hpp"
#include "input/image_transform.hpp"
#include "input/input_pipeline.hpp"
#include "input/pretraining_shards.hpp"

namespace {

using namespace dlbench;
using namespace dlbench::input;

constexpr const char* kFooter = "Exit codes: 0 done, 1 the data could not be used, 2 bad usage.";

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> options;

  long number(const std::string& key, long fallback, long lo, long hi) const {
    const auto it = options.find(key);
    if (it == options.end()) return fallback;
    return static_cast<long>(parse_bounded("--" + key, it->second, lo, hi));
  }
  bool on_off(const std::string& key, bool fallback) const {
    const auto it = options.find(key);
    if (it == options.end()) return fallback;
    return one_of("--" + key, it->second, {"on", "off"}) == "on";
  }
  std::string text(const std::string& key) const {
    const auto it = options.find(key);
    return it == options.end() ? "" : it->second;
  }
};

// --data: imagefolder (the default), cityscapes or bertpretraining.
std::string data_source(const Args& a) {
  const std::string data = a.text("data");
  return data.empty() ? "imagefolder" : one_of("--data", data, {"imagefolder", "cityscapes", "bertpretraining"});
}
bool cityscapes(const Args& a) { return data_source(a) == "cityscapes"; }
bool pretraining(const Args& a) { return data_source(a) == "bertpretraining"; }

// BERT's pretraining shards, NVIDIA's HDF5 format: `shards` files of `per-shard` sequences, and
// --broken files that are not HDF5 and --bad-sequences sequences that break the format (ids past
// the vocabulary) in the first shard, to be skipped and counted.
int generate_pretraining(const Args& a) {
  const std::filesystem::path root = a.positional[0];
  const long shards = a.number("shards", 2, 1, 100000);
  const long per_shard = a.number("per-shard", 256, 1, 1 << 24);
  const long length = a.number("sequence-length", 128, 5, 512);
  const long predictions = a.number("max-predictions", length >= 512 ? 80 : 20, 1, length);
  const long vocabulary = a.number("vocabulary", 30522, 1000, 1 << 24);
  const long broken = a.number("broken", 0, 0, 1000);
  const long bad = a.number("bad-sequences", 0, 0, per_shard);
  const auto seed = static_cast<std::uint64_t>(a.number("seed", 7, 0, 1L << 62));
  std::filesystem::create_directories(root);
  for (long i = 0; i < shards; ++i) {
    LoadedShard shard = synthesize_pretraining_shard(per_shard, length, predictions, vocabulary, seed + static_cast<std::uint64_t>(i));
    for (long b = 0; i == 0 && b < bad; ++b) shard.input_ids[static_cast<std::size_t>(b * length + 1)] = static_cast<std::int32_t>(vocabulary);
    char name[64];
    std::snprintf(name, sizeof(name), "pretraining_shard_%05ld.hdf5", i);
    write_pretraining_shard((root / name).string(), shard);
  }
  for (long i = 0; i < broken; ++i) {
    std::ofstream out(root / ("broken_" + std::to_string(i) + ".hdf5"), std::ios::binary);
    out << "this is not an HDF5 file";
  }
  std::cout << nlohmann::json{{"shards", shards + broken}, {"sequences", shards * per_shard}, {"broken", broken},
                              {"badSequences", bad}, {"sequenceLength", length}, {"maxPredictions", predictions}}
                   .dump()
            << "\n";
  return 0;
}

std::string one_directory(const Args& a, const char* command) {
  if (a.positional.size() != 1) throw UsageError{std::string(command) + " takes one directory"};
  return a.positional[0];
}

void write_floats(const std::string& path, const float* data, std::size_t count) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(count * sizeof(float)));
  if (!out) throw std::runtime_error("cannot write " + path);
}

// Pictures with structure at every scale (gradients, stripes, noise), so that crops and
// resampling have something to change; sizes as ImageNet's training images run.
// Cityscapes' layout: street-like scenes, bands of sky, buildings, vegetation and road with
// cars and people in front, each label id painted in its own colour with some texture; label ids
// as gtFine's labelIds (some outside the 19 training classes, some 0).
int generate_cityscapes(const Args& a) {
  const std::filesystem::path root = a.positional[0];
  const long cities = a.number("cities", 2, 1, 1000);
  const long per_city = a.number("per-city", 8, 1, 1 << 20);
  const int width = static_cast<int>(a.number("width", 2048, 1, 1 << 15));
  const int height = static_cast<int>(a.number("height", 1024, 1, 1 << 15));
  const long broken = a.number("broken", 0, 0, 1 << 20);
  std::mt19937_64 rng(static_cast<std::uint64_t>(a.number("seed", 7, 0, 1L << 62)));
  constexpr std::uint8_t kIds[] = {23, 11, 21, 7, 8, 26, 24, 17, 20, 0, 4, 33, 13, 22, 27, 19};
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(width) * static_cast<std::size_t>(height) * 3);
  std::vector<std::uint8_t> ids(static_cast<std::size_t>(width) * static_cast<std::size_t>(height));
  long written = 0;
  for (long c = 0; c < cities; ++c) {
    char city[32];
    std::snprintf(city, sizeof city, "city%02ld", c);
    const auto images = root / "leftImg8bit" / "train" / city, labels = root / "gtFine" / "train" / city;
    std::filesystem::create_directories(images);
    std::filesystem::create_directories(labels);
    for (long i = 0; i < per_city; ++i) {
      // Bands from top to bottom, then boxes of objects.
      const int sky = height / 4 + static_cast<int>(rng() % static_cast<std::uint64_t>(height / 8 + 1));
      const int road = height / 2 + static_cast<int>(rng() % static_cast<std::uint64_t>(height / 8 + 1));
      for (int y = 0; y < height; ++y) {
        const std::uint8_t band = y < sky ? 23 : y < road ? (((y / 7) % 3 == 0) ? 21 : 11) : 7;
        std::fill_n(ids.begin() + static_cast<std::ptrdiff_t>(y) * width, width, band);
      }
      for (int box = 0; box < 12; ++box) {
        const std::uint8_t id = kIds[rng() % std::size(kIds)];
        const int w = 1 + static_cast<int>(rng() % static_cast<std::uint64_t>(width / 4 + 1));
        const int h = 1 + static_cast<int>(rng() % static_cast<std::uint64_t>(height / 4 + 1));
        const int x0 = static_cast<int>(rng() % static_cast<std::uint64_t>(width));
        const int y0 = static_cast<int>(rng() % static_cast<std::uint64_t>(height));
        for (int y = y0; y < std::min(height, y0 + h); ++y) {
          std::fill_n(ids.begin() + static_cast<std::ptrdiff_t>(y) * width + x0, std::min(width, x0 + w) - x0, id);
        }
      }
      for (std::size_t p = 0; p < ids.size(); ++p) {
        const unsigned id = ids[p];
        const unsigned noise = static_cast<unsigned>(rng() & 31u);
        rgb[p * 3 + 0] = static_cast<std::uint8_t>((id * 53u + noise) & 255u);
        rgb[p * 3 + 1] = static_cast<std::uint8_t>((id * 97u + noise + static_cast<unsigned>(p % static_cast<std::size_t>(width)) / 16u) & 255u);
        rgb[p * 3 + 2] = static_cast<std::uint8_t>((id * 151u + noise) & 255u);
      }
      char stem[64];
      std::snprintf(stem, sizeof stem, "%s_%06ld_000019", city, i);
      write_png((images / (std::string(stem) + "_leftImg8bit.png")).string(), width, height, 3, rgb.data());
      write_png((labels / (std::string(stem) + "_gtFine_labelIds.png")).string(), width, height, 1, ids.data());
      ++written;
    }
  }
  for (long b = 0; b < broken; ++b) {
    char stem[64];
    std::snprintf(stem, sizeof stem, "city%02ld_broken_%06ld", b % cities, b);
    const auto city = std::string(stem).substr(0, 6);
    std::ofstream(root / "leftImg8bit" / "train" / city / (std::string(stem) + "_leftImg8bit.png"))
        << "not a PNG: a broken file, to be skipped and counted";
    std::ofstream(root / "gtFine" / "train" / city / (std::string(stem) + "_gtFine_labelIds.png")) << "not a PNG either";
  }
  std::cout << nlohmann::json{{"cities", cities}, {"pairs", written + broken}, {"broken", broken}}.dump() << "\n";
  return 0;
}

int generate(const Args& a) {
  if (a.positional.size() != 1) throw UsageError{"generate takes one directory"};
  if (cityscapes(a)) return generate_cityscapes(a);
  if (pretraining(a)) return generate_pretraining(a);
  const std::filesystem::path root = a.positional[0];
  const long classes = a.number("classes", 4, 1, 1000);
  const long per_class = a.number("per-class", 32, 1, 1 << 20);
  const long broken = a.number("broken", 0, 0, 1 << 20);
  const int progressive = a.on_off("progressive", false) ? TJFLAG_PROGRESSIVE : 0;
  std::mt19937_64 rng(static_cast<std::uint64_t>(a.number("seed", 7, 0, 1L << 62)));
  constexpr int kSizes[][2] = {{500, 375}, {375, 500}, {500, 333}, {400, 300}, {640, 480}, {500, 500}, {333, 500}};
  tjhandle tj = tjInitCompress();
  if (tj == nullptr) throw std::runtime_error("TurboJPEG cannot compress");
  std::vector<std::uint8_t> rgb;
  for (long c = 0; c < classes; ++c) {
    char name[32];
    std::snprintf(name, sizeof name, "class_%04ld", c);
    const std::filesystem::path folder = root / name;
    std::filesystem::create_directories(folder);
    for (long i = 0; i < per_class; ++i) {
      const auto& size = kSizes[static_cast<std::size_t>(rng() % std::size(kSizes))];
      const int w = size[0], h = size[1];
      rgb.resize(static_cast<std::size_t>(w) * static_cast<std::size_t>(h) * 3);
      const unsigned r0 = static_cast<unsigned>(rng() % 256), g0 = static_cast<unsigned>(rng() % 256);
      const unsigned stripe = 4 + static_cast<unsigned>(rng() % 40);
      for (int y = 0; y < h; ++y) {
        for (int x = 0; x < w; ++x) {
          std::uint8_t* px = &rgb[(static_cast<std::size_t>(y) * static_cast<std::size_t>(w) + static_cast<std::size_t>(x)) * 3];
          px[0] = static_cast<std::uint8_t>(r0 + static_cast<unsigned>(x) * 255u / static_cast<unsigned>(w));
          px[1] = static_cast<std::uint8_t>(g0 + static_cast<unsigned>(y) * 255u / static_cast<unsigned>(h));
          px[2] = static_cast<std::uint8_t>(((static_cast<unsigned>(x + y) / stripe) % 2) * 160u + rng() % 64);
        }
      }
      unsigned char* jpeg = nullptr;
      unsigned long bytes = 0;
      if (tjCompress2(tj, rgb.data(), w, 0, h, TJPF_RGB, &jpeg, &bytes, TJSAMP_420, 90, progressive) != 0) {
        throw std::runtime_error(std::string("TurboJPEG: ") + tjGetErrorStr2(tj));
      }
      char file[48];
      std::snprintf(file, sizeof file, "img_%06ld.jpg", i);
      std::ofstream(folder / file, std::ios::binary).write(reinterpret_cast<const char*>(jpeg), static_cast<std::streamsize>(bytes));
      tjFree(jpeg);
    }
  }
  tjDestroy(tj);
  for (long b = 0; b < broken; ++b) {
    char file[96];
    std::snprintf(file, sizeof file, "class_%04ld/broken_%04ld.jpg", b % classes, b);
    std::ofstream(root / file) << "not a JPEG: a broken file, to be skipped and counted";
  }
  std::cout << nlohmann::json{{"classes", classes}, {"files", classes * per_class + broken}, {"broken", broken}}.dump() << "\n";
  return 0;
}

int scan(const Args& a) {
  if (pretraining(a)) {
    const PretrainingShards set = scan_pretraining_shards(one_directory(a, "scan"));
    nlohmann::json unreadable = nlohmann::json::array();
    for (const auto& u : set.unreadable) unreadable.push_back({{"path", u.path}, {"why", u.why}});
    std::cout << nlohmann::json{{"shards", set.shards.size()}, {"sequences", set.sequences},
                                {"sequenceLength", set.sequence_length}, {"maxPredictions", set.max_predictions},
                                {"unreadable", unreadable}}
                     .dump()
              << "\n";
    return 0;
  }
  if (cityscapes(a)) {
    const CityscapesSet set = scan_cityscapes(one_directory(a, "scan"));
    std::cout << nlohmann::json{{"cities", set.cities}, {"pairs", set.pairs.size()}, {"unpairedImages", set.unpaired_images}}.dump()
              << "\n";
    return 0;
  }
  const ImageFolder folder = scan_image_folder(one_directory(a, "scan"));
  nlohmann::json out{{"classes", folder.classes}, {"files", folder.files.size()}, {"ignoredFiles", folder.ignored_files}};
  std::cout << out.dump() << "\n";
  return 0;
}

int shard(const Args& a) {
  const std::string root = one_directory(a, "shard");
  const int world = static_cast<int>(a.number("world", 1, 1, 1 << 20));
  const int rank = static_cast<int>(a.number("rank", 0, 0, world - 1));
  const auto epoch = static_cast<std::uint64_t>(a.number("epoch", 0, 0, 1L << 40));
  const auto seed = static_cast<std::uint64_t>(a.number("seed", 42, 0, 1L << 62));
  if (pretraining(a)) {  // shards dealt out, or every shard to every rank when there are fewer
    const PretrainingShards set = scan_pretraining_shards(root);
    const bool dealt = set.shards.size() >= static_cast<std::size_t>(world);
    for (const auto index : epoch_shard(set.shards.size(), seed, epoch, dealt ? rank : 0, dealt ? world : 1)) {
      std::cout << set.shards[index].path << "\t" << set.shards[index].sequences << "\n";
    }
    return 0;
  }
  if (cityscapes(a)) {
    const CityscapesSet set = scan_cityscapes(root);
    for (const auto index : epoch_shard(set.pairs.size(), seed, epoch, rank, world)) {
      std::cout << set.pairs[index].image << "\t" << set.pairs[index].labels << "\n";
    }
    return 0;
  }
  const ImageFolder folder = scan_image_folder(root);
  for (const auto index : epoch_shard(folder.files.size(), seed, epoch, rank, world)) {
    std::cout << folder.files[index].path << "\t" << folder.files[index].label << "\n";
  }
  return 0;
}

int transform(const Args& a) {
  if (a.positional.size() != 1) throw UsageError{"transform takes one JPEG file"};
  const int size = static_cast<int>(a.number("image-size", 224, 1, 4096));
  const CropBox crop{static_cast<int>(a.number("top", -1, 0, 1 << 20)), static_cast<int>(a.number("left", -1, 0, 1 << 20)),
                     static_cast<int>(a.number("height", -1, 1, 1 << 20)), static_cast<int>(a.number("width", -1, 1, 1 << 20))};
  if (crop.top < 0 || crop.left < 0 || crop.height < 0 || crop.width < 0) throw UsageError{"transform needs --top, --left, --height and --width"};
  const std::string output = a.text("output");
  if (output.empty()) throw UsageError{"transform needs --output"};
  std::ifstream in(a.positional[0], std::ios::binary);
  const std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TransformScratch scratch;
  Normalizer normalizer;
  std::vector<float> sample(3 * static_cast<std::size_t>(size) * static_cast<std::size_t>(size));
  std::string why;
  const JpegDecoding decoding{a.on_off("dct-scaling", false), a.on_off("crop-only", true)};
  if (!transform_jpeg(bytes, crop, a.number("flip", 0, 0, 1) == 1, size, decoding, PixelLayout::nchw,
                      normalizer, scratch, sample.data(), why)) {
    std::cerr << "dlbench-input: " << a.positional[0] << ": " << why << "\n";
    return 1;
  }
  write_floats(output, sample.data(), sample.size());
  return 0;
}

std::vector<std::uint8_t> read_all(const std::string& path) {
  std::vector<std::uint8_t> bytes;
  std::string why;
  if (!read_file(path, bytes, why)) throw std::runtime_error(path + " " + why);
  return bytes;
}

int transform_segmentation_sample(const Args& a) {
  if (a.positional.size() != 2) throw UsageError{"transform-segmentation takes an image PNG and its label PNG"};
  const int crop_height = static_cast<int>(a.number("crop-height", 512, 1, 1 << 15));
  const int crop_width = static_cast<int>(a.number("crop-width", 1024, 1, 1 << 15));
  SegmentationDraw draw;
  draw.resized_height = static_cast<int>(a.number("resized-height", -1, 1, 1 << 16));
  draw.resized_width = static_cast<int>(a.number("resized-width", -1, 1, 1 << 16));
  draw.top = static_cast<int>(a.number("top", -1, 0, 1 << 16));
  draw.left = static_cast<int>(a.number("left", -1, 0, 1 << 16));
  draw.flip = a.number("flip", 0, 0, 1) == 1;
  if (draw.resized_height < 0 || draw.resized_width < 0 || draw.top < 0 || draw.left < 0) {
    throw UsageError{"transform-segmentation needs --resized-height, --resized-width, --top and --left"};
  }
  const std::string output = a.text("output");
  if (output.empty()) throw UsageError{"transform-segmentation needs --output"};
  SegmentationScratch scratch;
  Normalizer normalizer;
  const auto pixels = static_cast<std::size_t>(crop_height) * static_cast<std::size_t>(crop_width);
  std::vector<float> sample(3 * pixels);
  std::vector<std::int32_t> labels(pixels);
  std::string why;
  if (!decode_segmentation_pair(read_all(a.positional[0]), read_all(a.positional[1]), scratch, why) ||
      !transform_segmentation(draw, crop_height, crop_width, PixelLayout::nchw, normalizer, scratch, sample.data(),
                              labels.data(), why)) {
    std::cerr << "dlbench-input: " << a.positional[0] << ": " << why << "\n";
    return 1;
  }
  write_floats(output, sample.data(), sample.size());
  std::ofstream out(output + ".labels", std::ios::binary);
  out.write(reinterpret_cast<const char*>(labels.data()), static_cast<std::streamsize>(labels.size() * sizeof(std::int32_t)));
  if (!out) throw std::runtime_error("cannot write " + output + ".labels");
  return 0;
}

// The reader alone: sequences per second into the trainer's batch layout, after the first batch
// (which waits for the first shard's load).
int measure_pretraining(const Args& a, const std::string& root, const InputPipelineConfig& pipeline, long batches) {
  const PretrainingShards set = scan_pretraining_shards(root);
  PretrainingReaderConfig config;
  config.batch_size = pipeline.batch_size;
  config.vocabulary = a.number("vocabulary", 30522, 1000, 1 << 24);
  config.seed = pipeline.seed;
  config.rank = pipeline.rank;
  config.world = pipeline.world;
  PretrainingReader reader(set, config);
  const SequenceBatch& first = reader.next();
  if (const std::string dump = a.text("dump-first"); !dump.empty()) {
    std::ofstream out(dump);
    out << nlohmann::json{{"tokenIds", first.token_ids}, {"block", first.block}}.dump() << "\n";
  }
  const auto start = std::chrono::steady_clock::now();
  for (long b = 0; b < batches; ++b) reader.next();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  nlohmann::json out{{"sequencesPerSecond", static_cast<double>(batches) * config.batch_size / seconds},
                     {"seconds", seconds},
                     {"sequences", batches * config.batch_size},
                     {"shards", set.shards.size()},
                     {"datasetSequences", set.sequences},
                     {"loadSequencesPerSecond", reader.load_rate()},
                     {"skipped", reader.skipped_count()}};
  out["skippedExamples"] = nlohmann::json::array();
  for (const auto& s : reader.skipped_examples()) out["skippedExamples"].push_back({{"path", s.path}, {"why", s.why}});
  std::cout << out.dump() << "\n";
  return 0;
}

// --check-values's part of measure's JSON.
nlohmann::json values_report(const BatchValues& v) {
  const auto or_null = [](std::optional<float> x) { return x ? nlohmann::json(*x) : nlohmann::json(nullptr); };
  return {{"batches", v.batches()},
          {"nonFinite", v.non_finite()},
          {"batchesWithNonFinite", v.batches_with_non_finite()},
          {"min", or_null(v.min())},
          {"max", or_null(v.max())}};
}

// The images of `root` as the pipeline reads them, with the options measure and check share;
// `folder` or `set` (by --data) holds what the source reads.
std::unique_ptr<SampleSource> image_source(const Args& a, const std::string& root, ImageFolder& folder,
                                           CityscapesSet& set) {
  if (cityscapes(a)) {
    set = scan_cityscapes(root);
    return std::make_unique<CityscapesSource>(set, static_cast<int>(a.number("crop-height", 512, 1, 1 << 15)),
                                              static_cast<int>(a.number("crop-width", 1024, 1, 1 << 15)),
                                              PixelLayout::nchw);
  }
  folder = scan_image_folder(root);
  return std::make_unique<ImageFolderSource>(folder, static_cast<int>(a.number("image-size", 224, 1, 4096)),
                                             PixelLayout::nchw,
                                             JpegDecoding{a.on_off("dct-scaling", true), a.on_off("crop-only", true)});
}

// Every sample made once by T threads, as the pipeline makes it: the ones a run would skip, each
// with why, before a run meets them one by one. Exit 1 when none can be made.
int check(const Args& a) {
  if (pretraining(a)) throw UsageError{"check: imagefolder or cityscapes (scan --data bertpretraining lists unreadable shards)"};
  const std::string root = one_directory(a, "check");
  const int threads = static_cast<int>(a.number("threads", 1, bounds::kDecodeThreads.min, bounds::kDecodeThreads.max));
  const auto seed = static_cast<std::uint64_t>(a.number("seed", 42, 0, 1L << 62));
  ImageFolder folder;
  CityscapesSet set;
  const std::unique_ptr<SampleSource> source = image_source(a, root, folder, set);
  struct Refused {
    std::string path, why;
  };
  std::vector<std::vector<Refused>> refused(static_cast<std::size_t>(threads));
  std::atomic<std::size_t> next{0};
  std::exception_ptr failure;  // a thread's exception (out of memory, say), rethrown here
  std::mutex failure_lock;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      try {
        const std::unique_ptr<SampleScratch> scratch = source->scratch();
        std::vector<float> pixels(source->pixel_floats());
        std::vector<std::int32_t> labels(source->label_count());
        for (std::size_t i = next++; i < source->samples(); i = next++) {
          const auto sample = static_cast<std::uint32_t>(i);
          std::mt19937_64 rng(seed + i);  // a sample's draws depend on the sample only
          std::string why;
          if (!source->make(sample, rng, *scratch, pixels.data(), labels.data(), why)) {
            refused[static_cast<std::size_t>(t)].push_back({source->sample_path(sample), why});
          }
        }
      } catch (...) {
        const std::lock_guard<std::mutex> lock(failure_lock);
        if (!failure) failure = std::current_exception();
        next = source->samples();  // the others stop too
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  if (failure) std::rethrow_exception(failure);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<Refused> all;
  for (auto& some : refused) all.insert(all.end(), some.begin(), some.end());
  std::sort(all.begin(), all.end(), [](const Refused& x, const Refused& y) { return x.path < y.path; });
  nlohmann::json out{{"samples", source->samples()},
                     {"samplesAre", source->samples_are()},
                     {"refusedCount", all.size()},
                     {"threads", threads},
                     {"seconds", seconds},
                     {"samplesPerSecond", static_cast<double>(source->samples()) / seconds}};
  out["refused"] = nlohmann::json::array();
  for (const Refused& r : all) out["refused"].push_back({{"path", r.path}, {"why", r.why}});
  std::cout << out.dump() << "\n";
  if (all.size() == source->samples()) {
    std::cerr << "dlbench-input: none of the " << source->samples() << " " << source->samples_are() << " of " << root
              << " can be used\n";
    return 1;
  }
  return 0;
}

int measure(const Args& a) {
  const std::string root = one_directory(a, "measure");
  InputPipelineConfig config;
  config.batch_size = static_cast<int>(a.number("batch-size", 32, 1, 65536));
  config.threads = static_cast<int>(a.number("threads", 1, bounds::kDecodeThreads.min, bounds::kDecodeThreads.max));
  config.prefetch_batches = static_cast<int>(a.number("prefetch-batches", 2, bounds::kPrefetchBatches.min, bounds::kPrefetchBatches.max));
  config.world = static_cast<int>(a.number("world", 1, 1, 1 << 20));
  config.rank = static_cast<int>(a.number("rank", 0, 0, config.world - 1));
  config.seed = static_cast<std::uint64_t>(a.number("seed", 42, 0, 1L << 62));
  const long batches = a.number("batches", 20, 1, 1 << 30);
  if (pretraining(a)) {
    // Token ids are integers the reader bounds itself (--vocabulary): nothing to check or convert.
    for (const char* images_only : {"check-values", "pixel-type"}) {
      if (!a.text(images_only).empty()) throw UsageError{std::string("--") + images_only + ": images only, not --data bertpretraining"};
    }
    return measure_pretraining(a, root, config, batches);
  }
  // As the worker asks for them: fp16 for amp, bf16 for bf16 (the threads convert).
  if (const std::string chosen = a.text("pixel-type"); !chosen.empty()) {
    using worker::DType;
    config.pixel_type = one_of<DType>("--pixel-type", chosen, {{"fp32", DType::fp32}, {"fp16", DType::fp16}, {"bf16", DType::bf16}});
  }
  const std::string pixel_type(worker::to_string(config.pixel_type));
  if (config.pixel_type != worker::DType::fp32 && !a.text("dump-first").empty()) {
    throw UsageError{"--dump-first writes floats: not with --pixel-type " + pixel_type};
  }
  const std::string resize_on = a.text("resize-on").empty() ? "host" : a.text("resize-on");
  config.resize_on_device = one_of<bool>("--resize-on", resize_on, {{"host", false}, {"device", true}});
  if (config.resize_on_device && cityscapes(a)) throw UsageError{"--resize-on device: imagefolder only"};
  if (config.resize_on_device) {
    for (const char* floats_on_the_host : {"dump-first", "check-values"}) {
      if (!a.text(floats_on_the_host).empty()) {
        throw UsageError{std::string("--") + floats_on_the_host + ": a batch packed for the device has no values here"};
      }
    }
  }
  ImageFolder folder;
  CityscapesSet set;
  const std::unique_ptr<SampleSource> source = image_source(a, root, folder, set);
  InputPipeline pipeline(*source, config);
  // The first batch includes starting the threads and filling the ring: not timed.
  const Batch first = pipeline.next();
  if (const std::string dump = a.text("dump-first"); !dump.empty()) {
    write_floats(dump, first.floats(), source->pixel_floats() * static_cast<std::size_t>(config.batch_size));
    std::ofstream labels(dump + ".labels");
    for (std::size_t i = 0; i < source->label_count() * static_cast<std::size_t>(config.batch_size); ++i) {
      labels << first.labels[i] << "\n";
    }
  }
  // The scan runs on the consuming thread, inside the timed loop: measure speed without it.
  std::optional<BatchValues> check;
  if (a.on_off("check-values", false)) check.emplace();
  const std::size_t pixels_per_batch = source->pixel_floats() * static_cast<std::size_t>(config.batch_size);
  if (check) check->scan(first, pixels_per_batch);
  std::size_t packed_bytes = 0;  // what the packed batches would copy to a GPU
  const auto start = std::chrono::steady_clock::now();
  for (long b = 0; b < batches; ++b) {
    const Batch batch = pipeline.next();
    packed_bytes += batch.packed_bytes;
    if (check) check->scan(batch, pixels_per_batch);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  nlohmann::json out{{"imagesPerSecond", static_cast<double>(batches) * config.batch_size / seconds},
                     {"seconds", seconds},
                     {"images", batches * config.batch_size},
                     {"threads", config.threads},
                     {"pixelType", pixel_type},
                     {"resizeOn", resize_on},
                     {"files", source->samples()},
                     {"shardFiles", pipeline.shard_size()},
                     {"skippedFiles", pipeline.skipped_count()}};
  out["skipped"] = nlohmann::json::array();
  for (const auto& s : pipeline.skipped_examples()) out["skipped"].push_back({{"path", s.path}, {"why", s.why}});
  if (check) out["values"] = values_report(*check);
  // Bytes a GPU is sent per image: the packed crops and taps, or the finished pixels.
  out["bytesPerImage"] = config.resize_on_device
                             ? static_cast<double>(packed_bytes) / static_cast<double>(batches * config.batch_size)
                             : static_cast<double>(source->pixel_floats() * worker::dtype_size(config.pixel_type));
  std::cout << out.dump() << "\n";
  return 0;
}

// A subcommand: what --help says of it, of its operands and of each option, and what runs it.
struct Command {
  const char* name;
  const char* description;
  const char* operands;  // what the positional arguments are
  std::vector<std::pair<const char*, const char*>> options;  // name without "--", what it is
  int (*run)(const Args&);
};

const std::vector<Command>& commands() {
  static const std::vector<Command> all{
      {"generate",
       "writes a data set to try the real-data path: an ImageFolder of JPEGs (ImageNet-like sizes, 500 x 375 and the "
       "like), with --data cityscapes Cityscapes' layout of image and label PNGs, or with --data bertpretraining "
       "BERT pretraining shards in NVIDIA's HDF5 format",
       "DIR",
       {{"data", "imagefolder | cityscapes | bertpretraining (default imagefolder)"},
        {"classes", "imagefolder: class folders (default 4)"},
        {"per-class", "imagefolder: JPEGs per class (default 32)"},
        {"progressive", "imagefolder: on | off, progressive JPEGs, as some photos are (default off)"},
        {"cities", "cityscapes: city folders (default 2)"},
        {"per-city", "cityscapes: image and label pairs per city (default 8)"},
        {"width", "cityscapes: pixels (default 2048)"},
        {"height", "cityscapes: pixels (default 1024)"},
        {"shards", "bertpretraining: HDF5 files (default 2)"},
        {"per-shard", "bertpretraining: sequences per shard (default 256)"},
        {"sequence-length", "bertpretraining: tokens per sequence (default 128)"},
        {"max-predictions", "bertpretraining: masked positions per sequence at most (default 20, 80 at 512 tokens)"},
        {"vocabulary", "bertpretraining: token ids (default 30522)"},
        {"bad-sequences", "bertpretraining: sequences in the first shard with an id past the vocabulary (default 0)"},
        {"broken", "files that cannot be decoded, to be skipped and counted (default 0)"},
        {"seed", "the data's seed (default 7)"}},
       generate},
      {"scan", "what the data set holds, as JSON (imagefolder: classes, files and ignored files; cityscapes: cities, "
               "pairs and images without labels; bertpretraining: shards, sequences, their length and predictions, "
               "unreadable shards)", "DIR", {{"data", "imagefolder | cityscapes | bertpretraining (default imagefolder)"}}, scan},
      {"shard",
       "the files rank R reads in epoch E, one per line (bertpretraining: its shards and their sequences)",
       "DIR",
       {{"data", "imagefolder | cityscapes | bertpretraining (default imagefolder)"},
        {"rank", "R (default 0)"},
        {"world", "W ranks (default 1)"},
        {"epoch", "E (default 0)"},
        {"seed", "S (default 42)"}},
       shard},
      {"transform",
       "one sample as float32 (3, N, N): decode, crop, resize, flip, normalise",
       "FILE",
       {{"top", "the crop's top row"},
        {"left", "the crop's left column"},
        {"height", "the crop's height"},
        {"width", "the crop's width"},
        {"flip", "0 | 1 (default 0)"},
        {"image-size", "N (default 224)"},
        {"dct-scaling", "on | off (default off)"},
        {"crop-only", "on | off: decode only the rows and columns the crop needs, the same bytes (default on)"},
        {"output", "RAW: where the floats go"}},
       transform},
      {"transform-segmentation",
       "one Cityscapes sample with given draws: float32 (3, H, W) to RAW and int32 (H, W) training ids to RAW.labels",
       "IMAGE LABELS",
       {{"resized-height", "RandomResize's height"},
        {"resized-width", "RandomResize's width"},
        {"flip", "0 | 1 (default 0)"},
        {"top", "the crop's top row in the flipped, padded image"},
        {"left", "the crop's left column there"},
        {"crop-height", "H (default 512)"},
        {"crop-width", "W (default 1024)"},
        {"output", "RAW: where the floats go"}},
       transform_segmentation_sample},
      {"check",
       "every sample made once, as the pipeline makes it, by T threads: the files a run would skip, each with why, "
       "as JSON (imagefolder: damaged JPEGs and PNGs refused exactly where Pillow refuses them; cityscapes: pairs)",
       "DIR",
       {{"data", "imagefolder | cityscapes (default imagefolder)"},
        {"threads", "T decoding threads (default 1)"},
        {"seed", "S: the draws of sample i come from S + i (default 42)"},
        {"image-size", "imagefolder: N (default 224)"},
        {"crop-height", "cityscapes: H (default 512)"},
        {"crop-width", "cityscapes: W (default 1024)"},
        {"dct-scaling", "imagefolder: on | off (default on)"},
        {"crop-only", "imagefolder: on | off, decode only what the crop needs (default on); a file is refused "
                      "alike either way"}},
       check},
      {"measure",
       "images (bertpretraining: sequences) per second the pipeline prepares, as JSON",
       "DIR",
       {{"data", "imagefolder | cityscapes | bertpretraining (default imagefolder)"},
        {"batch-size", "B (default 32)"},
        {"image-size", "imagefolder: N (default 224)"},
        {"crop-height", "cityscapes: H (default 512)"},
        {"crop-width", "cityscapes: W (default 1024)"},
        {"threads", "T decoding threads (default 1)"},
        {"prefetch-batches", "P (default 2)"},
        {"batches", "K timed batches (default 20)"},
        {"rank", "R (default 0)"},
        {"world", "W (default 1)"},
        {"seed", "S (default 42)"},
        {"dct-scaling", "imagefolder: on | off (default on)"},
        {"crop-only", "imagefolder: on | off, decode only what the crop needs (default on)"},
        {"resize-on", "imagefolder: host | device: the threads resize, or only decode and pack each crop with its "
                      "taps for a GPU to resize (DLBENCH_INPUT_RESIZE; the GPU's part is not run here; default host)"},
        {"pixel-type", "imagefolder, cityscapes: fp32 | fp16 | bf16, what the threads hand out (amp's fp16, bf16's "
                       "bf16; default fp32)"},
        {"vocabulary", "bertpretraining: token ids a sequence may hold (default 30522)"},
        {"dump-first", "RAW: the first batch's floats, and its labels beside (bertpretraining: JSON of its token ids and "
                       "block)"},
        {"check-values", "imagefolder, cityscapes: on | off, scan every batch handed out, the first included, as the "
                         "device reads it: values not finite, and the smallest and largest finite one, as \"values\" "
                         "(timed with the batches; default off)"}},
       measure},
  };
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Args args;
    CLI::App app{"dlbench-input — the worker's real-data input pipeline on its own", "dlbench-input"};
    use_dlbench_help(app);
    app.set_help_flag("-h,--help", "print this and exit");
    app.require_subcommand(0, 1);
    bool print_version = false;
    app.add_flag("--version", print_version, "print dlbench-input's version (and the revision it was built from) and exit");
    std::map<const CLI::App*, const Command*> by_app;
    for (const Command& c : commands()) {
      CLI::App* sub = app.add_subcommand(c.name, c.description);
      sub->add_option("operands", args.positional, c.operands)->type_name(c.operands);
      for (const auto& [name, what] : c.options) {
        const std::string key = name;
        add_text_option(*sub, "--" + key, [&args, key](const std::string& v) { args.options[key] = v; }, what, "VALUE");
      }
      by_app[sub] = &c;
    }
    app.footer(kFooter);
    const std::vector<std::string> words(argv + 1, argv + argc);
    if (!words.empty() && !words.front().starts_with("-") &&
        std::none_of(commands().begin(), commands().end(), [&](const Command& c) { return words.front() == c.name; })) {
      throw UsageError{"unknown command \"" + printable(words.front()) + "\"; allowed: generate, scan, shard, transform, transform-segmentation, check, measure"};
    }
    try {
      parse_command_line(app, words);
    } catch (const CLI::CallForHelp&) {
      std::cout << app.help();
      return 0;
    }
    if (print_version) {
      std::cout << "dlbench-input " << dlbench::version() << "\n";
      return 0;
    }
    if (app.get_subcommands().empty()) {
      std::cout << app.help();
      return 0;
    }
    return by_app.at(app.get_subcommands().front())->run(args);
  } catch (const UsageError& u) {
    std::cerr << "dlbench-input: " << u.message << "\n";
    return kExitUsageError;
  } catch (const std::exception& e) {
    std::cerr << "dlbench-input: " << e.what() << "\n";
    return 1;
  }
}
