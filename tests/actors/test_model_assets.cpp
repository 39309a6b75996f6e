// load_model_assets: the toy runner reads no checkpoint, so an example file's model.path that
// does not exist means the bundled tokenizer; an explicit model.tokenizer must exist, and the
// CPU runner needs its checkpoint.
#include "actors/model_assets.hpp"
#include "common/error.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "tests/test_support.hpp"

#include <doctest/doctest.h>

#include <fstream>

#include <string>

namespace di::test {

namespace {

const std::string layout = R"(
[[nodes]]
port = 7100
[[nodes]]
port = 7101
devices = ["cpu"]
[[groups]]
executors = [1]
)";

std::string error_of(const cluster_config& c) {
  try {
    actors::load_model_assets(c);
  } catch (const di::error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("the toy runner falls back to the bundled tokenizer when model.path has none") {
  const cluster_config c = parse_cluster_config(
      layout, {"model.runner=toy", "model.path=/nonexistent/tiny-v41"}, "c.toml");
  const actors::model_assets a = actors::load_model_assets(c);
  REQUIRE(a.tokenizer != nullptr);
  CHECK(a.vocab_size == std::int64_t(a.tokenizer->vocab_size()));
  CHECK(a.vocab_size > 1000);
  // a toy vocabulary past the tokenizer's ids: refused at startup (its requests failed partway)
  const cluster_config big =
      parse_cluster_config(layout, {"model.runner=toy", "model.toy.vocab_size=200000"}, "c.toml");
  CHECK(error_of(big).find("model.toy.vocab_size 200000 is larger than the tokenizer's") !=
        std::string::npos);
}

TEST_CASE("a named tokenizer must exist, and the CPU runner needs its checkpoint") {
  CHECK(error_of(parse_cluster_config(
                     layout, {"model.runner=toy", "model.tokenizer=/nonexistent/tok"}, "c.toml"))
            .find("c.toml: '/nonexistent/tok' does not exist") != std::string::npos);
  CHECK(
      error_of(parse_cluster_config(layout, {"model.path=/nonexistent/tiny-v41"}, "c.toml"))
          .find("c.toml: '/nonexistent/tiny-v41' does not exist (model.tokenizer / model.path)") !=
      std::string::npos);
  // a file instead of the folder, and a folder without the tokenizer
  test::temp_dir dir("assets");
  { std::ofstream(dir / "config.json") << "{}"; }
  CHECK(error_of(parse_cluster_config(layout, {"model.path=" + (dir / "config.json").string()},
                                      "c.toml"))
            .find("config.json' is not a folder") != std::string::npos);
  CHECK(error_of(parse_cluster_config(layout, {"model.path=" + dir.path().string()}, "c.toml"))
            .find("c.toml: no tokenizer.json in '" + dir.path().string()) != std::string::npos);
}

}  // namespace di::test
