// Checks every command's options share: an integer option's range (CLI11 said only "Could not
// convert: --max-tokens = 99999999999" for a value too large for an int) and an option given
// twice (CLI11 said "At Most 1 required but received 2"); see option_checks.cpp for the latter.
#pragma once

#include <CLI/CLI.hpp>

#include <charconv>
#include <concepts>
#include <limits>
#include <string>

#include <fmt/format.h>

namespace di::cli {

/// A CLI11 check that an integer option's value is in [lo, hi] (by default, what T holds):
/// "'99999999999' is out of range [1, 2147483647]". It runs after main.cpp's decimal check,
/// which leaves plain decimal digits with an optional '-'.
template <std::integral T>
CLI::Validator integer_range(T lo = std::numeric_limits<T>::min(),
                             T hi = std::numeric_limits<T>::max()) {
  return CLI::Validator(
      [lo, hi](const std::string& s) -> std::string {
        T v{};
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec == std::errc() && end == s.data() + s.size() && v >= lo && v <= hi) return {};
        if (ec == std::errc::invalid_argument) return {};  // not a number: the decimal check's
        return fmt::format("'{}' is out of range [{}, {}]", s, lo, hi);
      },
      "");
}

/// A CLI11 check that an integer option's value fits its type T, for options whose own lower
/// bound is checked later with a message of its own: "'99999999999' is too large (at most
/// 2147483647)" instead of CLI11's "Could not convert".
template <std::integral T>
CLI::Validator integer_fits() {
  return CLI::Validator(
      [](const std::string& s) -> std::string {
        T v{};
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec != std::errc::result_out_of_range) return {};  // fits, or the decimal check's
        return s.starts_with('-') ? fmt::format("'{}' is too small (at least {})", s,
                                                std::numeric_limits<T>::min())
                                  : fmt::format("'{}' is too large (at most {})", s,
                                                std::numeric_limits<T>::max());
      },
      "");
}

/// A check that a floating-point option's value is >= 0, with a plain message
/// ("must be a non-negative number, got '-1'"; CLI::NonNegativeNumber's printed DBL_MAX in full,
/// ~310 digits). A value that is not a number is left to main.cpp's check.
inline CLI::Validator non_negative_number(const char* name = "MS") {
  return CLI::Validator(
      [](const std::string& s) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(s, v) || v >= 0) return {};
        return "must be a non-negative number, got '" + s + "'";
      },
      std::string(name) + " >= 0");
}

}  // namespace di::cli
