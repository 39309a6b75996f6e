// make_step_runner (see runner_factory.hpp).
#include "actors/runner_factory.hpp"

#include "actors/toy_runner.hpp"
#include "common/error.hpp"
#include "model/runner/cpu_model_runner.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "runtime/grammar/response_format.hpp"
#include "runtime/grammar/token_vocabulary.hpp"

#include <filesystem>
#include <optional>
#include <vector>

namespace di::actors {

namespace {

/// The tokenizer the router uses (model.tokenizer, else model.path), if there is one: the
/// runner samples only its ids, and requests with a response_format need its token
/// vocabulary (without it they keep the runner's clear "no token vocabulary" error).
std::optional<tok::tokenizer> runner_tokenizer(const cluster_config& config) {
  const std::string dir = config.tokenizer_dir();
  if (!std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json")) return std::nullopt;
  return tok::tokenizer::from_dir(dir);
}

}  // namespace

runner_bundle make_step_runner(const cluster_config& config, const std::string& device) {
  const di::device dev = parse_device(device);  // the toy runner's devices are names too
  if (config.model.runner == "toy") {
    const toy_model_section& t = config.model.toy;
    toy_runner_config c{.vocab_size = t.vocab_size,
                        .entries_per_block = t.entries_per_block,
                        .num_blocks = std::int32_t((config.kv.pool_tokens + t.entries_per_block - 1) /
                                                   t.entries_per_block),
                        .max_model_len = t.max_model_len,
                        .step_ms = t.step_ms,
                        .row_us = t.row_us,
                        .device = "toy:" + device};
    runtime::kv_geometry g = toy_runner::geometry(c);
    return {std::make_unique<toy_runner>(std::move(c)), std::move(g)};
  }
  DI_CHECK(config.model.runner == "cpu", "model.runner = '{}': expected cpu or toy",
           config.model.runner);
  const bool cuda = dev.kind == device_kind::cuda;
  require_device(dev);  // before the model loads
  cpu_runner_config c{.kv_pool_tokens = config.kv.pool_tokens,
                      .min_blocks_per_stream = config.scheduler.max_num_running,
                      .num_snapshots = config.kv.num_snapshots,
                      .max_model_len = config.scheduler.max_model_len,
                      .num_state_slots = cuda ? config.scheduler.max_num_running : 0};
  forward_options options{.act_quant = config.model.act_quant,
                          .cuda_graphs = config.model.cuda_graphs};
  std::erase_if(options.graph_batch_sizes,
                [&](int b) { return b > config.model.cuda_graph_max_batch; });
  if (options.graph_batch_sizes.empty()) options.cuda_graphs = false;
  std::shared_ptr<deepseek_model> model = deepseek_model::load(config.model.path, options);
  const std::optional<tok::tokenizer> tk = runner_tokenizer(config);
  if (!model->config().engram.layer_ids.empty())  // hashed with the checkpoint's own tokenizer
  {
    if (tk && config.tokenizer_dir() == config.model.path)
      attach_engram_hasher(*model, *tk);
    else
      attach_engram_hasher(*model, tok::tokenizer::from_dir(config.model.path));
  }
  if (cuda)  // the same runner over a model whose weights, slots and blocks live on the GPU
    model->to_device(dev);
  if (tk) c.num_token_ids = sampleable_ids(*tk, model->config().vocab_size);
  auto r = std::make_unique<cpu_model_runner>(std::move(model), c);
  if (tk)
    r->enable_structured_output(
        grammar::token_vocabulary::from_tokenizer(*tk, std::size_t(r->num_token_ids())),
        std::make_shared<grammar::grammar_cache>(grammar::grammar_cache::default_capacity,
                                                 config.scheduler.grammar_classify_ms / 1000.0));
  runtime::kv_geometry g = r->geometry();
  return {std::move(r), std::move(g)};
}

}  // namespace di::actors
