// Cluster file parsing: a key reader that walks the TOML tables with the schema in hand, so
// that every value is type- and range-checked where it is read, `--set` overrides are parsed
// with the type of the key they replace, and whatever the schema never read (a misspelt key,
// an override of a key that does not exist) is an error naming it.
#include "config/cluster_config.hpp"

#include "common/error.hpp"
#include "common/mapped_file.hpp"

#include <toml++/toml.h>

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

namespace di {

namespace {

struct override_value {
  std::string raw;
  bool used = false;
};

/// What every reader shares: the origin, the overrides, the resolved key list.
struct read_context {
  std::string origin;
  std::map<std::string, override_value> overrides;
  std::vector<std::string> resolved;

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    DI_FAIL("{}: {}: {}", origin, key, what);
  }
};

std::string join_key(const std::string& prefix, std::string_view key) {
  return prefix.empty() ? std::string(key) : prefix + "." + std::string(key);
}

std::string quote(std::string_view s) {
  std::ostringstream out;
  out << toml::value<std::string>(std::string(s));
  return out.str();
}

/// The table of `text`, or nothing when it is not valid TOML.
std::optional<toml::table> try_parse(const std::string& text) {
  try {
    return toml::parse(std::string_view(text), std::string_view("override"));
  } catch (const toml::parse_error&) {
    return std::nullopt;
  }
}

std::string type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a number";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    default: return "a date/time";
  }
}

/// Reads the keys of one table; finish() rejects the keys it never read.
class table_reader {
 public:
  table_reader(const toml::table* table, std::string prefix, read_context& ctx)
      : table_(table), prefix_(std::move(prefix)), ctx_(ctx) {}

  void get(std::string_view key, std::string& out) {
    read_scalar(key, out, "a string", [](const toml::node& n) -> std::optional<std::string> {
                  return n.is_string() ? n.value<std::string>() : std::nullopt;
                },
                [](const std::string& raw) -> std::optional<std::string> {
                  if (raw.size() >= 2 && raw.front() == '"') {
                    std::optional<toml::table> parsed = try_parse("v = " + raw);
                    return parsed ? (*parsed)["v"].value<std::string>() : std::nullopt;
                  }
                  return raw;
                });
  }

  void get(std::string_view key, bool& out) {
    read_scalar(key, out, "true or false", [](const toml::node& n) -> std::optional<bool> {
                  return n.is_boolean() ? n.value<bool>() : std::nullopt;
                },
                [](const std::string& raw) -> std::optional<bool> {
                  if (raw == "true") return true;
                  if (raw == "false") return false;
                  return std::nullopt;
                });
  }

  template <class Int>
    requires std::is_integral_v<Int>
  void get(std::string_view key, Int& out, std::int64_t min, std::int64_t max) {
    std::int64_t v = std::int64_t(out);
    read_scalar(
        key, v, "an integer",
        [](const toml::node& n) -> std::optional<std::int64_t> {
          return n.is_integer() ? n.value<std::int64_t>() : std::nullopt;
        },
        [](const std::string& raw) -> std::optional<std::int64_t> {
          // A leading '+' as TOML (and the CLI's integer options) take it: "+3" is 3.
          std::string_view digits = raw;
          if (digits.size() > 1 && digits[0] == '+' && digits[1] >= '0' && digits[1] <= '9')
            digits.remove_prefix(1);
          std::int64_t x = 0;
          auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), x);
          if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
          return x;
        });
    if (v < min || v > max)
      ctx_.fail(join_key(prefix_, key), fmt::format("must be in [{}, {}], got {}", min, max, v));
    out = Int(v);
  }

  void get(std::string_view key, double& out, double min, double max) {
    read_scalar(key, out, "a number",
                [](const toml::node& n) -> std::optional<double> {
                  if (n.is_integer()) return double(*n.value<std::int64_t>());
                  return n.is_floating_point() ? n.value<double>() : std::nullopt;
                },
                [](const std::string& raw) -> std::optional<double> {
                  char* end = nullptr;
                  double x = std::strtod(raw.c_str(), &end);
                  if (raw.empty() || end != raw.c_str() + raw.size()) return std::nullopt;
                  return x;
                });
    if (!(out >= min && out <= max))
      ctx_.fail(join_key(prefix_, key), fmt::format("must be in [{}, {}], got {}", min, max, out));
  }

  void get(std::string_view key, std::vector<std::string>& out) {
    read_list<std::string>(key, out, "a list of strings");
  }

  void get(std::string_view key, std::vector<int>& out) {
    std::vector<std::int64_t> wide(out.begin(), out.end());
    read_list<std::int64_t>(key, wide, "a list of integers");
    out.assign(wide.begin(), wide.end());
  }

  /// The reader of sub-table `key` (empty when absent).
  table_reader sub(std::string_view key) {
    const toml::node* n = find(key);
    if (n != nullptr && !n->is_table()) ctx_.fail(join_key(prefix_, key), "expected a table");
    return table_reader(n ? n->as_table() : nullptr, join_key(prefix_, key), ctx_);
  }

  /// The tables of array `key` (each element must be a table).
  std::vector<table_reader> array_of_tables(std::string_view key) {
    std::vector<table_reader> out;
    const toml::node* n = find(key);
    if (n == nullptr) return out;
    const toml::array* arr = n->as_array();
    if (arr == nullptr) ctx_.fail(join_key(prefix_, key), "expected an array of tables ([[...]])");
    for (std::size_t i = 0; i < arr->size(); ++i) {
      std::string elem = join_key(prefix_, key) + "." + std::to_string(i);
      if (!(*arr)[i].is_table()) ctx_.fail(elem, "expected a table");
      out.emplace_back((*arr)[i].as_table(), elem, ctx_);
    }
    return out;
  }

  /// Marks `key` as read without reading it (a section another component owns).
  void skip(std::string_view key) { find(key); }

  /// Fails on a key of the table that was never read.
  void finish() const {
    if (table_ == nullptr) return;
    for (const auto& [k, v] : *table_)
      if (!seen_.contains(std::string(k.str())))
        ctx_.fail(join_key(prefix_, k.str()), "unknown key (see the README's \"Cluster file\")");
  }

 private:
  const toml::node* find(std::string_view key) {
    seen_.insert(std::string(key));
    return table_ ? table_->get(key) : nullptr;
  }

  override_value* override_of(const std::string& full) {
    auto it = ctx_.overrides.find(full);
    if (it == ctx_.overrides.end()) return nullptr;
    it->second.used = true;
    return &it->second;
  }

  template <class T, class FromNode, class FromRaw>
  void read_scalar(std::string_view key, T& out, std::string_view expected, FromNode from_node,
                   FromRaw from_raw) {
    const std::string full = join_key(prefix_, key);
    const toml::node* n = find(key);
    if (override_value* o = override_of(full)) {
      std::optional<T> v = from_raw(o->raw);
      if (!v) ctx_.fail(full, fmt::format("expected {}, got '{}' (from --set)", expected, o->raw));
      out = *v;
    } else if (n != nullptr) {
      std::optional<T> v = from_node(*n);
      if (!v) ctx_.fail(full, fmt::format("expected {}, got {}", expected, type_name(*n)));
      out = *v;
    }
    record(full, out);
  }

  template <class T, class Out>
  void read_list(std::string_view key, Out& out, std::string_view expected) {
    const std::string full = join_key(prefix_, key);
    const toml::node* n = find(key);
    std::optional<toml::table> parsed;
    if (override_value* o = override_of(full)) {
      std::string raw = o->raw.starts_with('[') ? o->raw : "[" + o->raw + "]";
      parsed = try_parse("v = " + raw);
      if (!parsed) {  // bare words: a list of strings
        std::string words;
        std::stringstream ss(o->raw);
        for (std::string w; std::getline(ss, w, ',');) {
          if (!words.empty()) words += ',';
          words += quote(w);
        }
        parsed = try_parse("v = [" + words + "]");
      }
      if (!parsed) ctx_.fail(full, fmt::format("expected {}, got '{}' (from --set)", expected, o->raw));
      n = parsed->get("v");
    }
    if (n != nullptr) {
      const toml::array* arr = n->as_array();
      if (arr == nullptr) ctx_.fail(full, fmt::format("expected {}, got {}", expected, type_name(*n)));
      out.clear();
      for (const toml::node& e : *arr) {
        std::optional<T> v = e.value<T>();
        if (!v || (std::is_integral_v<T> ? !e.is_integer() : !e.is_string()))
          ctx_.fail(full, fmt::format("expected {}, got {} in the list", expected, type_name(e)));
        out.push_back(*v);
      }
    }
    std::string shown;
    for (const auto& v : out) shown += (shown.empty() ? "" : ", ") + fmt::format("{}", v);
    ctx_.resolved.push_back(fmt::format("{} = [{}]", full, shown));
  }

  template <class T>
  void record(const std::string& full, const T& v) {
    if constexpr (std::is_same_v<T, std::string>)
      ctx_.resolved.push_back(full + " = " + quote(v));
    else
      ctx_.resolved.push_back(fmt::format("{} = {}", full, v));
  }

  const toml::table* table_;
  std::string prefix_;
  read_context& ctx_;
  std::set<std::string> seen_;
};

constexpr std::int64_t int_max = std::numeric_limits<int>::max();
constexpr std::int64_t i64_max = std::numeric_limits<std::int64_t>::max();

void read_cluster(table_reader r, cluster_section& c) {
  r.get("name", c.name);
  r.get("bind_address", c.bind_address);
  r.get("heartbeat_interval_ms", c.heartbeat_interval_ms, 0, 3600000);
  r.get("connection_timeout_ms", c.connection_timeout_ms, 0, 3600000);
  r.get("startup_timeout_s", c.startup_timeout_s, 1, 86400);
  r.get("shutdown_timeout_s", c.shutdown_timeout_s, 1, 3600);
  r.get("caf_policy", c.caf_policy);
  r.get("caf_threads", c.caf_threads, 0, 1024);
  r.get("max_message_bytes", c.max_message_bytes, min_max_message_bytes, max_max_message_bytes);
  r.finish();
}

void read_tls(table_reader r, tls_section& t) {
  r.get("enabled", t.enabled);
  r.get("certificate", t.certificate);
  r.get("key", t.key);
  r.get("cafile", t.cafile);
  r.get("passphrase", t.passphrase);
  r.finish();
}

void read_model(table_reader r, model_section& m) {
  r.get("path", m.path);
  r.get("runner", m.runner);
  r.get("tokenizer", m.tokenizer);
  r.get("act_quant", m.act_quant);
  r.get("cuda_graphs", m.cuda_graphs);
  r.get("cuda_graph_max_batch", m.cuda_graph_max_batch, 1, 1 << 16);
  table_reader toy = r.sub("toy");
  toy.get("vocab_size", m.toy.vocab_size, 2, int_max);
  toy.get("entries_per_block", m.toy.entries_per_block, 1, 1 << 20);
  toy.get("max_model_len", m.toy.max_model_len, 2, i64_max);
  toy.get("step_ms", m.toy.step_ms, 0.0, 3600e3);
  toy.get("row_us", m.toy.row_us, 0.0, 1e9);
  toy.finish();
  r.finish();
}

void read_router(table_reader r, router_section& s) {
  r.get("node", s.node, 0, int_max);
  r.get("host", s.host);
  r.get("port", s.port, 0, 65535);  // 0: a port the system picks (launch's ready line names it)
  r.get("max_live_requests", s.max_live_requests, 1, int_max);
  r.get("max_prompt_bytes", s.max_prompt_bytes, 1, std::int64_t(1) << 30);
  r.get("max_prompt_tokens", s.max_prompt_tokens, 0, i64_max);
  r.get("max_stop_strings", s.max_stop_strings, 0, 1024);
  r.get("max_stop_string_bytes", s.max_stop_string_bytes, 1, 1 << 16);
  r.get("max_logprobs", s.max_logprobs, 0, 1 << 16);
  r.get("affinity_min_tokens", s.affinity_min_tokens, 1, i64_max);
  r.get("affinity_max_imbalance", s.affinity_max_imbalance, 0, int_max);
  r.get("probe_timeout_ms", s.probe_timeout_ms, 1, 3600000);
  r.finish();
}

void read_scheduler(table_reader r, scheduler_section& s) {
  r.get("max_num_batched_tokens", s.max_num_batched_tokens, 1, i64_max);
  r.get("max_prefill_chunk", s.max_prefill_chunk, 0, i64_max);
  r.get("max_num_running", s.max_num_running, 1, int_max);
  r.get("max_num_queued", s.max_num_queued, 0, int_max);
  r.get("max_queued_tokens", s.max_queued_tokens, 0, i64_max);
  r.get("max_model_len", s.max_model_len, 0, i64_max);
  r.get("overlap", s.overlap);
  r.get("step_timeout_s", s.step_timeout_s, 1, 86400);
  r.get("grammar_classify_ms", s.grammar_classify_ms, 0, 3600000);
  r.finish();
}

void read_kv(table_reader r, kv_section& k) {
  r.get("pool_tokens", k.pool_tokens, 1, int_max);  // block counts are int32
  r.get("num_blocks", k.num_blocks, 0, int_max);
  r.get("enable_prefix_caching", k.enable_prefix_caching);
  r.get("enable_replay", k.enable_replay);
  r.get("num_snapshots", k.num_snapshots, 0, int_max);
  r.get("snapshot_interval", k.snapshot_interval, 0, int_max);
  r.finish();
}

void read_logging(table_reader r, logging_section& l) {
  r.get("level", l.level);
  r.get("file", l.file);
  r.get("status_interval_s", l.status_interval_s, 0.0, 86400.0);
  r.finish();
}

void read_nodes(table_reader& root, std::vector<node_config>& nodes) {
  for (table_reader& r : root.array_of_tables("nodes")) {
    node_config n;
    r.get("host", n.host);
    r.get("port", n.port, 0, 65535);  // 0 = missing: validate() names it
    r.get("bind", n.bind);
    r.get("devices", n.devices);
    r.finish();
    nodes.push_back(std::move(n));
  }
}

void read_groups(table_reader& root, std::vector<group_config>& groups) {
  for (table_reader& r : root.array_of_tables("groups")) {
    group_config g;
    r.get("scheduler", g.scheduler_node, 0, int_max);
    r.get("executors", g.executor_nodes);
    r.finish();
    groups.push_back(std::move(g));
  }
}

}  // namespace

namespace {

void check(bool cond, const read_context& ctx, const std::string& key, const std::string& what) {
  if (!cond) ctx.fail(key, what);
}

/// Whether `host` reaches only the machine it is used on: a loopback name or address
/// (localhost, 127.0.0.0/8, ::1, also IPv4-mapped) or an unspecified one (0.0.0.0, ::), which
/// a connect takes as this machine too. Other names are not resolved.
bool is_local_only(std::string host) {
  std::transform(host.begin(), host.end(), host.begin(),
                 [](unsigned char ch) { return char(std::tolower(ch)); });
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (host == "localhost" || host.ends_with(".localhost")) return true;
  unsigned char a[16] = {};
  if (inet_pton(AF_INET, host.c_str(), a) == 1)
    return a[0] == 127 || (a[0] | a[1] | a[2] | a[3]) == 0;
  if (inet_pton(AF_INET6, host.c_str(), a) != 1) return false;
  bool zero_to_14 = true;
  for (int i = 0; i < 15; ++i) zero_to_14 &= a[i] == 0;
  if (zero_to_14 && (a[15] == 0 || a[15] == 1)) return true;  // :: and ::1
  bool mapped = a[10] == 0xFF && a[11] == 0xFF;               // ::ffff:127.x.y.z
  for (int i = 0; i < 10; ++i) mapped &= a[i] == 0;
  return mapped && a[12] == 127;
}

/// Every node finds the coordinator at nodes.0.host, and a node on another host can reach only
/// an address that is not local-only: a file that gave node 0 a loopback address and another
/// node another host's address was accepted, and that node waited for the coordinator on its
/// own host until cluster.startup_timeout_s (node 0 as long for it). No setup needs the mix --
/// on one host, 127.0.0.1 serves every node -- so it is refused. And the other nodes connect to
/// nodes.0.host, so node 0 must listen there: bound to a loopback address (the default
/// cluster.bind_address) it refuses them.
void validate_node_addresses(const cluster_config& c, const read_context& ctx) {
  if (c.nodes.size() < 2) return;  // nobody connects to a lone node
  const std::string& coordinator = c.nodes[0].host;
  if (is_local_only(coordinator)) {
    for (std::size_t i = 1; i < c.nodes.size(); ++i)
      check(is_local_only(c.nodes[i].host), ctx, fmt::format("nodes.{}.host", i),
            fmt::format("'{}' is not a loopback address, but the coordinator's nodes.0.host is "
                        "'{}': every node looks for the coordinator at nodes.0.host, and from "
                        "another host that address is the other host itself, so node {} would "
                        "never join. Across hosts, give every node an address the others reach "
                        "(nodes.0.host included); with every node on one host, use 127.0.0.1 "
                        "for all",
                        c.nodes[i].host, coordinator, i));
    return;
  }
  const std::string& bind = c.bind_of(0);
  const bool own_bind = !c.nodes[0].bind.empty();
  check(!is_local_only(bind) || bind == "0.0.0.0" || bind == "::", ctx,
        own_bind ? "nodes.0.bind" : "cluster.bind_address",
        fmt::format("node 0 would listen on '{}' only, but the other nodes connect to it at "
                    "nodes.0.host = '{}', which is not a loopback address: they would be "
                    "refused. Make node 0 listen on that address ({}), or give every node "
                    "127.0.0.1 when all are on one host (the internal plane is unauthenticated: "
                    "on a network you do not control, see tls.enabled)",
                    bind, coordinator,
                    own_bind ? "nodes.0.bind" : "nodes.0.bind or cluster.bind_address"));
}

void validate_nodes(const cluster_config& c, const read_context& ctx) {
  check(!c.nodes.empty(), ctx, "nodes", "at least one [[nodes]] entry is required");
  std::set<std::pair<std::string, int>> used;
  for (std::size_t i = 0; i < c.nodes.size(); ++i) {
    const node_config& n = c.nodes[i];
    const std::string key = fmt::format("nodes.{}", i);
    check(n.port != 0, ctx, key + ".port", "required (the node's internal-plane port)");
    check(!n.host.empty(), ctx, key + ".host", "must not be empty");
    check(!n.devices.empty(), ctx, key + ".devices", "must list at least one device");
    for (const std::string& d : n.devices) {  // "gpu" failed only when the executor started
      const bool cuda_n = d.size() > 5 && d.starts_with("cuda:") && d.size() <= 9 &&
                          d.find_first_not_of("0123456789", 5) == std::string::npos;
      check(d == "cpu" || d == "cuda" || cuda_n, ctx, key + ".devices",
            fmt::format("device '{}': expected cpu, cuda or cuda:N", d));
    }
    check(used.insert({n.host, n.port}).second, ctx, key + ".port",
          fmt::format("{}:{} is already used by another node", n.host, n.port));
  }
  const int router_node = c.router.node;
  check(router_node < int(c.nodes.size()), ctx, "router.node",
        fmt::format("no node {} (the file has {} nodes)", router_node, c.nodes.size()));
  check(!used.contains({c.router.host, c.router.port}), ctx, "router.port",
        fmt::format("{}:{} is already a node's port", c.router.host, c.router.port));
  validate_node_addresses(c, ctx);
}

/// The model runner's executors of one group on one backend: they run every step in lockstep
/// and must sample the same tokens, and CPU and CUDA agree to a tolerance only (the toy runner
/// computes alike on any device).
void check_one_backend(const cluster_config& c, const group_config& grp, const read_context& ctx,
                       const std::string& key) {
  if (c.model.runner != "cpu") return;
  const auto is_cpu = [](const std::string& d) { return d == "cpu"; };
  for (std::size_t i = 1; i < grp.executor_devices.size(); ++i) {
    if (is_cpu(grp.executor_devices[i]) == is_cpu(grp.executor_devices[0])) continue;
    ctx.fail(
        key + ".executors",
        fmt::format("node {}'s executor runs on {} and node {}'s on {}: the executors of a group "
                    "run every step in lockstep and must sample the same tokens, and the CPU "
                    "and CUDA backends agree only to a rounding tolerance, so the group would "
                    "fail at the first token they pick differently; give each backend a group "
                    "of its own",
                    grp.executor_nodes[0], grp.executor_devices[0], grp.executor_nodes[i],
                    grp.executor_devices[i]));
  }
}

void validate_groups(cluster_config& c, const read_context& ctx) {
  check(!c.groups.empty(), ctx, "groups", "at least one [[groups]] entry is required");
  std::vector<std::size_t> next_device(c.nodes.size(), 0);
  for (std::size_t g = 0; g < c.groups.size(); ++g) {
    group_config& grp = c.groups[g];
    const std::string key = fmt::format("groups.{}", g);
    check(grp.scheduler_node < int(c.nodes.size()), ctx, key + ".scheduler",
          fmt::format("no node {} (the file has {} nodes)", grp.scheduler_node, c.nodes.size()));
    check(!grp.executor_nodes.empty(), ctx, key + ".executors",
          "must list at least one node (one executor each)");
    grp.executor_devices.clear();
    for (int e : grp.executor_nodes) {
      check(e >= 0 && e < int(c.nodes.size()), ctx, key + ".executors",
            fmt::format("no node {} (the file has {} nodes)", e, c.nodes.size()));
      const node_config& n = c.nodes[std::size_t(e)];
      check(next_device[std::size_t(e)] < n.devices.size(), ctx, key + ".executors",
            fmt::format("node {} has {} device(s) and every one already has an executor", e,
                        n.devices.size()));
      grp.executor_devices.push_back(n.devices[next_device[std::size_t(e)]++]);
    }
    check_one_backend(c, grp, ctx, key);
  }
}

void validate_sections(const cluster_config& c, const read_context& ctx) {
  check(c.cluster.caf_policy == "sharing" || c.cluster.caf_policy == "stealing", ctx,
        "cluster.caf_policy", fmt::format("must be sharing or stealing, got '{}'", c.cluster.caf_policy));
  check(!c.cluster.name.empty(), ctx, "cluster.name", "must not be empty");
  // The token limit counts every waiting prompt and a prompt longer than it can never wait, so
  // 0 refused every request, an idle group's included (max_num_queued = 0 is the setting for
  // "no waiting line, the free batch slots only").
  check(c.scheduler.max_queued_tokens > 0, ctx, "scheduler.max_queued_tokens",
        "must be at least 1: 0 would refuse every prompt (for no waiting line, set "
        "scheduler.max_num_queued = 0)");
  // Snapshots need both a pool and boundaries: either key alone took no snapshot, silently.
  if (c.kv.num_snapshots > 0)
    check(c.kv.snapshot_interval > 0, ctx, "kv.snapshot_interval",
          fmt::format("must be at least 1 (token blocks between snapshots) with "
                      "kv.num_snapshots = {}: without it no snapshot is taken",
                      c.kv.num_snapshots));
  if (c.kv.snapshot_interval > 0)
    check(c.kv.num_snapshots > 0, ctx, "kv.num_snapshots",
          fmt::format("must be at least 1 (snapshots kept per executor) with "
                      "kv.snapshot_interval = {}: without it no snapshot is taken",
                      c.kv.snapshot_interval));
  check(c.model.runner == "cpu" || c.model.runner == "toy", ctx, "model.runner",
        fmt::format("must be cpu or toy, got '{}'", c.model.runner));
  check(c.model.runner != "cpu" || !c.model.path.empty(), ctx, "model.path",
        "required for runner 'cpu' (set it in the file or with --set model.path=DIR)");
  // The largest messages must fit under the bound with 1 MiB to spare for everything else:
  // a submitted prompt, and a step's prompt logprobs from the executor -- per row about 32
  // bytes plus 16 per top entry (CAF's encoding of position_logprobs is ~24 + 8 per entry).
  constexpr std::int64_t headroom = std::int64_t(1) << 20;
  const std::int64_t prompt_bytes = c.router.max_prompt_bytes + headroom;
  check(prompt_bytes <= c.cluster.max_message_bytes, ctx, "cluster.max_message_bytes",
        fmt::format(
            "{} leaves no room for a prompt of router.max_prompt_bytes = {} (needs at least {})",
            c.cluster.max_message_bytes, c.router.max_prompt_bytes, prompt_bytes));
  const double step_logprob_bytes =
      double(c.scheduler.max_num_batched_tokens) * (32.0 + 16.0 * double(c.router.max_logprobs)) +
      double(headroom);
  check(step_logprob_bytes <= double(c.cluster.max_message_bytes), ctx, "cluster.max_message_bytes",
        fmt::format("{} is too small for one step's prompt logprobs: "
                    "scheduler.max_num_batched_tokens = {} rows "
                    "of router.max_logprobs = {} entries need up to {:.0f} bytes",
                    c.cluster.max_message_bytes, c.scheduler.max_num_batched_tokens,
                    c.router.max_logprobs, step_logprob_bytes));
  // A peer silent for connection_timeout_ms is declared down; an idle link is silent between
  // heartbeats, so they must come well inside it (3000 against 1000 took the cluster down
  // moments after it was ready).
  if (c.cluster.connection_timeout_ms > 0)
    check(c.cluster.heartbeat_interval_ms > 0 &&
              2 * std::int64_t(c.cluster.heartbeat_interval_ms) <= c.cluster.connection_timeout_ms,
          ctx, "cluster.heartbeat_interval_ms",
          fmt::format("{} must be positive and at most half of cluster.connection_timeout_ms ({}): "
                      "an idle link is silent between heartbeats",
                      c.cluster.heartbeat_interval_ms, c.cluster.connection_timeout_ms));
  static const std::set<std::string> levels{"trace", "debug", "info", "warn", "error", "off"};
  check(levels.contains(c.logging.level), ctx, "logging.level",
        fmt::format("must be one of trace, debug, info, warn, error, off; got '{}'", c.logging.level));
  if (c.tls.enabled) {
    // CAF falls back to anonymous TLS when no certificate is configured: encrypted but
    // unauthenticated, so anyone could join. Refuse instead.
    check(!c.tls.certificate.empty(), ctx, "tls.certificate",
          "required when tls.enabled = true (without it CAF silently uses anonymous, "
          "unauthenticated TLS)");
    check(!c.tls.key.empty(), ctx, "tls.key", "required when tls.enabled = true");
    check(!c.tls.cafile.empty(), ctx, "tls.cafile",
          "required when tls.enabled = true (peers are verified against it)");
  } else {
    // Files given with TLS off meant a cluster that looked configured for TLS ran in plain
    // text, unauthenticated, without a word.
    for (const auto& [key, value] :
         {std::pair{"tls.certificate", &c.tls.certificate}, std::pair{"tls.key", &c.tls.key},
          std::pair{"tls.cafile", &c.tls.cafile}})
      check(value->empty(), ctx, key,
            "given while tls.enabled = false: the cluster would run unencrypted and "
            "unauthenticated; set tls.enabled = true, or remove it");
  }
}

std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

std::map<std::string, override_value> parse_overrides(const std::vector<std::string>& overrides,
                                                      std::string_view origin) {
  std::map<std::string, override_value> out;
  for (const std::string& o : overrides) {
    const std::size_t eq = o.find('=');
    DI_CHECK(eq != std::string::npos && eq > 0, "--set '{}': expected key=value (e.g. model.path=/models/x)", o);
    std::string key = o.substr(0, eq);
    // "nodes[1].port" is accepted as a spelling of "nodes.1.port".
    for (char& ch : key)
      if (ch == '[') ch = '.';
    std::erase(key, ']');
    out[key] = {o.substr(eq + 1), false};
  }
  return out;
}

}  // namespace

const std::string& cluster_config::bind_of(int rank) const {
  const node_config& n = nodes.at(std::size_t(rank));
  return n.bind.empty() ? cluster.bind_address : n.bind;
}

std::string cluster_config::tokenizer_dir() const {
  return model.tokenizer.empty() ? model.path : model.tokenizer;
}

cluster_config parse_cluster_config(std::string_view toml_text,
                                    const std::vector<std::string>& overrides,
                                    std::string_view origin) {
  toml::table parsed;
  try {
    parsed = toml::parse(toml_text, origin);
  } catch (const toml::parse_error& e) {
    DI_FAIL("{}:{}:{}: {}", origin, e.source().begin.line, e.source().begin.column, e.description());
  }
  read_context ctx{.origin = std::string(origin), .overrides = parse_overrides(overrides, origin)};
  cluster_config c;
  c.origin = std::string(origin);
  table_reader root(&parsed, "", ctx);
  read_cluster(root.sub("cluster"), c.cluster);
  read_tls(root.sub("tls"), c.tls);
  read_model(root.sub("model"), c.model);
  read_router(root.sub("router"), c.router);
  read_scheduler(root.sub("scheduler"), c.scheduler);
  read_kv(root.sub("kv"), c.kv);
  read_logging(root.sub("logging"), c.logging);
  read_nodes(root, c.nodes);
  read_groups(root, c.groups);
  // [server] belongs to the HTTP front end (`deepinfer serve`, server/server_config.hpp).
  root.skip("server");
  for (auto& [key, o] : ctx.overrides) o.used |= key.rfind("server.", 0) == 0;
  root.finish();
  for (const auto& [key, o] : ctx.overrides)
    DI_CHECK(o.used, "--set {}={}: {} has no key {} (see the README's \"Cluster file\")", key,
             o.raw, origin, key);
  validate_sections(c, ctx);
  validate_nodes(c, ctx);
  validate_groups(c, ctx);
  c.resolved = std::move(ctx.resolved);
  std::string all;
  for (const std::string& line : c.resolved) all += line + "\n";
  c.fingerprint = fmt::format("{:016x}", fnv1a(all));
  return c;
}

cluster_config load_cluster_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in = open_input_file(path, "the cluster file");
  std::stringstream text;
  text << in.rdbuf();
  return parse_cluster_config(text.str(), overrides, path);
}

}  // namespace di
