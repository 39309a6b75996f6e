// What tokenizer.json and tokenizer_config.json say, checked and reduced to the parts this
// tokenizer implements. Parsing rejects every setting it does not implement with a
// di::error naming the key, so a tokenizer never silently encodes differently from HF.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/detail/added_tokens.hpp"
#include "model/tokenizer/detail/pre_tokenizer.hpp"

namespace di::tok::detail {

/// One merge rule by ids, in rank order.
struct merge_spec {
  std::uint32_t left;
  std::uint32_t right;
  std::uint32_t merged;
};

/// The validated content of both files.
struct tokenizer_spec {
  std::vector<std::string> vocab;  ///< model vocabulary by id ("" for unused ids)
  std::vector<bool> vocab_has_id;  ///< whether vocab[id] is a real entry
  std::vector<merge_spec> merges;  ///< index = rank
  bool ignore_merges = false;      ///< a piece that is a vocab token is not merged
  std::vector<added_token> added_tokens;
  std::vector<split_step> splits;        ///< pre-tokenizer Split steps before ByteLevel
  std::optional<std::string> bos_token;  ///< tokenizer_config.json bos_token content
  std::optional<std::string> eos_token;
  bool add_bos_token = false;
  bool add_eos_token = false;
};

/// Parses and validates tokenizer.json; `origin` prefixes error messages.
tokenizer_spec parse_tokenizer_json(std::string_view text, std::string_view origin);

/// Parses tokenizer_config.json into `spec` (BOS/EOS and the add_*_token flags).
void parse_tokenizer_config(std::string_view text, std::string_view origin, tokenizer_spec& spec);

}  // namespace di::tok::detail
