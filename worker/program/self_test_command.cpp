#include <iomanip>
#include <iostream>
#include <sstream>

#include "cpu/cpu_backend.hpp"
#include "dlbench/core/names.hpp"
#include "dlbench/core/status.hpp"
#include "program/case_output.hpp"
#include "program/case_setup.hpp"
#include "program/commands.hpp"
#include "self_test.hpp"

namespace dlbench::worker {

namespace {

// Every rank learns every rank's counts and whether it failed or could not check; the document
// gets the totals, the failed ranks, and this rank's failed and skipped checks (the first few).
void tally_across_ranks(SelfTestDocument& doc, const std::vector<SelfTestCheck>& checks, bool broken,
                        Communicator& comm) {
  int passed = 0, failed = 0, skipped = 0;
  for (const auto& c : checks) {
    (c.outcome == CheckOutcome::passed ? passed : c.outcome == CheckOutcome::failed ? failed : skipped) += 1;
  }
  // [failed or broken per rank..., then passed, failed, skipped per rank...]
  const auto ranks = static_cast<std::size_t>(comm.size());
  std::vector<double> counts(4 * ranks, 0.0);
  const auto me = static_cast<std::size_t>(comm.rank());
  counts[me] = (failed > 0 || broken) ? 1.0 : 0.0;
  counts[ranks + 3 * me] = passed;
  counts[ranks + 3 * me + 1] = failed;
  counts[ranks + 3 * me + 2] = skipped;
  comm.max(counts.data(), static_cast<std::int64_t>(counts.size()));
  for (std::size_t r = 0; r < ranks; ++r) {
    if (counts[r] > 0) doc.failed_ranks.push_back(static_cast<int>(r));
    doc.passed += static_cast<int>(counts[ranks + 3 * r]);
    doc.failed += static_cast<int>(counts[ranks + 3 * r + 1]);
    doc.skipped += static_cast<int>(counts[ranks + 3 * r + 2]);
  }
  for (const CheckOutcome kind : {CheckOutcome::failed, CheckOutcome::skipped}) {
    for (const auto& c : checks) {
      if (c.outcome != kind || doc.checks.size() >= kSelfTestListedChecks) continue;
      doc.checks.push_back({comm.rank(), c.precision, c.name, std::string(to_string(c.outcome)), c.error, c.bound,
                            printable(c.detail, 200)});
    }
  }
}

// The verdict: why the self-test could not run, which ranks failed and the first failure, or the
// counts that passed.
void judge(SelfTestDocument& doc, const std::vector<SelfTestCheck>& checks, const std::string& error,
           const std::string& where) {
  if (!error.empty()) {
    doc.state = CaseState::Failed;
    doc.message = error;
    return;
  }
  if (doc.failed_ranks.empty()) {
    doc.state = CaseState::Succeeded;
    doc.message = std::to_string(doc.passed) + " checks passed, " + std::to_string(doc.skipped) + " skipped" + where;
    return;
  }
  doc.state = CaseState::Failed;
  doc.reason = kReasonSelfTestFailed;
  std::string first;
  for (const auto& c : checks) {
    if (c.outcome == CheckOutcome::failed) {
      first = "; first: " + c.precision + " " + c.name + ": " + c.detail;
      break;
    }
  }
  std::string ranks_failed;
  for (const int r : doc.failed_ranks) ranks_failed += (ranks_failed.empty() ? "" : ",") + std::to_string(r);
  doc.message = std::to_string(doc.failed) + " of " + std::to_string(doc.passed + doc.failed + doc.skipped) +
                " checks failed" + where + ", on ranks " + ranks_failed + printable(first, 300);
}

}  // namespace

int self_test_command(const Options& o, Communicator& comm, Backend* backend, const std::string& backend_error) {
  SelfTestDocument doc;
  doc.run = o.run;
  const std::vector<std::string> hosts = comm.hosts();
  doc.nodes = static_cast<int>(distinct(hosts).size());
  doc.devices = comm.size();
  for (const Precision p : o.self_test_precisions) doc.precisions.emplace_back(to_string(p));
  doc.environment = environment(backend, o, comm, hosts);
  doc.start_time = rfc3339_utc_now();
  const bool reporter = comm.rank() == 0;
  std::ostream& table = o.output.empty() ? std::cerr : std::cout;
  std::vector<SelfTestCheck> checks;
  std::string error;
  std::unique_ptr<CpuBackend> reference;
  if (backend == nullptr) {
    doc.reason = "BackendUnavailable";
    error = "--backend " + o.backend + ": " + backend_error;
  } else {
    try {
      reference = std::make_unique<CpuBackend>(o.threads > 0 ? static_cast<int>(o.threads) : default_threads());
    } catch (const std::exception& e) {
      doc.reason = "WorkerError";
      error = e.what();
    }
  }
  // The ranks agree whether all of them can check before any enters a collective: with one rank
  // unable (no GPU on its node, say), the others check alone rather than wait for it.
  double any_broken = error.empty() ? 0.0 : 1.0;
  comm.max(&any_broken, 1);
  NoCommunicator alone;
  Communicator& collectives = any_broken > 0 ? static_cast<Communicator&>(alone) : comm;
  if (error.empty()) {
    try {
      SelfTestSubject subject{*backend, [&](Precision precision) {
                                Options one = o;
                                one.precision = precision;
                                return make_backend(one);
                              },
                              o.self_test_precisions, o.self_test_models, o.self_test_checks};
      if (reporter) {
        table << "dlbench-worker --self-test: " << o.backend << " against cpu fp32 (oneDNN), " << comm.size()
              << (comm.size() == 1 ? " rank" : " ranks") << " (" << comm.name() << ")\n"
              << "  " << std::left << std::setw(5) << "prec" << " " << std::setw(40) << "check" << std::right << " "
              << std::setw(9) << "error" << " " << std::setw(9) << "bound" << "  result  detail" << std::endl;
      }
      checks = run_self_test(subject, *reference, collectives, [&](const SelfTestCheck& c) {
        if (reporter) print_check(table, c);
        else if (c.outcome == CheckOutcome::failed) print_check(std::cerr << "rank " << comm.rank() << ":", c);
      });
      if (checks.empty() && !o.self_test_checks.empty()) {
        doc.reason = "WorkerError";
        std::string parts;
        for (const std::string& part : o.self_test_checks) parts += (parts.empty() ? "" : "|") + part;
        error = "--self-test-checks: no check's name contains any of \"" + printable(parts, 200) +
                "\" (--self-test without it prints every name)";
      }
    } catch (const std::exception& e) {
      doc.reason = "WorkerError";
      error = e.what();
    }
  }
  tally_across_ranks(doc, checks, !error.empty(), comm);
  std::string where = " on " + std::to_string(doc.devices) + (doc.devices == 1 ? " device" : " devices") + " (" +
                      o.backend + ", " + comm.name() + ")";
  if (!o.self_test_checks.empty()) where += ", those chosen by --self-test-checks";
  judge(doc, checks, error, where);
  doc.end_time = rfc3339_utc_now();
  if (!reporter) return doc.state == CaseState::Succeeded ? 0 : kExitFailed;
  table << "self-test " << (doc.state == CaseState::Succeeded ? "passed" : "FAILED") << ": " << doc.message << "\n";
  return write_document(o, to_json(doc), doc.state == CaseState::Succeeded);
}

}  // namespace dlbench::worker
