#include "dlbench/metrics/metrics.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <regex>
#include <sstream>
#include <stdexcept>

namespace dlbench::metrics {

void Counter::increment(double by) {
  if (!(by >= 0)) throw std::invalid_argument("a counter cannot go down");
  double current = value_.load();
  while (!value_.compare_exchange_weak(current, current + by)) {
  }
}

void Gauge::increment(double by) {
  double current = value_.load();
  while (!value_.compare_exchange_weak(current, current + by)) {
  }
}

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)) {
  if (!std::is_sorted(bounds_.begin(), bounds_.end()) ||
      std::adjacent_find(bounds_.begin(), bounds_.end()) != bounds_.end()) {
    throw std::invalid_argument("histogram bucket bounds must be strictly ascending");
  }
  counts_.assign(bounds_.size() + 1, 0);
}

void Histogram::observe(double v) {
  const auto bucket = static_cast<std::size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  std::lock_guard lock(mutex_);
  ++counts_[bucket];
  sum_ += v;
}

Histogram::Snapshot Histogram::snapshot() const {
  std::lock_guard lock(mutex_);
  Snapshot s;
  s.upper_bounds = bounds_;
  std::uint64_t running = 0;
  for (const auto c : counts_) {
    running += c;
    s.cumulative_counts.push_back(running);
  }
  s.sum = sum_;
  s.count = running;
  return s;
}

std::vector<double> exponential_buckets(double start, double factor, int count) {
  if (!(start > 0) || !(factor > 1) || count < 1) throw std::invalid_argument("exponential_buckets: bad arguments");
  std::vector<double> bounds;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) bounds.push_back(v);
  return bounds;
}

template <typename T>
T& Family<T>::add(const Labels& labels) {
  static const std::regex label_name("^[a-zA-Z_][a-zA-Z0-9_]*$");
  std::lock_guard lock(mutex_);
  auto it = members_.find(labels);
  if (it != members_.end()) return *it->second;
  for (const auto& [key, value] : labels) {
    if (!std::regex_match(key, label_name) || key.starts_with("__")) {
      throw std::invalid_argument("metric " + name_ + ": invalid label name \"" + key + "\"");
    }
    if (key == "le" && std::is_same_v<T, Histogram>) {
      throw std::invalid_argument("metric " + name_ + ": label \"le\" is reserved for histogram buckets");
    }
  }
  std::unique_ptr<T> metric;
  if constexpr (std::is_same_v<T, Histogram>) {
    metric = std::make_unique<T>(buckets_);
  } else {
    metric = std::make_unique<T>();
  }
  T& ref = *metric;
  members_.emplace(labels, std::move(metric));
  return ref;
}

template <typename T>
std::vector<std::pair<Labels, std::shared_ptr<const T>>> Family<T>::members() const {
  std::lock_guard lock(mutex_);
  std::vector<std::pair<Labels, std::shared_ptr<const T>>> out;
  for (const auto& [labels, metric] : members_) out.emplace_back(labels, metric);
  return out;
}

template <typename T>
std::size_t Family<T>::remove_matching(const Labels& subset) {
  std::lock_guard lock(mutex_);
  return std::erase_if(members_, [&](const auto& member) {
    return std::all_of(subset.begin(), subset.end(), [&](const auto& kv) {
      const auto it = member.first.find(kv.first);
      return it != member.first.end() && it->second == kv.second;
    });
  });
}

template <typename T>
bool Family<T>::remove(const Labels& labels) {
  std::lock_guard lock(mutex_);
  return members_.erase(labels) > 0;
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

void Registry::claim(const std::string& name, MetricType type) {
  static const std::regex metric_name("^[a-zA-Z_:][a-zA-Z0-9_:]*$");
  if (!std::regex_match(name, metric_name)) throw std::invalid_argument("invalid metric name \"" + name + "\"");
  if (type == MetricType::counter && !name.ends_with("_total")) {
    throw std::invalid_argument("counter \"" + name + "\" must end in _total");
  }
  for (const auto& [t, n] : order_) {
    if (n == name) throw std::invalid_argument("metric \"" + name + "\" is registered twice");
  }
  order_.emplace_back(type, name);
}

Family<Counter>& Registry::counter(const std::string& name, const std::string& help) {
  std::lock_guard lock(mutex_);
  claim(name, MetricType::counter);
  return *counters_.emplace(name, std::make_unique<Family<Counter>>(name, help)).first->second;
}

Family<Gauge>& Registry::gauge(const std::string& name, const std::string& help) {
  std::lock_guard lock(mutex_);
  claim(name, MetricType::gauge);
  return *gauges_.emplace(name, std::make_unique<Family<Gauge>>(name, help)).first->second;
}

Family<Histogram>& Registry::histogram(const std::string& name, const std::string& help, std::vector<double> buckets) {
  std::lock_guard lock(mutex_);
  claim(name, MetricType::histogram);
  Histogram probe(buckets);  // validates the bounds now, not at first use
  return *histograms_.emplace(name, std::make_unique<Family<Histogram>>(name, help, std::move(buckets))).first->second;
}

namespace {

// Exposition escaping: backslash and newline always, double quotes inside label values.
std::string escape(const std::string& text, bool quotes) {
  std::string out;
  for (const char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quotes) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string escape_label_value(const std::string& value) { return escape(value, true); }

std::string escape_help(const std::string& help) { return escape(help, false); }

std::string format_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, end);
}

namespace {

std::string label_set(const Labels& labels, const std::string& extra_key = "", const std::string& extra_value = "") {
  if (labels.empty() && extra_key.empty()) return "";
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : labels) {
    out += (first ? "" : ",") + k + "=\"" + escape_label_value(v) + "\"";
    first = false;
  }
  if (!extra_key.empty()) out += (first ? "" : ",") + extra_key + "=\"" + extra_value + "\"";
  return out + "}";
}

}  // namespace

namespace {

template <typename T>
void serialize_scalar(std::ostringstream& out, const Family<T>& family, const char* type) {
  const std::string& name = family.name();
  out << "# HELP " << name << " " << escape_help(family.help()) << "\n# TYPE " << name << " " << type << "\n";
  for (const auto& [labels, m] : family.members()) out << name << label_set(labels) << " " << format_value(m->value()) << "\n";
}

}  // namespace

std::string Registry::serialize() const {
  std::lock_guard lock(mutex_);
  std::ostringstream out;
  for (const auto& [type, name] : order_) {
    switch (type) {
      case MetricType::counter:
        serialize_scalar(out, *counters_.at(name), "counter");
        break;
      case MetricType::gauge:
        serialize_scalar(out, *gauges_.at(name), "gauge");
        break;
      case MetricType::histogram: {
        const auto& family = *histograms_.at(name);
        out << "# HELP " << name << " " << escape_help(family.help()) << "\n# TYPE " << name << " histogram\n";
        for (const auto& [labels, m] : family.members()) {
          const auto s = m->snapshot();
          for (std::size_t i = 0; i < s.upper_bounds.size(); ++i) {
            out << name << "_bucket" << label_set(labels, "le", format_value(s.upper_bounds[i])) << " "
                << s.cumulative_counts[i] << "\n";
          }
          out << name << "_bucket" << label_set(labels, "le", "+Inf") << " " << s.count << "\n";
          out << name << "_sum" << label_set(labels) << " " << format_value(s.sum) << "\n";
          out << name << "_count" << label_set(labels) << " " << s.count << "\n";
        }
        break;
      }
    }
  }
  return out.str();
}

MetricsServer::MetricsServer(const Registry& registry, int port, const std::string& bind_address) : registry_(registry) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw std::runtime_error(std::string("metrics: socket: ") + std::strerror(errno));
  const int on = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  if (inet_pton(AF_INET, bind_address.c_str(), &address.sin_addr) != 1) {
    close(listen_fd_);
    throw std::invalid_argument("metrics: bad bind address " + bind_address);
  }
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || listen(listen_fd_, 16) != 0) {
    const std::string reason = std::strerror(errno);
    close(listen_fd_);
    throw std::runtime_error("metrics: cannot listen on " + bind_address + ":" + std::to_string(port) + ": " + reason);
  }
  socklen_t length = sizeof address;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length);
  port_ = ntohs(address.sin_port);
  thread_ = std::make_unique<std::thread>([this] { serve(); });
}

MetricsServer::~MetricsServer() {
  stopping_ = true;
  if (thread_) thread_->join();
  close(listen_fd_);
}

void MetricsServer::serve() {
  while (!stopping_) {
    pollfd fd{listen_fd_, POLLIN, 0};
    if (poll(&fd, 1, 100) <= 0) continue;
    const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    timeval timeout{2, 0};
    setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    std::string request;
    char buffer[2048];
    while (request.find("\r\n\r\n") == std::string::npos && request.size() < 16384) {
      const ssize_t n = recv(client, buffer, sizeof buffer, 0);
      if (n <= 0) break;
      request.append(buffer, static_cast<std::size_t>(n));
    }
    const std::string line = request.substr(0, request.find("\r\n"));
    std::string status = "200 OK", type = "text/plain; charset=utf-8", body;
    if (line.starts_with("GET /metrics ") || line.starts_with("GET /metrics?")) {
      type = "text/plain; version=0.0.4; charset=utf-8";
      body = registry_.serialize();
    } else if (line.starts_with("GET /healthz ")) {
      body = "ok\n";
    } else if (line.starts_with("GET /readyz ")) {
      if (!ready_) status = "503 Service Unavailable";
      body = ready_ ? "ready\n" : "not ready\n";
    } else if (!line.starts_with("GET ")) {
      status = "405 Method Not Allowed";
      body = "only GET\n";
    } else {
      status = "404 Not Found";
      body = "try /metrics, /healthz or /readyz\n";
    }
    const std::string response = "HTTP/1.1 " + status + "\r\nContent-Type: " + type + "\r\nContent-Length: " +
                                 std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    std::size_t sent = 0;
    while (sent < response.size()) {
      const ssize_t n = send(client, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<std::size_t>(n);
    }
    close(client);
  }
}

}  // namespace dlbench::metrics
