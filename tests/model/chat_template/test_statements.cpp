// Unit tests of statements and layout: whitespace control under transformers' settings
// (trim_blocks, lstrip_blocks), loops and the loop variable, scoping of set/namespace,
// macros and call blocks, and the smaller statements (filter, set block, with, raw).
#include "tests/model/chat_template/template_helpers.hpp"

#include <doctest/doctest.h>

using di::test::render;
using ojson = nlohmann::ordered_json;

namespace {

ojson numbers() {
  return ojson::parse(R"({"xs": [1, 2, 3], "e": []})");
}

}  // namespace

TEST_CASE("trim_blocks and lstrip_blocks are on, as in transformers") {
  // The newline after a block tag goes; indentation before a block tag goes.
  CHECK(render("a\n{% if true %}\nb\n{% endif %}\nc") == "a\nb\nc");
  CHECK(render("a\n    {% if true %}\n    b\n    {% endif %}\nc") == "a\n    b\nc");
  // Comments behave like block tags; {{ }} does not.
  CHECK(render("  {# note #}\nx") == "x");
  CHECK(render("  {{ 'v' }}\nx") == "  v\nx");
  // Not at the start of a line: no lstrip.
  CHECK(render("a  {% if true %}b{% endif %}") == "a  b");
  // One trailing newline of the template is dropped (keep_trailing_newline=False).
  CHECK(render("x\n") == "x");
  CHECK(render("x\n\n") == "x\n");
  CHECK(render("a\r\nb\r{% if true %}\r\nc{% endif %}") == "a\nb\nc");
}

TEST_CASE("explicit whitespace control with - and +") {
  CHECK(render("x {%- if true -%} y {%- endif -%} z") == "xyz");
  CHECK(render("a\n\n  {{- 'b' -}}  \n\n c") == "abc");
  CHECK(render("x\n  {%+ if true %}y{% endif %}") == "x\n  y");
  CHECK(render("{% if true +%}\ny{% endif %}") == "\ny");
  CHECK(render("a {#- c -#} b") == "ab");
  CHECK(render("{%- for x in xs -%}\n  {{ x }},\n{%- endfor -%}\n", numbers()) == "1,2,3,");
  CHECK(render("{% raw %}{{ kept }}{% endraw %}") == "{{ kept }}");
}

TEST_CASE("for loops: loop variable, else, filters, unpacking, break/continue") {
  CHECK(render("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
               "{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
               numbers()) == "103TrueFalse3;212FalseFalse3;321FalseTrue3;");
  CHECK(render("{% for x in xs %}{{ loop.previtem }}-{{ loop.nextitem }},{% endfor %}",
               numbers()) == "-2,1-3,2-,");
  CHECK(render("{% for x in xs if x is odd %}{{ loop.index }}/{{ loop.length }}:{{ x }} "
               "{% endfor %}",
               numbers()) == "1/2:1 2/2:3 ");
  CHECK(render("{% for x in e %}x{% else %}empty{% endfor %}", numbers()) == "empty");
  CHECK(render("{% for x in xs if x > 5 %}x{% else %}none{% endfor %}", numbers()) == "none");
  CHECK(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }} {% endfor %}") ==
        "a=1 b=2 ");
  CHECK(render("{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% endfor %}",
               numbers()) == "13");
  CHECK(render("{% for x in xs %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}",
               numbers()) == "1");
  CHECK(render("{% for x in xs %}{{ loop.cycle('a', 'b') }}{% endfor %}", numbers()) == "aba");
  CHECK(render("{% for c in 'hé' %}[{{ c }}]{% endfor %}") == "[h][é]");
  CHECK(render("{% for r in [[1, 2], [3]] %}{% set outer = loop %}{% for v in r %}"
               "{{ outer.index }}.{{ loop.index }} {% endfor %}{% endfor %}") == "1.1 1.2 2.1 ");
}

TEST_CASE("set is scoped to the loop iteration; namespace carries state out") {
  CHECK(render("{% set x = 1 %}{% for i in xs %}{{ x }}{% set x = i %}{{ x }},{% endfor %}{{ x }}",
               numbers()) == "11,12,13,1");
  CHECK(render("{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}") == "2");
  CHECK(render("{% set ns = namespace(total=0, seen=[]) %}{% for i in xs %}"
               "{% set ns.total = ns.total + i %}{% set ns.seen = ns.seen + [i] %}{% endfor %}"
               "{{ ns.total }} {{ ns.seen }}",
               numbers()) == "6 [1, 2, 3]");
  CHECK(render("{% set a, b = 1, 2 %}{{ b }}{{ a }}") == "21");
  CHECK(render("{% if not flag is defined %}{% set flag = false %}{% endif %}{{ flag }}") ==
        "False");
}

TEST_CASE("macros: defaults, keywords, varargs, recursion, caller") {
  CHECK(render("{% macro g(name, greeting='Hi') %}{{ greeting }} {{ name }}{% endmacro %}"
               "{{ g('a') }}|{{ g('b', 'Yo') }}|{{ g(greeting='Hey', name='c') }}") ==
        "Hi a|Yo b|Hey c");
  CHECK(render("{% macro m() %}{{ varargs|length }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}") ==
        "2{'k': 3}");
  CHECK(render("{% macro fact(n) %}{{ 1 if n <= 1 else n * fact(n - 1)|int }}{% endmacro %}"
               "{{ fact(6) }}") == "720");
  CHECK(render("{% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}in{% endcall %}") ==
        "[in]");
  CHECK(render("{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}"
               "{% call(v) each([1, 2]) %}<{{ v }}>{% endcall %}") == "<1><2>");
  CHECK(render("{% macro m(a) %}{{ a is defined }}{% endmacro %}{{ m() }}") == "False");
}

TEST_CASE("filter blocks, set blocks, with, print and generation") {
  CHECK(render("{% filter upper %}abc{% endfilter %}") == "ABC");
  CHECK(render("{% set text %}  hi {{ 1 + 1 }}{% endset %}[{{ text }}]") == "[  hi 2]");
  CHECK(render("{% set text | trim %}  hi  {% endset %}[{{ text }}]") == "[hi]");
  CHECK(render("{% with a = 2 %}{{ a * 2 }}{% endwith %}[{{ a }}]") == "4[]");
  CHECK(render("{% print 'p', 1 %}") == "p1");
  CHECK(render("{% generation %}gen{% endgeneration %}") == "gen");
}

TEST_CASE("raise_exception and strftime_now globals") {
  auto failure = di::test::failure_of("{{ raise_exception('Roles must alternate') }}");
  CHECK(failure.kind == di::chat_template_error::kind::raised);
  CHECK(di::test::contains(failure.message, "Roles must alternate"));
  std::string date = render("{{ strftime_now('%Y-%m-%d') }}");
  REQUIRE(date.size() == 10);
  CHECK(date[4] == '-');
  CHECK(date[7] == '-');
  CHECK(render("{{ strftime_now is defined }}") == "True");
}
