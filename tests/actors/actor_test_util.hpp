// Helpers for the actor tests: a CAF system configured as a node is, toy-runner cluster files,
// the bundled tokenizer (loaded once), deterministic prompts and request builders.
#pragma once

#include "actors/local_cluster.hpp"
#include "actors/messages.hpp"
#include "actors/scheduler_actor.hpp"
#include "config/cluster_config.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "runtime/sampling_rng.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <thread>

namespace di::test {

/// A CAF configuration with every message type registered and few threads.
struct test_config : caf::actor_system_config {
  test_config() {
    actors::register_types(*this);
    set("scheduler.max-threads", 4);
    set("scheduler.policy", caf::atom("sharing"));
    set("logger.console-verbosity", caf::atom("quiet"));
    set("logger.file-verbosity", caf::atom("quiet"));
  }
};

/// An actor system for one test.
struct test_system {
  test_config cfg;
  caf::actor_system sys{cfg};
};

/// A toy-runner cluster file with `num_groups` groups of `execs_per_group` executors on node 0
/// (enough devices listed), plus `extra` TOML appended (sections may be repeated by --set).
inline std::string toy_toml(int num_groups = 1, int execs_per_group = 1) {
  std::string devices;
  for (int i = 0; i < num_groups * execs_per_group; ++i) devices += (i ? ", " : "") + std::string("\"cpu\"");
  std::string s = "[model]\nrunner = \"toy\"\n[kv]\npool_tokens = 8192\n[logging]\nstatus_interval_s = 0\n"
                  "[[nodes]]\nport = 7100\ndevices = [" + devices + "]\n";
  for (int g = 0; g < num_groups; ++g) {
    s += "[[groups]]\nexecutors = [";
    for (int i = 0; i < execs_per_group; ++i) s += (i ? ", 0" : "0");
    s += "]\n";
  }
  return s;
}

inline cluster_config toy_config(std::vector<std::string> overrides = {}, int num_groups = 1,
                                 int execs_per_group = 1) {
  return parse_cluster_config(toy_toml(num_groups, execs_per_group), overrides, "test.toml");
}

/// Tokenizer, vocabulary and EOS of the toy runner with the bundled tokenizer (loaded once).
inline actors::model_assets toy_assets(const cluster_config& c) {
  static std::shared_ptr<const tok::tokenizer> tokenizer = std::make_shared<const tok::tokenizer>(
      tok::tokenizer::from_dir(std::string(DI_SOURCE_DIR) + "/assets/deepseek-v3-tokenizer"));
  actors::model_assets a{.tokenizer = tokenizer, .vocab_size = std::int64_t(tokenizer->vocab_size())};
  if (auto eos = tokenizer->eos_id(); eos && *eos < a.vocab_size) a.eos_token_ids.push_back(*eos);
  return a;
}

inline std::vector<std::int32_t> random_prompt(std::uint64_t seed, std::int64_t n, std::int32_t vocab = 1000) {
  std::vector<std::int32_t> t;
  for (std::int64_t i = 0; i < n; ++i)
    t.push_back(std::int32_t(runtime::random_bits(seed, std::uint64_t(i)) % std::uint64_t(vocab)));
  return t;
}

inline actors::submit_request ids_request(std::vector<std::int32_t> ids, int max_tokens, bool greedy = true,
                                          std::uint64_t seed = 7) {
  actors::submit_request r;
  r.prompt_ids = std::move(ids);
  r.params.max_tokens = max_tokens;
  r.params.temperature = greedy ? 0.0 : 1.0;
  r.params.seed = seed;
  r.params.ignore_eos = true;
  return r;
}

/// Polls `cond` for up to `timeout`.
template <class F>
bool wait_for(F cond, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

/// A scheduler for group 0 over the one executor `exec` (node 0) with `c`'s limits and kv
/// section, no status reports and a 30 s start-up limit: the group the actor tests build by
/// hand when they need to order its start against the router's.
inline actors::scheduler_actor spawn_one_executor_group(caf::actor_system& sys,
                                                        const actors::executor_actor& exec,
                                                        const cluster_config& c) {
  return actors::spawn_scheduler_actor(sys, {.group = 0,
                                             .executors = {exec},
                                             .executor_nodes = {0},
                                             .limits = c.scheduler,
                                             .kv = c.kv,
                                             .status_interval_s = 0,
                                             .startup_timeout_s = 30});
}

}  // namespace di::test
