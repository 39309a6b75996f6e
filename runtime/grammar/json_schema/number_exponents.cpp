// Exponent spellings judged by value (see number_exponents.hpp). For each exponent e of the
// window the mantissa m must satisfy the constraint scaled by 10^-e: bounds shift their decimal
// point, a step a x 10^-b becomes a x 10^-(b+e), all exact on decimal digits.
#include "runtime/grammar/json_schema/number_exponents.hpp"

#include "common/error.hpp"
#include "runtime/grammar/json_schema/number_multiples.hpp"
#include "runtime/grammar/regular_language.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

namespace di::grammar::json_detail {

namespace {

std::string text_of(const decimal& d) {
  return (d.negative ? "-" : "") + d.int_digits +
         (d.frac_digits.empty() ? "" : "." + d.frac_digits);
}

/// d x 10^by, exact.
decimal shifted(const decimal& d, int by) {
  return parse_decimal(text_of(d) + "e" + std::to_string(by));
}

std::optional<bound> shifted(const std::optional<bound>& b, int by) {
  if (!b) return b;
  return bound{shifted(b->value, by), b->exclusive};
}

/// The exponent of d's leading digit (7: 0, 1e300: 300, 0.05: -2); d is not zero.
int leading_exponent(const decimal& d) {
  if (d.int_digits != "0") return int(d.int_digits.size()) - 1;
  return -int(d.frac_digits.find_first_not_of('0')) - 1;
}

bool holds(const decimal& x, const std::optional<bound>& lo, const std::optional<bound>& hi) {
  if (lo && (lo->exclusive ? compare(x, lo->value) <= 0 : compare(x, lo->value) < 0)) return false;
  if (hi && (hi->exclusive ? compare(x, hi->value) >= 0 : compare(x, hi->value) > 0)) return false;
  return true;
}

bool range_is_empty(const std::optional<bound>& lo, const std::optional<bound>& hi) {
  if (!lo || !hi) return false;
  const int c = compare(lo->value, hi->value);
  return c > 0 || (c == 0 && (lo->exclusive || hi->exclusive));
}

expr_id e_letter(grammar& g) {
  byte_set s;
  s.set('e');
  s.set('E');
  return g.bytes(s);
}

expr_id zeros(grammar& g, std::uint32_t min) {
  return g.repeat(g.literal("0"), min, k_unbounded);
}

/// [eE] and a signed integer whose value is exactly e (e5, E+05, e-0, e0000).
expr_id exponent_of(grammar& g, int e) {
  if (e == 0) {
    byte_set sign;
    sign.set('+');
    sign.set('-');
    return g.sequence({e_letter(g), g.optional(g.bytes(sign)), zeros(g, 1)});
  }
  return g.sequence({e_letter(g), e < 0 ? g.literal("-") : g.optional(g.literal("+")), zeros(g, 0),
                     g.literal(std::to_string(e < 0 ? -e : e))});
}

expr_id any_exponent(grammar& g) {
  byte_set sign;
  sign.set('+');
  sign.set('-');
  return g.sequence(
      {e_letter(g), g.optional(g.bytes(sign)), g.repeat(g.byte_range('0', '9'), 1, k_unbounded)});
}

/// [eE] and an exponent of at least k_exponent_window + 1.
expr_id exponent_past_window(grammar& g) {
  const decimal first = parse_decimal(std::to_string(k_exponent_window + 1));
  return g.sequence({e_letter(g), g.optional(g.literal("+")), zeros(g, 0),
                     integer_range(g, bound{first, false}, std::nullopt, false)});
}

/// Integers (no leading zeros) that are multiples of a, then `tail` zeros.
expr_id integer_multiples(grammar& g, std::uint32_t a, std::uint32_t tail) {
  const digit_automaton digits = multiples_automaton(a, k_max_exponent_step);
  return g.choice(
      {g.literal("0"),
       nonzero_naturals(
           g, digits, [&] { return g.repeat(g.literal("0"), tail, tail); }, "multiple")});
}

/// Plain magnitudes (no sign, no exponent) that are multiples of a x 10^-b, a >= 1. With a > 1
/// and b > 0 only those without nonzero fraction digits (a remainder over fraction places does
/// not compile to a single automaton here): 5 and 5.0 for 0.5 x 10^1, not 0.5.
expr_id multiple_magnitudes(grammar& g, std::uint32_t a, int b) {
  const expr_id zero_fraction = g.optional(g.sequence({g.literal("."), zeros(g, 1)}));
  if (b <= 0) return g.sequence({integer_multiples(g, a, std::uint32_t(-b)), zero_fraction});
  const auto places = std::uint32_t(b);
  if (a == 1) {  // at most b fraction places, then zeros
    const expr_id digit = g.byte_range('0', '9');
    const expr_id int_part = g.choice(
        {g.literal("0"), g.sequence({g.byte_range('1', '9'), g.repeat(digit, 0, k_unbounded)})});
    return g.sequence({int_part, g.optional(g.sequence(
                                     {g.literal("."), g.repeat(digit, 1, places), zeros(g, 0)}))});
  }
  // an integer m with a | m x 10^b: a / gcd(a, 10^b) | m
  std::uint32_t rest = a;
  for (std::uint32_t i = 0; i < places && rest % 2 == 0; ++i) rest /= 2;
  for (std::uint32_t i = 0; i < places && rest % 5 == 0; ++i) rest /= 5;
  return g.sequence({integer_multiples(g, rest, 0), zero_fraction});
}

/// Kind automata (kind_at) kept at most: up to 7 per step, ~50 states (50 KiB) each.
constexpr std::size_t k_max_cached_kinds = 64;

/// step = a x 10^-b with a an integer without trailing zeros.
struct significand {
  std::uint64_t a = 1;
  int b = 0;
};

std::optional<significand> significand_of(const decimal& step) {
  std::string digits = step.int_digits + step.frac_digits;
  int b = int(step.frac_digits.size());
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back(), --b;
  digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size() - 1));
  // 1e-300 would need fraction places by the hundred in each exponent's automaton
  if (digits.size() > 6 || b > k_exponent_window || b < -k_exponent_window) return std::nullopt;
  return significand{std::stoull(digits), b};
}

/// Multiples of a have a digit automaton of at most k_max_exponent_step states.
bool has_small_automaton(std::uint64_t a) {
  try {
    multiples_automaton(a, k_max_exponent_step);
    return true;
  } catch (const di::error&) {
    return false;
  }
}

/// Nonzero plain mantissas (no sign) followed by any exponent: a value of that sign, any size.
expr_id nonzero_any_exponent(grammar& g) {
  const expr_id digits = g.repeat(g.byte_range('0', '9'), 0, k_unbounded);
  const expr_id fraction =
      g.optional(g.sequence({g.literal("."), g.repeat(g.byte_range('0', '9'), 1, k_unbounded)}));
  return g.sequence(
      {g.choice({g.sequence({g.byte_range('1', '9'), digits, fraction}),
                 g.sequence({g.literal("0."), zeros(g, 0), g.byte_range('1', '9'), digits})}),
       any_exponent(g)});
}

/// Zero with any exponent (0e5, -0.0E-7).
expr_id zero_any_exponent(grammar& g) {
  return g.sequence({g.optional(g.literal("-")), g.literal("0"),
                     g.optional(g.sequence({g.literal("."), zeros(g, 1)})), any_exponent(g)});
}

/// Plain mantissas m (with sign) such that m x 10^e is not an integer.
expr_id not_multiples_of_power_of_ten(grammar& g, int e) {
  const expr_id digit = g.byte_range('0', '9'), nonzero = g.byte_range('1', '9');
  const expr_id any_digits = g.repeat(digit, 0, k_unbounded);
  const expr_id int_part = g.choice({g.literal("0"), g.sequence({nonzero, any_digits})});
  const expr_id sign = g.optional(g.literal("-"));
  // A nonzero fraction digit past the e-th place (any place when e <= 0).
  const auto skipped = std::uint32_t(std::max(e, 0));
  std::vector<expr_id> alts{
      g.sequence({sign, int_part, g.literal("."), g.repeat(digit, skipped, skipped), any_digits,
                  nonzero, any_digits})};
  if (e < 0) {  // or an integer part not ending in -e zeros (a zero fraction after it)
    // (deterministic: a last nonzero digit, then fewer than -e zeros)
    const auto places = std::uint32_t(-e);
    const expr_id ints = g.sequence({nonzero, g.optional(g.sequence({any_digits, nonzero})),
                                     g.repeat(g.literal("0"), 0, places - 1)});
    alts.push_back(g.sequence({sign, ints, g.optional(g.sequence({g.literal("."), zeros(g, 1)}))}));
  }
  return g.choice(std::move(alts));
}

/// A mantissa with a nonzero fraction digit and a negative exponent: never an integer.
expr_id fractions_negative_exponent(grammar& g) {
  const expr_id digit = g.byte_range('0', '9'), any_digits = g.repeat(digit, 0, k_unbounded);
  const expr_id int_part =
      g.choice({g.literal("0"), g.sequence({g.byte_range('1', '9'), any_digits})});
  return g.sequence({g.optional(g.literal("-")), int_part, g.literal("."), any_digits,
                     g.byte_range('1', '9'), any_digits, e_letter(g), g.literal("-"),
                     g.repeat(digit, 1, k_unbounded)});
}

/// Mantissas with a nonzero integer part and an exponent past the window: |value| > 10^window.
expr_id huge(grammar& g) {
  const expr_id digits = g.repeat(g.byte_range('0', '9'), 0, k_unbounded);
  const expr_id fraction =
      g.optional(g.sequence({g.literal("."), g.repeat(g.byte_range('0', '9'), 1, k_unbounded)}));
  return g.sequence({g.byte_range('1', '9'), digits, fraction, exponent_past_window(g)});
}

/// integers_with_exponent as a minimized automaton, the same for every schema: built once.
const byte_dfa& all_integers() {
  static const byte_dfa integers = [] {
    grammar t;
    return byte_dfa::from_expr(t, integers_with_exponent(t)).minimize();
  }();
  return integers;
}

/// The mantissas, each with its exponent e in [first, last], of the multiples of `step` at e
/// (`non_integer`: of the non-integers), minimized. It does not depend on the bounds, so each is
/// built once per step and group of exponents and kept: every bounded integer schema takes the
/// same seven.
std::shared_ptr<const byte_dfa> kind_at(const significand& step, bool non_integer, int first,
                                        int last, std::size_t max_states) {
  using key_type = std::tuple<std::uint64_t, int, bool, int, std::size_t>;
  static std::mutex mutex;
  static std::map<key_type, std::shared_ptr<const byte_dfa>> cache;
  const key_type key{step.a, step.b, non_integer, first, max_states};
  {
    std::lock_guard lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  byte_dfa kind = byte_dfa::none();
  for (int e = first; e <= last; ++e) {
    grammar t;
    const expr_id mantissa =
        non_integer ? not_multiples_of_power_of_ten(t, e)
                    : t.sequence({t.optional(t.literal("-")),
                                  multiple_magnitudes(t, std::uint32_t(step.a), step.b + e)});
    kind = kind.unite(byte_dfa::from_expr(t, t.sequence({mantissa, exponent_of(t, e)}), max_states),
                      max_states);
  }
  auto built = std::make_shared<const byte_dfa>(kind.minimize());
  std::lock_guard lock(mutex);
  if (cache.size() >= k_max_cached_kinds) cache.clear();  // many steps: keep memory bounded
  return cache.emplace(key, std::move(built)).first->second;
}

/// Exponents e in [first, last], all at most -b, of multiples of a step a x 10^-b: the mantissa
/// of a value v at e is w followed by k = -(b + e) zeros (and a zero fraction), where
/// w = v x 10^b is an integer multiple of a in the bounds scaled by 10^b -- the same integers
/// for every such e. So one automaton of those integers (zero apart: it takes any exponent), then
/// the zeros and the exponent, instead of a scaled range and a kind per exponent.
expr_id multiples_below_step(grammar& g, const exponent_constraint& c, const significand& step,
                             int first, int last, std::size_t max_states) {
  auto language = [max_states](const std::function<expr_id(grammar&)>& build) {
    grammar t;
    return byte_dfa::from_expr(t, build(t), max_states).minimize();
  };
  byte_dfa integers = language([&](grammar& t) {
    return integer_range(t, shifted(c.lo, step.b), shifted(c.hi, step.b), false);
  });
  integers =
      integers.intersect(language([](grammar& t) {
                           return t.sequence({t.optional(t.literal("-")), t.byte_range('1', '9'),
                                              t.repeat(t.byte_range('0', '9'), 0, k_unbounded)});
                         }),
                         max_states);
  if (step.a > 1)
    integers = integers.minimize().intersect(multiples_of(step.a, false, max_states), max_states);
  integers = integers.minimize();
  if (integers.empty()) return g.nothing();
  std::vector<expr_id> tails;
  for (int e = first; e <= last; ++e) {
    const auto k = std::uint32_t(-(step.b + e));
    tails.push_back(
        g.sequence({g.repeat(g.literal("0"), k, k),
                    g.optional(g.sequence({g.literal("."), zeros(g, 1)})), exponent_of(g, e)}));
  }
  return g.sequence({integers.emit(g, "exponent_multiple"), g.choice(std::move(tails))});
}

}  // namespace

expr_id numbers_with_exponent(grammar& g, const exponent_constraint& c, std::size_t max_states) {
  if (range_is_empty(c.lo, c.hi)) return g.nothing();
  std::optional<significand> step;
  if (c.step) {
    step = significand_of(*c.step);
    if (!step || !has_small_automaton(step->a)) return g.nothing();
  }
  // A mantissa of a larger step needs a remainder automaton per exponent past -b: those
  // exponents take no spellings (86400 = 864e2 takes 864e2 and 8640e1, not 8.64e4).
  const bool large_step = step && step->a > k_max_exponent_step_digits;
  if (c.non_integer) step = significand{1, 0};
  for (const auto& b : {c.lo, c.hi})  // scaled by 10^20, its digits would not fit the limits
    DI_CHECK(!b || b->value.int_digits.size() + b->value.frac_digits.size() <= k_max_bound_digits,
             "a bound of {} digits (more than {})",
             b->value.int_digits.size() + b->value.frac_digits.size(), k_max_bound_digits);
  const decimal zero;
  const bool zero_holds = !c.non_integer && holds(zero, c.lo, c.hi);
  auto language = [max_states](const std::function<expr_id(grammar&)>& build) {
    grammar t;  // a grammar of its own: from_expr compiles every rule it holds
    return byte_dfa::from_expr(t, build(t), max_states);
  };
  // The value's size: exponent by exponent in the window, by sign alone beyond it.
  // Beyond the window the sign decides where every value of that sign is in range (or every one
  // past 10^window: huge).
  auto beyond_window = [&](grammar& t) {
    const decimal past = shifted(parse_decimal("1"), k_exponent_window + 1);  // huge's least value
    decimal minus_past = past;
    minus_past.negative = true;
    std::vector<expr_id> alts;
    if (!c.hi && (!c.lo || compare(c.lo->value, zero) <= 0))
      alts.push_back(nonzero_any_exponent(t));
    else if (!c.hi && compare(c.lo->value, past) < 0)
      alts.push_back(huge(t));
    if (!c.lo && (!c.hi || compare(c.hi->value, zero) >= 0))
      alts.push_back(t.sequence({t.literal("-"), nonzero_any_exponent(t)}));
    else if (!c.lo && compare(c.hi->value, minus_past) > 0)
      alts.push_back(t.sequence({t.literal("-"), huge(t)}));
    return alts;
  };
  auto in_range_at = [&](grammar& t, int e) {
    return t.sequence(
        {decimal_range(t, shifted(c.lo, -e), shifted(c.hi, -e), true), exponent_of(t, e)});
  };
  std::vector<expr_id> alts;
  {
    if (zero_holds) alts.push_back(zero_any_exponent(g));
    std::vector<expr_id> signs = beyond_window(g);
    const bool integer = step && !c.non_integer && step->a == 1 && step->b == 0;
    if (!signs.empty() && !step) alts.push_back(g.choice(std::move(signs)));
    if (!signs.empty() && c.non_integer) {  // a nonzero fraction digit, any negative exponent
      alts.push_back(language([&](grammar& u) {
                       std::vector<expr_id> parts = beyond_window(u);
                       return u.choice(std::move(parts));
                     })
                         .intersect(language(fractions_negative_exponent), max_states)
                         .minimize()
                         .emit(g, "exponent_fraction"));
    }
    if (!signs.empty() && integer) {  // what integers_with_exponent takes of them
      alts.push_back(language([&](grammar& u) {
                       std::vector<expr_id> parts = beyond_window(u);
                       return u.choice(std::move(parts));
                     })
                         .intersect(all_integers(), max_states)
                         .minimize()
                         .emit(g, "exponent_integer"));
    }
  }
  // Multiples of a step a x 10^-b at exponents up to -b: whole mantissas, one automaton.
  int window_start = -k_exponent_window;
  if (step && !c.non_integer) {  // |b| <= k_exponent_window (significand_of)
    window_start = -step->b + 1;
    alts.push_back(
        multiples_below_step(g, c, *step, -k_exponent_window, window_start - 1, max_states));
  }
  // The rest of the window in groups of exponents, each group one automaton: the range scaled
  // exponent by exponent, intersected with the kind (multiples of the scaled step -- 1 for
  // integers -- or non-integers); one automaton for all of them outgrew the limits with int32
  // bounds.
  for (int first = window_start; first <= k_exponent_window && !large_step;
       first += k_exponents_per_automaton) {
    const int last = std::min(first + k_exponents_per_automaton - 1, k_exponent_window);
    byte_dfa range = language([&](grammar& t) {
      std::vector<expr_id> parts;
      for (int e = first; e <= last; ++e) parts.push_back(in_range_at(t, e));
      return t.choice(std::move(parts));
    });
    if (step) {
      const std::shared_ptr<const byte_dfa> kind =
          kind_at(*step, c.non_integer, first, last, max_states);
      range = range.minimize().intersect(*kind, max_states);
    }
    range = range.minimize();
    if (!range.empty()) alts.push_back(range.emit(g, "exponent_number"));
  }
  return alts.empty() ? g.nothing() : g.choice(std::move(alts));
}

expr_id spellings_of(grammar& g, const decimal& v, bool with_exponent) {
  auto plain = [&g](const decimal& m) {
    std::vector<expr_id> parts;
    if (m.negative)
      parts.push_back(g.literal("-"));
    else if (m.is_zero())
      parts.push_back(g.optional(g.literal("-")));
    parts.push_back(g.literal(m.int_digits));
    if (m.frac_digits.empty())
      parts.push_back(g.optional(g.sequence({g.literal("."), zeros(g, 1)})));
    else
      parts.push_back(g.sequence({g.literal("." + m.frac_digits), zeros(g, 0)}));
    return g.sequence(std::move(parts));
  };
  std::vector<expr_id> alts{plain(v)};
  if (!with_exponent) return alts[0];
  if (v.is_zero()) {
    alts.push_back(g.sequence({plain(v), any_exponent(g)}));
  } else {
    const int own = leading_exponent(v);
    for (int e = own - k_exponent_window; e <= own + k_exponent_window; ++e)
      alts.push_back(g.sequence({plain(shifted(v, -e)), exponent_of(g, e)}));
  }
  return g.choice(std::move(alts));
}

}  // namespace di::grammar::json_detail
