// Byte accounting of a decode step from the weight spec (see step_cost.hpp).
#include "cli/detail/step_cost.hpp"

#include "model/weight_spec.hpp"

#include <cmath>

namespace di::cli {

namespace {

double element_bytes(const weight_spec& w) {
  double n = 1;
  for (auto s : w.shape) n *= double(s);
  return n * double(dtype_size(w.type));
}

bool is_engram_table(const weight_spec& w) {
  return w.name.find(".engram.embed.") != std::string::npos;
}

}  // namespace

step_bytes decode_weight_bytes(const model_config& c, int batch) {
  step_bytes out;
  const double e = c.n_routed_experts, k = c.num_experts_per_tok;
  const double touched = e * (1.0 - std::pow(1.0 - k / e, double(batch)));
  out.experts_touched_per_layer = touched;
  for (const auto& w : expected_weights(c)) {
    double bytes = element_bytes(w);
    if (w.group == weight_group::routed_experts) {
      bytes *= touched / e;
    } else if (w.name == "embed.weight") {  // a gather of `batch` rows
      bytes *= double(batch) / double(w.shape[0]);
    } else if (is_engram_table(w)) {  // rows gathered: one per hash column and token
      bytes *= double(batch) * c.engram.num_hash_columns() / double(w.shape[0]);
    }
    out.weights += bytes;
  }
  return out;
}

double active_params_per_token(const model_config& c) {
  double total = 0;
  for (const auto& w : expected_weights(c)) {
    if (w.name == "embed.weight" || is_engram_table(w)) continue;
    double n = double(w.num_params());
    if (w.group == weight_group::routed_experts)
      n *= double(c.num_experts_per_tok) / c.n_routed_experts;
    total += n;
  }
  return total;
}

}  // namespace di::cli
