// The single-request generation loop of `deepinfer generate`: validate, prefill (with prompt
// logprobs when asked), then sample → detokenize → stop-check → decode one token at a time.
#include "cli/detail/offline_generation.hpp"

#include "common/error.hpp"
#include "model/engram/hasher.hpp"
#include "model/engram/token_map.hpp"
#include "runtime/sampler.hpp"
#include "runtime/sampling_rng.hpp"
#include "runtime/token_counts.hpp"

#include <chrono>
#include <filesystem>

namespace di::cli {

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// Runs `tokens` (at positions state.num_tokens()...) and returns the logits of `rows`.
tensor run_tokens(const deepseek_model& model, sequence_state& state,
                  std::span<const std::int32_t> tokens, std::vector<std::int64_t> rows) {
  std::vector<std::int64_t> ids(tokens.begin(), tokens.end());
  std::vector<std::int64_t> positions(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) positions[i] = state.num_tokens() + std::int64_t(i);
  forward_request req;
  req.state = &state;
  req.tokens = ids;
  req.positions = positions;
  req.logit_rows = std::move(rows);
  std::vector<forward_request> batch{std::move(req)};
  return model.forward(batch)[0].logits;  // [rows, vocab] f32
}

std::span<const float> logits_row(const tensor& logits, std::int64_t row) {
  std::int64_t vocab = logits.size(1);
  return {logits.data<float>() + row * vocab, std::size_t(vocab)};
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

runtime::stop_config make_stop_config(const loaded_model& m, const runtime::sampling_params& p) {
  runtime::stop_config stop;
  stop.stop_strings = p.stop;
  stop.stop_token_ids = p.stop_token_ids;
  if (!p.ignore_eos) {
    auto eos = m.tokenizer->eos_id();
    stop.stop_token_ids.push_back(eos ? *eos : std::int32_t(m.model->config().eos_token_id));
  }
  stop.max_tokens = p.max_tokens.value_or(-1);
  return stop;
}

}  // namespace

loaded_model load_model_for_generation(const std::string& dir, bool act_quant) {
  loaded_model m;
  m.model = deepseek_model::load(dir, forward_options{.act_quant = act_quant});
  DI_CHECK(std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json"),
           "{}: no tokenizer.json in the model folder", dir);
  m.tokenizer = std::make_unique<tok::tokenizer>(tok::tokenizer::from_dir(dir));
  const model_config& c = m.model->config();
  if (!c.engram.layer_ids.empty())
    m.model->set_engram_hasher(
        std::make_shared<engram_hasher>(c.engram, build_engram_token_map(*m.tokenizer)));
  return m;
}

generation_result generate(const loaded_model& m, const generation_request& r) {
  check_request(m, r);
  const runtime::sampling_params& p = r.params;
  const std::int64_t num_prompt = std::int64_t(r.prompt_ids.size());
  const std::int64_t max_new = p.max_tokens.value_or(m.model->config().max_position_embeddings - num_prompt);
  generation_result out;
  out.seed = p.seed.value_or(runtime::draw_request_seed());

  const cache_layout& layout = m.model->layout();
  std::int64_t capacity = num_prompt + max_new;
  kv_block_pool pool(layout, int(capacity / layout.entries_per_block + 2));
  sequence_state state(pool, capacity);
  runtime::stop_checker stop(make_stop_config(m, p));
  runtime::token_counts counts(r.prompt_ids);
  runtime::sampler sampler;
  tok::incremental_detokenizer detok(*m.tokenizer, {.skip_special_tokens = p.skip_special_tokens});

  // Prefill: logits of every position when prompt logprobs are wanted, else of the last.
  auto t0 = clock_type::now();
  std::vector<std::int64_t> rows;
  if (p.prompt_logprobs) {
    for (std::int64_t i = 0; i < num_prompt; ++i) rows.push_back(i);
  } else {
    rows.push_back(num_prompt - 1);
  }
  tensor logits = run_tokens(*m.model, state, r.prompt_ids, rows);  // [rows, vocab]
  if (p.prompt_logprobs)
    out.prompt_logprobs = runtime::compute_prompt_logprobs(
        {logits.data<float>(), std::size_t((num_prompt - 1) * logits.size(1))}, logits.size(1),
        r.prompt_ids, *p.prompt_logprobs);
  std::span<const float> next = logits_row(logits, logits.size(0) - 1);
  out.prefill_seconds = seconds_since(t0);

  t0 = clock_type::now();
  for (std::int64_t step = 0;; ++step) {
    runtime::sample_request sr{.logits = next, .params = &p, .seed = out.seed, .step = step,
                               .counts = &counts};
    runtime::sample_result s = sampler.sample(sr);
    out.output_ids.push_back(s.token_id);
    if (s.logprobs) out.logprobs.push_back(std::move(*s.logprobs));
    counts.add_output_token(s.token_id);
    runtime::stop_update u = stop.push(s.token_id, detok.push(s.token_id));
    if (!u.finished() && step + 1 == max_new) {  // no max_tokens: the context is full
      u.text += stop.flush();  // held back earlier than the detokenizer's unfinished bytes
      u.text += detok.finish();
      u.reason = runtime::finish_reason::length;
    } else if (u.finished() && u.reason == runtime::finish_reason::length) {
      u.text += detok.finish();
    }
    out.text += u.text;
    if (r.on_text && !u.text.empty()) r.on_text(u.text);
    if (u.finished()) {
      out.finish = u.reason;
      break;
    }
    logits = run_tokens(*m.model, state, std::span(&out.output_ids.back(), 1), {0});
    next = logits_row(logits, 0);
  }
  out.decode_seconds = seconds_since(t0);
  return out;
}

}  // namespace di::cli
