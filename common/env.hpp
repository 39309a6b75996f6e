// Switches and counts from the environment (DEEPINFER_* settings for comparisons and
// diagnostics): parsed one way everywhere, a malformed value ignored with a warning on stderr.
// Header-only, C++17 (CUDA sources include it through kernels/cuda/kernel_attributes.hpp).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace di {

/// A switch's default from environment variable `name`: a switch on by default is off only
/// when it is "0"; one off by default is on only when it is "1".
inline bool env_switch(const char* name, bool default_on) {
  const char* env = std::getenv(name);
  if (!env) return default_on;
  return default_on ? std::string_view(env) != "0" : std::string_view(env) == "1";
}

/// A three-way mode's default from environment variable `name`: -1 (automatic, also
/// when unset), 0 or 1; anything else is ignored with a warning on stderr naming `what_auto`,
/// what the automatic mode does.
inline int env_mode(const char* name, const char* what_auto) {
  const char* env = std::getenv(name);
  if (!env) return -1;
  const std::string_view v(env);
  if (v == "-1" || v == "0" || v == "1") return v == "-1" ? -1 : v == "0" ? 0 : 1;
  std::fprintf(stderr, "deepinfer: %s=%s ignored (expected -1, 0 or 1); %s\n", name, env,
               what_auto);
  return -1;
}

/// A count's (or numbered mode's) default from environment variable `name`: `fallback` when
/// unset; a value that is not a whole number in [min, max] is ignored with a warning on stderr.
inline std::int64_t env_count(const char* name, std::int64_t fallback, std::int64_t max,
                              std::int64_t min = 1) {
  const char* env = std::getenv(name);
  if (!env) return fallback;
  char* end = nullptr;
  const long long v = std::strtoll(env, &end, 10);
  if (end != env && *end == '\0' && v >= min && v <= max) return v;
  std::fprintf(stderr,
               "deepinfer: %s=%s ignored (expected a whole number in %lld..%lld); using %lld\n",
               name, env, static_cast<long long>(min), static_cast<long long>(max),
               static_cast<long long>(fallback));
  return fallback;
}

}  // namespace di
