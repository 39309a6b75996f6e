// PCRE2 wrapper: compile with JIT, per-thread match data and JIT stack, and the translation of
// Oniguruma-specific escapes.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "model/tokenizer/detail/regex.hpp"

#include <pcre2.h>

#include <utility>

#include "common/error.hpp"
#include "model/tokenizer/detail/unicode_delta.hpp"

namespace di::tok::detail {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  return n < 0 ? fmt::format("PCRE2 error {}", code) : std::string(reinterpret_cast<char*>(buffer));
}

// Match state owned by each thread: one ovector pair is all a split needs.
struct thread_match_state {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, nullptr);

  thread_match_state() { pcre2_jit_stack_assign(context, nullptr, jit_stack); }
  ~thread_match_state() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

thread_match_state& match_state() {
  thread_local thread_match_state state;
  return state;
}

}  // namespace

std::string onig_category_class(char category) {
  std::string body = fmt::format("\\p{{{}}}", category);
  for (const code_point_range& r : onig_unicode_delta(category)) {
    body += r.first == r.last ? fmt::format("\\x{{{:X}}}", std::uint32_t(r.first))
                              : fmt::format("\\x{{{:X}}}-\\x{{{:X}}}", std::uint32_t(r.first),
                                            std::uint32_t(r.last));
  }
  return body;
}

std::string onig_space_class() {
  return "\\x{9}-\\x{d}\\x{85}" + onig_category_class('Z');
}

namespace {

// Translates the escape starting at pattern[i] == '\\'; returns the index of its last character.
std::size_t translate_escape(std::string_view pattern, std::size_t i, bool in_class,
                             std::string_view where, std::string& out) {
  if (i + 1 >= pattern.size()) {
    out += pattern[i];
    return i;
  }
  char e = pattern[i + 1];
  if (e == 's' || (e == 'S' && !in_class)) {
    std::string body = onig_space_class();
    out += in_class ? body : (e == 's' ? "[" : "[^") + body + "]";
    return i + 1;
  }
  if (e == 'S' || e == 'h' || e == 'H') {
    DI_FAIL("{}: regex escape '\\{}' differs between Oniguruma and PCRE2 and is not supported",
            where, e);
  }
  if ((e == 'p' || e == 'P') && i + 2 < pattern.size()) {
    // \pL or \p{L}: only the one-letter major categories have a delta to add.
    std::size_t end = pattern[i + 2] == '{' ? pattern.find('}', i + 2) : i + 2;
    std::string_view name = pattern[i + 2] == '{' && end != std::string_view::npos
                                ? pattern.substr(i + 3, end - i - 3)
                                : pattern.substr(i + 2, 1);
    if (end != std::string_view::npos && name.size() == 1 && !onig_unicode_delta(name[0]).empty()) {
      std::string body = onig_category_class(name[0]);
      DI_CHECK(e == 'p' || !in_class, "{}: '\\P{{{}}}' inside a character class is not supported",
               where, name);
      out += in_class ? body : (e == 'p' ? "[" : "[^") + body + "]";
      return end;
    }
  }
  out += pattern[i];
  out += e;
  return i + 1;
}

}  // namespace

std::string translate_onig_pattern(std::string_view pattern, std::string_view where) {
  std::string out;
  out.reserve(pattern.size() + 32);
  bool in_class = false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\') {
      i = translate_escape(pattern, i, in_class, where, out);
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    DI_CHECK(c != '[' || !in_class, "{}: nested character classes are not supported in regex",
             where);
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

regex::regex(std::string_view pattern, std::string_view where) {
  compile(pattern, PCRE2_UTF | PCRE2_UCP, where);
}

regex regex::literal(std::string_view text, std::string_view where) {
  regex r;
  r.compile(text, PCRE2_UTF | PCRE2_LITERAL, where);
  return r;
}

void regex::compile(std::string_view pattern, unsigned options, std::string_view where) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  auto* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                             &error_code, &error_offset, nullptr);
  DI_CHECK(code != nullptr, "{}: invalid regex at offset {}: {}", where, error_offset,
           pcre2_message(error_code));
  // JIT is an optimisation: if the platform lacks it, pcre2_match interprets the pattern.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

regex::~regex() {
  pcre2_code_free(static_cast<pcre2_code*>(code_));
}

regex::regex(regex&& other) noexcept : code_(std::exchange(other.code_, nullptr)) {}

regex& regex::operator=(regex&& other) noexcept {
  if (this != &other) {
    pcre2_code_free(static_cast<pcre2_code*>(code_));
    code_ = std::exchange(other.code_, nullptr);
  }
  return *this;
}

bool regex::find(std::string_view subject, std::size_t start, regex_match& match) const {
  auto& state = match_state();
  int rc =
      pcre2_match(static_cast<pcre2_code*>(code_), reinterpret_cast<PCRE2_SPTR>(subject.data()),
                  subject.size(), start, PCRE2_NO_UTF_CHECK, state.data, state.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  DI_CHECK(rc >= 0, "regex match failed: {}", pcre2_message(rc));
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
  match.begin = ovector[0];
  match.end = ovector[1];
  return true;
}

}  // namespace di::tok::detail
