// How a random-weight checkpoint's values are drawn: a counter-based generator (every value a
// pure function of seed, tensor name and index, so any chunk can be generated on any thread
// and the bytes never depend on the thread count) and one rule per tensor that keeps
// activations well-scaled through all layers of a random model.
#pragma once

#include "config/model_config.hpp"
#include "model/weight_spec.hpp"

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace di {

/// 64-bit hash (splitmix64 finalizer) used to derive stream keys and draws.
inline std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

/// Approximately standard-normal value number `index` of stream `key`: the Irwin-Hall sum of
/// four 16-bit uniforms from one 64-bit hash, rescaled to unit variance (bounded at +-3.46,
/// which keeps block quantization free of outliers). Inline: it runs once per weight.
inline float counter_normal(std::uint64_t key, std::uint64_t index) {
  const std::uint64_t h = mix64(key + (index + 1) * 0x9e3779b97f4a7c15ull);
  const std::uint32_t sum = std::uint32_t(h & 0xffff) + std::uint32_t((h >> 16) & 0xffff) +
                            std::uint32_t((h >> 32) & 0xffff) + std::uint32_t(h >> 48);
  // four U{0..65535}: mean 2 x 65535, std sqrt(4 x (65536^2 - 1) / 12) = 37837.23
  return (float(sum) - 2.0f * 65535.0f) * (1.0f / 37837.23f);
}

/// The stream key of tensor `name` under `seed`.
std::uint64_t stream_key(std::uint64_t seed, std::string_view name);

/// Constants of the initialisation (see the golden README: damped residual branches and a
/// base shared by the experts of a projection keep a random model well-behaved).
struct init_scales {
  float residual_damp = 0.15f;          ///< std x sqrt(fan_in) of branch output projections
  float expert_shared_fraction = 0.9f;  ///< variance share of the base shared by all experts
  float logit_std = 7.0f;               ///< target std of the logits (head std x sqrt(hidden))
  float unused_token_damp = 0.02f;      ///< head rows of ids with no ordinary token
  float norm_jitter = 0.1f;             ///< norm weights: 1 + jitter x N(0, 1)
  float sink_std = 0.5f;                ///< attention sinks: N(0, sink_std)
  float hc_pre_logit = -1.1f;           ///< sigmoid(-1.1) = 0.25 = 1 / hc_mult
  float hc_comb_diag = 2.0f;            ///< comb logits: identity-leaning rows
  float hc_scale = 0.5f;                ///< hc_*_scale: how much the mix depends on the token
  float ape_std = 0.2f;                 ///< V4 compressor position embedding
};

/// How the logical values of one tensor (before quantization) are drawn.
struct init_rule {
  enum class kind { normal, hash_routing };
  kind type = kind::normal;
  std::uint64_t key = 0;  ///< the tensor's own stream
  float mean = 0.0f;
  float std = 0.0f;
  std::vector<float> column_mean;  ///< when set: the mean of each column (mHC base and scale)
  /// Routed experts: value = std x (sqrt(1-f) N(key) + sqrt(f) N(shared_key)), so all
  /// experts of one projection are correlated and routing choices are not chaotic.
  std::uint64_t shared_key = 0;
  float shared_fraction = 0.0f;
  /// Rows multiplied by `row_damp` (head rows of ids without an ordinary token); may be null.
  std::shared_ptr<const std::vector<std::uint8_t>> damped_rows;
  float row_damp = 1.0f;
  int num_experts = 0;  ///< hash_routing: distinct experts drawn from [0, num_experts)
};

/// What the rules depend on besides the tensor itself.
struct init_context {
  const model_config* config = nullptr;
  std::uint64_t seed = 0;
  init_scales scales;
  /// One flag per vocabulary id: 1 where the tokenizer has no ordinary token (added or
  /// special tokens, ids past its end). Null: damp nothing.
  std::shared_ptr<const std::vector<std::uint8_t>> unused_token_rows;
};

/// The rule for `spec` (a stored weight, not a `.scale`). Throws di::error for a tensor no
/// rule covers, so a new tensor in weight_spec cannot silently get arbitrary values.
init_rule make_init_rule(const weight_spec& spec, const init_context& context);

/// Logical rows [row0, row0 + num_rows) of a [*, cols] tensor, row-major into `out`.
void generate_rows(const init_rule& rule, std::int64_t row0, std::int64_t num_rows,
                   std::int64_t cols, float* out);

/// Hash-routing table rows (tid2eid): `cols` distinct expert ids per token.
void generate_routing_rows(const init_rule& rule, std::int64_t row0, std::int64_t num_rows,
                           std::int64_t cols, std::int64_t* out);

}  // namespace di
