// `dlbench run`: the local executor. The same BenchmarkRun the operator runs on a cluster,
// run case by case on this host as `mpirun -np DEVICES dlbench-worker …`, with the status
// written after every case exactly as the operator writes it.
#include "run_command.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <map>
#include <memory>
#include <sstream>
#include <string_view>
#include <thread>
#include <variant>

#include "dlbench/core/api_rules.hpp"
#include "dlbench/core/codec.hpp"
#include "dlbench/core/names.hpp"
#include "dlbench/core/planner.hpp"
#include "dlbench/core/result_document.hpp"
#include "dlbench/core/resume.hpp"
#include "dlbench/core/statistics.hpp"
#include "dlbench/core/run_state.hpp"
#include "dlbench/core/status.hpp"
#include "dlbench/core/version.hpp"
#include "dlbench/core/worker_command.hpp"
#include "dlbench/core/yaml.hpp"
#include "run_progress.hpp"
#include "stop_escalation.hpp"
#include "report_command.hpp"

namespace dlbench::cli {
namespace {

// "1 device", "8 devices".
std::string devices_phrase(int count) { return std::to_string(count) + (count == 1 ? " device" : " devices"); }

struct DeviceKind {
  int count = 0;
  std::string name;  // the GPU's model, where the worker says
};

constexpr std::size_t kMaxLineBytes = 64 * 1024;
constexpr std::size_t kTailLineChars = 240;
// An attempt's log keeps this much of its output: a worker that floods cannot fill the disk.
constexpr std::size_t kMaxLogBytes = 64 * 1024 * 1024;

// A port nobody listens on now, for the command's rendezvous (MASTER_PORT).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return kDefaultMasterPort;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  int port = kDefaultMasterPort;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  close(fd);
  return port;
}

std::atomic<bool> interrupted{false};
std::atomic<pid_t> running_child{0};

void on_interrupt(int) {
  interrupted = true;
  const pid_t child = running_child.load();
  if (child > 0) kill(-child, SIGTERM);  // the worker's whole process group (mpirun and ranks)
}

struct ChildOutcome {
  int exit_code = -1;
  bool timed_out = false;
  bool interrupted = false;
  std::deque<std::string> last_lines;  // of its stderr, for failure messages
};

// How long a child stopped at its deadline (SIGTERM) has to write what it measured before SIGKILL.
constexpr std::chrono::seconds kStopGrace{10};

// Runs argv in its own process group until it ends, `timeout_seconds` pass or Ctrl-C, passing
// each line it writes to `captured` (stderr; the other stream goes to /dev/null) to `on_line` as
// it comes, and all of it, up to kMaxLogBytes, to `log` (none: nullptr).
ChildOutcome run_child(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
                       int timeout_seconds, const std::function<void(const std::string&)>& on_line,
                       std::ostream* log, int captured = STDERR_FILENO) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    // A dlbench run killed where it cannot pass Ctrl-C on (SIGKILL, a crash) takes its case with
    // it: an orphaned worker would go on training and disturb every later measurement on the host.
    // The worker (or mpirun, or dlbench-exec, which stop what they started) gets SIGTERM.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);  // it died before the request was made
    setpgid(0, 0);
    dup2(pipe_fds[1], captured);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    const int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, captured == STDERR_FILENO ? STDOUT_FILENO : STDERR_FILENO);
    for (const auto& kv : extra_env) putenv(const_cast<char*>(kv.c_str()));
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "cannot start %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  running_child = pid;
  close(pipe_fds[1]);
  ChildOutcome outcome;
  StopEscalation stop([pid](int signal) { kill(-pid, signal); }, kStopGrace);  // the whole group: mpirun and ranks
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds);
  std::string partial;
  std::size_t logged = 0;
  char buffer[4096];
  bool open_pipe = true;
  while (open_pipe) {
    pollfd fd{pipe_fds[0], POLLIN, 0};
    const int ready = poll(&fd, 1, 200);
    if (ready > 0) {
      const ssize_t n = read(pipe_fds[0], buffer, sizeof buffer);
      if (n <= 0) {
        open_pipe = false;
      } else {
        if (log != nullptr && logged < kMaxLogBytes) {
          const std::size_t keep = std::min(static_cast<std::size_t>(n), kMaxLogBytes - logged);
          log->write(buffer, static_cast<std::streamsize>(keep));
          logged += keep;
          if (logged == kMaxLogBytes) *log << "\n[dlbench run: the log ends here, at 64 MiB; the output went on]\n";
        }
        partial.append(buffer, static_cast<std::size_t>(n));
        if (partial.size() > kMaxLineBytes && partial.find('\n') == std::string::npos) {
          partial.resize(kTailLineChars);  // a flood without newlines: keep its start, never all of it
          partial += "…\n";
        }
        for (std::size_t nl; (nl = partial.find('\n')) != std::string::npos;) {
          const std::string line = partial.substr(0, std::min(nl, kTailLineChars));
          partial.erase(0, nl + 1);
          on_line(line);
          outcome.last_lines.push_back(line);
          if (outcome.last_lines.size() > 12) outcome.last_lines.pop_front();
        }
      }
    }
    // Ctrl-C or past the deadline: SIGTERM, on which a worker writes the repeats it measured
    // (Stopped), then SIGKILL for whatever is still there kStopGrace later.
    if (interrupted && !outcome.interrupted) {
      outcome.interrupted = true;
      stop.stop(SIGTERM);
    }
    if (!outcome.timed_out && std::chrono::steady_clock::now() > deadline) {
      outcome.timed_out = true;
      stop.stop(SIGTERM);
    }
    stop.kill_when_due();
  }
  close(pipe_fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  running_child = 0;
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return outcome;
}

// `dlbench-worker --list-devices`: "cpu 8 precisions=…", "cuda 4 precisions=… name=NVIDIA H200"
// lines -> {"cpu": {8}, "cuda": {4, "NVIDIA H200"}}. Bounded, so that a worker that hangs cannot
// hold the run up; but not tight: the first CUDA call starts the driver, which takes seconds on a
// node of eight GPUs without persistence mode, and a GPU host cut off at 5 s would be refused its
// CUDA backend. Ctrl-C stops it at once (`interrupted`).
std::map<std::string, DeviceKind> list_devices(const std::string& worker) {
  std::map<std::string, DeviceKind> devices;
  const auto on_line = [&](const std::string& line) {
    std::istringstream in(line);
    std::string name;
    int count = 0;
    if (!(in >> name >> count)) return;
    const std::size_t model = line.find(" name=");
    devices[name] = {count, model == std::string::npos ? "" : line.substr(model + 6)};
  };
  run_child({worker, "--list-devices"}, {}, 60, on_line, nullptr, STDOUT_FILENO);
  return devices;
}

// One `dlbench run` writes a status file at a time: a second one would measure beside the first,
// each disturbing the other's figures, and replace its status (with --resume, run the same
// cases again). The lock is flock(2) on STATUS.lock beside it, so it ends with the process
// however that ends; the file is removed while still locked, and a taker that opened a removed
// file tries again.
class StatusFileLock {
 public:
  // The lock, or why it cannot be had.
  static std::variant<std::unique_ptr<StatusFileLock>, std::string> take(const std::string& status_path) {
    const std::string path = status_path + ".lock";
    for (int tries = 0; tries < 100; ++tries) {
      const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);  // not inherited by the ranks
      if (fd < 0) return "cannot write " + path + " beside the status: " + std::strerror(errno);
      if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        char holder[32] = {};
        const ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
        close(fd);
        const std::string pid = n > 0 ? std::string(holder, static_cast<std::size_t>(n)) : "unknown";
        return "another dlbench run (pid " + pid + ") is writing " + status_path +
               "; wait for it to end, or choose another --output";
      }
      struct stat held {}, named {};
      if (fstat(fd, &held) == 0 && stat(path.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
          held.st_dev == named.st_dev) {
        const std::string pid = std::to_string(getpid());
        const bool recorded = ftruncate(fd, 0) == 0 && pwrite(fd, pid.data(), pid.size(), 0) > 0;
        static_cast<void>(recorded);  // without the pid a second run says "pid unknown"; the lock holds all the same
        return std::unique_ptr<StatusFileLock>(new StatusFileLock(fd, path));
      }
      close(fd);  // locked a file its holder had just removed: take the new one
    }
    return "cannot lock " + path + ": it keeps being replaced";
  }
  ~StatusFileLock() {
    unlink(path_.c_str());
    close(fd_);
  }
  StatusFileLock(const StatusFileLock&) = delete;
  StatusFileLock& operator=(const StatusFileLock&) = delete;

 private:
  StatusFileLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

// The cases' logs beside their status: quickstart.status.json -> quickstart.logs.
std::string logs_beside(const std::string& status_path) {
  std::string stem = status_path;
  for (const std::string_view suffix : {".json", ".status"}) {
    if (stem.size() > suffix.size() && stem.ends_with(suffix)) stem.resize(stem.size() - suffix.size());
  }
  return stem + ".logs";
}

std::string self_directory() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

std::string join_lines(const std::deque<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += (out.empty() ? "" : "\n") + l;
  return out;
}

// A status file that could not be written (a full disk, a file-size limit, a path taken by a
// directory): what was asked and the system's reason.
struct StatusNotWritten : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The status written whole or not at all: PATH.tmp written and flushed to the disk, then renamed
// over PATH. A write that fails leaves PATH as it was and no PATH.tmp.
void write_status_file(const std::string& path, const BenchmarkRun& run) {
  const std::string tmp = path + ".tmp";
  const std::string text = to_json(run).dump(2) + "\n";
  int fd = -1;
  const auto fail = [&](const std::string& doing) {
    const int error = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw StatusNotWritten("cannot write " + path + " (" + doing + "): " + std::strerror(error));
  };
  fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("opening " + tmp);
  for (std::size_t written = 0; written < text.size();) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("writing " + tmp);
    written += static_cast<std::size_t>(n);
  }
  // On the disk before the rename: a crash just after it must not leave an empty status.
  if (::fsync(fd) != 0) fail("flushing " + tmp);
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) fail("closing " + tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("renaming " + tmp + " over it");
}

// The status that could not be written to `output`, kept so that nothing measured is lost: in the
// temporary directory, or where that fails too, on stdout, with how to go on from it. Exit code 2.
int keep_unwritten_status(const BenchmarkRun& run, const RunOptions& options, const std::string& output,
                          const std::string& why, std::ostream& out, std::ostream& err) {
  err << "error: " << why << "\n";
  const std::size_t results = run.status ? run.status->results.size() : 0;
  const std::string what = "the run's status, with the " + std::to_string(results) +
                           (results == 1 ? " result" : " results") + " measured so far,";
  const std::string then = " once that can be written, and `dlbench run -f " + options.file +
                           (options.output.empty() ? "" : " --output " + options.output) + " --resume` goes on from it\n";
  std::error_code ec;
  const std::filesystem::path elsewhere =
      std::filesystem::temp_directory_path(ec) /
      ("dlbench-run-" + std::to_string(getpid()) + "." + std::filesystem::path(output).filename().string());
  if (!ec) {
    try {
      write_status_file(elsewhere.string(), run);
      err << what << " is kept in " << elsewhere.string() << " instead: move it to " << output << then;
      return 2;
    } catch (const StatusNotWritten& e) {
      err << "error: " << e.what() << "\n";
    }
  }
  err << what << " follows on stdout: save it as " << output << then;
  out << to_json(run).dump(2) << "\n";
  return 2;
}

CaseResult failed(const PlannedCase& c, CaseState state, std::string reason, std::string message, int attempts) {
  CaseResult r;
  r.case_ = c.spec;
  r.state = state;
  r.reason = std::move(reason);
  r.message = std::move(message);
  r.attempts = attempts;
  r.completion_time = rfc3339_utc_now();
  return r;
}

// The one BenchmarkRun in the file, decoded; or the exit code that says why not (2 unreadable,
// 1 invalid). `flag`: the option that named the file, where -f did not ("--resume: ").
std::variant<BenchmarkRun, int> load_run(const std::string& file, std::ostream& err, const std::string& flag = "") {
  std::vector<nlohmann::json> documents;
  try {
    documents = load_yaml_file(file);
  } catch (const std::exception& e) {
    err << "error: " << flag << e.what() << "\n";
    return 2;
  }
  if (documents.size() != 1) {
    err << "error: " << flag << file << " holds " << documents.size()
        << " documents; dlbench run takes exactly one BenchmarkRun\n";
    return 2;
  }
  const auto decoded = decode_benchmark_run(documents[0]);
  if (!decoded.ok()) {
    err << flag << file << ": invalid, " << decoded.errors.size() << " errors\n";
    for (const auto& e : decoded.errors) err << "  " << e.to_string() << "\n";
    return 1;
  }
  return *decoded.value;
}

struct BackendChoice {
  std::string backend;
  int devices = 0;
  std::string device_name;  // the GPU's model; empty on the CPU
};

// Which backend, and how many devices: dlbench-worker knows what it was built with and sees.
// Nothing (and why, on err) when the backend asked for has no device here.
std::optional<BackendChoice> choose_backend(const RunOptions& options, const std::string& worker,
                                                          std::ostream& err) {
  std::map<std::string, DeviceKind> devices = list_devices(worker);
  if (!devices.contains("cpu")) {  // a worker that does not say (a wrapper script): the CPU backend
    devices["cpu"] = {static_cast<int>(std::max(1u, std::thread::hardware_concurrency())), ""};
  }
  const bool gpus = devices.contains("cuda") && devices.at("cuda").count > 0;
  std::string backend = options.backend;
  if (backend == "auto") backend = gpus ? "cuda" : "cpu";
  if (!devices.contains(backend) || devices.at(backend).count < 1) {
    err << "error: --backend " << backend << ": `" << worker << " --list-devices` finds "
        << (devices.contains(backend) ? "no " + backend + " device on this host" : "no such backend built in")
        << "; allowed here: cpu" << (gpus ? ", cuda" : "") << "\n";
    return std::nullopt;
  }
  return BackendChoice{backend, options.max_devices > 0 ? options.max_devices : devices.at(backend).count,
                       devices.at(backend).name};
}

// A case this host cannot run: its Skipped result, and the short reason the progress line gives.
struct Skip {
  CaseResult result;
  std::string summary;
};

std::optional<Skip> cannot_run_here(const PlannedCase& c, int host_devices) {
  if (c.spec.nodes > 1) {
    const std::string needs = "needs " + std::to_string(c.spec.nodes) + " nodes";
    return Skip{failed(c, CaseState::Skipped, "NeedsMoreNodes",
                       needs + "; the local executor runs on this host only (use the operator)", 0),
                needs};
  }
  if (c.spec.devices() > host_devices) {
    const std::string needs = "needs " + std::to_string(c.spec.devices()) + " devices";
    return Skip{failed(c, CaseState::Skipped, "NotEnoughDevices", needs + "; this host has " + std::to_string(host_devices), 0),
                needs + ", host has " + std::to_string(host_devices)};
  }
  return std::nullopt;
}

// Where the programs are and what the case runs on, for every case of the run.
struct LocalExecutor {
  const BenchmarkRun& run;
  const RunOptions& options;
  std::string worker;
  std::string exec;
  std::string backend;
  int host_devices = 0;
  std::string device_name;  // the GPUs' model; empty on the CPU
  std::string scratch;  // the cases' result files
  std::string logs;     // each attempt's output, kept
};

// What measures this run's cases, as its status records it (kMeasuredByAnnotation): --resume
// keeps results only where the same would measure them again.
std::string measured_by(const LocalExecutor& x) {
  std::string devices = devices_phrase(x.host_devices);
  if (!x.device_name.empty()) devices += " (" + x.device_name + ")";
  const std::string cpu = host_environment().cpu_model;
  return "dlbench " + std::string(version()) + ": " + x.backend + " backend, " + devices + "; CPU " +
         (cpu.empty() ? "unnamed" : cpu);
}

// --resume: the status at `path` carried into this run (resume.hpp), or the exit code that says
// why it cannot be (2 unreadable, 1 not this run's results). No file: the run starts anew.
std::variant<Resumption, int> status_to_resume(const std::string& path, const BenchmarkRun& run,
                                               const std::vector<PlannedCase>& plan, bool preflight_planned,
                                               const std::string& executor, bool retry_failed, std::ostream& out,
                                               std::ostream& err) {
  if (!std::filesystem::exists(path)) {
    out << "--resume: no status at " << path << " yet; the run starts anew\n";
    return resume_from({}, plan, preflight_planned, run.metadata.generation, rfc3339_utc_now());
  }
  const auto refuse = [&](const std::string& why) {
    err << "error: --resume: " << path << " " << why
        << "; its results are kept as they are. Run without --resume to measure anew (it replaces them), or choose "
           "another --output\n";
    return 1;
  };
  auto loaded = load_run(path, err, "--resume: ");
  if (const int* exit_code = std::get_if<int>(&loaded)) return *exit_code;
  const BenchmarkRun earlier = std::get<BenchmarkRun>(std::move(loaded));
  if (earlier.metadata.name != run.metadata.name) {
    return refuse("is the status of run \"" + printable(earlier.metadata.name) + "\", not \"" + run.metadata.name + "\"");
  }
  const auto& annotations = earlier.metadata.annotations;
  const auto recorded = annotations.find(kMeasuredByAnnotation);
  if (recorded == annotations.end()) {
    return refuse(std::string("does not say what measured its results (no ") + kMeasuredByAnnotation + " annotation)");
  }
  if (recorded->second != executor) {
    return refuse("holds results measured by \"" + printable(recorded->second) +
                  "\", and this run would measure with \"" + executor + "\"");
  }
  if (const auto differences = measurement_differences(earlier.spec, run.spec); !differences.empty()) {
    std::string fields;
    for (const auto& d : differences) {
      fields += (fields.empty() ? "" : ", ") + d.path + " " + printable(d.earlier) + " there, " + printable(d.now) + " here";
    }
    return refuse("was measured under another spec (" + fields +
                  "): only matrix, cases, limits and preflight may change between a run and its resumption");
  }
  Resumption resumed = resume_from(earlier.status.value_or(BenchmarkRunStatus{}), plan, preflight_planned,
                                   run.metadata.generation, rfc3339_utc_now(), retry_failed);
  if (!resumed.unplanned.empty()) {
    std::string ids;
    for (const auto& id : resumed.unplanned) ids += (ids.empty() ? "" : ", ") + id;
    return refuse("holds results of cases this spec no longer plans (" + ids + ")");
  }
  return resumed;
}

// How one case is started: its command line, its environment and its time limit.
struct CaseCommand {
  std::vector<std::string> argv;
  std::vector<std::string> env;
  int timeout_seconds = 0;
};

// spec.worker.env as this host can set it: the entries with a value. One that takes its value
// from a Kubernetes source (a secret, a field of the pod) has none here: run_run says so.
std::vector<std::pair<std::string, std::string>> local_worker_env(const BenchmarkRunSpec& spec) {
  std::vector<std::pair<std::string, std::string>> env;
  for (const EnvVar& v : spec.worker.env) {
    if (!v.value_from) env.emplace_back(v.name, v.value.value_or(""));  // a name alone is empty, as in a pod
  }
  return env;
}

CaseCommand case_command(const LocalExecutor& x, const PlannedCase& c, const std::string& result_file) {
  const BenchmarkRunSpec& spec = x.run.spec;
  // After dlbench's own variables, as a container's env comes after dlbench's on a cluster: the
  // user's win (putenv in the child, in this order).
  const auto user_env = local_worker_env(spec);
  const auto with_user_env = [&](CaseCommand command) {
    for (const auto& [name, value] : user_env) command.env.push_back(name + "=" + value);
    return command;
  };
  // CPU ranks share the cores; GPU ranks each drive one device and need few threads.
  const int threads = x.backend == "cpu" ? std::max(1, x.host_devices / c.spec.devices()) : 0;
  CaseCommand command{{}, {"OMP_NUM_THREADS=" + std::to_string(std::max(1, threads))}, spec.limits.case_timeout_seconds};
  if (spec.engine == Engine::command) {
    // One node: the command starts its own processes per device (torchrun --nproc-per-node).
    command.argv = {x.exec, "--output", result_file, "--timeout", std::to_string(spec.limits.case_timeout_seconds), "--"};
    command.argv.insert(command.argv.end(), spec.command.begin(), spec.command.end());
    const std::string home = std::filesystem::path(x.exec).parent_path().parent_path() / "share" / "dlbench";
    for (const auto& [name, value] : command_environment(x.run, c.spec, {0, "127.0.0.1", free_port(), home})) {
      command.env.push_back(name + "=" + value);
    }
    command.timeout_seconds += 30;  // dlbench-exec stops the command itself and reports Timeout with its last lines
    return with_user_env(std::move(command));
  }
  if (c.spec.devices() > 1) {
    command.argv = {x.options.mpirun, "-np", std::to_string(c.spec.devices()), "--bind-to", "none", "-x", "OMP_NUM_THREADS"};
    for (auto& a : mpirun_stop_arguments()) command.argv.push_back(std::move(a));
    for (const auto& [name, value] : user_env) {
      command.argv.push_back("-x");  // every rank, as every worker pod gets it
      command.argv.push_back(name);
    }
    if (geteuid() == 0) {  // Open MPI refuses root unless told
      command.env.push_back("OMPI_ALLOW_RUN_AS_ROOT=1");
      command.env.push_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
    }
  }
  WorkerInvocation how;
  how.program = x.worker;
  how.backend = x.backend;
  how.communicator = c.spec.devices() > 1 ? (x.backend == "cuda" ? "nccl" : "mpi") : "none";
  how.threads = threads;
  how.output = result_file;
  for (auto& a : worker_arguments(x.run, c.spec, how)) command.argv.push_back(std::move(a));
  return with_user_env(std::move(command));
}

// One attempt's result: the worker's document judged, or why there is none. `start`: when it began.
CaseResult judge_attempt(const LocalExecutor& x, const PlannedCase& c, const ChildOutcome& child,
                         const std::string& result_file, int attempt, const std::string& start) {
  const BenchmarkRunSpec& spec = x.run.spec;
  CaseResult result = failed(c, CaseState::Failed, "", "", attempt);
  result.start_time = start;  // a document's result brings its own
  // The worker's document, where it wrote one (judged once: a timed-out worker's too).
  const bool written = std::filesystem::exists(result_file);
  std::optional<CaseResult> judged;
  if (written) {
    std::ifstream in(result_file);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    judged = result_from_document(text, c.spec, attempt, spec.worker.rdma, optimizer_for_case(spec, c.spec));
  }
  if (child.timed_out) {
    result.reason = "Timeout";
    result.message = timeout_message(spec.limits.case_timeout_seconds);
    // Stopped at the deadline, the worker wrote the repeats it had measured: kept, unjudged.
    if (judged && judged->reason == kReasonStopped && judged->throughput) {
      judged->reason = result.reason;
      judged->message = timeout_message(spec.limits.case_timeout_seconds, judged->throughput->repeats.size());
      result = std::move(*judged);
    }
  } else if (written) {
    if (judged) {
      result = std::move(*judged);
      if (result.reason == kReasonStopped) result.message = stopped_message_with_last_lines(result.message, child.last_lines);
    } else {
      result.reason = "InvalidResult";
      result.message = result_file + " is not JSON";
    }
  } else {
    result.reason = "WorkerExited";
    result.message = "exit code " + std::to_string(child.exit_code) + " without a result: " + join_lines(child.last_lines);
  }
  return result;
}

// A measured case's line: its figure, and its speed-up as the status now has it.
void print_measured(std::ostream& out, const BenchmarkRunSpec& spec, const CaseResult& reported, const CaseResult& stored) {
  const double value = reported_value(reported.throughput->summary, spec.methodology.statistic);
  out << "  " << std::fixed << std::setprecision(2) << value << " " << reported.throughput->unit << " ("
      << to_string(spec.methodology.statistic) << " of " << reported.throughput->repeats.size() << ")";
  if (stored.speedup) {
    out << ", speed-up " << std::setprecision(2) << *stored.speedup << ", efficiency " << std::setprecision(0)
        << 100 * *stored.scaling_efficiency << "%";
  }
  if (reported.energy) {
    out << ", " << std::setprecision(4) << reported.energy->joules_per_sample << " J a sample, " << std::setprecision(0)
        << reported.energy->watts_per_device << " W a device";
  }
  if (reported.communication) {
    out << "\n  gradient reduction: " << std::setprecision(1) << 100 * reported.communication->exposed_share
        << "% of a step, bus bandwidth " << std::setprecision(2) << reported.communication->bus_bandwidth / 1e9
        << " GB/s alone";
  }
  if (reported.input) out << "\n  input: " << describe_input(*reported.input);
  out << "\n";
}

// Attempts until the machine records the case (success, a permanent failure, or no attempts left).
void run_attempts(const LocalExecutor& x, RunStateMachine& machine, RunProgress& progress, std::ostream& out) {
  const PlannedCase& c = *machine.current();
  const std::string result_file = x.scratch + "/" + c.id + ".json";
  const CaseCommand command = case_command(x, c, result_file);
  bool retry = true;
  while (retry && !interrupted) {
    const int attempt = machine.attempt();
    std::filesystem::remove(result_file);
    const std::string start = rfc3339_utc_now();
    const std::string log_file = x.logs + "/" + (c.spec.preflight ? "preflight" : c.id) + "-a" + std::to_string(attempt) + ".log";
    std::ofstream log(log_file, std::ios::binary | std::ios::trunc);
    const bool logged = static_cast<bool>(log);  // a full disk costs the log, not the case
    if (!logged) out << "  its output is not kept: cannot write " << log_file << ": " << std::strerror(errno) << "\n";
    const ChildOutcome child = run_child(
        command.argv, command.env, command.timeout_seconds,
        [&](const std::string& line) {
          if (!is_repeat_line(line)) return;
          out << "  " << line << "\n";
          if (c.spec.preflight) return;
          progress.repeat_done();
          out << "    [" << progress.line() << "]\n" << std::flush;
        },
        logged ? &log : nullptr);
    log.close();
    if (child.interrupted) break;
    CaseResult result = judge_attempt(x, c, child, result_file, attempt, start);
    const CaseResult reported = result;
    retry = machine.attempt_ended(std::move(result));
    if (reported.state != CaseState::Succeeded) {
      out << "  attempt " << attempt << "/" << 1 + x.run.spec.limits.backoff_limit << " failed: " << reported.reason
          << ": " << reported.message.substr(0, 200) << "\n";
      if (logged) out << "  its whole output: " << log_file << "\n";
    } else if (c.spec.preflight) {
      out << "  " << reported.message << "\n";
    } else {
      print_measured(out, x.run.spec, reported, machine.status().results.back());  // with its speed-up, just derived
    }
  }
}

}  // namespace

int run_run(const RunOptions& options, std::ostream& out, std::ostream& err) {
  auto loaded = load_run(options.file, err);
  if (const int* exit_code = std::get_if<int>(&loaded)) return *exit_code;
  BenchmarkRun run = std::get<BenchmarkRun>(std::move(loaded));
  const BenchmarkRunSpec& spec = run.spec;
  const std::string output = options.output.empty() ? run.metadata.name + ".status.json" : options.output;
  LocalExecutor x{run, options, options.worker.empty() ? self_directory() + "/dlbench-worker" : options.worker,
                  options.exec.empty() ? self_directory() + "/dlbench-exec" : options.exec, "", 0, "", "", ""};
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  const auto backend = choose_backend(options, x.worker, err);
  if (interrupted) {  // during the device probe: nothing ran, nothing to keep
    err << "dlbench run " << run.metadata.name << ": interrupted before the first case\n";
    return 130;
  }
  if (!backend) return 1;
  x.backend = backend->backend;
  x.host_devices = backend->devices;
  x.device_name = backend->device_name;
  const auto plan = plan_cases(spec);
  const auto preflight = plan_preflight(spec);
  const std::string executor = measured_by(x);
  auto lock = StatusFileLock::take(output);
  if (const std::string* why = std::get_if<std::string>(&lock)) {
    err << "error: " << *why << "\n";
    return 2;
  }
  // A new run goes on from an empty status: nothing kept, everything to run.
  Resumption start = resume_from({}, plan, preflight.has_value(), run.metadata.generation, rfc3339_utc_now());
  if (options.resume) {
    auto resumed = status_to_resume(output, run, plan, preflight.has_value(), executor, options.retry_failed, out, err);
    if (const int* exit_code = std::get_if<int>(&resumed)) return *exit_code;
    start = std::get<Resumption>(std::move(resumed));
    if (start.nothing_to_run()) {
      out << "dlbench run " << run.metadata.name << ": nothing left to run, every one of its " << plan.size()
          << " cases has its result in " << output << "\n";
      if (start.kept > 0) run_report({{output}, ReportFormat::table, ""}, out, err);
      return start.status.phase == Phase::Succeeded ? 0 : 1;
    }
  }
  run.metadata.annotations[kMeasuredByAnnotation] = executor;
  x.logs = options.logs.empty() ? logs_beside(output) : options.logs;
  if (std::error_code ec; !std::filesystem::create_directories(x.logs, ec) && ec) {
    err << "error: cannot make " << x.logs << " for the cases' logs: " << ec.message() << "\n";
    return 2;
  }
  x.scratch = (std::filesystem::temp_directory_path() / ("dlbench-run-" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(x.scratch);

  // The one status machine the operator drives too (core/run_state): same events, same status.
  RunStateMachine machine(std::move(start.status), plan, spec.methodology, run.metadata.generation,
                          1 + spec.limits.backoff_limit, rfc3339_utc_now(), preflight);
  machine.admit(describe_optimizer(spec));
  const auto save = [&] {
    run.status = machine.status();
    write_status_file(output, run);
  };
  out << "dlbench run " << run.metadata.name << ": " << to_string(spec.model) << " ("
      << describe_optimizer(spec) << "), " << plan.size()
      << " cases on this host (" << x.backend << " backend, " << devices_phrase(x.host_devices)
      << (spec.engine == Engine::command ? ", engine command: " + printable(spec.command.front()) : std::string())
      << (spec.cuda_graph ? ", steps as CUDA graphs" : "") << "), status in " << output << ", logs in " << x.logs << "/\n";
  for (std::size_t i = 0; i < spec.worker.env.size(); ++i) {
    if (spec.worker.env[i].value_from) {
      out << "note: spec.worker.env[" << i << "] (" << spec.worker.env[i].name
          << ") takes its value from a Kubernetes source (valueFrom), which this host does not have: left unset\n";
    }
  }
  if (options.resume && (start.kept > 0 || start.retried > 0)) {
    out << "resuming from " << output << ": " << start.kept << " of " << plan.size() << " cases have their result, "
        << start.to_run << " to run" << (start.retried > 0 ? " (" + std::to_string(start.retried) + " that failed, again)" : "")
        << (start.preflight_to_run ? " after the preflight" : "") << "\n";
  }

  try {
    RunProgress progress(start.to_run, spec.methodology.repeats);
    while (machine.current() != nullptr && !interrupted) {
      const PlannedCase& c = *machine.current();
      save();
      if (c.spec.preflight) {
        out << "[preflight] self-test of " << devices_phrase(c.spec.devices()) << ": ";
      } else {
        const auto position = std::find_if(plan.begin(), plan.end(), [&](const PlannedCase& p) { return p.id == c.id; });
        out << "[" << 1 + (position - plan.begin()) << "/" << plan.size() << "] " << c.id << ": ";
      }
      if (auto skip = cannot_run_here(c, x.host_devices)) {
        out << "skipped (" << skip->summary << ")\n";
        machine.skip(std::move(skip->result));
        progress.case_ended();
        continue;
      }
      out << c.spec.devices() << (c.spec.devices() == 1 ? " rank" : " ranks") << "\n" << std::flush;
      if (!c.spec.preflight) progress.case_started(c.id);
      run_attempts(x, machine, progress, out);
      if (interrupted) break;
      if (!c.spec.preflight) progress.case_ended();
      save();
    }

    std::filesystem::remove_all(x.scratch);
    if (interrupted) machine.interrupt();
    save();
  } catch (const StatusNotWritten& e) {
    std::error_code ec;
    std::filesystem::remove_all(x.scratch, ec);
    // Ended here, as Ctrl-C ends it, so that the status kept elsewhere says why; --resume goes on.
    machine.interrupt("StatusNotWritten", "stopped when its status could not be written");
    run.status = machine.status();
    return keep_unwritten_status(run, options, output, e.what(), out, err);
  }
  const BenchmarkRunStatus& status = machine.status();
  out << run.metadata.name << ": " << to_string(status.phase) << " (" << status.progress.summary << " cases"
      << (interrupted ? ", interrupted" : "") << "); status written to " << output << "\n";
  const bool any_succeeded = std::any_of(status.results.begin(), status.results.end(),
                                         [](const CaseResult& r) { return r.state == CaseState::Succeeded; });
  if (any_succeeded) run_report({{output}, ReportFormat::table, ""}, out, err);
  if (interrupted) return 130;
  return status.phase == Phase::Succeeded ? 0 : 1;
}

}  // namespace dlbench::cli
