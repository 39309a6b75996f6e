// Initialisation rules of random-weight checkpoints, tensor by tensor (by official name), and
// the counter-based generator they draw from.
#include "model/make_model/weight_init.hpp"

#include "common/error.hpp"

#include <cmath>
#include <regex>
#include <string>

namespace di {

std::uint64_t stream_key(std::uint64_t seed, std::string_view name) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the name
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return mix64(mix64(seed) ^ h);
}

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

/// Logical input width of a [out, in] weight (packed FP4 stores two inputs per byte).
std::int64_t fan_in(const weight_spec& spec) {
  std::int64_t in = spec.shape.size() == 2 ? spec.shape[1] : 1;
  return spec.type == dtype::i8 ? 2 * in : in;
}

/// mHC base of one mixing site: [pre (hc), post (hc), comb (hc x hc)] or, for V4's head
/// mix, [pre (hc)]: pre ~ 1/hc_mult, post ~ 1, comb leaning to the identity.
std::vector<float> hc_base_means(std::int64_t size, int hc, const init_scales& s) {
  std::vector<float> m(std::size_t(size), 0.0f);
  for (int k = 0; k < hc; ++k) m[std::size_t(k)] = s.hc_pre_logit;
  if (size == hc) return m;
  for (int j = 0; j < hc; ++j) m[std::size_t(2 * hc + j * hc + j)] = s.hc_comb_diag;
  return m;
}

init_rule normal(float mean, float std) {
  init_rule r;
  r.mean = mean;
  r.std = std;
  return r;
}

/// Rules of model-level tensors and of names that end the same in every layer.
bool common_rule(const weight_spec& spec, std::string_view local, const init_context& ctx,
                 init_rule& r) {
  const model_config& c = *ctx.config;
  const init_scales& s = ctx.scales;
  if (spec.name == "embed.weight") {
    r = normal(0.0f, 1.0f);
  } else if (spec.name == "head.weight") {
    r = normal(0.0f, s.logit_std / std::sqrt(float(c.hidden_size)));
    r.damped_rows = ctx.unused_token_rows;
    r.row_damp = s.unused_token_damp;
  } else if (ends_with(local, "norm.weight") || local == "engram.q_weight" ||
             local == "engram.k_weight") {
    r = normal(1.0f, s.norm_jitter);
  } else if (ends_with(local, "_fn")) {  // hc_attn_fn, hc_ffn_fn, hc_head_fn
    r = normal(0.0f, 1.0f / std::sqrt(float(fan_in(spec))));
  } else if (ends_with(local, "_base")) {
    r = normal(0.0f, 0.1f);
    r.column_mean = hc_base_means(spec.shape[0], c.hc_mult, s);
  } else if (ends_with(local, "_scale") && spec.type == dtype::f32) {
    r = normal(s.hc_scale, 0.05f);
  } else {
    return false;
  }
  return true;
}

/// Rules of the per-layer attention, MoE and Engram tensors.
bool layer_rule(const weight_spec& spec, std::string_view local, const init_context& ctx,
                init_rule& r) {
  const init_scales& s = ctx.scales;
  const float fan_in_std = 1.0f / std::sqrt(float(fan_in(spec)));
  const float damped_std = s.residual_damp * fan_in_std;
  static const std::regex expert(R"(ffn\.experts\.\d+\.(w[123])\.weight)");
  std::cmatch m;
  if (local == "attn.attn_sink") {
    r = normal(0.0f, s.sink_std);
  } else if (local == "ffn.gate.bias" || local == "ffn.gate.bias_vl") {
    r = normal(0.0f, 0.0f);
  } else if (local == "ffn.gate.tid2eid") {
    r.type = init_rule::kind::hash_routing;
    r.num_experts = ctx.config->n_routed_experts;
  } else if (std::regex_match(local.data(), local.data() + local.size(), m, expert)) {
    r = normal(0.0f, m[1] == "w2" ? damped_std : fan_in_std);
    std::string base =
        spec.name.substr(0, spec.name.size() - local.size()) + "ffn.experts.*." + m[1].str();
    r.shared_key = stream_key(ctx.seed, base);
    r.shared_fraction = s.expert_shared_fraction;
  } else if (local == "attn.wo_b.weight" || local == "ffn.shared_experts.w2.weight" ||
             local == "engram.wkv.weight") {
    r = normal(0.0f, damped_std);  // outputs added to the residual streams
  } else if (local == "engram.embed.weight") {
    r = normal(0.0f, 1.0f);
  } else if (ends_with(local, "compressor.ape")) {
    r = normal(0.0f, s.ape_std);
  } else if (spec.shape.size() == 2) {
    r = normal(0.0f, fan_in_std);  // every other projection: unit-variance outputs
  } else {
    return false;
  }
  return true;
}

}  // namespace

init_rule make_init_rule(const weight_spec& spec, const init_context& context) {
  DI_CHECK(context.config != nullptr, "make_init_rule: no model config");
  std::string_view local = spec.name;
  if (spec.layer >= 0) {
    std::string prefix = "layers." + std::to_string(spec.layer) + ".";
    DI_CHECK(spec.name.rfind(prefix, 0) == 0, "tensor '{}' is not under '{}'", spec.name, prefix);
    local.remove_prefix(prefix.size());
  }
  init_rule r;
  if (!common_rule(spec, local, context, r) && !layer_rule(spec, local, context, r))
    DI_FAIL("make-model: no initialisation rule for tensor '{}' ({} {})", spec.name,
            dtype_name(spec.type), spec.shape.size());
  r.key = stream_key(context.seed, spec.name);
  return r;
}

void generate_rows(const init_rule& rule, std::int64_t row0, std::int64_t num_rows,
                   std::int64_t cols, float* out) {
  // Locals, not rule fields, in the loops: `out` could alias them otherwise.
  const std::uint64_t key = rule.key, shared_key = rule.shared_key;
  const bool has_shared = rule.shared_fraction > 0.0f;
  const float own = std::sqrt(1.0f - rule.shared_fraction),
              shared = std::sqrt(rule.shared_fraction);
  const float* column_mean = rule.column_mean.empty() ? nullptr : rule.column_mean.data();
  for (std::int64_t r = 0; r < num_rows; ++r) {
    const std::int64_t row = row0 + r;
    float scale = rule.std;
    if (rule.damped_rows && std::size_t(row) < rule.damped_rows->size() &&
        (*rule.damped_rows)[std::size_t(row)])
      scale *= rule.row_damp;
    const float mean = rule.mean;
    float* dst = out + r * cols;
    const std::uint64_t base = std::uint64_t(row) * std::uint64_t(cols);
    if (has_shared) {
      for (std::int64_t c = 0; c < cols; ++c)
        dst[c] = mean + scale * (own * counter_normal(key, base + std::uint64_t(c)) +
                                 shared * counter_normal(shared_key, base + std::uint64_t(c)));
    } else if (column_mean != nullptr) {
      for (std::int64_t c = 0; c < cols; ++c)
        dst[c] = column_mean[c] + scale * counter_normal(key, base + std::uint64_t(c));
    } else {
      for (std::int64_t c = 0; c < cols; ++c)
        dst[c] = mean + scale * counter_normal(key, base + std::uint64_t(c));
    }
  }
}

void generate_routing_rows(const init_rule& rule, std::int64_t row0, std::int64_t num_rows,
                           std::int64_t cols, std::int64_t* out) {
  DI_CHECK(rule.num_experts >= cols, "tid2eid: {} experts per token out of {}", cols,
           rule.num_experts);
  for (std::int64_t r = 0; r < num_rows; ++r) {
    std::int64_t* dst = out + r * cols;
    const std::uint64_t row_key = mix64(rule.key ^ std::uint64_t(row0 + r));
    std::uint64_t draw = 0;
    for (std::int64_t c = 0; c < cols; ++c) {
      std::int64_t e;
      bool taken;
      do {  // distinct experts per token
        e = std::int64_t(mix64(row_key + ++draw) % std::uint64_t(rule.num_experts));
        taken = false;
        for (std::int64_t p = 0; p < c; ++p) taken = taken || dst[p] == e;
      } while (taken);
      dst[c] = e;
    }
  }
}

}  // namespace di
