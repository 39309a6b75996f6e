// The scheduler actor: one per data-parallel group. It owns the group's runtime::scheduler
// (continuous batching, paged KV with prefix reuse, preemption) and drives its executors in
// lockstep: every executor of the group gets every plan and must return the same tokens (the
// seam expert parallelism will use). Scheduling is overlapped: with step N on the executors it
// already sends N+1 (decode inputs as placeholders the executors patch from their own last
// sample), so an executor finds its next plan waiting when it finishes a step.
//
// Failure: it monitors its executors and its router. An executor that dies, answers with an
// error, misses the step deadline or disagrees with its peers ends every live request with
// finish_reason "error" and a message naming the executor, and the scheduler stops (the router
// sees the group go down and stops sending it work).
//
// KV-cache seam: for now the scheduler's block manager owns the prefix index and the block
// pools of its group (they are only ever touched from here, and the executors hold the bytes).
// The KV-cache actor of wave 2 (host/disk tiers, prefill→decode transfer) takes over the pools
// behind the same calls the scheduler makes today: match/allocate/free/cache_full_blocks and
// the prefix probe the router uses.
#pragma once

#include "actors/messages.hpp"
#include "config/cluster_config.hpp"

#include <caf/actor_system.hpp>

#include <memory>
#include <vector>

namespace di::tok {
class tokenizer;
}

namespace di::actors {

struct scheduler_params {
  int group = 0;
  int node = 0;  ///< rank of this node
  std::vector<executor_actor> executors;
  std::vector<int> executor_nodes;
  scheduler_section limits;
  kv_section kv;
  double status_interval_s = 10;
  int startup_timeout_s = 600;
  std::vector<std::int32_t> eos_token_ids;
  std::shared_ptr<const tok::tokenizer> tokenizer;  ///< detokenizes events; null = no text
};

scheduler_actor spawn_scheduler_actor(caf::actor_system& sys, scheduler_params params);

}  // namespace di::actors
