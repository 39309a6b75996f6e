// Malformed templates and sandbox limits: every failure is a chat_template_error with the
// template position and a message naming the problem; nothing hangs, crashes or touches
// files. Messages are checked by substring so wording can improve without churn.
#include "tests/model/chat_template/template_helpers.hpp"

#include <doctest/doctest.h>

#include <chrono>

using di::chat_template_error;
using di::test::contains;
using di::test::failure_of;
using ojson = nlohmann::ordered_json;

namespace {

struct syntax_case {
  const char* source;
  const char* position;  // "line:column" as it appears in the message
  const char* reason;
};

}  // namespace

TEST_CASE("syntax errors name the problem and its line:column") {
  const syntax_case cases[] = {
      {"{% if x %}\nno end", "2:7", "'if' block opened at 1:1 is never closed"},
      {"{% for x in xs %}\n{% endif %}", "2:4", "innermost open block is 'for'"},
      {"{{ x", "1:1", "'{{' is never closed"},
      {"a\n{% if x", "2:1", "'{%' is never closed"},
      {"{# comment", "1:1", "missing end of comment"},
      {"{{ x|nosuchfilter }}", "1:6", "unknown filter 'nosuchfilter'"},
      {"{{ x is nosuchtest }}", "1:9", "unknown test 'nosuchtest'"},
      {"\n\n  {% frobnicate %}", "3:6", "unknown tag 'frobnicate'"},
      {"{{ 1 + }}", "1:8", "expected an expression"},
      {"{{ a b }}", "1:6", "expected '}}'"},
      {"{{ (1 }}", "1:7", "unexpected '}', expected ')'"},
      {"{{ 'open }}", "1:4", "unterminated string"},
      {"{% endfor %}", "1:4", "no block is open"},
      {"{% break %}", "1:1", "'break' outside of a for loop"},
      {"{% include 'other.jinja' %}", "1:4", "'include' is not supported"},
      {"{% import 'macros.jinja' as m %}", "1:4", "'import' is not supported"},
      {"{% from 'x' import y %}", "1:4", "'from' is not supported"},
      {"{% extends 'base.jinja' %}", "1:4", "'extends' is not supported"},
      {"{{ 99999999999999999999 }}", "1:4", "does not fit in 64 bits"},
      {"{{ x is defined is none }}", "1:17", "cannot be chained"},
      {"{% set 1 = 2 %}", "1:8", "expected a name to assign to"},
      {"{{ @ }}", "1:4", "unexpected character '@'"},
      // columns count characters, carried on from token to token along one line
      {"{{ 'é' }}{{ 'ü' }}é{{ x|nosuchfilter }}", "1:25", "unknown filter 'nosuchfilter'"},
      {"ab\n{{ 'é' }}{{ 'ü' }}é{{ x|nosuchfilter }}", "2:25", "unknown filter 'nosuchfilter'"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.source);
    auto failure = failure_of(c.source);
    CHECK(failure.kind == chat_template_error::kind::syntax);
    CHECK(contains(failure.message, "syntax error at " + std::string(c.position) + ":"));
    CHECK(contains(failure.message, c.reason));
  }
}

TEST_CASE("one very long line lexes in linear time") {
  // Each token's column was counted from the start of its line: 40,000 tags on one line took
  // 13 s through `chat-template` (jinja2: 3.5 s); now 0.04 s here, 0.4 s through the CLI.
  std::string source;
  for (int i = 0; i < 20000; ++i) source += "{% if true %}x{% endif %}";
  const auto t0 = std::chrono::steady_clock::now();
  const std::string out = di::test::render(source, ojson::object());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(out == std::string(20000, 'x'));
  MESSAGE("40,000 tags on one line: ", seconds, " s");
  CHECK(seconds < 5.0);  // a hang guard; it was quadratic
}

TEST_CASE("render errors carry the position of the failing expression") {
  auto f = failure_of("line one\n{{ messages[0].content.missing_method() }}",
                      ojson::parse(R"({"messages": [{"content": "x"}]})"));
  CHECK(f.kind == chat_template_error::kind::render);
  CHECK(f.line == 2);
  CHECK(contains(f.message, "has no attribute 'missing_method'"));
  CHECK(
      contains(failure_of("{{ undefined_thing.attr }}").message, "'undefined_thing' is undefined"));
  CHECK(contains(failure_of("{{ 'a' + 1 }}").message, "can only concatenate str"));
  CHECK(contains(failure_of("{{ 1 // 0 }}").message, "division or modulo by zero"));
  CHECK(contains(failure_of("{{ 2 ** 80 }}").message, "integer overflow"));
  CHECK(
      contains(failure_of("{% for x in 5 %}{% endfor %}").message, "'int' object is not iterable"));
  CHECK(contains(failure_of("{{ none|tojson }}{{ x|tojson }}").message, "not JSON serializable"));
  CHECK(contains(failure_of("{% set d = {} %}{% set d.k = 1 %}").message, "namespace"));
}

TEST_CASE("the sandbox refuses mutation and non-data attributes") {
  ojson ctx = ojson::parse(R"({"xs": [1], "d": {"k": 1}})");
  CHECK(contains(failure_of("{{ xs.append(2) }}", ctx).message, "unsafe"));
  CHECK(contains(failure_of("{% set _ = d.update({'k': 2}) %}", ctx).message, "unsafe"));
  CHECK(contains(failure_of("{{ d.pop('k') }}", ctx).message, "unsafe"));
  // Python internals are not data: they are undefined, and calling them fails.
  CHECK(di::test::render("{{ xs.__class__ }}|{{ ''.__len__ is defined }}", ctx) == "|False");
  CHECK(contains(failure_of("{{ ''.__class__.__mro__ }}", ctx).message,
                 "has no attribute '__class__'"));
  CHECK(contains(failure_of("{{ cycler }}{{ lipsum() }}", ctx).message, "'lipsum' is undefined"));
}

TEST_CASE("runaway templates stop with a clear error") {
  di::chat_template_limits small;
  small.max_steps = 20000;
  small.max_output_bytes = 1 << 16;
  small.max_call_depth = 20;
  auto loop = failure_of("{% for i in range(10**9) %}x{% endfor %}");
  CHECK(contains(loop.message, "exceeds the sandbox limit"));
  auto nested =
      failure_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                 ojson::object(), small);
  CHECK(contains(nested.message, "budget of 20000 steps"));
  auto recursion =
      failure_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", ojson::object(), small);
  CHECK(contains(recursion.message, "nested more than 20 deep"));
  auto wide = failure_of("{% macro f(n) %}{{ f(n) ~ f(n) }}{% endmacro %}{{ f(0) }}",
                         ojson::object(), small);
  CHECK(contains(wide.message, "nested more than 20 deep"));
  auto doubling = failure_of(
      "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
      "{% endfor %}",
      ojson::object(), small);
  CHECK(contains(doubling.message, "larger than the limit"));
  auto repeat = failure_of("{{ 'x' * 10**12 }}", ojson::object(), small);
  CHECK(contains(repeat.message, "larger than the limit"));
  auto output =
      failure_of("{% for i in range(1000) %}{{ 'x' * 100 }}{% endfor %}", ojson::object(), small);
  CHECK(contains(output.message, "larger than the limit"));
  // Work inside single steps is bounded too (each of these ran for minutes to hours, or took
  // 3.3 GB, with the default limits): with the defaults they stop at once.
  for (const char* work :
       {"{% for i in range(100000) %}{{ ('x' * 60000000)|length }}{% endfor %}",
        "{% for i in range(100000) %}{{ range(100000)|join(',')|length }}{% endfor %}",
        "{% set ns = namespace(s=[1]) %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% "
        "endfor %}"}) {
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_MESSAGE(contains(failure_of(work).message, "bytes of strings and lists in all"), work);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30));
  }
  di::chat_template_limits tight;
  tight.max_built_bytes = 1000;
  CHECK(contains(
      failure_of("{% for i in range(100) %}{{ 'ab' * 10 }}{% endfor %}", ojson::object(), tight)
          .message,
      "more than 1000 bytes"));
}

TEST_CASE("deeply nested input is rejected instead of overflowing the stack") {
  std::string deep_expression = "{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}";
  CHECK(contains(failure_of(deep_expression).message, "nested more than"));
  std::string deep_blocks;
  for (int i = 0; i < 100; ++i) deep_blocks += "{% if true %}";
  CHECK(contains(failure_of(deep_blocks).message, "nested more than"));
  // Recursion through nested blocks is bounded as a whole, whatever the macro depth limit.
  di::chat_template_limits shallow;
  shallow.max_nesting_depth = 40;
  std::string ifs, endifs;
  for (int i = 0; i < 30; ++i) ifs += "{% if true %}", endifs += "{% endif %}";
  auto nesting =
      failure_of("{% macro f(n) %}" + ifs + "{{ f(n + 1) }}" + endifs + "{% endmacro %}{{ f(0) }}",
                 ojson::object(), shallow);
  CHECK(contains(nesting.message, "more than 40 levels deep"));
  CHECK_THROWS_WITH_AS(di::chat_template::parse("x").render(ojson::array()),
                       doctest::Contains("must be a JSON object"), di::error);
  std::string deep_json = "{\"v\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  ojson context = ojson::parse(deep_json);
  CHECK_THROWS_WITH_AS(di::chat_template::parse("{{ v }}").render(context),
                       doctest::Contains("nested too deeply"), di::error);
}
