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
#include <mutex>
#include <random>
#include <set>
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

// A TCP port that was free a moment ago, for a server a test starts and names the port of. Drawn
// below the kernel's ephemeral range: a port the kernel handed out (bind 0, close) is one it may
// hand any client's connection next, before the server binds it. Never the same port twice in a
// process. Probed with SO_REUSEADDR, as servers bind, so a closed connection's TIME_WAIT does not
// count. Servers that can say where they listen are started on port 0 instead (ListeningProcess).
inline int free_port() {
  static std::mutex mutex;
  static std::set<int> handed_out;
  int ephemeral_low = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> ephemeral_low;
  const bool room_below = ephemeral_low > 11000;
  std::uniform_int_distribution<int> draw(room_below ? 10000 : 1024, room_below ? ephemeral_low - 1 : 65535);
  std::mt19937 random(std::random_device{}());
  const std::lock_guard lock(mutex);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = draw(random);
    if (handed_out.contains(port)) continue;
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    const int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    close(fd);
    if (bound) {
      handed_out.insert(port);
      return port;
    }
  }
  throw std::runtime_error("no free port in 200 draws below the ephemeral range");
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
// A port drawn by free_port() and handed over can still be taken by a parallel test's server
// before this one binds it; one the server chose cannot.
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
