// The paged block manager of one scheduler: per-stream block pools for the growing caches of
// the CPU engine's sequence state (compressed KV and indexer keys, one entry per `ratio`
// tokens, entries_per_block entries per block), reference-counted prefix sharing by chained
// block hashes, LRU eviction of unreferenced cached blocks, and slot snapshots that make a
// prefix hit exact. Only the scheduler talks to it (nano-vllm's rule); executors only ever see
// block ids in step plans.
//
// Prefix unit. Blocks of different streams cover different token ranges (a ratio-1 block 64
// tokens, a ratio-2 block 128), so the cache hashes "token blocks" of L tokens, L = the least
// common multiple of ratio * entries_per_block over the streams (kv_geometry::token_block_size:
// 128 for V4.1). At a multiple of L every stream's blocks are full, so a cached token block is
// a fixed set of whole, immutable blocks (L / (ratio * E) per stream) shared by reference
// count, with no copy-on-write of half-filled blocks. Hashing each stream separately would gain
// nothing: a hit is only usable up to where *every* stream is cached, i.e. a multiple of L
// anyway. The cost is coarseness when one stream is coarse (V4's ratio-128 streams make L =
// 8192 at 64 entries; such deployments lower entries_per_block). Token block k's hash chains
// the hash of block k - 1 with its L token ids, so equal hashes mean equal prefixes; each entry
// also keeps its tokens and parent hash, checked on every match, so a 64-bit collision can cost
// a hit but never a wrong reuse.
//
// Exact restore of a prefix hit. The streams below a cached boundary P are reused, but the
// slot is not paged: per layer the sliding-window ring, per compressor its partial group (empty
// at P, a multiple of every ratio, except that an overlapping V4 compressor keeps the complete
// group [P - r, P)), and the Engram history. Recomputing "the last window's tokens" is NOT
// exact by itself: the window KV of layer l at position q is a function of h_l(q), the input of
// layer l, which depends through layer l - 1's window on positions q - w + 1 .. q, and so on
// down the stack. Precisely, with w the window (positions a token attends, itself included):
//
//   Lemma. Run positions S, S+1, ... from a slot whose rings and compressor groups hold
//   anything, with an exact Engram history (rebuilt from the look-back tokens before S, which
//   the plan carries) and stream entries below P read from the cache and never written ("replay
//   rows"). Then h_l(p) equals the original run's for every p >= S + l * (w - 1).
//   Proof, induction on l. h_0 is the embedding of one token. Layer l's output at p is a
//   per-token function of h_l(p) (norms, projections, MoE, hyper-connections; Engram, whose
//   hash ids depend on tokens only), of the window KV rows at p - w + 1 .. p (each a per-token
//   function of h_l there, exact when p - w + 1 >= S + l (w - 1)), and of stream entries and
//   indexer keys below (p + 1) / r, exact because they come from the cache.
//
//   After P, a token reads the rings only at P - w + 1 .. P - 1 (the row of P - w is never
//   read again: position P overwrites it; a snapshot taken at P carries it, but whoever
//   restores that snapshot resumes at P as well) and an overlapping compressor reads its kept
//   group from layer inputs at P - r .. P - 1. All are exact when
//   P - max(w - 1, r) >= S + (n - 1)(w - 1), with n the number of layers, i.e. when the replay
//   covers R = (n - 1)(w - 1) + max(w - 1, r_overlap) tokens (kv_geometry::replay_span). Then
//   everything from P on is computed exactly as in the original run, provided the forward
//   gives each row the same result however rows are batched and chunked (the CPU engine does;
//   CUDA needs batch-invariant mode). (The last layer's ring feeds only the logits of rows
//   P .. P + w - 2; the cached streams alone would need (n - 1)(w - 1) + r_overlap. R keeps
//   the w - 1 so that the logits of those rows, e.g. a prompt ending just after P, are exact.)
//
// R grows with depth: 5080 tokens for V4.1-Flash (40 layers, window 128), 310 for tiny-v41 —
// useless for short prefixes. The other exact scheme is a snapshot of the slot at cached
// boundaries: restoring it gives the state at the boundary byte for byte, with no recompute.
// A snapshot is slot_bytes (2.7 MB for V4.1-Flash, about 24 times the 114 KB of stream blocks
// one 128-token block holds), so snapshots are taken every `snapshot_interval` token blocks
// into a bounded pool, LRU-evicted. On a hit the manager resumes at the later of the best
// snapshot boundary and P - R (0 when neither helps, which is exact trivially); positions
// between the resume point and P run as replay rows over the shared blocks, so a hit always
// shares memory even when it saves no compute.
//
// Blocks are registered and snapshots reserved when the rows that compute them are planned;
// when those rows turn out not to have run, the scheduler withdraws them (withdraw_entry,
// withdraw_snapshot): the cache never offers what was not written.
#pragma once

#include "runtime/kv_geometry.hpp"

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace di::runtime {

struct block_manager_config {
  kv_geometry geometry;
  std::vector<std::int32_t>
      num_blocks;  ///< pool size of each stream; executors hold at least these
  bool enable_prefix_caching = true;
  bool enable_replay =
      true;               ///< resume a hit at P - replay_span when that is later than a snapshot
  int num_snapshots = 0;  ///< slot snapshots kept (slot_bytes each on every executor)
  int snapshot_interval = 0;  ///< token blocks between snapshot boundaries; 0 = no snapshots
};

/// The parent hash of token block 0 of a request without a cache_salt.
inline constexpr std::uint64_t unsalted_prefix_root = 0x70726566697863ull;
/// The parent hash of token block 0 of a request with vLLM's `cache_salt`: every block hash of
/// its prompt chains from it, so only requests with the same salt share cached blocks (a
/// tenant's prompts neither hit nor time another's cache); "" = unsalted_prefix_root.
std::uint64_t prefix_root(std::string_view cache_salt);

/// The blocks one sequence holds. Lives in the scheduler's sequence record; only the block
/// manager edits it.
struct sequence_blocks {
  std::vector<std::vector<std::int32_t>> tables;  ///< [stream][i]: block of entries [i E, (i+1) E)
  std::vector<std::uint64_t> hashes;  ///< chain hash of each hashed token block (full and computed)
  std::vector<std::optional<std::int32_t>> held;  ///< [token block] the cache entry held, if any
  std::uint64_t root = unsalted_prefix_root;      ///< parent hash of token block 0 (its salt's)
  bool is_empty() const;
};

/// A cached prefix and how to resume after it (match_prefix).
struct prefix_match {
  std::vector<std::int32_t> entries;     ///< cache entries of token blocks 0 .. k - 1
  std::vector<std::uint64_t> hashes;     ///< their chain hashes
  std::int64_t num_cached_tokens = 0;    ///< P = k L: stream entries below P come from the cache
  std::int64_t resume_position = 0;      ///< S <= P: the first position the sequence computes
  std::optional<std::int32_t> snapshot;  ///< the slot at S is this snapshot (else a fresh slot)
  std::uint64_t snapshot_version = 0;    ///< the save of `snapshot` that holds it (its identity)
  std::uint64_t root = unsalted_prefix_root;  ///< the chain it was looked up in (prefix_root)
  /// Positions S .. P - 1, recomputed as replay rows (no stream writes).
  std::int64_t num_replay_tokens() const { return num_cached_tokens - resume_position; }
};

class block_manager {
 public:
  /// Throws di::error for an invalid geometry or pool sizes (one non-negative count per stream).
  explicit block_manager(block_manager_config config);

  const block_manager_config& config() const { return config_; }
  const kv_geometry& geometry() const { return config_.geometry; }

  /// The longest cached prefix of `tokens` that ends at or before `max_tokens`, with its
  /// resume point, in the chain of `root` (prefix_root of the request's cache_salt; a sequence
  /// that adopts the match caches its blocks there). No side effects (a lookup is not a use).
  prefix_match match_prefix(std::span<const std::int32_t> tokens, std::int64_t max_tokens,
                            std::uint64_t root = unsalted_prefix_root) const;
  /// Tokens of `tokens` whose stream blocks are cached (a multiple of L) in the chain of `root`
  /// (the request's cache_salt): the router's cache affinity.
  std::int64_t longest_cached_prefix(std::span<const std::int32_t> tokens,
                                     std::uint64_t root = unsalted_prefix_root) const;

  /// Whether a new sequence can adopt `match` and grow to `num_tokens` tokens, evicting
  /// unreferenced cached blocks if needed.
  bool can_allocate(const prefix_match& match, std::int64_t num_tokens) const;
  /// Adopts `match` into the empty `seq` and allocates blocks up to `num_tokens` tokens.
  /// Throws di::error when can_allocate is false.
  void allocate(sequence_blocks& seq, const prefix_match& match, std::int64_t num_tokens);
  /// Whether `seq` can grow to `num_tokens` tokens.
  bool can_append(const sequence_blocks& seq, std::int64_t num_tokens) const;
  /// Grows `seq` to `num_tokens` tokens. Throws di::error when can_append is false.
  void append(sequence_blocks& seq, std::int64_t num_tokens);
  /// The most tokens in [current, limit] that `seq` can grow to (its current capacity if none).
  std::int64_t max_fitting_tokens(const sequence_blocks& seq, std::int64_t current,
                                  std::int64_t limit) const;
  /// Returns every block of `seq`: blocks of cached token blocks stay cached (evictable once
  /// no sequence holds them, tail blocks first), the others go back to the free lists.
  void free(sequence_blocks& seq);

  /// Registers the token blocks of `seq` that are full and computed (below num_computed and
  /// within `tokens`, the known ids) in the prefix cache. A block whose hash is cached already
  /// stays private to the sequence. Returns the hashes of the entries it added.
  std::vector<std::uint64_t> cache_full_blocks(sequence_blocks& seq,
                                               std::span<const std::int32_t> tokens,
                                               std::int64_t num_computed);
  /// The rows that were to compute the cache entry of `hash` did not run (the scheduler
  /// registers a block when it plans them): no later match finds it, its snapshot is
  /// dropped, and its blocks go back to the free lists once no sequence holds it (a holder
  /// keeps its table until it is freed). Returns the entry's id while sequences still hold it
  /// (in sequence_blocks::held; they read entries never written), else none; no-op when
  /// `hash` is not cached.
  std::optional<std::int32_t> withdraw_entry(std::uint64_t hash);
  /// The save `version` of `snapshot` did not happen (its sequence did not run): the
  /// snapshot is dropped if it still has that identity, so no later match restores it.
  void withdraw_snapshot(std::int32_t snapshot, std::uint64_t version);

  /// The first snapshot boundary after `position`, if snapshots are on.
  std::optional<std::int64_t> next_snapshot_boundary(std::int64_t position) const;
  /// A snapshot to save the slot of `seq` into once its first `boundary` tokens are computed
  /// (a snapshot boundary whose token block `seq` holds in the cache); none when that block
  /// has one already or snapshots are off. Evicts the least recently used snapshot when the
  /// pool is full, except one reserved or restored in the current step (then none).
  std::optional<std::int32_t> reserve_snapshot(sequence_blocks& seq, std::int64_t boundary);
  /// The identity of the latest reservation of `snapshot` (1, 2, ... across the pool; 0 =
  /// never reserved). A snapshot id is reused once evicted, so a restore names the save it
  /// means by this version, and an executor refuses a slot that holds another save.
  std::uint64_t snapshot_version(std::int32_t snapshot) const;
  /// Starts the next step plan. Within one plan a snapshot keeps one meaning: one that the
  /// plan restores or reserves is not evicted for another reservation until the next step
  /// (executors save after the forward, so a restore of it planned in the same step would
  /// otherwise read the other prompt's save, or one restored before the forward would be
  /// asked for a save that is overwritten in the same forward).
  void begin_step();

  /// Evicts every unreferenced cached block (and its snapshot).
  void reset_prefix_cache();

  int num_blocks(int s) const { return config_.num_blocks[std::size_t(s)]; }
  int num_free_blocks(int s) const { return int(free_[std::size_t(s)].size()); }
  /// Blocks of cached token blocks no sequence holds (reclaimable by eviction).
  int num_evictable_blocks(int s) const;
  /// Blocks held by live sequences.
  int num_used_blocks(int s) const;
  /// Sums over streams.
  std::int64_t num_total_blocks() const;
  std::int64_t num_total_free_blocks() const;
  std::int64_t num_total_evictable_blocks() const;
  int num_cached_entries() const { return int(by_hash_.size()); }
  int num_snapshots_used() const;
  std::int64_t num_evictions() const { return num_evictions_; }
  std::int64_t num_snapshot_evictions() const { return num_snapshot_evictions_; }

 private:
  struct cache_entry {
    std::uint64_t hash = 0;
    std::uint64_t parent_hash = 0;
    std::int64_t index = 0;                         // token block index in its chain
    std::vector<std::int32_t> tokens;               // [L]
    std::vector<std::vector<std::int32_t>> blocks;  // [stream][blocks_per_token_block]
    std::int32_t ref_count = 0;
    std::optional<std::int32_t> snapshot;
    std::list<std::int32_t>::iterator lru;  // in evictable_ while ref_count == 0
    bool is_withdrawn = false;  // out of by_hash_ (never computed): freed, not cached, at 0 refs
  };

  std::int64_t blocks_needed(int s, const sequence_blocks& seq, std::int64_t num_tokens) const;
  bool has_room(std::span<const std::int64_t> needed, std::int64_t num_pinned) const;
  std::int32_t take_block(int s);
  void evict_one();
  void free_entry(std::int32_t id);
  void release_entry(std::int32_t id);
  std::optional<std::int32_t> find_entry(std::uint64_t hash, std::uint64_t parent,
                                         std::span<const std::int32_t> tokens) const;
  std::int32_t add_entry(std::uint64_t hash, std::uint64_t parent, std::int64_t index,
                         std::span<const std::int32_t> tokens, const sequence_blocks& seq);
  void resume_point(prefix_match& match) const;
  void drop_snapshot(std::int32_t entry);
  void touch_snapshot(std::int32_t snapshot);

  block_manager_config config_;
  std::int64_t token_block_size_;
  std::vector<std::vector<std::int32_t>> free_;  // per stream: free block ids
  std::vector<cache_entry> entries_;             // slots; live ones are in by_hash_
  std::vector<std::int32_t> free_entries_;       // reusable slots of entries_
  std::unordered_map<std::uint64_t, std::int32_t> by_hash_;
  std::list<std::int32_t> evictable_;  // unreferenced entries, least recent first
  std::vector<std::optional<std::int32_t>> snapshot_owner_;  // [snapshot] entry holding it
  std::list<std::int32_t> snapshot_lru_;                     // snapshots in use, least recent first
  std::vector<std::list<std::int32_t>::iterator> snapshot_pos_;
  std::vector<std::int32_t> free_snapshots_;
  std::vector<std::uint64_t> snapshot_versions_;  // [snapshot] its latest reservation's version
  std::vector<bool> snapshot_pinned_;             // [snapshot] reserved or restored this step
  std::uint64_t next_snapshot_version_ = 1;
  std::int64_t num_evictions_ = 0;
  std::int64_t num_snapshot_evictions_ = 0;
};

}  // namespace di::runtime
