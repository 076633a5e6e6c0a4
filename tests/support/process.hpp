#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
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
  // argv[0] is looked up on PATH; its stdout goes to `stdout_path` where one is given.
  explicit ChildProcess(const std::vector<std::string>& argv, const std::string& stdout_path = "") {
    pid_ = fork();
    if (pid_ == 0) {
      if (!stdout_path.empty()) {
        const int fd = open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0) _exit(126);
        close(fd);
      }
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

// A server started with `--port 0` that binds a port of the kernel's choosing and says which on
// its first line of stdout ("… on http://127.0.0.1:PORT", as tests/k8s/test_apiserver.py does).
// A port drawn by free_port() and handed over races: a parallel test's server or any client's
// ephemeral port may take it before the server binds it.
class ListeningProcess {
 public:
  explicit ListeningProcess(std::vector<std::string> argv)
      : stdout_path_(std::filesystem::temp_directory_path() /
                     ("dlbench-listening-" + std::to_string(::getpid()) + "-" + std::to_string(++count_))),
        process_([&] {
          argv.insert(argv.end(), {"--port", "0"});
          return argv;
        }(), stdout_path_.string()) {
    using namespace std::chrono_literals;
    for (const auto deadline = std::chrono::steady_clock::now() + 20s; std::chrono::steady_clock::now() < deadline;) {
      const std::string out = slurp(stdout_path_);
      if (const auto end = out.find('\n'); end != std::string::npos) {
        const std::string first = out.substr(0, end);
        if (const auto colon = first.rfind(':'); colon != std::string::npos) port_ = std::atoi(first.c_str() + colon + 1);
        if (port_ > 0) return;
        break;
      }
      if (waitpid(process_.pid(), nullptr, WNOHANG) != 0) break;  // it exited without listening
      usleep(20'000);
    }
    const std::string said = slurp(stdout_path_);
    std::filesystem::remove(stdout_path_);
    throw std::runtime_error("no port announced on the first line of its stdout: '" + said + "'");
  }
  ~ListeningProcess() { std::filesystem::remove(stdout_path_); }
  ListeningProcess(const ListeningProcess&) = delete;
  ListeningProcess& operator=(const ListeningProcess&) = delete;
  int port() const { return port_; }
  pid_t pid() const { return process_.pid(); }

 private:
  static inline int count_ = 0;
  std::filesystem::path stdout_path_;
  ChildProcess process_;
  int port_ = 0;
};

}  // namespace dlbench::testing
