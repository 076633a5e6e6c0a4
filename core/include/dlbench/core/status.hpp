// Helpers that every status writer (the operator, `dlbench run`) shares, so that the same
// world gives the same status.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "dlbench/core/benchmark_run.hpp"
#include "dlbench/core/planner.hpp"

namespace dlbench {

// Kubernetes condition semantics: lastTransitionTime changes only when status changes.
// Returns true when anything changed.
bool set_condition(std::vector<Condition>& conditions, Condition condition, const std::string& now);
const Condition* find_condition(const std::vector<Condition>& conditions, ConditionType type);

// Recomputes what is derived from results: speed-up and efficiency, best throughput, and the
// progress counters and summary ("5/12"). The current case is left to the caller. `statistic` and
// `include_unstable` are the run's methodology: no default, so that no caller judges a run by
// other rules than its spec's.
void refresh_derived_status(BenchmarkRunStatus& status, const std::vector<PlannedCase>& plan, Statistic statistic,
                            bool include_unstable);

// Failure reasons that another attempt cannot change (the worker cannot run this case where it
// landed: a precision its backend or this CPU lacks). Both executors record such a result at
// once instead of spending limits.backoffLimit on it.
inline constexpr const char* kReasonUnsupported = "Unsupported";
// The run's gang scheduler needs a PodGroup resource that the cluster does not serve (its CRD
// is not installed): no attempt can be admitted until someone installs it.
inline constexpr const char* kReasonGangSchedulerUnavailable = "GangSchedulerUnavailable";
// The self-test found a check that failed: a verdict on this hardware and software, which
// another attempt does not change. Cases after a failed preflight are Skipped with
// kReasonPreflightFailed.
inline constexpr const char* kReasonSelfTestFailed = "SelfTestFailed";
inline constexpr const char* kReasonPreflightFailed = "PreflightFailed";
// The worker was stopped by SIGTERM or SIGINT after it had measured repeats, which its result
// keeps: Open MPI stops every rank so when one ends, as do a pod's deletion and an interrupted
// run. Retried: the next attempt may meet no such end.
inline constexpr const char* kReasonStopped = "Stopped";
// A Stopped result's message with the job's last lines after it (at most `limit` characters of
// them, the last kept): they say what the worker could not know, why it was stopped (mpirun's
// "process rank 1 ... exited on signal 9"). Rule lines, blank lines and the worker's own line
// saying the message are left out.
std::string stopped_message_with_last_lines(const std::string& message, const std::deque<std::string>& last_lines,
                                            std::size_t limit = 1024);
// Why a case timed out, as dlbench run, dlbench launch and the operator all word it: "no result
// within limits.caseTimeoutSeconds (N s)", and where its worker, stopped at the deadline, wrote
// the repeats it had measured (`kept_repeats` of them), "; the K repeats measured before are
// kept, unjudged". is_timeout_message knows the words again in a launcher's termination message.
std::string timeout_message(std::int64_t case_timeout_seconds, std::size_t kept_repeats = 0);
bool is_timeout_message(const std::string& message);
// dlbench launch, told to stop its command at the case's deadline (--stop-after), gives it this
// long to end (rank 0 writing what it measured, mpirun stopping the ranks) before SIGKILL; within
// a pod's default terminationGracePeriodSeconds (30 s).
inline constexpr int kLaunchStopGraceSeconds = 15;
// The operator starts an attempt only once the pods of the attempt before have ended: until their
// kubelet has stopped them (their terminationGracePeriodSeconds, 30 s by default) they may still
// train beside it. A pod this long past its deletionTimestamp (its node lost, say) is waited for
// no more; the attempt then starts, and is not ranAlone where such a pod shares a node with it.
inline constexpr int kPreviousPodsOverdueSeconds = 30;
// The Progressing condition's reason while an attempt waits for them.
inline constexpr const char* kReasonAwaitingPreviousPods = "AwaitingPreviousPods";
// A case's reason where one of its workers was deleted mid-case by someone else (a node drained,
// an eviction, a preemption): the message names the pod and, where the cluster says, the
// disruption. Retried while attempts are left.
inline constexpr const char* kReasonWorkerDeleted = "WorkerDeleted";
// The operator has its launcher stop the case at limits.caseTimeoutSeconds; its own deadline, and
// the launcher Job's activeDeadlineSeconds, come this much later, the time the launcher has to
// stop the case and hand back what it measured (its grace, and 5 s for the pod's end to arrive).
inline constexpr int kLauncherStopMarginSeconds = kLaunchStopGraceSeconds + 5;
// RdmaNotUsed (nccl_log.hpp) is permanent too: the next attempt meets the same fabric; and so
// is LossNotFinite (benchmark_run.hpp): the next attempt diverges the same way.
bool failure_is_permanent(const std::string& reason);

// How much of each result a status keeps. An API server keeps an object whole in etcd, whose
// default request limit is 1.5 MiB: a run of hundreds of cases outgrows it (a result is about
// 1.5 KB), and the operator then writes its status again with less of each result:
// - trimmed: without the losses after each repeat, the step time, the training arithmetic, the
//   energy, the gradient reduction, the input report and a traced overflow, each message cut to
//   its last line (240 characters);
// - essential: also without the environment, the optimizer and the interference.
// Kept at every level: what the report's tables, speed-ups and `dlbench compare` read (the case,
// state, reason, throughput with every repeat, stability, speed-up and efficiency), and
// ranAlone, attempts and times.
enum class ResultDetail { full, trimmed, essential };
std::string to_string(ResultDetail detail);
void keep_result_detail(BenchmarkRunStatus& status, ResultDetail detail);

// "2026-11-21T05:10:00Z"
std::string rfc3339_utc_now();
std::string rfc3339_utc(std::chrono::system_clock::time_point when);  // to the second, rounded down
// "2026-11-21T05:00:00Z", with a fraction or without ("…:00.123456Z", a Lease's MicroTime), UTC
// only; nullopt when empty or anything else.
std::optional<std::chrono::system_clock::time_point> parse_rfc3339(const std::string& text);

}  // namespace dlbench
