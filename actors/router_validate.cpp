// Request validation at the router: every size a client sends is bounded before any work is
// done, text is tokenized, ids are checked against the vocabulary, and sampling parameters are
// validated as `generate` validates them, so a bad request gets a clear refusal and changes
// nothing else.
#include "actors/detail/router_state.hpp"

#include "model/tokenizer/tokenizer.hpp"

#include <fmt/format.h>

namespace di::actors::detail {

namespace {

std::optional<invalid_request> check_sizes(const router_state& st, const submit_request& req) {
  const router_section& l = st.params.limits;
  const runtime::sampling_params& p = req.params;
  // Text, even "", or a non-empty id list: an empty text prompt is BOS alone.
  if (req.prompt.has_value() == !req.prompt_ids.empty())
    return invalid_request{"give exactly one of prompt (text) and prompt_ids", "prompt"};
  if (req.prompt && std::int64_t(req.prompt->size()) > l.max_prompt_bytes)
    return invalid_request{
        fmt::format("the prompt has {} bytes; the limit is {} (router.max_prompt_bytes)",
                    req.prompt->size(), l.max_prompt_bytes),
        "prompt"};
  if (int(p.stop.size()) > l.max_stop_strings)
    return invalid_request{fmt::format("{} stop strings; the limit is {} (router.max_stop_strings)",
                                       p.stop.size(), l.max_stop_strings),
                           "stop"};
  for (const std::string& s : p.stop)
    if (int(s.size()) > l.max_stop_string_bytes)
      return invalid_request{
          fmt::format("a stop string has {} bytes; the limit is {} (router.max_stop_string_bytes)",
                      s.size(), l.max_stop_string_bytes),
          "stop"};
  if (p.stop_token_ids.size() > 1024)
    return invalid_request{
        fmt::format("{} stop_token_ids; the limit is 1024", p.stop_token_ids.size()),
        "stop_token_ids"};
  return std::nullopt;
}

std::int64_t context_of(const router_state& st) {
  std::int64_t context = 0;
  for (const group_entry& g : st.groups)
    if (g.is_ready) context = context == 0 ? g.info.max_model_len : std::min(context, g.info.max_model_len);
  return context;
}

std::optional<invalid_request> check_tokens(const router_state& st, const submit_request& req) {
  const std::int64_t context = context_of(st);
  std::int64_t max_prompt = context - 1;
  if (st.params.limits.max_prompt_tokens > 0)
    max_prompt = std::min(max_prompt, st.params.limits.max_prompt_tokens);
  const std::int64_t n = std::int64_t(req.prompt_ids.size());
  if (n > max_prompt)  // name the limit that set it: the context, or router.max_prompt_tokens
    return invalid_request{
        max_prompt < context - 1
            ? fmt::format("the prompt has {} tokens; at most {} are accepted "
                          "(router.max_prompt_tokens)",
                          n, max_prompt)
            : fmt::format("the prompt has {} tokens; at most {} are accepted (the context is {} "
                          "tokens including the output)",
                          n, max_prompt, context),
        "prompt"};
  for (std::size_t i = 0; i < req.prompt_ids.size(); ++i)
    if (req.prompt_ids[i] < 0 || req.prompt_ids[i] >= st.params.vocab_size)
      return invalid_request{
          fmt::format("prompt token {} (position {}) is outside the vocabulary [0, {})",
                      req.prompt_ids[i], i, st.params.vocab_size),
          "prompt"};
  if (req.params.max_tokens && n + *req.params.max_tokens > context)
    return invalid_request{
        fmt::format("prompt ({} tokens) + max_tokens ({}) exceeds the context of {} tokens", n,
                    *req.params.max_tokens, context),
        "max_tokens"};
  return std::nullopt;
}

}  // namespace

std::optional<invalid_request> validate_request(const router_state& st, submit_request& req) {
  if (auto why = check_sizes(st, req)) return why;
  try {
    req.params.validate(st.params.vocab_size, {.max_logprobs = st.params.limits.max_logprobs});
  } catch (const std::exception& e) {
    return invalid_request{e.what(), runtime::param_of(e)};
  }
  try {
    if (req.prompt) {
      if (!st.params.tokenizer)
        return invalid_request{"this server takes prompt_ids only (no tokenizer)", "prompt"};
      req.prompt_ids = st.params.tokenizer->encode(*req.prompt, {.add_bos = true});
      req.prompt.reset();
      if (req.prompt_ids.empty())
        return invalid_request{"the prompt encodes to no tokens", "prompt"};
    }
  } catch (const std::exception& e) {  // the tokenizer's
    return invalid_request{e.what(), "prompt"};
  }
  return check_tokens(st, req);
}

}  // namespace di::actors::detail
