// block_manager: free lists per stream, the chained-hash prefix cache with verified matches,
// LRU eviction (tail blocks of a chain first) and the snapshot pool.
#include "runtime/block_manager.hpp"

#include "common/error.hpp"
#include "runtime/sampling_rng.hpp"

#include <algorithm>
#include <iterator>

namespace di::runtime {

namespace {

constexpr std::uint64_t chain_root = unsalted_prefix_root;  // the parent hash of token block 0

/// Hash of one token block chained to its parent's hash.
std::uint64_t chain_hash(std::uint64_t parent, std::span<const std::int32_t> tokens) {
  std::uint64_t h = mix64(parent + splitmix_gamma);
  for (std::int32_t t : tokens) h = mix64((h ^ std::uint64_t(std::uint32_t(t))) + splitmix_gamma);
  return h;
}

}  // namespace

std::uint64_t prefix_root(std::string_view cache_salt) {
  if (cache_salt.empty()) return chain_root;
  std::uint64_t h = mix64(chain_root ^ 0x73616c74ull);  // "salt": apart from any token chain
  for (char c : cache_salt) h = mix64((h ^ std::uint64_t(std::uint8_t(c))) + splitmix_gamma);
  return h == chain_root ? h + 1 : h;
}

bool sequence_blocks::is_empty() const {
  for (const auto& t : tables)
    if (!t.empty()) return false;
  return hashes.empty() && held.empty();
}

block_manager::block_manager(block_manager_config config) : config_(std::move(config)) {
  const kv_geometry& g = config_.geometry;
  g.validate();
  DI_CHECK(config_.num_blocks.size() == std::size_t(g.num_streams()),
           "block manager: {} pool sizes for {} streams", config_.num_blocks.size(),
           g.num_streams());
  DI_CHECK(config_.num_snapshots >= 0 && config_.snapshot_interval >= 0,
           "block manager: {} snapshots every {} token blocks", config_.num_snapshots,
           config_.snapshot_interval);
  token_block_size_ = g.token_block_size();
  for (std::int32_t n : config_.num_blocks) {
    DI_CHECK(n >= 0, "block manager: a stream pool of {} blocks", n);
    std::vector<std::int32_t> ids;
    for (std::int32_t b = n - 1; b >= 0; --b) ids.push_back(b);  // hands out 0, 1, ... first
    free_.push_back(std::move(ids));
  }
  snapshot_owner_.resize(std::size_t(config_.num_snapshots));
  snapshot_pos_.resize(std::size_t(config_.num_snapshots));
  snapshot_versions_.resize(std::size_t(config_.num_snapshots), 0);
  snapshot_pinned_.resize(std::size_t(config_.num_snapshots), false);
  for (std::int32_t z = config_.num_snapshots - 1; z >= 0; --z) free_snapshots_.push_back(z);
}

// ---- lookup --------------------------------------------------------------------------------

std::optional<std::int32_t> block_manager::find_entry(std::uint64_t hash, std::uint64_t parent,
                                                      std::span<const std::int32_t> tokens) const {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  const cache_entry& e = entries_[std::size_t(it->second)];
  if (e.parent_hash != parent ||
      !std::equal(tokens.begin(), tokens.end(), e.tokens.begin(), e.tokens.end()))
    return std::nullopt;  // a hash collision: never reuse
  return it->second;
}

void block_manager::resume_point(prefix_match& match) const {
  std::int64_t best = 0;
  for (std::size_t j = match.entries.size(); j-- > 0;) {
    const cache_entry& e = entries_[std::size_t(match.entries[j])];
    if (e.snapshot) {
      best = std::int64_t(j + 1) * token_block_size_;
      match.snapshot = e.snapshot;
      match.snapshot_version = snapshot_versions_[std::size_t(*e.snapshot)];
      break;
    }
  }
  const std::int64_t replay_start = match.num_cached_tokens - config_.geometry.replay_span();
  if (config_.enable_replay && replay_start > best) {
    best = replay_start;
    match.snapshot.reset();
    match.snapshot_version = 0;
  }
  match.resume_position = best;
}

prefix_match block_manager::match_prefix(std::span<const std::int32_t> tokens,
                                         std::int64_t max_tokens, std::uint64_t root) const {
  prefix_match match{.root = root};
  if (!config_.enable_prefix_caching) return match;
  const std::int64_t L = token_block_size_;
  const std::int64_t limit = std::min<std::int64_t>(std::int64_t(tokens.size()), max_tokens) / L;
  std::uint64_t parent = root;
  for (std::int64_t k = 0; k < limit; ++k) {
    auto block = tokens.subspan(std::size_t(k * L), std::size_t(L));
    const std::uint64_t h = chain_hash(parent, block);
    std::optional<std::int32_t> id = find_entry(h, parent, block);
    if (!id) break;
    match.entries.push_back(*id);
    match.hashes.push_back(h);
    parent = h;
  }
  match.num_cached_tokens = std::int64_t(match.entries.size()) * L;
  resume_point(match);
  return match;
}

std::int64_t block_manager::longest_cached_prefix(std::span<const std::int32_t> tokens,
                                                  std::uint64_t root) const {
  return match_prefix(tokens, std::int64_t(tokens.size()), root).num_cached_tokens;
}

// ---- allocation ----------------------------------------------------------------------------

std::int64_t block_manager::blocks_needed(int s, const sequence_blocks& seq,
                                          std::int64_t num_tokens) const {
  const std::int64_t held =
      seq.tables.empty() ? 0 : std::int64_t(seq.tables[std::size_t(s)].size());
  return std::max<std::int64_t>(0, config_.geometry.num_blocks(s, num_tokens) - held);
}

bool block_manager::has_room(std::span<const std::int64_t> needed, std::int64_t num_pinned) const {
  const std::int64_t evictable = std::int64_t(evictable_.size()) - num_pinned;
  for (int s = 0; s < config_.geometry.num_streams(); ++s) {
    const std::int64_t room = std::int64_t(free_[std::size_t(s)].size()) +
                              evictable * config_.geometry.blocks_per_token_block(s);
    if (room < needed[std::size_t(s)]) return false;
  }
  return true;
}

bool block_manager::can_allocate(const prefix_match& match, std::int64_t num_tokens) const {
  const kv_geometry& g = config_.geometry;
  std::vector<std::int64_t> needed(std::size_t(g.num_streams()));
  const std::int64_t k = std::int64_t(match.entries.size());
  for (int s = 0; s < g.num_streams(); ++s)
    needed[std::size_t(s)] =
        std::max<std::int64_t>(0, g.num_blocks(s, num_tokens) - k * g.blocks_per_token_block(s));
  std::int64_t pinned = 0;  // adopting an unreferenced entry takes it off the evictable list
  for (std::int32_t id : match.entries) pinned += entries_[std::size_t(id)].ref_count == 0;
  return has_room(needed, pinned);
}

void block_manager::allocate(sequence_blocks& seq, const prefix_match& match,
                             std::int64_t num_tokens) {
  DI_CHECK(seq.is_empty(), "block manager: allocate on a sequence that holds blocks");
  DI_CHECK(can_allocate(match, num_tokens), "block manager: no room for {} tokens", num_tokens);
  seq.tables.assign(std::size_t(config_.geometry.num_streams()), {});
  seq.root = match.root;
  for (std::size_t j = 0; j < match.entries.size(); ++j) {
    const std::int32_t id = match.entries[j];
    cache_entry& e = entries_[std::size_t(id)];
    if (e.ref_count++ == 0) evictable_.erase(e.lru);
    for (std::size_t s = 0; s < e.blocks.size(); ++s)
      seq.tables[s].insert(seq.tables[s].end(), e.blocks[s].begin(), e.blocks[s].end());
    seq.held.push_back(id);
    seq.hashes.push_back(match.hashes[j]);
  }
  if (match.snapshot) {
    touch_snapshot(*match.snapshot);
    snapshot_pinned_[std::size_t(*match.snapshot)] = true;
  }
  append(seq, num_tokens);
}

bool block_manager::can_append(const sequence_blocks& seq, std::int64_t num_tokens) const {
  std::vector<std::int64_t> needed(std::size_t(config_.geometry.num_streams()));
  for (int s = 0; s < config_.geometry.num_streams(); ++s)
    needed[std::size_t(s)] = blocks_needed(s, seq, num_tokens);
  return has_room(needed, 0);
}

void block_manager::append(sequence_blocks& seq, std::int64_t num_tokens) {
  DI_CHECK(can_append(seq, num_tokens), "block manager: no room to grow to {} tokens", num_tokens);
  seq.tables.resize(std::size_t(config_.geometry.num_streams()));
  for (int s = 0; s < config_.geometry.num_streams(); ++s)
    for (std::int64_t n = blocks_needed(s, seq, num_tokens); n > 0; --n)
      seq.tables[std::size_t(s)].push_back(take_block(s));
}

std::int64_t block_manager::max_fitting_tokens(const sequence_blocks& seq, std::int64_t current,
                                               std::int64_t limit) const {
  std::int64_t lo = current, hi = limit;  // can_append is monotone in the token count
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo + 1) / 2;
    if (can_append(seq, mid))
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

std::int32_t block_manager::take_block(int s) {
  auto& ids = free_[std::size_t(s)];
  while (ids.empty()) evict_one();
  const std::int32_t b = ids.back();
  ids.pop_back();
  return b;
}

// ---- release and eviction ------------------------------------------------------------------

void block_manager::evict_one() {
  DI_CHECK(!evictable_.empty(), "block manager: nothing left to evict");
  const std::int32_t id = evictable_.front();
  evictable_.pop_front();
  by_hash_.erase(entries_[std::size_t(id)].hash);
  free_entry(id);
  ++num_evictions_;
}

/// Returns the blocks and the snapshot of entry `id` (out of by_hash_ and evictable_ already).
void block_manager::free_entry(std::int32_t id) {
  cache_entry& e = entries_[std::size_t(id)];
  for (std::size_t s = 0; s < e.blocks.size(); ++s)
    free_[s].insert(free_[s].end(), e.blocks[s].begin(), e.blocks[s].end());
  if (e.snapshot) drop_snapshot(id);
  e = cache_entry{};
  free_entries_.push_back(id);
}

void block_manager::release_entry(std::int32_t id) {
  cache_entry& e = entries_[std::size_t(id)];
  DI_CHECK(e.ref_count > 0, "block manager: cache entry {} released more often than held", id);
  if (--e.ref_count > 0) return;
  if (e.is_withdrawn)
    free_entry(id);
  else
    e.lru = evictable_.insert(evictable_.end(), id);
}

std::optional<std::int32_t> block_manager::withdraw_entry(std::uint64_t hash) {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  const std::int32_t id = it->second;
  by_hash_.erase(it);
  cache_entry& e = entries_[std::size_t(id)];
  if (e.snapshot) drop_snapshot(id);
  if (e.ref_count > 0) {
    e.is_withdrawn = true;  // its holders free it
    return id;
  }
  evictable_.erase(e.lru);
  free_entry(id);
  return std::nullopt;
}

void block_manager::free(sequence_blocks& seq) {
  const kv_geometry& g = config_.geometry;
  for (int s = 0; s < int(seq.tables.size()); ++s) {
    const std::int64_t per = g.blocks_per_token_block(s);
    const auto& table = seq.tables[std::size_t(s)];
    for (std::size_t i = 0; i < table.size(); ++i) {
      const std::size_t k = i / std::size_t(per);
      if (k < seq.held.size() && seq.held[k]) continue;  // the cache entry owns it
      free_[std::size_t(s)].push_back(table[i]);
    }
  }
  // Tail first, so that the LRU order evicts a chain from its end and its prefix stays usable.
  for (std::size_t k = seq.held.size(); k-- > 0;)
    if (seq.held[k]) release_entry(*seq.held[k]);
  seq = sequence_blocks{};
}

void block_manager::reset_prefix_cache() {
  while (!evictable_.empty()) evict_one();
}

// ---- registration --------------------------------------------------------------------------

std::int32_t block_manager::add_entry(std::uint64_t hash, std::uint64_t parent, std::int64_t index,
                                      std::span<const std::int32_t> tokens,
                                      const sequence_blocks& seq) {
  std::int32_t id;
  if (!free_entries_.empty()) {
    id = free_entries_.back();
    free_entries_.pop_back();
  } else {
    id = std::int32_t(entries_.size());
    entries_.emplace_back();
  }
  cache_entry& e = entries_[std::size_t(id)];
  e.hash = hash;
  e.parent_hash = parent;
  e.index = index;
  e.tokens.assign(tokens.begin(), tokens.end());
  e.blocks.resize(seq.tables.size());
  for (int s = 0; s < int(seq.tables.size()); ++s) {
    const std::int64_t per = config_.geometry.blocks_per_token_block(s);
    auto first = seq.tables[std::size_t(s)].begin() + index * per;
    e.blocks[std::size_t(s)].assign(first, first + per);
  }
  e.ref_count = 1;
  by_hash_.emplace(hash, id);
  return id;
}

std::vector<std::uint64_t> block_manager::cache_full_blocks(sequence_blocks& seq,
                                                            std::span<const std::int32_t> tokens,
                                                            std::int64_t num_computed) {
  std::vector<std::uint64_t> added;
  if (!config_.enable_prefix_caching) return added;
  const std::int64_t L = token_block_size_;
  const std::int64_t full = std::min<std::int64_t>(num_computed, std::int64_t(tokens.size())) / L;
  for (std::int64_t k = std::int64_t(seq.hashes.size()); k < full; ++k) {
    const std::uint64_t parent = k == 0 ? seq.root : seq.hashes[std::size_t(k - 1)];
    auto block = tokens.subspan(std::size_t(k * L), std::size_t(L));
    const std::uint64_t h = chain_hash(parent, block);
    seq.hashes.push_back(h);
    if (by_hash_.contains(h)) {
      seq.held.emplace_back();  // computed twice (or a collision): the copy stays private
    } else {
      seq.held.emplace_back(add_entry(h, parent, k, block, seq));
      added.push_back(h);
    }
  }
  return added;
}

// ---- snapshots -----------------------------------------------------------------------------

std::optional<std::int64_t> block_manager::next_snapshot_boundary(std::int64_t position) const {
  if (!config_.enable_prefix_caching || config_.num_snapshots == 0 ||
      config_.snapshot_interval == 0)
    return std::nullopt;
  const std::int64_t unit = std::int64_t(config_.snapshot_interval) * token_block_size_;
  return (position / unit + 1) * unit;
}

std::optional<std::int32_t> block_manager::reserve_snapshot(sequence_blocks& seq,
                                                            std::int64_t boundary) {
  if (!next_snapshot_boundary(0)) return std::nullopt;
  const std::int64_t unit = std::int64_t(config_.snapshot_interval) * token_block_size_;
  DI_CHECK(boundary > 0 && boundary % unit == 0, "block manager: {} is no snapshot boundary",
           boundary);
  const std::size_t k = std::size_t(boundary / token_block_size_ - 1);
  if (k >= seq.held.size() || !seq.held[k]) return std::nullopt;
  const std::int32_t owner = *seq.held[k];
  cache_entry& e = entries_[std::size_t(owner)];
  if (e.snapshot || e.is_withdrawn) return std::nullopt;
  if (free_snapshots_.empty()) {
    // The least recently used snapshot that this step neither restores nor saves.
    auto victim = std::find_if(snapshot_lru_.begin(), snapshot_lru_.end(),
                               [&](std::int32_t z) { return !snapshot_pinned_[std::size_t(z)]; });
    if (victim == snapshot_lru_.end()) return std::nullopt;
    drop_snapshot(*snapshot_owner_[std::size_t(*victim)]);
    ++num_snapshot_evictions_;
  }
  const std::int32_t z = free_snapshots_.back();
  free_snapshots_.pop_back();
  snapshot_versions_[std::size_t(z)] = next_snapshot_version_++;
  snapshot_pinned_[std::size_t(z)] = true;
  e.snapshot = z;
  snapshot_owner_[std::size_t(z)] = owner;
  snapshot_pos_[std::size_t(z)] = snapshot_lru_.insert(snapshot_lru_.end(), z);
  return z;
}

void block_manager::withdraw_snapshot(std::int32_t snapshot, std::uint64_t version) {
  if (snapshot < 0 || snapshot >= config_.num_snapshots) return;
  const std::optional<std::int32_t> owner = snapshot_owner_[std::size_t(snapshot)];
  if (owner && snapshot_versions_[std::size_t(snapshot)] == version) drop_snapshot(*owner);
}

std::uint64_t block_manager::snapshot_version(std::int32_t snapshot) const {
  DI_CHECK(snapshot >= 0 && snapshot < config_.num_snapshots, "block manager: snapshot {} of {}",
           snapshot, config_.num_snapshots);
  return snapshot_versions_[std::size_t(snapshot)];
}

void block_manager::begin_step() {
  std::fill(snapshot_pinned_.begin(), snapshot_pinned_.end(), false);
}

void block_manager::drop_snapshot(std::int32_t entry) {
  cache_entry& e = entries_[std::size_t(entry)];
  const std::int32_t z = *e.snapshot;
  snapshot_lru_.erase(snapshot_pos_[std::size_t(z)]);
  snapshot_owner_[std::size_t(z)].reset();
  free_snapshots_.push_back(z);
  e.snapshot.reset();
}

void block_manager::touch_snapshot(std::int32_t z) {
  snapshot_lru_.splice(snapshot_lru_.end(), snapshot_lru_, snapshot_pos_[std::size_t(z)]);
}

// ---- gauges --------------------------------------------------------------------------------

int block_manager::num_evictable_blocks(int s) const {
  return int(std::int64_t(evictable_.size()) * config_.geometry.blocks_per_token_block(s));
}

int block_manager::num_used_blocks(int s) const {
  return num_blocks(s) - num_free_blocks(s) - num_evictable_blocks(s);
}

std::int64_t block_manager::num_total_blocks() const {
  std::int64_t n = 0;
  for (int s = 0; s < geometry().num_streams(); ++s) n += num_blocks(s);
  return n;
}

std::int64_t block_manager::num_total_free_blocks() const {
  std::int64_t n = 0;
  for (int s = 0; s < geometry().num_streams(); ++s) n += num_free_blocks(s);
  return n;
}

std::int64_t block_manager::num_total_evictable_blocks() const {
  std::int64_t n = 0;
  for (int s = 0; s < geometry().num_streams(); ++s) n += num_evictable_blocks(s);
  return n;
}

int block_manager::num_snapshots_used() const {
  return config_.num_snapshots - int(free_snapshots_.size());
}

}  // namespace di::runtime
