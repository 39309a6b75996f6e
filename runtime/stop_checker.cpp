// stop_checker: earliest stop-string match over held-back text, stop tokens, max_tokens.
#include "runtime/stop_checker.hpp"

#include "runtime/failure.hpp"

#include "model/tokenizer/detail/utf8.hpp"

#include "common/error.hpp"

#include <algorithm>
#include <utility>

namespace di::runtime {

std::string_view to_string(finish_reason reason) {
  switch (reason) {
    case finish_reason::none: return "none";
    case finish_reason::stop: return "stop";
    case finish_reason::length: return "length";
  }
  return "?";
}

stop_checker::stop_checker(stop_config config) : config_(std::move(config)) {
  for (const auto& s : config_.stop_strings) {
    DI_CHECK_PARAM(!s.empty(), "stop", "stop strings must not be empty");
    // Output text is valid UTF-8, so such a stop string could never match.
    if (const std::size_t at = tok::detail::find_invalid_utf8(s); at != s.size())
      throw invalid_param(
          "stop",
          fmt::format("stop strings must be valid UTF-8 (byte 0x{:02X} at offset {})",
                      unsigned(std::uint8_t(s[at])), at),
          __FILE__, __LINE__);
  }
  DI_CHECK_PARAM(config_.max_tokens == -1 || config_.max_tokens > 0, "max_tokens",
                 "max_tokens must be positive (or -1 for no limit), got {}", config_.max_tokens);
}

stop_update stop_checker::finish(finish_reason reason, std::string text) {
  finished_ = true;
  pending_.clear();
  stop_update u;
  u.reason = reason;
  u.text = std::move(text);
  return u;
}

std::size_t stop_checker::held_back_length() const {
  std::size_t best = 0;
  for (const auto& s : config_.stop_strings) {
    std::size_t limit = std::min(s.size() - 1, pending_.size());
    for (std::size_t n = limit; n > best; --n) {
      if (pending_.compare(pending_.size() - n, n, s, 0, n) == 0) {
        best = n;
        break;
      }
    }
  }
  return best;
}

stop_update stop_checker::push(std::int32_t token, std::string_view text) {
  DI_CHECK(!finished_, "stop_checker: a token was pushed after the request finished");
  ++num_tokens_;
  auto& ids = config_.stop_token_ids;
  if (std::find(ids.begin(), ids.end(), token) != ids.end()) {
    if (config_.include_stop_string) pending_.append(text);  // vLLM keeps the token's text too
    stop_update u = finish(finish_reason::stop, std::move(pending_));
    u.stop_token = token;
    return u;
  }
  pending_.append(text);
  // The earliest occurrence of any stop string wins (the first listed on a tie); before
  // min_tokens none counts, and from then on none that ended before it.
  std::size_t best_pos = std::string::npos;
  const std::string* best = nullptr;
  if (num_tokens_ >= config_.min_tokens) {
    for (const auto& s : config_.stop_strings) {
      const std::size_t from = unchecked_ >= s.size() ? unchecked_ - s.size() + 1 : 0;
      std::size_t pos = pending_.find(s, from);
      if (pos < best_pos) {
        best_pos = pos;
        best = &s;
      }
    }
  }
  if (best != nullptr) {
    std::string out = pending_.substr(0, best_pos + (config_.include_stop_string ? best->size() : 0));
    std::string matched = *best;
    stop_update u = finish(finish_reason::stop, std::move(out));
    u.stop_string = std::move(matched);
    return u;
  }
  if (config_.max_tokens != -1 && num_tokens_ >= config_.max_tokens)
    return finish(finish_reason::length, std::move(pending_));
  std::size_t keep = held_back_length();
  unchecked_ = num_tokens_ < config_.min_tokens ? keep : 0;
  stop_update u;
  u.text = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return u;
}

std::string stop_checker::flush() {
  finished_ = true;
  return std::exchange(pending_, std::string());
}

}  // namespace di::runtime
