// Request body parsing (see openai_request.hpp). Fields are read through one small reader that
// checks type and range and names the field in its error; null counts as absent, as the
// official clients send it for unset optional fields.
#include "server/openai_request.hpp"
#include "common/json_brief.hpp"

#include "model/chat_template/openai_messages.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "runtime/grammar/json_schema.hpp"
#include "server/api_error.hpp"
#include "server/detail/json_string_state.hpp"
#include "server/reasoning.hpp"
#include "server/tool_calls.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <set>

namespace di::server {

namespace {

using json = request_json;

/// Typed, range-checked access to the top-level fields of a body.
class field_reader {
 public:
  explicit field_reader(const json& body) : body_(body) {}

  const json* find(const char* key) const {
    auto it = body_.find(key);
    return it == body_.end() || it->is_null() ? nullptr : &*it;
  }
  std::optional<bool> boolean(const char* key) const {
    const json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) bad_param(key, fmt::format("'{}' must be a boolean", key));
    return v->get<bool>();
  }
  std::optional<double> number(const char* key, double lo, double hi) const {
    const json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) bad_param(key, fmt::format("'{}' must be a number", key));
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi)
      bad_param(key, fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, json_brief(*v)));
    return x;
  }
  std::optional<std::int64_t> integer(const char* key, std::int64_t lo, std::int64_t hi) const {
    const json* v = find(key);
    if (v == nullptr) return std::nullopt;
    return integer_of(*v, key, lo, hi);
  }
  std::optional<std::string> string(const char* key) const {
    const json* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) bad_param(key, fmt::format("'{}' must be a string", key));
    return v->get<std::string>();
  }

  static std::int64_t integer_of(const json& v, const std::string& key, std::int64_t lo,
                                 std::int64_t hi) {
    const bool whole_float = v.is_number_float() && std::isfinite(v.get<double>()) &&
                             v.get<double>() == std::floor(v.get<double>());
    if (whole_float && std::fabs(v.get<double>()) < 9e15)
      return check_range(std::int64_t(v.get<double>()), key, lo, hi, v);
    // A whole number too large for an integer (1e20, 2^64) is out of range, not "not an integer".
    if (whole_float ||
        (v.is_number_unsigned() &&
         v.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<std::int64_t>::max())))
      bad_param(key, fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, json_brief(v)));
    if (!v.is_number_integer()) bad_param(key, fmt::format("'{}' must be an integer", key));
    return check_range(v.get<std::int64_t>(), key, lo, hi, v);
  }

 private:
  static std::int64_t check_range(std::int64_t x, const std::string& key, std::int64_t lo,
                                  std::int64_t hi, const json& v) {
    if (x < lo || x > hi)
      bad_param(key, fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, json_brief(v)));
    return x;
  }

  const json& body_;
};

constexpr std::int64_t max_token_budget = std::numeric_limits<std::int32_t>::max();

std::vector<std::int32_t> token_ids(const json& v, const std::string& key) {
  std::vector<std::int32_t> ids;
  for (const json& x : v)
    ids.push_back(std::int32_t(field_reader::integer_of(x, key, 0, max_token_budget)));
  return ids;
}

void read_stop(const field_reader& f, runtime::sampling_params& p, const server_settings& limits) {
  if (const json* v = f.find("stop")) {
    if (v->is_string()) {
      p.stop = {v->get<std::string>()};
    } else if (v->is_array()) {
      for (const json& s : *v) {
        if (!s.is_string()) bad_param("stop", "'stop' must be a string or a list of strings");
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      bad_param("stop", "'stop' must be a string or a list of strings");
    }
    if (int(p.stop.size()) > limits.max_stop)
      bad_param("stop", fmt::format("at most {} stop strings are accepted, got {}", limits.max_stop,
                                    p.stop.size()));
    for (const std::string& s : p.stop) {
      if (s.empty()) bad_param("stop", "stop strings must not be empty");
      if (int(s.size()) > limits.max_stop_bytes)
        bad_param("stop", fmt::format("a stop string has {} bytes; the limit is {}", s.size(),
                                      limits.max_stop_bytes));
    }
  }
  if (const json* v = f.find("stop_token_ids")) {
    if (!v->is_array()) bad_param("stop_token_ids", "'stop_token_ids' must be a list of token ids");
    if (int(v->size()) > 1024)
      bad_param("stop_token_ids", "at most 1024 stop_token_ids are accepted");
    p.stop_token_ids = token_ids(*v, "stop_token_ids");
  }
}

/// "; use response_format ..." with the format that asks for what a field named `key` asks for
/// (SGLang's top-level regex / ebnf / json_schema, a "schema" in the wrong place); "" for a key
/// that names no constraint.
std::string format_hint(const std::string& key) {
  if (key == "regex") return R"(; use response_format {"type": "regex", "regex": PATTERN})";
  if (key == "ebnf") return R"(; use response_format {"type": "ebnf", "ebnf": GRAMMAR})";
  if (key == "json_schema" || key == "schema")
    return R"(; use response_format {"type": "json_schema", "json_schema": {"name": NAME, )"
           R"("schema": SCHEMA}})";
  return "";
}

/// Refuses a member of response_format that its type does not take (a "regex" beside a
/// "json_schema", a "schema" under "json_object", a "json_schema" under "text"): it was
/// ignored, and the output was not what the client asked for. Null counts as absent.
void check_format_members(const json& v, const std::string& type,
                          std::initializer_list<const char*> takes) {
  for (const auto& [key, value] : v.items()) {
    if (key == "type" || value.is_null() ||
        std::any_of(takes.begin(), takes.end(), [&](const char* k) { return key == k; }))
      continue;
    std::string members = "'type'";
    for (const char* k : takes) members += fmt::format(", '{}'", k);
    bad_param("response_format." + key,
              fmt::format("'response_format.{}' does not belong to a response_format of type '{}' "
                          "(it takes {}){}",
                          key, type, members, format_hint(key)));
  }
}

/// The schema of a json_schema response_format, whose other members are checked as OpenAI
/// defines them: `name` a string and required (vLLM requires it too; OpenAI's pattern --
/// a-z, A-Z, 0-9, _ and -, at most 64 -- is not checked, as vLLM does not: the name changes no
/// output), `description` a string, `strict` a boolean (either way the output matches the
/// schema); null counts as absent, and any other member is refused rather than ignored. They
/// were not read at all: a missing name, "name": 5 and "strict": "yes" passed.
const json& read_json_schema(const json& format) {
  const auto it = format.find("json_schema");
  if (it == format.end() || !it->is_object())
    bad_param("response_format.json_schema",
              "'json_schema' must be an object with a 'name' string and a 'schema' object");
  const json& js = *it;
  for (const auto& [key, value] : js.items())
    if (!value.is_null() && key != "name" && key != "description" && key != "schema" &&
        key != "strict")
      bad_param("response_format.json_schema." + key,
                fmt::format("'response_format.json_schema.{}' is not a member of json_schema "
                            "(name, description, schema, strict)",
                            key));
  const auto member = [&](const char* key) -> const json* {
    const auto m = js.find(key);
    return m == js.end() || m->is_null() ? nullptr : &*m;
  };
  const json* name = member("name");
  if (name == nullptr || !name->is_string())
    bad_param("response_format.json_schema.name",
              name == nullptr
                  ? std::string("'response_format.json_schema.name' is required: a string naming "
                                "the format (a-z, A-Z, 0-9, _ and -, at most 64 characters)")
                  : fmt::format("'response_format.json_schema.name' must be a string, got {}",
                                json_brief(*name)));
  if (const json* d = member("description"); d != nullptr && !d->is_string())
    bad_param("response_format.json_schema.description",
              fmt::format("'response_format.json_schema.description' must be a string, got {}",
                          json_brief(*d)));
  if (const json* strict = member("strict"); strict != nullptr && !strict->is_boolean())
    bad_param("response_format.json_schema.strict",
              fmt::format("'response_format.json_schema.strict' must be true or false, got {}",
                          json_brief(*strict)));
  const json* schema = member("schema");
  if (schema == nullptr || !(schema->is_object() || schema->is_boolean()))
    bad_param("response_format.json_schema",
              "'json_schema' must be an object with a 'schema' object");
  return *schema;
}

/// The JSON formats' modifiers the server settings give (response_format.cpp's "+compact",
/// "+extra_keys", ...; the compiler's defaults need none).
std::string json_modifiers(const server_settings& limits) {
  std::string m = limits.json_whitespace == "any" ? "" : "+" + limits.json_whitespace;
  if (limits.json_schema_extra_keys == "allow") m += "+extra_keys";
  return m;
}

/// response_format → the inline spec of sampling_params::response_format ("" for text). The
/// grammar is compiled later, once (api_routes.cpp: a bad schema, regex or grammar is a 400).
std::string read_response_format(const field_reader& f, const server_settings& limits) {
  // server.json_whitespace and json_schema_extra_keys as the spec's modifiers
  const std::string ws = json_modifiers(limits);
  const json* v = f.find("response_format");
  if (v == nullptr) return "";
  if (!v->is_object() || !v->contains("type") || !(*v)["type"].is_string())
    bad_param("response_format", "'response_format' must be an object with a string 'type'");
  const std::string type = (*v)["type"].get<std::string>();
  std::string spec;
  if (type == "text") {
    check_format_members(*v, type, {});
  } else if (type == "json_object") {
    check_format_members(*v, type, {});
    spec = "json_object" + ws;
  } else if (type == "json_schema") {
    check_format_members(*v, type, {"json_schema"});
    spec = "json_schema" + ws + ":" + read_json_schema(*v).dump();
  } else if (type == "regex" || type == "ebnf") {
    check_format_members(*v, type, {type == "regex" ? "regex" : "ebnf"});
    auto it = v->find(type);
    if (it == v->end() || !it->is_string())
      bad_param("response_format." + type, fmt::format("'{}' must be a string", type));
    spec = type + ":" + it->get<std::string>();
  } else {
    bad_param("response_format.type",
              fmt::format("unknown response_format type '{}' (text, json_object, "
                          "json_schema, regex, ebnf)",
                          type));
  }
  return spec;
}

void reject_unsupported(const field_reader& f) {
  if (const json* v = f.find("logit_bias"); v != nullptr && !(v->is_object() && v->empty()))
    bad_param("logit_bias", "'logit_bias' is not supported");
  if (const json* v = f.find("suffix");
      v != nullptr && !(v->is_string() && v->get<std::string>().empty()))
    bad_param("suffix", "'suffix' is not supported");
  // vLLM's extensions that would change the output: refused rather than silently ignored
  // (an empty list, false or 0 asks for nothing and passes).
  auto asks = [](const json& v) {
    return !(v.is_boolean() && !v.get<bool>()) && !((v.is_array() || v.is_object()) && v.empty()) &&
           !(v.is_number() && v.get<double>() == 0);
  };
  // guided_json's empty object is a schema too (any JSON value), not an empty request.
  for (const char* key :
       {"guided_json", "guided_regex", "guided_grammar", "guided_choice", "structured_outputs"})
    if (const json* v = f.find(key);
        v != nullptr && (asks(*v) || (v->is_object() && std::string_view(key) == "guided_json")))
      bad_param(key, fmt::format("'{}' is not supported; use response_format (json_schema, "
                                 "regex or ebnf)",
                                 key));
  if (const json* v = f.find("guided_whitespace_pattern"); v != nullptr && asks(*v))
    bad_param("guided_whitespace_pattern",
              "'guided_whitespace_pattern' is not supported (the server's json_whitespace setting, "
              "any, compact or pretty, says which whitespace a JSON response_format allows); use "
              "response_format with a regex or ebnf grammar that spells out the whitespace");
  // SGLang's top-level constraints, likewise.
  for (const char* key : {"regex", "ebnf", "json_schema"})
    if (const json* v = f.find(key); v != nullptr && asks(*v))
      bad_param(key,
                fmt::format("'{}' is not supported at the top level{}", key, format_hint(key)));
  for (const char* key : {"allowed_token_ids", "bad_words", "prompt_logprobs",
                          "truncate_prompt_tokens", "use_beam_search"})
    if (const json* v = f.find(key); v != nullptr && asks(*v))
      bad_param(key, fmt::format("'{}' is not supported", key));
  if (const json* v = f.find("add_special_tokens"); v != nullptr && !v->is_boolean())
    bad_param("add_special_tokens", "'add_special_tokens' must be a boolean");
}

/// Fields that change nothing here, as OpenAI and vLLM define them, are still checked (they were
/// taken with any type: "store": "x"); fields with a value other than their default that this
/// server cannot honour are refused (they were ignored).
void read_accepted_defaults(const field_reader& f) {
  f.boolean("store");
  if (const json* v = f.find("metadata")) {
    if (!v->is_object()) bad_param("metadata", "'metadata' must be an object of strings");
    for (const auto& [key, value] : v->items())
      if (!value.is_string())
        bad_param("metadata", fmt::format("'metadata.{}' must be a string", key));
  }
  if (f.integer("priority", std::numeric_limits<std::int64_t>::min(),
                std::numeric_limits<std::int64_t>::max())
          .value_or(0) != 0)
    bad_param("priority",
              "'priority' other than 0 is not supported (requests are served first come, first "
              "served; vLLM too refuses it without --scheduling-policy priority)");
  if (f.number("length_penalty", -std::numeric_limits<double>::max(),
               std::numeric_limits<double>::max())
          .value_or(1.0) != 1.0)
    bad_param("length_penalty",
              "'length_penalty' other than 1 is not supported (it weighs beam search, which is "
              "not supported either)");
  if (f.boolean("spaces_between_special_tokens") == false)
    bad_param("spaces_between_special_tokens",
              "'spaces_between_special_tokens': false is not supported (the byte-level tokenizer "
              "writes each token's own text, with no space added between special tokens)");
  if (f.find("prompt_embeds") != nullptr)
    bad_param("prompt_embeds",
              "'prompt_embeds' is not supported; send the prompt as text or token ids");
}

/// The fields both endpoints share.
void read_common(const field_reader& f, generation_request& r, const server_settings& limits) {
  r.model = f.string("model").value_or("");
  r.n = int(f.integer("n", 1, limits.max_n).value_or(1));
  if (auto best_of = f.integer("best_of", 1, limits.max_n); best_of && *best_of != r.n)
    bad_param("best_of", "'best_of' other than n is not supported");
  r.stream = f.boolean("stream").value_or(false);
  if (const json* so = f.find("stream_options")) {
    if (!so->is_object()) bad_param("stream_options", "'stream_options' must be an object");
    if (!r.stream)
      bad_param("stream_options", "'stream_options' is only allowed with 'stream': true");
    field_reader sof(*so);
    if (auto iu = sof.find("include_usage")) {
      if (!iu->is_boolean())
        bad_param("stream_options.include_usage", "'include_usage' must be a boolean");
      r.include_usage = iu->get<bool>();
    }
    if (auto cu = sof.find("continuous_usage_stats"); cu != nullptr && *cu != false)
      bad_param("stream_options.continuous_usage_stats",
                "'continuous_usage_stats' is not supported (include_usage gives the usage once, "
                "at the end)");
  }
  runtime::sampling_params& p = r.params;
  p.temperature = f.number("temperature", 0, 2).value_or(1.0);
  if (const json* v = f.find("top_p");
      v != nullptr && v->is_number() && !(v->get<double>() > 0 && v->get<double>() <= 1))
    bad_param("top_p", fmt::format("'top_p' must be in (0, 1], got {}", json_brief(*v)));
  p.top_p = f.number("top_p", 0, 1).value_or(1.0);
  p.top_k = int(f.integer("top_k", -1, 1 << 30).value_or(0));
  p.min_p = f.number("min_p", 0, 1).value_or(0.0);
  p.presence_penalty = f.number("presence_penalty", -2, 2).value_or(0.0);
  p.frequency_penalty = f.number("frequency_penalty", -2, 2).value_or(0.0);
  p.repetition_penalty = f.number("repetition_penalty", 1e-6, 100).value_or(1.0);
  if (auto seed = f.integer("seed", std::numeric_limits<std::int64_t>::min(),
                            std::numeric_limits<std::int64_t>::max()))
    p.seed = std::uint64_t(*seed);
  p.ignore_eos = f.boolean("ignore_eos").value_or(false);
  p.min_tokens = int(f.integer("min_tokens", 0, max_token_budget).value_or(0));
  p.skip_special_tokens = f.boolean("skip_special_tokens").value_or(true);
  p.include_stop_str_in_output = f.boolean("include_stop_str_in_output").value_or(false);
  r.user = f.string("user").value_or("");
  r.return_token_ids = f.boolean("return_token_ids").value_or(false);
  r.return_tokens_as_token_ids = f.boolean("return_tokens_as_token_ids").value_or(false);
  p.cache_salt = f.string("cache_salt").value_or("");
  if (f.find("cache_salt") != nullptr && p.cache_salt.empty())
    bad_param("cache_salt", "'cache_salt' must be a non-empty string (vLLM's rule)");
  read_accepted_defaults(f);
  read_stop(f, p, limits);
  p.response_format = read_response_format(f, limits);
  reject_unsupported(f);
}

std::vector<prompt_input> read_prompts(const json* v) {
  if (v == nullptr) bad_param("prompt", "'prompt' is required");
  const char* shape =
      "'prompt' must be a string, a list of strings, a list of token ids or a list of lists of "
      "token ids";
  if (v->is_string()) return {{.text = v->get<std::string>()}};
  if (!v->is_array() || v->empty()) bad_param("prompt", shape);
  std::vector<prompt_input> out;
  if ((*v)[0].is_number()) return {{.ids = token_ids(*v, "prompt")}};
  for (const json& x : *v) {
    if (x.is_string())
      out.push_back({.text = x.get<std::string>()});
    else if (x.is_array() && !x.empty())
      out.push_back({.ids = token_ids(x, "prompt")});
    else
      bad_param("prompt", shape);
  }
  return out;
}

/// The request's messages as the chat template sees them (model/chat_template/openai_messages.hpp).
request_json read_messages(const json* v) {
  if (v == nullptr) bad_param("messages", "'messages' is required");
  return openai_chat_messages(
      *v, [](const std::string& param, const std::string& why) { bad_param(param, why); });
}

/// A tool's members as OpenAI defines them -- `type` and `function`; the function's `name`,
/// `description` (a string), `parameters` and `strict` (a boolean) -- null counting as absent:
/// any other is refused rather than ignored. They were not read: a misspelt "parameter" left
/// the function without a schema, so tool_choice "required" wrote its calls with `{}` as
/// arguments, and "description": 5 or "strict": "yes" passed.
void check_tool_members(const json& tool, const std::string& at) {
  for (const auto& [key, value] : tool.items())
    if (!value.is_null() && key != "type" && key != "function")
      bad_param(at + "." + key,
                fmt::format("'{}.{}' is not a member of a tool (type, function)", at, key));
  const json& fn = tool["function"];
  for (const auto& [key, value] : fn.items())
    if (!value.is_null() && key != "name" && key != "description" && key != "parameters" &&
        key != "strict")
      bad_param(at + ".function." + key,
                fmt::format("'{}.function.{}' is not a member of a function (name, description, "
                            "parameters, strict)",
                            at, key));
  if (const auto d = fn.find("description"); d != fn.end() && !d->is_null() && !d->is_string())
    bad_param(
        at + ".function.description",
        fmt::format("'{}.function.description' must be a string, got {}", at, json_brief(*d)));
  if (const auto st = fn.find("strict"); st != fn.end() && !st->is_null() && !st->is_boolean())
    bad_param(
        at + ".function.strict",
        fmt::format("'{}.function.strict' must be true or false, got {}", at, json_brief(*st)));
}

/// `tools` (for the template) and how the output may call them: tool_choice "auto" (the
/// default with tools: calls are parsed), "none" (the answer is text), "required" or
/// {"type": "function", "function": {"name": N}} (the output is constrained to calls, of
/// function N for the latter: a grammar in params.response_format), and parallel_tool_calls.
void read_tools(const field_reader& f, generation_request& r, const server_settings& limits) {
  if (const json* tools = f.find("tools")) {
    if (!tools->is_array()) bad_param("tools", "'tools' must be a list");
    // Two functions of one name are refused, as OpenAI refuses them: a call names its function
    // by name alone, so which of the two it meant could not be told (tool_choice naming it
    // constrained the output to either's parameters).
    std::set<std::string> names;
    for (std::size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      const std::string at = fmt::format("tools[{}]", i);
      if (!t.is_object() || !t.contains("type") || t["type"] != "function")
        bad_param(at, fmt::format("'{}' must be an object with \"type\": \"function\"", at));
      if (!t.contains("function") || !t["function"].is_object() ||
          !t["function"].contains("name") || !t["function"]["name"].is_string())
        bad_param(at + ".function",
                  fmt::format("'{}.function' must be an object with a string 'name'", at));
      if (const std::string why =
              unreadable_tool_name(t["function"]["name"].get_ref<const std::string&>());
          !why.empty())
        bad_param(at + ".function.name",
                  fmt::format("'{}.function.name' {}: a call of the function could not be read "
                              "back from the output (use letters, digits, _ and -, as OpenAI "
                              "does)",
                              at, why));
      if (t["function"].contains("parameters") && !t["function"]["parameters"].is_object())
        bad_param(at + ".function.parameters",
                  fmt::format("'{}.function.parameters' must be a JSON Schema object", at));
      check_tool_members(t, at);
      if (const std::string& name = t["function"]["name"].get_ref<const std::string&>();
          !names.insert(name).second)
        bad_param(at + ".function.name",
                  fmt::format("'{}.function.name': the function '{}' is defined twice in "
                              "'tools'; names must be unique",
                              at, name));
    }
    r.tools = *tools;
  }
  r.parallel_tool_calls = f.boolean("parallel_tool_calls").value_or(true);
  const bool has_tools = r.tools.is_array() && !r.tools.empty();
  std::string named;
  std::string choice = has_tools ? "auto" : "none";
  if (const json* v = f.find("tool_choice")) {
    const char* shape =
        "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
        "\"function\": {\"name\": NAME}}";
    if (v->is_string()) {
      choice = v->get<std::string>();
      if (choice != "none" && choice != "auto" && choice != "required")
        bad_param("tool_choice", shape);
    } else if (v->is_object() && v->contains("type") && (*v)["type"] == "function" &&
               v->contains("function") && (*v)["function"].is_object() &&
               (*v)["function"].contains("name") && (*v)["function"]["name"].is_string()) {
      choice = "function";
      named = (*v)["function"]["name"].get<std::string>();
    } else {
      bad_param("tool_choice", shape);
    }
  }
  if (choice == "none") return;
  if (!has_tools) {
    if (choice == "auto") return;  // nothing to call: the answer is text
    bad_param("tool_choice", fmt::format("tool_choice '{}' needs a non-empty 'tools' list",
                                         named.empty() ? choice : named));
  }
  r.parses_tool_calls = true;
  if (choice == "auto") return;
  bool found = named.empty();
  for (const json& t : r.tools) {
    const json& fn = t["function"];
    if (!named.empty() && fn["name"] != named) continue;
    found = true;
    if (const auto p = fn.find("parameters");
        p != fn.end() && p->contains("type") && (*p)["type"] != "object")
      bad_param("tools", fmt::format("tool_choice: the parameters of '{}' must describe an "
                                     "object (\"type\": \"object\"), as a call's arguments are one",
                                     fn["name"].get<std::string>()));
  }
  if (!found)
    bad_param("tool_choice",
              fmt::format("tool_choice names the function '{}', which is not in 'tools'", named));
  if (f.find("response_format") != nullptr && !r.params.response_format.empty())
    bad_param("response_format",
              fmt::format("'response_format' cannot be combined with tool_choice '{}' (the output "
                          "is constrained to tool calls)",
                          named.empty() ? choice : named));
  r.forces_tool_calls = true;
  r.params.response_format =
      tool_call_grammar_spec(r.tools, named, r.parallel_tool_calls, json_modifiers(limits));
}

}  // namespace

namespace {

/// An open container of the body scan: an object's member count and current key, or an
/// array's current index.
struct open_container {
  bool object = false;
  bool expect_key = false;  ///< an object's next string is a key
  std::int64_t members = 0;
  std::int64_t index = 0;
  std::string key;  ///< raw (escapes as written), at most 40 bytes
};

/// The path of the value inside open[0..n) ("messages[0].content"); past ~160 bytes its first
/// and last steps around " ... ".
std::string body_path(const std::vector<open_container>& open, std::size_t n) {
  std::vector<std::string> steps;
  std::size_t size = 0;
  for (std::size_t i = 0; i < n; ++i) {
    steps.push_back(open[i].object ? (i ? "." : "") + open[i].key
                                   : fmt::format("[{}]", open[i].index));
    size += steps.back().size();
  }
  std::string head, tail;
  std::size_t first = 0, last = steps.size();
  while (first < last && (size <= 160 || head.size() + steps[first].size() <= 100))
    head += steps[first++];
  while (last > first && tail.size() + steps[last - 1].size() <= 50) tail = steps[--last] + tail;
  return first == last ? head + tail : head + " ... " + tail;
}

/// Whether open[0..3) is response_format.json_schema.schema: the schema below it may nest
/// deeper than the rest of a body.
bool in_response_schema(const std::vector<open_container>& open) {
  return open.size() > 3 && open[0].object && open[0].key == "response_format" && open[1].object &&
         open[1].key == "json_schema" && open[2].object && open[2].key == "schema";
}

}  // namespace

body_shape measure_body(std::string_view body, int max_depth, int max_schema_depth) {
  body_shape shape;
  std::vector<open_container> open;  // outermost first
  detail::json_string_state strings;
  bool in_key = false;
  for (char c : body) {
    const bool was_in_string = strings.in_string;
    if (!strings.is_structural(c)) {
      if (in_key) {
        if (!strings.in_string)
          in_key = false;  // its closing quote
        else if (open.back().key.size() < 40)
          open.back().key += c;
      } else if (!was_in_string && !open.empty() && open.back().object && open.back().expect_key) {
        in_key = true;  // a key's opening quote
        open.back().key.clear();
        open.back().expect_key = false;
      }
      continue;
    }
    if (c == '[' || c == '{') {
      open.push_back({c == '{', c == '{'});
      const int depth = int(open.size());
      shape.depth = std::max(shape.depth, depth);
      const bool schema = max_schema_depth > 0 && in_response_schema(open);
      const int limit = schema ? max_schema_depth : max_depth;
      if ((schema ? depth - 3 : depth) > limit) {
        shape.too_deep = true;
        shape.depth_limit = limit;
        shape.too_deep_at = body_path(open, open.size() - 1);
        shape.too_deep_field = schema                ? "response_format.json_schema.schema"
                               : open.front().object ? open.front().key
                                                     : "";
        return shape;
      }
    } else if (c == ':' && !open.empty() && open.back().object) {
      ++open.back().members;
    } else if (c == ',' && !open.empty()) {
      if (open.back().object)
        open.back().expect_key = true;
      else
        ++open.back().index;
    } else if ((c == ']' || c == '}') && !open.empty()) {
      const double members = double(open.back().members);
      shape.member_pairs += members * members;
      open.pop_back();
    }
  }
  return shape;
}

request_json parse_body(std::string_view body, const server_settings& limits) {
  const body_shape shape = measure_body(body, limits.max_json_depth, limits.max_schema_depth);
  if (shape.too_deep) {
    const bool schema = shape.too_deep_field == "response_format.json_schema.schema";
    const std::string where =
        shape.too_deep_at.empty() ? "" : fmt::format(" (at {})", shape.too_deep_at);
    throw api_error(
        400,
        schema ? fmt::format("the request is nested too deeply: the schema "
                             "'response_format.json_schema.schema' nests deeper than {} levels{} "
                             "(server.max_schema_depth)",
                             shape.depth_limit, where)
        : shape.too_deep_field.empty()
            ? fmt::format("the JSON body is nested deeper than {} levels (server.max_json_depth)",
                          shape.depth_limit)
            : fmt::format("the request is nested too deeply: the JSON body is nested deeper than "
                          "{} levels in '{}'{} (server.max_json_depth; a "
                          "response_format.json_schema.schema may nest {} levels below itself)",
                          shape.depth_limit, shape.too_deep_field, where, limits.max_schema_depth),
        shape.too_deep_field);
  }
  if (shape.member_pairs > max_body_member_pairs)
    throw api_error(400,
                    "the JSON body's objects have too many members (one object may have "
                    "about 10,000; many large objects together fewer)");
  grammar::exact_json_result parsed = grammar::parse_json_exact(body);
  json& j = parsed.value;
  if (j.is_discarded())
    throw api_error(400, fmt::format("the body is not valid JSON: {}", parsed.error));
  if (!j.is_object()) throw api_error(400, "the body must be a JSON object");
  // A schema's numbers must survive the parse: rounded, they would let outputs break it. (A
  // rounded sampling value elsewhere is only a rounded value.)
  if (parsed.inexact && parsed.inexact->path.rfind("response_format", 0) == 0)
    throw api_error(400, grammar::inexact_schema_number(*parsed.inexact), "response_format");
  return std::move(j);
}

/// What else reaches the chat template. A template sent with the request is refused (as vLLM
/// does unless started with --trust-request-chat-template): a top-level `chat_template` and one
/// inside `chat_template_kwargs` were ignored, and the model's own template answered. vLLM's
/// `documents` (a list of objects) are passed to the template as the variable `documents`.
static void read_template_inputs(const field_reader& f, generation_request& r) {
  const char* refused =
      "a chat template sent with the request is not accepted; the model's own template renders "
      "the messages";
  if (f.find("chat_template") != nullptr)
    bad_param("chat_template", fmt::format("'chat_template': {}", refused));
  if (const auto kw = r.chat_kwargs.find("chat_template");
      kw != r.chat_kwargs.end() && !kw->is_null())
    bad_param("chat_template_kwargs.chat_template",
              fmt::format("'chat_template_kwargs.chat_template': {}", refused));
  if (const json* docs = f.find("documents")) {
    if (!docs->is_array() ||
        !std::all_of(docs->begin(), docs->end(), [](const json& d) { return d.is_object(); }))
      bad_param("documents", "'documents' must be a list of objects");
    r.documents = *docs;
  }
}

/// Whether the output is split into reasoning and content. A grammar -- a response_format, or
/// tool_choice "required" / a named function -- then constrains only the answer after
/// `</think>`, as vLLM's does: the reasoning before it runs free.
static void read_reasoning(generation_request& r, const server_settings& limits) {
  const auto kind = reasoning_parser_of(limits.reasoning_parser);
  r.splits_reasoning = kind && splits_reasoning(*kind, r.chat_kwargs);
  if (r.splits_reasoning && !r.params.response_format.empty() && !grammar_over_reasoning_allowed())
    r.params.response_format = after_reasoning_spec(r.params.response_format);
}

/// OpenAI's chat fields that would change the answer and that this server refuses (never
/// ignores), as reject_unsupported does for both endpoints: the deprecated function calling
/// (`functions`, `function_call`; `tools` does it) and audio output
/// (`audio`, `modalities` beyond "text"). They were ignored: the model never saw the
/// functions, and the reply had no audio. What asks for nothing passes (an empty list,
/// `function_call` "none" or "auto", `modalities` ["text"]).
static void reject_unsupported_chat(const field_reader& f) {
  if (const json* v = f.find("functions"); v != nullptr && !(v->is_array() && v->empty()))
    bad_param("functions",
              "'functions' (OpenAI's deprecated function calling) is not supported; use 'tools' "
              "with {\"type\": \"function\", \"function\": {...}} for each");
  if (const json* v = f.find("function_call");
      v != nullptr && !(v->is_string() && (*v == "none" || *v == "auto")))
    bad_param("function_call",
              "'function_call' other than \"none\" or \"auto\" is not supported; use "
              "'tool_choice' with 'tools'");
  if (const json* v = f.find("modalities")) {
    if (!v->is_array()) bad_param("modalities", "'modalities' must be a list");
    for (const json& m : *v)
      if (m != "text")
        bad_param("modalities",
                  fmt::format("only the text modality is supported, got {}", json_brief(m)));
  }
  if (f.find("audio") != nullptr)
    bad_param("audio", "'audio' (audio output) is not supported; the answer is text");
}

/// max_tokens and max_completion_tokens (either endpoint; the second wins where both are set,
/// as in vLLM): both are checked, so a bad one beside a good one is a 400, not ignored -- and
/// completions took max_completion_tokens without reading it at all.
static void read_max_tokens(field_reader& f, generation_request& r) {
  const auto t = f.integer("max_tokens", 1, max_token_budget);
  if (auto m = f.integer("max_completion_tokens", 1, max_token_budget)) {
    r.params.max_tokens = int(*m);
    r.max_tokens_name = "max_completion_tokens";
  } else if (t) {
    r.params.max_tokens = int(*t);
  }
}

generation_request parse_completion_request(const json& body, const server_settings& limits) {
  field_reader f(body);
  generation_request r{.kind = api_kind::completion};
  read_common(f, r, limits);
  r.prompts = read_prompts(f.find("prompt"));
  if (r.prompts.size() > 64) bad_param("prompt", "at most 64 prompts are accepted in one request");
  // Every choice of the request goes to one group together: past what a group admits at once
  // they could never all start (each try was a 429 "retry later").
  if (const std::int64_t choices = std::int64_t(r.prompts.size()) * r.n;
      choices > limits.max_choices)
    bad_param(r.prompts.size() > 1 ? "prompt" : "n",
              fmt::format("{} prompt(s) x n = {} is {} choices; this server starts at most {} "
                          "requests of one group at once (scheduler.max_num_running + "
                          "max_num_queued, router.max_live_requests)",
                          r.prompts.size(), r.n, choices, limits.max_choices));
  read_max_tokens(f, r);
  if (!r.params.max_tokens) r.params.max_tokens = 16;  // OpenAI's default for completions
  r.echo = f.boolean("echo").value_or(false);
  if (auto lp = f.integer("logprobs", 0, limits.max_top_logprobs)) r.logprobs = int(*lp);
  if (f.boolean("add_special_tokens") == false)
    bad_param("add_special_tokens",
              "'add_special_tokens': false is not supported (text prompts start with BOS; pass "
              "token ids to choose every token)");
  return r;
}

generation_request parse_chat_request(const json& body, const server_settings& limits) {
  field_reader f(body);
  generation_request r{.kind = api_kind::chat};
  read_common(f, r, limits);
  r.messages = read_messages(f.find("messages"));
  read_max_tokens(f, r);
  const bool logprobs = f.boolean("logprobs").value_or(false);
  auto top = f.integer("top_logprobs", 0, limits.max_top_logprobs);
  if (top && !logprobs) bad_param("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  if (logprobs) r.logprobs = int(top.value_or(0));
  if (const json* kw = f.find("chat_template_kwargs")) {
    if (!kw->is_object())
      bad_param("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    r.chat_kwargs = *kw;
  }
  read_tools(f, r, limits);
  read_reasoning(r, limits);
  if (f.boolean("echo") == true) bad_param("echo", "'echo' is not supported for chat completions");
  if (f.boolean("add_special_tokens") == true)
    bad_param("add_special_tokens",
              "'add_special_tokens': true is not supported for chat (the template writes BOS)");
  r.add_generation_prompt = f.boolean("add_generation_prompt").value_or(true);
  r.continue_final_message = f.boolean("continue_final_message").value_or(false);
  if (r.continue_final_message && r.add_generation_prompt)
    bad_param("continue_final_message",
              "'continue_final_message' needs 'add_generation_prompt': false (the reply continues "
              "the last message instead of starting a new one)");
  read_template_inputs(f, r);
  reject_unsupported_chat(f);
  return r;
}

void check_prompt_ids(const generation_request& r, const tok::tokenizer& tok) {
  const auto vocab = std::int64_t(tok.vocab_size());
  for (std::size_t p = 0; p < r.prompts.size(); ++p) {
    const std::vector<std::int32_t>& ids = r.prompts[p].ids;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (tok.id_to_token(ids[i])) continue;
      const std::string where = r.prompts.size() > 1 ? fmt::format("prompt {}, position {}", p, i)
                                                     : fmt::format("position {}", i);
      if (ids[i] < 0 || ids[i] >= vocab)  // as the router words it
        bad_param("prompt", fmt::format("prompt token {} ({}) is outside the vocabulary [0, {})",
                                        ids[i], where, vocab));
      bad_param("prompt",
                fmt::format("prompt token {} ({}) is not in the vocabulary: the tokenizer has no "
                            "token with that id (a gap in its ids)",
                            ids[i], where));
    }
  }
}

}  // namespace di::server
