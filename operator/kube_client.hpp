// The operator's Kubernetes client: kubeconfig and in-cluster configuration, one small HTTP
// interface (cpp-httplib behind it), and typed paths over raw JSON for the resources it uses.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace dlbench::operator_ {

struct KubeConfig {
  std::string server;  // https://host:port (http:// only for the test API server)
  std::string ca_pem;  // the cluster's CA; TLS is always verified
  std::string client_cert_pem, client_key_pem;
  std::string token;       // bearer token, when set
  std::string token_file;  // re-read at least every 5 minutes (projected tokens rotate)
  std::string namespace_ = "default";
};

// --kubeconfig PATH, else $KUBECONFIG, else ~/.kube/config, else in-cluster. Throws
// std::runtime_error saying which source failed and why.
KubeConfig resolve_kube_config(const std::string& kubeconfig_flag = "");
KubeConfig load_kubeconfig(const std::string& path, const std::string& context = "");
KubeConfig in_cluster_config(const std::string& service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

struct HttpResponse {
  int status = 0;
  std::string body;
};

class HttpTransport {
 public:
  virtual ~HttpTransport() = default;
  virtual HttpResponse request(const std::string& method, const std::string& path, const std::string& body = "",
                               const std::string& content_type = "application/json") = 0;
  // A long-lived GET (watch): calls on_line for every line until the server ends the stream
  // or on_line returns false. Returns the HTTP status. Throws WatchStalled when the server sends
  // nothing for `silence_limit`.
  virtual int stream(const std::string& path, std::chrono::seconds silence_limit,
                     const std::function<bool(const std::string&)>& on_line) = 0;
};

// A stream on which the API server sent nothing, not even its end, for longer than it was asked
// to last plus kWatchSilenceMargin: a hung server, or a network path that drops packets. A
// connection to a stopped server is accepted by its kernel and then waits forever.
class WatchStalled : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
inline constexpr std::chrono::seconds kWatchSilenceMargin{5};

std::shared_ptr<HttpTransport> make_http_transport(const KubeConfig& config, std::chrono::seconds timeout);

// A failed API call: the HTTP status and the API's Status reason (NotFound, AlreadyExists,
// Conflict, Expired, …).
class KubeError : public std::runtime_error {
 public:
  KubeError(int http_status, std::string status_reason, const std::string& message)
      : std::runtime_error(message), status(http_status), reason(std::move(status_reason)) {}
  int status;
  std::string reason;
};

struct Resource {
  std::string group, version, plural;
  bool namespaced = true;
  std::string path(const std::string& ns, const std::string& name = "", const std::string& subresource = "") const;
};

namespace resources {
extern const Resource kBenchmarkRuns, kPods, kServices, kConfigMaps, kSecrets, kJobs, kPodDisruptionBudgets, kEvents,
    kLeases;
}

class KubeClient {
 public:
  explicit KubeClient(std::shared_ptr<HttpTransport> transport) : http_(std::move(transport)) {}

  nlohmann::json get(const Resource& r, const std::string& ns, const std::string& name);
  // get, but nullopt where the API server answers 404: whether it holds the object, from it.
  std::optional<nlohmann::json> find(const Resource& r, const std::string& ns, const std::string& name);
  nlohmann::json list(const Resource& r, const std::string& ns, const std::string& label_selector = "");
  nlohmann::json create(const Resource& r, const std::string& ns, const nlohmann::json& object);
  nlohmann::json merge_patch(const Resource& r, const std::string& ns, const std::string& name,
                             const nlohmann::json& patch, const std::string& subresource = "");
  // Whether the API server serves `plural` in `api_version` ("group/version"), by discovery: a
  // CRD that is not installed is not served.
  bool serves(const std::string& api_version, const std::string& plural);
  // Deletes; false when it was already gone.
  bool remove(const Resource& r, const std::string& ns, const std::string& name);

  struct WatchEvent {
    std::string type;  // ADDED, MODIFIED, DELETED, BOOKMARK
    nlohmann::json object;
  };
  // Watches from `resource_version` (bookmarks on) until the server closes the stream after
  // `timeout`; returns the last resourceVersion seen. Throws WatchStalled after `timeout` +
  // kWatchSilenceMargin without a byte from the server. Throws KubeError 410 "Expired" when the
  // version is too old (relist), whether the server says so by status or by an ERROR event.
  std::string watch(const Resource& r, const std::string& ns, const std::string& label_selector,
                    const std::string& resource_version, std::chrono::seconds timeout,
                    const std::function<void(const WatchEvent&)>& on_event);

 private:
  nlohmann::json checked(const HttpResponse& response);
  std::shared_ptr<HttpTransport> http_;
};

std::string url_encode(const std::string& text);

}  // namespace dlbench::operator_
