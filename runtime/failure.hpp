// How a request was refused or failed, as data: the router, the scheduler and the runner say
// what kind of failure it is (and which request field, when one is to blame) next to the
// message, so that a client maps it onto its own statuses (the HTTP server: 400 / 429 / 503 /
// 500 and the error's `param`) without reading the message's words.
#pragma once

#include "common/error.hpp"

#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

namespace di::runtime {

enum class failure_kind : std::uint8_t {
  none = 0,     ///< accepted / not failed
  invalid,      ///< the request is wrong (`param` names the field when one is to blame)
  overloaded,   ///< an admission limit was reached: retry later
  unavailable,  ///< the cluster cannot serve it now: shutting down, no group up, a group lost
  internal,     ///< the engine failed while generating
};
std::string_view to_string(failure_kind kind);

/// A request field the engine refuses: di::error naming the field (`param`, the name the
/// request gives it: "temperature", "stop", "prompt", "response_format", ...).
class invalid_param : public di::error {
 public:
  invalid_param(std::string param, std::string message, const char* file, int line)
      : di::error(std::move(message), file, line), param_(std::move(param)) {}
  const std::string& param() const noexcept { return param_; }

 private:
  std::string param_;
};

/// The field an exception blames: invalid_param's param, else "".
std::string param_of(const std::exception& e);

}  // namespace di::runtime

/// Throws di::runtime::invalid_param naming `param` when `cond` is false.
#define DI_CHECK_PARAM(cond, param, ...)                                                           \
  do {                                                                                             \
    if (!(cond)) [[unlikely]]                                                                      \
      throw ::di::runtime::invalid_param((param), ::fmt::format(__VA_ARGS__), __FILE__, __LINE__); \
  } while (0)
