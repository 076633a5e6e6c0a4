#include "kube_client.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include <cpprest/http_client.h>
#include <cpprest/rawptrstream.h>
#include <yaml-cpp/yaml.h>

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

class CppRestTransport final : public HttpTransport {
 public:
  CppRestTransport(KubeConfig config, std::chrono::seconds timeout) : config_(std::move(config)), timeout_(timeout) {}

  HttpResponse request(const std::string& method, const std::string& path, const std::string& body,
                       const std::string& content_type) override {
    auto client = make_client(timeout_);
    web::http::http_request req(utility::conversions::to_string_t(method));
    req.set_request_uri(utility::conversions::to_string_t(path));
    authorize(req);
    if (!body.empty()) req.set_body(body, content_type);
    const auto response = client.request(req).get();
    return {response.status_code(), response.extract_utf8string(true).get()};
  }

  int stream(const std::string& path, const std::function<bool(const std::string&)>& on_line) override {
    auto client = make_client(timeout_ + std::chrono::seconds(3600));
    web::http::http_request req(web::http::methods::GET);
    req.set_request_uri(utility::conversions::to_string_t(path));
    authorize(req);
    const auto response = client.request(req).get();
    if (response.status_code() != 200) {
      const std::string body = response.extract_utf8string(true).get();
      on_line(body);
      return response.status_code();
    }
    auto body = response.body();
    while (true) {
      concurrency::streams::container_buffer<std::string> line;
      body.read_line(line).get();
      if (!line.collection().empty() && !on_line(line.collection())) break;
      if (body.is_eof()) break;
    }
    return 200;
  }

 private:
  web::http::client::http_client make_client(std::chrono::seconds timeout) {
    web::http::client::http_client_config c;
    c.set_timeout(timeout);
    c.set_validate_certificates(true);  // never off
    const std::string ca = config_.ca_pem, cert = config_.client_cert_pem, key = config_.client_key_pem;
    if (!ca.empty() || !cert.empty()) {
      c.set_ssl_context_callback([ca, cert, key](boost::asio::ssl::context& ctx) {
        if (!ca.empty()) ctx.add_certificate_authority(boost::asio::buffer(ca));
        if (!cert.empty()) ctx.use_certificate_chain(boost::asio::buffer(cert));
        if (!key.empty()) ctx.use_private_key(boost::asio::buffer(key), boost::asio::ssl::context::pem);
      });
    }
    return web::http::client::http_client(utility::conversions::to_string_t(config_.server), c);
  }

  void authorize(web::http::http_request& req) {
    std::lock_guard lock(mutex_);
    const auto now = std::chrono::steady_clock::now();
    if (!config_.token_file.empty() && now - token_read_ > std::chrono::minutes(5)) {
      config_.token = read_file(config_.token_file);  // projected tokens rotate: re-read
      while (!config_.token.empty() && (config_.token.back() == '\n' || config_.token.back() == ' ')) config_.token.pop_back();
      token_read_ = now;
    }
    if (!config_.token.empty()) req.headers().add(U("Authorization"), utility::conversions::to_string_t("Bearer " + config_.token));
    req.headers().add(U("Accept"), U("application/json"));
  }

  KubeConfig config_;
  std::chrono::seconds timeout_;
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
  return std::make_shared<CppRestTransport>(config, timeout);
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
  const int status = http_->stream(path, [&](const std::string& line) {
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
