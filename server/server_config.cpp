// [server] section parsing (see server_config.hpp): the table is read with toml++ key by key,
// each value type- and range-checked, and any key it does not know is an error naming it.
#include "server/server_config.hpp"

#include "common/error.hpp"
#include "server/reasoning.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <sstream>

namespace di::server {

namespace {

/// Reads one key of a [server] table into its field; `origin` names the source in errors.
class key_reader {
 public:
  explicit key_reader(std::string origin) : origin_(std::move(origin)) {}

  void set(server_settings& s, const std::string& key, const toml::node& v) {
    if (key == "host")
      s.host = text(key, v);
    else if (key == "port")
      s.port = std::uint16_t(integer(key, v, 0, 65535));
    else if (key == "api_keys")
      s.api_keys = keys(key, v);
    else if (key == "model_name")
      s.model_name = text(key, v);
    else if (key == "io_threads")
      s.io_threads = int(integer(key, v, 1, 64));
    else if (key == "grammar_threads")
      s.grammar_threads = int(integer(key, v, 0, 64));
    else if (key == "max_body_bytes")
      s.max_body_bytes = integer(key, v, 1024, std::int64_t(1) << 32);
    else if (key == "max_header_bytes")
      s.max_header_bytes = integer(key, v, 1024, 1 << 24);
    else if (key == "max_connections")
      s.max_connections = int(integer(key, v, 1, 1 << 20));
    else if (key == "max_concurrent_requests")
      s.max_concurrent_requests = int(integer(key, v, 1, 1 << 20));
    else if (key == "max_n")
      s.max_n = int(integer(key, v, 1, 256));
    else if (key == "max_top_logprobs")
      s.max_top_logprobs = int(integer(key, v, 0, 1024));
    else if (key == "max_stop")
      s.max_stop = int(integer(key, v, 0, 1024));
    else if (key == "max_stop_bytes")
      s.max_stop_bytes = int(integer(key, v, 1, 1 << 16));
    else if (key == "max_json_depth")
      // (at most the body parser's own limit, grammar::max_json_nesting = 512: a deeper
      // setting let 513..1024-level bodies pass the measure only to fail the parse)
      s.max_json_depth = int(integer(key, v, 4, 512));
    else if (key == "max_schema_depth")
      s.max_schema_depth = int(integer(key, v, 4, 500));
    else if (key == "header_timeout_s")
      s.header_timeout_s = int(integer(key, v, 1, 86400));
    else if (key == "retry_after_s")
      s.retry_after_s = int(integer(key, v, 0, 3600));
    else if (key == "drain_timeout_s")
      s.drain_timeout_s = int(integer(key, v, 0, 86400));
    else if (key == "json_whitespace")
      s.json_whitespace = one_of(key, v, {"any", "compact", "pretty"});
    else if (key == "json_schema_extra_keys")
      s.json_schema_extra_keys = one_of(key, v, {"forbid", "allow"});
    else if (key == "reasoning_parser")
      s.reasoning_parser = reasoning_parser_name(key, v);
    else
      DI_FAIL("{}: server.{}: unknown key (see the README, \"HTTP server\")", origin_, key);
  }

 private:
  std::string text(const std::string& key, const toml::node& v) const {
    DI_CHECK(v.is_string(), "{}: server.{}: expected a string", origin_, key);
    return *v.value<std::string>();
  }
  std::int64_t integer(const std::string& key, const toml::node& v, std::int64_t lo,
                       std::int64_t hi) const {
    DI_CHECK(v.is_integer(), "{}: server.{}: expected an integer", origin_, key);
    const std::int64_t x = *v.value<std::int64_t>();
    DI_CHECK(x >= lo && x <= hi, "{}: server.{}: {} is outside [{}, {}]", origin_, key, x, lo, hi);
    return x;
  }
  std::string one_of(const std::string& key, const toml::node& v,
                     std::initializer_list<const char*> allowed) const {
    const std::string x = text(key, v);
    std::string names;
    for (const char* a : allowed) {
      if (x == a) return x;
      names += (names.empty() ? "" : ", ") + std::string(a);
    }
    DI_FAIL("{}: server.{}: '{}' is not one of {}", origin_, key, x, names);
  }
  std::string reasoning_parser_name(const std::string& key, const toml::node& v) const {
    const std::string x = text(key, v);
    DI_CHECK(reasoning_parser_of(x), "{}: server.{}: unknown reasoning parser '{}' (valid: {})",
             origin_, key, x, reasoning_parser_names);
    return x;
  }
  std::vector<std::string> keys(const std::string& key, const toml::node& v) const {
    if (v.is_string()) return {*v.value<std::string>()};
    DI_CHECK(v.is_array(), "{}: server.{}: expected a list of strings", origin_, key);
    std::vector<std::string> out;
    for (const toml::node& k : *v.as_array()) {
      DI_CHECK(k.is_string() && !k.value<std::string>()->empty(),
               "{}: server.{}: expected a list of non-empty strings", origin_, key);
      out.push_back(*k.value<std::string>());
    }
    return out;
  }

  std::string origin_;
};

/// The TOML value of an override's right-hand side; a bare word is a string.
toml::table parse_value(const std::string& raw) {
  try {
    return toml::parse("v = " + raw);
  } catch (const toml::parse_error&) {
    toml::table t;
    t.insert("v", raw);
    return t;
  }
}

}  // namespace

split_overrides split_server_overrides(const std::vector<std::string>& overrides) {
  split_overrides out;
  for (const std::string& o : overrides)
    (o.rfind("server.", 0) == 0 ? out.server : out.cluster).push_back(o);
  return out;
}

void apply_server_overrides(server_settings& s, const std::vector<std::string>& overrides) {
  key_reader reader("--set");
  for (const std::string& o : overrides) {
    const std::size_t eq = o.find('=');
    DI_CHECK(eq != std::string::npos && o.rfind("server.", 0) == 0,
             "--set {}: expected server.key=value", o);
    const std::string key = o.substr(7, eq - 7);
    const toml::table t = parse_value(o.substr(eq + 1));
    reader.set(s, key, *t.get("v"));
  }
}

void apply_server_env(server_settings& s) {
  if (const char* k = std::getenv("DEEPINFER_API_KEY"); k != nullptr && *k != 0)
    s.api_keys.push_back(k);
}

server_file read_server_file(const std::string& path,
                             const std::vector<std::string>& server_overrides) {
  std::ifstream in(path);
  DI_CHECK(in, "{}: cannot read the cluster file", path);
  std::stringstream text;
  text << in.rdbuf();
  toml::table root;
  try {
    root = toml::parse(text.str(), path);
  } catch (const toml::parse_error& e) {
    DI_FAIL("{}: {}", path, e.description());
  }
  server_file out;
  if (const toml::node* section = root.get("server")) {
    DI_CHECK(section->is_table(), "{}: server: expected a table", path);
    key_reader reader(path);
    for (const auto& [key, value] : *section->as_table())
      reader.set(out.settings, std::string(key.str()), value);
    root.erase("server");
  }
  apply_server_overrides(out.settings, server_overrides);
  std::ostringstream rest;
  rest << root;
  out.cluster_toml = rest.str();
  return out;
}

void validate(const server_settings& s) {
  DI_CHECK(!s.host.empty(), "server.host must not be empty");
  DI_CHECK(s.max_header_bytes >= 1024, "server.max_header_bytes must be at least 1024");
  for (const std::string& k : s.api_keys)
    DI_CHECK(!k.empty(), "server.api_keys: an empty key is not allowed");
  DI_CHECK(reasoning_parser_of(s.reasoning_parser),
           "unknown reasoning parser '{}' (--reasoning-parser, server.reasoning_parser; valid: {})",
           s.reasoning_parser, reasoning_parser_names);
}

int num_grammar_threads(const server_settings& s, unsigned hardware_threads) {
  if (s.grammar_threads > 0) return s.grammar_threads;
  return std::clamp(int((hardware_threads + 1) / 2), 2, 64);
}

}  // namespace di::server
