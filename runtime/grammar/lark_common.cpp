// The `common` library of Lark grammars (see detail/lark_common.hpp).
#include "runtime/grammar/detail/lark_common.hpp"

#include <utility>

namespace di::grammar::detail {

namespace {

constexpr std::pair<std::string_view, std::string_view> k_common[] = {
    {"DIGIT", R"("0".."9")"},
    {"HEXDIGIT", R"("a".."f" | "A".."F" | DIGIT)"},
    {"INT", R"(DIGIT+)"},
    {"SIGNED_INT", R"(["+"|"-"] INT)"},
    {"DECIMAL", R"(INT "." INT? | "." INT)"},
    {"_EXP", R"(("e"|"E") SIGNED_INT)"},
    {"FLOAT", R"(INT _EXP | DECIMAL _EXP?)"},
    {"SIGNED_FLOAT", R"(["+"|"-"] FLOAT)"},
    {"NUMBER", R"(FLOAT | INT)"},
    {"SIGNED_NUMBER", R"(["+"|"-"] NUMBER)"},
    {"ESCAPED_STRING", R"(/"(?:[^"\\\n]|\\[^\n])*"/)"},
    {"LCASE_LETTER", R"("a".."z")"},
    {"UCASE_LETTER", R"("A".."Z")"},
    {"LETTER", R"(UCASE_LETTER | LCASE_LETTER)"},
    {"WORD", R"(LETTER+)"},
    {"CNAME", R"(("_"|LETTER) ("_"|LETTER|DIGIT)*)"},
    {"WS_INLINE", R"((" "|/\t/)+)"},
    {"WS", R"(/[ \t\f\r\n]/+)"},
    {"CR", R"(/\r/)"},
    {"LF", R"(/\n/)"},
    {"NEWLINE", R"((CR? LF)+)"},
    {"SH_COMMENT", R"(/#[^\n]*/)"},
    {"CPP_COMMENT", R"(/\/\/[^\n]*/)"},
    {"C_COMMENT", R"(/\/\*([^*]|\*+[^*\/])*\*+\//)"},
    {"SQL_COMMENT", R"(/--[^\n]*/)"},
};

}  // namespace

std::string_view lark_common_body(std::string_view name) {
  for (const auto& [n, body] : k_common)
    if (n == name) return body;
  return {};
}

}  // namespace di::grammar::detail
