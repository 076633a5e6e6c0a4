#include "kube_client.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include <httplib.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <yaml-cpp/yaml.h>

#include "dlbench/core/api_rules.hpp"

namespace dlbench::operator_ {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string base64_decode(const std::string& text) {
  static const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  unsigned buffer = 0;
  int bits = 0;
  for (const char c : text) {
    if (c == '=' || c == '\n' || c == '\r' || c == ' ') continue;
    const auto v = alphabet.find(c);
    if (v == std::string::npos) throw std::runtime_error("kubeconfig: invalid base64 data");
    buffer = (buffer << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buffer >> bits) & 0xFF));
    }
  }
  return out;
}

// "x-data" (base64) or "x" (a file, relative to the kubeconfig's folder).
std::string data_or_file(const YAML::Node& node, const std::string& key, const std::filesystem::path& base) {
  if (node[key + "-data"]) return base64_decode(node[key + "-data"].as<std::string>());
  if (node[key]) {
    std::filesystem::path p = node[key].as<std::string>();
    return read_file((p.is_absolute() ? p : base / p).string());
  }
  return "";
}

YAML::Node named(const YAML::Node& list, const std::string& name, const std::string& what) {
  for (const auto& entry : list) {
    if (entry["name"] && entry["name"].as<std::string>() == name) return entry;
  }
  throw std::runtime_error("kubeconfig: no " + what + " named \"" + name + "\"");
}

// Frees an OpenSSL object with its own free function.
template <typename T, void (*Free)(T*)>
struct OpenSslDeleter {
  void operator()(T* p) const { Free(p); }
};
using X509Ptr = std::unique_ptr<X509, OpenSslDeleter<X509, X509_free>>;
using KeyPtr = std::unique_ptr<EVP_PKEY, OpenSslDeleter<EVP_PKEY, EVP_PKEY_free>>;

std::vector<X509Ptr> read_certificates(const std::string& pem, const std::string& what) {
  std::unique_ptr<BIO, OpenSslDeleter<BIO, BIO_free_all>> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  std::vector<X509Ptr> out;
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) out.emplace_back(cert);
  ERR_clear_error();  // the end of the PEM text reads as an error
  if (out.empty()) throw std::runtime_error("kubeconfig: " + what + " holds no PEM certificate");
  return out;
}

// The API server's scheme, host and port from "https://host:port" (or http:// for the test API server).
struct ServerAddress {
  bool tls = true;
  std::string host;
  int port = 443;
};

ServerAddress parse_server(const std::string& server) {
  ServerAddress a;
  std::string rest = server;
  if (rest.starts_with("https://")) {
    rest = rest.substr(8);
  } else if (rest.starts_with("http://")) {
    a.tls = false;
    a.port = 80;
    rest = rest.substr(7);
  } else {
    throw std::runtime_error("kubeconfig: server \"" + server + "\" is neither https:// nor http://");
  }
  rest = rest.substr(0, rest.find('/'));
  const auto colon = rest.rfind(':');
  const bool bracketed = rest.starts_with('[');  // [::1]:6443
  if (colon != std::string::npos && (!bracketed || colon > rest.find(']'))) {
    const auto port = whole_number(rest.substr(colon + 1), {1, 65535});
    if (!port) throw std::runtime_error("kubeconfig: server \"" + server + "\": the port is not a number in 1..65535");
    a.port = static_cast<int>(*port);
    rest = rest.substr(0, colon);
  }
  if (bracketed) rest = rest.substr(1, rest.size() - 2);
  if (rest.empty()) throw std::runtime_error("kubeconfig: server \"" + server + "\" names no host");
  a.host = rest;
  return a;
}

// cpp-httplib, synchronous on the caller's thread: one connection per request (a watch holds
// its own for its whole life). TLS is always verified: against the cluster's CA when the
// kubeconfig gives one, else the system's.
class HttplibTransport final : public HttpTransport {
 public:
  HttplibTransport(KubeConfig config, std::chrono::seconds timeout)
      : config_(std::move(config)), address_(parse_server(config_.server)), timeout_(timeout) {
    if (!config_.ca_pem.empty()) ca_ = read_certificates(config_.ca_pem, "certificate-authority");
    if (!config_.client_cert_pem.empty()) {
      auto chain = read_certificates(config_.client_cert_pem, "client-certificate");
      client_cert_ = std::move(chain.front());
      std::unique_ptr<BIO, OpenSslDeleter<BIO, BIO_free_all>> bio(
          BIO_new_mem_buf(config_.client_key_pem.data(), static_cast<int>(config_.client_key_pem.size())));
      client_key_.reset(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
      ERR_clear_error();
      if (!client_key_) throw std::runtime_error("kubeconfig: client-key holds no PEM private key");
    }
  }

  HttpResponse request(const std::string& method, const std::string& path, const std::string& body,
                       const std::string& content_type) override {
    auto client = make_client(timeout_);
    const httplib::Headers headers = request_headers();
    const auto send = [&]() -> httplib::Result {
      if (method == "GET") return client->Get(path, headers);
      if (method == "POST") return client->Post(path, headers, body, content_type);
      if (method == "PUT") return client->Put(path, headers, body, content_type);
      if (method == "PATCH") return client->Patch(path, headers, body, content_type);
      if (method == "DELETE") return client->Delete(path, headers, body, content_type);
      throw std::invalid_argument("HTTP method " + method + " is not one the client sends");
    };
    const httplib::Result r = send();
    if (!r) throw std::runtime_error(method + " " + path + ": " + httplib::to_string(r.error()));
    return {r->status, r->body};
  }

  int stream(const std::string& path, std::chrono::seconds silence_limit,
             const std::function<bool(const std::string&)>& on_line) override {
    // The read timeout bounds each wait for bytes: the silence allowed, not the stream's length.
    auto client = make_client(silence_limit);
    int status = 0;
    bool stopped = false;
    std::string pending;  // a line not yet ended, or a refusal's whole body
    auto heard = std::chrono::steady_clock::now();
    const auto r = client->Get(
        path, request_headers(),
        [&](const httplib::Response& response) {
          status = response.status;
          heard = std::chrono::steady_clock::now();
          return true;
        },
        [&](const char* data, std::size_t size) {
          heard = std::chrono::steady_clock::now();
          pending.append(data, size);
          if (status != 200) return true;  // said in one piece below
          std::size_t start = 0;
          for (auto end = pending.find('\n'); end != std::string::npos; end = pending.find('\n', start)) {
            std::string line = pending.substr(start, end - start);
            start = end + 1;
            if (!line.empty() && line.back() == '\r') line.pop_back();
            if (!line.empty() && !on_line(line)) {
              stopped = true;
              return false;
            }
          }
          pending.erase(0, start);
          return true;
        });
    if (stopped) return 200;
    const auto silent = std::chrono::steady_clock::now() - heard;
    if (!r && r.error() == httplib::Error::Read && silent >= silence_limit - std::chrono::milliseconds(500)) {
      throw WatchStalled("GET " + path + ": the API server sent nothing for " +
                         std::to_string(std::chrono::duration_cast<std::chrono::seconds>(silent).count()) +
                         " s (a watch may be silent for " + std::to_string(silence_limit.count()) + " s)");
    }
    if (!r && status == 0) throw std::runtime_error("GET " + path + ": " + httplib::to_string(r.error()));
    if (status != 200) {
      on_line(pending);
      return status;
    }
    if (!r) throw std::runtime_error("GET " + path + ": " + httplib::to_string(r.error()));  // dropped mid-stream
    if (!pending.empty()) on_line(pending);
    return 200;
  }

 private:
  std::unique_ptr<httplib::ClientImpl> make_client(std::chrono::seconds timeout) {
    std::unique_ptr<httplib::ClientImpl> client;
    if (address_.tls) {
      auto tls = client_cert_ ? std::make_unique<httplib::SSLClient>(address_.host, address_.port, client_cert_.get(),
                                                                     client_key_.get())
                              : std::make_unique<httplib::SSLClient>(address_.host, address_.port);
      if (!tls->is_valid()) throw std::runtime_error("TLS: cannot set up a client for " + config_.server);
      if (!ca_.empty()) {
        X509_STORE* store = X509_STORE_new();  // the client's context takes it
        for (const auto& cert : ca_) X509_STORE_add_cert(store, cert.get());
        tls->set_ca_cert_store(store);
      }
      tls->enable_server_certificate_verification(true);  // never off
      client = std::move(tls);
    } else {
      client = std::make_unique<httplib::ClientImpl>(address_.host, address_.port);
    }
    client->set_connection_timeout(timeout);
    client->set_read_timeout(timeout);
    client->set_write_timeout(timeout);
    return client;
  }

  httplib::Headers request_headers() {
    std::lock_guard lock(mutex_);
    const auto now = std::chrono::steady_clock::now();
    if (!config_.token_file.empty() && now - token_read_ > std::chrono::minutes(5)) {
      config_.token = read_file(config_.token_file);  // projected tokens rotate: re-read
      while (!config_.token.empty() && (config_.token.back() == '\n' || config_.token.back() == ' ')) config_.token.pop_back();
      token_read_ = now;
    }
    httplib::Headers headers{{"Accept", "application/json"}};
    if (!config_.token.empty()) headers.emplace("Authorization", "Bearer " + config_.token);
    return headers;
  }

  KubeConfig config_;
  ServerAddress address_;
  std::chrono::seconds timeout_;
  std::vector<X509Ptr> ca_;
  X509Ptr client_cert_;
  KeyPtr client_key_;
  std::mutex mutex_;
  std::chrono::steady_clock::time_point token_read_{};
};

}  // namespace

KubeConfig load_kubeconfig(const std::string& path, const std::string& context_name) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw std::runtime_error("kubeconfig " + path + ": " + e.what());
  }
  const std::string context = context_name.empty() ? root["current-context"].as<std::string>("") : context_name;
  if (context.empty()) throw std::runtime_error("kubeconfig " + path + ": no current-context");
  const YAML::Node ctx = named(root["contexts"], context, "context")["context"];
  const YAML::Node cluster = named(root["clusters"], ctx["cluster"].as<std::string>(), "cluster")["cluster"];
  const std::filesystem::path base = std::filesystem::path(path).parent_path();
  KubeConfig c;
  c.server = cluster["server"].as<std::string>();
  c.ca_pem = data_or_file(cluster, "certificate-authority", base);
  if (ctx["namespace"]) c.namespace_ = ctx["namespace"].as<std::string>();
  if (ctx["user"]) {
    const YAML::Node user = named(root["users"], ctx["user"].as<std::string>(), "user")["user"];
    if (user) {
      c.client_cert_pem = data_or_file(user, "client-certificate", base);
      c.client_key_pem = data_or_file(user, "client-key", base);
      if (user["token"]) c.token = user["token"].as<std::string>();
      if (user["tokenFile"]) c.token_file = user["tokenFile"].as<std::string>();
    }
  }
  return c;
}

KubeConfig in_cluster_config(const std::string& service_account_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || port == nullptr) throw std::runtime_error("not in a cluster: KUBERNETES_SERVICE_HOST/PORT unset");
  KubeConfig c;
  const std::string h = host;
  c.server = "https://" + (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + port;
  c.ca_pem = read_file(service_account_dir + "/ca.crt");
  c.token_file = service_account_dir + "/token";
  if (std::filesystem::exists(service_account_dir + "/namespace")) c.namespace_ = read_file(service_account_dir + "/namespace");
  return c;
}

KubeConfig resolve_kube_config(const std::string& flag) {
  if (!flag.empty()) return load_kubeconfig(flag);
  if (const char* env = std::getenv("KUBECONFIG"); env != nullptr && *env != '\0') {
    const std::string first = std::string(env).substr(0, std::string(env).find(':'));
    return load_kubeconfig(first);
  }
  if (const char* home = std::getenv("HOME")) {
    const std::string path = std::string(home) + "/.kube/config";
    if (std::filesystem::exists(path)) return load_kubeconfig(path);
  }
  return in_cluster_config();
}

std::shared_ptr<HttpTransport> make_http_transport(const KubeConfig& config, std::chrono::seconds timeout) {
  return std::make_shared<HttplibTransport>(config, timeout);
}

std::string Resource::path(const std::string& ns, const std::string& name, const std::string& subresource) const {
  std::string p = group.empty() ? "/api/" + version : "/apis/" + group + "/" + version;
  if (namespaced && !ns.empty()) p += "/namespaces/" + ns;
  p += "/" + plural;
  if (!name.empty()) p += "/" + name;
  if (!subresource.empty()) p += "/" + subresource;
  return p;
}

namespace resources {
const Resource kBenchmarkRuns{"dlbench.io", "v1alpha1", "benchmarkruns"};
const Resource kPods{"", "v1", "pods"};
const Resource kServices{"", "v1", "services"};
const Resource kConfigMaps{"", "v1", "configmaps"};
const Resource kSecrets{"", "v1", "secrets"};
const Resource kJobs{"batch", "v1", "jobs"};
const Resource kPodDisruptionBudgets{"policy", "v1", "poddisruptionbudgets"};
const Resource kEvents{"", "v1", "events"};
const Resource kLeases{"coordination.k8s.io", "v1", "leases"};
}  // namespace resources

std::string url_encode(const std::string& text) {
  std::string out;
  for (const char signed_c : text) {
    const auto c = static_cast<unsigned char>(signed_c);
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

nlohmann::json KubeClient::checked(const HttpResponse& response) {
  nlohmann::json body = nlohmann::json::parse(response.body, nullptr, false);
  if (response.status >= 200 && response.status < 300) return body;
  std::string reason = "Unknown", message = response.body;
  if (body.is_object()) {
    reason = body.value("reason", reason);
    message = body.value("message", message);
  }
  throw KubeError(response.status, reason, message);
}

nlohmann::json KubeClient::get(const Resource& r, const std::string& ns, const std::string& name) {
  return checked(http_->request("GET", r.path(ns, name)));
}

std::optional<nlohmann::json> KubeClient::find(const Resource& r, const std::string& ns, const std::string& name) {
  const auto response = http_->request("GET", r.path(ns, name));
  if (response.status == 404) return std::nullopt;
  return checked(response);
}

bool KubeClient::serves(const std::string& api_version, const std::string& plural) {
  nlohmann::json list;
  try {
    list = checked(http_->request("GET", "/apis/" + api_version));
  } catch (const KubeError& e) {
    if (e.status == 404) return false;
    throw;
  }
  for (const auto& r : list.value("resources", nlohmann::json::array())) {
    if (r.value("name", "") == plural) return true;
  }
  return false;
}

nlohmann::json KubeClient::list(const Resource& r, const std::string& ns, const std::string& label_selector) {
  std::string path = r.path(ns);
  if (!label_selector.empty()) path += "?labelSelector=" + url_encode(label_selector);
  return checked(http_->request("GET", path));
}

nlohmann::json KubeClient::create(const Resource& r, const std::string& ns, const nlohmann::json& object) {
  return checked(http_->request("POST", r.path(ns), object.dump()));
}

nlohmann::json KubeClient::merge_patch(const Resource& r, const std::string& ns, const std::string& name,
                                       const nlohmann::json& patch, const std::string& subresource) {
  return checked(http_->request("PATCH", r.path(ns, name, subresource), patch.dump(), "application/merge-patch+json"));
}

bool KubeClient::remove(const Resource& r, const std::string& ns, const std::string& name) {
  const auto response = http_->request("DELETE", r.path(ns, name) + "?propagationPolicy=Background");
  if (response.status == 404) return false;
  checked(response);
  return true;
}

std::string KubeClient::watch(const Resource& r, const std::string& ns, const std::string& label_selector,
                              const std::string& resource_version, std::chrono::seconds timeout,
                              const std::function<void(const WatchEvent&)>& on_event) {
  std::string path = r.path(ns) + "?watch=true&allowWatchBookmarks=true&timeoutSeconds=" + std::to_string(timeout.count());
  if (!resource_version.empty()) path += "&resourceVersion=" + resource_version;
  if (!label_selector.empty()) path += "&labelSelector=" + url_encode(label_selector);
  std::string last = resource_version;
  std::string error_body;
  const int status = http_->stream(path, timeout + kWatchSilenceMargin, [&](const std::string& line) {
    const auto event = nlohmann::json::parse(line, nullptr, false);
    if (event.is_discarded() || !event.contains("type")) {
      error_body = line;
      return true;
    }
    const std::string type = event["type"];
    if (type == "ERROR") {
      const auto& o = event["object"];
      throw KubeError(o.value("code", 500), o.value("reason", "Unknown"), o.value("message", ""));
    }
    last = event["object"]["metadata"].value("resourceVersion", last);
    on_event({type, event["object"]});
    return true;
  });
  if (status != 200) {
    const auto body = nlohmann::json::parse(error_body, nullptr, false);
    throw KubeError(status, body.is_object() ? body.value("reason", "Unknown") : "Unknown",
                    body.is_object() ? body.value("message", error_body) : error_body);
  }
  return last;
}

}  // namespace dlbench::operator_
