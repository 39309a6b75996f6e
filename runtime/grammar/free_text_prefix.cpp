// Free text up to a marker, then a grammar (see free_text_prefix.hpp).
//
// With m0 the marker's first byte and B_j = marker[0, j) (a partial marker, 1 <= j < size),
// text without the marker is a repetition of pieces, each either a byte other than m0 or some
// B's (each then followed by m0, which breaks it) and a B_j broken by a byte that is neither
// marker[j] nor m0; a run of B's may also end the text, or precede the marker. Since m0
// appears only at the marker's start, the split into pieces is unique.
#include "runtime/grammar/free_text_prefix.hpp"

#include "common/error.hpp"

#include <string>
#include <vector>

namespace di::grammar {

grammar free_text_then(const grammar& answer, std::string_view marker) {
  DI_CHECK(!marker.empty(), "free text prefix: the marker is empty");
  DI_CHECK(marker.find(marker[0], 1) == std::string_view::npos,
           "free text prefix: the marker '{}' repeats its first byte", marker);
  grammar g;
  const rule_id answer_root = g.import_rules(answer, "answer_");
  const auto m0 = std::uint8_t(marker[0]);
  byte_set not_m0;
  not_m0.set_range(0, 255);
  not_m0.words[m0 >> 6] &= ~(std::uint64_t(1) << (m0 & 63));

  std::vector<expr_id> partials;  // B_j
  for (std::size_t j = 1; j < marker.size(); ++j)
    partials.push_back(g.literal(marker.substr(0, j)));
  const expr_id some_partials = g.repeat(g.choice(partials), 0, k_unbounded);
  std::vector<expr_id> pieces{g.bytes(not_m0)};
  for (std::size_t j = 1; j < marker.size(); ++j) {
    byte_set breaks = not_m0;  // neither marker[j] nor m0
    const auto next = std::uint8_t(marker[j]);
    breaks.words[next >> 6] &= ~(std::uint64_t(1) << (next & 63));
    pieces.push_back(g.sequence({some_partials, partials[j - 1], g.bytes(breaks)}));
  }
  const expr_id free_text = g.repeat(g.choice(pieces), 0, k_unbounded);
  const expr_id then_answer = g.sequence({g.literal(marker), g.ref(answer_root)});
  const rule_id root = g.fresh_rule("free_text_then");
  g.define_rule(root, g.sequence({free_text, some_partials, g.optional(then_answer)}));
  g.set_root(root);
  return g;
}

}  // namespace di::grammar
