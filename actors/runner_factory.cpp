// make_step_runner (see runner_factory.hpp).
#include "actors/runner_factory.hpp"

#include "actors/toy_runner.hpp"
#include "common/error.hpp"
#include "model/runner/cpu_model_runner.hpp"

namespace di::actors {

runner_bundle make_step_runner(const cluster_config& config, const std::string& device) {
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
  DI_CHECK(config.model.runner == "cpu", "model.runner = '{}': expected cpu or toy", config.model.runner);
  DI_CHECK(device == "cpu", "device '{}': the CPU model runner runs on device \"cpu\" only", device);
  cpu_runner_config c{.kv_pool_tokens = config.kv.pool_tokens,
                      .num_snapshots = config.kv.num_snapshots,
                      .max_model_len = config.scheduler.max_model_len};
  std::unique_ptr<cpu_model_runner> r =
      cpu_model_runner::load(config.model.path, c, forward_options{.act_quant = config.model.act_quant});
  runtime::kv_geometry g = r->geometry();
  return {std::move(r), std::move(g)};
}

}  // namespace di::actors
