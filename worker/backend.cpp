#include "backend.hpp"

namespace dlbench::worker {

void HostClockMarks::mark() {
  if (wait_) wait_();
  marks_.push_back(std::chrono::steady_clock::now());
}

std::vector<double> HostClockMarks::drain(bool wait) {
  std::vector<double> seconds;  // every mark was taken after its work: all are complete
  for (std::size_t i = returned_ + 1; i < marks_.size(); ++i) {
    seconds.push_back(std::chrono::duration<double>(marks_[i] - marks_[i - 1]).count());
  }
  returned_ = marks_.empty() ? 0 : marks_.size() - 1;
  if (wait) {
    marks_.clear();
    returned_ = 0;
  }
  return seconds;
}

DType activation_dtype(std::string_view precision) {
  if (precision == "bf16") return DType::bf16;
  if (precision == "amp") return DType::fp16;
  return DType::fp32;
}

std::optional<std::string> cannot_run(std::string_view precision, const Backend& backend) {
  if (precision == "tf32" && backend.name() != "cuda") {
    return "tf32 is a math mode of NVIDIA tensor cores (Ampere and later); the " + backend.name() +
           " backend computes fp32";
  }
  return backend.cannot_compute(activation_dtype(precision));
}

std::string allowed_precisions(const Backend& backend, const std::string& separator) {
  std::string allowed;
  for (const char* p : {"fp32", "tf32", "amp", "bf16"}) {
    if (!cannot_run(p, backend)) allowed += (allowed.empty() ? "" : separator) + std::string(p);
  }
  return allowed;
}

}  // namespace dlbench::worker
