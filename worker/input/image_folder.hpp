// The torchvision/ImageNet layout on disk: one folder per class, image files inside (at any depth).
// Classes are the sorted folder names and their index the label, as torchvision's ImageFolder
// numbers them; each rank reads its own shard of a per-epoch shuffle of all files.
#pragma once

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace dlbench::input {

// The data set cannot be used at all: a missing path, no class folders, no image files.
class DataUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ImageFile {
  std::string path;
  std::int32_t label = 0;
};

struct ImageFolder {
  std::string root;
  std::vector<std::string> classes;  // sorted; the index is the label
  std::vector<ImageFile> files;      // class by class, each class's files in sorted path order
  long ignored_files = 0;            // files whose names torchvision's ImageFolder does not list
};

// torchvision's IMG_EXTENSIONS: the files its ImageFolder lists, whatever their case. dlbench
// decodes JPEG, PNG and WebP files (by their content, as Pillow opens them); a file of another
// format is skipped and counted, naming it.
inline constexpr std::array<std::string_view, 9> kImageExtensions{".jpg", ".jpeg", ".png", ".ppm", ".bmp",
                                                                  ".pgm", ".tif", ".tiff", ".webp"};
// kImageExtensions, comma-separated, for messages.
std::string image_extensions();

// Throws DataUnavailable naming the path and what is wrong.
ImageFolder scan_image_folder(const std::string& root);

// Throws DataUnavailable unless data.path `root` is a directory on this node.
void require_data_directory(const std::string& root);

// SplitMix64's finaliser: neighbouring inputs (epochs, image positions) to unrelated seeds.
std::uint64_t mix_bits(std::uint64_t x);

// The positions in ImageFolder::files that `rank` of `world` reads in `epoch`: the epoch's
// permutation of every file (the same on every rank: it depends on the seed and the epoch only),
// every world-th entry from `rank`. Across the ranks each file appears exactly once per epoch.
std::vector<std::uint32_t> epoch_shard(std::size_t files, std::uint64_t seed, std::uint64_t epoch, int rank, int world);

}  // namespace dlbench::input
