#include "command/command_runner.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>

#include "command/markers.hpp"
#include "dlbench/core/api_rules.hpp"
#include "dlbench/core/names.hpp"
#include "dlbench/core/nccl_log.hpp"
#include "dlbench/core/statistics.hpp"
#include "dlbench/core/status.hpp"

namespace dlbench::command {
namespace {

using clock = std::chrono::steady_clock;

std::atomic<pid_t> running_group{0};
std::atomic<bool> stop_requested{false};

void forward_signal(int signal_number) {
  stop_requested = true;
  const pid_t group = running_group.load();
  if (group > 0) kill(-group, signal_number);
}

// An integer variable within bounds, or an error naming it.
bool read_int(const std::function<const char*(const char*)>& lookup, const char* name, IntBounds bounds, int& out,
              std::string& error) {
  const char* text = lookup(name);
  if (text == nullptr) {
    error = std::string(name) + " is not set; dlbench sets it for every node of a case (run the command through "
                                "`dlbench run` or the operator, or set it by hand)";
    return false;
  }
  const auto parsed = whole_number(text, bounds);
  if (!parsed) {
    error = std::string(name) + "=\"" + printable(std::string(text).substr(0, 64)) + "\": must be a whole number in [" +
            std::to_string(bounds.min) + ", " + std::to_string(bounds.max) + "]";
    return false;
  }
  out = static_cast<int>(*parsed);
  return true;
}

template <typename E>
bool read_enum(const std::function<const char*(const char*)>& lookup, const char* name, E& out, std::string& error) {
  const char* text = lookup(name);
  if (text == nullptr) {
    error = std::string(name) + " is not set; allowed: " + allowed_values<E>();
    return false;
  }
  const auto parsed = enum_from_string<E>(text);
  if (!parsed) {
    error = std::string(name) + "=\"" + printable(std::string(text).substr(0, 64)) + "\": allowed: " + allowed_values<E>();
    return false;
  }
  out = *parsed;
  return true;
}

// The kernel's count of OOM kills in this process's memory cgroup (v2, or v1's oom_control),
// or -1 where it cannot be read.
long oom_kill_count() {
  std::string group;
  std::ifstream self("/proc/self/cgroup");
  for (std::string line; std::getline(self, line);) {
    if (line.starts_with("0::")) group = line.substr(3);
  }
  std::vector<std::string> candidates;
  if (!group.empty()) candidates.push_back("/sys/fs/cgroup" + group + "/memory.events");
  candidates.push_back("/sys/fs/cgroup/memory.events");
  candidates.push_back("/sys/fs/cgroup/memory/memory.oom_control");
  for (const auto& path : candidates) {
    std::ifstream in(path);
    for (std::string key; in >> key;) {
      long value = 0;
      if (!(in >> value)) break;
      if (key == "oom_kill") return value;
    }
  }
  return -1;
}

std::string cut(std::string_view line) {
  if (line.size() <= kTailLineChars) return std::string(line);
  return std::string(line.substr(0, kTailLineChars)) + "…";
}

void write_all(int fd, const char* data, std::size_t size) {
  while (fd >= 0 && size > 0) {
    const ssize_t n = write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nobody reads our output any more: the measurement goes on regardless
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

std::string last_lines(const CommandOutcome& o) {
  if (o.tail.empty()) return "(no output)";
  std::string out;
  for (const auto& l : o.tail) out += (out.empty() ? "" : "\n") + l;
  return out;
}

void apply_fact(EnvironmentInfo& e, const std::string& key, const std::string& value) {
  const auto count = [&](int& out) {
    if (const auto parsed = whole_number(value, {1, std::numeric_limits<int>::max()})) out = static_cast<int>(*parsed);
  };
  if (key == "framework") e.framework = value;
  else if (key == "frameworkVersion") e.framework_version = value;
  else if (key == "backend") e.backend = value;
  else if (key == "communicator") e.communicator = value;
  else if (key == "gpuModel") e.gpu_model = value;
  else if (key == "gpuCount") count(e.gpu_count);
  else if (key == "driverVersion") e.driver_version = value;
  else if (key == "cudaVersion") e.cuda_version = value;
  else if (key == "cudnnVersion") e.cudnn_version = value;
  else if (key == "ncclVersion") e.nccl_version = value;
  else if (key == "mpiVersion") e.mpi_version = value;
  else if (key == "onednnVersion") e.onednn_version = value;
  else e.facts[key] = value;
}

// The facts that say how the command trained (all four or none), and the one it may add: a
// warm-up it does not state is none.
constexpr std::array<const char*, 4> kOptimizerFacts{"optimizer", "learningRate", "momentum", "weightDecay"};
constexpr const char* kWarmupFact = "learningRateWarmupSteps";

// How the command says it trained, taken out of `facts`: nullopt where it says nothing; an error
// naming the fact where it says part of it, or something the spec could not have asked for.
std::optional<OptimizerSpec> optimizer_from_facts(std::map<std::string, std::string>& facts, std::string& error) {
  const auto given = std::count_if(kOptimizerFacts.begin(), kOptimizerFacts.end(),
                                   [&](const char* key) { return facts.contains(key); });
  if (given == 0 && !facts.contains(kWarmupFact)) return std::nullopt;
  OptimizerSpec optimizer;
  const auto fail = [&](const std::string& why) {
    error = why + " (a command states how it trained with all four facts: optimizer, learningRate, momentum, "
                  "weightDecay; and learningRateWarmupSteps where it warms the rate up)";
    return std::nullopt;
  };
  for (const char* key : kOptimizerFacts) {
    if (!facts.contains(key)) return fail("fact " + std::string(key) + " is missing");
  }
  const std::string name = facts.at("optimizer");
  if (const auto parsed = enum_from_string<OptimizerName>(name)) {
    optimizer.name = *parsed;
  } else {
    return fail("fact optimizer: \"" + printable(name.substr(0, 64)) + "\" is not one of " +
                allowed_values<OptimizerName>());
  }
  const std::array<std::pair<const char*, std::pair<RealBounds, double*>>, 3> numbers{
      {{"learningRate", {bounds::kLearningRate, &optimizer.learning_rate}},
       {"momentum", {bounds::kMomentum, &optimizer.momentum}},
       {"weightDecay", {bounds::kWeightDecay, &optimizer.weight_decay}}}};
  for (const auto& [key, where] : numbers) {
    const std::string& text = facts.at(key);
    const auto value = real_number(text, where.first);
    if (!value) {
      return fail("fact " + std::string(key) + ": \"" + printable(text.substr(0, 64)) + "\" is not a number " +
                  where.first.describe());
    }
    *where.second = *value;
  }
  if (const auto warmup = facts.find(kWarmupFact); warmup != facts.end()) {
    const auto steps = whole_number(warmup->second, bounds::kLearningRateWarmupSteps);
    if (!steps) {
      return fail("fact " + std::string(kWarmupFact) + ": \"" + printable(warmup->second.substr(0, 64)) +
                  "\" is not a whole number in [" + std::to_string(bounds::kLearningRateWarmupSteps.min) + ", " +
                  std::to_string(bounds::kLearningRateWarmupSteps.max) + "]");
    }
    optimizer.learning_rate_warmup_steps = *steps;
    facts.erase(warmup);
  }
  for (const char* key : kOptimizerFacts) facts.erase(key);
  return optimizer;
}

// What the command says it trained in the API's spelling (`@dlbench fact model <name>`, `@dlbench
// fact precision <name>`), taken out of `facts`: nullopt where it says nothing; an error naming
// the allowed spellings where the name is none of the API's.
template <typename E>
std::optional<E> spelled_fact(std::map<std::string, std::string>& facts, const std::string& key, std::string& error) {
  const auto stated = facts.find(key);
  if (stated == facts.end()) return std::nullopt;
  const auto value = enum_from_string<E>(stated->second);
  if (!value) {
    error = "fact " + key + ": \"" + printable(stated->second.substr(0, 64)) + "\" is not one of " + allowed_values<E>() +
            " (spec's spellings)";
    return std::nullopt;
  }
  facts.erase(stated);
  return value;
}

// A count the command states (`@dlbench fact <key> <n>`: the network's parameters, a sequence's
// tokens), taken out of `facts`: nullopt where it says nothing; an error naming `what` it counts
// where it is not a whole number of at least 1.
std::optional<std::int64_t> count_from_facts(std::map<std::string, std::string>& facts, const std::string& key,
                                             const std::string& what, std::string& error) {
  const auto stated = facts.find(key);
  if (stated == facts.end()) return std::nullopt;
  const auto count = whole_number(stated->second, {1, std::numeric_limits<std::int64_t>::max()});
  if (!count) {
    error = "fact " + key + ": \"" + printable(stated->second.substr(0, 64)) + "\" is not a whole number of at least 1 (" +
            what + ")";
    return std::nullopt;
  }
  facts.erase(stated);
  return count;
}

// The input the command says its steps took (`@dlbench fact imageSize 224`, or `512x1024` as
// DLBENCH_IMAGE_SIZE spells height x width), taken out of `facts` as (height, width): nullopt
// where it says nothing; an error where it is neither form.
std::optional<std::pair<std::int64_t, std::int64_t>> image_size_from_facts(std::map<std::string, std::string>& facts,
                                                                           std::string& error) {
  const auto stated = facts.find("imageSize");
  if (stated == facts.end()) return std::nullopt;
  const std::string& text = stated->second;
  const auto cross = text.find('x');
  const IntBounds side{1, 1 << 20};
  const auto height = whole_number(std::string_view(text).substr(0, cross), side);
  const auto width = cross == std::string::npos ? height : whole_number(std::string_view(text).substr(cross + 1), side);
  if (!height || !width) {
    error = "fact imageSize: \"" + printable(text.substr(0, 64)) +
            "\" is neither a whole number (a square side) nor HEIGHTxWIDTH, as DLBENCH_IMAGE_SIZE spells it";
    return std::nullopt;
  }
  facts.erase(stated);
  return std::pair{*height, *width};
}

// Why the input the command says its steps took is not the case's, or empty where it is (or the
// command says nothing of it): images of another size, sequences of another length, or one
// where the case's model takes the other.
std::string input_mismatch(const CommandCase& c, std::optional<std::pair<std::int64_t, std::int64_t>> image_size,
                           std::optional<std::int64_t> sequence_length) {
  const std::string model(to_string(c.model));
  const auto sides = [](std::pair<std::int64_t, std::int64_t> s) {
    return std::to_string(s.first) + "x" + std::to_string(s.second);
  };
  if (is_sequence_model(c.model)) {
    if (image_size) {
      return "the command says its steps took " + sides(*image_size) + " images (its fact imageSize); " + model +
             " trains on sequences of " + std::to_string(c.sequence_length) + " tokens (DLBENCH_SEQUENCE_LENGTH)";
    }
    if (sequence_length && *sequence_length != c.sequence_length) {
      return "the command says its steps took sequences of " + std::to_string(*sequence_length) +
             " tokens instead of " + std::to_string(c.sequence_length) +
             " (its fact sequenceLength; the case's is in DLBENCH_SEQUENCE_LENGTH)";
    }
    return {};
  }
  const std::pair<std::int64_t, std::int64_t> asked{c.image_height > 0 ? c.image_height : c.image_size,
                                                    c.image_width > 0 ? c.image_width : c.image_size};
  if (sequence_length) {
    return "the command says its steps took sequences of " + std::to_string(*sequence_length) +
           " tokens (its fact sequenceLength); " + model + " trains on " + sides(asked) +
           " images (DLBENCH_IMAGE_SIZE)";
  }
  if (image_size && *image_size != asked) {
    return "the command says its steps took " + sides(*image_size) + " inputs instead of " + sides(asked) +
           " (its fact imageSize; the case's is in DLBENCH_IMAGE_SIZE)";
  }
  return {};
}

// The loss after each repeat from the command's `@dlbench loss` lines: the last one reported
// after one of the repeat's steps. Empty where the command reports none; an error where it
// reports some repeats' and not others'.
std::vector<double> losses_after_repeats(const std::vector<std::pair<long, double>>& reported,
                                         const Methodology& methodology, std::string& error) {
  if (reported.empty()) return {};
  const long per_repeat = methodology.warmup_steps + methodology.measure_steps;
  std::vector<std::optional<double>> after(static_cast<std::size_t>(methodology.repeats));
  for (const auto& [steps_before, loss] : reported) {
    if (steps_before < 1) continue;  // before the first step: no repeat's
    const long repeat = (steps_before - 1) / per_repeat;
    if (repeat < methodology.repeats) after[static_cast<std::size_t>(repeat)] = loss;
  }
  std::vector<double> losses;
  std::string missing;
  for (std::size_t r = 0; r < after.size(); ++r) {
    if (after[r]) {
      losses.push_back(*after[r]);
    } else {
      missing += (missing.empty() ? "" : ", ") + std::to_string(r + 1);
    }
  }
  if (!missing.empty()) {
    error = "loss: reported in some repeats but not in repeat " + missing + " of " +
            std::to_string(methodology.repeats) + " (a command that reports the loss reports it after the last step "
            "of every repeat, or after every step)";
    return {};
  }
  return losses;
}

}  // namespace

std::optional<CommandCase> case_from_environment(const std::function<const char*(const char*)>& lookup,
                                                 std::string& error) {
  CommandCase c;
  if (const char* run = lookup("DLBENCH_RUN")) {
    c.run = run;
    if (!c.run.empty() && !is_dns1123_label(c.run)) {
      error = "DLBENCH_RUN=\"" + printable(c.run.substr(0, 64)) + "\": must be a BenchmarkRun name (a DNS-1123 label)";
      return std::nullopt;
    }
  }
  int nodes = 0, gpus = 0, batch = 0, warmup = 0, measure = 0, repeats = 0, node_rank = 0, image_size = 0;
  int image_height = 0, image_width = 0;
  // DLBENCH_IMAGE_HEIGHT and _WIDTH when given (a non-square input has "HxW" in DLBENCH_IMAGE_SIZE).
  const bool sides = lookup("DLBENCH_IMAGE_HEIGHT") != nullptr;
  if (!read_enum(lookup, "DLBENCH_MODEL", c.model, error) ||
      (sides ? !read_int(lookup, "DLBENCH_IMAGE_HEIGHT", bounds::kImageSize, image_height, error) ||
                   !read_int(lookup, "DLBENCH_IMAGE_WIDTH", bounds::kImageSize, image_width, error)
             : !read_int(lookup, "DLBENCH_IMAGE_SIZE", bounds::kImageSize, image_size, error)) ||
      !read_int(lookup, "DLBENCH_NODES", bounds::kNodes, nodes, error) ||
      !read_int(lookup, "DLBENCH_GPUS_PER_NODE", bounds::kGpusPerNode, gpus, error) ||
      !read_int(lookup, "DLBENCH_BATCH_SIZE", bounds::kBatchSizePerDevice, batch, error) ||
      !read_enum(lookup, "DLBENCH_PRECISION", c.case_.precision, error) ||
      !read_int(lookup, "DLBENCH_WARMUP_STEPS", bounds::kWarmupSteps, warmup, error) ||
      !read_int(lookup, "DLBENCH_MEASURE_STEPS", bounds::kMeasureSteps, measure, error) ||
      !read_int(lookup, "DLBENCH_REPEATS", bounds::kRepeats, repeats, error) ||
      !read_int(lookup, "DLBENCH_NODE_RANK", {0, bounds::kNodes.max - 1}, node_rank, error)) {
    return std::nullopt;
  }
  if (is_sequence_model(c.model) &&
      !read_int(lookup, "DLBENCH_SEQUENCE_LENGTH", bounds::kSequenceLength, c.sequence_length, error)) {
    return std::nullopt;
  }
  if (node_rank >= nodes) {
    error = "DLBENCH_NODE_RANK=" + std::to_string(node_rank) + ": must be below DLBENCH_NODES (" +
            std::to_string(nodes) + ")";
    return std::nullopt;
  }
  c.image_size = sides ? image_height : image_size;
  c.image_height = image_height;
  c.image_width = image_width;
  c.case_.nodes = nodes;
  c.case_.gpus_per_node = gpus;
  c.case_.batch_size_per_device = batch;
  c.methodology.warmup_steps = warmup;
  c.methodology.measure_steps = measure;
  c.methodology.repeats = repeats;
  c.node_rank = node_rank;
  if (lookup("DLBENCH_STATISTIC") != nullptr && !read_enum(lookup, "DLBENCH_STATISTIC", c.methodology.statistic, error)) {
    return std::nullopt;
  }
  if (const char* text = lookup("DLBENCH_MAX_CV")) {
    const std::string_view view(text);
    const auto bound = real_number(view, bounds::kMaxCv);
    if (!bound) {
      error = "DLBENCH_MAX_CV=\"" + printable(std::string(view.substr(0, 64))) + "\": must be a number in (0, 1]";
      return std::nullopt;
    }
    c.methodology.stability.max_cv = *bound;
  }
  for (const char* name : {"NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"}) {
    const char* devices = lookup(name);
    if (devices != nullptr && *devices != '\0' && std::string_view(devices) != "void" && std::string_view(devices) != "none" &&
        std::string_view(devices) != "-1") {
      c.gpu = true;
    }
  }
  return c;
}

void install_signal_forwarding() {
  struct sigaction action {};
  action.sa_handler = forward_signal;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a closed passthrough must not end the measurement
}

namespace {

// Starts argv in its own process group (so that a stop reaches everything it starts), stdout and
// stderr into `output_fd`, stdin from /dev/null. In the child, a failed exec says why and exits 127.
pid_t start_in_own_group(const std::vector<std::string>& argv, int output_fd) {
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid > 0) {
    setpgid(pid, pid);
    return pid;
  }
  setpgid(0, 0);
  dup2(output_fd, STDOUT_FILENO);
  dup2(output_fd, STDERR_FILENO);
  const int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0) dup2(devnull, STDIN_FILENO);
  signal(SIGPIPE, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  const std::string why = "dlbench-exec: cannot start " + argv[0] + ": " + std::strerror(errno) + "\n";
  write_all(STDERR_FILENO, why.data(), why.size());
  _exit(127);
}

// The command's output, line by line as it arrives: its step, fact and unsupported markers, the
// NCCL lines that say which network it used, and its last lines for a failure's message. Lines
// longer than kMaxLineBytes are cut, counted, and never read as markers.
class OutputReader {
 public:
  OutputReader(CommandOutcome& outcome, const RunSettings& settings, clock::time_point start)
      : outcome_(outcome), settings_(settings), start_(start) {}

  // A chunk read at `now`: every line it ends is read with that arrival time.
  void chunk(std::string_view chunk, clock::time_point now) {
    std::size_t begin = 0;
    for (std::size_t nl; (nl = chunk.find('\n', begin)) != std::string_view::npos; begin = nl + 1) {
      const std::string_view piece = chunk.substr(begin, nl - begin);
      if (cutting_) {
        cutting_ = false;  // the end of an overlong line, already counted
      } else if (partial_.empty()) {
        line(piece, now);
      } else {
        partial_.append(piece);
        line(partial_, now);
      }
      partial_.clear();
    }
    if (cutting_) return;
    partial_.append(chunk.substr(begin));
    if (partial_.size() > kMaxLineBytes) {
      ++outcome_.cut_lines;
      partial_.resize(kTailLineChars);
      line(partial_, now);  // as far as it went; never a marker at this length
      partial_.clear();
      cutting_ = true;
    }
  }

  // The output ended: a last line without a newline is still a line.
  void end(clock::time_point now) {
    if (!partial_.empty() && !cutting_) line(partial_, now);
    partial_.clear();
  }

  std::optional<NcclTransport> transport() const { return nccl_.transport(); }

 private:
  void line(std::string_view line, clock::time_point arrived) {
    ++outcome_.output_lines;
    const Marker marker = parse_marker(line);
    switch (marker.kind) {
      case Marker::Kind::step: {
        const double seconds = std::chrono::duration<double>(arrived - start_).count();
        outcome_.steps.push_back({seconds, marker.samples});
        if (settings_.on_step) settings_.on_step(static_cast<long>(outcome_.steps.size()) - 1, seconds);
        return;  // markers are not output worth keeping for failure messages
      }
      case Marker::Kind::fact:
        if (outcome_.facts.size() < kMaxFacts || outcome_.facts.contains(marker.key)) {
          outcome_.facts[marker.key] = marker.value;
        }
        return;
      case Marker::Kind::unsupported:
        if (outcome_.unsupported.empty()) outcome_.unsupported = marker.value;
        return;
      case Marker::Kind::loss: {
        const long after = static_cast<long>(outcome_.steps.size());
        if (!outcome_.losses.empty() && outcome_.losses.back().first == after) {
          outcome_.losses.back().second = marker.loss;
        } else {
          outcome_.losses.emplace_back(after, marker.loss);
        }
        if (settings_.on_loss) settings_.on_loss(after, marker.loss);
        return;
      }
      case Marker::Kind::invalid:
        if (outcome_.invalid_marker.empty()) outcome_.invalid_marker = marker.error + " (line: \"" + cut(line) + "\")";
        break;
      case Marker::Kind::none:
        nccl_.line(line);
        break;
    }
    outcome_.tail.push_back(cut(line));
    if (outcome_.tail.size() > kTailLines) outcome_.tail.pop_front();
  }

  CommandOutcome& outcome_;
  const RunSettings& settings_;
  const clock::time_point start_;
  std::string partial_;  // the line being read, at most kMaxLineBytes
  bool cutting_ = false;  // inside a line longer than kMaxLineBytes: dropping until its end
  NcclLogReader nccl_;
};

// Ends the command's group when a stop comes or the deadline passes: SIGTERM, then SIGKILL once
// the grace is over.
class Stopper {
 public:
  Stopper(pid_t group, const RunSettings& settings, clock::time_point deadline)
      : group_(group), settings_(settings), deadline_(deadline) {}

  // While the command runs and its output is open.
  void check(CommandOutcome& outcome, clock::time_point now) {
    if (stop_requested && !outcome.interrupted) {
      outcome.interrupted = true;
      terminate(now);
    }
    if (!outcome.timed_out && now > deadline_) {
      outcome.timed_out = true;
      terminate(now);
    }
    if (now > kill_at_) {
      kill(-group_, SIGKILL);
      kill_at_ = clock::time_point::max();
    }
  }

  // Once the command closed its output but still runs: the deadline and signals still apply.
  void check_after_output(CommandOutcome& outcome, clock::time_point now) {
    if ((stop_requested || now > deadline_) && kill_at_ == clock::time_point::max()) {
      outcome.timed_out = outcome.timed_out || now > deadline_;
      outcome.interrupted = outcome.interrupted || stop_requested;
      terminate(now);
    }
    if (now > kill_at_) kill(-group_, SIGKILL);
  }

 private:
  void terminate(clock::time_point now) {
    kill(-group_, SIGTERM);
    kill_at_ = now + settings_.kill_grace;
  }

  const pid_t group_;
  const RunSettings& settings_;
  const clock::time_point deadline_;
  clock::time_point kill_at_ = clock::time_point::max();  // when SIGKILL follows SIGTERM
};

// The exit status as the outcome says it: the code (128 + signal for a signal), whether a stop
// came first, whether the command ever started, whether the kernel killed something for memory.
void record_exit(CommandOutcome& outcome, int status, bool stopped_before_exit, long oom_before) {
  // A command that finished cleanly keeps its result even if a stop came as it ended.
  const bool clean_exit = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (stopped_before_exit && !clean_exit) outcome.interrupted = true;
  if (WIFEXITED(status)) {
    outcome.exit_code = WEXITSTATUS(status);
  } else {
    outcome.signal = WTERMSIG(status);
    outcome.exit_code = 128 + outcome.signal;
  }
  if (outcome.exit_code == 127 && outcome.steps.empty() && outcome.output_lines <= 1) outcome.started = false;
  const long oom_after = oom_kill_count();
  outcome.out_of_memory = oom_before >= 0 && oom_after > oom_before;
}

}  // namespace

CommandOutcome run_command(const RunSettings& settings) {
  CommandOutcome outcome;
  if (settings.argv.empty()) throw std::invalid_argument("run_command: no command");
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  const long oom_before = oom_kill_count();
  const auto start = clock::now();
  const pid_t pid = start_in_own_group(settings.argv, pipe_fds[1]);
  running_group = pid;
  close(pipe_fds[1]);
  outcome.started = true;

  OutputReader reader(outcome, settings, start);
  Stopper stopper(pid, settings, start + settings.timeout);
  std::vector<char> buffer(64 * 1024);
  int status = 0;
  std::optional<clock::time_point> exited_at;
  // The handler forwards a signal at once, so the command can die of it before this loop sees
  // stop_requested: what counts is whether the stop came before the command ended.
  bool stopped_before_exit = false;
  for (bool open_pipe = true; open_pipe;) {
    pollfd fd{pipe_fds[0], POLLIN, 0};
    const int ready = poll(&fd, 1, 100);
    const auto now = clock::now();  // the arrival time of whatever this read returns
    if (ready > 0) {
      const ssize_t n = read(pipe_fds[0], buffer.data(), buffer.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        open_pipe = false;
      } else {
        write_all(settings.passthrough_fd, buffer.data(), static_cast<std::size_t>(n));
        reader.chunk(std::string_view(buffer.data(), static_cast<std::size_t>(n)), now);
      }
    }
    if (!exited_at && waitpid(pid, &status, WNOHANG) == pid) {
      exited_at = now;
      stopped_before_exit = stop_requested.load();
    }
    // Output still arriving after the command exited comes from processes it left behind: read
    // what is already there, then stop listening to them.
    if (exited_at && now - *exited_at > std::chrono::seconds(2)) open_pipe = false;
    if (!exited_at) stopper.check(outcome, now);
  }
  reader.end(clock::now());
  close(pipe_fds[0]);
  while (!exited_at) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid || (done < 0 && errno != EINTR)) {
      stopped_before_exit = stop_requested.load();
      break;
    }
    stopper.check_after_output(outcome, clock::now());
    usleep(20'000);
  }
  kill(-pid, SIGKILL);  // whatever the command left behind in its group goes with it
  running_group = 0;
  outcome.seconds = std::chrono::duration<double>(clock::now() - start).count();
  outcome.nccl_transport = reader.transport();
  record_exit(outcome, status, stopped_before_exit, oom_before);
  return outcome;
}

ResultDocument command_result(const CommandCase& c, const CommandOutcome& o, EnvironmentInfo environment,
                              const std::string& start_time, const std::string& end_time) {
  ResultDocument doc;
  doc.run = c.run;
  doc.model = c.model;
  doc.engine = Engine::command;
  doc.case_ = c.case_;
  doc.image_size = c.image_size;
  doc.image_height = c.image_height;
  doc.image_width = c.image_width;
  doc.sequence_length = is_sequence_model(c.model) ? c.sequence_length : 0;  // the result names the one the model takes
  doc.devices = c.case_.devices();
  doc.global_batch_size = c.case_.global_batch_size();
  doc.methodology = c.methodology;
  doc.start_time = start_time;
  doc.end_time = end_time;
  if (environment.backend.empty()) environment.backend = "unknown";  // until the script says
  std::map<std::string, std::string> facts = o.facts;
  std::string optimizer_error;
  doc.optimizer = optimizer_from_facts(facts, optimizer_error);  // judged against the spec as the worker's is
  std::string network_error;
  const std::optional<Model> trained = spelled_fact<Model>(facts, "model", network_error);
  const std::optional<Precision> trained_precision = spelled_fact<Precision>(facts, "precision", network_error);
  const std::optional<std::int64_t> parameters =
      count_from_facts(facts, "parameters", "the network's trainable parameters", network_error);
  const auto image_size = image_size_from_facts(facts, network_error);
  const std::optional<std::int64_t> sequence_length = count_from_facts(
      facts, "sequenceLength", "the tokens in each sequence, as DLBENCH_SEQUENCE_LENGTH says", network_error);
  for (const auto& [key, value] : facts) apply_fact(environment, key, value);
  environment.nccl_transport = o.nccl_transport;
  doc.environment = std::move(environment);
  doc.state = CaseState::Failed;

  const std::string seen = std::to_string(o.steps.size()) + " of " + std::to_string(c.total_steps()) + " step markers";
  const std::string tail = "; last output:\n" + last_lines(o);
  const auto fail = [&](std::string reason, std::string message) {
    doc.reason = std::move(reason);
    doc.message = std::move(message);
    return doc;
  };
  if (!o.invalid_marker.empty()) return fail("InvalidMarker", o.invalid_marker);
  if (!optimizer_error.empty()) return fail("InvalidMarker", optimizer_error);
  if (!network_error.empty()) return fail("InvalidMarker", network_error);
  if (trained && *trained != c.model) {
    // Its steps timed another network: not this case's figures, whatever became of the command.
    return fail("CaseMismatch", "the command says it trained " + std::string(to_string(*trained)) + " instead of " +
                                    std::string(to_string(c.model)) + " (its fact model; the case's model is in "
                                    "DLBENCH_MODEL) after " + seen);
  }
  if (trained_precision && *trained_precision != c.case_.precision) {
    return fail("CaseMismatch", "the command says it trained in " + std::string(to_string(*trained_precision)) +
                                    " instead of " + std::string(to_string(c.case_.precision)) +
                                    " (its fact precision; the case's is in DLBENCH_PRECISION) after " + seen);
  }
  if (const std::string why = input_mismatch(c, image_size, sequence_length); !why.empty()) {
    return fail("CaseMismatch", why + " after " + seen);
  }
  if (parameters && *parameters != network_parameter_count(c.model)) {
    return fail("CaseMismatch", "the command's network has " + std::to_string(*parameters) + " parameters (its fact "
                                "parameters), dlbench-worker's " + std::string(to_string(c.model)) + " has " +
                                std::to_string(network_parameter_count(c.model)) + ": another network than the "
                                "case's, after " + seen);
  }
  if (!o.unsupported.empty()) return fail(kReasonUnsupported, "the command says it cannot run this case: " + o.unsupported);
  // A command that ended early (stopped, out of time, failed: with several nodes, often a peer
  // lost) keeps the repeats it completed, as dlbench-worker's Stopped result does: unjudged, never
  // published. Returns the words that say so, or nothing where no repeat was complete.
  const auto keep_complete_repeats = [&]() -> std::string {
    const StepTimingResult complete = time_complete_repeats(o.steps, c.methodology, doc.global_batch_size);
    if (!complete.ok) return "";
    doc.throughput = Throughput{std::string(throughput_unit(c.model)), summarize(complete.repeats.throughput),
                                complete.repeats.throughput};
    doc.step_time_seconds = summarize(complete.repeats.step_seconds);
    Methodology kept = c.methodology;
    kept.repeats = static_cast<int>(complete.repeats.throughput.size());
    std::string unreported;  // a loss missing from a kept repeat: the losses are left out, the repeats kept
    doc.loss_after_repeats = losses_after_repeats(o.losses, kept, unreported);
    return "; " + std::to_string(complete.repeats.throughput.size()) + " of " + std::to_string(c.methodology.repeats) +
           " repeats complete, kept here unjudged";
  };
  if (o.interrupted) return fail("Interrupted", "stopped by a signal after " + seen + keep_complete_repeats() + tail);
  if (o.timed_out) return fail("Timeout", "no end within limits.caseTimeoutSeconds; " + seen + keep_complete_repeats() + tail);
  if (o.out_of_memory && o.exit_code != 0) {
    return fail("OutOfMemory", "the kernel's OOM killer ended a process of the command (exit code " +
                                   std::to_string(o.exit_code) + ") after " + seen + keep_complete_repeats() + tail);
  }
  if (!o.started) return fail("CommandFailed", "the command could not be started" + tail);
  if (o.exit_code != 0) {
    const std::string how = o.signal != 0 ? "was killed by signal " + std::to_string(o.signal) + " (" +
                                                strsignal(o.signal) + ")"
                                          : "exited with code " + std::to_string(o.exit_code);
    return fail("CommandFailed", "the command " + how + " after " + seen + keep_complete_repeats() + tail);
  }
  const StepTimingResult timing = time_steps(o.steps, c.methodology, doc.global_batch_size);
  if (!timing.ok && timing.reason == "IncompleteMeasurement") {
    return fail(timing.reason, timing.message + keep_complete_repeats() + tail);
  }
  if (!timing.ok) return fail(timing.reason, timing.message + tail);
  std::string loss_error;
  doc.loss_after_repeats = losses_after_repeats(o.losses, c.methodology, loss_error);
  if (!loss_error.empty()) return fail("InvalidMarker", loss_error);
  doc.throughput = Throughput{std::string(throughput_unit(c.model)), summarize(timing.repeats.throughput), timing.repeats.throughput};
  doc.step_time_seconds = summarize(timing.repeats.step_seconds);
  if (std::any_of(doc.loss_after_repeats.begin(), doc.loss_after_repeats.end(), [](double l) { return !std::isfinite(l); })) {
    // As dlbench-worker's: the repeats are kept, unjudged and never published.
    return fail(kReasonLossNotFinite, describe_divergence(doc.loss_after_repeats) + " (the " +
                                          std::to_string(doc.loss_after_repeats.size()) +
                                          " repeats run are kept in the result, not published). Lower the learning "
                                          "rate (spec.optimizer.learningRate) or warm it up (spec.optimizer.learningRateWarmupSteps)");
  }
  doc.state = CaseState::Succeeded;
  doc.reason.clear();
  doc.message.clear();
  // The command runs its steps once: judged, never measured again.
  doc.stability = judge_stability(timing.repeats.throughput, c.methodology.repeats,
                                  max_cv(c.methodology.stability, c.gpu));
  if (doc.stability->verdict == StabilityVerdict::unstable) {
    doc.reason = kReasonUnstable;
    doc.message = describe_unstable(*doc.stability, c.methodology.repeats, doc.throughput->summary);
  }
  return doc;
}

}  // namespace dlbench::command
