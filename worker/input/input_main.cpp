// dlbench-input: the worker's real-data pipeline on its own. It lists a data set and its shards,
// transforms one image with given crop parameters (the golden test against torchvision reads
// this), and measures how many images per second the pipeline prepares with N threads.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dlbench/core/api_rules.hpp"
#include <turbojpeg.h>

#include "input/image_folder.hpp"
#include "dlbench/core/command_line.hpp"
#include "input/image_transform.hpp"
#include "input/input_pipeline.hpp"

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
    const auto v = whole_number(it->second, {lo, hi});
    if (!v) throw UsageError{"--" + key + ": \"" + it->second + "\" is not a whole number from " + std::to_string(lo) + " to " + std::to_string(hi)};
    return static_cast<long>(*v);
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
int generate(const Args& a) {
  if (a.positional.size() != 1) throw UsageError{"generate takes one directory"};
  const std::filesystem::path root = a.positional[0];
  const long classes = a.number("classes", 4, 1, 1000);
  const long per_class = a.number("per-class", 32, 1, 1 << 20);
  const long broken = a.number("broken", 0, 0, 1 << 20);
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
      if (tjCompress2(tj, rgb.data(), w, 0, h, TJPF_RGB, &jpeg, &bytes, TJSAMP_420, 90, 0) != 0) {
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
       "writes an ImageFolder data set of JPEGs (ImageNet-like sizes, 500 x 375 and the like) to try the real-data path",
       "DIR",
       {{"classes", "class folders (default 4)"},
        {"per-class", "JPEGs per class (default 32)"},
        {"broken", "files that are not JPEGs, to be skipped and counted (default 0)"},
        {"seed", "the pictures' seed (default 7)"}},
       generate},
      {"scan", "classes, files and ignored files, as JSON", "DIR", {}, scan},
      {"shard",
       "the files rank R reads in epoch E, one per line",
       "DIR",
       {{"rank", "R (default 0)"}, {"world", "W ranks (default 1)"}, {"epoch", "E (default 0)"}, {"seed", "S (default 42)"}},
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
        {"output", "RAW: where the floats go"}},
       transform},
      {"measure",
       "images per second the pipeline prepares, as JSON",
       "DIR",
       {{"batch-size", "B (default 32)"},
        {"image-size", "N (default 224)"},
        {"threads", "T decoding threads (default 1)"},
        {"prefetch-batches", "P (default 2)"},
        {"batches", "K timed batches (default 20)"},
        {"rank", "R (default 0)"},
        {"world", "W (default 1)"},
        {"seed", "S (default 42)"},
        {"dct-scaling", "on | off (default on)"},
        {"dump-first", "RAW: the first batch's floats, and its labels beside"}},
       measure},
  };
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Args args;
    CLI::App app{"dlbench-input — the worker's ImageFolder input pipeline on its own", "dlbench-input"};
    use_dlbench_help(app);
    app.set_help_flag("-h,--help", "print this and exit");
    app.require_subcommand(0, 1);
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
      throw UsageError{"unknown command \"" + printable(words.front()) + "\"; allowed: generate, scan, shard, transform, measure"};
    }
    try {
      parse_command_line(app, words);
    } catch (const CLI::CallForHelp&) {
      std::cout << app.help();
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
