// OpenAI response objects (see openai_response.hpp).
#include "server/openai_response.hpp"

#include "model/tokenizer/detail/utf8.hpp"
#include "model/tokenizer/tokenizer.hpp"

#include <algorithm>
#include <cstdint>

namespace di::server {

namespace {

using json = nlohmann::ordered_json;

/// Whether the tokenizer has a token of id `id`. Its ids may have gaps (tokenizer.json lists
/// no token for them) that the model's head still scores, so such an id can be among a
/// position's top logprobs -- never an output or prompt token: the scheduler fails a request
/// that samples one, the server refuses a prompt that holds one (check_prompt_ids).
bool has_token(const tok::tokenizer& tok, std::int32_t id) {
  return tok.id_to_token(id).has_value();
}

/// A token's bytes; null for an id without a token (OpenAI: null where a token has no bytes
/// representation). They were an empty list, as if the token were the empty string.
json bytes_of(const tok::tokenizer& tok, std::int32_t id) {
  if (!has_token(tok, id)) return nullptr;
  json b = json::array();
  for (unsigned char c : tok.token_bytes(id)) b.push_back(int(c));
  return b;
}

/// A token as logprobs name it: its text, or "token_id:N" (vLLM's return_tokens_as_token_ids),
/// which also names an id without a token (its text was "", a name any empty token shares).
std::string token_name(const tok::tokenizer& tok, std::int32_t id, bool as_token_id) {
  return as_token_id || !has_token(tok, id) ? "token_id:" + std::to_string(id)
                                            : token_text(tok, id);
}

}  // namespace

json usage_json(const usage_counts& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

std::string token_text(const tok::tokenizer& tok, std::int32_t id) {
  // One U+FFFD per maximal invalid subpart, as Python's bytes.decode("utf-8", "replace") and
  // the tokenizer's own decode give it (vLLM names a token by that decode): [236, 149], a
  // 3-byte character cut short, is one U+FFFD. Each invalid byte was one, and overlong
  // forms and surrogates ([0xC0, 0x80], [0xED, 0xA0, 0x80]) passed through as if valid.
  // (An id without a token is a di::error; it was "", silently.)
  return tok::detail::utf8_lossy(tok.token_bytes(id));
}

std::size_t count_chars(std::string_view text) {
  return std::size_t(std::count_if(text.begin(), text.end(),
                                   [](char c) { return (std::uint8_t(c) & 0xC0) != 0x80; }));
}

text_offsets::text_offsets(const tok::tokenizer& tok, bool skip_special_tokens)
    : detok_(tok, {.skip_special_tokens = skip_special_tokens}) {}

std::size_t text_offsets::push(std::int32_t id) {
  std::size_t offset = chars_;
  // Every id pushed has a token (output tokens: the scheduler fails a request that samples
  // another; prompt tokens: check_prompt_ids), so nothing is caught here: an id without one
  // is a di::error, where it was taken silently as a token of no text.
  // A fragment that can never complete is flushed as U+FFFD before this token's text.
  if (detok_.abandons_pending(id)) ++offset;
  chars_ += count_chars(detok_.push(id));  // the decoder the output text comes from
  return offset;
}

tokens_around_text tokens_added_around_text(const tok::tokenizer& tok) {
  // A one-character probe: encoded alone, then as the router encodes a prompt. ("a" is one
  // ordinary token, never BOS or EOS; an empty probe could not tell a lone BOS from a lone EOS
  // where they are one token.)
  const std::vector<tok::token_id> own = tok.encode("a");
  const std::vector<tok::token_id> routed = tok.encode("a", {.add_bos = true});
  const std::size_t num_added = routed.size() - own.size();
  const std::size_t before =
      num_added > 0 && !std::equal(own.begin(), own.end(), routed.begin()) ? 1 : 0;
  return {.num_before = before, .num_after = num_added - before};
}

std::vector<std::size_t> echo_text_offsets(const tok::tokenizer& tok,
                                           const std::vector<std::int32_t>& prompt_ids,
                                           bool is_text, bool skip_special_tokens) {
  std::size_t first = 0, last = prompt_ids.size();  // the prompt's own tokens: [first, last)
  if (is_text) {
    const tokens_around_text added = tokens_added_around_text(tok);
    first = std::min(added.num_before, prompt_ids.size());
    last = std::max(first, prompt_ids.size() - std::min(added.num_after, prompt_ids.size()));
  }
  text_offsets counted(tok, !is_text && skip_special_tokens);
  std::vector<std::size_t> out;
  out.reserve(prompt_ids.size());
  for (std::size_t i = 0; i < prompt_ids.size(); ++i)
    out.push_back(i >= first && i < last ? counted.push(prompt_ids[i]) : counted.num_chars());
  return out;
}

json completion_logprobs(const tok::tokenizer& tok, const std::vector<std::int32_t>& ids,
                         const std::vector<const runtime::position_logprobs*>& entries,
                         const std::vector<std::size_t>& text_offset, bool as_token_ids) {
  const auto name = [&](std::int32_t id) { return token_name(tok, id, as_token_ids); };
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    tokens.push_back(name(ids[i]));
    offsets.push_back(i < text_offset.size() ? text_offset[i] : 0);
    const runtime::position_logprobs* e = i < entries.size() ? entries[i] : nullptr;
    if (e == nullptr) {
      token_logprobs.push_back(nullptr);
      top.push_back(nullptr);
      continue;
    }
    token_logprobs.push_back(e->logprob);
    // The top tokens, most likely first, then the token at this position when it is not among
    // them (OpenAI: "up to logprobs+1 elements"; vLLM adds it too), so `logprobs: 0` gives it
    // alone. Tokens whose texts are equal share a key: the first -- the likelier -- keeps it
    // (a later one overwrote its value, leaving the dict out of order).
    json t = json::object();
    const auto add = [&](std::int32_t id, float logprob) {
      std::string key = name(id);
      if (!t.contains(key)) t[std::move(key)] = logprob;
    };
    for (const runtime::token_logprob& c : e->top) add(c.id, c.logprob);
    if (std::none_of(e->top.begin(), e->top.end(),
                     [&](const runtime::token_logprob& c) { return c.id == e->id; }))
      add(e->id, e->logprob);
    top.push_back(std::move(t));
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top},
          {"text_offset", offsets}};
}

json chat_logprobs(const tok::tokenizer& tok,
                   const std::vector<runtime::position_logprobs>& entries, bool as_token_ids) {
  json content = json::array();
  for (const runtime::position_logprobs& e : entries) {
    json top = json::array();
    for (const runtime::token_logprob& c : e.top)
      top.push_back({{"token", token_name(tok, c.id, as_token_ids)},
                     {"logprob", c.logprob},
                     {"bytes", bytes_of(tok, c.id)}});
    content.push_back({{"token", token_name(tok, e.id, as_token_ids)},
                       {"logprob", e.logprob},
                       {"bytes", bytes_of(tok, e.id)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}, {"refusal", nullptr}};
}

json full_response(const response_header& h, json choices, const usage_counts& u) {
  return {{"id", h.id},
          {"object", h.kind == api_kind::chat ? "chat.completion" : "text_completion"},
          {"created", h.created},
          {"model", h.model},
          {"choices", std::move(choices)},
          {"system_fingerprint", nullptr},
          {"usage", usage_json(u)}};
}

json stream_chunk(const response_header& h, json choices) {
  return {{"id", h.id},
          {"object", h.kind == api_kind::chat ? "chat.completion.chunk" : "text_completion"},
          {"created", h.created},
          {"model", h.model},
          {"system_fingerprint", nullptr},
          {"choices", std::move(choices)}};
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace di::server
