// config.json → di::model_config: key-by-key reading with typed, named errors, then the
// cross-field checks (per-layer list lengths, source-layer ids, Engram bucket layout).
#include "config/model_config.hpp"
#include "common/json_brief.hpp"

#include "common/error.hpp"
#include "common/mapped_file.hpp"
#include "common/printable.hpp"
#include "common/strict_json.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
#include <string>
#include <vector>

namespace di {

namespace {

using json = nlohmann::json;

/// Reads keys of one JSON object; errors name the file and the full key path.
class key_reader {
 public:
  key_reader(const json& obj, std::string prefix, const std::string& source)
      : obj_(obj), prefix_(std::move(prefix)), source_(source) {}

  bool has(const char* key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }
  const json& raw(const char* key) const { return obj_.at(key); }
  std::string path(const char* key) const { return prefix_ + key; }

  /// `what` may quote the file's strings ("unsupported model type '...'"): printable() keeps
  /// their control characters (JSON escapes such as \u001b) out of the message.
  [[noreturn]] void fail(const char* key, std::string_view what) const {
    DI_FAIL("{}: key '{}': {}", source_, path(key), printable(what));
  }

  const json& required(const char* key) const {
    if (!has(key)) fail(key, "missing (required)");
    return obj_.at(key);
  }

  std::int64_t integer(const char* key) const { return to_int(key, required(key)); }
  std::int64_t integer_or(const char* key, std::int64_t fallback) const {
    return has(key) ? to_int(key, obj_.at(key)) : fallback;
  }
  /// A positive int: a value past INT32_MAX is "too large", not "not positive" (2^40 experts
  /// were told they "must be a positive integer").
  int positive(const char* key) const {
    const std::int64_t v = to_int(key, required(key), INT32_MAX);
    if (v <= 0) fail(key, fmt::format("must be a positive integer, got {}", v));
    return int(v);
  }
  /// An int in [lo, hi] (a wider integer was truncated: 2^32 + 1 heads read as 1).
  int int_or(const char* key, std::int64_t fallback, std::int64_t lo, std::int64_t hi) const {
    const std::int64_t v = has(key) ? to_int(key, obj_.at(key), hi) : fallback;
    if (v < lo) fail(key, fmt::format("must be in [{}, {}], got {}", lo, hi, v));
    return int(v);
  }
  double number(const char* key) const { return to_double(key, required(key)); }
  /// A number that must be finite and positive (a scale, a base, an epsilon).
  double positive_number_or(const char* key, double fallback) const {
    const double v = number_or(key, fallback);
    if (!(v > 0) || !std::isfinite(v))
      fail(key, fmt::format("must be a positive number, got {}", v));
    return v;
  }
  double number_or(const char* key, double fallback) const {
    return has(key) ? to_double(key, obj_.at(key)) : fallback;
  }
  bool boolean_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!obj_.at(key).is_boolean()) fail(key, "expected true or false");
    return obj_.at(key).get<bool>();
  }
  std::string string_or(const char* key, std::string fallback) const {
    if (!has(key)) return fallback;
    if (!obj_.at(key).is_string())
      fail(key, fmt::format("expected a string, got {}", json_brief(obj_.at(key))));
    return obj_.at(key).get<std::string>();
  }
  template <class T>
  std::vector<T> int_list_or(const char* key) const {
    std::vector<T> out;
    if (!has(key)) return out;
    const json& v = obj_.at(key);
    if (!v.is_array()) fail(key, fmt::format("expected a list of integers, got {}", short_dump(v)));
    // Each entry within T (an int entry of 2^32 + 4 was truncated to 4).
    for (const auto& x : v)
      out.push_back(T(to_int(key, x, std::numeric_limits<T>::max(), std::numeric_limits<T>::min(),
                             fmt::format("entry {}: ", out.size()))));
    return out;
  }
  key_reader child(const char* key) const {
    const json& v = required(key);
    if (!v.is_object()) fail(key, "expected an object");
    return key_reader(v, path(key) + ".", source_);
  }

 private:
  static std::string short_dump(const json& v) {
    std::string s = v.dump();
    return s.size() > 60 ? s.substr(0, 57) + "..." : s;
  }
  /// The integer `v` (a float with no fraction counts), refused with "VALUE is too large (at
  /// most HI)" above `hi` or "too small (at least LO)" below `lo`. Above 2^63 - 1 it read
  /// 18446744073709551615 as -1 (the key then "must be a positive integer, got -1") and 1e16 was
  /// "expected an integer".
  std::int64_t to_int(const char* key, const json& v, std::int64_t hi = INT64_MAX,
                      std::int64_t lo = INT64_MIN, const std::string& entry = {}) const {
    const auto too = [&](bool large) {
      fail(key, large ? fmt::format("{}{} is too large (at most {})", entry, short_dump(v), hi)
                      : fmt::format("{}{} is too small (at least {})", entry, short_dump(v), lo));
    };
    if (v.is_number_unsigned()) {
      if (v.get<std::uint64_t>() > std::uint64_t(hi)) too(true);
      return std::int64_t(v.get<std::uint64_t>());
    }
    std::int64_t i = 0;
    if (v.is_number_integer()) {
      i = v.get<std::int64_t>();
    } else if (v.is_number_float() && std::isfinite(v.get<double>()) &&
               std::trunc(v.get<double>()) == v.get<double>()) {
      const double d = v.get<double>();
      if (d >= 0x1p63) too(true);
      if (d < -0x1p63) too(false);
      i = std::int64_t(d);
    } else {
      fail(key, fmt::format("{}expected an integer, got {}", entry, short_dump(v)));
    }
    if (i > hi) too(true);
    if (i < lo) too(false);
    return i;
  }
  double to_double(const char* key, const json& v) const {
    if (!v.is_number()) fail(key, fmt::format("expected a number, got {}", short_dump(v)));
    return v.get<double>();
  }

  const json& obj_;
  std::string prefix_;
  const std::string& source_;
};

void read_attention(const key_reader& r, model_config& c) {
  c.vocab_size = r.positive("vocab_size");
  c.hidden_size = r.positive("hidden_size");
  c.num_layers = r.positive("num_hidden_layers");
  c.num_heads = r.positive("num_attention_heads");
  c.num_kv_heads = r.int_or("num_key_value_heads", 1, 1, INT32_MAX);
  c.head_dim = r.positive("head_dim");
  c.rope_head_dim = r.positive("qk_rope_head_dim");
  c.q_lora_rank = r.positive("q_lora_rank");
  c.o_lora_rank = r.positive("o_lora_rank");
  c.o_groups = r.positive("o_groups");
  c.rms_norm_eps = r.number("rms_norm_eps");
  // (1e300 passed the sign check and overflowed float: every logit came out 0.)
  if (!(c.rms_norm_eps >= 0.0 && c.rms_norm_eps < 1.0))
    r.fail("rms_norm_eps", fmt::format("must be in [0, 1), got {}", c.rms_norm_eps));
  // Absent: no context limit; given, it must be one (0 switched the context check off).
  c.max_position_embeddings =
      r.has("max_position_embeddings") ? r.positive("max_position_embeddings") : 0;
  c.rope_theta = r.positive_number_or("rope_theta", 10000.0);
  c.compress_rope_theta = r.positive_number_or("compress_rope_theta", c.rope_theta);
  c.sliding_window = r.positive("sliding_window");
  c.compress_ratios = r.int_list_or<int>("compress_ratios");
  if (!r.has("compress_ratios")) r.fail("compress_ratios", "missing (required)");
  c.index_n_heads = r.positive("index_n_heads");
  c.index_head_dim = r.positive("index_head_dim");
  c.index_topk = r.positive("index_topk");
  c.hc_mult = r.positive("hc_mult");
  c.hc_sinkhorn_iters = r.int_or("hc_sinkhorn_iters", 20, 1, 10000);
  c.hc_eps = r.positive_number_or("hc_eps", 1e-6);
  if (r.has("rope_scaling")) {
    key_reader y = r.child("rope_scaling");
    std::string type = y.string_or("rope_type", y.string_or("type", ""));
    if (type != "yarn" && type != "default" && !type.empty())
      y.fail("rope_type", fmt::format("unsupported rope scaling '{}' (supported: yarn)", type));
    c.yarn.enabled = type == "yarn";
    c.yarn.factor = y.positive_number_or("factor", 1.0);
    c.yarn.original_max_position_embeddings = y.integer_or("original_max_position_embeddings", 0);
    c.yarn.beta_fast = y.positive_number_or("beta_fast", 32.0);
    c.yarn.beta_slow = y.positive_number_or("beta_slow", 1.0);
    // The ramp between them runs from beta_fast rotations down to beta_slow: reversed, it
    // interpolates the wrong dimensions.
    if (!(c.yarn.beta_fast > c.yarn.beta_slow))
      y.fail("beta_fast", fmt::format("must be larger than beta_slow ({} vs {})", c.yarn.beta_fast,
                                      c.yarn.beta_slow));
  }
}

void read_moe(const key_reader& r, model_config& c) {
  // The experts' gate activation: DeepSeek-V4's is SiLU, the only one implemented.
  if (const std::string act = r.string_or("hidden_act", "silu"); act != "silu")
    r.fail("hidden_act", fmt::format("unsupported activation '{}' (supported: silu)", act));
  c.moe_intermediate_size = r.positive("moe_intermediate_size");
  c.n_routed_experts = r.positive("n_routed_experts");
  c.n_shared_experts = r.int_or("n_shared_experts", 0, 0, INT32_MAX);
  c.num_experts_per_tok = r.positive("num_experts_per_tok");
  // The router implements V4's sqrt-softplus scores and its bias-corrected top-k only: other
  // values were accepted and ignored (the same routing whatever they said).
  c.scoring_func = r.string_or("scoring_func", "sqrtsoftplus");
  if (c.scoring_func != "sqrtsoftplus")
    r.fail(
        "scoring_func",
        fmt::format("unsupported scoring function '{}' (supported: sqrtsoftplus)", c.scoring_func));
  if (const std::string m = r.string_or("topk_method", "noaux_tc"); m != "noaux_tc")
    r.fail("topk_method", fmt::format("unsupported top-k method '{}' (supported: noaux_tc)", m));
  if (r.boolean_or("tie_word_embeddings", false))
    r.fail("tie_word_embeddings", "tied embeddings are not supported (V4 has its own head)");
  c.norm_topk_prob = r.boolean_or("norm_topk_prob", true);
  c.routed_scaling_factor = r.positive_number_or("routed_scaling_factor", 1.0);
  c.swiglu_limit = r.number_or("swiglu_limit", 0.0);  // 0: no clamp
  if (!(c.swiglu_limit >= 0.0) || !std::isfinite(float(c.swiglu_limit)))
    r.fail("swiglu_limit",
           fmt::format("must be a finite number >= 0 (0: no clamp), got {}", c.swiglu_limit));
  c.gate_temp = r.positive_number_or("gate_temp", 1.0);
  c.num_hash_layers = r.int_or("num_hash_layers", 0, 0, INT32_MAX);
}

void read_v41_extras(const key_reader& r, model_config& c) {
  c.kv_source_layer_ids = r.int_list_or<int>("kv_source_layer_ids");
  c.index_source_layer_ids = r.int_list_or<int>("index_source_layer_ids");
  c.candidate_source_layer_id = r.int_or("candidate_source_layer_id", -1, -1, INT32_MAX);
  c.candidate_topk_blocks = r.int_or("candidate_topk_blocks", 0, 0, INT32_MAX);
  c.candidate_block_size = r.int_or("candidate_block_size", 0, 0, INT32_MAX);
  engram_config& e = c.engram;
  e.layer_ids = r.int_list_or<int>("engram_layer_ids");
  e.num_embeddings = r.int_list_or<std::int64_t>("engram_num_embeddings");
  if (!e.layer_ids.empty()) {
    e.max_ngram_size = r.positive("engram_max_ngram_size");
    e.vocab_size = r.positive("engram_vocab_size");
    e.n_heads = r.positive("engram_n_heads");
    e.head_dim = r.positive("engram_head_dim");
    e.pad_token_id = r.integer_or("engram_pad_token_id", r.integer_or("engram_pad_id", 0));
    e.compressed_vocab_size = r.positive("engram_compressed_vocab_size");
  }
  drafter_config& d = c.drafter;
  d.dspark_block_size = r.int_or("dspark_block_size", 0, 0, INT32_MAX);
  d.dspark_noise_token_id = r.integer_or("dspark_noise_token_id", -1);
  d.dspark_target_layer_ids = r.int_list_or<int>("dspark_target_layer_ids");
  d.dspark_markov_rank = r.int_or("dspark_markov_rank", 0, 0, INT32_MAX);
  d.dspark_n_routed_experts = r.int_or("dspark_n_routed_experts", 0, 0, INT32_MAX);
  d.dspark_num_experts_per_tok = r.int_or("dspark_num_experts_per_tok", 0, 0, INT32_MAX);
}

void read_quant(const key_reader& top, model_config& c) {
  if (!top.has("quantization_config")) return;
  key_reader q = top.child("quantization_config");
  c.quant.method = q.string_or("quant_method", "");
  if (c.quant.method != "fp8")
    q.fail("quant_method", fmt::format("unsupported quantization '{}' (supported: fp8)", c.quant.method));
  auto block = q.int_list_or<std::int64_t>("weight_block_size");
  if (block.size() != 2 || block[0] <= 0 || block[1] <= 0)
    q.fail("weight_block_size", "expected two positive integers [rows, columns]");
  c.quant.block_n = block[0];
  c.quant.block_k = block[1];
  c.quant.scale_fmt = q.string_or("scale_fmt", "ue8m0");
  if (c.quant.scale_fmt != "ue8m0")
    q.fail("scale_fmt", fmt::format("unsupported scale format '{}' (supported: ue8m0)", c.quant.scale_fmt));
  c.quant.expert_dtype = q.string_or("expert_dtype", top.string_or("expert_dtype", "fp4"));
  if (c.quant.expert_dtype != "fp4" && c.quant.expert_dtype != "fp8")
    q.fail("expert_dtype", fmt::format("unsupported expert dtype '{}' (fp4 or fp8)", c.quant.expert_dtype));
  c.quant.activation_scheme = q.string_or("activation_scheme", "dynamic");
}

void read_token_ids(const key_reader& top, const key_reader& text, model_config& c) {
  auto pick = [&](const char* key, std::int64_t fallback) {
    if (text.has(key)) return text.integer(key);
    return top.integer_or(key, fallback);
  };
  c.bos_token_id = pick("bos_token_id", 0);
  c.eos_token_id = pick("eos_token_id", 1);
  c.pad_token_id = pick("pad_token_id", -1);
  c.image_token_id = pick("image_token_id", -1);
}

/// The document, refusing a key given twice in one object (JSON parsers keep one of them
/// silently: Python's the last, so a config that "works" elsewhere can mean something else
/// here); a syntax error names its line and column.
json parse_config_json(const std::string& text, const std::string& source) {
  try {
    return parse_json_strict(text, 512);
  } catch (const json_input_error& e) {
    if (e.what_kind == json_input_error::kind::duplicate_key)
      DI_FAIL("{}: key '{}' is given twice in one object", source, fmt::join(e.path, "."));
    DI_FAIL("{}: not valid JSON: {}", source, e.what());
  }
}

}  // namespace

void validate_model_config(const model_config& c, const std::string& source);

model_config parse_model_config(const std::string& json_text, const std::string& source) {
  json doc = parse_config_json(json_text, source);
  DI_CHECK(doc.is_object(), "{}: expected a JSON object at the top level", source);
  key_reader top(doc, "", source);
  model_config c;
  c.model_type = top.string_or("model_type", "");
  if (c.model_type == "deepseek_v41") {
    c.family = model_family::deepseek_v41;
  } else if (c.model_type == "deepseek_v4") {
    c.family = model_family::deepseek_v4;
  } else {
    top.fail("model_type", c.model_type.empty()
                               ? "missing (expected \"deepseek_v41\" or \"deepseek_v4\")"
                               : fmt::format("unsupported model type '{}' (expected \"deepseek_v41\" "
                                             "or \"deepseek_v4\")", c.model_type));
  }
  key_reader text = c.is_v41() ? top.child("text_config") : top;
  read_attention(text, c);
  read_moe(text, c);
  read_v41_extras(text, c);
  c.drafter.num_layers = text.int_or("num_nextn_predict_layers", 0, 0, INT32_MAX);
  read_quant(top, c);
  read_token_ids(top, text, c);
  validate_model_config(c, source);
  return c;
}

model_config load_model_config(const std::string& path) {
  std::filesystem::path p(path);
  if (std::filesystem::is_directory(p)) p /= "config.json";
  return parse_model_config(read_text_file(p.string()), p.string());
}

std::string to_string(model_family family) {
  return family == model_family::deepseek_v41 ? "deepseek_v41" : "deepseek_v4";
}

bool model_config::is_kv_source(int l) const {
  return std::find(kv_source_layer_ids.begin(), kv_source_layer_ids.end(), l) !=
         kv_source_layer_ids.end();
}
bool model_config::is_index_source(int l) const {
  return std::find(index_source_layer_ids.begin(), index_source_layer_ids.end(), l) !=
         index_source_layer_ids.end();
}
bool model_config::is_engram_layer(int l) const {
  return std::find(engram.layer_ids.begin(), engram.layer_ids.end(), l) != engram.layer_ids.end();
}
int model_config::kv_source_of(int l) const {
  int source = -1;
  for (int s : kv_source_layer_ids)
    if (s <= l) source = s;
  return source;
}
bool model_config::has_indexer(int l) const {
  if (compress_ratio(l) == 0) return false;
  return is_v41() ? is_index_source(l) : compress_ratio(l) == 4;
}

}  // namespace di
