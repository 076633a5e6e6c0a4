// A cgroup tree for a test: directories under the temporary directory, laid out as the kernel
// mounts cgroups (v2 at the root, v1 controllers in folders of their own), each file one line.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace dlbench::worker {

class CgroupTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() / ("dlbench-cgroups-" + std::to_string(::getpid()));
    std::filesystem::remove_all(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void write(const std::string& relative, const std::string& text) {
    const auto file = root_ / relative;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file) << text << "\n";
  }
  std::filesystem::path root_;
};

}  // namespace dlbench::worker
