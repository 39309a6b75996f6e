// Stop conditions of one request, applied to the streamed output: stop token ids (EOS unless
// ignored), stop strings that may span token boundaries (from min_tokens on), and max_tokens. Text
// that could be the start of a stop string is held back until it is known not to be one, so a
// client never sees text that is later cut.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace di::runtime {

/// Why a request ended (OpenAI's finish_reason; `none` while it runs).
enum class finish_reason : std::uint8_t { none, stop, length };
std::string_view to_string(finish_reason reason);

struct stop_config {
  std::vector<std::string> stop_strings;     ///< non-empty, matched in the output text
  std::vector<std::int32_t> stop_token_ids;  ///< the caller adds EOS here unless ignore_eos
  std::int64_t max_tokens = -1;              ///< -1: unlimited
  /// Stop strings end the request only once completed by this token or a later one (counted
  /// from 1); text before is not held back beyond a possible stop string's start.
  std::int64_t min_tokens = 0;
  bool include_stop_string =
      false;  ///< keep the matched stop string (or stop token's text) in the output
};

/// What one generated token changed.
struct stop_update {
  std::string text;  ///< output text that is final now (may be empty)
  finish_reason reason = finish_reason::none;
  std::int32_t stop_token = -1;  ///< the stop token id that ended the request, or -1
  std::string stop_string;       ///< the stop string that ended it, or empty
  bool finished() const { return reason != finish_reason::none; }
};

class stop_checker {
 public:
  /// Throws di::error for an empty stop string or max_tokens == 0 / < -1.
  explicit stop_checker(stop_config config);

  /// The next generated token and the text the detokenizer completed with it (possibly
  /// empty). After a finished update, further calls are an error.
  stop_update push(std::int32_t token, std::string_view text);
  /// Ends a stream that stopped for another reason (e.g. the context is full): the
  /// held-back text, now final.
  std::string flush();

  std::int64_t num_tokens() const { return num_tokens_; }
  bool finished() const { return finished_; }

 private:
  /// Length of the longest suffix of pending_ that is a proper prefix of a stop string.
  std::size_t held_back_length() const;
  stop_update finish(finish_reason reason, std::string text);

  stop_config config_;
  std::string pending_;  // text not yet emitted (a possible stop-string start)
  // Bytes at pending_'s start pushed before min_tokens: a stop string ending there is not one.
  std::size_t unchecked_ = 0;
  std::int64_t num_tokens_ = 0;
  bool finished_ = false;
};

}  // namespace di::runtime
