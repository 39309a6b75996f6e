// json_brief: a bounded rendering of JSON for error messages (dump() recursed once a level
// and a value nested 100,000 deep overflowed the stack).
#include "common/json_brief.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <string>

TEST_CASE("json_brief: small values as dump() has them, deep or long ones cut short") {
  using nlohmann::json;
  const json small = json::parse(R"({"a":[1,2,{"b":null}],"c":"x"})");
  CHECK(di::json_brief(small) == small.dump());
  CHECK(di::json_brief(json(3.5)) == "3.5");
  json deep = json::array();
  for (int i = 0; i < 100000; ++i) deep = json::array({std::move(deep)});
  const std::string d = di::json_brief(deep);
  CHECK(d == std::string(16, '[') + "[...]" + std::string(16, ']'));
  const std::string long_text(10000, 'z');
  const std::string l = di::json_brief(json(long_text), 50);
  CHECK(l == "\"" + std::string(49, 'z') + "...");
  json wide = json::array();
  for (int i = 0; i < 1000; ++i) wide.push_back(i);
  CHECK(di::json_brief(wide, 20).size() == 23);
  CHECK(di::json_brief(nlohmann::ordered_json::parse(R"({"z":1,"a":2})")) == R"({"z":1,"a":2})");
}
