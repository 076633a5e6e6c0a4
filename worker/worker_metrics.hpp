// What dlbench-worker shows Prometheus while it runs. Base units, one dlbench_ prefix, small
// label sets: run, case, model, precision, rank.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dlbench/metrics/metrics.hpp"

namespace dlbench::worker {

struct WorkerIdentity {
  std::string run, case_id, model, precision, backend, communicator, version, library_versions;
  int rank = 0;
  long global_batch_size = 1;
  // The throughput's unit, as the result says it: "samples/s", or "sequences/s" for a sequence model.
  std::string throughput_unit = "samples/s";
};

class WorkerMetrics {
 public:
  WorkerMetrics(const WorkerIdentity& id, int port);
  int port() const { return server_->port(); }
  const metrics::Registry& registry() const { return registry_; }

  void on_step(int repeat, bool measured, double seconds);
  void on_repeat(double throughput);
  // The loss after the repeat that just ended, set as it is: NaN or infinite when the training
  // diverged (the case then ends LossNotFinite).
  void set_loss(double loss);
  void set_memory(double activation_bytes, double parameter_bytes);
  // Real data (imagefolder, cityscapes, bertpretraining): the pipeline's own images/s, each step's wait for input, the case's verdict.
  void set_input_pipeline_throughput(double images_per_second);
  void on_input_wait(double seconds);
  void set_input_verdict(double wait_share, bool input_bound);
  void finished(bool succeeded);

 private:
  void set_phase(const std::string& phase);
  // The case's labels and one more (phase, kind).
  metrics::Labels labels_with(const std::string& key, const std::string& value) const;

  metrics::Registry registry_;
  metrics::Labels labels_;
  long global_batch_;
  metrics::Gauge* throughput_;
  metrics::Gauge* repeat_throughput_;
  metrics::Histogram* step_seconds_;
  metrics::Counter* warmup_steps_;
  metrics::Counter* measured_steps_;
  metrics::Gauge* loss_;
  metrics::Gauge* repeat_;
  metrics::Family<metrics::Gauge>* phase_;
  metrics::Gauge* activation_bytes_;
  metrics::Gauge* parameter_bytes_;
  metrics::Gauge* input_pipeline_throughput_ = nullptr;
  metrics::Counter* input_wait_seconds_ = nullptr;
  metrics::Gauge* input_wait_share_ = nullptr;
  metrics::Gauge* input_bound_ = nullptr;
  std::unique_ptr<metrics::MetricsServer> server_;
};

}  // namespace dlbench::worker
