// Stop conditions: stop strings across token boundaries with held-back text, stop tokens,
// max_tokens, and the order in which they apply.
#include "common/error.hpp"
#include "runtime/stop_checker.hpp"

#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

using namespace di::runtime;

namespace {

/// Feeds (token, text) pairs; returns everything emitted and the last update.
std::pair<std::string, stop_update> feed(stop_checker& c,
                                         const std::vector<std::pair<int, std::string>>& steps) {
  std::string out;
  stop_update last;
  for (const auto& [id, text] : steps) {
    last = c.push(id, text);
    out += last.text;
    if (last.finished()) break;
  }
  return {out, last};
}

}  // namespace

TEST_CASE("a stop string split across tokens ends the request and is cut from the output") {
  stop_checker c({.stop_strings = {"o w"}});
  auto [out, last] = feed(c, {{10, "Hel"}, {11, "lo"}, {12, " wor"}, {13, "ld"}});
  CHECK(out == "Hell");
  CHECK(last.reason == finish_reason::stop);
  CHECK(last.stop_string == "o w");
  CHECK(c.num_tokens() == 3);
}

TEST_CASE("text that may start a stop string is held back, then released") {
  stop_checker c({.stop_strings = {"</end>"}});
  auto u1 = c.push(1, "abc</e");
  CHECK(u1.text == "abc");  // "</e" could be the start of "</end>"
  auto u2 = c.push(2, "x");
  CHECK(u2.text == "</ex");  // it was not
  CHECK_FALSE(u2.finished());
  auto u3 = c.push(3, "<");
  CHECK(u3.text.empty());
  CHECK(c.flush() == "<");
}

TEST_CASE("include_stop_string keeps the match; the earliest of several stop strings wins") {
  stop_checker c({.stop_strings = {"world", "lo"}, .include_stop_string = true});
  auto [out, last] = feed(c, {{1, "hello world"}});
  CHECK(out == "hello");
  CHECK(last.stop_string == "lo");
}

TEST_CASE("stop token ids end the request without their text; pending text is released") {
  stop_checker c({.stop_strings = {"XYZ"}, .stop_token_ids = {1}});
  auto u1 = c.push(5, "aX");
  CHECK(u1.text == "a");
  auto u2 = c.push(1, "<eos>");
  CHECK(u2.reason == finish_reason::stop);
  CHECK(u2.stop_token == 1);
  CHECK(u2.text == "X");
  CHECK_THROWS_AS(c.push(6, "more"), di::error);
}

TEST_CASE("include_stop_string keeps a stop token's text too (as vLLM does)") {
  stop_checker c({.stop_strings = {"XYZ"}, .stop_token_ids = {1}, .include_stop_string = true});
  CHECK(c.push(5, "aX").text == "a");
  auto u = c.push(1, "<end>");
  CHECK(u.reason == finish_reason::stop);
  CHECK(u.stop_token == 1);
  CHECK(u.text == "X<end>");
}

TEST_CASE("max_tokens ends with finish reason length and releases held-back text") {
  stop_checker c({.stop_strings = {"ab"}, .max_tokens = 2});
  auto u1 = c.push(7, "xa");
  CHECK(u1.text == "x");
  auto u2 = c.push(8, "c");
  CHECK(u2.reason == finish_reason::length);
  CHECK(u2.text == "ac");
}

TEST_CASE("a stop string completed by the last allowed token still counts as stop") {
  stop_checker c({.stop_strings = {"ab"}, .max_tokens = 2});
  auto [out, last] = feed(c, {{1, "a"}, {2, "b"}});
  CHECK(last.reason == finish_reason::stop);
  CHECK(out.empty());
}

TEST_CASE("multi-byte text is never split inside a character") {
  stop_checker c({.stop_strings = {"你好吗"}});
  auto u = c.push(1, "说你好");
  CHECK(u.text == "说");  // "你好" held back as a prefix of the stop string
  auto v = c.push(2, "呀");
  CHECK(v.text == "你好呀");
}

TEST_CASE("bad stop configuration is rejected") {
  CHECK_THROWS_WITH_AS(stop_checker({.stop_strings = {""}}), "stop strings must not be empty",
                       di::error);
  CHECK_THROWS_AS(stop_checker({.max_tokens = 0}), di::error);
  CHECK(to_string(finish_reason::length) == "length");
}

TEST_CASE("before min_tokens no stop string ends the request; one completed from then on does") {
  // Completed by token 1 of min_tokens 3: emitted as text; the same string at token 3 stops.
  stop_checker c({.stop_strings = {"END"}, .min_tokens = 3});
  auto [out, last] = feed(c, {{1, "aEND"}, {2, "b"}, {3, "cEND"}, {4, "d"}});
  CHECK(out == "aENDbc");
  CHECK(last.reason == finish_reason::stop);
  CHECK(last.stop_string == "END");
  CHECK(c.num_tokens() == 3);

  // Begun before min_tokens and completed by token min_tokens: it counts, cut where it begins.
  stop_checker d({.stop_strings = {"END"}, .min_tokens = 2});
  auto [out2, last2] = feed(d, {{1, "xEN"}, {2, "Dy"}});
  CHECK(out2 == "x");
  CHECK(last2.stop_string == "END");

  // A shorter stop string inside text held back for a longer one, completed before
  // min_tokens, does not count later.
  stop_checker e({.stop_strings = {"ab", "xaby"}, .min_tokens = 2});
  auto [out3, last3] = feed(e, {{1, "xab"}, {2, "z"}, {3, "ab"}});
  CHECK(out3 == "xabz");
  CHECK(last3.stop_string == "ab");

  // Stop tokens are not subject to min_tokens here (the sampler keeps them out before it).
  stop_checker f({.stop_token_ids = {7}, .min_tokens = 5});
  CHECK(f.push(7, "").reason == finish_reason::stop);
}
