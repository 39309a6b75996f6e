// Golden tests: every fixture rendered by the C++ interpreter must equal, byte for byte,
// what Python's jinja2 rendered under transformers' settings (gen_expected.py). Cases cover
// the real DeepSeek-V3 template and Qwen/Llama-style templates; snippets cover semantics.
#include "model/chat_template/chat_template.hpp"
#include "model/chat_template/tokenizer_chat_template.hpp"
#include "tests/test_support.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

fs::path fixtures_dir() {
  return di::test::source_dir() / "tests/model/chat_template/fixtures";
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

ojson read_json(const fs::path& path) {
  return ojson::parse(read_file(path));
}

di::tokenizer_chat_template template_for(const ojson& c) {
  if (c.contains("tokenizer"))  // bundled in assets/, so CI's clean clone has it
    return di::tokenizer_chat_template::load(
        (di::test::source_dir() / "assets" / c["tokenizer"].get<std::string>()).string());
  std::string source = read_file(fixtures_dir() / "templates" / c["template"].get<std::string>());
  return di::tokenizer_chat_template::from_source(source,
                                                  c.value("tokenizer_config", ojson::object()));
}

di::chat_request request_for(const ojson& r) {
  di::chat_request request;
  request.messages = r["messages"];
  request.tools = r.value("tools", ojson());
  request.add_generation_prompt = r.value("add_generation_prompt", true);
  request.kwargs = r.value("kwargs", ojson::object());
  return request;
}

// Throws, or returns the kind of chat_template_error raised by parsing then rendering.
std::string error_kind_of(const std::string& source, const ojson& context) {
  try {
    di::chat_template::parse(source).render(context);
  } catch (const di::chat_template_error& e) {
    return e.error_kind() == di::chat_template_error::kind::syntax ? "syntax" : "render";
  }
  return "none";
}

}  // namespace

TEST_CASE("model templates render the jinja2 reference outputs byte for byte") {
  ojson cases = read_json(fixtures_dir() / "cases.json");
  REQUIRE(cases.size() >= 15);
  for (const auto& c : cases) {
    std::string name = c["name"].get<std::string>();
    CAPTURE(name);
    di::tokenizer_chat_template tmpl = template_for(c);
    di::chat_request request = request_for(c["request"]);
    fs::path expected_text = fixtures_dir() / "expected" / (name + ".txt");
    if (fs::exists(expected_text)) {
      CHECK(tmpl.apply(request) == read_file(expected_text));
      continue;
    }
    std::string expected_error = read_file(fixtures_dir() / "expected" / (name + ".error"));
    try {
      tmpl.apply(request);
      FAIL("expected raise_exception: " << expected_error);
    } catch (const di::chat_template_error& e) {
      CHECK(e.error_kind() == di::chat_template_error::kind::raised);
      CHECK(std::string(e.what()).find(expected_error) != std::string::npos);
    }
  }
}

TEST_CASE("template snippets match jinja2 outputs and errors") {
  ojson inputs = read_json(fixtures_dir() / "snippets.json");
  ojson expected = read_json(fixtures_dir() / "snippets_expected.json");
  const ojson& snippets = inputs["snippets"];
  REQUIRE(snippets.size() == expected.size());
  REQUIRE(snippets.size() >= 150);
  std::size_t num_outputs = 0, num_errors = 0;
  for (std::size_t i = 0; i < snippets.size(); ++i) {
    const ojson& in = snippets[i];
    const ojson& want = expected[i];
    std::string source = in["template"].get<std::string>();
    CAPTURE(source);
    REQUIRE_MESSAGE(want["template"] == in["template"], "snippets_expected.json is stale");
    ojson context = inputs["default_context"];
    ojson overrides = in.value("context", ojson::object());
    for (const auto& [key, v] : overrides.items()) context[key] = v;
    if (want.contains("output")) {
      ++num_outputs;
      std::string actual;
      try {
        actual = di::chat_template::parse(source).render(context);
      } catch (const std::exception& e) {
        actual = std::string("<error> ") + e.what();
      }
      CHECK(actual == want["output"].get<std::string>());
    } else {
      ++num_errors;
      std::string kind = in.value("cpp_error", want["error"].get<std::string>());
      CAPTURE(want["message"].get<std::string>());
      CHECK(error_kind_of(source, context) == kind);
    }
  }
  CHECK(num_outputs > 100);
  CHECK(num_errors > 40);
}
