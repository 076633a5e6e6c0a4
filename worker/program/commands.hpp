// What dlbench-worker does, once its options are parsed and its backend and communicator made:
// run a case, record one step, or check the backend. Each returns the process's exit code.
#pragma once

#include <string>

#include "backend.hpp"
#include "communicator.hpp"
#include "program/options.hpp"

namespace dlbench::worker {

// A case: warm up, measure, repeat while unstable; rank 0 prints the table and writes the result.
// `backend` is null when it could not be made (`backend_error` says why): a Failed result.
int run_case(const Options& o, Communicator& comm, Backend* backend, const std::string& backend_error);

// --record-step: one eager step, everything it read and wrote, for comparing with another
// framework on the same weights and batch (tests/golden).
int record_step(const Options& o, Backend* backend, const std::string& backend_error);

// --self-test: every rank checks its own backend; the ranks agree on who failed; rank 0 reports.
int self_test_command(const Options& o, Communicator& comm, Backend* backend, const std::string& backend_error);

}  // namespace dlbench::worker
