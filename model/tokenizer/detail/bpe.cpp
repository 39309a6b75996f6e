// BPE merge loops (scan for short pieces, heap for long ones), the merge hash table and the
// word cache.
#include "model/tokenizer/detail/bpe.hpp"

#include <algorithm>
#include <cstring>
#include <functional>

namespace di::tok::detail {

namespace {

constexpr std::uint32_t k_no_rank = ~std::uint32_t(0);
// Below this many symbols the O(n^2) scan over cached pair ranks beats a heap.
constexpr std::size_t k_scan_max_symbols = 24;

std::uint64_t mix(std::uint64_t h) {
  h ^= h >> 32;
  h *= 0xD6E8FEB86659FD93ull;
  h ^= h >> 32;
  return h;
}

}  // namespace

std::uint64_t hash_bytes(std::string_view bytes) {
  const char* p = bytes.data();
  std::size_t n = bytes.size();
  std::uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xBF58476D1CE4E5B9ull);
  while (n >= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    h = mix(h ^ w) * 0x94D049BB133111EBull;
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    std::uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = mix(h ^ w) * 0x94D049BB133111EBull;
  }
  h = mix(h);
  return h | 1;
}

void merge_table::insert(std::uint32_t left, std::uint32_t right, merge_rule rule) {
  if ((size_ + 1) * 2 > slots_.size()) grow();
  std::uint64_t key = make_key(left, right);
  for (std::size_t i = slot_of(key);; i = (i + 1) & mask_) {
    slot& s = slots_[i];
    if (s.key == key) {
      s.rule = rule;
      return;
    }
    if (s.key == k_empty) {
      s = {key, rule};
      ++size_;
      return;
    }
  }
}

void merge_table::grow() {
  std::vector<slot> old = std::move(slots_);
  slots_.assign(std::max<std::size_t>(1024, old.size() * 2), slot{k_empty, {}});
  mask_ = slots_.size() - 1;
  size_ = 0;
  for (const slot& s : old) {
    if (s.key != k_empty) insert(std::uint32_t(s.key >> 32), std::uint32_t(s.key), s.rule);
  }
}

word_cache::word_cache(std::size_t num_slots_log2)
    : slots_(std::size_t(1) << num_slots_log2), mask_(slots_.size() - 1) {}

bool word_cache::find(std::string_view key, std::uint64_t hash,
                      std::vector<std::int32_t>& out) const {
  for (std::size_t i = hash & mask_;; i = (i + 1) & mask_) {
    const slot& s = slots_[i];
    if (s.hash == 0) return false;
    if (s.hash == hash && s.key_size == key.size() &&
        std::memcmp(keys_.data() + s.key_offset, key.data(), key.size()) == 0) {
      out.insert(out.end(), ids_.begin() + s.ids_offset, ids_.begin() + s.ids_offset + s.num_ids);
      return true;
    }
  }
}

void word_cache::insert(std::string_view key, std::uint64_t hash,
                        std::span<const std::int32_t> ids) {
  if (key.size() > k_max_key_bytes) return;
  if ((num_entries_ + 1) * 2 > slots_.size()) clear();
  std::size_t i = hash & mask_;
  while (slots_[i].hash != 0) i = (i + 1) & mask_;
  slots_[i] = {hash, std::uint32_t(keys_.size()), std::uint32_t(ids_.size()),
               std::uint16_t(key.size()), std::uint16_t(ids.size())};
  keys_.append(key);
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  ++num_entries_;
}

void word_cache::clear() {
  std::fill(slots_.begin(), slots_.end(), slot{});
  num_entries_ = 0;
  keys_.clear();
  ids_.clear();
}

void bpe_merge(const merge_table& merges, std::vector<std::uint32_t>& symbols,
               bpe_scratch& scratch) {
  if (symbols.size() < 2) return;
  if (symbols.size() <= k_scan_max_symbols) {
    bpe_merge_scan(merges, symbols, scratch);
  } else {
    bpe_merge_heap(merges, symbols, scratch);
  }
}

void bpe_merge_scan(const merge_table& merges, std::vector<std::uint32_t>& symbols,
                    bpe_scratch& scratch) {
  auto& rules = scratch.rules;
  auto rule_of = [&](std::uint32_t l, std::uint32_t r) {
    const merge_rule* m = merges.find(l, r);
    return m ? *m : merge_rule{k_no_rank, 0};
  };
  std::size_t n = symbols.size();
  rules.resize(n);
  for (std::size_t i = 0; i + 1 < n; ++i) rules[i] = rule_of(symbols[i], symbols[i + 1]);
  while (n > 1) {
    std::size_t best = 0;
    for (std::size_t i = 1; i + 1 < n; ++i) {
      if (rules[i].rank < rules[best].rank) best = i;
    }
    if (rules[best].rank == k_no_rank) break;
    symbols[best] = rules[best].merged_id;
    // Drop symbol best+1 and the rule of the pair just merged.
    std::copy(symbols.begin() + long(best) + 2, symbols.begin() + long(n),
              symbols.begin() + long(best) + 1);
    std::copy(rules.begin() + long(best) + 1, rules.begin() + long(n) - 1,
              rules.begin() + long(best));
    --n;
    if (best + 1 < n) rules[best] = rule_of(symbols[best], symbols[best + 1]);
    if (best > 0) rules[best - 1] = rule_of(symbols[best - 1], symbols[best]);
  }
  symbols.resize(n);
}

void bpe_merge_heap(const merge_table& merges, std::vector<std::uint32_t>& symbols,
                    bpe_scratch& scratch) {
  const std::size_t n = symbols.size();
  auto& prev = scratch.prev;
  auto& next = scratch.next;
  auto& heap = scratch.heap;
  prev.resize(n);
  next.resize(n);
  heap.clear();
  // Entries order by rank, then position: exactly HF's (rank, pos) priority.
  auto push = [&](std::size_t pos) {
    if (next[pos] < 0) return;
    const merge_rule* m = merges.find(symbols[pos], symbols[std::size_t(next[pos])]);
    if (m == nullptr) return;
    heap.push_back((std::uint64_t(m->rank) << 32) | pos);
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  for (std::size_t i = 0; i < n; ++i) {
    prev[i] = std::int32_t(i) - 1;
    next[i] = i + 1 < n ? std::int32_t(i + 1) : -1;
  }
  for (std::size_t i = 0; i + 1 < n; ++i) push(i);
  constexpr std::uint32_t k_removed = ~std::uint32_t(0);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    std::uint64_t top = heap.back();
    heap.pop_back();
    std::size_t pos = std::size_t(top & 0xFFFFFFFFu);
    std::uint32_t rank = std::uint32_t(top >> 32);
    if (symbols[pos] == k_removed || next[pos] < 0) continue;
    std::size_t right = std::size_t(next[pos]);
    const merge_rule* m = merges.find(symbols[pos], symbols[right]);
    if (m == nullptr || m->rank != rank) continue;  // stale: a neighbour changed since the push
    symbols[pos] = m->merged_id;
    symbols[right] = k_removed;
    next[pos] = next[right];
    if (next[pos] >= 0) prev[std::size_t(next[pos])] = std::int32_t(pos);
    if (prev[pos] >= 0) push(std::size_t(prev[pos]));
    push(pos);
  }
  symbols.erase(std::remove(symbols.begin(), symbols.end(), k_removed), symbols.end());
}

}  // namespace di::tok::detail
