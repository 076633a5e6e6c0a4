// dlbench-worker: parse the options, make the backend and the communicator, then run a case,
// record one step, or check the backend (worker/program/).
#include <iostream>
#include <memory>
#include <string>

#include "program/case_setup.hpp"
#include "program/commands.hpp"
#include "program/options.hpp"
#include "program/stop_signals.hpp"

int main(int argc, char** argv) {
  using namespace dlbench::worker;
  take_stop_signals();  // before any other thread starts, so that none of them takes one
  try {
    auto options = parse_options(argc, argv);
    if (!options) return 0;  // --help, --list-models, --list-devices
    std::unique_ptr<Backend> backend;
    std::string backend_error;  // no backend: the case fails saying why, rather than the process
    try {
      backend = make_backend(*options);
    } catch (const std::exception& e) {
      backend_error = e.what();
    }
    auto communicator = make_communicator(*options, &argc, &argv, backend.get());
    resolve_learning_rate(*options, communicator->size());
    if (options->self_test) return self_test_command(*options, *communicator, backend.get(), backend_error);
    if (!options->record_step.empty()) return record_step(*options, backend.get(), backend_error);
    return run_case(*options, *communicator, backend.get(), backend_error);
  } catch (const dlbench::UsageError& e) {
    std::cerr << "dlbench-worker: " << e.message << "\n";
    return dlbench::kExitUsageError;
  } catch (const std::exception& e) {
    // Whatever escaped the case's own handling: said, and a failure exit, never an abort.
    std::cerr << "dlbench-worker: " << e.what() << "\n";
    return kExitFailed;
  }
}
