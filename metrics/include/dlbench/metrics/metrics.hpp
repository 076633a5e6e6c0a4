// Prometheus metrics without prometheus-cpp (not packaged for Debian bookworm): a registry of
// families — counters, gauges, histograms — rendered in the text exposition format 0.0.4.
// The surface follows prometheus-cpp's (Registry, Family<T>::Add(labels), Counter::Increment,
// Gauge::Set, Histogram::Observe) so that swapping it in later is mechanical.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

namespace dlbench::metrics {

using Labels = std::map<std::string, std::string>;

class Counter {
 public:
  void increment(double by = 1.0);  // by must be >= 0: counters only go up
  double value() const { return value_.load(); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v); }
  void increment(double by = 1.0);
  double value() const { return value_.load(); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending; +Inf is implicit
  void observe(double v);
  struct Snapshot {
    std::vector<double> upper_bounds;
    std::vector<std::uint64_t> cumulative_counts;  // one per bound, then +Inf
    double sum = 0;
    std::uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mutex_;
  std::vector<std::uint64_t> counts_;  // per bucket, not cumulative; last is +Inf
  double sum_ = 0;
};

// Exponential bucket bounds: start, start·factor, … (count bounds).
std::vector<double> exponential_buckets(double start, double factor, int count);

enum class MetricType { counter, gauge, histogram };

template <typename T>
class Family {
 public:
  Family(std::string name, std::string help, std::vector<double> buckets = {})
      : name_(std::move(name)), help_(std::move(help)), buckets_(std::move(buckets)) {}
  // The metric with these labels, created on first use; the reference stays valid until a
  // remove_matching() or remove() that removes it.
  T& add(const Labels& labels);
  // Forgets every member whose labels include all of `subset` (a deleted run's series), so that
  // cardinality follows what exists. Returns how many went.
  std::size_t remove_matching(const Labels& subset);
  // Forgets the member with exactly these labels; whether there was one.
  bool remove(const Labels& labels);
  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  // Shared: a scrape that holds a member outlives its removal.
  std::vector<std::pair<Labels, std::shared_ptr<const T>>> members() const;

 private:
  std::string name_, help_;
  std::vector<double> buckets_;
  mutable std::mutex mutex_;
  std::map<Labels, std::shared_ptr<T>> members_;
};

class Registry {
 public:
  // Names must match [a-zA-Z_:][a-zA-Z0-9_:]*; counters must end in _total. Throws
  // std::invalid_argument otherwise, or when the name is taken by another family.
  Family<Counter>& counter(const std::string& name, const std::string& help);
  Family<Gauge>& gauge(const std::string& name, const std::string& help);
  Family<Histogram>& histogram(const std::string& name, const std::string& help, std::vector<double> buckets);

  // The text exposition format, version 0.0.4.
  std::string serialize() const;

 private:
  void claim(const std::string& name, MetricType type);
  mutable std::mutex mutex_;
  std::vector<std::pair<MetricType, std::string>> order_;
  std::map<std::string, std::unique_ptr<Family<Counter>>> counters_;
  std::map<std::string, std::unique_ptr<Family<Gauge>>> gauges_;
  std::map<std::string, std::unique_ptr<Family<Histogram>>> histograms_;
};

// Exposition escaping: label values escape \, " and newline; HELP escapes \ and newline.
std::string escape_label_value(const std::string& value);
std::string escape_help(const std::string& help);
// Go's strconv formatting as Prometheus reads it: +Inf, -Inf, NaN, shortest round-trip.
std::string format_value(double value);

// Serves GET /metrics (the registry), /healthz and /readyz on a loopback-or-any port from a
// background thread. Port 0 picks a free one (see port()).
class MetricsServer {
 public:
  MetricsServer(const Registry& registry, int port, const std::string& bind_address = "0.0.0.0");
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  int port() const { return port_; }
  void set_ready(bool ready) { ready_ = ready; }

 private:
  void serve();
  const Registry& registry_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> ready_{true};
  std::unique_ptr<std::thread> thread_;
};

}  // namespace dlbench::metrics
