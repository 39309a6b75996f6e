// The [server] section: read from a cluster file (the rest goes to the cluster parser),
// overridden by --set server.*, extended by DEEPINFER_API_KEY; bad keys and values are errors.
#include "common/error.hpp"
#include "config/cluster_config.hpp"
#include "server/server_config.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

using namespace di::server;

namespace {

std::string write_file(const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / "di_server_config_test.toml";
  std::ofstream(path) << text;
  return path.string();
}

}  // namespace

TEST_CASE("[server] is read and removed from the cluster text") {
  const std::string path = write_file(
      "[model]\npath = \"m\"\n[server]\nhost = \"0.0.0.0\"\nport = 9000\napi_keys = [\"a\", "
      "\"b\"]\n"
      "max_n = 4\n[[nodes]]\nhost = \"127.0.0.1\"\nport = 7100\n");
  const server_file f =
      read_server_file(path, {"server.port=9001", "server.max_concurrent_requests=7"});
  CHECK(f.settings.host == "0.0.0.0");
  CHECK(f.settings.port == 9001);
  CHECK(f.settings.api_keys == std::vector<std::string>{"a", "b"});
  CHECK(f.settings.max_n == 4);
  CHECK(f.settings.max_concurrent_requests == 7);
  CHECK(f.cluster_toml.find("server") == std::string::npos);
  CHECK(f.cluster_toml.find("nodes") != std::string::npos);
}

TEST_CASE("bad [server] keys and values are errors naming them") {
  CHECK_THROWS_WITH_AS(read_server_file(write_file("[server]\nprot = 1\n"), {}),
                       doctest::Contains("server.prot"), di::error);
  CHECK_THROWS_WITH_AS(read_server_file(write_file("[server]\nport = 70000\n"), {}),
                       doctest::Contains("server.port"), di::error);
  CHECK_THROWS_WITH_AS(read_server_file(write_file("[server]\nport = \"x\"\n"), {}),
                       doctest::Contains("integer"), di::error);
  server_settings s;
  CHECK_THROWS_AS(apply_server_overrides(s, {"server.max_n=0"}), di::error);
  CHECK_THROWS_AS(apply_server_overrides(s, {"server.max_n"}), di::error);
  CHECK(s.drain_timeout_s == 30);
  apply_server_overrides(s, {"server.drain_timeout_s=0"});
  CHECK(s.drain_timeout_s == 0);
  CHECK_THROWS_WITH_AS(apply_server_overrides(s, {"server.drain_timeout_s=-1"}),
                       doctest::Contains("server.drain_timeout_s"), di::error);
  // The body depth goes no deeper than the body parser's own limit.
  apply_server_overrides(s, {"server.max_json_depth=512"});
  CHECK(s.max_json_depth == 512);
  CHECK_THROWS_WITH_AS(apply_server_overrides(s, {"server.max_json_depth=513"}),
                       doctest::Contains("server.max_json_depth"), di::error);
}

TEST_CASE("server.json_whitespace: any by default, compact or pretty, anything else an error") {
  server_settings s;
  CHECK(s.json_whitespace == "any");
  apply_server_overrides(s, {"server.json_whitespace=compact"});
  CHECK(s.json_whitespace == "compact");
  CHECK(read_server_file(write_file("[server]\njson_whitespace = \"pretty\"\n"), {})
            .settings.json_whitespace == "pretty");
  CHECK_THROWS_WITH_AS(apply_server_overrides(s, {"server.json_whitespace=tight"}),
                       doctest::Contains("'tight' is not one of any, compact, pretty"), di::error);
  CHECK_THROWS_WITH_AS(apply_server_overrides(s, {"server.json_whitespace=1"}),
                       doctest::Contains("expected a string"), di::error);
  CHECK(s.json_whitespace == "compact");
}

TEST_CASE("server.json_schema_extra_keys: forbid by default, or allow, anything else an error") {
  server_settings s;
  CHECK(s.json_schema_extra_keys == "forbid");
  apply_server_overrides(s, {"server.json_schema_extra_keys=allow"});
  CHECK(s.json_schema_extra_keys == "allow");
  CHECK(read_server_file(write_file("[server]\njson_schema_extra_keys = \"forbid\"\n"), {})
            .settings.json_schema_extra_keys == "forbid");
  CHECK_THROWS_WITH_AS(apply_server_overrides(s, {"server.json_schema_extra_keys=open"}),
                       doctest::Contains("'open' is not one of forbid, allow"), di::error);
  CHECK(s.json_schema_extra_keys == "allow");
}

TEST_CASE("grammar threads: half the hardware threads by default, at least 2, at most 64") {
  server_settings s;
  CHECK(s.grammar_threads == 0);
  CHECK(num_grammar_threads(s, 0) == 2);  // hardware_concurrency() may not know
  CHECK(num_grammar_threads(s, 2) == 2);
  CHECK(num_grammar_threads(s, 7) == 4);
  CHECK(num_grammar_threads(s, 16) == 8);
  CHECK(num_grammar_threads(s, 256) == 64);
  apply_server_overrides(s, {"server.grammar_threads=1"});
  CHECK(num_grammar_threads(s, 16) == 1);
  apply_server_overrides(s, {"server.grammar_threads=0"});
  CHECK(num_grammar_threads(s, 16) == 8);
  CHECK_THROWS_WITH_AS(apply_server_overrides(s, {"server.grammar_threads=65"}),
                       doctest::Contains("server.grammar_threads"), di::error);
}

TEST_CASE("overrides split and the environment key") {
  const split_overrides o = split_server_overrides({"server.port=1", "kv.pool_tokens=4096"});
  CHECK(o.server == std::vector<std::string>{"server.port=1"});
  CHECK(o.cluster == std::vector<std::string>{"kv.pool_tokens=4096"});
  server_settings s;
  apply_server_overrides(s, {"server.api_keys=[\"k1\"]", "server.host=::1"});
  CHECK(s.api_keys == std::vector<std::string>{"k1"});
  CHECK(s.host == "::1");
  setenv("DEEPINFER_API_KEY", "k2", 1);
  apply_server_env(s);
  unsetenv("DEEPINFER_API_KEY");
  CHECK(s.api_keys == std::vector<std::string>{"k1", "k2"});
}

TEST_CASE("the cluster parser leaves [server] and server.* overrides to the front end") {
  const std::string text =
      "[model]\nrunner = \"toy\"\n[server]\nport = 9000\n[[nodes]]\nhost = \"127.0.0.1\"\nport = "
      "7100\n[[groups]]\nscheduler = 0\n"
      "executors = [0]\n";
  const di::cluster_config c = di::parse_cluster_config(text, {"server.port=9001"}, "test");
  CHECK(c.nodes.size() == 1);
  CHECK_THROWS_AS(di::parse_cluster_config(text, {"serve.port=1"}, "test"), di::error);
}
