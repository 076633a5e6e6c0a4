// The one status machine of a BenchmarkRun. Both executors drive it — the operator from each
// reconcile (rebuilt from the status it reads), `dlbench run` from its loop — so that the same
// events give the same status: which case and attempt is current, when an attempt is retried,
// how a result is recorded, and how the run ends (phase, Ready/Progressing/Failed conditions).
//
//   admit ─► start ─► attempt_ended ─┬─► retry (same case, attempt + 1)
//                                    └─► recorded ─► next case … ─► finished
//   skip (a case this executor cannot run)      interrupt (the executor was stopped)
//
// With a preflight (plan_preflight), it is current before the first case; its outcome goes to
// status.preflight, not results. A failed preflight records every case Skipped with
// PreflightFailed and the run ends Failed; a skipped one (this executor cannot run it) lets
// the cases run.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dlbench/core/benchmark_run.hpp"
#include "dlbench/core/planner.hpp"

namespace dlbench {

struct RunEvent {
  std::string type;  // Normal | Warning
  std::string reason, message;
  bool operator==(const RunEvent&) const = default;
};

// What a worker's result document says about the case it was asked to run: its result, or a
// failure InvalidResult (JSON, not a valid document) or CaseMismatch (a document for another
// case, or one that says it trained with another optimizer than `optimizer`, the spec's with
// its defaults resolved; a document without one, engine: command's, is not judged on it).
// nullopt when the text is not JSON at all (a launcher's last words, not a document). A
// multi-node case that asked for RDMA is judged on the NCCL transport it reports (judge_rdma).
// Both executors judge a document with this.
std::optional<CaseResult> result_from_document(const std::string& text, const CaseSpec& expected, int attempt,
                                               const std::optional<RdmaSpec>& rdma, const OptimizerSpec& optimizer);

class RunStateMachine {
 public:
  // `status` as last written (empty for a new run); `generation` of the spec being run.
  RunStateMachine(BenchmarkRunStatus status, std::vector<PlannedCase> plan, const Methodology& methodology,
                  std::int64_t generation, int max_attempts, std::string now,
                  std::optional<PlannedCase> preflight = std::nullopt);

  // The preflight until it has its outcome, then the first planned case without a result, and
  // its attempt (from 1); nullptr when all have one.
  const PlannedCase* current() const;
  int attempt() const { return status_.progress.current_attempt; }
  bool finished() const { return status_.phase == Phase::Succeeded || status_.phase == Phase::Failed; }

  // Waiting for the executor to let the run start (the operator's limit on concurrent cases).
  void queue(const std::string& why);
  // The run may run: Pending becomes Running (event Started, which says how the cases train:
  // `training`, the spec's optimizer in describe_optimizer's words) and the current case is
  // announced.
  void admit(const std::string& training = "");
  // The current attempt ended with `result` (Succeeded, or Failed with a reason). A failure that
  // another attempt may change is retried while attempts are left; otherwise the result is
  // recorded (with attempts) and the next case becomes current. Returns true for a retry.
  bool attempt_ended(CaseResult result);
  // Another case's worker was seen on a node of the current attempt (kept in status until the
  // attempt ends, so that the result's ranAlone survives a restart of the operator).
  void note_shared_node() { status_.progress.shared_node = true; }
  // The current attempt waits for the pods of the one before to end (`why`: which, for the
  // Progressing condition, reason AwaitingPreviousPods); an empty `why` ends the wait (CaseRunning).
  void await_previous_pods(const std::string& why);
  // The current case cannot run on this executor: recorded as it is, no attempt spent.
  void skip(CaseResult result);
  // The executor was stopped: the run ends Failed, with `reason` (Interrupted: by a signal) and a
  // message that says how it was `stopped`; results kept.
  void interrupt(const std::string& reason = "Interrupted", const std::string& stopped = "stopped by a signal");

  const BenchmarkRunStatus& status() const { return status_; }
  std::vector<RunEvent> take_events() { return std::exchange(events_, {}); }

 private:
  void refresh();  // derived values, the current case, and the conditions for where the run is
  BenchmarkRunStatus status_;
  // Records `result` as the current one's (the preflight's or a case's) and announces it.
  void record(CaseResult result);
  std::vector<PlannedCase> plan_;
  std::optional<PlannedCase> preflight_;
  Statistic statistic_;
  bool include_unstable_;
  std::int64_t generation_;
  int max_attempts_;
  std::string now_;
  bool interrupted_ = false;
  std::vector<RunEvent> events_;
};

// The spec does not decode: phase Failed, Invalid=True with every error, Ready=False.
void mark_invalid(BenchmarkRunStatus& status, const std::string& errors, std::int64_t generation,
                  const std::string& now);

}  // namespace dlbench
