// What `deepinfer inspect` reports about a checkpoint: its tensors checked against the ones
// the config implies (found / wrong dtype or shape / missing / unexpected) and the
// parameter and byte counts per weight group and dtype.
#pragma once

#include "config/model_config.hpp"
#include "model/checkpoint/checkpoint.hpp"
#include "model/weight_spec.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace di {

struct tensor_mismatch {
  std::string name;
  std::string expected;  ///< "F8_E4M3 [128, 32]"
  std::string found;
};

struct model_summary {
  std::size_t num_expected = 0;
  std::size_t num_found = 0;                 ///< present with the expected dtype and shape
  std::vector<std::string> missing;          ///< implied by the config, absent
  std::vector<tensor_mismatch> mismatched;   ///< present with another dtype or shape
  std::vector<std::string> unexpected;       ///< present, not implied, not in a known extra group
  std::vector<std::string> unverified;       ///< drafter / vision tensors (not checked yet)
  std::map<weight_group, std::int64_t> params_per_group;  ///< logical parameters (FP4: 2/byte)
  std::int64_t total_params = 0;
  std::int64_t routed_expert_params = 0;
  std::int64_t engram_table_params = 0;      ///< n-gram tables (gathered, not multiplied)
  std::int64_t active_params_per_token = 0;  ///< non-expert + top-k routed experts per layer
  std::map<dtype, std::uint64_t> bytes_per_dtype;
  std::uint64_t total_bytes = 0;

  bool matches() const { return missing.empty() && mismatched.empty() && unexpected.empty(); }
};

/// Compares the checkpoint's tensors with expected_weights(config) and counts everything.
model_summary summarize_checkpoint(const checkpoint& ckpt, const model_config& config);

/// One line for a summary that does not match: its first problem and how many there are,
/// pointing at `deepinfer inspect --model DIR` for the list ("" when it matches).
std::string describe_mismatch(const model_summary& s, const std::string& dir);

/// Throws di::error when the checkpoint's tensors do not match its config (headers only): a
/// checkpoint that does not match would otherwise load and fail inside a step, or run silently
/// with tensors it ignores.
void require_matching_checkpoint(const checkpoint& ckpt, const model_config& config,
                                 const std::string& dir);

}  // namespace di
