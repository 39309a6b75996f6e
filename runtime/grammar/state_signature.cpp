// Partition refinement over the compiled automaton (see state_signature.hpp). Round k hashes a
// state's round k-1 signature with its transitions (grouped by target signature, each group's
// byte set in canonical form) and its calls; it stops when a round splits no class. The bounded
// variant refines over byte transitions only, for at most the longest token's byte count.
// Sharing keys walk the quotient automaton breadth first from each wanted state.
#include "runtime/grammar/state_signature.hpp"

#include "runtime/grammar/compile_interrupt.hpp"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace di::grammar {

namespace {

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  // splitmix64 finalizer over a combined word.
  std::uint64_t z = h ^ (v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

state_signature mix(state_signature s, std::uint64_t v) {
  return {mix(s.a, v), mix(s.b ^ 0x5851F42D4C957F2Dull, v * 0xD6E8FEB86659FD93ull + 1)};
}

state_signature mix(state_signature s, const byte_set& bytes) {
  for (std::uint64_t w : bytes.words) s = mix(s, w);
  return s;
}

/// The bytes of each byte class of a grammar, and one byte standing for each class.
struct byte_classes {
  std::vector<byte_set> bytes;
  std::vector<std::uint8_t> rep;
  explicit byte_classes(const compiled_grammar& g)
      : bytes(std::size_t(std::max(g.num_byte_classes(), 1))), rep(bytes.size(), 0) {
    for (int b = 255; b >= 0; --b) {
      bytes[g.byte_class(std::uint8_t(b))].set(std::uint8_t(b));
      rep[g.byte_class(std::uint8_t(b))] = std::uint8_t(b);
    }
  }
};

/// The byte transitions of `s` as (key of the target, bytes) with one entry per key (the union
/// of its bytes), sorted by byte set.
template <class Key>
void add_grouped(std::vector<std::pair<Key, byte_set>>& out, const Key& key,
                 const byte_set& bytes) {
  auto it = std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.first == key; });
  if (it == out.end())
    out.push_back({key, bytes});
  else
    it->second |= bytes;
}

/// Sorted by byte set: the keys' sets are disjoint, so one order whatever the insertion order.
template <class Key>
void sort_grouped(std::vector<std::pair<Key, byte_set>>& out) {
  std::sort(out.begin(), out.end(),
            [](const auto& x, const auto& y) { return x.second.words < y.second.words; });
}

template <class Key, class KeyOf>
void group_edges(const compiled_grammar& g, const byte_classes& classes, state_id s, KeyOf key_of,
                 std::vector<std::pair<Key, byte_set>>& out) {
  out.clear();
  if (!g.has_bytes(s)) return;
  for (int c = 0; c < g.num_byte_classes(); ++c) {
    const state_id t = g.next(s, classes.rep[std::size_t(c)]);
    if (t != k_dead_state) add_grouped(out, Key(key_of(t)), classes.bytes[std::size_t(c)]);
  }
  sort_grouped(out);
}

/// Each state's byte transitions as (target state, the union of the bytes that lead there),
/// worked out once: the refinement rounds below regroup them by the targets' signatures every
/// round, and walking every byte class of every state each round (a next() lookup and a
/// linear search per class) was most of a schema's compile time (perf, session 43).
struct state_targets {
  std::vector<std::size_t> begin;  // [num_states + 1] into `entries`
  std::vector<std::pair<state_id, byte_set>> entries;
  state_targets(const compiled_grammar& g, const byte_classes& classes) {
    const std::size_t n = g.num_states();
    begin.assign(n + 1, 0);
    std::vector<std::pair<state_id, byte_set>> row;
    for (state_id s = 0; s < n; ++s) {
      group_edges(
          g, classes, s, [](state_id t) { return t; }, row);
      entries.insert(entries.end(), row.begin(), row.end());
      begin[s + 1] = entries.size();
    }
  }
};

/// group_edges from the targets worked out beforehand: the same (key, bytes) list. A key's
/// bytes are the union over the targets with that key, which is the union over the byte
/// classes that reach them; keys' byte sets are disjoint, so the sort leaves one order.
template <class Key, class KeyOf>
void group_targets(const state_targets& targets, state_id s, KeyOf key_of,
                   std::vector<std::pair<Key, byte_set>>& out) {
  out.clear();
  for (std::size_t i = targets.begin[s]; i < targets.begin[s + 1]; ++i)
    add_grouped(out, Key(key_of(targets.entries[i].first)), targets.entries[i].second);
  sort_grouped(out);
}

using edge = std::pair<state_signature, byte_set>;  // (target signature, bytes)

/// Round 0: what a state shows without looking at its successors.
std::vector<state_signature> initial(const compiled_grammar& g) {
  std::vector<state_signature> h(g.num_states());
  for (state_id s = 0; s < g.num_states(); ++s) {
    rule_id r = g.rule_of(s);
    state_signature x = mix(state_signature{1, 2}, g.is_final(s) ? 3 : 4);
    x = mix(x, g.follow(r));
    h[s] = mix(x, g.follow_end(r) ? 5 : 6);
  }
  return h;
}

}  // namespace

std::vector<state_signature> compute_state_signatures(const compiled_grammar& g,
                                                      std::size_t max_work) {
  const std::size_t n = g.num_states();
  const byte_classes byte_class_table(g);
  const state_targets targets(g, byte_class_table);
  std::vector<state_signature> h = initial(g), next(n);
  std::size_t classes = 0, work = 0;
  std::vector<edge> edges;
  std::vector<std::pair<state_signature, state_signature>> calls;
  std::unordered_set<state_signature, state_signature_hash> distinct;
  auto less = [](const state_signature& x, const state_signature& y) {
    return x.a != y.a ? x.a < y.a : x.b < y.b;
  };
  for (;;) {
    for (state_id s = 0; s < n; ++s) {
      if (s % 4096 == 0) check_interrupt();
      group_targets(
          targets, s, [&](state_id t) { return h[t]; }, edges);
      calls.clear();
      for (const call_edge& c : g.calls(s)) calls.push_back({h[g.start(c.rule)], h[c.target]});
      std::sort(calls.begin(), calls.end(), [&](const auto& x, const auto& y) {
        return less(x.first, y.first) || (x.first == y.first && less(x.second, y.second));
      });
      state_signature x = h[s];
      for (const auto& [target, bytes] : edges) x = mix(mix(mix(x, target.a), target.b), bytes);
      x = mix(x, 0xCA11);
      for (const auto& [start, target] : calls)
        x = mix(mix(mix(mix(x, start.a), start.b), target.a), target.b);
      next[s] = x;
      work += std::size_t(g.num_byte_classes()) + 1;
    }
    h.swap(next);
    distinct.clear();
    distinct.insert(h.begin(), h.end());
    if (distinct.size() == classes) return h;
    classes = distinct.size();
    if (work > max_work) return {};
  }
}

namespace {

/// Exact identity of a state for the bounded refinement: its bisimulation signature, or itself.
state_signature exact_id(const std::vector<state_signature>& exact, state_id s) {
  return exact.empty() ? state_signature{s, ~std::uint64_t(s)} : exact[s];
}

bool sig_less(const state_signature& x, const state_signature& y) {
  return x.a != y.a ? x.a < y.a : x.b < y.b;
}

/// Hashes (callee start, return target) pairs in a canonical order.
state_signature mix_calls(state_signature x,
                          std::vector<std::pair<state_signature, state_signature>>& calls) {
  std::sort(calls.begin(), calls.end(), [](const auto& p, const auto& q) {
    return sig_less(p.first, q.first) || (p.first == q.first && sig_less(p.second, q.second));
  });
  for (const auto& [start, target] : calls)
    x = mix(mix(mix(mix(x, start.a), start.b), target.a), target.b);
  return x;
}

/// Round 0 of the bounded refinement: finality, the rule's follow set and the calls of nullable
/// rules, exactly (their targets are reached without reading a byte).
std::vector<state_signature> bounded_initial(const compiled_grammar& g,
                                             const std::vector<state_signature>& exact) {
  std::vector<state_signature> h = initial(g);
  std::vector<std::pair<state_signature, state_signature>> calls;
  for (state_id s = 0; s < g.num_states(); ++s) {
    calls.clear();
    for (const call_edge& c : g.calls(s))
      if (g.nullable(c.rule))
        calls.push_back({exact_id(exact, g.start(c.rule)), exact_id(exact, c.target)});
    h[s] = mix_calls(h[s], calls);
  }
  return h;
}

}  // namespace

namespace {

/// The quotient automaton: one node per class of equal exact signatures, with edges in a fixed
/// order (byte edges by byte set, calls by the signatures of callee start and return target).
struct quotient {
  struct node {
    state_signature label;
    std::vector<std::pair<byte_set, std::uint32_t>> edges;
    std::vector<std::pair<std::uint32_t, std::uint32_t>> calls;  // (callee start, return target)
  };
  std::vector<std::uint32_t> class_of;  // [num_states]
  std::vector<node> nodes;
};

quotient build_quotient(const compiled_grammar& g, const std::vector<state_signature>& exact) {
  const std::size_t n = g.num_states();
  quotient q;
  q.class_of.resize(n);
  std::unordered_map<state_signature, std::uint32_t, state_signature_hash> index;
  std::vector<state_id> rep;
  for (state_id s = 0; s < n; ++s) {
    auto [it, is_new] = index.emplace(exact[s], std::uint32_t(rep.size()));
    if (is_new) rep.push_back(s);
    q.class_of[s] = it->second;
  }
  const std::vector<state_signature> labels = initial(g);
  const byte_classes byte_class_table(g);
  std::vector<std::pair<std::uint32_t, byte_set>> edges;
  q.nodes.resize(rep.size());
  for (std::size_t c = 0; c < rep.size(); ++c) {
    const state_id s = rep[c];
    quotient::node& node = q.nodes[c];
    node.label = labels[s];
    group_edges(
        g, byte_class_table, s, [&](state_id t) { return q.class_of[t]; }, edges);
    for (const auto& [target, bytes] : edges) node.edges.push_back({bytes, target});
    std::vector<std::pair<state_signature, state_signature>> by_sig;
    for (const call_edge& e : g.calls(s)) {
      by_sig.push_back({exact[g.start(e.rule)], exact[e.target]});
      node.calls.push_back({q.class_of[g.start(e.rule)], q.class_of[e.target]});
    }
    // Any fixed order keeps keys sound (equal keys still mean isomorphic parts).
    std::vector<std::size_t> order(node.calls.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
      const auto& a = by_sig[x];
      const auto& b = by_sig[y];
      return sig_less(a.first, b.first) || (a.first == b.first && sig_less(a.second, b.second));
    });
    std::vector<std::pair<std::uint32_t, std::uint32_t>> sorted;
    for (std::size_t i : order) sorted.push_back(node.calls[i]);
    node.calls.swap(sorted);
  }
  return q;
}

}  // namespace

std::vector<std::optional<state_signature>> sharing_keys(const compiled_grammar& g,
                                                         const std::vector<state_signature>& exact,
                                                         const std::vector<bool>& wanted,
                                                         std::size_t max_classes) {
  const std::size_t n = g.num_states();
  std::vector<std::optional<state_signature>> keys(n);
  if (exact.size() != n) return keys;
  const quotient q = build_quotient(g, exact);
  std::vector<std::uint32_t> number(q.nodes.size()), stamp(q.nodes.size(), 0);
  // Classes known to reach more than max_classes classes. A walk that meets one reaches at
  // least as many, so it stops there with no key: in a search automaton every state reaches
  // the start, which reaches everything, and each wanted state walked its max_classes classes
  // only to drop the key (3,000 words: 4.9 G of the token side's 9.1 G instructions, now
  // 0.55 G; callgrind, session 56).
  std::vector<bool> too_large(q.nodes.size(), false);
  std::vector<std::uint32_t> queue;
  std::uint32_t generation = 0;
  for (state_id s = 0; s < n; ++s) {
    if (s % 4096 == 0) check_interrupt();
    if (!wanted[s] || too_large[q.class_of[s]]) continue;
    ++generation;
    queue.assign(1, q.class_of[s]);
    stamp[q.class_of[s]] = generation;
    number[q.class_of[s]] = 0;
    bool large = false;
    auto visit = [&](std::uint32_t c) {
      if (stamp[c] != generation) {
        stamp[c] = generation;
        number[c] = std::uint32_t(queue.size());
        queue.push_back(c);
        large = large || too_large[c];
      }
      return std::uint64_t(number[c]);
    };
    state_signature key{0x6B65790A, 0x51A7E};
    for (std::size_t i = 0; i < queue.size() && queue.size() <= max_classes && !large; ++i) {
      const quotient::node& node = q.nodes[queue[i]];
      key = mix(mix(mix(key, 0xC1A55), node.label.a), node.label.b);
      for (const auto& [bytes, target] : node.edges) key = mix(mix(key, bytes), visit(target));
      key = mix(key, 0xCA11);
      for (const auto& [start, target] : node.calls)
        key = mix(mix(key, visit(start)), visit(target));
    }
    if (queue.size() <= max_classes && !large)
      keys[s] = key;
    else
      too_large[q.class_of[s]] = true;
  }
  return keys;
}

namespace {

/// Calls of rules that read a byte, as (exact callee start, class of the return target).
using class_calls = std::vector<std::pair<state_signature, std::uint32_t>>;

bool calls_less(const class_calls& x, const class_calls& y) {
  return std::lexicographical_compare(
      x.begin(), x.end(), y.begin(), y.end(), [](const auto& p, const auto& q) {
        return sig_less(p.first, q.first) || (p.first == q.first && p.second < q.second);
      });
}

}  // namespace

std::vector<state_id> token_equivalence_classes(const compiled_grammar& g,
                                                const std::vector<state_signature>& exact,
                                                std::uint32_t max_token_bytes) {
  // Moore's refinement, each round splitting every class by its members' keys under the
  // previous round's classes: after round d, states of one class behave alike for inputs of up
  // to d bytes. Only states a split can affect are looked at: those with a transition or a call
  // return into a state that changed class in the round before (the rest keep their key, which
  // is their class's). Every state was rehashed every round, up to the longest token's length
  // (128+ rounds for a schema of long strings): half of such a compile (perf, session 46).
  //
  // A state's key is its behaviour one byte deep: the class reached on each byte class of the
  // grammar (or none), then its calls of rules that read a byte. Byte classes partition the
  // bytes grammar-wide, so two keys are equal exactly when the byte transitions grouped by
  // target class (each group's bytes united) are; the grouped form cost a search among the
  // groups per byte class, a sort of byte sets per state and ~1 KB per key, which a search
  // automaton, where every state moves on every letter, paid for every state in most rounds
  // (3,000 words: 2.1 G instructions here, now 0.5 G; callgrind, session 56).
  const std::size_t n = g.num_states();
  const int num_byte_classes = g.num_byte_classes();
  const std::size_t width = std::size_t(std::max(num_byte_classes, 0));
  const byte_classes byte_class_table(g);
  std::vector<std::uint32_t> cls(n);
  std::uint32_t num_classes = 0;
  {
    const std::vector<state_signature> h0 = bounded_initial(g, exact);
    std::unordered_map<state_signature, std::uint32_t, state_signature_hash> ids;
    for (state_id s = 0; s < n; ++s)
      cls[s] = ids.emplace(h0[s], std::uint32_t(ids.size())).first->second;
    num_classes = std::uint32_t(ids.size());
  }
  // Who depends on a state's class: predecessors by byte edges and by call returns.
  std::vector<std::size_t> pred_begin(n + 1, 0);
  std::vector<state_id> preds;
  {
    std::vector<std::size_t> succ_begin(n + 1, 0);
    std::vector<state_id> succ;
    for (state_id s = 0; s < n; ++s) {
      if (s % 4096 == 0) check_interrupt();
      const std::size_t row = succ.size();
      if (g.has_bytes(s))
        for (int c = 0; c < num_byte_classes; ++c)
          if (const state_id t = g.next(s, byte_class_table.rep[std::size_t(c)]); t != k_dead_state)
            succ.push_back(t);
      for (const call_edge& c : g.calls(s))
        if (!g.nullable(c.rule)) succ.push_back(c.target);
      std::sort(succ.begin() + std::ptrdiff_t(row), succ.end());
      succ.erase(std::unique(succ.begin() + std::ptrdiff_t(row), succ.end()), succ.end());
      succ_begin[s + 1] = succ.size();
      for (std::size_t i = row; i < succ.size(); ++i) ++pred_begin[succ[i] + 1];
    }
    for (std::size_t i = 0; i < n; ++i) pred_begin[i + 1] += pred_begin[i];
    preds.resize(pred_begin[n]);
    std::vector<std::size_t> fill(pred_begin.begin(), pred_begin.end() - 1);
    for (state_id s = 0; s < n; ++s)
      for (std::size_t i = succ_begin[s]; i < succ_begin[s + 1]; ++i) preds[fill[succ[i]]++] = s;
  }
  constexpr std::uint32_t k_none = UINT32_MAX;  // no transition on the byte class
  // The key of `s` into `row` (`width` entries) and `calls`, with a hash of both.
  auto key_of = [&](state_id s, std::uint32_t* row, class_calls& calls) {
    std::uint64_t h = 0x243F6A8885A308D3ull;
    if (g.has_bytes(s)) {
      for (std::size_t c = 0; c < width; ++c) {
        const state_id t = g.next(s, byte_class_table.rep[c]);
        row[c] = t == k_dead_state ? k_none : cls[t];
        h = (h ^ row[c]) * 0x100000001B3ull;
      }
    } else {
      std::fill(row, row + width, k_none);
    }
    calls.clear();
    for (const call_edge& c : g.calls(s))
      if (!g.nullable(c.rule)) calls.push_back({exact_id(exact, g.start(c.rule)), cls[c.target]});
    std::sort(calls.begin(), calls.end(), [](const auto& x, const auto& y) {
      return sig_less(x.first, y.first) || (x.first == y.first && x.second < y.second);
    });
    for (const auto& [start, target] : calls) h = mix(mix(h, start.a ^ start.b), target);
    return h;
  };
  auto rows_equal = [&](const std::uint32_t* x, const std::uint32_t* y) {
    return std::equal(x, x + width, y);
  };
  // The key every member of a class has that was not looked at this round (set when a round
  // first splits the class or creates it): `width` entries per class, and its calls.
  std::vector<std::uint32_t> class_rows(std::size_t(num_classes) * width);
  std::vector<class_calls> class_call_lists(num_classes);
  std::vector<bool> has_key(num_classes, false);
  std::vector<std::uint32_t> class_size(num_classes, 0);
  for (state_id s = 0; s < n; ++s) ++class_size[cls[s]];
  std::vector<state_id> dirty(n);
  for (state_id s = 0; s < n; ++s) dirty[s] = s;
  std::vector<std::uint32_t> stamp(n, 0);
  // Keys of the members of one class being split.
  std::vector<std::uint32_t> rows;
  std::vector<class_calls> calls;
  std::vector<std::uint64_t> hashes;
  std::vector<std::pair<std::uint64_t, std::size_t>> by_hash;
  std::vector<std::uint64_t> packed;
  std::vector<std::size_t> order;
  std::vector<std::pair<state_id, std::uint32_t>> moves;  // applied after the round
  for (std::uint32_t round = 0; round < max_token_bytes && !dirty.empty(); ++round) {
    // By class, then by state: (class, state) packed in one word sorts without lookups.
    packed.resize(dirty.size());
    for (std::size_t i = 0; i < dirty.size(); ++i)
      packed[i] = std::uint64_t(cls[dirty[i]]) << 32 | dirty[i];
    std::sort(packed.begin(), packed.end());
    for (std::size_t i = 0; i < dirty.size(); ++i) dirty[i] = state_id(packed[i]);
    moves.clear();
    for (std::size_t from = 0; from < dirty.size();) {
      const std::uint32_t c = cls[dirty[from]];
      std::size_t to = from;
      while (to < dirty.size() && cls[dirty[to]] == c) ++to;
      const std::size_t m = to - from;
      if (calls.size() < m) calls.resize(m);
      rows.resize(m * width);
      hashes.resize(m);
      for (std::size_t i = 0; i < m; ++i) {
        if ((from + i) % 4096 == 0) check_interrupt();
        hashes[i] = key_of(dirty[from + i], rows.data() + i * width, calls[i]);
      }
      auto row = [&](std::size_t i) { return rows.data() + i * width; };
      auto class_row = [&](std::uint32_t k) { return class_rows.data() + std::size_t(k) * width; };
      auto is_class_key = [&](std::size_t i) {
        return rows_equal(row(i), class_row(c)) && calls[i] == class_call_lists[c];
      };
      // The members that keep the class: those with its key; when every member was looked at
      // and none has it (or the class has none yet), those with the first member's key.
      const bool all_dirty = m == class_size[c];
      bool keep_known = has_key[c];
      if (keep_known && all_dirty) {
        keep_known = false;
        for (std::size_t i = 0; i < m && !keep_known; ++i) keep_known = is_class_key(i);
      }
      if (!keep_known) {
        std::copy(row(0), row(0) + width, class_row(c));  // dirty is sorted by state
        class_call_lists[c] = calls[0];
        has_key[c] = true;
      }
      // Equal keys next to each other: sorted by hash, then (only where one hash is shared by
      // different keys, which must not interleave) by the keys themselves.
      by_hash.resize(m);
      for (std::size_t i = 0; i < m; ++i) by_hash[i] = {hashes[i], i};
      std::sort(by_hash.begin(), by_hash.end());
      order.resize(m);
      for (std::size_t i = 0; i < m; ++i) order[i] = by_hash[i].second;
      auto same_key = [&](std::size_t x, std::size_t y) {
        return hashes[x] == hashes[y] && rows_equal(row(x), row(y)) && calls[x] == calls[y];
      };
      for (std::size_t i = 0; i < m;) {
        std::size_t j = i + 1;
        bool mixed = false;
        for (; j < m && hashes[order[j]] == hashes[order[i]]; ++j)
          mixed = mixed || !same_key(order[j], order[i]);
        if (mixed)
          std::sort(order.begin() + std::ptrdiff_t(i), order.begin() + std::ptrdiff_t(j),
                    [&](std::size_t x, std::size_t y) {
                      const auto [px, py] = std::mismatch(row(x), row(x) + width, row(y));
                      if (px != row(x) + width) return *px < *py;
                      if (calls[x] != calls[y]) return calls_less(calls[x], calls[y]);
                      return x < y;
                    });
        i = j;
      }
      for (std::size_t i = 0; i < m;) {
        std::size_t j = i;
        while (j < m && same_key(order[j], order[i])) ++j;
        if (!is_class_key(order[i])) {
          const std::uint32_t fresh = num_classes++;
          class_rows.insert(class_rows.end(), row(order[i]), row(order[i]) + width);
          class_call_lists.push_back(calls[order[i]]);
          has_key.push_back(true);
          class_size.push_back(std::uint32_t(j - i));
          class_size[c] -= std::uint32_t(j - i);
          for (std::size_t k = i; k < j; ++k) moves.push_back({dirty[from + order[k]], fresh});
        }
        i = j;
      }
      from = to;
    }
    if (moves.empty()) break;  // a round that splits nothing: stable from here on
    for (const auto& [s, c] : moves) cls[s] = c;
    dirty.clear();
    for (const auto& [s, c] : moves)
      for (std::size_t i = pred_begin[s]; i < pred_begin[s + 1]; ++i)
        if (stamp[preds[i]] != round + 1) {
          stamp[preds[i]] = round + 1;
          dirty.push_back(preds[i]);
        }
  }
  std::vector<state_id> first(num_classes, k_dead_state);
  std::vector<state_id> rep(n);
  for (state_id s = 0; s < n; ++s) {
    if (first[cls[s]] == k_dead_state) first[cls[s]] = s;
    rep[s] = first[cls[s]];
  }
  return rep;
}

}  // namespace di::grammar
