// The generation loop of `deepinfer generate`: validate, then step a scheduler holding the one
// request and a CPU model runner sized for it (schedule -> run -> apply) until the request
// ends, streaming the text each step makes final.
#include "cli/detail/offline_generation.hpp"

#include "common/error.hpp"
#include "model/runner/cpu_model_runner.hpp"
#include "runtime/sampling_rng.hpp"
#include "runtime/scheduler.hpp"

#include <chrono>
#include <filesystem>

namespace di::cli {

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

void check_request(const loaded_model& m, const generation_request& r) {
  const model_config& c = m.model->config();
  DI_CHECK(!r.prompt_ids.empty(), "the prompt is empty");
  for (std::size_t i = 0; i < r.prompt_ids.size(); ++i)
    DI_CHECK(r.prompt_ids[i] >= 0 && r.prompt_ids[i] < c.vocab_size,
             "prompt token {} (position {}) is outside the vocabulary [0, {})", r.prompt_ids[i], i,
             c.vocab_size);
  r.params.validate(c.vocab_size);
  std::int64_t context = c.max_position_embeddings > 0 ? c.max_position_embeddings : INT64_MAX;
  std::int64_t prompt = std::int64_t(r.prompt_ids.size());
  DI_CHECK(prompt < context, "the prompt has {} tokens but the model's context is {} tokens",
           prompt, context);
  std::int64_t max_new = r.params.max_tokens.value_or(context - prompt);
  DI_CHECK(prompt + max_new <= context,
           "prompt ({} tokens) + max_tokens ({}) exceeds the model's context of {} tokens", prompt,
           max_new, context);
}

/// A scheduler for the one request: the whole prompt in one step, EOS from the tokenizer.
runtime::scheduler make_scheduler(const loaded_model& m, const cpu_model_runner& runner,
                                  std::int64_t num_prompt) {
  runtime::scheduler_config c;
  c.max_num_batched_tokens = num_prompt;
  c.max_num_running = 1;
  c.blocks.enable_prefix_caching = false;
  const std::optional<tok::token_id> eos = m.tokenizer->eos_id();
  c.eos_token_ids = {eos ? *eos : std::int32_t(m.model->config().eos_token_id)};
  return runtime::scheduler(scheduler_config_for(runner, std::move(c)),
                            runtime::tokenizer_decoder_factory(*m.tokenizer));
}

/// Adds one event of the request to `out` (and streams its text).
void take_event(const generation_request& r, runtime::token_event& e, generation_result& out) {
  DI_CHECK(e.status != runtime::sequence_status::finished_error, "generation failed: {}", e.error);
  out.output_ids.insert(out.output_ids.end(), e.token_ids.begin(), e.token_ids.end());
  for (runtime::position_logprobs& lp : e.logprobs) out.logprobs.push_back(std::move(lp));
  for (auto& lp : e.prompt_logprobs) out.prompt_logprobs.push_back(std::move(lp));
  out.text += e.text;
  if (r.on_text && !e.text.empty()) r.on_text(e.text);
  if (e.status == runtime::sequence_status::finished_stop)
    out.finish = runtime::finish_reason::stop;
  if (e.status == runtime::sequence_status::finished_length)
    out.finish = runtime::finish_reason::length;
}

}  // namespace

loaded_model load_model_for_generation(const std::string& dir, bool act_quant) {
  loaded_model m;
  m.model = deepseek_model::load(dir, forward_options{.act_quant = act_quant});
  DI_CHECK(std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json"),
           "{}: no tokenizer.json in the model folder", dir);
  m.tokenizer = std::make_unique<tok::tokenizer>(tok::tokenizer::from_dir(dir));
  attach_engram_hasher(*m.model, *m.tokenizer);
  return m;
}

void enable_structured_output(loaded_model& m) {
  if (m.grammar_vocab) return;
  m.grammar_vocab =
      grammar::token_vocabulary::from_tokenizer(*m.tokenizer, std::size_t(m.model->config().vocab_size));
  m.grammars = std::make_shared<grammar::grammar_cache>();
}

generation_result generate(const loaded_model& m, const generation_request& r) {
  check_request(m, r);
  if (!r.params.response_format.empty()) {
    DI_CHECK(m.grammar_vocab != nullptr, "response_format given but structured output is not enabled");
    m.grammars->get(grammar::parse_inline_response_format(r.params.response_format), m.grammar_vocab);
  }
  const std::int64_t num_prompt = std::int64_t(r.prompt_ids.size());
  const std::int64_t max_new =
      r.params.max_tokens.value_or(m.model->config().max_position_embeddings - num_prompt);
  generation_result out;
  out.seed = r.params.seed.value_or(runtime::draw_request_seed());
  // Pools for exactly this request: max_model_len bounds its output as max_tokens would.
  cpu_model_runner runner(
      m.model, {.kv_pool_tokens = num_prompt + max_new, .max_model_len = num_prompt + max_new});
  if (m.grammar_vocab) runner.enable_structured_output(m.grammar_vocab, m.grammars);
  runtime::scheduler s = make_scheduler(m, runner, num_prompt);
  runtime::request req{.id = 0, .prompt_ids = r.prompt_ids, .params = r.params, .seed = out.seed};
  const runtime::admission_result admitted = s.add_request(std::move(req));
  DI_CHECK(admitted.is_accepted(), "{}", admitted.message);

  auto t0 = clock_type::now();
  while (s.has_unfinished()) {
    const runtime::step_plan plan = s.schedule();
    const runtime::step_result result = runner.run(plan);
    if (plan.sequences.empty()) continue;
    runtime::apply_outcome applied = s.apply(result);
    DI_CHECK(applied.is_ok(), "generation: {}", applied.error);
    const bool was_prefill = out.output_ids.empty();
    for (runtime::token_event& e : applied.events) take_event(r, e, out);
    if (was_prefill && !out.output_ids.empty()) {  // the first token: the prompt is done
      out.prefill_seconds = seconds_since(t0);
      t0 = clock_type::now();
    }
  }
  out.decode_seconds = seconds_since(t0);
  return out;
}

}  // namespace di::cli
