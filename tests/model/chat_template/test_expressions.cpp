// Unit tests of expression evaluation: literals, operators and precedence, attribute and
// item access, undefined values, filters, tests and str/dict/list methods. Expected values
// are Python/jinja2 semantics (the golden fixtures check many more against jinja2 itself).
#include "tests/model/chat_template/template_helpers.hpp"

#include <doctest/doctest.h>

using di::test::render;
using ojson = nlohmann::ordered_json;

namespace {

ojson sample_context() {
  return ojson::parse(R"({"xs": [1, 2, 3], "d": {"b": 2, "a": 1}, "s": "héllo", "n": null,
                          "msg": {"role": "user", "content": null}})");
}

std::string eval(const std::string& expression) {
  return render("{{ " + expression + " }}", sample_context());
}

}  // namespace

TEST_CASE("literals print like Python's str()") {
  CHECK(eval("42") == "42");
  CHECK(eval("-7") == "-7");
  CHECK(eval("1.0") == "1.0");
  CHECK(eval("1e16") == "1e+16");
  CHECK(eval("1.5e-7") == "1.5e-07");
  CHECK(eval("0.1 + 0.2") == "0.30000000000000004");
  CHECK(eval("none") == "None");
  CHECK(eval("true") == "True");
  CHECK(eval("[1, 'a', none]") == "[1, 'a', None]");
  CHECK(eval("('x',)") == "('x',)");
  CHECK(eval("{'k': [true]}") == "{'k': [True]}");
  CHECK(eval("\"it's\"") == "it's");
  CHECK(eval("[\"it's\"]") == "[\"it's\"]");
  CHECK(eval("'a' 'b'") == "ab");
  CHECK(eval("1_000 + 0x10") == "1016");
  CHECK(eval("'\\u00e9\\n'") == "é\n");
}

TEST_CASE("arithmetic follows Python, including floor division and modulo signs") {
  CHECK(eval("7 // 2") == "3");
  CHECK(eval("-7 // 2") == "-4");
  CHECK(eval("-7 % 3") == "2");
  CHECK(eval("7 % -3") == "-2");
  CHECK(eval("1 / 4") == "0.25");
  CHECK(eval("4 / 2") == "2.0");
  CHECK(eval("2 ** 10") == "1024");
  CHECK(eval("2 ** -1") == "0.5");
  CHECK(eval("2 ** 3 ** 2") == "64");  // Jinja's ** is left-associative
  CHECK(eval("-2 ** 2") == "4");       // unary minus binds tighter than **
  CHECK(eval("1 + 2 * 3 - 4") == "3");
  CHECK(eval("true + 1") == "2");
  CHECK(eval("'ab' * 2 ~ [0] * 2") == "abab[0, 0]");
  CHECK(eval("xs + [4]") == "[1, 2, 3, 4]");
}

TEST_CASE("comparisons, membership and boolean operators") {
  CHECK(eval("1 == 1.0 == true") == "True");
  CHECK(eval("(1, 2) == [1, 2]") == "False");
  CHECK(eval("1 < 2 < 3") == "True");
  CHECK(eval("3 > 2 > 2") == "False");
  CHECK(eval("'b' in 'abc'") == "True");
  CHECK(eval("'a' in d") == "True");
  CHECK(eval("5 not in xs") == "True");
  CHECK(eval("0 or 'x'") == "x");
  CHECK(eval("'' and 'x'") == "");
  CHECK(eval("not xs") == "False");
  CHECK(eval("'yes' if xs else 'no'") == "yes");
  CHECK(eval("'yes' if false") == "");
  CHECK(eval("xs|length - 1") == "2");  // filters bind tighter than operators
  CHECK(eval("'a' ~ 1 ~ none ~ undefined_name") == "a1None");
}

TEST_CASE("attribute and item access, slices and undefined values") {
  CHECK(eval("d.a") == "1");
  CHECK(eval("d['b']") == "2");
  CHECK(eval("d.missing") == "");
  CHECK(eval("d.missing is defined") == "False");
  CHECK(eval("msg['content'] is none") == "True");
  CHECK(eval("msg.tool_calls is defined") == "False");
  CHECK(eval("xs[-1]") == "3");
  CHECK(eval("xs[10]") == "");
  CHECK(eval("xs[::-1]") == "[3, 2, 1]");
  CHECK(eval("xs[1:]") == "[2, 3]");
  CHECK(eval("xs[2:0:-1]") == "[3, 2]");
  CHECK(eval("s[1]") == "é");
  CHECK(eval("s[::-1]") == "olléh");
  CHECK(eval("s|length") == "5");
  CHECK(eval("n.anything") == "");  // attributes of None are undefined, not errors
  CHECK(eval("undefined_name") == "");
  CHECK(eval("undefined_name|length") == "0");
  CHECK(eval("undefined_name == undefined_other") == "True");
  CHECK(eval("(1 if false) is undefined") == "True");
}

TEST_CASE("tests use Python's type rules") {
  CHECK(eval("true is number") == "True");
  CHECK(eval("true is integer") == "False");
  CHECK(eval("1.0 is float") == "True");
  CHECK(eval("'x' is string") == "True");
  CHECK(eval("d is mapping") == "True");
  CHECK(eval("xs is iterable") == "True");
  CHECK(eval("5 is iterable") == "False");
  CHECK(eval("6 is divisibleby 3") == "True");
  CHECK(eval("6 is divisibleby(4)") == "False");
  CHECK(eval("3 is odd") == "True");
  CHECK(eval("2 is in xs") == "True");
  CHECK(eval("2 is equalto 2") == "True");
  CHECK(eval("n is not none") == "False");
  CHECK(eval("not n is defined") == "False");  // `not` applies to the whole test
  CHECK(eval("1 is true") == "False");
  CHECK(eval("true is true") == "True");
}

TEST_CASE("string filters") {
  CHECK(eval("'  a b \\u3000'|trim") == "a b");
  CHECK(eval("'xxaxx'|trim('x')") == "a");
  CHECK(eval("'hELLO wORLD'|capitalize") == "Hello world");
  CHECK(eval("'hello world-x(y'|title") == "Hello World-X(Y");
  CHECK(eval("'ÉCOLE'|lower") == "école");
  CHECK(eval("'a-b-c'|replace('-', '+', 1)") == "a+b-c");
  CHECK(eval("'a\\nb\\n\\nc'|indent(2)") == "a\n  b\n\n  c");
  CHECK(eval("'a\\nb'|indent(2, true)") == "  a\n  b");
  CHECK(eval("'one two, three'|wordcount") == "3");
  CHECK(eval("'<a>&'|e") == "&lt;a&gt;&amp;");
  CHECK(eval("5|string ~ '!'") == "5!");
  CHECK(eval("'3.7'|int") == "3");
  CHECK(eval("'x'|int(-1)") == "-1");
  CHECK(eval("'1e3'|float") == "1000.0");
  CHECK(eval("2.5|round") == "2.0");  // ties to even, like Python's round()
  CHECK(eval("2.567|round(2)") == "2.57");
  CHECK(eval("2.5|round(0, 'floor')") == "2.0");
  CHECK(eval("-3|abs") == "3");
  CHECK(eval("undefined_name|default('dflt')") == "dflt");
  CHECK(eval("''|default('dflt')") == "");
  CHECK(eval("''|d('dflt', true)") == "dflt");
}

TEST_CASE("tojson matches transformers' json.dumps settings") {
  ojson ctx = ojson::parse(R"({"v": {"z": "é\"\n", "a": [1, 2.5, null, true]}})");
  CHECK(render("{{ v|tojson }}", ctx) == R"({"z": "é\"\n", "a": [1, 2.5, null, true]})");
  CHECK(render("{{ v|tojson(sort_keys=true) }}", ctx) ==
        R"({"a": [1, 2.5, null, true], "z": "é\"\n"})");
  CHECK(render("{{ v.z|tojson(ensure_ascii=true) }}", ctx) == R"("\u00e9\"\n")");
  CHECK(render("{{ v|tojson(indent=2) }}", ctx) ==
        "{\n  \"z\": \"é\\\"\\n\",\n  \"a\": [\n    1,\n    2.5,\n    null,\n    true\n  ]\n}");
  CHECK(render("{{ {'a': 1}|tojson(separators=(',', ':')) }}") == R"({"a":1})");
  CHECK(render("{{ []|tojson(indent=4) }}") == "[]");
}

TEST_CASE("sequence filters") {
  ojson ctx = ojson::parse(R"({"users": [{"name": "bo", "age": 31, "admin": true},
                                          {"name": "Al", "age": 25, "admin": false},
                                          {"name": "cy", "age": 31}]})");
  CHECK(render("{{ users|map(attribute='name')|join(', ') }}", ctx) == "bo, Al, cy");
  CHECK(render("{{ users|selectattr('admin')|map(attribute='name')|list }}", ctx) == "['bo']");
  CHECK(render("{{ users|rejectattr('admin')|map(attribute='name')|list }}", ctx) ==
        "['Al', 'cy']");
  CHECK(render("{{ users|selectattr('age', 'equalto', 31)|list|length }}", ctx) == "2");
  CHECK(render("{{ users|sort(attribute='name')|map(attribute='name')|join }}", ctx) == "Albocy");
  CHECK(render("{{ users|sort(attribute='age', reverse=true)|map(attribute='name')|join }}", ctx) ==
        "bocyAl");  // stable: equal ages keep their order
  CHECK(render("{{ users|map(attribute='age')|unique|list }}", ctx) == "[31, 25]");
  CHECK(render("{{ users|sum(attribute='age') }}", ctx) == "87");
  CHECK(render("{{ users|min(attribute='age') }}", ctx) ==
        "{'name': 'Al', 'age': 25, 'admin': False}");
  CHECK(eval("['b', 'A', 'a']|sort") == "['A', 'a', 'b']");
  CHECK(eval("['b', 'B', 'a']|unique|list") == "['b', 'a']");
  CHECK(eval("d|dictsort") == "[('a', 1), ('b', 2)]");
  CHECK(eval("d|items|list") == "[('b', 2), ('a', 1)]");
  CHECK(eval("xs|select('odd')|list") == "[1, 3]");
  CHECK(eval("xs|reject('equalto', 2)|list") == "[1, 3]");
  CHECK(eval("xs|map('string')|join('-')") == "1-2-3");
  CHECK(eval("xs|first ~ xs|last") == "13");
  CHECK(eval("[]|first is undefined") == "True");
  CHECK(eval("'abc'|reverse") == "cba");
  CHECK(eval("'ab'|list") == "['a', 'b']");
  CHECK(eval("xs|count") == "3");
}

TEST_CASE("str, dict and list methods") {
  CHECK(eval("'  x '.strip() ~ '|'") == "x|");
  CHECK(eval("'<think>a</think>b'.split('</think>')[-1]") == "b");
  CHECK(eval("'a b  c'.split()") == "['a', 'b', 'c']");
  CHECK(eval("'a,b,c'.rsplit(',', 1)") == "['a,b', 'c']");
  CHECK(eval("'\\n\\nx\\n'.lstrip('\\n')") == "x\n");
  CHECK(eval("'abc'.startswith(('x', 'a'))") == "True");
  CHECK(eval("'abc'.endswith('bc')") == "True");
  CHECK(eval("'Hi'.upper() ~ 'Hi'.lower()") == "HIhi");
  CHECK(eval("'aXa'.replace('a', 'b')") == "bXb");
  CHECK(eval("'héllo'.find('l')") == "2");
  CHECK(eval("'{}={x}'.format(1, x=2)") == "1=2");
  CHECK(eval("', '.join(['a', 'b'])") == "a, b");
  CHECK(eval("d.get('a')") == "1");
  CHECK(eval("d.get('zz') is none") == "True");
  CHECK(eval("d.get('zz', 5)") == "5");
  CHECK(eval("d.keys()|list") == "['b', 'a']");
  CHECK(eval("d.items()|list") == "[('b', 2), ('a', 1)]");
  CHECK(eval("xs.index(3)") == "2");
}

TEST_CASE("nlohmann::json contexts are sorted by key, ordered_json keeps input order") {
  const char* text = R"({"v": {"b": 1, "a": 2}})";
  auto tmpl = di::chat_template::parse("{{ v|tojson }}");
  CHECK(tmpl.render(nlohmann::json::parse(text)) == R"({"a": 2, "b": 1})");
  CHECK(tmpl.render(ojson::parse(text)) == R"({"b": 1, "a": 2})");
}
