// The cluster file: the examples parse, every key is type- and range-checked, unknown keys and
// overrides are errors naming the key, --set reaches every key, and TLS without a certificate
// is refused (CAF's anonymous-TLS fallback).
#include "actors/logging.hpp"
#include "actors/node_runtime.hpp"
#include "common/error.hpp"
#include "config/cluster_config.hpp"
#include "tests/test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <string>

namespace di::test {

namespace {

const std::string base = R"(
[model]
runner = "toy"
[[nodes]]
port = 7100
[[nodes]]
host = "127.0.0.1"
port = 7101
devices = ["cpu"]
[[groups]]
scheduler = 0
executors = [1]
)";

/// The message of the di::error that parsing `text` with `sets` throws ("" when none).
std::string error_of(const std::string& text, std::vector<std::string> sets = {}) {
  try {
    parse_cluster_config(text, sets, "c.toml");
  } catch (const di::error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("the example cluster files parse") {
  for (const char* name : {"cluster-2node.toml", "cluster-2dp.toml"}) {
    CAPTURE(name);
    const cluster_config c = load_cluster_config(std::string(DI_SOURCE_DIR) + "/examples/" + name);
    CHECK(c.model.runner == "cpu");
    CHECK(c.cluster.bind_address == "127.0.0.1");
    CHECK(c.router.node == 0);
    for (const group_config& g : c.groups) CHECK(g.executor_devices == std::vector<std::string>{"cpu"});
  }
  const cluster_config dp = load_cluster_config(std::string(DI_SOURCE_DIR) + "/examples/cluster-2dp.toml");
  CHECK(dp.groups.size() == 2);
  CHECK(dp.nodes.size() == 3);
}

TEST_CASE("defaults, and every resolved key is listed") {
  const cluster_config c = parse_cluster_config(base);
  CHECK(c.cluster.name == "deepinfer");
  CHECK(c.cluster.heartbeat_interval_ms == 500);
  CHECK(c.scheduler.overlap);
  CHECK(c.scheduler.grammar_classify_ms == 1000);
  CHECK(c.router.port == 7000);
  CHECK(c.model.cuda_graphs);
  CHECK(c.model.cuda_graph_max_batch == 64);
  CHECK(c.cluster.max_message_bytes == std::int64_t(16) << 20);
  CHECK(c.nodes[0].host == "127.0.0.1");
  CHECK(c.groups[0].executor_nodes == std::vector<int>{1});
  CHECK(std::find(c.resolved.begin(), c.resolved.end(), "scheduler.max_num_running = 256") != c.resolved.end());
  CHECK(std::find(c.resolved.begin(), c.resolved.end(), "nodes.1.port = 7101") != c.resolved.end());
}

TEST_CASE("errors name the key") {
  CHECK(error_of(base + "[scheduler]\nmax_num_runing = 3\n").find("scheduler.max_num_runing: unknown key") !=
        std::string::npos);
  CHECK(error_of(base + "[router]\nport = \"x\"\n").find("router.port: expected an integer, got a string") !=
        std::string::npos);
  // 0 is a port the system picks (launch's ready line names it); past 65535 or negative: an error
  CHECK(parse_cluster_config(base + "[router]\nport = 0\n").router.port == 0);
  CHECK(error_of(base + "[router]\nport = 65536\n").find("router.port: must be in [0, 65535]") !=
        std::string::npos);
  CHECK(error_of(base + "[router]\nport = -1\n").find("router.port: must be in [0, 65535]") !=
        std::string::npos);
  CHECK(error_of(base + "[scheduler]\nmax_num_running = 0\n").find("scheduler.max_num_running: must be in [1,") !=
        std::string::npos);
  CHECK(error_of(base + "[kv]\nenable_prefix_caching = 1\n").find("kv.enable_prefix_caching: expected true or false") !=
        std::string::npos);
  CHECK(error_of(base + "bogus = 1\n").find("bogus: unknown key") != std::string::npos);
  CHECK(error_of(base + "[model.toy]\nstep = 1\n").find("model.toy.step: unknown key") != std::string::npos);
  CHECK(error_of("[[nodes]]\nport = 1\n[[nodes]]\nprt = 2\n").find("nodes.1.prt: unknown key") != std::string::npos);
  CHECK(error_of("[model]\nrunner = \"toy\"\n").find("nodes: at least one") != std::string::npos);
  CHECK(error_of("[model\n").find("c.toml:1:") != std::string::npos);  // TOML syntax: line and column
  // Block counts are int32: 10^15 tokens became "-45511424 blocks" in the runner.
  CHECK(error_of(base, {"kv.pool_tokens=1000000000000000"})
            .find("kv.pool_tokens: must be in [1, 2147483647]") != std::string::npos);
}

TEST_CASE("cross-checks name the key") {
  CHECK(error_of(base, {"groups.0.executors=[5]"}).find("groups.0.executors: no node 5") != std::string::npos);
  CHECK(error_of(base, {"groups.0.executors=[1, 1]"}).find("node 1 has 1 device(s)") != std::string::npos);
  CHECK(error_of(base, {"router.node=2"}).find("router.node: no node 2") != std::string::npos);
  CHECK(error_of(base, {"nodes.1.port=7100"}).find("nodes.1.port: 127.0.0.1:7100 is already used") != std::string::npos);
  CHECK(error_of(base, {"model.runner=cpu"}).find("model.path: required for runner 'cpu'") != std::string::npos);
  CHECK(error_of(base, {"model.runner=gpu"}).find("model.runner: must be cpu or toy") != std::string::npos);
  // The message bound must leave room for the largest prompt (1 MiB of headroom).
  CHECK(error_of(base, {"router.max_prompt_bytes=16777216"})
            .find("cluster.max_message_bytes: 16777216 leaves no room for a prompt of "
                  "router.max_prompt_bytes = "
                  "16777216 (needs at least 17825792)") != std::string::npos);
  CHECK(error_of(base, {"router.max_prompt_bytes=16777216", "cluster.max_message_bytes=17825792"})
            .empty());
  CHECK(
      error_of(base, {"scheduler.max_num_batched_tokens=1000000"})
          .find("cluster.max_message_bytes: 16777216 is too small for one step's prompt logprobs: "
                "scheduler.max_num_batched_tokens = 1000000 rows of router.max_logprobs = 20 "
                "entries need up to "
                "353048576 bytes") != std::string::npos);
  CHECK(error_of(base, {"scheduler.max_num_batched_tokens=1000000",
                        "cluster.max_message_bytes=353048576"})
            .empty());
  CHECK(error_of(base, {"scheduler.max_num_batched_tokens=400000", "router.max_logprobs=0"})
            .empty());
  CHECK(error_of(base, {"cluster.max_message_bytes=1000"})
            .find("cluster.max_message_bytes: must be in [1048576,") != std::string::npos);
  CHECK(error_of(base, {"logging.level=loud"}).find("logging.level") != std::string::npos);
  // a device name the executor cannot open was found only when it started
  CHECK(error_of(base, {"nodes.1.devices=[\"gpu\"]"})
            .find("nodes.1.devices: device 'gpu': expected cpu, cuda or cuda:N") !=
        std::string::npos);
  CHECK(error_of(base, {"nodes.1.devices=[\"cuda:x\"]"}).find("device 'cuda:x'") !=
        std::string::npos);
  CHECK(error_of(base, {"nodes.1.devices=[\"cuda:1\"]"}).empty());
  // A group's executors run in lockstep and must sample the same tokens; the CPU and CUDA
  // backends agree to a tolerance only, so a group on both would fail at the first token they
  // pick differently (the file was accepted). The toy runner computes alike on any device.
  const std::vector<std::string> mixed = {"model.runner=cpu", "model.path=m",
                                          "nodes.0.devices=[\"cuda:0\"]",
                                          "groups.0.executors=[1, 0]"};
  CHECK(error_of(base, mixed)
            .find("groups.0.executors: node 1's executor runs on cpu and node 0's on cuda:0: the "
                  "executors of a group run every step in lockstep and must sample the same "
                  "tokens, and the CPU and CUDA backends agree only to a rounding tolerance, so "
                  "the group would fail at the first token they pick differently; give each "
                  "backend a group of its own") != std::string::npos);
  CHECK(error_of(base, {"model.runner=cpu", "model.path=m", "nodes.0.devices=[\"cuda:0\"]",
                        "nodes.1.devices=[\"cuda\"]", "groups.0.executors=[1, 0]"})
            .empty());  // two CUDA devices
  CHECK(error_of(base, {"nodes.0.devices=[\"cuda:0\"]", "groups.0.executors=[1, 0]"})
            .empty());  // toy
  // heartbeats must come well inside the connection timeout (3000 vs 1000 took the cluster down)
  CHECK(error_of(base, {"cluster.heartbeat_interval_ms=3000", "cluster.connection_timeout_ms=1000"})
            .find("cluster.heartbeat_interval_ms: 3000 must be positive and at most half of "
                  "cluster.connection_timeout_ms (1000)") != std::string::npos);
  CHECK(error_of(base, {"cluster.heartbeat_interval_ms=0"}).find("must be positive") !=
        std::string::npos);
  CHECK(error_of(base, {"cluster.heartbeat_interval_ms=0", "cluster.connection_timeout_ms=0"})
            .empty());  // both off
  CHECK(error_of(base, {"cluster.heartbeat_interval_ms=1000", "cluster.connection_timeout_ms=2000"})
            .empty());
  CHECK(error_of("[model]\nrunner = \"toy\"\n[[nodes]]\nhost = \"a\"\n[[groups]]\nexecutors = [0]\n")
            .find("nodes.0.port: required") != std::string::npos);
  // max_queued_tokens = 0 was accepted and then refused every prompt, an idle group's too
  CHECK(error_of(base, {"scheduler.max_queued_tokens=0"})
            .find("scheduler.max_queued_tokens: must be at least 1: 0 would refuse every prompt "
                  "(for no waiting line, set scheduler.max_num_queued = 0)") != std::string::npos);
  CHECK(error_of(base, {"scheduler.max_queued_tokens=1", "scheduler.max_num_queued=0"}).empty());
  // either snapshot key alone was accepted and took no snapshot
  CHECK(error_of(base, {"kv.num_snapshots=8"})
            .find("kv.snapshot_interval: must be at least 1 (token blocks between snapshots) with "
                  "kv.num_snapshots = 8: without it no snapshot is taken") != std::string::npos);
  CHECK(error_of(base, {"kv.snapshot_interval=2"})
            .find("kv.num_snapshots: must be at least 1 (snapshots kept per executor) with "
                  "kv.snapshot_interval = 2: without it no snapshot is taken") !=
        std::string::npos);
  CHECK(error_of(base, {"kv.num_snapshots=8", "kv.snapshot_interval=2"}).empty());
}

TEST_CASE("a node address the others cannot reach is refused, naming the key") {
  // node 0 on loopback, node 1 on another host: node 1 would look for the coordinator on its
  // own host and never join (the file was accepted; both waited for startup_timeout_s)
  CHECK(error_of(base, {"nodes.1.host=10.0.0.2"})
            .find("c.toml: nodes.1.host: '10.0.0.2' is not a loopback address, but the "
                  "coordinator's nodes.0.host is '127.0.0.1': every node looks for the "
                  "coordinator at nodes.0.host") != std::string::npos);
  CHECK(error_of(base, {"nodes.0.host=localhost", "nodes.1.host=gpu-box.example"})
            .find("nodes.1.host: 'gpu-box.example' is not a loopback address") !=
        std::string::npos);
  CHECK(
      error_of(base, {"nodes.0.host=[::1]", "nodes.1.host=::ffff:10.0.0.2"}).find("nodes.1.host") !=
      std::string::npos);
  // every loopback spelling is one host
  for (const char* h : {"127.0.0.2", "::1", "[::1]", "LOCALHOST", "::ffff:127.0.0.1", "0.0.0.0"})
    CHECK_MESSAGE(
        error_of(base, {"nodes.0.host=localhost", std::string("nodes.1.host=") + h}).empty(), h);
  // node 0 on a network address while it listens on loopback (the default bind): refused
  CHECK(error_of(base, {"nodes.0.host=10.0.0.1", "nodes.1.host=10.0.0.2"})
            .find("c.toml: cluster.bind_address: node 0 would listen on '127.0.0.1' only, but the "
                  "other nodes connect to it at nodes.0.host = '10.0.0.1'") != std::string::npos);
  CHECK(error_of(base, {"nodes.0.host=10.0.0.1", "nodes.1.host=10.0.0.2",
                        "cluster.bind_address=0.0.0.0", "nodes.0.bind=127.0.0.1"})
            .find("nodes.0.bind: node 0 would listen on '127.0.0.1' only") != std::string::npos);
  CHECK(error_of(base,
                 {"nodes.0.host=10.0.0.1", "nodes.1.host=10.0.0.2", "cluster.bind_address=0.0.0.0"})
            .empty());
  CHECK(error_of(base, {"nodes.0.host=10.0.0.1", "nodes.1.host=10.0.0.2", "nodes.0.bind=10.0.0.1"})
            .empty());
  // node 1 on loopback reaches node 0's network address from node 0's host
  CHECK(error_of(base, {"nodes.0.host=10.0.0.1", "nodes.0.bind=10.0.0.1"}).empty());
  // a lone node is reached by nobody: any address, any bind
  CHECK(error_of("[model]\nrunner = \"toy\"\n[[nodes]]\nhost = \"10.0.0.1\"\nport = 7100\n"
                 "[[groups]]\nexecutors = [0]\n")
            .empty());
}

TEST_CASE("TLS without a certificate is refused (anonymous TLS authenticates nobody)") {
  CHECK(error_of(base, {"tls.enabled=true"}).find("tls.certificate: required") != std::string::npos);
  CHECK(error_of(base, {"tls.enabled=true", "tls.certificate=a.pem"}).find("tls.key: required") != std::string::npos);
  CHECK(error_of(base, {"tls.enabled=true", "tls.certificate=a.pem", "tls.key=a.key"}).find("tls.cafile") !=
        std::string::npos);
  CHECK(error_of(base, {"tls.enabled=true", "tls.certificate=a.pem", "tls.key=a.key", "tls.cafile=ca.pem"}).empty());
  // files with TLS off: the cluster ran in plain text without a word
  CHECK(error_of(base, {"tls.certificate=a.pem"})
            .find("tls.certificate: given while tls.enabled = false") != std::string::npos);
  CHECK(error_of(base, {"tls.cafile=ca.pem"}).find("tls.cafile: given while") != std::string::npos);
}

TEST_CASE("--set overrides any key with the key's type") {
  const cluster_config c = parse_cluster_config(
      base, {"model.path=/models/x y", "scheduler.max_num_running=8", "scheduler.overlap=false",
             "nodes[1].port=7201", "nodes.0.devices=cpu,cpu", "groups.0.executors=[0]",
             "model.toy.step_ms=2.5", "cluster.name=\"quoted\"", "kv.pool_tokens=640",
             "model.cuda_graphs=false", "model.cuda_graph_max_batch=8"});
  CHECK(c.model.path == "/models/x y");
  CHECK(c.scheduler.max_num_running == 8);
  CHECK_FALSE(c.scheduler.overlap);
  CHECK(c.nodes[1].port == 7201);
  CHECK(c.nodes[0].devices == std::vector<std::string>{"cpu", "cpu"});
  CHECK(c.groups[0].executor_nodes == std::vector<int>{0});
  CHECK(c.model.toy.step_ms == 2.5);
  CHECK(c.cluster.name == "quoted");
  CHECK(c.kv.pool_tokens == 640);
  CHECK_FALSE(c.model.cuda_graphs);
  CHECK(c.model.cuda_graph_max_batch == 8);
  CHECK(error_of(base, {"model.cuda_graph_max_batch=0"}).find("model.cuda_graph_max_batch") !=
        std::string::npos);
  CHECK(error_of(base, {"scheduler.max_num_running=many"}).find("scheduler.max_num_running: expected an integer, got 'many' (from --set)") !=
        std::string::npos);
  CHECK(error_of(base, {"scheduler.nope=1"}).find("--set scheduler.nope=1") != std::string::npos);
  // a leading '+' as TOML and the CLI's integer options take it; nothing else around the digits
  CHECK(parse_cluster_config(base, {"scheduler.max_num_running=+3"}).scheduler.max_num_running ==
        3);
  for (const char* bad : {"+", "++3", "+-3", " 3", "3 "})
    CHECK(error_of(base, {std::string("scheduler.max_num_running=") + bad})
              .find("expected an integer") != std::string::npos);
  CHECK(error_of(base, {"nodes.7.port=1"}).find("no key nodes.7.port") != std::string::npos);
  CHECK(error_of(base, {"novalue"}).find("expected key=value") != std::string::npos);
}

TEST_CASE("the fingerprint follows every resolved value") {
  const cluster_config a = parse_cluster_config(base);
  CHECK(parse_cluster_config(base, {"scheduler.grammar_classify_ms=0"})
            .scheduler.grammar_classify_ms == 0);
  CHECK(error_of(base, {"scheduler.grammar_classify_ms=-1"})
            .find("scheduler.grammar_classify_ms: must be in [0, 3600000]") != std::string::npos);
  const cluster_config b = parse_cluster_config(base);
  const cluster_config c = parse_cluster_config(base, {"scheduler.max_num_running=8"});
  CHECK(a.fingerprint == b.fingerprint);
  CHECK(a.fingerprint != c.fingerprint);
}

}  // namespace di::test

TEST_CASE("client and serve addresses: HOST:PORT with a port of digits only") {
  using di::actors::split_address;
  CHECK(split_address("127.0.0.1:7000", "--connect") ==
        std::pair<std::string, std::uint16_t>{"127.0.0.1", 7000});
  CHECK(split_address("[::1]:7000", "--connect") ==
        std::pair<std::string, std::uint16_t>{"::1", 7000});
  // std::stoi took each of these as port 7000
  for (const char* bad :
       {"127.0.0.1:7000x", "127.0.0.1: 7000", "127.0.0.1:7000.9", "127.0.0.1:+7000", "127.0.0.1:0",
        "127.0.0.1:65536", "127.0.0.1:99999999999", "127.0.0.1:", ":7000", "7000"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(split_address(bad, "--connect"), di::error);
  }
}

TEST_CASE("logging.file: a missing folder or an unopenable file is an error naming the key") {
  // spdlog made missing parent folders (a typo created /nonexist/dir as root) and its message
  // named no key
  di::test::temp_dir dir("logfile");
  const std::string missing = (dir / "no" / "such" / "x.log").string();
  const std::string want = "logging.file " + missing + ": the folder";
  CHECK_THROWS_WITH_AS(di::actors::configure_logging("info", missing, "test"),
                       doctest::Contains(want.c_str()), di::error);
  CHECK_FALSE(std::filesystem::exists(dir / "no"));
  CHECK_THROWS_WITH_AS(di::actors::configure_logging("info", dir.path().string(), "test"),
                       doctest::Contains("cannot open it"), di::error);  // a folder, not a file
  di::actors::configure_logging("info", "", "test");
}
