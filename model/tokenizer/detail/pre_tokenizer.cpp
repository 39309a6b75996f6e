// Generic PCRE2 pre-tokenizer: applies each Split step to every piece of the previous step,
// with HF's Isolated/Removed semantics (non-matching gaps stay pieces; empty pieces vanish).
#include "model/tokenizer/detail/pre_tokenizer.hpp"

#include "model/tokenizer/detail/char_classes.hpp"
#include "model/tokenizer/detail/utf8.hpp"

#include <fmt/format.h>

namespace di::tok::detail {

const std::vector<std::string>& deepseek_v3_patterns() {
  static const std::vector<std::string> patterns = {
      "\\p{N}{1,3}",
      "[\xE4\xB8\x80-\xE9\xBE\xA5\xE3\x81\x80-\xE3\x82\x9F\xE3\x82\xA0-\xE3\x83\xBF]+",
      "[!\"#$%&'()*+,\\-./"
      ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
      " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
  };
  return patterns;
}

namespace {

bool is_deepseek_v3(const std::vector<split_step>& steps) {
  const auto& expected = deepseek_v3_patterns();
  if (steps.size() != expected.size()) return false;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].is_literal || steps[i].behavior != split_behavior::isolated ||
        steps[i].onig_pattern != expected[i]) {
      return false;
    }
  }
  return true;
}

}  // namespace

pre_tokenizer::pre_tokenizer(std::vector<split_step> steps, pre_tokenizer_engine engine) {
  for (std::size_t i = 0; i < steps.size(); ++i) {
    std::string where = fmt::format("pre_tokenizer Split step {}", i);
    const split_step& s = steps[i];
    regex re = s.is_literal ? regex::literal(s.onig_pattern, where)
                            : regex(translate_onig_pattern(s.onig_pattern, where), where);
    steps_.push_back({std::move(re), s.behavior});
  }
  is_deepseek_v3_ = engine == pre_tokenizer_engine::automatic && is_deepseek_v3(steps);
  if (is_deepseek_v3_) char_class_table::get();  // build it now rather than in an encode call
}

void pre_tokenizer::split(std::string_view text, std::vector<piece>& out,
                          std::vector<piece>& scratch) const {
  out.clear();
  if (text.empty()) return;
  if (is_deepseek_v3_) {
    split_deepseek_v3(text, out);
    return;
  }
  out.push_back({0, std::uint32_t(text.size())});
  for (const auto& step : steps_) {
    scratch.clear();
    for (piece p : out) split_piece(text, p, step, scratch);
    out.swap(scratch);
  }
}

void pre_tokenizer::split_piece(std::string_view text, piece p, const compiled_step& step,
                                std::vector<piece>& out) const {
  // The subject is the piece alone, so anchors and look-arounds stop at its edges.
  std::string_view subject = text.substr(p.begin, p.end - p.begin);
  auto emit = [&](std::size_t b, std::size_t e) {
    if (e > b) out.push_back({p.begin + std::uint32_t(b), p.begin + std::uint32_t(e)});
  };
  std::size_t pos = 0;
  std::size_t gap = 0;
  regex_match m;
  while (pos < subject.size() && step.re.find(subject, pos, m)) {
    emit(gap, m.begin);
    if (step.behavior == split_behavior::isolated) emit(m.begin, m.end);
    gap = m.end;
    pos = m.end;
    if (m.end == m.begin) {
      // An empty match splits the gap there and the search moves on by one character.
      if (pos >= subject.size()) break;
      pos += std::size_t(utf8_length(static_cast<unsigned char>(subject[pos])));
    }
  }
  emit(gap, subject.size());
}

}  // namespace di::tok::detail
