// PCRE2 wrapper: compile with JIT, per-thread match data and JIT stack, and the translation of
// Oniguruma-specific escapes.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "model/tokenizer/detail/regex.hpp"

#include <pcre2.h>

#include <utility>

#include "common/error.hpp"

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

std::string translate_onig_pattern(std::string_view pattern, std::string_view where) {
  std::string out;
  out.reserve(pattern.size() + 32);
  bool in_class = false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      char e = pattern[++i];
      if (e == 's') {
        out += in_class ? std::string(k_onig_space_class) : fmt::format("[{}]", k_onig_space_class);
      } else if (e == 'S' && !in_class) {
        out += fmt::format("[^{}]", k_onig_space_class);
      } else if (e == 'S' || e == 'h' || e == 'H') {
        DI_FAIL("{}: regex escape '\\{}' differs between Oniguruma and PCRE2 and is not supported",
                where, e);
      } else {
        out += c;
        out += e;
      }
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
    if (c == '[' && in_class) {
      DI_FAIL("{}: nested character classes are not supported in regex", where);
    }
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
