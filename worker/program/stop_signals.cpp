#include "program/stop_signals.hpp"

#include <pthread.h>
#include <signal.h>

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <thread>

namespace dlbench::worker {

namespace {

// Never destroyed: the signals' thread may take one while the process's statics are destroyed.
std::mutex& last_words_mutex = *new std::mutex;
LastWords& current_last_words = *new LastWords;  // guarded by last_words_mutex
bool current_answers_sigusr1 = false;             // guarded by last_words_mutex

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGUSR1);
  return set;
}

[[noreturn]] void take_them(sigset_t set) {
  for (;;) {
    int signal_number = 0;
    if (sigwait(&set, &signal_number) != 0) continue;
    const char* name = signal_number == SIGTERM ? "SIGTERM" : signal_number == SIGINT ? "SIGINT" : "SIGUSR1";
    {
      const std::lock_guard lock(last_words_mutex);
      // SIGUSR1 asks rank 0, which keeps the repeats, to write them; mpirun passes it to every
      // rank, and the others (rank 0's deputy too) go on until rank 0's end ends the job.
      if (signal_number == SIGUSR1 && !(current_last_words && current_answers_sigusr1)) continue;
      if (current_last_words) {
        std::optional<int> code;
        try {
          code = current_last_words(signal_number, name);
        } catch (const std::exception& e) {
          std::cerr << "dlbench-worker: stopped by " << name << "; what was measured could not be written: " << e.what()
                    << "\n";
        }
        if (code) {
          std::cout.flush();
          std::cerr.flush();
          std::_Exit(*code);
        }
      }
    }
    // The signal's own action, as if it had never been taken: the process ends by it.
    std::signal(signal_number, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, signal_number);
    pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
    raise(signal_number);
  }
}

}  // namespace

void take_stop_signals() {
  const sigset_t set = stop_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread(take_them, set).detach();
}

StopGuard::StopGuard(LastWords last_words, bool answers_sigusr1) {
  const std::lock_guard lock(last_words_mutex);
  current_last_words = std::move(last_words);
  current_answers_sigusr1 = answers_sigusr1;
}

StopGuard::~StopGuard() {
  const std::lock_guard lock(last_words_mutex);
  current_last_words = nullptr;
}

}  // namespace dlbench::worker
