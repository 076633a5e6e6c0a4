#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace dlbench::testing {

struct Outcome {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs a shell command in `directory`, feeding `stdin_text`, and captures both streams.
inline Outcome run_shell(const std::string& command, const std::string& directory, const std::string& stdin_text = "") {
  const auto dir = std::filesystem::temp_directory_path() / ("dlbench-test-io-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "in") << stdin_text;
  const std::string full = "cd " + directory + " && " + command + " < " + (dir / "in").string() + " > " +
                           (dir / "out").string() + " 2> " + (dir / "err").string();
  const int status = std::system(full.c_str());
  Outcome o;
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  o.out = slurp(dir / "out");
  o.err = slurp(dir / "err");
  std::filesystem::remove_all(dir);
  return o;
}

}  // namespace dlbench::testing
