// Routing, authentication and admission (see api_routes.hpp).
#include "server/api_routes.hpp"

#include "actors/logging.hpp"
#include "common/json_brief.hpp"
#include "server/generation.hpp"
#include "server/grammar_jobs.hpp"
#include "server/openai_response.hpp"

#include <fmt/format.h>
#include <boost/asio/post.hpp>

#include <algorithm>
#include <optional>
#include <string_view>

namespace di::server {

namespace {

using json = nlohmann::ordered_json;
using session_ptr = std::shared_ptr<detail::http_session>;
using detail::header_list;
namespace http = boost::beast::http;

/// The path the request is routed by: its target less the query. An absolute-form target
/// ("http://host:8000/v1/completions?x", which RFC 9112 3.2.2 says a server must accept, as a
/// proxy-minded client sends it) gives the path after its scheme and authority, which are
/// ignored, or "/" where it has none; it was routed as written, a 404.
std::string path_of(const detail::http_request& req) {
  std::string_view target(req.target().data(), req.target().size());
  target = target.substr(0, target.find('?'));
  if (target.starts_with('/')) return std::string(target);
  // absolute-URI = scheme ":" "//" authority path-abempty; scheme = ALPHA *( ALPHA / DIGIT /
  // "+" / "-" / "." ) (RFC 3986 3.1); the authority ends at the path's '/'.
  const auto is_alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  const std::size_t sep = target.find("://");
  if (sep == std::string_view::npos || sep == 0 || !is_alpha(target[0]) ||
      !std::all_of(target.begin(), target.begin() + std::ptrdiff_t(sep), [&](char c) {
        return is_alpha(c) || (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.';
      }))
    return std::string(target);
  const std::string_view rest = target.substr(sep + 3);
  const std::size_t slash = rest.find('/');
  return slash == std::string_view::npos ? std::string("/") : std::string(rest.substr(slash));
}

void check_auth(const detail::http_request& req, const server_context& ctx) {
  const auto& keys = ctx.settings.api_keys;
  if (keys.empty()) return;
  const auto it = req.find(http::field::authorization);
  std::string_view value;
  if (it != req.end()) value = std::string_view(it->value().data(), it->value().size());
  // The scheme is case-insensitive (RFC 9110 11.1): "bearer KEY" is the same credential.
  constexpr std::string_view bearer = "bearer ";
  const bool has_bearer =
      value.size() > bearer.size() &&
      std::equal(bearer.begin(), bearer.end(), value.begin(), [](char a, char b) {
        return a == (b >= 'A' && b <= 'Z' ? char(b - 'A' + 'a') : b);
      });
  if (!has_bearer || !key_matches(value.substr(bearer.size()), keys))
    throw api_error(
        401,
        has_bearer ? "incorrect API key provided" : "missing API key (Authorization: Bearer KEY)",
        "", "invalid_api_key");
}

void require_method(const detail::http_request& req, http::verb verb) {
  const http::verb m = req.method();
  if (m == verb || (verb == http::verb::get && m == http::verb::head)) return;
  api_error e(405,
              fmt::format("{} {} is not allowed; use {}", std::string(req.method_string()),
                          path_of(req), std::string(http::to_string(verb))),
              "", "method_not_allowed");
  e.headers.push_back({"Allow", std::string(http::to_string(verb))});
  throw e;
}

/// What a route takes: its method (a GET route HEAD too) and whether it is open (no API key).
struct route_rule {
  http::verb method;
  bool is_open = false;
};

/// The rule of the route that serves `path`; none where no route does. (handle_request
/// dispatches on the same paths.)
std::optional<route_rule> route_rule_of(std::string_view path) {
  if (path == "/health" || path == "/version" || path == "/ready")  // open, as vLLM's
    return route_rule{http::verb::get, true};
  if (path == "/metrics" || path == "/v1/models" || path.starts_with("/v1/models/"))
    return route_rule{http::verb::get};
  if (path == "/tokenize" || path == "/detokenize" || path == "/v1/completions" ||
      path == "/v1/chat/completions")
    return route_rule{http::verb::post};
  return std::nullopt;
}

/// Throws the error a request gets from its head alone: a route that takes another method
/// (405 with Allow; an open route's before the key), a missing or wrong API key (401), no route
/// (404). The GET routes refuse other methods, as vLLM's: /health, /ready, /metrics and
/// /v1/models/ID answered any method, so the official client's models.delete(ID) got the model
/// card back as if it had been deleted.
void check_route(const detail::http_request& req, const server_context& ctx) {
  const std::string path = path_of(req);
  const std::optional<route_rule> rule = route_rule_of(path);
  if (rule && rule->is_open) return require_method(req, rule->method);
  check_auth(req, ctx);
  if (!rule)
    throw api_error(404, fmt::format("no route {} {}", std::string(req.method_string()), path), "",
                    "not_found");
  require_method(req, rule->method);
}

/// A generation request's answer while the server drains.
api_error shutting_down_error() {
  return api_error(
      503, "the server is shutting down: it finishes the requests in flight and takes no new ones",
      "", "shutting_down");
}

bool is_generation_path(std::string_view path) {
  return path == "/v1/completions" || path == "/v1/chat/completions";
}

/// A model card as vLLM's: with `max_model_len`, the context the cluster's ready groups take
/// (null while none is, or the router does not answer).
json model_json(const served_model& m, const actors::cluster_status* st) {
  json max_model_len = nullptr;
  if (st != nullptr && st->max_model_len > 0) max_model_len = st->max_model_len;
  return {{"id", m.name},
          {"object", "model"},
          {"created", m.created_unix},
          {"owned_by", "deepinfer"},
          {"root", m.name},
          {"parent", nullptr},
          {"max_model_len", max_model_len}};
}

/// A path segment percent-decoded (RFC 3986 2.1), as Starlette decodes vLLM's path parameters:
/// the official client sends a model id "org/name:v1" as "org%2Fname%3Av1". A '%' that starts
/// no escape stays as it is.
std::string percent_decoded(std::string_view s) {
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += char(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

/// A handler posted to the session's strand threw before it answered: the request gets a 500
/// (logged) instead of the exception reaching the I/O thread.
void respond_internal_error(const session_ptr& s, std::string_view what, const std::exception& e) {
  actors::component_logger("serve")->error("{} failed: {}; answered 500", what, e.what());
  s->respond_error(api_error(500, fmt::format("internal error: {}", e.what())));
}

/// Runs `fn(status or null)` on the session's strand once the router answered.
template <class Fn>
void with_status(const session_ptr& s, Fn fn) {
  s->context().cluster->fetch_status([s, fn](std::optional<actors::cluster_status> st,
                                             std::string) mutable {
    boost::asio::post(s->executor(), [s, fn, st = std::move(st)]() mutable {
      try {
        fn(st ? &*st : nullptr);
      } catch (const std::exception& e) {
        respond_internal_error(
            s,
            fmt::format("{} {}", std::string(s->request().method_string()), path_of(s->request())),
            e);
      }
    });
  });
}

void serve_ready(const session_ptr& s) {
  if (s->context().is_draining)
    throw api_error(503, "the server is shutting down", "", "shutting_down");
  with_status(s, [s](const actors::cluster_status* st) {
    int up = 0;
    if (st)
      for (const auto& g : st->groups) up += g.is_up;
    if (up > 0) return s->respond(200, dump({{"status", "ready"}, {"groups_up", up}}));
    const api_error e(503, st ? "no data-parallel group is up" : "the router does not answer", "",
                      "not_ready");
    s->respond_error(e, {{"Retry-After", std::to_string(s->context().settings.retry_after_s)}});
  });
}

void serve_metrics(const session_ptr& s) {
  with_status(s, [s](const actors::cluster_status* st) {
    server_context& ctx = s->context();
    const front_end_gauges g{.num_connections = ctx.num_connections.load(),
                             .num_inflight = ctx.num_inflight.load()};
    s->respond(200, ctx.metrics.render(st, g), "text/plain; version=0.0.4; charset=utf-8");
  });
}

/// A body's "model", when given, must be the served one (404 otherwise).
void check_model(const server_context& ctx, const request_json& body) {
  const auto it = body.find("model");
  if (it == body.end() || it->is_null()) return;
  if (!it->is_string()) bad_param("model", "'model' must be a string");
  if (const std::string model = it->get<std::string>(); !model.empty() && model != ctx.model.name)
    throw api_error(404,
                    fmt::format("the model '{}' does not exist (this server serves '{}')", model,
                                ctx.model.name),
                    "model", "model_not_found");
}

/// The chat prompt as token ids (the template writes BOS itself).
void render_chat(const served_model& m, generation_request& r) {
  if (!m.chat_template)
    throw api_error(400, "this model has no chat template: " + m.chat_template_error, "messages");
  chat_request cr;
  cr.messages = r.messages;
  cr.tools = r.tools;
  cr.documents = r.documents;
  cr.kwargs = r.chat_kwargs;
  cr.add_generation_prompt = r.add_generation_prompt;  // request fields, not template kwargs
  cr.continue_final_message = r.continue_final_message;
  std::string text;
  try {
    text = m.chat_template->apply(cr);
  } catch (const std::exception& e) {
    // A render that passes without the kwargs failed because of them (a reserved name, a
    // value the template cannot use): blame chat_template_kwargs, not the messages.
    bool is_kwargs = false;
    if (!cr.kwargs.empty()) try {
        chat_request plain = cr;
        plain.kwargs = nlohmann::ordered_json::object();
        m.chat_template->apply(plain);
        is_kwargs = true;
      } catch (const std::exception&) {
      }
    throw api_error(400,
                    fmt::format("the chat template failed on these {}: {}",
                                is_kwargs ? "chat_template_kwargs" : "messages", e.what()),
                    is_kwargs ? "chat_template_kwargs" : "messages");
  }
  r.prompts = {{.ids = m.tokenizer->encode(text)}};
  if (r.prompts[0].ids.empty())
    throw api_error(400, "the messages render to an empty prompt", "messages");
}

/// vLLM's POST /tokenize: {"prompt", "add_special_tokens" (default true: BOS, as completions
/// adds it)} or a chat request's {"messages", ...} rendered as chat completions renders them;
/// `return_token_strs` adds each token's text. Answers {"count", "max_model_len", "tokens",
/// "token_strs"}.
void serve_tokenize(const session_ptr& s) {
  server_context& ctx = s->context();
  const request_json body = parse_body(s->request().body(), ctx.settings);
  check_model(ctx, body);
  const auto flag = [&](const char* key) -> std::optional<bool> {
    const auto it = body.find(key);
    if (it == body.end() || it->is_null()) return std::nullopt;
    if (!it->is_boolean()) bad_param(key, fmt::format("'{}' must be a boolean", key));
    return it->get<bool>();
  };
  std::vector<std::int32_t> ids;
  if (body.contains("messages")) {
    generation_request r = parse_chat_request(body, ctx.settings);
    render_chat(ctx.model, r);
    ids = std::move(r.prompts[0].ids);
  } else {
    const auto prompt = body.find("prompt");
    if (prompt == body.end() || !prompt->is_string())
      bad_param("prompt", "'prompt' (a string) or 'messages' is required");
    // (read before the encode, whose errors blame the prompt: a bad flag named 'prompt')
    const bool add_bos = flag("add_special_tokens").value_or(true);
    try {
      ids = ctx.model.tokenizer->encode(prompt->get<std::string>(), {.add_bos = add_bos});
    } catch (const std::exception& e) {
      bad_param("prompt", e.what());
    }
  }
  json strs = nullptr;
  if (flag("return_token_strs").value_or(false)) {
    strs = json::array();
    for (std::int32_t id : ids) strs.push_back(token_text(*ctx.model.tokenizer, id));
  }
  with_status(s,
              [s, ids = std::move(ids), strs = std::move(strs)](const actors::cluster_status* st) {
                json max_model_len = nullptr;
                if (st != nullptr && st->max_model_len > 0) max_model_len = st->max_model_len;
                s->respond(200, dump({{"count", ids.size()},
                                      {"max_model_len", max_model_len},
                                      {"tokens", ids},
                                      {"token_strs", strs}}));
              });
}

/// vLLM's POST /detokenize: {"tokens": [ids]} -> {"prompt": text} (special tokens kept, as
/// vLLM decodes them).
void serve_detokenize(const session_ptr& s) {
  server_context& ctx = s->context();
  const request_json body = parse_body(s->request().body(), ctx.settings);
  check_model(ctx, body);
  const auto tokens = body.find("tokens");
  if (tokens == body.end() || !tokens->is_array())
    bad_param("tokens", "'tokens' must be a list of token ids");
  const auto vocab = std::int64_t(ctx.model.tokenizer->vocab_size());
  std::vector<std::int32_t> ids;
  for (const json& t : *tokens) {
    if (!t.is_number_integer() || t.get<std::int64_t>() < 0 || t.get<std::int64_t>() >= vocab ||
        !ctx.model.tokenizer->id_to_token(std::int32_t(t.get<std::int64_t>())))
      bad_param("tokens",
                fmt::format("'tokens' must be token ids in [0, {}), got {}", vocab, json_brief(t)));
    ids.push_back(std::int32_t(t.get<std::int64_t>()));
  }
  s->respond(200, dump({{"prompt", ctx.model.tokenizer->decode(ids)}}));
}

/// A compile error of a forced tool call's grammar (tool_choice) blames the tools' schemas.
api_error grammar_error_of(const generation_request& r, api_error e) {
  if (!r.forces_tool_calls || e.param != "response_format") return e;
  std::string m = e.what();
  if (m.starts_with("invalid response_format: "))
    m.erase(0, std::string_view("invalid response_format: ").size());
  api_error t(e.status, "the tools' parameters (for tool_choice) do not compile: " + m, "tools",
              e.code, e.type);
  t.headers = e.headers;
  return t;
}

void serve_generation(const session_ptr& s, api_kind kind) {
  server_context& ctx = s->context();
  if (ctx.is_draining) throw shutting_down_error();
  const request_json body = parse_body(s->request().body(), ctx.settings);
  generation_request r = kind == api_kind::chat ? parse_chat_request(body, ctx.settings)
                                                : parse_completion_request(body, ctx.settings);
  check_model(ctx, body);
  if (kind == api_kind::chat) render_chat(ctx.model, r);
  check_prompt_ids(r, *ctx.model.tokenizer);  // before the echo or logprobs must decode them
  if (ctx.num_inflight.fetch_add(1) >= ctx.settings.max_concurrent_requests) {
    --ctx.num_inflight;
    throw api_error(
        429,
        fmt::format(
            "{} requests are in flight, the limit (server.max_concurrent_requests); retry later",
            ctx.settings.max_concurrent_requests),
        "", "rate_limit_exceeded");
  }
  if (r.params.response_format.empty()) return start_generation(s, std::move(r));
  // Compiled on the grammar threads (inline without them) for at most the scheduler's limit,
  // then started back on the connection's strand; the admission slot is held meanwhile and
  // given back if it does not compile in time. (The wait was unbounded: a 3.8 MB chain of unit
  // rules was served after 210 s.)
  if (!ctx.grammars) {
    try {
      compile_request_grammar(ctx, r.params.response_format);
    } catch (const api_error& e) {
      --ctx.num_inflight;
      throw grammar_error_of(r, e);
    }
    return start_generation(s, std::move(r));
  }
  const std::string spec = r.params.response_format;
  auto r_ptr = std::make_shared<generation_request>(std::move(r));
  const grammar_jobs::waiter_ref waiting =
      ctx.grammars->submit(spec, s->executor(), [s, r_ptr](std::optional<api_error> failed) {
        boost::asio::post(s->executor(), [s, r_ptr, failed = std::move(failed)]() mutable {
          // Its client left after the verdict was given (too late to withdraw): nobody to
          // answer, nothing to start.
          if (!s->is_open()) {
            --s->context().num_inflight;
            return;
          }
          if (failed) {
            --s->context().num_inflight;
            return respond_api_error(s, grammar_error_of(*r_ptr, *failed));
          }
          try {
            start_generation(s, std::move(*r_ptr));  // (a submit that throws gives the slot back)
          } catch (const std::exception& e) {
            respond_internal_error(s, "starting a generation", e);
          }
        });
      });
  // A client that leaves while its grammar compiles gives up its wait and its slot, and the
  // compile stops if nobody else waits for it. (It ran on to its end or the 100 s limit, on a
  // grammar thread and an admission slot, for nobody; the generation then started and was
  // aborted at once.)
  s->watch_disconnect([s, waiting] {
    grammar_jobs* grammars = s->context().grammars;  // (null once the server stopped)
    if (grammars != nullptr && grammars->withdraw(waiting)) --s->context().num_inflight;
  });
}

}  // namespace

std::optional<api_error> header_error(const detail::http_request& req, const server_context& ctx) {
  try {
    check_route(req, ctx);
  } catch (const api_error& e) {
    return e;
  }
  if (ctx.is_draining && is_generation_path(path_of(req))) return shutting_down_error();
  return std::nullopt;
}

void respond_api_error(const session_ptr& s, const api_error& e) {
  header_list extra;
  if (e.status == 429 || e.status == 503)
    extra.push_back({"Retry-After", std::to_string(s->context().settings.retry_after_s)});
  extra.insert(extra.end(), e.headers.begin(), e.headers.end());
  s->respond_error(e, extra);
}

bool key_matches(std::string_view given, const std::vector<std::string>& keys) {
  unsigned match = 0;
  for (const std::string& key : keys) {
    unsigned diff = unsigned(given.size() != key.size());
    for (std::size_t i = 0; i < key.size(); ++i)
      diff |= unsigned(static_cast<unsigned char>(key[i]) ^
                       static_cast<unsigned char>(i < given.size() ? given[i] : 0));
    match |= unsigned(diff == 0);
  }
  return match != 0;
}

void handle_request(const session_ptr& s) {
  const std::string path = path_of(s->request());
  try {
    check_route(s->request(), s->context());  // the route, its method and the API key
    if (path == "/health") return s->respond(200, dump({{"status", "ok"}}));
    if (path == "/version") return s->respond(200, dump({{"version", DEEPINFER_VERSION}}));
    if (path == "/ready") return serve_ready(s);
    if (path == "/metrics") return serve_metrics(s);
    if (path == "/v1/models") {
      return with_status(s, [s](const actors::cluster_status* st) {
        s->respond(200, dump({{"object", "list"},
                              {"data", json::array({model_json(s->context().model, st)})}}));
      });
    }
    if (path.rfind("/v1/models/", 0) == 0) {
      const std::string id = percent_decoded(std::string_view(path).substr(11));
      if (id != s->context().model.name)
        throw api_error(404, fmt::format("the model '{}' does not exist", id), "model",
                        "model_not_found");
      return with_status(s, [s](const actors::cluster_status* st) {
        s->respond(200, dump(model_json(s->context().model, st)));
      });
    }
    if (path == "/tokenize") return serve_tokenize(s);
    if (path == "/detokenize") return serve_detokenize(s);
    if (path == "/v1/completions") return serve_generation(s, api_kind::completion);
    if (path == "/v1/chat/completions") return serve_generation(s, api_kind::chat);
    throw api_error(404,
                    fmt::format("no route {} {}", std::string(s->request().method_string()), path),
                    "", "not_found");
  } catch (const api_error& e) {
    respond_api_error(s, e);
  }
}

}  // namespace di::server
