// config.json parsing: both golden configs, and one clear error per kind of malformed input.
#include "common/error.hpp"
#include "common/mapped_file.hpp"
#include "config/model_config.hpp"
#include "tests/test_support.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <string>

using namespace di;
using json = nlohmann::json;

namespace {

json golden_json(const char* name) {
  return json::parse(read_text_file(test::shared_path(std::string("testdata/golden/") + name +
                                                      "/config.json").string()));
}

/// Parses `doc` and returns the error message (empty when it parsed).
std::string parse_error(const json& doc) {
  try {
    parse_model_config(doc.dump(), "cfg.json");
  } catch (const di::error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("the V4.1 golden config parses into the typed config") {
  auto c = load_model_config(test::shared_path("testdata/golden/v41_public").string());
  CHECK(c.family == model_family::deepseek_v41);
  CHECK(c.hidden_size == 32);
  CHECK(c.num_layers == 10);
  CHECK(c.num_heads == 4);
  CHECK(c.head_dim == 128);
  CHECK(c.rope_head_dim == 64);
  CHECK(c.q_lora_rank == 64);
  CHECK(c.o_lora_rank == 32);
  CHECK(c.o_groups == 2);
  CHECK(c.rms_norm_eps == doctest::Approx(1e-20));
  CHECK(c.quant.block_n == 32);
  CHECK(c.quant.block_k == 32);
  CHECK(c.quant.expert_dtype == "fp4");
  CHECK(c.compress_ratios == std::vector<int>{0, 0, 2, 2, 2, 2, 1, 1, 1, 1});
  CHECK(c.kv_source_of(3) == 2);
  CHECK(c.kv_source_of(9) == 6);
  CHECK(c.kv_source_of(1) == -1);
  CHECK(c.has_indexer(8));
  CHECK_FALSE(c.has_indexer(9));
  CHECK(c.candidate_source_layer_id == 6);
  CHECK(c.engram.layer_ids == std::vector<int>{1, 4});
  CHECK(c.engram.num_hash_columns() == 24);
  CHECK(c.engram.compressed_vocab_size == 98627);
  CHECK(c.yarn.enabled);
  CHECK(c.yarn.factor == 16);
  CHECK(c.compress_rope_theta == 160000);
  CHECK(c.image_token_id == 129264);
}

TEST_CASE("the V4 golden config parses into the typed config") {
  auto c = load_model_config(test::shared_path("testdata/golden/v4_public/config.json").string());
  CHECK(c.family == model_family::deepseek_v4);
  CHECK(c.hidden_size == 128);
  CHECK(c.num_layers == 6);
  CHECK(c.num_hash_layers == 3);
  CHECK(c.is_hash_routed(2));
  CHECK_FALSE(c.is_hash_routed(3));
  CHECK(c.quant.block_n == 128);
  CHECK(c.has_overlap(2));
  CHECK_FALSE(c.has_overlap(3));
  CHECK(c.has_indexer(4));
  CHECK_FALSE(c.has_indexer(5));
  CHECK(c.rms_norm_eps == doctest::Approx(1e-6));
  CHECK(c.yarn.enabled);
}

TEST_CASE("engram bucket primes follow the official layout") {
  engram_config e;
  e.layer_ids = {1, 4};
  e.max_ngram_size = 3;
  e.n_heads = 2;
  e.vocab_size = 10;
  auto p = engram_bucket_primes(e);
  REQUIRE(p.size() == 2);
  CHECK(p[0] == std::vector<std::int64_t>{11, 13, 17, 19});
  CHECK(p[1] == std::vector<std::int64_t>{23, 29, 31, 37});
}

TEST_CASE("malformed config.json gives one clear error naming the key") {
  json v41 = golden_json("v41_public");
  json v4 = golden_json("v4_public");
  struct mutation {
    const char* what;
    json base;
    std::function<void(json&)> edit;
    const char* expect;
  };
  const mutation cases[] = {
      {"unknown model type", v4, [](json& j) { j["model_type"] = "llama"; },
       "unsupported model type 'llama'"},
      {"missing model type", v4, [](json& j) { j.erase("model_type"); },
       "key 'model_type': missing"},
      {"missing text_config", v41, [](json& j) { j.erase("text_config"); },
       "key 'text_config': missing"},
      {"missing hidden", v4, [](json& j) { j.erase("hidden_size"); }, "key 'hidden_size': missing"},
      {"string where int", v4, [](json& j) { j["num_hidden_layers"] = "six"; },
       "key 'num_hidden_layers': expected an integer, got \"six\""},
      {"fractional int", v4, [](json& j) { j["head_dim"] = 127.5; },
       "key 'head_dim': expected an integer"},
      {"negative size", v41, [](json& j) { j["text_config"]["hidden_size"] = -32; },
       "key 'text_config.hidden_size': must be a positive integer"},
      {"zero context", v41, [](json& j) { j["text_config"]["max_position_embeddings"] = 0; },
       "key 'text_config.max_position_embeddings': must be a positive integer"},
      {"negative rope base", v4, [](json& j) { j["rope_theta"] = -1; },
       "key 'rope_theta': must be a positive number, got -1"},
      {"ratios too short", v4, [](json& j) { j["compress_ratios"].erase(0); },
       "key 'compress_ratios': has 5 entries but num_hidden_layers is 6"},
      {"ratios not a list", v4, [](json& j) { j["compress_ratios"] = 4; },
       "key 'compress_ratios': expected a list of integers"},
      // V4.1's text keys are under text_config: named so like the reader's own errors
      {"v41 ratios too short", v41, [](json& j) { j["text_config"]["compress_ratios"].erase(0); },
       "key 'text_config.compress_ratios': has"},
      {"v41 ratio negative", v41, [](json& j) { j["text_config"]["compress_ratios"][0] = -1; },
       "key 'text_config.compress_ratios': entry 0 is negative (-1)"},
      {"v41 odd rope dim", v41, [](json& j) { j["text_config"]["qk_rope_head_dim"] = 7; },
       "key 'text_config.qk_rope_head_dim': must be even"},
      {"kv source uncompressed", v41,
       [](json& j) {
         j["text_config"]["kv_source_layer_ids"] = {1, 2, 4, 6};
       },
       "layer 1 has compress ratio 0"},
      {"kv source out of range", v41,
       [](json& j) {
         j["text_config"]["kv_source_layer_ids"] = {2, 4, 60};
       },
       "layer id 60 out of range"},
      {"kv sources unsorted", v41,
       [](json& j) {
         j["text_config"]["kv_source_layer_ids"] = {4, 2, 6};
       },
       "strictly increasing"},
      {"group ratio mismatch", v41,
       [](json& j) {
         j["text_config"]["kv_source_layer_ids"] = {2, 4};
       },
       "layer 6 (ratio 1) reads the compressed KV of layer 4 (ratio 2)"},
      {"no index source in group", v41,
       [](json& j) {
         j["text_config"]["index_source_layer_ids"] = {2, 4, 6, 8};
         j["text_config"]["kv_source_layer_ids"] = {2, 4, 6, 9};
       },
       "KV source layer 9 must also be an index source"},
      {"candidate not index source", v41,
       [](json& j) { j["text_config"]["candidate_source_layer_id"] = 7; },
       "'text_config.candidate_source_layer_id': layer 7 is not an index source"},
      {"engram rows wrong", v41,
       [](json& j) {
         j["text_config"]["engram_num_embeddings"] = {14188, 17000};
       },
       "entry 1 is 17000 but the prime bucket layout of layer 4 needs 17942 rows"},
      // values that were truncated to int, or accepted and turned into NaN logits
      {"kv heads past int", v4, [](json& j) { j["num_key_value_heads"] = 4294967297LL; },
       "key 'num_key_value_heads': 4294967297 is too large (at most 2147483647)"},
      {"kv heads zero", v4, [](json& j) { j["num_key_value_heads"] = 0; },
       "key 'num_key_value_heads': must be in [1, 2147483647], got 0"},
      // a positive value past the limit is too large (it "must be a positive integer"), one
      // past 2^63 - 1 is not read as a negative one, and a list entry is not truncated to int
      {"experts past int", v4, [](json& j) { j["n_routed_experts"] = 1099511627776LL; },
       "key 'n_routed_experts': 1099511627776 is too large (at most 2147483647)"},
      {"hidden past int64", v41,
       [](json& j) { j["text_config"]["hidden_size"] = 18446744073709551615ULL; },
       "key 'text_config.hidden_size': 18446744073709551615 is too large (at most 2147483647)"},
      {"bos past int64", v4, [](json& j) { j["bos_token_id"] = 9223372036854775808ULL; },
       "key 'bos_token_id': 9223372036854775808 is too large (at most 9223372036854775807)"},
      {"float past int64", v4, [](json& j) { j["eos_token_id"] = -1e19; },
       "key 'eos_token_id': -1e+19 is too small (at least -9223372036854775808)"},
      {"integral float", v4, [](json& j) { j["vocab_size"] = 1e16; },
       "key 'vocab_size': 1e+16 is too large (at most 2147483647)"},
      {"ratio past int", v41,
       [](json& j) { j["text_config"]["compress_ratios"][0] = 4294967300LL; },
       "key 'text_config.compress_ratios': entry 0: 4294967300 is too large (at most "
       "2147483647)"},
      {"block past int64", v4,
       [](json& j) { j["quantization_config"]["weight_block_size"][1] = 18446744073709551615ULL; },
       "key 'quantization_config.weight_block_size': entry 1: 18446744073709551615 is too large"},
      {"sinkhorn iterations", v4, [](json& j) { j["hc_sinkhorn_iters"] = -1; },
       "key 'hc_sinkhorn_iters': must be in [1, 10000], got -1"},
      {"gate temperature", v4, [](json& j) { j["gate_temp"] = 0; },
       "key 'gate_temp': must be a positive number, got 0"},
      {"yarn factor", v4, [](json& j) { j["rope_scaling"]["factor"] = 0; },
       "must be a positive number, got 0"},
      {"hc eps", v4, [](json& j) { j["hc_eps"] = -1e-6; },
       "key 'hc_eps': must be a positive number"},
      // (it searched the primes in quadratic time: 10000 ran for minutes and blocked serve)
      {"engram columns", v41, [](json& j) { j["text_config"]["engram_max_ngram_size"] = 10000; },
       "(max_ngram_size - 1) * n_heads must be at most 1024"},
      {"engram list length", v41,
       [](json& j) { j["text_config"]["engram_num_embeddings"] = {14188}; },
       "has 1 entries for 2 engram layers"},
      {"hash layers in v41", v41, [](json& j) { j["text_config"]["num_hash_layers"] = 2; },
       "hash routing is a deepseek_v4 feature"},
      {"too many hash layers", v4, [](json& j) { j["num_hash_layers"] = 7; },
       "key 'num_hash_layers': 7 outside"},
      {"block size", v4, [](json& j) { j["quantization_config"]["weight_block_size"] = {128}; },
       "key 'quantization_config.weight_block_size': expected two positive integers"},
      {"quant method", v4, [](json& j) { j["quantization_config"]["quant_method"] = "gptq"; },
       "unsupported quantization 'gptq'"},
      {"topk > experts", v4, [](json& j) { j["num_experts_per_tok"] = 9; },
       "key 'num_experts_per_tok': 9 exceeds n_routed_experts (8)"},
      {"rope dim", v4, [](json& j) { j["qk_rope_head_dim"] = 63; },
       "key 'qk_rope_head_dim': must be even"},
      {"o_groups", v4, [](json& j) { j["o_groups"] = 3; }, "key 'o_groups'"},
      {"rope scaling type", v4, [](json& j) { j["rope_scaling"]["type"] = "linear"; },
       "key 'rope_scaling.rope_type': unsupported rope scaling 'linear'"},
      // accepted unchecked before: an activation other than SiLU ran as SiLU, reversed YaRN
      // betas interpolated the wrong dimensions, token ids past the vocabulary
      {"activation", v41, [](json& j) { j["text_config"]["hidden_act"] = "gelu"; },
       "key 'text_config.hidden_act': unsupported activation 'gelu' (supported: silu)"},
      // accepted and ignored before (helper-42): other router scores or top-k methods, tied
      // embeddings; an eps that overflows float (every logit 0), a negative SwiGLU clamp
      {"scoring func", v4, [](json& j) { j["scoring_func"] = "softmax"; },
       "key 'scoring_func': unsupported scoring function 'softmax' (supported: sqrtsoftplus)"},
      {"topk method", v4, [](json& j) { j["topk_method"] = "greedy"; },
       "key 'topk_method': unsupported top-k method 'greedy' (supported: noaux_tc)"},
      {"tied embeddings", v4, [](json& j) { j["tie_word_embeddings"] = true; },
       "key 'tie_word_embeddings': tied embeddings are not supported"},
      {"rms eps", v4, [](json& j) { j["rms_norm_eps"] = 1e300; },
       "key 'rms_norm_eps': must be in [0, 1), got 1e+300"},
      {"swiglu limit", v41, [](json& j) { j["text_config"]["swiglu_limit"] = -1; },
       "key 'text_config.swiglu_limit': must be a finite number >= 0 (0: no clamp), got -1"},
      {"yarn betas reversed", v4, [](json& j) { j["rope_scaling"]["beta_fast"] = 0.5; },
       "key 'rope_scaling.beta_fast': must be larger than beta_slow (0.5 vs 1)"},
      {"pad id", v41, [](json& j) { j["pad_token_id"] = 129280; },
       "key 'pad_token_id': 129280 outside the vocabulary [0, 129280) (-1: none)"},
      {"image id", v41, [](json& j) { j["image_token_id"] = -2; },
       "key 'image_token_id': -2 outside the vocabulary"},
      // the file's strings are quoted with what does not print escaped (ESC cleared a terminal)
      {"model type with control characters", v4, [](json& j) { j["model_type"] = "x\x1b[2J\n"; },
       "key 'model_type': unsupported model type 'x\\x1B[2J\\n'"},
  };
  for (const auto& m : cases) {
    CAPTURE(m.what);
    json doc = m.base;
    m.edit(doc);
    std::string err = parse_error(doc);
    CHECK_MESSAGE(err.find(m.expect) != std::string::npos, "got: " << err);
    CHECK(err.rfind("cfg.json: ", 0) == 0);
  }
}

TEST_CASE("non-JSON and non-object config files are rejected") {
  // the parser's reason with its line and column (it was "not valid JSON" alone)
  CHECK_THROWS_WITH_AS(
      parse_model_config("{\n  \"model_type\": ,", "x.json"),
      doctest::Contains("x.json: not valid JSON: parse error at line 2, column 17"), di::error);
  // a key given twice: JSON parsers keep one silently (Python the last)
  json dup = golden_json("v4_public");
  std::string text = dup.dump(1);
  text.insert(text.find("\"hidden_size\""), "\"hidden_size\": 1,\n");
  CHECK_THROWS_WITH_AS(parse_model_config(text, "x.json"),
                       "x.json: key 'hidden_size' is given twice in one object", di::error);
  json nested = golden_json("v41_public");
  text = nested.dump(1);
  text.insert(text.find("\"beta_fast\""), "\"beta_fast\": 2,\n");
  CHECK_THROWS_WITH_AS(
      parse_model_config(text, "x.json"),
      "x.json: key 'text_config.rope_scaling.beta_fast' is given twice in one object", di::error);
  CHECK_NOTHROW(parse_model_config(nested.dump(1), "x.json"));  // the same keys in two objects
  // the key and the bytes the parser last read are shown escaped, not raw
  CHECK_THROWS_WITH_AS(parse_model_config(R"({"a\u001b\n": 1, "a\u001b\n": 2})", "x.json"),
                       "x.json: key 'a\\x1B\\n' is given twice in one object", di::error);
  CHECK_THROWS_WITH_AS(parse_model_config("{\"model_type\": \"\xFF\"}", "x.json"),
                       doctest::Contains("last read: '\"\\xFF'"), di::error);
  CHECK_THROWS_WITH_AS(parse_model_config("[1,2]", "x.json"),
                       "x.json: expected a JSON object at the top level", di::error);
  test::temp_dir dir;
  CHECK_THROWS_AS(load_model_config(dir.path().string()), di::error);  // no config.json inside
}
