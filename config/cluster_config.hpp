// The cluster file (TOML): which nodes exist, which data-parallel groups run where, the model,
// scheduler limits, KV pools, security and logging. One file describes the whole cluster;
// every node reads the same file (and the same `--set key=value` overrides), and the
// coordinator checks that they agree through `fingerprint`. Every key is documented in the
// README ("Cluster file"); an unknown key, a value of the wrong type or out of range is a
// di::error naming the key.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace di {

/// cluster.max_message_bytes: the largest payload a BASP message may announce -- its default
/// and its range (the header's 32-bit length bounds it above).
inline constexpr std::int64_t default_max_message_bytes = std::int64_t(16) << 20;
inline constexpr std::int64_t min_max_message_bytes = std::int64_t(1) << 20;
inline constexpr std::int64_t max_max_message_bytes = std::int64_t(0xffffffff);

/// [cluster]: the internal plane.
struct cluster_section {
  std::string name = "deepinfer";          ///< CAF application id: other clusters are refused
  std::string bind_address = "127.0.0.1";  ///< default listen address of every node
  int heartbeat_interval_ms = 500;         ///< CAF heartbeats between nodes; 0 = off
  int connection_timeout_ms = 5000;        ///< a silent peer is declared down after this; 0 = off
  int startup_timeout_s = 600;             ///< nodes joining, executors loading, actors starting
  int shutdown_timeout_s = 10;             ///< orderly shutdown before processes are killed
  std::string caf_policy = "sharing";      ///< CAF scheduler policy: sharing | stealing
  int caf_threads = 0;                     ///< CAF worker threads; 0 = CAF's default
  /// The largest payload a BASP message may announce (handshakes: 1 MiB); a longer one closes
  /// its connection (actors/basp_frame_guard.hpp).
  std::int64_t max_message_bytes = default_max_message_bytes;
};

/// [tls]: CAF's OpenSSL module on the internal plane and the client port.
struct tls_section {
  bool enabled = false;
  std::string certificate;  ///< PEM certificate of this node (required when enabled)
  std::string key;          ///< its private key (required when enabled)
  std::string cafile;       ///< CA that signed every node's and client's certificate
  std::string passphrase;   ///< of the key, if encrypted
};

/// [model.toy]: the deterministic toy runner (cluster tests without weights).
struct toy_model_section {
  int vocab_size = 1000;          ///< sampled ids are in [0, vocab_size)
  int entries_per_block = 16;     ///< tokens per KV block (the prefix-cache unit)
  std::int64_t max_model_len = 4096;
  double step_ms = 0;             ///< simulated device time per step
  double row_us = 0;              ///< ... plus per row
};

/// [model]
struct model_section {
  std::string path;       ///< checkpoint folder (config.json, *.safetensors, tokenizer.json)
  std::string runner = "cpu";  ///< cpu | toy
  std::string tokenizer;  ///< folder with tokenizer.json; empty = path (toy: the bundled one)
  bool act_quant = true;  ///< FP8 activation quantization (DeepSeek's official numerics)
  /// CUDA executors: decode steps replay captured CUDA graphs (forward_options::cuda_graphs);
  /// false launches every kernel of every step.
  bool cuda_graphs = true;
  /// CUDA executors: the largest decode batch captured (sizes of forward_options'
  /// graph_batch_sizes up to it; larger batches run eagerly). Each captured size keeps its own
  /// input and output buffers per layer and piece (about 0.5 MB per row and layer at
  /// V4.1-Flash widths: ~4 GB for the sizes up to 64 on its 40 layers, ~18 GB up to 256).
  int cuda_graph_max_batch = 64;
  toy_model_section toy;
};

/// [router]: the client-facing actor.
struct router_section {
  int node = 0;                         ///< node that runs the router
  std::string host = "127.0.0.1";       ///< address clients connect to (and it listens on)
  std::uint16_t port = 7000;            ///< port clients connect to (0: any free one)
  int max_live_requests = 4096;         ///< requests in flight over all groups
  std::int64_t max_prompt_bytes = 1 << 20;  ///< text prompt size
  std::int64_t max_prompt_tokens = 0;       ///< 0 = the context (max_model_len - 1)
  int max_stop_strings = 16;
  int max_stop_string_bytes = 256;
  int max_logprobs = 20;
  std::int64_t affinity_min_tokens = 1;  ///< cached tokens that make a group preferred
  int affinity_max_imbalance = 8;        ///< ... unless it has this many more live requests
  int probe_timeout_ms = 500;            ///< prefix-cache probes of the groups
};

/// [scheduler]: each data-parallel group's continuous-batching scheduler.
struct scheduler_section {
  std::int64_t max_num_batched_tokens = 8192;
  std::int64_t max_prefill_chunk = 0;
  int max_num_running = 256;
  int max_num_queued = 4096;
  std::int64_t max_queued_tokens = std::int64_t(1) << 24;
  std::int64_t max_model_len = 0;  ///< 0 = what the runner supports
  bool overlap = true;             ///< plan step N+1 while step N runs
  int step_timeout_s = 600;        ///< a step unanswered this long fails the group
  /// Before a request with a response_format starts, its grammar's token classes are computed
  /// for up to this long, off the step loop (the rest in the background, or on first use in a
  /// step); 0 = none (all on first use).
  int grammar_classify_ms = 1000;
};

/// [kv]: the paged KV pools and the prefix cache of each group.
struct kv_section {
  std::int64_t pool_tokens = 32768;  ///< tokens of context each executor's pools hold (all sequences)
  std::int64_t num_blocks = 0;       ///< cap on the scheduler's blocks per stream; 0 = all
  bool enable_prefix_caching = true;
  bool enable_replay = true;
  int num_snapshots = 0;      ///< slot snapshots per executor (exact prefix reuse)
  int snapshot_interval = 0;  ///< token blocks between snapshots; 0 = none
};

/// [logging]
struct logging_section {
  std::string level = "info";    ///< trace | debug | info | warn | error | off
  std::string file;              ///< also append to this file
  double status_interval_s = 10;  ///< the periodic status line; 0 = off
};

/// [[nodes]]: one process of the cluster; its index is its rank.
struct node_config {
  std::string host = "127.0.0.1";  ///< where the other nodes reach it
  std::uint16_t port = 0;          ///< its internal-plane port
  std::string bind;                ///< listen address; empty = cluster.bind_address
  std::vector<std::string> devices{"cpu"};
};

/// [[groups]]: one data-parallel group: a scheduler and the executors it drives in lockstep.
struct group_config {
  int scheduler_node = 0;
  std::vector<int> executor_nodes;          ///< one executor each, on the node's next device
  std::vector<std::string> executor_devices;  ///< derived: the device of each executor
};

struct cluster_config {
  cluster_section cluster;
  tls_section tls;
  model_section model;
  router_section router;
  scheduler_section scheduler;
  kv_section kv;
  logging_section logging;
  std::vector<node_config> nodes;
  std::vector<group_config> groups;

  std::string origin;       ///< the file (for messages)
  std::string fingerprint;  ///< hash of every resolved key: nodes must agree
  std::vector<std::string> resolved;  ///< "key = value" for every key, defaults included

  /// The listen address of node `rank`.
  const std::string& bind_of(int rank) const;
  /// The tokenizer folder (model.tokenizer, else model.path); empty for the toy runner
  /// without either (then the bundled tokenizer is used).
  std::string tokenizer_dir() const;
};

/// Reads and validates `path`; `overrides` are "key=value" (dotted keys, array elements by
/// index: nodes.1.port=7201). Throws di::error naming the file and the key.
cluster_config load_cluster_config(const std::string& path,
                                   const std::vector<std::string>& overrides = {});

/// As load_cluster_config, from TOML text; `origin` names it in errors.
cluster_config parse_cluster_config(std::string_view toml_text,
                                    const std::vector<std::string>& overrides = {},
                                    std::string_view origin = "cluster file");

}  // namespace di
