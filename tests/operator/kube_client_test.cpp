// The Kubernetes client against tests/k8s/test_apiserver.py, and configuration loading.
#include <signal.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../support/process.hpp"
#include "kube_client.hpp"

namespace dlbench::operator_ {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

class KubeClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new testing::ListeningProcess({"python3", DLBENCH_TEST_APISERVER, "--history", "30"});
    port_ = server_->port();
    KubeConfig config;
    config.server = "http://127.0.0.1:" + std::to_string(port_);
    client_ = new KubeClient(make_http_transport(config, 10s));
    for (int i = 0; i < 100; ++i) {  // until it listens
      try {
        client_->list(resources::kConfigMaps, "default");
        return;
      } catch (const std::exception&) {
        std::this_thread::sleep_for(50ms);
      }
    }
  }
  static void TearDownTestSuite() {
    delete client_;
    delete server_;
  }
  static json config_map(const std::string& name, json labels = json::object()) {
    return {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", {{"name", name}, {"labels", labels}}}};
  }
  static inline int port_ = 0;
  static inline testing::ListeningProcess* server_ = nullptr;
  static inline KubeClient* client_ = nullptr;
};

TEST_F(KubeClientTest, CrudAndSelectors) {
  KubeClient& k = *client_;
  const json created = k.create(resources::kConfigMaps, "default", config_map("a", {{"role", "worker"}}));
  EXPECT_FALSE(created["metadata"]["uid"].get<std::string>().empty());
  k.create(resources::kConfigMaps, "default", config_map("b", {{"role", "launcher"}}));
  EXPECT_EQ(k.get(resources::kConfigMaps, "default", "a")["metadata"]["labels"]["role"], "worker");
  const std::optional<json> found = k.find(resources::kConfigMaps, "default", "b");
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ((*found)["metadata"]["labels"]["role"], "launcher");
  EXPECT_EQ(k.find(resources::kConfigMaps, "default", "missing"), std::nullopt);
  const json workers = k.list(resources::kConfigMaps, "default", "role=worker");
  ASSERT_EQ(workers["items"].size(), 1u);
  EXPECT_EQ(workers["items"][0]["metadata"]["name"], "a");
  const json patched = k.merge_patch(resources::kConfigMaps, "default", "a", {{"data", {{"k", "v"}}}});
  EXPECT_EQ(patched["data"]["k"], "v");
  try {
    k.create(resources::kConfigMaps, "default", config_map("a"));
    FAIL() << "created twice";
  } catch (const KubeError& e) {
    EXPECT_EQ(e.status, 409);
    EXPECT_EQ(e.reason, "AlreadyExists");
  }
  EXPECT_TRUE(k.remove(resources::kConfigMaps, "default", "a"));
  EXPECT_FALSE(k.remove(resources::kConfigMaps, "default", "a"));
  try {
    k.get(resources::kConfigMaps, "default", "a");
    FAIL();
  } catch (const KubeError& e) {
    EXPECT_EQ(e.reason, "NotFound");
  }
}

TEST_F(KubeClientTest, DiscoverySaysWhetherACustomResourceIsServed) {
  KubeClient& k = *client_;
  EXPECT_FALSE(k.serves("scheduling.volcano.sh/v1beta1", "podgroups"));  // no such group version: 404
  const Resource crds{"apiextensions.k8s.io", "v1", "customresourcedefinitions", false};
  k.create(crds, "",
           {{"apiVersion", "apiextensions.k8s.io/v1"},
            {"kind", "CustomResourceDefinition"},
            {"metadata", {{"name", "podgroups.scheduling.volcano.sh"}}},
            {"spec",
             {{"group", "scheduling.volcano.sh"},
              {"scope", "Namespaced"},
              {"names", {{"plural", "podgroups"}, {"singular", "podgroup"}, {"kind", "PodGroup"}}},
              {"versions",
               {{{"name", "v1beta1"},
                 {"served", true},
                 {"storage", true},
                 {"schema", {{"openAPIV3Schema", {{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}}}}}}}}}}});
  EXPECT_TRUE(k.serves("scheduling.volcano.sh/v1beta1", "podgroups"));
  EXPECT_FALSE(k.serves("scheduling.volcano.sh/v1beta1", "queues"));  // the group, not this resource
  EXPECT_FALSE(k.serves("scheduling.x-k8s.io/v1alpha1", "podgroups"));
}

TEST_F(KubeClientTest, WatchDeliversEventsFromAVersionAndSaysWhenItIsGone) {
  KubeClient& k = *client_;
  const std::string rv = k.list(resources::kSecrets, "default")["metadata"]["resourceVersion"];
  k.create(resources::kSecrets, "default", {{"apiVersion", "v1"}, {"kind", "Secret"}, {"metadata", {{"name", "s1"}}}});
  k.merge_patch(resources::kSecrets, "default", "s1", {{"stringData", {{"a", "b"}}}});
  std::vector<std::string> seen;
  const std::string last = k.watch(resources::kSecrets, "default", "", rv, 1s, [&](const KubeClient::WatchEvent& e) {
    if (e.type != "BOOKMARK") seen.push_back(e.type + " " + e.object["metadata"]["name"].get<std::string>());
  });
  EXPECT_EQ(seen, (std::vector<std::string>{"ADDED s1", "MODIFIED s1"}));
  EXPECT_GT(std::stol(last), std::stol(rv));
  for (int i = 0; i < 35; ++i) k.create(resources::kSecrets, "default", {{"apiVersion", "v1"}, {"kind", "Secret"},
                                                                          {"metadata", {{"name", "f" + std::to_string(i)}}}});
  try {
    k.watch(resources::kSecrets, "default", "", rv, 1s, [](const KubeClient::WatchEvent&) {});
    FAIL() << "an expired version must be reported";
  } catch (const KubeError& e) {
    EXPECT_EQ(e.status, 410);
    EXPECT_EQ(e.reason, "Expired");
  }
}

// A frozen API server (SIGSTOP: its kernel still accepts the connection, nothing answers) ends
// a watch as WatchStalled once the watch's timeout and the silence margin have passed, instead of
// the hour a plain read timeout would wait.
TEST_F(KubeClientTest, AWatchOnAFrozenServerEndsWithinItsSilenceLimit) {
  KubeClient& k = *client_;
  const std::string rv = k.list(resources::kSecrets, "default")["metadata"]["resourceVersion"];
  ASSERT_EQ(kill(server_->pid(), SIGSTOP), 0);
  const auto start = std::chrono::steady_clock::now();
  std::string what;
  try {
    k.watch(resources::kSecrets, "default", "", rv, 1s, [](const KubeClient::WatchEvent&) {});
  } catch (const WatchStalled& e) {
    what = e.what();
  } catch (const std::exception& e) {
    what = std::string("not WatchStalled: ") + e.what();
  }
  const auto waited = std::chrono::steady_clock::now() - start;
  kill(server_->pid(), SIGCONT);
  EXPECT_THAT(what, ::testing::HasSubstr("the API server sent nothing for"));
  EXPECT_GE(waited, 1s + kWatchSilenceMargin - 1s);
  EXPECT_LE(waited, 1s + kWatchSilenceMargin + 3s);
  // Thawed, the same client watches again.
  EXPECT_NO_THROW(k.watch(resources::kSecrets, "default", "", rv, 1s, [](const KubeClient::WatchEvent&) {}));
}

TEST(KubeConfigTest, KubeconfigWithInlineAndFileCredentials) {
  const auto dir = std::filesystem::temp_directory_path() / ("dlbench-kubeconfig-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "client.key") << "KEY PEM";
  std::ofstream(dir / "config") << R"(apiVersion: v1
kind: Config
current-context: b
clusters:
- {name: one, cluster: {server: "https://one:6443", certificate-authority-data: Q0EgUEVN}}
- {name: two, cluster: {server: "https://two:6443"}}
contexts:
- {name: a, context: {cluster: two, user: u}}
- {name: b, context: {cluster: one, user: u, namespace: bench}}
users:
- {name: u, user: {client-certificate-data: Q0VSVCBQRU0=, client-key: client.key, token: abc}}
)";
  const KubeConfig c = load_kubeconfig((dir / "config").string());
  EXPECT_EQ(c.server, "https://one:6443");
  EXPECT_EQ(c.ca_pem, "CA PEM");
  EXPECT_EQ(c.client_cert_pem, "CERT PEM");
  EXPECT_EQ(c.client_key_pem, "KEY PEM");
  EXPECT_EQ(c.token, "abc");
  EXPECT_EQ(c.namespace_, "bench");
  EXPECT_EQ(load_kubeconfig((dir / "config").string(), "a").server, "https://two:6443");
  EXPECT_THROW(load_kubeconfig((dir / "config").string(), "missing"), std::runtime_error);
  setenv("KUBECONFIG", (dir / "config").c_str(), 1);
  EXPECT_EQ(resolve_kube_config().server, "https://one:6443");
  unsetenv("KUBECONFIG");
  std::filesystem::remove_all(dir);
}

TEST(KubeConfigTest, InCluster) {
  const auto dir = std::filesystem::temp_directory_path() / ("dlbench-sa-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "ca.crt") << "CA";
  std::ofstream(dir / "token") << "tok\n";
  std::ofstream(dir / "namespace") << "dlbench-system";
  unsetenv("KUBERNETES_SERVICE_HOST");
  EXPECT_THROW(in_cluster_config(dir.string()), std::runtime_error);
  setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  const KubeConfig c = in_cluster_config(dir.string());
  EXPECT_EQ(c.server, "https://10.0.0.1:443");
  EXPECT_EQ(c.ca_pem, "CA");
  EXPECT_EQ(c.token_file, (dir / "token").string());
  EXPECT_EQ(c.namespace_, "dlbench-system");
  unsetenv("KUBERNETES_SERVICE_HOST");
  unsetenv("KUBERNETES_SERVICE_PORT");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dlbench::operator_

namespace dlbench::operator_ {
namespace {

// A CA and a server certificate for 127.0.0.1, made with the openssl command.
struct Pki {
  std::filesystem::path dir;
  explicit Pki(const std::string& tag) : dir(std::filesystem::temp_directory_path() / ("dlbench-pki-" + tag)) {
    std::filesystem::create_directories(dir);
    const std::string d = dir.string();
    const std::string script =
        "cd " + d + " && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=test-ca "
        "-keyout ca.key -out ca.crt 2>/dev/null && openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
        "-subj /CN=127.0.0.1 -keyout server.key -out server.csr 2>/dev/null && printf 'subjectAltName=IP:127.0.0.1' > ext "
        "&& openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 -extfile ext -out server.crt "
        "2>/dev/null";
    if (std::system(script.c_str()) != 0) throw std::runtime_error("openssl failed");
  }
  ~Pki() { std::filesystem::remove_all(dir); }
  std::string read(const std::string& name) const {
    std::ifstream in(dir / name);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
};

TEST(KubeClientTls, VerifiesTheServerAgainstTheClusterCa) {
  const Pki pki("server-" + std::to_string(getpid()));
  const Pki other("other-" + std::to_string(getpid()));
  const testing::ListeningProcess server({"python3", DLBENCH_TEST_APISERVER, "--tls-cert", (pki.dir / "server.crt").string(),
                                          "--tls-key", (pki.dir / "server.key").string()});
  const int port = server.port();
  KubeConfig trusted;
  trusted.server = "https://127.0.0.1:" + std::to_string(port);
  trusted.ca_pem = pki.read("ca.crt");
  KubeClient good(make_http_transport(trusted, 5s));
  bool connected = false;
  for (int i = 0; i < 100 && !connected; ++i) {
    try {
      good.list(resources::kConfigMaps, "default");
      connected = true;
    } catch (const std::exception&) {
      std::this_thread::sleep_for(50ms);
    }
  }
  EXPECT_TRUE(connected) << "the cluster CA must be accepted";
  KubeConfig wrong = trusted;
  wrong.ca_pem = other.read("ca.crt");
  EXPECT_ANY_THROW(KubeClient(make_http_transport(wrong, 5s)).list(resources::kConfigMaps, "default"));
  KubeConfig none = trusted;
  none.ca_pem.clear();  // the system's CAs do not know this cluster
  EXPECT_ANY_THROW(KubeClient(make_http_transport(none, 5s)).list(resources::kConfigMaps, "default"));
}

}  // namespace
}  // namespace dlbench::operator_

#include "leader_election.hpp"

namespace dlbench::operator_ {
namespace {

TEST_F(KubeClientTest, OneLeaderAtATimeAndTakeoverAfterExpiry) {
  auto now = std::chrono::system_clock::now();
  const auto clock = [&] { return now; };
  LeaderElector a(*client_, "default", "dlbench-operator", "replica-a", 1s, clock);
  LeaderElector b(*client_, "default", "dlbench-operator", "replica-b", 1s, clock);
  EXPECT_TRUE(a.try_acquire_or_renew());
  EXPECT_FALSE(b.try_acquire_or_renew());
  now += 900ms;
  EXPECT_TRUE(a.try_acquire_or_renew());  // renewal
  now += 900ms;
  EXPECT_FALSE(b.try_acquire_or_renew()) << "renewed 0.9 s ago: still a's";
  now += 1100ms;                           // a stops renewing
  EXPECT_TRUE(b.try_acquire_or_renew());
  EXPECT_FALSE(a.try_acquire_or_renew());
  const json lease = client_->get(resources::kLeases, "default", "dlbench-operator");
  EXPECT_EQ(lease["spec"]["holderIdentity"], "replica-b");
  EXPECT_EQ(lease["spec"]["leaseTransitions"], 1);
}

TEST_F(KubeClientTest, RacingReplicasNeverBothLead) {
  for (int round = 0; round < 8; ++round) {
    const std::string name = "race-" + std::to_string(round);
    LeaderElector x(*client_, "default", name, "x", 30s), y(*client_, "default", name, "y", 30s);
    bool x_leads = false, y_leads = false;
    std::thread tx([&] { x_leads = x.try_acquire_or_renew(); });
    std::thread ty([&] { y_leads = y.try_acquire_or_renew(); });
    tx.join();
    ty.join();
    EXPECT_NE(x_leads, y_leads) << "round " << round;
    EXPECT_NE(x.try_acquire_or_renew(), y.try_acquire_or_renew()) << "round " << round;
  }
}

}  // namespace
}  // namespace dlbench::operator_
