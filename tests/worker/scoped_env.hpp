// An environment variable set for as long as the object lives, then unset: a backend's switch
// (DLBENCH_CPU_ATTENTION, DLBENCH_CUDA_ATTENTION) for the backends made meanwhile.
#pragma once

#include <cstdlib>

namespace dlbench::worker {

class ScopedEnv {
 public:
  ScopedEnv(const char* variable, const char* value) : variable_(variable) { setenv(variable, value, 1); }
  ~ScopedEnv() { unsetenv(variable_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* variable_;
};

}  // namespace dlbench::worker
