#include "worker_metrics.hpp"

#include <cmath>

namespace dlbench::worker {

WorkerMetrics::WorkerMetrics(const WorkerIdentity& id, int port) : global_batch_(id.global_batch_size) {
  labels_ = {{"run", id.run}, {"case", id.case_id}, {"model", id.model}, {"precision", id.precision},
             {"rank", std::to_string(id.rank)}};
  registry_.gauge("dlbench_worker_info", "Build and environment of this worker; always 1.")
      .add({{"version", id.version},
            {"backend", id.backend},
            {"communicator", id.communicator},
            {"libraries", id.library_versions},
            {"rank", std::to_string(id.rank)}})
      .set(1);
  throughput_ = &registry_.gauge("dlbench_worker_throughput_samples_per_second",
                                 "Live throughput of the whole job from the last step: global batch / step time.")
                     .add(labels_);
  repeat_throughput_ = &registry_
                            .gauge("dlbench_worker_repeat_throughput_samples_per_second",
                                   "Throughput of the last finished repeat, as the methodology computes it.")
                            .add(labels_);
  step_seconds_ = &registry_
                       .histogram("dlbench_worker_step_seconds", "Wall time of training steps, warm-up included.",
                                  metrics::exponential_buckets(0.001, 2.0, 18))
                       .add(labels_);
  auto& steps = registry_.counter("dlbench_worker_steps_total", "Training steps done, by methodology phase.");
  warmup_steps_ = &steps.add(labels_with("phase", "warmup"));
  measured_steps_ = &steps.add(labels_with("phase", "measure"));
  loss_ = &registry_.gauge("dlbench_worker_loss", "Training loss after the last finished repeat.").add(labels_);
  repeat_ = &registry_.gauge("dlbench_worker_repeat", "The repeat running now, from 1.").add(labels_);
  phase_ = &registry_.gauge("dlbench_worker_phase", "1 for the phase the worker is in (setup, warmup, measure, done, failed).");
  auto& memory = registry_.gauge("dlbench_worker_device_memory_bytes", "Device memory held, by kind.");
  activation_bytes_ = &memory.add(labels_with("kind", "activations"));
  parameter_bytes_ = &memory.add(labels_with("kind", "parameters"));
  set_phase("setup");
  server_ = std::make_unique<metrics::MetricsServer>(registry_, port);
}

metrics::Labels WorkerMetrics::labels_with(const std::string& key, const std::string& value) const {
  metrics::Labels labels = labels_;
  labels[key] = value;
  return labels;
}

void WorkerMetrics::set_phase(const std::string& phase) {
  for (const char* p : {"setup", "warmup", "measure", "done", "failed"}) {
    phase_->add(labels_with("phase", p)).set(phase == p ? 1.0 : 0.0);
  }
}

void WorkerMetrics::on_step(int repeat, bool measured, double seconds) {
  repeat_->set(repeat + 1);
  set_phase(measured ? "measure" : "warmup");
  step_seconds_->observe(seconds);
  (measured ? measured_steps_ : warmup_steps_)->increment();
  if (seconds > 0) throughput_->set(static_cast<double>(global_batch_) / seconds);
}

void WorkerMetrics::on_repeat(double throughput, double loss) {
  repeat_throughput_->set(throughput);
  if (!std::isnan(loss)) loss_->set(loss);  // NaN: a wrapped script whose loss dlbench does not see
}

void WorkerMetrics::set_memory(double activation_bytes, double parameter_bytes) {
  activation_bytes_->set(activation_bytes);
  parameter_bytes_->set(parameter_bytes);
}

void WorkerMetrics::finished(bool succeeded) { set_phase(succeeded ? "done" : "failed"); }

}  // namespace dlbench::worker
