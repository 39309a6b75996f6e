// Added-token matching: byte tries walked at candidate positions (found with memchr when all
// tokens share a first byte, as DeepSeek's all start with '<').
#include "model/tokenizer/detail/added_tokens.hpp"

#include <cstring>

#include "model/tokenizer/detail/utf8.hpp"

namespace di::tok::detail {

bool is_unicode_whitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

void added_token_matcher::trie::add(std::string_view content, std::int32_t token) {
  std::uint32_t at = 0;
  for (char ch : content) {
    auto b = static_cast<unsigned char>(ch);
    std::uint32_t child = 0;
    for (auto [c, n] : nodes[at].children) {
      if (c == b) child = n;
    }
    if (child == 0) {
      child = std::uint32_t(nodes.size());
      nodes[at].children.emplace_back(b, child);
      nodes.emplace_back();
    }
    at = child;
  }
  nodes[at].token = token;
  auto first = static_cast<unsigned char>(content[0]);
  if (!is_first_byte[first]) {
    is_first_byte[first] = true;
    ++num_first_bytes;
    only_first_byte = first;
  }
}

std::pair<std::size_t, std::int32_t> added_token_matcher::trie::longest_at(std::string_view text,
                                                                           std::size_t pos) const {
  std::pair<std::size_t, std::int32_t> best{0, -1};
  std::uint32_t at = 0;
  for (std::size_t i = pos; i < text.size(); ++i) {
    auto b = static_cast<unsigned char>(text[i]);
    std::uint32_t child = 0;
    for (auto [c, n] : nodes[at].children) {
      if (c == b) child = n;
    }
    if (child == 0) break;
    at = child;
    if (nodes[at].token >= 0) best = {i + 1 - pos, nodes[at].token};
  }
  return best;
}

std::size_t added_token_matcher::trie::next_candidate(std::string_view text,
                                                      std::size_t pos) const {
  if (num_first_bytes == 1) {
    const void* hit = std::memchr(text.data() + pos, only_first_byte, text.size() - pos);
    return hit ? std::size_t(static_cast<const char*>(hit) - text.data()) : text.size();
  }
  while (pos < text.size() && !is_first_byte[static_cast<unsigned char>(text[pos])]) ++pos;
  return pos;
}

added_token_matcher::added_token_matcher(const std::vector<added_token>& tokens) : tokens_(tokens) {
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    (tokens_[i].normalized ? normalized_ : raw_).add(tokens_[i].content, std::int32_t(i));
  }
}

void added_token_matcher::split(std::string_view text, std::vector<text_segment>& out,
                                std::vector<text_segment>& scratch) const {
  out.clear();
  if (text.empty()) return;
  scratch.clear();
  split_pass(raw_, text, {0, std::uint32_t(text.size()), -1}, scratch);
  for (const text_segment& seg : scratch) {
    if (seg.id >= 0) {
      out.push_back(seg);
    } else {
      split_pass(normalized_, text, seg, out);
    }
  }
}

namespace {

// Start of the whitespace run that ends at `pos` (scanning back over whole code points).
std::size_t whitespace_start_before(std::string_view text, std::size_t pos, std::size_t floor) {
  while (pos > floor) {
    std::size_t start = pos - 1;
    while (start > floor && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    char32_t cp;
    decode_utf8(reinterpret_cast<const unsigned char*>(text.data()) + start, cp);
    if (!is_unicode_whitespace(cp)) break;
    pos = start;
  }
  return pos;
}

std::size_t whitespace_end_after(std::string_view text, std::size_t pos) {
  while (pos < text.size()) {
    char32_t cp;
    int len = decode_utf8(reinterpret_cast<const unsigned char*>(text.data()) + pos, cp);
    if (!is_unicode_whitespace(cp)) break;
    pos += std::size_t(len);
  }
  return pos;
}

}  // namespace

void added_token_matcher::split_pass(const trie& t, std::string_view text, text_segment seg,
                                     std::vector<text_segment>& out) const {
  if (t.empty()) {
    out.push_back(seg);
    return;
  }
  std::string_view part = text.substr(0, seg.end);
  std::size_t emitted = seg.begin;  // end of what has been emitted so far
  std::size_t pos = seg.begin;
  while ((pos = t.next_candidate(part, pos)) < part.size()) {
    auto [len, token] = t.longest_at(part, pos);
    if (token < 0) {
      ++pos;
      continue;
    }
    const added_token& tok = tokens_[std::size_t(token)];
    std::size_t start = tok.lstrip ? whitespace_start_before(part, pos, emitted) : pos;
    std::size_t stop = tok.rstrip ? whitespace_end_after(part, pos + len) : pos + len;
    if (emitted < start) out.push_back({std::uint32_t(emitted), std::uint32_t(start), -1});
    out.push_back({std::uint32_t(start), std::uint32_t(stop), tok.id});
    emitted = pos = stop;
  }
  if (emitted < seg.end) out.push_back({std::uint32_t(emitted), seg.end, -1});
}

}  // namespace di::tok::detail
