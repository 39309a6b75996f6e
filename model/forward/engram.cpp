// The Engram sub-block of V4.1: hashed n-gram rows looked up in the layer's FP8 table,
// projected to one key per hc stream plus a shared value, and added to each stream through
// a gate of how well stream and key agree.
#include "model/forward/detail/forward_pass.hpp"

#include "common/env.hpp"

#include <vector>

namespace di::detail {

tensor engram_project(const forward_pass& pass, int layer, const tensor& hash_ids) {
  const engram_weights& e = pass.weights.layers[std::size_t(layer)].engram;
  const std::int64_t rows = hash_ids.size(0), cols = hash_ids.size(1);
  const std::int64_t head_dim = e.table_codes.size(1);
  tensor flat_ids = hash_ids.clone().view({rows * cols});                    // [rows * cols]
  tensor emb = ops::embedding_fp8(e.table_codes, e.table_scales, flat_ids);  // [rows*cols, hd]
  return pass.linear(emb.view({rows, cols * head_dim}), e.wkv);              // [rows, (hc+1)*dim]
}

tensor engram_apply(const forward_pass& pass, int layer, const tensor& x, const tensor& kv) {
  const model_config& c = pass.config;
  const engram_weights& e = pass.weights.layers[std::size_t(layer)].engram;
  const std::int64_t rows = x.size(0), hc = c.hc_mult, dim = c.hidden_size;
  DI_CHECK(kv.rank() == 2 && kv.size(0) == rows && kv.size(1) == (hc + 1) * dim,
           "engram_apply: kv {} for {} rows of {} streams x {}", kv.shape().str(), rows, hc, dim);
  // The keys and the value read in place from kv's rows (one launch, no host index lists);
  // DEEPINFER_ENGRAM_KV=0 gathers them apart first, as before session 34 (the same bits).
  static const bool in_place = env_switch("DEEPINFER_ENGRAM_KV", true);
  const ops::engram_params params{float(c.rms_norm_eps), 1e-6f};
  if (in_place) return ops::engram_gate_kv(x, kv, e.qk_weight, params);
  std::vector<std::int64_t> key_rows, value_rows;  // rows of kv viewed as [rows * (hc + 1), dim]
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t k = 0; k < hc; ++k) key_rows.push_back(r * (hc + 1) + k);
    value_rows.push_back(r * (hc + 1) + hc);
  }
  const tensor split = kv.view({rows * (hc + 1), dim});
  tensor key = ops::gather_rows(split, pass.index(key_rows)).view({rows, hc, dim});  // [rows, hc, dim]
  tensor value = ops::gather_rows(split, pass.index(value_rows));                   // [rows, dim]
  return ops::engram_gate(x, key, value, e.qk_weight, params);
}

}  // namespace di::detail
