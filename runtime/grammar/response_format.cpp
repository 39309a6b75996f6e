// Response formats: CLI parsing, dispatch to the front ends, and the compiled-grammar cache.
#include "runtime/grammar/response_format.hpp"

#include "common/error.hpp"
#include "common/mapped_file.hpp"
#include "runtime/grammar/compile_interrupt.hpp"
#include "runtime/grammar/ebnf.hpp"
#include "runtime/grammar/free_text_prefix.hpp"
#include "runtime/grammar/regex.hpp"
#include "runtime/grammar/tool_call_grammar.hpp"

#include <optional>
#include <vector>

#if defined(__linux__)
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace di::grammar {

namespace {

/// "kind[+modifier...]" before the colon: JSON whitespace (compact, pretty, any), lenient and
/// extra_keys.
/// `cli`: the kinds of the CLI syntax only.
response_format parse_kind(const std::string& head, bool cli) {
  std::vector<std::string> parts;
  std::size_t from = 0;
  for (std::size_t plus; (plus = head.find('+', from)) != std::string::npos; from = plus + 1)
    parts.push_back(head.substr(from, plus - from));
  parts.push_back(head.substr(from));
  response_format f;
  const std::string& kind = parts[0];
  const char* expected =
      cli ? k_cli_response_formats : "json_schema, json_object, regex, ebnf or tool_calls";
  if (kind == "json_schema")
    f.kind = format_kind::json_schema;
  else if (kind == "json_object")
    f.kind = format_kind::json_object;
  else if (kind == "regex")
    f.kind = format_kind::regex;
  else if (kind == "ebnf")
    f.kind = format_kind::ebnf;
  else if (kind == "tool_calls" && !cli)
    f.kind = format_kind::tool_calls;
  else
    DI_FAIL("unknown response format '{}' (expected {})", kind, expected);
  const bool json = f.kind == format_kind::json_schema || f.kind == format_kind::json_object ||
                    f.kind == format_kind::tool_calls;
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const std::string& m = parts[i];
    DI_CHECK(json, "response format '{}': modifier '+{}' applies to JSON formats only", kind, m);
    if (m == "compact") f.schema.whitespace = json_whitespace::compact;
    else if (m == "pretty") f.schema.whitespace = json_whitespace::pretty;
    else if (m == "any") f.schema.whitespace = json_whitespace::any;
    else if (m == "lenient") f.schema.lenient = true;
    else if (m == "extra_keys")
      f.schema.extra_keys = json_extra_keys::allow;
    else
      DI_FAIL(
          "response format '{}': unknown modifier '+{}' (compact, pretty, any, lenient, "
          "extra_keys)",
          kind, m);
  }
  return f;
}

response_format parse_spec(const std::string& spec, bool files);

/// "after:N:MARKER" + the format's own spec.
response_format parse_after(const std::string& spec, bool files) {
  const std::size_t colon = spec.find(':', 6);
  std::size_t n = 0;
  DI_CHECK(colon != std::string::npos && colon > 6 &&
               spec.find_first_not_of("0123456789", 6) == colon && colon - 6 <= 6 &&
               (n = std::stoul(spec.substr(6, colon - 6))) > 0 && spec.size() - colon - 1 >= n,
           "response format 'after': expected after:N:MARKER followed by a format, N the "
           "marker's length in bytes");
  response_format f = parse_spec(spec.substr(colon + 1 + n), files);
  DI_CHECK(f.after_text.empty(), "response format 'after': a format after one 'after' only");
  f.after_text = spec.substr(colon + 1, n);
  return f;
}

/// `files`: the CLI syntax (KIND:FILE, read here), else the inline one.
response_format parse_spec(const std::string& spec, bool files) {
  if (!files && spec.starts_with("after:")) return parse_after(spec, files);
  const auto colon = spec.find(':');
  response_format f = parse_kind(spec.substr(0, colon), files);
  const bool has_arg = colon != std::string::npos;
  std::string arg = has_arg ? spec.substr(colon + 1) : "";
  if (f.kind == format_kind::json_object) {
    DI_CHECK(!has_arg, "response format 'json_object' takes no argument");
    return f;
  }
  DI_CHECK(has_arg && (f.kind == format_kind::regex || !arg.empty()),
           "response format '{}' needs {}", spec.substr(0, colon),
           f.kind == format_kind::regex ? "a pattern (regex:PATTERN)" : files ? "a file (KIND:FILE)" : "its text");
  f.text = files && f.kind != format_kind::regex ? read_text_file(arg) : arg;
  return f;
}

std::string modifiers(const response_format& f) {
  if (f.kind != format_kind::json_schema && f.kind != format_kind::json_object &&
      f.kind != format_kind::tool_calls)
    return "";
  std::string m;
  if (f.schema.whitespace == json_whitespace::compact) m += "+compact";
  if (f.schema.whitespace == json_whitespace::pretty) m += "+pretty";
  if (f.schema.lenient) m += "+lenient";
  if (f.schema.extra_keys == json_extra_keys::allow) m += "+extra_keys";
  return m;
}

/// The grammar IR of `f` (no after_text), with a JSON Schema's warnings.
json_schema_result grammar_of(const response_format& f) {
  switch (f.kind) {
    case format_kind::json_schema:
      return compile_json_schema_text(f.text, f.schema);
    case format_kind::json_object:
      return {json_object_grammar(f.schema), {}};
    case format_kind::regex:
      return {regex_grammar(f.text), {}};
    case format_kind::ebnf:
      return {parse_grammar_text(f.text), {}};
    case format_kind::tool_calls:
      return {tool_calls_grammar_text(f.text, f.schema), {}};
  }
  DI_FAIL("unknown response format kind");
}

}  // namespace

response_format parse_response_format(const std::string& spec) { return parse_spec(spec, true); }

response_format parse_inline_response_format(const std::string& spec) { return parse_spec(spec, false); }

std::string to_inline_spec(const response_format& f) {
  if (!f.after_text.empty()) {
    response_format inner = f;
    inner.after_text.clear();
    return "after:" + std::to_string(f.after_text.size()) + ":" + f.after_text +
           to_inline_spec(inner);
  }
  switch (f.kind) {
    case format_kind::json_schema: return "json_schema" + modifiers(f) + ":" + f.text;
    case format_kind::json_object: return "json_object" + modifiers(f);
    case format_kind::regex: return "regex:" + f.text;
    case format_kind::ebnf: return "ebnf:" + f.text;
    case format_kind::tool_calls: return "tool_calls" + modifiers(f) + ":" + f.text;
  }
  DI_FAIL("unknown response format kind");
}

std::shared_ptr<const compiled_grammar> compile_response_format(const response_format& f,
                                                                const compile_options& o) {
  return compile_response_format_with_warnings(f, o).grammar;
}

compiled_format compile_response_format_with_warnings(const response_format& f,
                                                      const compile_options& o) {
  // One scope for o.cancel, over the front end and the automaton both: the compile below is
  // passed none (it would install a second for the same cancel).
  std::optional<interrupt_scope> cancellable;
  if (o.cancel != nullptr) cancellable.emplace(*o.cancel);
  compile_options inner = o;
  inner.cancel = nullptr;
  response_format own = f;  // the format itself, without the free text before it
  own.after_text.clear();
  try {
    json_schema_result ir = grammar_of(own);
    if (f.after_text.empty())
      return {compiled_grammar::compile(ir.g, inner), std::move(ir.warnings)};
    // One compile, of the free text and the answer together. The answer's own language is
    // checked first (an analysis, nothing built): a format no answer satisfies is refused as it
    // is without the free text (which alone would still match), with its message.
    if (!o.allow_empty_language) check_derives_some_string(ir.g);
    return {compiled_grammar::compile(free_text_then(ir.g, f.after_text), inner),
            std::move(ir.warnings)};
  } catch (const empty_language_error&) {
    if (f.kind == format_kind::json_schema)
      DI_FAIL(
          "the JSON Schema allows no value at all, so no output could satisfy it (a "
          "contradiction such as minimum above maximum, minItems above maxItems, an empty "
          "enum, a required property whose schema is false, \"not\": {{}} or the schema "
          "false)");
    if (f.kind == format_kind::tool_calls)
      DI_FAIL("no tool's parameters schema allows any value, so no call could satisfy it");
    throw;
  }
}

namespace {
/// The cache key of `f` over `v`. The vocabulary's address is part of it: an entry is only
/// valid for the vocabulary it was built with (the cache holds no reference to it, callers
/// keep it alive).
std::string cache_key(const response_format& f, const token_vocabulary* v) {
  return std::to_string(int(f.kind)) + ":" + std::to_string(reinterpret_cast<std::uintptr_t>(v)) +
         ":" + std::to_string(int(f.schema.whitespace)) + std::to_string(f.schema.lenient) +
         std::to_string(f.schema.format_assertion) + std::to_string(int(f.schema.use)) +
         std::to_string(int(f.schema.extra_keys)) + ":" + std::to_string(f.after_text.size()) +
         ":" + f.after_text + f.text;
}
}  // namespace

std::shared_ptr<const token_grammar> grammar_cache::find(
    const response_format& f, const std::shared_ptr<const token_vocabulary>& v) {
  const std::string key = cache_key(f, v.get());
  std::lock_guard lock(mutex_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  recent_.splice(recent_.begin(), recent_, it->second.use);
  return it->second.grammar;
}

std::shared_ptr<const token_grammar> grammar_cache::get(
    const response_format& f, const std::shared_ptr<const token_vocabulary>& v) {
  return get_with_warnings(f, v).grammar;
}

grammar_cache::grammar_with_warnings grammar_cache::get_with_warnings(
    const response_format& f, const std::shared_ptr<const token_vocabulary>& v) {
  std::string key = cache_key(f, v.get());
  std::shared_ptr<token_class_cache> classes;
  {
    std::lock_guard lock(mutex_);
    if (auto it = entries_.find(key); it != entries_.end()) {
      recent_.splice(recent_.begin(), recent_, it->second.use);
      return {it->second.grammar, it->second.warnings};
    }
    auto& c = classes_[v.get()];
    if (!c) c = std::make_shared<token_class_cache>();
    classes = c;
  }
  compiled_format c = compile_response_format_with_warnings(f);
  auto tg = token_grammar::create(std::move(c.grammar), v, /*precompute=*/false, classes);
  std::lock_guard lock(mutex_);
  if (auto it = entries_.find(key); it != entries_.end())  // a race
    return {it->second.grammar, it->second.warnings};
  recent_.push_front(key);
  entries_.emplace(std::move(key), entry{tg, c.warnings, recent_.begin()});
  while (entries_.size() > capacity_) {
    entries_.erase(recent_.back());
    recent_.pop_back();
  }
  return {tg, std::move(c.warnings)};
}

std::shared_ptr<const token_grammar> grammar_cache::prepare(
    const response_format& f, const std::shared_ptr<const token_vocabulary>& v) {
  std::shared_ptr<const token_grammar> tg = get(f, v);
  if (classify_s_ > 0 && !tg->classify_states(classify_s_)) warm_later(tg);
  return tg;
}

grammar_cache::~grammar_cache() {
  {
    std::lock_guard lock(warm_mutex_);
    warm_stop_ = true;
  }
  warm_wake_.notify_all();
  if (warm_thread_.joinable()) warm_thread_.join();
}

void grammar_cache::warm_later(const std::shared_ptr<const token_grammar>& g) {
  {
    std::lock_guard lock(warm_mutex_);
    if (warm_stop_) return;
    warm_queue_.push_back(g);
    if (!warm_thread_.joinable()) warm_thread_ = std::thread([this] { warm_loop(); });
  }
  warm_wake_.notify_all();
}

std::size_t grammar_cache::num_warming() const {
  std::lock_guard lock(warm_mutex_);
  return warm_queue_.size() + warm_busy_;
}

void grammar_cache::warm_loop() {
#if defined(__linux__)
  // The lowest priority: the decode steps (the CPU runner's threads) come first.
  setpriority(PRIO_PROCESS, pid_t(syscall(SYS_gettid)), 19);
#endif
  constexpr double slice_s = 0.05;  // then the queue again: stop and new grammars are seen
  for (;;) {
    std::shared_ptr<const token_grammar> g;
    {
      std::unique_lock lock(warm_mutex_);
      warm_wake_.wait(lock, [&] { return warm_stop_ || !warm_queue_.empty(); });
      if (warm_stop_) return;
      g = warm_queue_.front().lock();
      warm_queue_.pop_front();
      if (!g) continue;  // evicted and unused: nothing to warm
      ++warm_busy_;
    }
    const bool done = g->classify_states(slice_s);
    std::lock_guard lock(warm_mutex_);
    --warm_busy_;
    if (!done && !warm_stop_) warm_queue_.push_back(g);  // round robin over the grammars
  }
}

std::size_t grammar_cache::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

}  // namespace di::grammar
