// The generation of one HTTP request (see generation.hpp).
#include "server/generation.hpp"

#include "actors/logging.hpp"
#include "runtime/scheduler.hpp"
#include "runtime/sequence_status.hpp"
#include "server/reasoning.hpp"
#include "server/tool_calls.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/post.hpp>

#include <chrono>
#include <optional>
#include <random>

namespace di::server {

namespace {

using json = nlohmann::ordered_json;
using clock_type = std::chrono::steady_clock;

struct choice_state {
  std::size_t prompt = 0;  ///< which prompt it continues
  bool is_accepted = false;
  bool is_ended = false;  ///< its final event (or refusal) arrived
  std::vector<std::int32_t> prompt_ids;
  choice_output out;
  std::string error;
  runtime::failure_kind failure = runtime::failure_kind::none;  ///< of its final event
  std::string failure_param;
  clock_type::time_point last_token;
  bool has_token = false;
  std::int64_t num_cached_tokens = 0;  ///< of the admission that produced its first token
  std::optional<text_offsets> offsets;     ///< completions logprobs: follows the output tokens
  std::vector<std::size_t> token_offsets;  ///< each output token's text_offset in out.text
  /// Streaming echo with logprobs: the first chunk (prompt text and prompt logprobs) waits for
  /// the first output token, when every prompt logprob has arrived.
  bool holds_echo = false;
  /// Characters of the echoed prompt, counted once (echo_chars): every streamed chunk's
  /// text_offsets start after them.
  std::optional<std::size_t> echo_chars;
  /// Streaming with return_token_ids: the choice's first chunk carries prompt_token_ids.
  bool sent_prompt_ids = false;
  /// Streaming with return_token_ids: output ids sent so far. A token whose text is held back
  /// (part of a UTF-8 character) goes out with the chunk that carries its text.
  std::size_t num_ids_sent = 0;
  /// Streaming chat with tools: the output read as content and tool calls.
  std::optional<tool_call_parser> tool_parser;
  /// Streaming chat with a reasoning parser: the output read as reasoning and content.
  std::optional<reasoning_parser> reasoning;
};

std::string random_id(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}{:08x}", prefix, rng(), std::uint32_t(rng()));
}

class generation : public job_sink, public std::enable_shared_from_this<generation> {
 public:
  generation(std::shared_ptr<detail::http_session> session, generation_request request)
      : session_(std::move(session)), ctx_(session_->context()), req_(std::move(request)) {
    header_ = {.id = random_id(req_.kind == api_kind::chat ? "chatcmpl-" : "cmpl-"),
               .created = std::int64_t(std::time(nullptr)),
               .model = ctx_.model.name,
               .kind = req_.kind};
  }

  void start() {
    std::vector<actors::submit_request> subs;
    for (std::size_t p = 0; p < req_.prompts.size(); ++p)
      for (int j = 0; j < req_.n; ++j) {
        actors::submit_request s{.prompt_ids = req_.prompts[p].ids, .params = req_.params};
        if (s.prompt_ids.empty()) s.prompt = req_.prompts[p].text;  // "" too: BOS alone
        if (req_.params.seed) s.params.seed = *req_.params.seed + std::uint64_t(j);
        if (req_.logprobs) s.params.logprobs = *req_.logprobs;
        if (req_.echo && req_.logprobs) s.params.prompt_logprobs = *req_.logprobs;
        choices_.push_back({.prompt = p});
        subs.push_back(std::move(s));
      }
    auto self = shared_from_this();
    session_->watch_disconnect([self] { self->on_client_gone(); });
    try {
      job_ = ctx_.cluster->submit(std::move(subs), self);
    } catch (...) {
      --ctx_.num_inflight;  // no job: its last event, which gives the slot back, never comes
      throw;
    }
  }

  // job_sink: on a CAF thread; hop to the connection's strand.
  void on_reply(std::size_t index, actors::submit_reply reply) override {
    boost::asio::post(session_->executor(),
                      [self = shared_from_this(), index, reply = std::move(reply)]() mutable {
                        const bool ends = !reply.accepted;
                        try {
                          self->handle_reply(index, std::move(reply));
                        } catch (const std::exception& e) {
                          self->fail_internal(index, ends, "the router's reply", e);
                        }
                      });
  }
  void on_events(std::size_t index, std::vector<runtime::token_event> events) override {
    boost::asio::post(session_->executor(),
                      [self = shared_from_this(), index, events = std::move(events)]() mutable {
                        const bool ends = !events.empty() && events.back().is_finished();
                        try {
                          self->handle_events(index, std::move(events));
                        } catch (const std::exception& e) {
                          self->fail_internal(index, ends, "token events", e);
                        }
                      });
  }

 private:
  /// A handler of the job's reply or events threw (a di::error of the tokenizer decoding an id
  /// it has no token for, a JSON error): this response alone fails -- a 500, or in a stream
  /// that has begun an error event and `data: [DONE]` -- and its job is aborted. (The exception
  /// escaped to the I/O thread, and std::terminate ended the process: every client's request
  /// was lost.) `ends`: the handler carried choice `index`'s last word (a refusal or its final
  /// event), which no later event repeats, so it is counted here if the handler did not.
  void fail_internal(std::size_t index, bool ends, std::string_view what, const std::exception& e) {
    actors::component_logger("serve")->error(
        "request {}: handling {} failed: {}; the response fails (500) and its generation is "
        "aborted",
        header_.id, what, e.what());
    if (ends && !choices_[index].is_ended) {
      choices_[index].is_ended = true;
      ended();
    }
    if (job_) job_->abort();
    if (is_answered_ || is_failed_) return;  // answered already, or nobody to answer
    is_complete_ = false;                    // it may have thrown while composing the answer
    fail(api_error(500, fmt::format("internal error: {}", e.what()), "", "generation_failed"));
  }

  void handle_reply(std::size_t index, actors::submit_reply reply) {
    choice_state& c = choices_[index];
    if (!reply.accepted) {
      c.is_ended = true;
      c.error = reply.error;
      fail(blame_request_fields(refusal_error(reply.kind, reply.error, reply.param,
                                              req_.max_tokens_name, logprobs_name())));
      return ended();
    }
    c.is_accepted = true;
    c.prompt_ids = std::move(reply.prompt_ids);
    if (++num_accepted_ == choices_.size() && !is_failed_) begin();
  }

  void handle_events(std::size_t index, std::vector<runtime::token_event> events) {
    choice_state& c = choices_[index];
    if (!c.is_accepted && !events.empty() && events.back().is_finished()) {
      // Ended before the router accepted it (the router went away): a refusal.
      c.is_ended = true;
      c.error = events.back().error;
      fail(blame_request_fields(refusal_error(events.back().failure, c.error,
                                              events.back().failure_param, req_.max_tokens_name,
                                              logprobs_name())));
      return ended();
    }
    for (runtime::token_event& e : events) {
      record_tokens(c, e);
      const std::size_t first_token = c.out.token_ids.size();
      c.out.token_ids.insert(c.out.token_ids.end(), e.token_ids.begin(), e.token_ids.end());
      if (req_.logprobs && req_.kind == api_kind::completion) {
        if (!c.offsets) c.offsets.emplace(*ctx_.model.tokenizer, req_.params.skip_special_tokens);
        for (std::int32_t id : e.token_ids) c.token_offsets.push_back(c.offsets->push(id));
      }
      c.out.text += e.text;
      const std::size_t first_logprob = c.out.logprobs.size();
      c.out.logprobs.insert(c.out.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
      c.out.prompt_logprobs.insert(c.out.prompt_logprobs.end(), e.prompt_logprobs.begin(),
                                   e.prompt_logprobs.end());
      if (e.is_finished()) finish_choice(c, e);
      // (a stream that failed has ended: its job's last events are not sent after [DONE])
      if (is_streaming_ && !is_failed_ && c.holds_echo)
        send_first_chunk(index);
      else if (is_streaming_ && !is_failed_)
        stream_delta(index, e.text, first_token, first_logprob);
      if (e.is_finished()) {
        c.is_ended = true;
        ended();
      }
    }
    maybe_complete();
  }

  void record_tokens(choice_state& c, const runtime::token_event& e) {
    if (e.token_ids.empty()) return;
    if (!c.has_token) c.num_cached_tokens = e.num_cached_tokens;
    const auto now = clock_type::now();
    if (!c.has_token)
      ctx_.metrics.on_first_token(session_->request_age());
    else
      ctx_.metrics.on_tokens(std::int64_t(e.token_ids.size()),
                             std::chrono::duration<double>(now - c.last_token).count());
    c.has_token = true;
    c.last_token = now;
  }

  void finish_choice(choice_state& c, const runtime::token_event& e) {
    c.out.finish_reason = std::string(runtime::finish_reason_of(e.status));
    if (c.out.finish_reason.empty()) c.out.finish_reason = "error";
    if (!e.stop_string.empty())
      c.out.stop_reason = e.stop_string;
    else if (e.stop_token && e.status == runtime::sequence_status::finished_stop &&
             std::find(req_.params.stop_token_ids.begin(), req_.params.stop_token_ids.end(),
                       *e.stop_token) != req_.params.stop_token_ids.end())
      c.out.stop_reason = *e.stop_token;  // one of stop_token_ids; EOS leaves it null (vLLM)
    if (e.status == runtime::sequence_status::finished_error) {
      c.error = e.error.empty() ? "generation failed" : e.error;
      c.failure = e.failure;
      c.failure_param = e.failure_param;
    }
    ctx_.metrics.on_request_done(c.out.finish_reason, std::int64_t(c.prompt_ids.size()),
                                 std::int64_t(c.out.token_ids.size()), session_->request_age());
  }

  /// Every choice was accepted: open the stream (buffered output goes first) or wait.
  void begin() {
    if (!req_.stream) return maybe_complete();
    session_->begin_stream();
    is_streaming_ = true;
    for (std::size_t i = 0; i < choices_.size(); ++i) {
      choice_state& c = choices_[i];
      if (req_.kind == api_kind::chat)
        send_chunk(i, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr);
      c.holds_echo = req_.echo && req_.logprobs;
      send_first_chunk(i);
    }
    maybe_complete();
  }

  /// A choice's first chunk: what it produced before the stream opened, after the echoed
  /// prompt (held back while an echo with logprobs waits for its prompt logprobs).
  void send_first_chunk(std::size_t index) {
    choice_state& c = choices_[index];
    const bool finished = !c.out.finish_reason.empty();
    if (c.holds_echo && c.out.token_ids.empty() && !finished) return;
    c.holds_echo = false;
    std::string text = c.out.text;
    if (req_.echo) text = prompt_text(c) + text;
    if (!text.empty() || !c.out.token_ids.empty() || finished || req_.echo)
      stream_delta_text(index, text, 0, 0, req_.echo);
  }

  void stream_delta(std::size_t index, const std::string& text, std::size_t first_token,
                    std::size_t first_logprob) {
    stream_delta_text(index, text, first_token, first_logprob);
  }

  /// `with_prompt`: the first chunk of an echo, whose text and logprobs begin with the prompt's.
  void stream_delta_text(std::size_t index, const std::string& text, std::size_t first_token,
                         std::size_t first_logprob, bool with_prompt = false) {
    choice_state& c = choices_[index];
    if (!c.error.empty()) return;
    const bool finished = !c.out.finish_reason.empty();
    if (text.empty() && !finished && !with_prompt &&
        (!req_.logprobs || first_logprob == c.out.logprobs.size()))
      return;
    json delta = nullptr;
    if (req_.kind == api_kind::chat && (req_.parses_tool_calls || req_.splits_reasoning)) {
      delta = parsed_chunk(c, text, finished);
      if (delta.empty() && !finished && !req_.logprobs) return;  // held back: nothing to say yet
    }
    json lp = nullptr;
    if (req_.logprobs) lp = logprobs_json(c, first_token, first_logprob, with_prompt);
    json fr = finished ? json(finish_reason_of(c, c.tool_parser && c.tool_parser->num_calls() > 0))
                       : json(nullptr);
    json ids = nullptr;
    if (req_.return_token_ids) {
      ids = std::vector<std::int32_t>(c.out.token_ids.begin() + std::ptrdiff_t(c.num_ids_sent),
                                      c.out.token_ids.end());
      c.num_ids_sent = c.out.token_ids.size();
    }
    if (req_.kind == api_kind::chat)
      send_chunk(index, delta.is_null() ? json{{"content", text}} : delta, lp, fr, ids);
    else
      send_chunk(index, text, lp, fr, ids);
  }

  /// The delta of a chat chunk whose text is parsed: reasoning first (what the reasoning
  /// parser released), then the content after it, read for tool calls where they are parsed;
  /// `finished` releases what either parser held back.
  json parsed_chunk(choice_state& c, const std::string& text, bool finished) {
    if (!req_.splits_reasoning) return tool_call_chunk(c, text, finished);
    if (!c.reasoning) c.reasoning.emplace();
    reasoning_delta r = c.reasoning->push(text);
    if (finished) {
      reasoning_delta rest = c.reasoning->finish();
      r.reasoning += rest.reasoning;
      r.content += rest.content;
    }
    json delta = json::object();
    if (!r.reasoning.empty()) delta["reasoning"] = r.reasoning;
    if (req_.parses_tool_calls)
      delta.update(tool_call_chunk(c, r.content, finished));
    else if (!r.content.empty())
      delta["content"] = r.content;
    return delta;
  }

  /// The delta of a chat chunk whose text is read for tool calls: the content the parser
  /// released (none when it holds the text back) and the calls it completed; `finished`
  /// releases the rest.
  json tool_call_chunk(choice_state& c, const std::string& text, bool finished) {
    if (!c.tool_parser) c.tool_parser.emplace(max_tool_calls());
    const std::size_t first_call = c.tool_parser->num_calls();
    tool_call_delta d = c.tool_parser->push(text);
    if (finished) {
      tool_call_delta rest = c.tool_parser->finish();
      d.content += rest.content;
      d.calls.insert(d.calls.end(), rest.calls.begin(), rest.calls.end());
    }
    json delta = json::object();
    if (!d.content.empty()) delta["content"] = d.content;
    if (!d.calls.empty()) delta["tool_calls"] = tool_calls_json(d.calls, first_call, true);
    return delta;
  }

  /// OpenAI's tool_calls list; stream deltas number the calls from `first_index`.
  static json tool_calls_json(const std::vector<tool_call>& calls, std::size_t first_index,
                              bool is_delta) {
    json out = json::array();
    for (std::size_t i = 0; i < calls.size(); ++i) {
      json call = json::object();
      if (is_delta) call["index"] = first_index + i;
      call["id"] = random_id("call_");
      call["type"] = "function";
      call["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
      out.push_back(std::move(call));
    }
    return out;
  }

  std::size_t max_tool_calls() const { return req_.parallel_tool_calls ? 0 : 1; }

  /// A choice that called tools and ended on its own (EOS, a stop) finished with
  /// "tool_calls", as OpenAI's and vLLM's do; one cut off by max_tokens stays "length".
  static std::string finish_reason_of(const choice_state& c, bool called_tools) {
    return called_tools && c.out.finish_reason == "stop" ? "tool_calls" : c.out.finish_reason;
  }

  /// An error about the grammar of a forced tool call names `tools`, whose schemas made it
  /// (the grammar travels as the request's response_format).
  api_error blame_tools(api_error e) const {
    if (req_.forces_tool_calls && e.param == "response_format") e.param = "tools";
    return e;
  }

  /// A refusal names the request's own field: `tools` for a forced tool call's grammar, and in
  /// chat, which has no `prompt`, `messages` for what the router blames on the prompt they
  /// render to (its length: it named `prompt`).
  api_error blame_request_fields(api_error e) const {
    if (req_.kind == api_kind::chat && e.param == "prompt") e.param = "messages";
    return blame_tools(std::move(e));
  }

  void send_chunk(std::size_t index, json delta_or_text, json logprobs, json finish_reason,
                  json token_ids = nullptr) {
    json choice = {{"index", index}};
    if (req_.kind == api_kind::chat)
      choice["delta"] = std::move(delta_or_text);
    else
      choice["text"] = std::move(delta_or_text);
    choice["logprobs"] = std::move(logprobs);
    choice["finish_reason"] = finish_reason;
    if (!finish_reason.is_null()) choice["stop_reason"] = choices_[index].out.stop_reason;
    if (!token_ids.is_null()) choice["token_ids"] = std::move(token_ids);
    if (req_.return_token_ids && !choices_[index].sent_prompt_ids) {
      choice["prompt_token_ids"] = choices_[index].prompt_ids;  // vLLM: in the first chunk
      choices_[index].sent_prompt_ids = true;
    }
    json chunk = stream_chunk(header_, json::array({std::move(choice)}));
    if (req_.include_usage) chunk["usage"] = nullptr;
    session_->send("data: " + dump(chunk) + "\n\n");
  }

  json logprobs_json(choice_state& c, std::size_t first_token, std::size_t first_logprob,
                     bool with_prompt) {
    const tok::tokenizer& tok = *ctx_.model.tokenizer;
    if (req_.kind == api_kind::chat)
      return chat_logprobs(
          tok, {c.out.logprobs.begin() + std::ptrdiff_t(first_logprob), c.out.logprobs.end()});
    return completion_logprobs_of(c, with_prompt, first_token, first_logprob);
  }

  /// Completions logprobs of the output tokens from `first_token` (entries from
  /// `first_logprob`), after the prompt's tokens and their logprobs when `with_prompt` (echo).
  /// Offsets count characters of the returned text, which begins with the echoed prompt.
  json completion_logprobs_of(choice_state& c, bool with_prompt, std::size_t first_token,
                              std::size_t first_logprob) {
    const tok::tokenizer& tok = *ctx_.model.tokenizer;
    std::vector<std::int32_t> ids;
    std::vector<const runtime::position_logprobs*> entries;
    std::vector<std::size_t> offsets;
    if (with_prompt) {
      ids = c.prompt_ids;
      // (a text prompt was encoded by the router; an empty text is BOS alone)
      offsets = echo_text_offsets(tok, ids, req_.prompts[c.prompt].ids.empty(),
                                  req_.params.skip_special_tokens);
      for (std::size_t i = 0; i < ids.size(); ++i) {
        entries.push_back(i < c.out.prompt_logprobs.size() && c.out.prompt_logprobs[i]
                              ? &*c.out.prompt_logprobs[i]
                              : nullptr);
      }
    }
    const std::size_t base = req_.echo ? echo_chars(c) : 0;
    for (std::size_t i = first_token; i < c.out.token_ids.size(); ++i) {
      ids.push_back(c.out.token_ids[i]);
      offsets.push_back(base + (i < c.token_offsets.size() ? c.token_offsets[i] : 0));
    }
    for (std::size_t i = first_logprob; i < c.out.logprobs.size(); ++i)
      entries.push_back(&c.out.logprobs[i]);
    return completion_logprobs(tok, ids, entries, offsets, req_.return_tokens_as_token_ids);
  }

  /// Chat logprobs of this response's tokens, named as return_tokens_as_token_ids asks (a
  /// member, so every unqualified call in this class gets it).
  json chat_logprobs(const tok::tokenizer& tok,
                     const std::vector<runtime::position_logprobs>& entries) const {
    return server::chat_logprobs(tok, entries, req_.return_tokens_as_token_ids);
  }

  std::size_t echo_chars(choice_state& c) const {
    if (!c.echo_chars) c.echo_chars = count_chars(prompt_text(c));
    return *c.echo_chars;
  }

  std::string prompt_text(const choice_state& c) const {
    const prompt_input& p = req_.prompts[c.prompt];
    if (!p.text.empty()) return p.text;
    // As the output is decoded (and as the logprobs' text offsets count it). Every id decodes:
    // serve_generation refused a prompt with an id the tokenizer has no token for
    // (check_prompt_ids), whose echo was "" here, silently.
    return ctx_.model.tokenizer->decode(c.prompt_ids,
                                        {.skip_special_tokens = req_.params.skip_special_tokens});
  }

  bool all_finished() const {
    for (const choice_state& c : choices_)
      if (c.out.finish_reason.empty()) return false;
    return true;
  }

  /// Every choice has its final event: answer.
  void maybe_complete() {
    if (is_failed_ || is_complete_ || num_accepted_ < choices_.size() || !all_finished()) return;
    is_complete_ = true;
    for (const choice_state& c : choices_)
      if (!c.error.empty()) {
        const api_error e = blame_tools(generation_error(c.failure, c.error, c.failure_param));
        is_answered_ = true;
        if (is_streaming_) {
          session_->send("data: " + dump(e.body()) + "\n\ndata: [DONE]\n\n");
          return session_->end_stream();
        }
        // (A 503 here -- cut off by the cluster -- had no Retry-After.)
        return session_->respond_error(e, retry_headers(e));
      }
    if (is_streaming_) {
      std::string usage_chunk;
      if (req_.include_usage) {
        json chunk = stream_chunk(header_, json::array());
        chunk["usage"] = usage_json(usage());
        usage_chunk = "data: " + dump(chunk) + "\n\n";
      }
      is_answered_ = true;
      if (!usage_chunk.empty()) session_->send(usage_chunk);
      session_->send("data: [DONE]\n\n");
      return session_->end_stream();
    }
    json choices = json::array();
    for (std::size_t i = 0; i < choices_.size(); ++i) choices.push_back(final_choice(i));
    const std::string body = dump(full_response(header_, std::move(choices), usage()));
    is_answered_ = true;
    session_->respond(200, body);
  }

  json final_choice(std::size_t index) {
    choice_state& c = choices_[index];
    json choice = {{"index", index}};
    json lp = nullptr;
    std::string finish_reason = c.out.finish_reason;
    if (req_.kind == api_kind::chat) {
      choice["message"] = final_message(c, finish_reason);
      if (req_.logprobs) lp = chat_logprobs(*ctx_.model.tokenizer, c.out.logprobs);
    } else {
      std::string text = c.out.text;
      if (req_.echo) text = prompt_text(c) + text;
      choice["text"] = text;
      if (req_.logprobs) lp = completion_logprobs_of(c, req_.echo, 0, 0);
    }
    choice["logprobs"] = std::move(lp);
    choice["finish_reason"] = finish_reason;
    choice["stop_reason"] = c.out.stop_reason;
    if (req_.return_token_ids) {
      choice["token_ids"] = c.out.token_ids;
      choice["prompt_token_ids"] = c.prompt_ids;
    }
    return choice;
  }

  /// A chat choice's message: with a reasoning parser, the reasoning (null when there is none)
  /// apart from the content after it; with tools, the calls read from that content. Content
  /// that is empty is null beside calls or reasoning, as in vLLM. `finish_reason` becomes
  /// "tool_calls" where the choice called tools.
  json final_message(const choice_state& c, std::string& finish_reason) const {
    reasoning_delta r{.content = c.out.text};
    if (req_.splits_reasoning) r = split_reasoning(c.out.text);
    tool_call_delta m{.content = std::move(r.content)};
    if (req_.parses_tool_calls) m = parse_tool_calls(m.content, max_tool_calls());
    const bool null_if_empty = req_.splits_reasoning || !m.calls.empty();
    json message = {
        {"role", "assistant"},
        {"content", m.content.empty() && null_if_empty ? json(nullptr) : json(m.content)}};
    if (req_.splits_reasoning)
      message["reasoning"] = r.reasoning.empty() ? json(nullptr) : json(r.reasoning);
    message["refusal"] = nullptr;
    if (!m.calls.empty()) message["tool_calls"] = tool_calls_json(m.calls, 0, false);
    finish_reason = finish_reason_of(c, !m.calls.empty());
    return message;
  }

  /// Each prompt counts once (n choices of one prompt share it), in prompt_tokens and in
  /// cached_tokens: the most of it that the prefix cache served any of its choices (the first
  /// choice of a cold prompt computes it, the others reuse its blocks).
  usage_counts usage() const {
    usage_counts u;
    std::vector<bool> counted(req_.prompts.size(), false);
    std::vector<std::int64_t> cached(req_.prompts.size(), 0);
    for (const choice_state& c : choices_) {
      u.completion_tokens += std::int64_t(c.out.token_ids.size());
      if (!counted[c.prompt]) u.prompt_tokens += std::int64_t(c.prompt_ids.size());
      counted[c.prompt] = true;
      cached[c.prompt] = std::max(cached[c.prompt], c.num_cached_tokens);
    }
    for (std::int64_t n : cached) u.cached_tokens += n;
    return u;
  }

  /// The response failed before it started (a refusal): answer with the error, abort the rest.
  void fail(const api_error& e) {
    if (is_failed_ || is_complete_) return;
    is_failed_ = true;
    is_answered_ = true;
    if (job_) job_->abort();
    if (is_streaming_) {
      session_->send("data: " + dump(e.body()) + "\n\ndata: [DONE]\n\n");
      session_->end_stream();
    } else {
      session_->respond_error(e, retry_headers(e));
    }
  }

  /// The request's field for the number of top logprobs: chat's `logprobs` is a switch.
  std::string_view logprobs_name() const {
    return req_.kind == api_kind::chat ? "top_logprobs" : "logprobs";
  }

  /// Retry-After on a 429 or 503, as the README promises for every one.
  detail::header_list retry_headers(const api_error& e) const {
    detail::header_list extra;
    if (e.status == 429 || e.status == 503)
      extra.push_back({"Retry-After", std::to_string(ctx_.settings.retry_after_s)});
    return extra;
  }

  void on_client_gone() {
    is_failed_ = true;
    if (job_) job_->abort();
  }

  /// One choice ended; the last one gives the admission slot back.
  void ended() {
    if (++num_ended_ < choices_.size()) return;
    --ctx_.num_inflight;
  }

  std::shared_ptr<detail::http_session> session_;
  server_context& ctx_;
  generation_request req_;
  response_header header_;
  std::vector<choice_state> choices_;
  std::shared_ptr<job_handle> job_;
  std::size_t num_accepted_ = 0;
  std::size_t num_ended_ = 0;
  bool is_streaming_ = false;
  bool is_failed_ = false;
  bool is_complete_ = false;
  bool is_answered_ = false;  ///< the response (or the stream's end) was written
};

}  // namespace

api_error refusal_error(runtime::failure_kind kind, const std::string& message,
                        const std::string& param, std::string_view max_tokens_name,
                        std::string_view logprobs_name) {
  using runtime::failure_kind;
  // (the scheduler's admission status comes apart from the message, in submit_reply::status:
  // here the HTTP status and error type say it)
  std::string m = message;
  std::string blamed = param;
  if (param == "logprobs" && logprobs_name != "logprobs") {  // "logprobs must be <= 20 ..."
    if (m.starts_with("logprobs")) m.replace(0, std::string_view("logprobs").size(), logprobs_name);
    blamed = logprobs_name;
  }
  if (max_tokens_name != "max_tokens")
    for (std::size_t at = m.find("max_tokens"); at != std::string::npos;
         at = m.find("max_tokens", at + max_tokens_name.size()))
      m.replace(at, std::string_view("max_tokens").size(), max_tokens_name);
  switch (kind) {
    case failure_kind::overloaded:
      return api_error(429, "the server is at its admission limit, retry later: " + m, "",
                       "rate_limit_exceeded");
    case failure_kind::unavailable:
      return api_error(503, "the cluster cannot serve right now: " + m, "", "service_unavailable");
    case failure_kind::internal:
      return api_error(500, m, "", "generation_failed");
    case failure_kind::none:  // a refusal that says no kind: the request is to blame
    case failure_kind::invalid:
      break;
  }
  return api_error(400, m, blamed == "max_tokens" ? std::string(max_tokens_name) : blamed);
}

api_error generation_error(runtime::failure_kind kind, const std::string& message,
                           const std::string& param) {
  using runtime::failure_kind;
  const std::string m = "generation failed: " + message;
  if (kind == failure_kind::invalid)
    return api_error(400, m, param, param == "response_format" ? "unsupported_parameter" : "");
  // Cut off by the cluster (shut down, a group or the router lost): 503, as a refusal for the
  // same reason is.
  if (kind == failure_kind::unavailable) return api_error(503, m, "", "service_unavailable");
  return api_error(500, m, "", "generation_failed");
}

void start_generation(const std::shared_ptr<detail::http_session>& session,
                      generation_request request) {
  auto g = std::make_shared<generation>(session, std::move(request));
  g->start();
}

}  // namespace di::server
