// The parallel part of make-model: every planned tensor is cut into row chunks; each chunk is
// drawn, quantized and written in place into its shard by whichever OpenMP thread takes it.
// The bytes depend only on the seed, never on the thread count or the order of chunks.
#pragma once

#include "model/make_model/model_plan.hpp"
#include "model/make_model/weight_init.hpp"

#include <csignal>
#include <filesystem>
#include <map>
#include <string>

namespace di {

struct shard_generation_params {
  const model_plan* plan = nullptr;
  const init_context* context = nullptr;
  std::filesystem::path out_dir;                ///< shard files are created here
  std::map<std::string, std::string> metadata;  ///< "__metadata__" of every shard
  bool show_progress = false;
  const volatile std::sig_atomic_t* cancel = nullptr;  ///< nonzero: stop (di::error "interrupted")
};

/// Writes every shard of the plan; throws di::error (removing unfinished shards) on failure.
void generate_shards(const shard_generation_params& params);

}  // namespace di
