// Added (special and user) tokens are cut out of the raw text before pre-tokenization, as in
// HF's AddedVocabulary: non-normalized tokens first, then normalized ones inside the remaining
// text (the normalizer is the identity here), each pass leftmost-longest.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace di::tok::detail {

/// One entry of tokenizer.json's `added_tokens`.
struct added_token {
  std::int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;      ///< swallow whitespace on the left into the match
  bool rstrip = false;      ///< swallow whitespace on the right into the match
  bool normalized = false;  ///< matched after normalization (second pass)
};

/// A part of the text: an added token (`id` >= 0) or plain text to pre-tokenize (`id` == -1).
struct text_segment {
  std::uint32_t begin;
  std::uint32_t end;
  std::int32_t id;
};

/// Finds added tokens in text. Immutable after construction; shareable between threads.
class added_token_matcher {
 public:
  explicit added_token_matcher(const std::vector<added_token>& tokens);

  /// Replaces `out` with the segments of `text`, in order; `scratch` is reused.
  void split(std::string_view text, std::vector<text_segment>& out,
             std::vector<text_segment>& scratch) const;

 private:
  // A byte trie over token contents; node 0 is the root.
  struct trie {
    struct node {
      std::int32_t token = -1;  // index into tokens_, -1 if no token ends here
      std::vector<std::pair<unsigned char, std::uint32_t>> children;
    };
    std::vector<node> nodes{node{}};
    bool is_first_byte[256] = {};
    int num_first_bytes = 0;
    unsigned char only_first_byte = 0;

    void add(std::string_view content, std::int32_t token);
    /// Length and token of the longest content starting at `pos`, or {0, -1}.
    std::pair<std::size_t, std::int32_t> longest_at(std::string_view text, std::size_t pos) const;
    std::size_t next_candidate(std::string_view text, std::size_t pos) const;
    bool empty() const { return nodes.size() == 1; }
  };

  void split_pass(const trie& t, std::string_view text, text_segment seg,
                  std::vector<text_segment>& out) const;

  std::vector<added_token> tokens_;
  trie raw_;         // normalized == false
  trie normalized_;  // normalized == true
};

/// Unicode White_Space (Rust's char::is_whitespace), used by lstrip/rstrip.
bool is_unicode_whitespace(char32_t cp);

}  // namespace di::tok::detail
