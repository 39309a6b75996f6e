// The project's error type and check macros. Library code never exits or aborts: a failed
// check throws di::error carrying the source location and a message a user can act on.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace di {

/// An error with a user-facing message; `where()` names the source line that raised it.
/// `message` with each NUL byte written as the two characters \0: what() is a C string, so a
/// NUL quoted from the input (a role, a pattern) would cut the message short there. Out of
/// line (error.cpp): inlined into every caller, GCC 12 warns about its string ops.
std::string visible_nuls(std::string message);

class error : public std::runtime_error {
 public:
  error(std::string message, const char* file, int line)
      : std::runtime_error(visible_nuls(std::move(message))), file_(file), line_(line) {}

  const char* file() const noexcept { return file_; }
  int line() const noexcept { return line_; }
  std::string where() const { return fmt::format("{}:{}", file_, line_); }

 private:
  const char* file_;
  int line_;
};

}  // namespace di

/// Throws di::error with a formatted message: DI_FAIL("tensor '{}' missing", name).
#define DI_FAIL(...) throw ::di::error(::fmt::format(__VA_ARGS__), __FILE__, __LINE__)

/// Throws di::error with the formatted message when `cond` is false.
#define DI_CHECK(cond, ...)   \
  do {                        \
    if (!(cond)) [[unlikely]] \
      DI_FAIL(__VA_ARGS__);   \
  } while (0)
