// Format regexes (see formats.hpp). Written for the regex front end (ECMAScript classes).
#include "runtime/grammar/json_schema/formats.hpp"

#include <map>

namespace di::grammar::json_detail {

namespace {

// Month lengths; February 29 only in leap years (divisible by 4, and by 400 at a century:
// last two digits a multiple of 4 but not 00, or first two a multiple of 4 and then 00).
constexpr const char* k_date =
    R"((?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29))";
// RFC 3339 full-time. A leap second (second 60) falls at 23:59:60 UTC: accepted only as that
// time with a zero offset (Z, +00:00, -00:00). A leap second given in another offset (e.g.
// 15:59:60-08:00) is valid RFC 3339 but refused here: matching it would mean pairing every
// local time with its offset -- a sound subset, never an invalid string.
constexpr const char* k_time =
    R"((?:(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])|23:59:60(?:\.[0-9]+)?(?:[Zz]|[+-]00:00)))";
constexpr const char* k_ipv4_octet = R"((?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]))";
constexpr const char* k_hostname_label = R"([A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)";
constexpr const char* k_uri_chars = R"([A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%])";

std::string ipv4() { return std::string(k_ipv4_octet) + R"((?:\.)" + k_ipv4_octet + "){3}"; }

std::string ipv6() {
  const std::string h = "[0-9A-Fa-f]{1,4}";
  const std::string tail32 = "(?:" + h + ":" + h + "|" + ipv4() + ")";
  return "(?:(?:" + h + ":){6}" + tail32 + "|::(?:" + h + ":){5}" + tail32 + "|(?:" + h + ")?::(?:" + h + ":){4}" +
         tail32 + "|(?:(?:" + h + ":){0,1}" + h + ")?::(?:" + h + ":){3}" + tail32 + "|(?:(?:" + h + ":){0,2}" + h +
         ")?::(?:" + h + ":){2}" + tail32 + "|(?:(?:" + h + ":){0,3}" + h + ")?::" + h + ":" + tail32 + "|(?:(?:" + h +
         ":){0,4}" + h + ")?::" + tail32 + "|(?:(?:" + h + ":){0,5}" + h + ")?::" + h + "|(?:(?:" + h + ":){0,6}" + h +
         ")?::)";
}

const std::map<std::string, std::string, std::less<>>& table() {
  static const std::map<std::string, std::string, std::less<>> t = {
      {"date", k_date},
      {"time", k_time},
      {"date-time", std::string(k_date) + "[Tt]" + k_time},  // RFC 3339's ABNF: "T" (any case)
      {"duration",
       R"(P(?:[0-9]+W|(?:[0-9]+Y(?:[0-9]+M)?(?:[0-9]+D)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)(?:T(?:[0-9]+H(?:[0-9]+M)?(?:[0-9]+S)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S))?|T(?:[0-9]+H(?:[0-9]+M)?(?:[0-9]+S)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)))"},
      {"email",
       R"([A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)"},
      {"hostname", std::string(k_hostname_label) + R"((?:\.)" + k_hostname_label + ")*"},
      {"ipv4", ipv4()},
      {"ipv6", ipv6()},
      {"uuid", R"([0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12})"},
      {"uri", std::string(R"([A-Za-z][A-Za-z0-9+.\-]*:)") + k_uri_chars + "*"},
      {"uri-reference", std::string(k_uri_chars) + "*"},
      {"iri", R"([A-Za-z][A-Za-z0-9+.\-]*:[^\s<>"{}|\\^`]*)"},
      {"iri-reference", R"([^\s<>"{}|\\^`]*)"},
      {"uri-template",
       R"((?:[^\s{}]|\{[+#./;?&=,!@|]?[A-Za-z0-9_%.]+(?::[1-9][0-9]{0,3}|\*)?(?:,[A-Za-z0-9_%.]+(?::[1-9][0-9]{0,3}|\*)?)*\})*)"},
      {"json-pointer", R"((?:/(?:[^/~]|~[01])*)*)"},
      {"relative-json-pointer", R"((?:0|[1-9][0-9]*)(?:#|(?:/(?:[^/~]|~[01])*)*))"},
  };
  return t;
}

}  // namespace

std::optional<std::string> format_regex(std::string_view format) {
  auto it = table().find(format);
  if (it == table().end()) return std::nullopt;
  return it->second;
}

}  // namespace di::grammar::json_detail
