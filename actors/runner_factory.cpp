// make_step_runner (see runner_factory.hpp).
#include "actors/runner_factory.hpp"

#include "actors/toy_runner.hpp"
#include "common/error.hpp"

namespace di::actors {

runner_bundle make_step_runner(const cluster_config& config, const std::string& device) {
  if (config.model.runner == "toy") {
    const toy_model_section& t = config.model.toy;
    toy_runner_config c{.vocab_size = t.vocab_size,
                        .entries_per_block = t.entries_per_block,
                        .num_blocks = std::int32_t(config.kv.num_blocks),
                        .max_model_len = t.max_model_len,
                        .step_ms = t.step_ms,
                        .row_us = t.row_us,
                        .device = "toy:" + device};
    runtime::kv_geometry g = toy_runner::geometry(c);
    return {std::make_unique<toy_runner>(std::move(c)), std::move(g)};
  }
  DI_FAIL("model.runner = '{}': this build has no CPU model runner yet (model/runner/); "
          "use model.runner = \"toy\" for a weightless test cluster",
          config.model.runner);
}

}  // namespace di::actors
