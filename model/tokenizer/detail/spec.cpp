// tokenizer.json / tokenizer_config.json parsing with nlohmann::json. Each section has one
// function; each unsupported setting fails with its JSON path in the message.
#include "model/tokenizer/detail/spec.hpp"
#include "common/json_brief.hpp"

#include <nlohmann/json.hpp>
#include <unordered_map>

#include "common/error.hpp"
#include "common/printable.hpp"
#include "common/strict_json.hpp"

namespace di::tok::detail {

namespace {

using json = nlohmann::json;

// Token ids index dense tables, so one huge id allocates for every id below it (2^26 took
// 2.6 GB); the largest real vocabularies have ~260,000 ids.
constexpr std::int64_t k_max_token_id = std::int64_t(1) << 22;

// The GPT-2 split that ByteLevel applies itself when use_regex is true.
constexpr std::string_view k_gpt2_pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

struct parser {
  std::string_view origin;

  json parse(std::string_view text) const {
    try {
      return json::parse(text.begin(), text.end());
    } catch (const json::parse_error& e) {
      // nlohmann's message quotes the bytes it last read: escaped, an invalid UTF-8 byte or a
      // control character of the file does not reach the error line raw.
      DI_FAIL("{}: not valid JSON: {}", origin, printable(without_nlohmann_tag(e.what())));
    }
  }

  const json& require(const json& obj, const char* key, std::string_view path) const {
    DI_CHECK(obj.is_object(), "{}: {} must be an object", origin, path);
    auto it = obj.find(key);
    DI_CHECK(it != obj.end(), "{}: missing key '{}{}{}'", origin, path, path.empty() ? "" : ".",
             key);
    return *it;
  }

  std::string string_at(const json& obj, const char* key, std::string_view path) const {
    const json& v = require(obj, key, path);
    DI_CHECK(v.is_string(), "{}: {}.{} must be a string", origin, path, key);
    return v.get<std::string>();
  }

  bool flag(const json& obj, const char* key, std::string_view path, bool fallback) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return fallback;
    DI_CHECK(it->is_boolean(), "{}: {}.{} must be true or false", origin, path, key);
    return it->get<bool>();
  }

  // Fails unless `key` is absent, null, or equal to `allowed`.
  void expect(const json& obj, const char* key, std::string_view path, const json& allowed,
              std::string_view why) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null() || *it == allowed) return;
    DI_FAIL("{}: {}.{} = {} is not supported ({})", origin, path, key, json_brief(*it), why);
  }

  void model(const json& root, tokenizer_spec& spec) const;
  void vocab(const json& m, tokenizer_spec& spec) const;
  void merges(const json& m, tokenizer_spec& spec) const;
  void normalizer(const json& n, std::string path) const;
  void pre_tokenizer(const json& p, std::string path, tokenizer_spec& spec, bool& byte_level) const;
  void post_processor(const json& root) const;
  void decoder(const json& root) const;
  void added_tokens(const json& root, tokenizer_spec& spec) const;
};

void parser::model(const json& root, tokenizer_spec& spec) const {
  const json& m = require(root, "model", "");
  DI_CHECK(m.is_object(), "{}: model must be an object", origin);
  auto type = m.find("type");
  DI_CHECK(type != m.end() && type->is_string(), "{}: missing key 'model.type'", origin);
  DI_CHECK(*type == "BPE", "{}: model.type '{}' is not supported (only BPE)", origin,
           type->get<std::string>());
  expect(m, "dropout", "model", nullptr, "BPE dropout is not implemented");
  expect(m, "unk_token", "model", nullptr, "byte-level BPE needs no unknown token");
  expect(m, "byte_fallback", "model", false, "byte fallback is not implemented");
  expect(m, "continuing_subword_prefix", "model", "", "subword prefixes are not implemented");
  expect(m, "end_of_word_suffix", "model", "", "word suffixes are not implemented");
  spec.ignore_merges = flag(m, "ignore_merges", "model", false);
  vocab(m, spec);
  merges(m, spec);
}

void parser::vocab(const json& m, tokenizer_spec& spec) const {
  const json& v = require(m, "vocab", "model");
  DI_CHECK(v.is_object(), "{}: model.vocab must be an object of token -> id", origin);
  for (const auto& [token, id_json] : v.items()) {
    DI_CHECK(id_json.is_number_integer() && id_json.get<std::int64_t>() >= 0 &&
                 id_json.get<std::int64_t>() < k_max_token_id,
             "{}: model.vocab['{}'] must be an id in [0, 2^22), got {}", origin, token,
             id_json.dump());
    auto id = std::size_t(id_json.get<std::int64_t>());
    if (id >= spec.vocab.size()) {
      spec.vocab.resize(id + 1);
      spec.vocab_has_id.resize(id + 1, false);
    }
    DI_CHECK(!spec.vocab_has_id[id], "{}: model.vocab: id {} is used by both '{}' and '{}'", origin,
             id, spec.vocab[id], token);
    spec.vocab[id] = token;
    spec.vocab_has_id[id] = true;
  }
}

void parser::merges(const json& m, tokenizer_spec& spec) const {
  const json& list = require(m, "merges", "model");
  DI_CHECK(list.is_array(), "{}: model.merges must be an array", origin);
  std::unordered_map<std::string_view, std::uint32_t> ids;
  ids.reserve(spec.vocab.size());
  for (std::size_t id = 0; id < spec.vocab.size(); ++id) {
    if (spec.vocab_has_id[id]) ids.emplace(spec.vocab[id], std::uint32_t(id));
  }
  auto id_of = [&](const std::string& token, std::size_t i, const char* what) {
    auto it = ids.find(token);
    DI_CHECK(it != ids.end(), "{}: model.merges[{}]: {} '{}' is not in model.vocab", origin, i,
             what, token);
    return it->second;
  };
  spec.merges.reserve(list.size());
  for (std::size_t i = 0; i < list.size(); ++i) {
    const json& e = list[i];
    std::string left, right;
    if (e.is_string()) {
      const auto& s = e.get_ref<const std::string&>();
      auto space = s.find(' ');
      DI_CHECK(space != std::string::npos && space > 0 && space + 1 < s.size() &&
                   s.find(' ', space + 1) == std::string::npos,
               "{}: model.merges[{}] = '{}' must be two tokens separated by one space", origin, i,
               s);
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else {
      DI_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(),
               "{}: model.merges[{}] must be \"a b\" or [\"a\", \"b\"], got {}", origin, i,
               e.dump());
      left = e[0].get<std::string>();
      right = e[1].get<std::string>();
    }
    spec.merges.push_back({id_of(left, i, "token"), id_of(right, i, "token"),
                           id_of(left + right, i, "merged token")});
  }
}

void parser::normalizer(const json& n, std::string path) const {
  if (n.is_null()) return;
  std::string type = string_at(n, "type", path);
  DI_CHECK(type == "Sequence", "{}: {}.type '{}' is not supported (only an empty Sequence)", origin,
           path, type);
  const json& list = require(n, "normalizers", path);
  DI_CHECK(list.is_array(), "{}: {}.normalizers must be an array", origin, path);
  for (std::size_t i = 0; i < list.size(); ++i) {
    normalizer(list[i], fmt::format("{}.normalizers[{}]", path, i));
  }
}

void parser::pre_tokenizer(const json& p, std::string path, tokenizer_spec& spec,
                           bool& byte_level) const {
  std::string type = string_at(p, "type", path);
  DI_CHECK(!byte_level, "{}: {} ({}) comes after ByteLevel, which must be the last step", origin,
           path, type);
  if (type == "Sequence") {
    const json& list = require(p, "pretokenizers", path);
    DI_CHECK(list.is_array(), "{}: {}.pretokenizers must be an array", origin, path);
    for (std::size_t i = 0; i < list.size(); ++i) {
      pre_tokenizer(list[i], fmt::format("{}.pretokenizers[{}]", path, i), spec, byte_level);
    }
  } else if (type == "Split") {
    const json& pattern = require(p, "pattern", path);
    split_step step;
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      step.onig_pattern = pattern["Regex"].get<std::string>();
    } else {
      DI_CHECK(pattern.contains("String") && pattern["String"].is_string(),
               "{}: {}.pattern must be {{\"Regex\": ...}} or {{\"String\": ...}}", origin, path);
      step.onig_pattern = pattern["String"].get<std::string>();
      step.is_literal = true;
    }
    std::string behavior = string_at(p, "behavior", path);
    DI_CHECK(behavior == "Isolated" || behavior == "Removed",
             "{}: {}.behavior '{}' is not supported (only Isolated and Removed)", origin, path,
             behavior);
    step.behavior = behavior == "Isolated" ? split_behavior::isolated : split_behavior::removed;
    expect(p, "invert", path, false, "inverted splits are not implemented");
    spec.splits.push_back(std::move(step));
  } else if (type == "ByteLevel") {
    expect(p, "add_prefix_space", path, false, "a prefix space is not implemented");
    if (flag(p, "use_regex", path, true)) spec.splits.push_back({std::string(k_gpt2_pattern)});
    byte_level = true;
  } else {
    DI_FAIL("{}: {}.type '{}' is not supported (Sequence, Split and ByteLevel are)", origin, path,
            type);
  }
}

void parser::post_processor(const json& root) const {
  auto it = root.find("post_processor");
  if (it == root.end() || it->is_null()) return;
  std::string type = string_at(*it, "type", "post_processor");
  DI_CHECK(type == "ByteLevel", "{}: post_processor.type '{}' is not supported (only ByteLevel)",
           origin, type);
}

void parser::decoder(const json& root) const {
  const json& d = require(root, "decoder", "");
  DI_CHECK(!d.is_null(), "{}: decoder is null; a ByteLevel decoder is required", origin);
  std::string type = string_at(d, "type", "decoder");
  DI_CHECK(type == "ByteLevel", "{}: decoder.type '{}' is not supported (only ByteLevel)", origin,
           type);
}

void parser::added_tokens(const json& root, tokenizer_spec& spec) const {
  auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return;
  DI_CHECK(it->is_array(), "{}: added_tokens must be an array", origin);
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    std::string path = fmt::format("added_tokens[{}]", i);
    const json& id = require(t, "id", path);
    DI_CHECK(id.is_number_integer() && id.get<std::int64_t>() >= 0 &&
                 id.get<std::int64_t>() < k_max_token_id,
             "{}: {}.id must be an id in [0, 2^22), got {}", origin, path, json_brief(id));
    added_token tok;
    tok.id = std::int32_t(id.get<std::int64_t>());
    tok.content = string_at(t, "content", path);
    DI_CHECK(!tok.content.empty(), "{}: {}.content is empty", origin, path);
    DI_CHECK(!flag(t, "single_word", path, false), "{}: {}.single_word = true is not supported",
             origin, path);
    tok.special = flag(t, "special", path, false);
    tok.lstrip = flag(t, "lstrip", path, false);
    tok.rstrip = flag(t, "rstrip", path, false);
    tok.normalized = flag(t, "normalized", path, !tok.special);
    spec.added_tokens.push_back(std::move(tok));
  }
}

}  // namespace

tokenizer_spec parse_tokenizer_json(std::string_view text, std::string_view origin) {
  parser p{origin};
  json root = p.parse(text);
  DI_CHECK(root.is_object(), "{}: the top level must be a JSON object", origin);
  tokenizer_spec spec;
  p.model(root, spec);
  p.expect(root, "truncation", "", nullptr, "truncation is not implemented");
  p.expect(root, "padding", "", nullptr, "padding is not implemented");
  if (auto it = root.find("normalizer"); it != root.end()) p.normalizer(*it, "normalizer");
  bool byte_level = false;
  if (auto it = root.find("pre_tokenizer"); it != root.end() && !it->is_null()) {
    p.pre_tokenizer(*it, "pre_tokenizer", spec, byte_level);
  }
  DI_CHECK(byte_level, "{}: pre_tokenizer must end with ByteLevel (byte-level BPE)", origin);
  p.post_processor(root);
  p.decoder(root);
  p.added_tokens(root, spec);
  return spec;
}

void parse_tokenizer_config(std::string_view text, std::string_view origin, tokenizer_spec& spec) {
  parser p{origin};
  json root = p.parse(text);
  DI_CHECK(root.is_object(), "{}: the top level must be a JSON object", origin);
  auto token_content = [&](const char* key) -> std::optional<std::string> {
    auto it = root.find(key);
    if (it == root.end() || it->is_null()) return std::nullopt;
    if (it->is_string()) return it->get<std::string>();
    DI_CHECK(it->is_object(), "{}: {} must be a string, an AddedToken object or null", origin, key);
    return p.string_at(*it, "content", key);
  };
  spec.bos_token = token_content("bos_token");
  spec.eos_token = token_content("eos_token");
  spec.add_bos_token = p.flag(root, "add_bos_token", "tokenizer_config", false);
  spec.add_eos_token = p.flag(root, "add_eos_token", "tokenizer_config", false);
  DI_CHECK(!spec.add_bos_token || spec.bos_token,
           "{}: add_bos_token is true but bos_token is unset", origin);
  DI_CHECK(!spec.add_eos_token || spec.eos_token,
           "{}: add_eos_token is true but eos_token is unset", origin);
}

}  // namespace di::tok::detail
