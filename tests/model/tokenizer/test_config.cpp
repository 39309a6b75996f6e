// tokenizer.json handling on small synthetic tokenizers: each unsupported or malformed setting
// is one clear di::error naming the key; supported variations (added-token flags, Removed
// splits, literal patterns, ignore_merges, BOS forms, path indirection) behave like HF.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "model/tokenizer/detail/byte_level.hpp"
#include "model/tokenizer/tokenizer.hpp"
#include "tests/test_support.hpp"

namespace {

using json = nlohmann::json;
using di::tok::token_id;
using di::tok::tokenizer;
using ids = std::vector<token_id>;

// 256 byte tokens (id = byte), "ab" = 256, "abc" = 257, "Ġa" = 258; added "<s>" = 259 (special).
json minimal_tokenizer() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[di::tok::detail::bytes_to_token(std::string(1, char(b)))] = b;
  vocab["ab"] = 256;
  vocab["abc"] = 257;
  vocab
      ["\xC4\xA0"
       "a"] = 258;
  json byte_level = {{"type", "ByteLevel"},
                     {"add_prefix_space", false},
                     {"trim_offsets", true},
                     {"use_regex", true}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens",
           {{{"id", 259},
             {"content", "<s>"},
             {"single_word", false},
             {"lstrip", false},
             {"rstrip", false},
             {"normalized", false},
             {"special", true}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level},
          {"post_processor", byte_level},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"byte_fallback", false},
            {"vocab", vocab},
            {"merges", {"a b", "ab c", "\xC4\xA0 a"}}}}};
}

tokenizer load(const json& j, std::string_view config = "") {
  return tokenizer::from_json(j.dump(), config);
}

// The message of the di::error that loading `text` raises, or "" if it loads.
std::string load_error(std::string_view text, std::string_view config = "") {
  try {
    tokenizer::from_json(text, config);
  } catch (const di::error& e) {
    return e.what();
  }
  return "";
}

std::string json_error(const json& j) {
  return load_error(j.dump());
}

bool contains(const std::string& s, std::string_view part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("the minimal tokenizer loads and merges") {
  auto tok = load(minimal_tokenizer());
  CHECK(tok.vocab_size() == 260);
  CHECK(tok.encode("abc") == ids{257});
  CHECK(tok.encode("ab a") == ids{256, 258});
  CHECK(tok.encode("x<s>abc") == ids{'x', 259, 257});
  CHECK(tok.decode(ids{'x', 259, 257}) == "x<s>abc");
  CHECK(tok.decode(ids{'x', 259, 257}, {.skip_special_tokens = true}) == "xabc");
  CHECK(tok.bos_id() == std::nullopt);
  CHECK(tok.encode("a", {.add_bos = true}) == ids{'a'});  // no tokenizer_config.json
}

TEST_CASE("malformed tokenizer.json gives one clear error each") {
  CHECK(contains(load_error("{not json"), "not valid JSON"));
  CHECK(contains(load_error("[1, 2]"), "top level must be a JSON object"));

  json j = minimal_tokenizer();
  j.erase("model");
  CHECK(contains(json_error(j), "missing key 'model'"));

  j = minimal_tokenizer();
  j["model"]["type"] = "WordPiece";
  CHECK(contains(json_error(j), "model.type 'WordPiece' is not supported"));

  j = minimal_tokenizer();
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}}}};
  CHECK(contains(json_error(j), "pre_tokenizer.pretokenizers[0].type 'Digits' is not supported"));

  j = minimal_tokenizer();
  j["model"]["merges"].push_back("a zz");
  CHECK(contains(json_error(j), "model.merges[3]: token 'zz' is not in model.vocab"));

  j = minimal_tokenizer();
  j["model"]["merges"].push_back(json::array({"b", "c"}));
  CHECK(contains(json_error(j), "model.merges[3]: merged token 'bc' is not in model.vocab"));

  j = minimal_tokenizer();
  j["model"]["merges"].push_back("abc");
  CHECK(contains(json_error(j), "model.merges[3] = 'abc' must be two tokens"));

  j = minimal_tokenizer();
  j["model"]["vocab"]["xyz"] = 5;
  CHECK(contains(json_error(j), "model.vocab: id 5 is used by both"));

  j = minimal_tokenizer();
  j["model"]["vocab"]["xyz"] = -1;
  CHECK(contains(json_error(j), "model.vocab['xyz'] must be an id"));

  // one huge id made a table with a slot for every id below it (2^26: 2.6 GB)
  j = minimal_tokenizer();
  j["model"]["vocab"]["xyz"] = 1 << 26;
  CHECK(contains(json_error(j), "model.vocab['xyz'] must be an id in [0, 2^22), got 67108864"));
  j = minimal_tokenizer();
  j["added_tokens"] = json::array({{{"id", 1 << 26}, {"content", "<big>"}, {"special", true}}});
  CHECK(contains(json_error(j), "must be an id in [0, 2^22), got 67108864"));

  j = minimal_tokenizer();
  j["model"]["vocab"].erase("a");
  j["model"]["merges"] = json::array();
  CHECK(contains(json_error(j), "lacks the byte-level token 'a' of byte 0x61"));
}

TEST_CASE("bad added tokens are rejected") {
  json j = minimal_tokenizer();
  j["added_tokens"][0]["id"] = 97;
  CHECK(contains(json_error(j), "added_tokens[0]: id 97 of '<s>' already belongs to token 'a'"));

  j = minimal_tokenizer();
  j["added_tokens"][0]["content"] = "ab";
  CHECK(contains(json_error(j), "added_tokens[0]: 'ab' has id 259 but is token 256 already"));

  j = minimal_tokenizer();
  j["added_tokens"][0]["content"] = "";
  CHECK(contains(json_error(j), "added_tokens[0].content is empty"));

  j = minimal_tokenizer();
  j["added_tokens"][0].erase("id");
  CHECK(contains(json_error(j), "missing key 'added_tokens[0].id'"));

  j = minimal_tokenizer();
  j["added_tokens"][0]["single_word"] = true;
  CHECK(contains(json_error(j), "added_tokens[0].single_word = true is not supported"));

  j = minimal_tokenizer();
  j["added_tokens"].push_back(j["added_tokens"][0]);
  j["added_tokens"][1]["content"] = "<t>";
  CHECK(contains(json_error(j), "added_tokens[1]: id 259 of '<t>' already belongs to token '<s>'"));
}

TEST_CASE("settings that are not implemented are rejected by name") {
  auto error_with = [](const char* section, const json& value) {
    json j = minimal_tokenizer();
    j[section] = value;
    return json_error(j);
  };
  auto model_error_with = [](const char* key, const json& value) {
    json j = minimal_tokenizer();
    j["model"][key] = value;
    return json_error(j);
  };
  CHECK(contains(model_error_with("dropout", 0.1), "model.dropout = 0.1 is not supported"));
  CHECK(contains(model_error_with("unk_token", "<unk>"), "model.unk_token"));
  CHECK(contains(model_error_with("byte_fallback", true), "model.byte_fallback = true"));
  CHECK(contains(model_error_with("continuing_subword_prefix", "##"),
                 "model.continuing_subword_prefix"));
  CHECK(contains(error_with("normalizer", {{"type", "NFC"}}),
                 "normalizer.type 'NFC' is not supported"));
  CHECK(contains(error_with("decoder", {{"type", "Metaspace"}}), "decoder.type 'Metaspace'"));
  CHECK(contains(error_with("decoder", nullptr), "decoder is null"));
  CHECK(contains(error_with("post_processor", {{"type", "TemplateProcessing"}}),
                 "post_processor.type 'TemplateProcessing' is not supported"));
  CHECK(contains(error_with("truncation", {{"max_length", 8}}), "truncation"));
  CHECK(contains(error_with("padding", {{"strategy", "BatchLongest"}}), "padding"));
  CHECK(contains(error_with("pre_tokenizer", nullptr), "must end with ByteLevel"));
  CHECK(contains(error_with("pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", true}}),
                 "pre_tokenizer.add_prefix_space = true is not supported"));
  json split = {{"type", "Split"},
                {"pattern", {{"Regex", "a"}}},
                {"behavior", "Isolated"},
                {"invert", false}};
  json bad_behavior = split;
  bad_behavior["behavior"] = "MergedWithPrevious";
  CHECK(contains(error_with("pre_tokenizer", bad_behavior), "behavior 'MergedWithPrevious'"));
  json inverted = split;
  inverted["invert"] = true;
  CHECK(contains(error_with("pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", {inverted}}}),
                 "pre_tokenizer.pretokenizers[0].invert = true"));
  json bad_regex = split;
  bad_regex["pattern"]["Regex"] = "(unclosed";
  CHECK(contains(
      error_with("pre_tokenizer",
                 {{"type", "Sequence"}, {"pretokenizers", {bad_regex, {{"type", "ByteLevel"}}}}}),
      "pre_tokenizer Split step 0: invalid regex"));
  json after = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "ByteLevel"}}, split}}};
  CHECK(contains(error_with("pre_tokenizer", after), "comes after ByteLevel"));
}

TEST_CASE("tokenizer_config.json: BOS/EOS as string or AddedToken, and errors") {
  json j = minimal_tokenizer();
  auto tok = load(j, R"({"add_bos_token": true, "add_eos_token": true, "bos_token": "<s>",
                        "eos_token": {"__type": "AddedToken", "content": "abc"}})");
  CHECK(tok.bos_id() == 259);
  CHECK(tok.eos_id() == 257);
  CHECK(tok.encode("a", {.add_bos = true}) == ids{259, 'a', 257});
  CHECK(tok.encode("a", {.add_special_tokens = true}) == ids{'a'});
  CHECK(contains(load_error(j.dump(), R"({"bos_token": "<nope>"})"),
                 "bos_token '<nope>' is not a token"));
  CHECK(contains(load_error(j.dump(), R"({"add_bos_token": true})"), "add_bos_token is true but"));
  CHECK(contains(load_error(j.dump(), R"({"bos_token": 5})"), "bos_token must be a string"));
}

TEST_CASE("added-token flags: lstrip, rstrip and the normalized second pass") {
  json j = minimal_tokenizer();
  j["added_tokens"][0]["lstrip"] = true;
  j["added_tokens"][0]["rstrip"] = true;
  // "<" + "s" is also a normalized token; the non-normalized "<s>" pass runs first.
  j["added_tokens"].push_back(
      {{"id", 260}, {"content", "x<"}, {"normalized", true}, {"special", false}});
  auto tok = load(j);
  CHECK(tok.encode("a \t<s>\n b") == ids{'a', 259, 'b'});
  CHECK(tok.encode("x<s>") == ids{'x', 259});
  CHECK(tok.encode("x<a") == ids{260, 'a'});
  CHECK(tok.decode(ids{260, 259}, {.skip_special_tokens = true}) == "x<");
}

TEST_CASE("Split variants: Removed behaviour, literal pattern, ignore_merges") {
  json j = minimal_tokenizer();
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"String", "-"}}},
         {"behavior", "Removed"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  auto tok = load(j);
  CHECK(tok.encode("abc-ab") == ids{257, 256});
  CHECK(tok.encode("a b") == ids{'a', ' ', 'b'});   // no regex split: no "Ġb" piece start
  CHECK(tok.encode("a ab") == ids{'a', ' ', 256});  // "a b" (rank 0) beats "Ġ a" (rank 2)

  j["model"]["merges"] = {"a b"};
  j["model"]["ignore_merges"] = true;
  auto whole = load(j);
  CHECK(whole.encode("abc") == ids{257});  // in the vocab: taken whole despite no "ab c" merge
  CHECK(whole.encode("abca") == ids{256, 'c', 'a'});
}

TEST_CASE("from_dir reads both files and follows a one-line path indirection") {
  di::test::temp_dir dir("tokenizer");
  std::filesystem::create_directories(dir / "real");
  di::test::write_file(dir / "real" / "tokenizer.json", minimal_tokenizer().dump());
  di::test::write_file(dir / "real" / "tokenizer_config.json", R"({"bos_token": "<s>"})");
  std::filesystem::create_directories(dir / "link");
  di::test::write_file(dir / "link" / "tokenizer.json", "../real/tokenizer.json\n");
  di::test::write_file(dir / "link" / "tokenizer_config.json", "../real/tokenizer_config.json");
  CHECK(tokenizer::from_dir((dir / "real").string()).bos_id() == 259);
  CHECK(tokenizer::from_dir((dir / "link").string()).encode("abc") == ids{257});
  CHECK(tokenizer::from_dir((dir / "link").string()).bos_id() == 259);
  CHECK_THROWS_WITH_AS(tokenizer::from_dir((dir / "missing").string()),
                       doctest::Contains("cannot open"), di::error);
  // A short file that is neither JSON nor a path to a file is reported as bad JSON.
  std::filesystem::create_directories(dir / "bad");
  di::test::write_file(dir / "bad" / "tokenizer.json", "oops");
  CHECK_THROWS_WITH_AS(tokenizer::from_dir((dir / "bad").string()),
                       doctest::Contains("bad/tokenizer.json: not valid JSON"), di::error);
  di::test::write_file(dir / "bad" / "tokenizer.json", minimal_tokenizer().dump());
  di::test::write_file(dir / "bad" / "tokenizer_config.json", R"({"bos_token": "<zz>"})");
  CHECK_THROWS_WITH_AS(tokenizer::from_dir((dir / "bad").string()),
                       doctest::Contains("bad/tokenizer_config.json: bos_token '<zz>'"), di::error);
}
