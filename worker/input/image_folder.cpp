#include "input/image_folder.hpp"

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <random>
#include <string_view>
#include <system_error>

namespace dlbench::input {
namespace fs = std::filesystem;

namespace {

// torchvision's ImageFolder lists a file whose lower-cased name ends in one of its IMG_EXTENSIONS.
bool is_image_name(const fs::path& p) {
  std::string name = p.filename().string();
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return std::any_of(kImageExtensions.begin(), kImageExtensions.end(),
                     [&](std::string_view ext) { return name.ends_with(ext); });
}

}  // namespace

std::string image_extensions() {
  std::string all;
  for (const std::string_view ext : kImageExtensions) all += (all.empty() ? "" : ", ") + std::string(ext);
  return all;
}

std::uint64_t mix_bits(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void require_data_directory(const std::string& root) {
  std::error_code ec;
  const fs::file_status status = fs::status(root, ec);
  if (ec || !fs::exists(status)) throw DataUnavailable("data.path " + root + " does not exist on this node");
  if (!fs::is_directory(status)) throw DataUnavailable("data.path " + root + " is not a directory");
}

ImageFolder scan_image_folder(const std::string& root) {
  require_data_directory(root);
  std::error_code ec;
  ImageFolder folder;
  folder.root = root;
  fs::directory_iterator top(root, fs::directory_options::skip_permission_denied, ec);
  if (ec) throw DataUnavailable("data.path " + root + " cannot be read: " + ec.message());
  for (const auto& entry : top) {
    std::error_code is_dir_error;
    if (entry.is_directory(is_dir_error)) folder.classes.push_back(entry.path().filename().string());
  }
  std::sort(folder.classes.begin(), folder.classes.end());
  if (folder.classes.empty()) {
    throw DataUnavailable("data.path " + root + " has no class folders; expected the ImageFolder layout " + root +
                          "/<class>/<image>.jpg");
  }
  for (std::size_t label = 0; label < folder.classes.size(); ++label) {
    std::vector<std::string> paths;
    const fs::path class_dir = fs::path(root) / folder.classes[label];
    for (fs::recursive_directory_iterator it(class_dir, fs::directory_options::follow_directory_symlink |
                                                           fs::directory_options::skip_permission_denied,
                                             ec),
         end;
         !ec && it != end; it.increment(ec)) {
      std::error_code file_error;
      if (!it->is_regular_file(file_error)) continue;
      if (is_image_name(it->path())) {
        paths.push_back(it->path().string());
      } else {
        ++folder.ignored_files;
      }
    }
    if (ec) throw DataUnavailable("data.path " + class_dir.string() + " cannot be read: " + ec.message());
    std::sort(paths.begin(), paths.end());
    for (auto& p : paths) folder.files.push_back({std::move(p), static_cast<std::int32_t>(label)});
  }
  if (folder.files.empty()) {
    throw DataUnavailable("data.path " + root + " has " + std::to_string(folder.classes.size()) +
                          " class folders but no image files in them (" + image_extensions() +
                          ": the names torchvision's ImageFolder lists, in any case)");
  }
  return folder;
}

std::vector<std::uint32_t> epoch_shard(std::size_t files, std::uint64_t seed, std::uint64_t epoch, int rank, int world) {
  if (world < 1 || rank < 0 || rank >= world) throw std::invalid_argument("epoch_shard: rank outside the world");
  std::vector<std::uint32_t> order(files);
  std::iota(order.begin(), order.end(), 0u);
  std::mt19937_64 rng(mix_bits(seed) ^ mix_bits(epoch + 1));
  // Fisher-Yates with our own index draw: std::shuffle's is implementation-defined, and every
  // rank (on any standard library) must agree on the permutation.
  for (std::size_t i = files; i > 1; --i) {
    const std::size_t j = static_cast<std::size_t>(rng() % i);
    std::swap(order[i - 1], order[j]);
  }
  std::vector<std::uint32_t> shard;
  shard.reserve(files / static_cast<std::size_t>(world) + 1);
  for (std::size_t i = static_cast<std::size_t>(rank); i < files; i += static_cast<std::size_t>(world)) shard.push_back(order[i]);
  return shard;
}

}  // namespace dlbench::input
