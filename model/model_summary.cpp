// Checkpoint-versus-config verification and parameter accounting for `deepinfer inspect`.
#include "model/model_summary.hpp"

#include "common/error.hpp"
#include "common/printable.hpp"

#include <fmt/format.h>

#include <set>

namespace di {

namespace {

std::string describe(dtype t, std::span<const std::int64_t> shape) {
  return fmt::format("{} {}", dtype_name(t), format_shape(shape));
}

bool is_unverified(const std::string& name) {
  for (const auto& prefix : unverified_weight_prefixes())
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

/// Active parameters of one decoded token: everything except the routed experts, plus
/// num_experts_per_tok experts per layer (FP4 counted as two parameters per byte).
std::int64_t active_params(const model_summary& s, const model_config& c) {
  std::int64_t per_expert = s.routed_expert_params / (std::int64_t(c.num_layers) * c.n_routed_experts);
  // Engram tables are looked up (a few rows per token), not multiplied: leave them out.
  return s.total_params - s.routed_expert_params - s.engram_table_params +
         per_expert * c.num_layers * c.num_experts_per_tok;
}

}  // namespace

model_summary summarize_checkpoint(const checkpoint& ckpt, const model_config& config) {
  model_summary s;
  auto specs = expected_weights(config);
  s.num_expected = specs.size();
  std::set<std::string> implied;
  for (const auto& spec : specs) {
    implied.insert(spec.name);
    const tensor_view* t = ckpt.find(spec.name);
    if (t == nullptr) {
      s.missing.push_back(spec.name);
      continue;
    }
    if (t->type != spec.type || t->shape != spec.shape) {
      s.mismatched.push_back({spec.name, describe(spec.type, spec.shape), describe(t->type, t->shape)});
      continue;
    }
    ++s.num_found;
    std::int64_t n = spec.num_params();
    s.params_per_group[spec.group] += n;
    s.total_params += n;
    if (spec.group == weight_group::routed_experts) s.routed_expert_params += n;
    if (spec.name.find(".engram.embed.") != std::string::npos) s.engram_table_params += n;
  }
  for (const auto& t : ckpt.tensors()) {
    if (implied.count(t.name)) continue;
    (is_unverified(t.name) ? s.unverified : s.unexpected).push_back(t.name);
  }
  s.bytes_per_dtype = ckpt.bytes_per_dtype();
  for (const auto& [t, bytes] : s.bytes_per_dtype) s.total_bytes += bytes;
  if (s.matches()) s.active_params_per_token = active_params(s, config);
  return s;
}

std::string describe_mismatch(const model_summary& s, const std::string& dir) {
  const std::size_t n = s.mismatched.size() + s.missing.size() + s.unexpected.size();
  if (n == 0) return {};
  std::string first;
  if (!s.mismatched.empty())
    first = fmt::format("wrong: {}: expected {}, found {}", s.mismatched.front().name,
                        s.mismatched.front().expected, s.mismatched.front().found);
  else if (!s.missing.empty())
    first = fmt::format("missing: {}", s.missing.front());
  else
    first = fmt::format("unexpected: {}", printable(s.unexpected.front()));  // the file's bytes
  return fmt::format("{} ({} problem{}; `deepinfer inspect --model {}` lists {})", first, n,
                     n == 1 ? "" : "s", dir, n == 1 ? "it" : "them");
}

void require_matching_checkpoint(const checkpoint& ckpt, const model_config& config,
                                 const std::string& dir) {
  const model_summary s = summarize_checkpoint(ckpt, config);
  DI_CHECK(s.matches(), "the checkpoint does not match its config.json: {}",
           describe_mismatch(s, dir));
}

}  // namespace di
