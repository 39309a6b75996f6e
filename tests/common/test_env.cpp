// The environment switches' parsing (common/env.hpp): defaults when unset, the values that
// flip a switch, and malformed values ignored (the default kept).
#include "common/env.hpp"
#include "common/error.hpp"

#include <doctest/doctest.h>

#include <cstdlib>

namespace {

/// Sets (or, with nullptr, unsets) an environment variable for the scope.
struct scoped_env {
  const char* name;
  scoped_env(const char* n, const char* value) : name(n) {
    if (value)
      setenv(n, value, 1);
    else
      unsetenv(n);
  }
  ~scoped_env() { unsetenv(name); }
};

constexpr const char* kName = "DEEPINFER_TEST_ENV_SWITCH";

}  // namespace

TEST_CASE("env_switch: on by default is off only at 0, off by default on only at 1") {
  {
    const scoped_env e(kName, nullptr);
    CHECK(di::env_switch(kName, true));
    CHECK_FALSE(di::env_switch(kName, false));
  }
  {
    const scoped_env e(kName, "0");
    CHECK_FALSE(di::env_switch(kName, true));
    CHECK_FALSE(di::env_switch(kName, false));
  }
  {
    const scoped_env e(kName, "1");
    CHECK(di::env_switch(kName, true));
    CHECK(di::env_switch(kName, false));
  }
  {
    const scoped_env e(kName, "yes");  // neither: the default
    CHECK(di::env_switch(kName, true));
    CHECK_FALSE(di::env_switch(kName, false));
  }
}

TEST_CASE("env_mode and env_count: accepted values, the rest ignored") {
  {
    const scoped_env e(kName, nullptr);
    CHECK(di::env_mode(kName, "auto") == -1);
    CHECK(di::env_count(kName, 7, 64) == 7);
  }
  {
    const scoped_env e(kName, "1");
    CHECK(di::env_mode(kName, "auto") == 1);
    CHECK(di::env_count(kName, 7, 64) == 1);
  }
  {
    const scoped_env e(kName, "0");
    CHECK(di::env_mode(kName, "auto") == 0);
    CHECK(di::env_count(kName, 7, 64) == 7);  // below the minimum of 1
    CHECK(di::env_count(kName, 7, 64, 0) == 0);
  }
  {
    const scoped_env e(kName, "65");
    CHECK(di::env_mode(kName, "auto") == -1);
    CHECK(di::env_count(kName, 7, 64) == 7);  // above the maximum
  }
  {
    const scoped_env e(kName, "12x");
    CHECK(di::env_count(kName, 7, 64) == 7);  // not a whole number
  }
}

TEST_CASE("di::error shows a NUL of its message as \\0 (what() would end there)") {
  std::string what;
  try {
    DI_FAIL("unknown role '{}'", std::string("bad\0role", 8));
  } catch (const di::error& e) {
    what = e.what();
  }
  CHECK(what == "unknown role 'bad\\0role'");
  CHECK(di::visible_nuls(std::string("\0\0", 2)) == "\\0\\0");
  CHECK(di::visible_nuls("plain") == "plain");
}
