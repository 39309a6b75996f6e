// `deepinfer inspect --model DIR`: reads config.json and the safetensors files, checks that
// every tensor the config implies is present with the right dtype and shape (and nothing
// else is), and prints the architecture, parameter counts and bytes per dtype.
#include "cli/command.hpp"
#include "cli/detail/model_folder.hpp"
#include "common/error.hpp"
#include "common/printable.hpp"
#include "config/model_config.hpp"
#include "model/model_summary.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <memory>

namespace {

struct inspect_options {
  std::string model;
  bool json = false;
  bool list_tensors = false;
};

/// 1234567 -> "1,234,567"
std::string grouped(std::int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string layer_role(const di::model_config& c, int l) {
  std::string role;
  auto add = [&](std::string_view s) { role += role.empty() ? std::string(s) : fmt::format(", {}", s); };
  int r = c.compress_ratio(l);
  add(r == 0 ? fmt::format("window {}", c.sliding_window) : fmt::format("window {} + compressed 1/{}", c.sliding_window, r));
  if (c.is_v41() && r > 0) {
    if (c.is_kv_source(l)) add("KV source");
    else add(fmt::format("KV of layer {}", c.kv_source_of(l)));
    if (c.is_index_source(l)) add("index source");
    if (l == c.candidate_source_layer_id) add("candidate source");
  }
  if (!c.is_v41() && r > 0) add(c.has_indexer(l) ? "indexer top-" + std::to_string(c.index_topk) : "all entries");
  if (c.is_engram_layer(l)) add("engram");
  add(c.is_hash_routed(l) ? "hash-routed MoE" : "score-routed MoE");
  return role;
}

void print_text(const di::model_config& c, const di::model_summary& s, const inspect_options& o) {
  fmt::print("model:        {}\n", o.model);
  fmt::print("type:         {}  ({} layers, hidden {}, vocab {})\n", c.model_type, c.num_layers,
             c.hidden_size, c.vocab_size);
  fmt::print("attention:    {} heads x {} (rope {}), q_lora {}, o_lora {} x {} groups, window {}\n",
             c.num_heads, c.head_dim, c.rope_head_dim, c.q_lora_rank, c.o_lora_rank, c.o_groups,
             c.sliding_window);
  fmt::print("indexer:      {} heads x {}, top-{}\n", c.index_n_heads, c.index_head_dim, c.index_topk);
  fmt::print("experts:      {} routed (top-{}, {}, scale {}) + {} shared, intermediate {}\n",
             c.n_routed_experts, c.num_experts_per_tok, c.scoring_func, c.routed_scaling_factor,
             c.n_shared_experts, c.moe_intermediate_size);
  fmt::print("mHC:          {} streams, {} Sinkhorn iterations\n", c.hc_mult, c.hc_sinkhorn_iters);
  if (!c.quant.method.empty())
    fmt::print("quantization: {} e4m3 weights, {} scales per {}x{} block; routed experts {}\n",
               c.quant.method, c.quant.scale_fmt, c.quant.block_n, c.quant.block_k, c.quant.expert_dtype);
  fmt::print("layers:\n");
  for (int l = 0; l < c.num_layers; ++l) fmt::print("  {:>3}  {}\n", l, layer_role(c, l));
  fmt::print("parameters (FP4 counted as two per byte, scales excluded):\n");
  for (const auto& [group, n] : s.params_per_group)
    fmt::print("  {:<16} {:>18}\n", di::to_string(group), grouped(n));
  fmt::print("  {:<16} {:>18}\n", "total", grouped(s.total_params));
  fmt::print("  {:<16} {:>18}\n", "active/token", grouped(s.active_params_per_token));
  fmt::print("bytes per dtype:\n");
  for (const auto& [t, bytes] : s.bytes_per_dtype)
    fmt::print("  {:<16} {:>18}\n", di::dtype_name(t), grouped(std::int64_t(bytes)));
  fmt::print("  {:<16} {:>18}\n", "total", grouped(std::int64_t(s.total_bytes)));
  fmt::print("tensors:      {} expected, {} found, {} missing, {} wrong dtype/shape, {} unexpected{}\n",
             s.num_expected, s.num_found, s.missing.size(), s.mismatched.size(), s.unexpected.size(),
             s.unverified.empty() ? "" : fmt::format(", {} drafter/vision not verified", s.unverified.size()));
}

void print_problems(const di::model_summary& s) {
  constexpr std::size_t max_listed = 20;
  std::size_t listed = 0;
  for (const auto& m : s.mismatched)
    if (listed++ < max_listed) fmt::print(stderr, "  wrong: {}: expected {}, found {}\n", m.name, m.expected, m.found);
  for (const auto& n : s.missing)
    if (listed++ < max_listed) fmt::print(stderr, "  missing: {}\n", n);
  for (const auto& n : s.unexpected)
    if (listed++ < max_listed) fmt::print(stderr, "  unexpected: {}\n", di::printable(n));
  if (listed > max_listed) fmt::print(stderr, "  ... and {} more\n", listed - max_listed);
}

nlohmann::json to_json(const di::model_config& c, const di::model_summary& s) {
  nlohmann::json j;
  j["model_type"] = c.model_type;
  j["num_layers"] = c.num_layers;
  j["hidden_size"] = c.hidden_size;
  j["n_routed_experts"] = c.n_routed_experts;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["compress_ratios"] = c.compress_ratios;
  j["total_params"] = s.total_params;
  j["active_params_per_token"] = s.active_params_per_token;
  for (const auto& [g, n] : s.params_per_group) j["params_per_group"][di::to_string(g)] = n;
  for (const auto& [t, b] : s.bytes_per_dtype) j["bytes_per_dtype"][std::string(di::dtype_name(t))] = b;
  j["total_bytes"] = s.total_bytes;
  j["tensors"] = {{"expected", s.num_expected}, {"found", s.num_found}, {"missing", s.missing},
                  {"unexpected", s.unexpected}, {"unverified", s.unverified}};
  for (const auto& m : s.mismatched)
    j["tensors"]["mismatched"].push_back({{"name", m.name}, {"expected", m.expected}, {"found", m.found}});
  j["matches"] = s.matches();
  return j;
}

void run_inspect(const inspect_options& o) {
  di::cli::require_model_folder(o.model);
  di::model_config config = di::load_model_config(o.model);
  di::checkpoint ckpt(o.model);
  di::model_summary s = di::summarize_checkpoint(ckpt, config);
  if (o.json) {
    fmt::print("{}\n", to_json(config, s).dump(2));
  } else {
    print_text(config, s, o);
    if (o.list_tensors)
      for (const auto& t : ckpt.tensors())
        fmt::print("  {:<56} {:<8} {}\n", t.name, di::dtype_name(t.type), di::format_shape(t.shape));
  }
  if (!s.matches()) {
    print_problems(s);
    DI_FAIL("{}: checkpoint does not match its config: {} missing, {} wrong dtype/shape, {} unexpected",
            o.model, s.missing.size(), s.mismatched.size(), s.unexpected.size());
  }
}

void setup_inspect(CLI::App& app) {
  auto opts = std::make_shared<inspect_options>();
  auto* sub = app.add_subcommand("inspect", "Verify a checkpoint against its config.json and summarize it");
  sub->add_option("--model", opts->model, "Checkpoint directory (config.json + *.safetensors)")
      ->required();
  sub->add_flag("--json", opts->json, "Print one JSON object instead of the text report");
  sub->add_flag("--tensors", opts->list_tensors, "Also list every tensor with dtype and shape");
  sub->footer("Exit status 1 (with the offending tensors on stderr) when a tensor the config implies "
              "is missing or has the wrong dtype/shape, or when an unexpected tensor is present.");
  sub->callback([opts] { run_inspect(*opts); });
}

}  // namespace

DI_REGISTER_COMMAND(setup_inspect);
