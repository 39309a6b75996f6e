// Locating the bundled tokenizer (installed layout first, then the source tree the binary was
// built from) and reading the ids it defines.
#include "model/make_model/assets.hpp"

#include "common/error.hpp"
#include "common/mapped_file.hpp"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>

namespace di {

namespace {

std::filesystem::path executable_dir() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return {};
  return std::filesystem::path(std::string(buf, std::size_t(n))).parent_path();
}

bool has_tokenizer(const std::filesystem::path& dir) {
  std::error_code ec;
  return std::filesystem::is_regular_file(dir / "tokenizer.json", ec) &&
         std::filesystem::is_regular_file(dir / "tokenizer_config.json", ec);
}

}  // namespace

std::filesystem::path find_tokenizer_assets() {
  std::vector<std::filesystem::path> candidates;
  std::filesystem::path exe = executable_dir();
  if (!exe.empty()) candidates.push_back(exe / ".." / "share" / "deepinfer" / "assets");
  candidates.emplace_back(DEEPINFER_ASSETS_DIR);
  std::string tried;
  for (const auto& assets : candidates) {
    std::filesystem::path dir = (assets / bundled_tokenizer_dir).lexically_normal();
    if (has_tokenizer(dir)) return dir;
    tried += (tried.empty() ? "" : ", ") + dir.string();
  }
  DI_FAIL(
      "cannot find the bundled tokenizer (tokenizer.json + tokenizer_config.json); looked "
      "in: {}. Install deepinfer with its share/deepinfer/assets folder or run it from its "
      "build tree",
      tried);
}

tokenizer_facts read_tokenizer_facts(const std::filesystem::path& tokenizer_json) {
  using json = nlohmann::json;
  // Keep only what is needed: the merges list is large and irrelevant here.
  json::parser_callback_t skip_merges = [](int depth, json::parse_event_t event, json& parsed) {
    return !(event == json::parse_event_t::key && depth == 2 && parsed == "merges");
  };
  json doc = json::parse(read_text_file(tokenizer_json.string()), skip_merges, false);
  DI_CHECK(!doc.is_discarded() && doc.is_object(), "{}: not a tokenizer.json object",
           tokenizer_json.string());
  tokenizer_facts facts;
  const json* vocab = doc.contains("model") ? &doc["model"] : nullptr;
  DI_CHECK(vocab && vocab->contains("vocab") && (*vocab)["vocab"].is_object(),
           "{}: no model.vocab object", tokenizer_json.string());
  for (const auto& [token, id] : (*vocab)["vocab"].items())
    facts.num_ids = std::max(facts.num_ids, id.get<std::int64_t>() + 1);
  if (doc.contains("added_tokens") && doc["added_tokens"].is_array())
    for (const auto& t : doc["added_tokens"]) {
      std::int64_t id = t.at("id").get<std::int64_t>();
      facts.added_ids.push_back(id);
      facts.num_ids = std::max(facts.num_ids, id + 1);
    }
  return facts;
}

}  // namespace di
