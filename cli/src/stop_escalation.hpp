// Stopping a child in two steps, as `dlbench run` and `dlbench launch` both do: first a signal on
// which a worker writes the repeats it measured (a Stopped result), then SIGKILL for whatever is
// still there a grace later. Which signal and to whom (a process group, or mpirun alone) stay with
// the caller; the timing is here once.
#pragma once

#include <chrono>
#include <csignal>
#include <functional>
#include <optional>
#include <utility>

namespace dlbench::cli {

class StopEscalation {
 public:
  using Clock = std::chrono::steady_clock;

  // `send(signal)` delivers a signal to the child; `grace` is how long it has to end after the stop.
  StopEscalation(std::function<void(int)> send, std::chrono::seconds grace) : send_(std::move(send)), grace_(grace) {}

  // Sends `signal` the first time; later stops do nothing, the first one's grace runs on.
  bool stop(int signal, Clock::time_point now = Clock::now()) {
    if (stopped_at_) return false;
    stopped_at_ = now;
    send_(signal);
    return true;
  }

  // Sends SIGKILL once, when the grace after the stop has passed.
  void kill_when_due(Clock::time_point now = Clock::now()) {
    if (!stopped_at_ || killed_ || now - *stopped_at_ < grace_) return;
    killed_ = true;
    send_(SIGKILL);
  }

  bool stopped() const { return stopped_at_.has_value(); }
  bool killed() const { return killed_; }

 private:
  std::function<void(int)> send_;
  std::chrono::seconds grace_;
  std::optional<Clock::time_point> stopped_at_;
  bool killed_ = false;
};

}  // namespace dlbench::cli
