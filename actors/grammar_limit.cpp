// The response_format compile limit (see grammar_limit.hpp).
#include "actors/grammar_limit.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace di::actors {

namespace {

std::chrono::nanoseconds read_limit() {
  const std::chrono::nanoseconds full = max_grammar_prepare_time;
  const char* text = std::getenv("DEEPINFER_TEST_GRAMMAR_LIMIT_S");
  if (text == nullptr || *text == '\0') return full;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (*end != '\0' || !(seconds > 0) || seconds > double(max_grammar_prepare_time.count())) {
    std::fprintf(stderr,
                 "note: DEEPINFER_TEST_GRAMMAR_LIMIT_S=%s ignored (a test hook: seconds in (0, "
                 "%lld]); the response_format compile limit stays %lld s\n",
                 text, (long long)max_grammar_prepare_time.count(),
                 (long long)max_grammar_prepare_time.count());
    return full;
  }
  return std::chrono::nanoseconds(std::int64_t(seconds * 1e9));
}

}  // namespace

std::chrono::nanoseconds grammar_prepare_limit() {
  static const std::chrono::nanoseconds limit = read_limit();
  return limit;
}

std::string grammar_too_slow(double seconds, std::chrono::nanoseconds limit) {
  const double limit_s = std::chrono::duration<double>(limit).count();
  // Whole seconds, as the limit is; tenths below 10 s (a test's shortened limit).
  return fmt::format("the response_format took {:.{}f} s to compile; the limit is {:g} s", seconds,
                     seconds < 10 ? 1 : 0, limit_s);
}

}  // namespace di::actors
