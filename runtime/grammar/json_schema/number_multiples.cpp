// Digit automata of multiples (see number_multiples.hpp). The part prime to 10 is its remainder
// automaton; the 2^a x 5^b part is built from its Myhill-Nerode classes directly, each residue
// known by the suffixes that make it a multiple; their product is minimized (Moore).
#include "runtime/grammar/json_schema/number_multiples.hpp"

#include "common/error.hpp"
#include "runtime/grammar/json_schema/number_ranges.hpp"

#include <map>
#include <string>
#include <unordered_map>

namespace di::grammar::json_detail {

namespace {

/// k = rest x power, power = 2^a x 5^b, rest prime to 10; num_digits = max(a, b).
struct split_step {
  std::uint64_t rest = 1;
  std::uint64_t power = 1;
  std::uint32_t num_digits = 0;
};

split_step split(std::uint64_t k) {
  split_step s{k, 1, 0};
  std::uint32_t twos = 0, fives = 0;
  for (; s.rest % 2 == 0; ++twos) s.rest /= 2, s.power *= 2;
  for (; s.rest % 5 == 0; ++fives) s.rest /= 5, s.power *= 5;
  s.num_digits = std::max(twos, fives);
  return s;
}

/// Remainders mod q: q states, all distinct when q is prime to 10 (10 is invertible mod q).
digit_automaton remainders(std::uint64_t q) {
  digit_automaton out;
  out.next.resize(q);
  out.is_final.assign(q, 0);
  out.is_final[0] = 1;
  for (std::uint64_t r = 0; r < q; ++r)
    for (std::uint32_t d = 0; d < 10; ++d) out.next[r][d] = std::uint32_t((10 * r + d) % q);
  return out;
}

/// The suffixes u of each length L < num_digits that make a residue r mod `power` a multiple:
/// r x 10^L + u = 0 (mod power), u < 10^L, i.e. u = c, c + power, ... for c = -r x 10^L mod power
/// when c < 10^L, else none. From L = num_digits on, 10^L is a multiple of power and u alone
/// decides. So two residues are equivalent exactly when these c agree: the class's key.
std::vector<std::uint64_t> class_key(std::uint64_t r, const split_step& s) {
  constexpr std::uint64_t k_past_any_residue = 10 * k_max_multiple;
  std::vector<std::uint64_t> key(s.num_digits);
  std::uint64_t shifted = r, ten_to_l = 1;  // r x 10^L mod power; 10^L, saturated
  for (std::uint32_t l = 0; l < s.num_digits; ++l) {
    const std::uint64_t c = (s.power - shifted) % s.power;
    key[l] = c < ten_to_l ? c : s.power;  // power: no suffix of this length
    shifted = shifted * 10 % s.power;
    ten_to_l = std::min(ten_to_l * 10, k_past_any_residue);
  }
  return key;
}

/// The minimal automaton of multiples of s.power, one state per class met from residue 0.
digit_automaton power_classes(const split_step& s, std::uint64_t k, std::size_t max_states) {
  digit_automaton out;
  std::map<std::vector<std::uint64_t>, std::uint32_t> ids{{class_key(0, s), 0}};
  std::vector<std::uint64_t> residue_of{0};  // a residue of each class
  for (std::size_t i = 0; i < residue_of.size(); ++i) {
    out.is_final.push_back(residue_of[i] == 0);
    out.next.emplace_back();
    for (std::uint32_t d = 0; d < 10; ++d) {
      const std::uint64_t r = (10 * residue_of[i] + d) % s.power;
      auto [it, added] = ids.emplace(class_key(r, s), std::uint32_t(residue_of.size()));
      if (added) residue_of.push_back(r);
      DI_CHECK(residue_of.size() <= max_states,
               "its factor {} (of {}) needs a digit automaton of more than {} states", s.power, k,
               max_states);
      out.next[i][d] = it->second;
    }
  }
  return out;
}

/// Digit strings both take, states reachable from (0, 0).
digit_automaton product(const digit_automaton& a, const digit_automaton& b, std::uint64_t k,
                        std::size_t max_states) {
  digit_automaton out;
  std::unordered_map<std::uint64_t, std::uint32_t> ids{{0, 0}};
  std::vector<std::uint64_t> pairs{0};  // i x |b| + j
  const std::uint64_t nb = b.num_states();
  for (std::size_t s = 0; s < pairs.size(); ++s) {
    const std::uint64_t i = pairs[s] / nb, j = pairs[s] % nb;
    out.is_final.push_back(a.is_final[i] && b.is_final[j]);
    out.next.emplace_back();
    for (std::uint32_t d = 0; d < 10; ++d) {
      const std::uint64_t p = a.next[i][d] * nb + b.next[j][d];
      auto [it, added] = ids.emplace(p, std::uint32_t(pairs.size()));
      if (added) pairs.push_back(p);
      DI_CHECK(pairs.size() <= max_states,
               "its multiples need a digit automaton of more than {} states", max_states);
      out.next[s][d] = it->second;
    }
  }
  return out;
}

/// Moore's refinement; classes renumbered in the order a walk from the start meets them.
digit_automaton minimize(const digit_automaton& a) {
  std::vector<std::uint32_t> cls(a.is_final.begin(), a.is_final.end());
  for (std::size_t num_classes = 0;;) {
    std::map<std::array<std::uint32_t, 11>, std::uint32_t> ids;
    std::vector<std::uint32_t> refined(cls.size());
    for (std::size_t s = 0; s < cls.size(); ++s) {
      std::array<std::uint32_t, 11> key{cls[s]};
      for (std::uint32_t d = 0; d < 10; ++d) key[d + 1] = cls[a.next[s][d]];
      refined[s] = ids.emplace(key, std::uint32_t(ids.size())).first->second;
    }
    cls = std::move(refined);
    if (ids.size() == num_classes) break;
    num_classes = ids.size();
  }
  std::vector<std::uint32_t> id(cls.size(), UINT32_MAX), first_of{0};  // class -> new state
  id[cls[0]] = 0;
  digit_automaton out;
  for (std::size_t i = 0; i < first_of.size(); ++i) {
    const std::uint32_t s = first_of[i];
    out.is_final.push_back(a.is_final[s]);
    out.next.emplace_back();
    for (std::uint32_t d = 0; d < 10; ++d) {
      std::uint32_t& to = id[cls[a.next[s][d]]];
      if (to == UINT32_MAX) to = std::uint32_t(first_of.size()), first_of.push_back(a.next[s][d]);
      out.next[i][d] = to;
    }
  }
  return out;
}

}  // namespace

digit_automaton multiples_automaton(std::uint64_t k, std::size_t max_states) {
  DI_CHECK(k >= 1 && k <= k_max_multiple, "a step outside 1..{}", k_max_multiple);
  const split_step s = split(k);
  DI_CHECK(s.rest <= max_states,
           "its factor {} (prime to 10) needs a remainder automaton of {} states (at most {})",
           s.rest, s.rest, max_states);
  if (s.power == 1) return remainders(s.rest);
  digit_automaton power = power_classes(s, k, max_states);
  if (s.rest == 1) return power;
  return minimize(product(remainders(s.rest), power, k, max_states));
}

expr_id nonzero_naturals(grammar& g, const digit_automaton& digits,
                         const std::function<expr_id()>& at_final, std::string_view name) {
  // Right-linear: every rule referenced last, the tail inside a final state's rule.
  const std::size_t n = digits.num_states();
  std::vector<rule_id> rules(n);
  for (std::size_t s = 0; s < n; ++s)
    rules[s] = g.fresh_rule(std::string(name) + std::to_string(s));
  auto digit_then = [&](std::uint32_t d, std::uint32_t to) {
    return g.sequence({g.literal(std::string(1, char('0' + d))), g.ref(rules[to])});
  };
  for (std::size_t s = 0; s < n; ++s) {
    std::vector<expr_id> alts;
    if (digits.is_final[s]) alts.push_back(at_final());
    for (std::uint32_t d = 0; d < 10; ++d) alts.push_back(digit_then(d, digits.next[s][d]));
    g.define_rule(rules[s], g.choice(std::move(alts)));
  }
  std::vector<expr_id> first;
  for (std::uint32_t d = 1; d < 10; ++d) first.push_back(digit_then(d, digits.next[0][d]));
  return g.choice(std::move(first));
}

expr_id json_integers(grammar& g, const digit_automaton& digits, bool zero_fractions,
                      std::string_view name) {
  const expr_id nonzero = nonzero_naturals(
      g, digits, [&] { return zero_fraction(g, zero_fractions); }, name);
  if (!zero_fractions)  // generation: 0|-?[1-9][0-9]*, no negative zero
    return g.choice({g.literal("0"), g.sequence({g.optional(g.literal("-")), nonzero})});
  return g.sequence({g.optional(g.literal("-")),
                     g.choice({nonzero, g.sequence({g.literal("0"), zero_fraction(g, true)})})});
}

byte_dfa json_integers_dfa(const digit_automaton& digits, bool zero_fractions, std::size_t limit) {
  grammar t;
  const expr_id e = json_integers(t, digits, zero_fractions, "multiple");
  // The byte automaton before minimizing has a few more states than the digits (sign, fraction).
  return byte_dfa::from_expr(t, e, std::max<std::size_t>(limit, 64 * digits.num_states()))
      .minimize();
}

byte_dfa multiples_of(std::uint64_t k, bool zero_fractions, std::size_t limit) {
  return json_integers_dfa(multiples_automaton(k, limit), zero_fractions, limit);
}

}  // namespace di::grammar::json_detail
