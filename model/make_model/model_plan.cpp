// Checkpoint planning: pairs each weight with its scale, derives the logical matrix and the
// block shape, assigns shards and counts parameters and bytes.
#include "model/make_model/model_plan.hpp"

#include "common/error.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace di {

namespace {

std::uint64_t stored_bytes(const weight_spec& spec) {
  return tensor_decl{spec.name, spec.type, spec.shape}.num_bytes();
}

/// Stored name of the scale of `weight` ("x.weight" -> "x.scale").
std::string scale_name(const std::string& weight) {
  constexpr std::string_view suffix = ".weight";
  if (weight.size() < suffix.size() ||
      weight.compare(weight.size() - suffix.size(), suffix.size(), suffix) != 0)
    return {};
  return weight.substr(0, weight.size() - suffix.size()) + ".scale";
}

planned_tensor plan_tensor(const weight_spec& weight, const weight_spec* scale,
                           const model_config& c) {
  planned_tensor t;
  t.weight = weight;
  t.rows = weight.shape.size() == 2 ? weight.shape[0] : 1;
  t.cols = weight.shape.empty() ? 1 : weight.shape.back();
  if (weight.type == dtype::f8_e4m3) {
    DI_CHECK(scale != nullptr, "planning: FP8 weight '{}' has no scale", weight.name);
    t.storage = storage_kind::fp8_blocks;
    bool per_row = weight.name.find(".engram.embed.") != std::string::npos;
    t.block = per_row ? block_shape{1, 32} : block_shape{c.quant.block_n, c.quant.block_k};
  } else if (weight.type == dtype::i8 && weight.group == weight_group::routed_experts) {
    DI_CHECK(scale != nullptr, "planning: FP4 weight '{}' has no scale", weight.name);
    t.storage = storage_kind::fp4_blocks;
    t.cols = 2 * weight.shape[1];
    t.block = block_shape{1, fp4_block_cols};
  }
  if (scale != nullptr) {
    DI_CHECK(t.storage != storage_kind::plain, "planning: '{}' has a scale but is {}", weight.name,
             dtype_name(weight.type));
    DI_CHECK(
        scale->shape == (std::vector<std::int64_t>{(t.rows + t.block.rows - 1) / t.block.rows,
                                                   (t.cols + t.block.cols - 1) / t.block.cols}),
        "planning: scale '{}' does not match {}x{} blocks of '{}'", scale->name, t.block.rows,
        t.block.cols, weight.name);
    t.scale = *scale;
  }
  return t;
}

void count(model_plan& plan, const planned_tensor& t) {
  for (const weight_spec* s : {&t.weight, t.scale ? &*t.scale : nullptr}) {
    if (s == nullptr) continue;
    plan.bytes_per_dtype[s->type] += stored_bytes(*s);
    plan.total_bytes += stored_bytes(*s);
  }
  std::int64_t n = t.weight.num_params();
  plan.params_per_group[t.weight.group] += n;
  plan.total_params += n;
}

void assign_shards(model_plan& plan, std::uint64_t max_shard_bytes) {
  int shard = 0;
  std::uint64_t used = 0;
  for (auto& t : plan.tensors) {
    std::uint64_t bytes = stored_bytes(t.weight) + (t.scale ? stored_bytes(*t.scale) : 0);
    if (used > 0 && used + bytes > max_shard_bytes) {
      ++shard;
      used = 0;
    }
    t.shard = shard;
    used += bytes;
  }
  const int num_shards = shard + 1;
  plan.shard_tensors.assign(std::size_t(num_shards), {});
  for (int s = 0; s < num_shards; ++s)
    plan.shard_files.push_back(
        num_shards == 1 ? "model.safetensors"
                        : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, num_shards));
  for (const auto& t : plan.tensors)
    for (const weight_spec* s : {&t.weight, t.scale ? &*t.scale : nullptr})
      if (s != nullptr)
        plan.shard_tensors[std::size_t(t.shard)].push_back({s->name, s->type, s->shape});
  for (std::size_t s = 0; s < plan.shard_tensors.size(); ++s) {
    auto& decls = plan.shard_tensors[s];
    std::stable_sort(decls.begin(), decls.end(), [](const tensor_decl& a, const tensor_decl& b) {
      if (dtype_size(a.type) != dtype_size(b.type)) return dtype_size(a.type) > dtype_size(b.type);
      return a.name < b.name;
    });
    for (std::size_t i = 0; i < decls.size(); ++i) plan.slots[decls[i].name] = {int(s), i};
  }
}

}  // namespace

model_plan plan_model(const model_config& config, std::uint64_t max_shard_bytes) {
  DI_CHECK(max_shard_bytes > 0, "the largest shard must hold at least one byte");
  model_plan plan;
  std::vector<weight_spec> specs = expected_weights(config);
  std::map<std::string, const weight_spec*> scales;
  for (const auto& s : specs)
    if (s.is_scale()) scales[s.name] = &s;
  std::size_t num_paired = 0;
  for (const auto& s : specs) {
    if (s.is_scale()) continue;
    auto it = scales.find(scale_name(s.name));
    const weight_spec* scale = it == scales.end() ? nullptr : it->second;
    num_paired += scale != nullptr;
    plan.tensors.push_back(plan_tensor(s, scale, config));
    count(plan, plan.tensors.back());
  }
  DI_CHECK(num_paired == scales.size(), "planning: {} scale tensors have no weight",
           scales.size() - num_paired);
  assign_shards(plan, max_shard_bytes);
  std::int64_t routed = plan.params_per_group[weight_group::routed_experts], engram_tables = 0;
  for (const auto& t : plan.tensors)
    if (t.weight.name.find(".engram.embed.") != std::string::npos)
      engram_tables += t.weight.num_params();
  plan.active_params_per_token = plan.total_params - routed - engram_tables +
                                 routed / config.n_routed_experts * config.num_experts_per_tok;
  return plan;
}

}  // namespace di
