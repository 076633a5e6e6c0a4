// `dlbench launch -- mpirun …`: the launcher Job's entry point.
#include "launch_command.hpp"

#include <sys/select.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstring>
#include <deque>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "dlbench/core/result_document.hpp"
#include "dlbench/core/status.hpp"
#include "stop_escalation.hpp"

namespace dlbench::cli {

namespace {

// The rank a Stopped document's message names ("rank 3: stopped by ..."); rank 0's names none.
int stopped_documents_rank(const nlohmann::json& document) {
  const std::string message = document.value("message", "");
  constexpr std::string_view kPrefix = "rank ";
  if (!message.starts_with(kPrefix)) return 0;
  int rank = 0;
  const char* end = message.data() + message.size();
  const auto [after, error] = std::from_chars(message.data() + kPrefix.size(), end, rank);
  return error == std::errc{} && after != end && *after == ':' ? rank : 0;
}

// The job's stdout holds one document, or more where the job was cut short: that of a rank whose
// failure the others never learnt of (dlbench-worker writes it, then aborts the job), and the
// Stopped ones (the repeats measured, kept) of rank 0 and of its deputy, which mpirun stops
// then. The failing rank's says why, and is the case's; of the Stopped ones, rank 0's, and its
// deputy's where rank 0 was ended outright (SIGKILL, its node lost). Throws where the text is not
// a sequence of JSON values.
nlohmann::json the_cases_document(const std::string& stdout_text) {
  std::istringstream in(stdout_text);
  std::vector<nlohmann::json> documents;
  while ((in >> std::ws).peek() != std::char_traits<char>::eof()) {
    nlohmann::json document;
    in >> document;
    documents.push_back(std::move(document));
  }
  if (documents.empty()) throw std::runtime_error("nothing on stdout");
  for (const auto& document : documents) {
    if (!document.is_object() || document.value("reason", "") != kReasonStopped) return document;
  }
  return *std::min_element(documents.begin(), documents.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return stopped_documents_rank(a) < stopped_documents_rank(b);
  });
}

// A stop signal's number, set by its handler: the loop below passes it on.
volatile std::sig_atomic_t stop_signal = 0;
extern "C" void on_stop_signal(int signal_number) { stop_signal = signal_number; }

// SIGTERM and SIGINT caught (not ignored, as PID 1 would without a handler) while the command
// runs; without SA_RESTART, so that select returns at once. The command, exec'd, starts with the
// default actions again.
class StopSignals {
 public:
  StopSignals() {
    struct sigaction action {};
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGTERM, &action, &old_term_);
    sigaction(SIGINT, &action, &old_int_);
  }
  ~StopSignals() {
    sigaction(SIGTERM, &old_term_, nullptr);
    sigaction(SIGINT, &old_int_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_term_ {};
  struct sigaction old_int_ {};
};

std::size_t repeats_in(const nlohmann::json& document) {
  const auto throughput = document.find("throughput");
  if (throughput == document.end() || !throughput->is_object()) return 0;
  const auto repeats = throughput->find("repeats");
  return repeats != throughput->end() && repeats->is_array() ? repeats->size() : 0;
}

}  // namespace

int run_launch(const LaunchOptions& options, std::ostream& out, std::ostream& err) {
  if (options.command.empty()) {
    err << "error: launch needs a command after --\n";
    return 2;
  }
  const long case_timeout_seconds =
      options.case_timeout_seconds > 0 ? options.case_timeout_seconds : options.stop_after_seconds;
  stop_signal = 0;
  const StopSignals taken;  // before the fork: a stop that comes while the command starts is passed on too
  int out_pipe[2], err_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) throw std::runtime_error(std::strerror(errno));
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    for (const int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) close(fd);
    std::vector<char*> argv;
    for (const auto& a : options.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "cannot start %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  // stdout is small (one JSON document); stderr is passed through as it comes, last lines kept.
  std::string stdout_text, partial;
  std::deque<std::string> last_lines;
  char buffer[4096];
  bool out_open = true, err_open = true;
  // A stop (a signal, or the case's deadline) goes to the command alone, never its process group:
  // mpirun stops its ranks itself, through the ssh connections a group signal would cut first.
  const auto started = std::chrono::steady_clock::now();
  StopEscalation stopper([pid](int signal) { kill(pid, signal); }, std::chrono::seconds(kLaunchStopGraceSeconds));
  bool deadline_reached = false, reaped = false;
  std::chrono::steady_clock::time_point reaped_at;
  int status = 0;
  const auto stop = [&](const std::string& why, std::chrono::steady_clock::time_point now) {
    err << "dlbench launch: " << why << ": stopping the command (SIGUSR1; SIGKILL " << kLaunchStopGraceSeconds
        << " s later)\n";
    // SIGUSR1, not SIGTERM: mpirun passes it on to every rank and goes on relaying their output,
    // where a SIGTERM makes it tear the job down and can drop the document rank 0 then writes.
    stopper.stop(SIGUSR1, now);
  };
  while (out_open || err_open) {
    const auto now = std::chrono::steady_clock::now();
    if (!stopper.stopped() && stop_signal != 0) stop(stop_signal == SIGINT ? "SIGINT" : "SIGTERM", now);
    if (!stopper.stopped() && options.stop_after_seconds > 0 &&
        now - started >= std::chrono::seconds(options.stop_after_seconds)) {
      deadline_reached = true;
      stop("the case's deadline, " + std::to_string(options.stop_after_seconds) + " s", now);
    }
    if (!stopper.stopped() && options.stop_at && std::chrono::system_clock::now() >= *options.stop_at) {
      deadline_reached = true;
      stop("the case's deadline, " + rfc3339_utc(*options.stop_at), now);
    }
    stopper.kill_when_due(now);
    // Killed, the command may leave children holding its pipes open (mpirun's ssh): its own end
    // is the end, once what it wrote before is read.
    if (stopper.killed() && !reaped && waitpid(pid, &status, WNOHANG) == pid) {
      reaped = true;
      reaped_at = now;
    }
    if (reaped && now - reaped_at > std::chrono::seconds(2)) break;  // its orphans still writing
    fd_set fds;
    FD_ZERO(&fds);
    if (out_open) FD_SET(out_pipe[0], &fds);
    if (err_open) FD_SET(err_pipe[0], &fds);
    timeval tick{0, reaped ? 0 : 200'000};
    const int ready = select(std::max(out_pipe[0], err_pipe[0]) + 1, &fds, nullptr, nullptr, &tick);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0 || (reaped && ready == 0)) break;
    if (out_open && FD_ISSET(out_pipe[0], &fds)) {
      const ssize_t n = read(out_pipe[0], buffer, sizeof buffer);
      if (n <= 0) out_open = false; else stdout_text.append(buffer, static_cast<std::size_t>(n));
    }
    if (err_open && FD_ISSET(err_pipe[0], &fds)) {
      const ssize_t n = read(err_pipe[0], buffer, sizeof buffer);
      if (n <= 0) {
        err_open = false;
      } else {
        err.write(buffer, n);
        partial.append(buffer, static_cast<std::size_t>(n));
        for (std::size_t nl; (nl = partial.find('\n')) != std::string::npos; partial.erase(0, nl + 1)) {
          last_lines.push_back(partial.substr(0, nl));
          if (last_lines.size() > 20) last_lines.pop_front();
        }
      }
    }
  }
  err.flush();
  if (!reaped) waitpid(pid, &status, 0);
  const int exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);

  std::string message;
  bool valid = false;
  try {
    const nlohmann::json document = the_cases_document(stdout_text);
    // A case's result, or the preflight's self-test (`dlbench-worker --self-test`).
    const bool self_test = document.is_object() && document.contains("schema") && document["schema"] == kSelfTestSchema;
    const auto errors =
        self_test ? decode_self_test_document(document).errors : decode_result_document(document).errors;
    if (errors.empty()) {
      std::string text = document.dump();
      if (!self_test && deadline_reached && document.value("reason", "") == kReasonStopped) {
        // Stopped at the case's deadline: a Timeout, as the operator and dlbench run call it, that
        // keeps the repeats rank 0 measured.
        auto timed_out = document;
        timed_out["reason"] = "Timeout";
        timed_out["message"] = timeout_message(case_timeout_seconds, repeats_in(document));
        text = timed_out.dump();
      } else if (!self_test && document.value("reason", "") == kReasonStopped) {
        // Why rank 0 was stopped is in the job's last lines (mpirun names the rank that ended).
        auto stopped = document;
        stopped["message"] = stopped_message_with_last_lines(document.value("message", ""), last_lines);
        text = stopped.dump();
      }
      message = self_test ? compact_self_test_document(text, kTerminationMessageLimit)
                          : compact_result_document(text, kTerminationMessageLimit);
      valid = true;
    } else {
      message = (self_test ? "invalid self-test document: " : "invalid result: ") + errors.front().to_string();
    }
  } catch (const std::exception& e) {
    // At the deadline, the words the operator knows a Timeout by (is_timeout_message).
    message = (deadline_reached ? timeout_message(case_timeout_seconds) + "; " : std::string()) +
              "no result document (exit code " + std::to_string(exit_code) + "): ";
    for (const auto& l : last_lines) message += l + "\n";
    if (message.size() > kTerminationMessageLimit) message = message.substr(message.size() - kTerminationMessageLimit);
  }
  std::ofstream log(options.termination_log);
  log << message;
  if (valid) out << message << "\n";
  if (!valid && exit_code == 0) return 1;
  return exit_code;
}

}  // namespace dlbench::cli
