#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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

// A TCP port on loopback that was free a moment ago.
inline int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t n = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
  close(fd);
  return ntohs(a.sin_port);
}

// A child process that is terminated and reaped when this goes out of scope.
class ChildProcess {
 public:
  // argv[0] is looked up on PATH.
  explicit ChildProcess(const std::vector<std::string>& argv) {
    pid_ = fork();
    if (pid_ == 0) {
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execvp(args[0], args.data());
      _exit(127);
    }
  }
  ~ChildProcess() {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

}  // namespace dlbench::testing
