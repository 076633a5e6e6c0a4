#include "worker_metrics.hpp"

#include <algorithm>

#include "dlbench/core/enums.hpp"

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
  // Samples are images, or sequences for a sequence model: the name ends in the unit (one unit
  // per name), and the `unit` label says it as the result's throughput.unit does.
  const std::string suffix(throughput_metric_suffix(id.throughput_unit));
  throughput_ = &registry_.gauge("dlbench_worker_throughput" + suffix,
                                 "Live throughput of the whole job from the last step: global batch / step time.")
                     .add(labels_with("unit", id.throughput_unit));
  repeat_throughput_ = &registry_
                            .gauge("dlbench_worker_repeat_throughput" + suffix,
                                   "Throughput of the last finished repeat, as the methodology computes it.")
                            .add(labels_with("unit", id.throughput_unit));
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

void WorkerMetrics::on_repeat(double throughput) { repeat_throughput_->set(throughput); }

void WorkerMetrics::set_loss(double loss) { loss_->set(loss); }

void WorkerMetrics::set_memory(double activation_bytes, double parameter_bytes) {
  activation_bytes_->set(activation_bytes);
  parameter_bytes_->set(parameter_bytes);
}

// Registered on first use: only real-data cases (imagefolder, cityscapes, bertpretraining) have input series.
void WorkerMetrics::set_input_pipeline_throughput(double images_per_second) {
  if (input_pipeline_throughput_ == nullptr) {
    input_pipeline_throughput_ = &registry_
                                      .gauge("dlbench_worker_input_pipeline_images_per_second",
                                             "Images per second this rank's input pipeline decodes and augments on its own "
                                             "(training idle), measured before the warm-up.")
                                      .add(labels_);
  }
  input_pipeline_throughput_->set(images_per_second);
}

void WorkerMetrics::on_input_wait(double seconds) {
  if (input_wait_seconds_ == nullptr) {
    input_wait_seconds_ = &registry_
                               .counter("dlbench_worker_input_wait_seconds_total",
                                        "Time training steps spent waiting for the next input batch (warm-up included).")
                               .add(labels_);
  }
  input_wait_seconds_->increment(std::max(seconds, 0.0));
}

void WorkerMetrics::set_input_verdict(double wait_share, bool input_bound) {
  if (input_wait_share_ == nullptr) {
    input_wait_share_ = &registry_
                             .gauge("dlbench_worker_input_wait_share",
                                    "Share of the measured time the steps waited for input, 0 to 1 (set when the case ends).")
                             .add(labels_);
    input_bound_ = &registry_
                        .gauge("dlbench_worker_input_bound",
                               "1 when the case was input-bound (waited for input more than 10 % of the measured time), "
                               "else 0.")
                        .add(labels_);
  }
  input_wait_share_->set(wait_share);
  input_bound_->set(input_bound ? 1.0 : 0.0);
}

void WorkerMetrics::finished(bool succeeded) { set_phase(succeeded ? "done" : "failed"); }

}  // namespace dlbench::worker
