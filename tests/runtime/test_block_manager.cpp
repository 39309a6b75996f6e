// The block manager alone: per-stream block counts, prefix sharing with reference counts,
// LRU eviction (tail blocks first), can_allocate's accounting of adopted evictable blocks,
// snapshots and the resume point of a hit (snapshot boundary or bounded replay).
#include "runtime/block_manager.hpp"
#include "tests/runtime/scheduler_test_util.hpp"

#include <doctest/doctest.h>

using namespace di::runtime;
using di::test::prompt_tokens;
using di::test::small_geometry;

namespace {

block_manager_config config_with(std::vector<std::int32_t> pools, bool replay = false,
                                 int num_snapshots = 0, int interval = 0) {
  return {.geometry = small_geometry(),
          .num_blocks = std::move(pools),
          .enable_prefix_caching = true,
          .enable_replay = replay,
          .num_snapshots = num_snapshots,
          .snapshot_interval = interval};
}

/// Allocates `tokens` in a new sequence and registers its full token blocks.
sequence_blocks fill(block_manager& bm, const std::vector<std::int32_t>& tokens) {
  sequence_blocks seq;
  const std::int64_t n = std::int64_t(tokens.size());
  bm.allocate(seq, bm.match_prefix(tokens, n - 1), n);
  bm.cache_full_blocks(seq, tokens, n);
  return seq;
}

void check_all_free(const block_manager& bm) {
  for (int s = 0; s < bm.geometry().num_streams(); ++s) {
    CHECK(bm.num_used_blocks(s) == 0);
    CHECK(bm.num_free_blocks(s) + bm.num_evictable_blocks(s) == bm.num_blocks(s));
  }
}

}  // namespace

TEST_CASE("each stream holds ceil((n / ratio) / entries_per_block) blocks") {
  block_manager bm(config_with({8, 4, 4}));
  sequence_blocks a;
  bm.allocate(a, {}, 5);
  CHECK(a.tables[0].size() == 2);  // 5 entries
  CHECK(a.tables[1].size() == 1);  // 2 entries
  bm.append(a, 9);
  CHECK(a.tables[0].size() == 3);
  CHECK(a.tables[1].size() == 1);  // 4 entries fill one block
  bm.append(a, 10);
  CHECK(a.tables[1].size() == 2);
  CHECK(bm.num_free_blocks(0) == 5);
  CHECK(bm.can_append(a, 32));
  CHECK_FALSE(bm.can_append(a, 33));  // stream 0 holds 8 * 4 entries
  CHECK_THROWS(bm.append(a, 33));
  CHECK(a.tables[0].size() == 3);  // a failed append changes nothing
  bm.free(a);
  CHECK(bm.num_free_blocks(0) == 8);
  CHECK(bm.num_free_blocks(1) == 4);
  CHECK(a.is_empty());
}

TEST_CASE("a cached prefix is shared by reference and survives its first owner") {
  block_manager bm(config_with({16, 8, 8}, /*replay=*/true));
  const auto tokens = prompt_tokens(1, 20);
  sequence_blocks a = fill(bm, tokens);
  CHECK(bm.num_cached_entries() == 2);  // 16 of 20 tokens are full token blocks
  prefix_match m = bm.match_prefix(tokens, 19);
  CHECK(m.num_cached_tokens == 16);
  CHECK(m.entries.size() == 2);
  CHECK(m.resume_position == 16 - 9);  // bounded replay of R = 9 tokens
  CHECK_FALSE(m.snapshot);
  sequence_blocks b;
  bm.allocate(b, m, 20);
  for (int i = 0; i < 4; ++i) CHECK(b.tables[0][i] == a.tables[0][i]);
  CHECK(b.tables[0][4] != a.tables[0][4]);
  CHECK(b.tables[1][0] == a.tables[1][0]);
  CHECK(b.tables[1][1] == a.tables[1][1]);
  CHECK(bm.num_used_blocks(0) == 6);  // 4 shared + 1 + 1
  bm.free(a);
  CHECK(bm.num_used_blocks(0) == 5);  // b still holds the shared four
  CHECK(bm.num_evictable_blocks(0) == 0);
  bm.free(b);
  check_all_free(bm);
  CHECK(bm.num_evictable_blocks(0) == 4);
  CHECK(bm.longest_cached_prefix(tokens) == 16);
  bm.reset_prefix_cache();
  CHECK(bm.num_free_blocks(0) == 16);
  CHECK(bm.longest_cached_prefix(tokens) == 0);
}

TEST_CASE("a match stops at the first different token block and at max_tokens") {
  block_manager bm(config_with({16, 8, 8}));
  auto tokens = prompt_tokens(2, 24);
  sequence_blocks a = fill(bm, tokens);
  CHECK(bm.match_prefix(tokens, 23).num_cached_tokens == 16);
  CHECK(bm.match_prefix(tokens, 24).num_cached_tokens == 24);
  CHECK(bm.match_prefix(tokens, 15).num_cached_tokens == 8);
  auto other = tokens;
  other[10] += 1;  // block 1 differs: block 2 is unreachable even though its tokens match
  CHECK(bm.match_prefix(other, 24).num_cached_tokens == 8);
  other[3] += 1;
  CHECK(bm.match_prefix(other, 24).num_cached_tokens == 0);
  bm.free(a);
}

TEST_CASE("a cache_salt keeps a prompt's cached blocks to requests with the same salt") {
  block_manager bm(config_with({16, 8, 8}));
  const auto tokens = prompt_tokens(3, 24);
  const std::uint64_t a = prefix_root("tenant-a"), b = prefix_root("tenant-b");
  CHECK(prefix_root("") == unsalted_prefix_root);
  CHECK(a != b);
  CHECK(a != unsalted_prefix_root);
  sequence_blocks salted;
  bm.allocate(salted, bm.match_prefix(tokens, 23, a), 24);
  CHECK(salted.root == a);
  bm.cache_full_blocks(salted, tokens, 24);
  CHECK(bm.match_prefix(tokens, 24, a).num_cached_tokens == 24);
  CHECK(bm.match_prefix(tokens, 24, b).num_cached_tokens == 0);
  CHECK(bm.match_prefix(tokens, 24).num_cached_tokens == 0);  // unsalted requests miss too
  CHECK(bm.longest_cached_prefix(tokens) == 0);
  CHECK(bm.longest_cached_prefix(tokens, a) == 24);  // the router's probe, in a's chain
  CHECK(bm.longest_cached_prefix(tokens, b) == 0);
  sequence_blocks plain = fill(bm, tokens);  // and an unsalted one does not reach the salted
  CHECK(plain.root == unsalted_prefix_root);
  CHECK(bm.match_prefix(tokens, 24).num_cached_tokens == 24);
  CHECK(bm.num_cached_entries() == 6);  // the same blocks twice, once per chain
  bm.free(salted);
  bm.free(plain);
  CHECK(bm.match_prefix(tokens, 24, a).num_cached_tokens == 24);  // still cached, apart
}

TEST_CASE("eviction takes the least recently released chain, tail first") {
  block_manager bm(config_with({8, 4, 4}));  // 4 token blocks
  const auto A = prompt_tokens(3, 16), B = prompt_tokens(4, 16);
  sequence_blocks a = fill(bm, A);
  bm.free(a);
  sequence_blocks b = fill(bm, B);
  bm.free(b);
  CHECK(bm.num_free_blocks(0) == 0);
  sequence_blocks c = fill(bm, prompt_tokens(5, 8));  // needs one token block
  CHECK(bm.num_evictions() == 1);
  CHECK(bm.longest_cached_prefix(A) == 8);  // A's tail went first
  CHECK(bm.longest_cached_prefix(B) == 16);
  bm.free(c);
  check_all_free(bm);
}

TEST_CASE("can_allocate does not count adopted evictable blocks as reclaimable") {
  block_manager bm(config_with({4, 2, 2}));  // two token blocks
  const auto A = prompt_tokens(6, 16);
  sequence_blocks a = fill(bm, A);
  bm.free(a);
  auto longer = A;
  longer.insert(longer.end(), {1, 2, 3, 4});
  prefix_match m = bm.match_prefix(longer, 19);
  REQUIRE(m.num_cached_tokens == 16);
  CHECK_FALSE(bm.can_allocate(m, 20));  // one more block, and the only evictable ones are m's
  CHECK(bm.can_allocate(m, 16));
  CHECK(bm.can_allocate(prefix_match{}, 16));  // by evicting both
}

TEST_CASE(
    "snapshots: reserved at boundaries, chosen on a hit, LRU-evicted, dropped with their block") {
  block_manager bm(config_with({16, 8, 8}, /*replay=*/true, /*num_snapshots=*/1, /*interval=*/1));
  CHECK(bm.next_snapshot_boundary(0) == 8);
  CHECK(bm.next_snapshot_boundary(8) == 16);
  const auto tokens = prompt_tokens(7, 24);
  sequence_blocks a;
  bm.allocate(a, {}, 24);
  bm.cache_full_blocks(a, tokens, 16);
  CHECK(bm.reserve_snapshot(a, 16) == 0);
  CHECK_FALSE(bm.reserve_snapshot(a, 16));  // already has one
  CHECK_FALSE(bm.reserve_snapshot(a, 24));  // block 2 is not cached yet
  prefix_match m = bm.match_prefix(tokens, 23);
  CHECK(m.num_cached_tokens == 16);
  CHECK(m.resume_position == 16);  // the snapshot beats a replay from 16 - 9
  CHECK(m.snapshot == 0);
  CHECK_FALSE(bm.reserve_snapshot(a, 8));  // the pool is full, its one snapshot reserved now
  bm.begin_step();
  CHECK(bm.reserve_snapshot(a, 8) == 0);  // the next step: block 1's snapshot is evicted
  CHECK(bm.num_snapshot_evictions() == 1);
  m = bm.match_prefix(tokens, 23);
  CHECK(m.resume_position == 8);  // snapshot at 8 (16 - 9 = 7 is earlier)
  CHECK(m.snapshot == 0);
  CHECK(m.num_replay_tokens() == 8);
  bm.free(a);
  bm.reset_prefix_cache();
  CHECK(bm.num_snapshots_used() == 0);
}

TEST_CASE("a reused snapshot id gets a new version; one plan never gives an id two meanings") {
  // The black-box bug: prompt X saved snapshot 0 at boundary 8; in a later step Y's first
  // sequence evicts it and reserves 0 at the same boundary, and Y's second sequence, admitted
  // in the same step, restores 0 there. Only the version tells an executor (which saves after
  // the forward) that snapshot 0 still holds X's save and the restore must wait for Y's.
  block_manager bm(config_with({32, 16, 16}, /*replay=*/false, /*num_snapshots=*/1,
                               /*interval=*/1));
  const auto x = prompt_tokens(1, 12), y = prompt_tokens(2, 12);
  bm.begin_step();
  sequence_blocks sx = fill(bm, x);
  CHECK(bm.reserve_snapshot(sx, 8) == 0);
  const std::uint64_t vx = bm.snapshot_version(0);
  CHECK(vx > 0);
  bm.free(sx);

  bm.begin_step();
  sequence_blocks y1 = fill(bm, y);
  CHECK(bm.reserve_snapshot(y1, 8) == 0);  // X's snapshot evicted for Y's
  CHECK(bm.num_snapshot_evictions() == 1);
  const std::uint64_t vy = bm.snapshot_version(0);
  CHECK(vy != vx);
  prefix_match m = bm.match_prefix(y, 11);
  CHECK(m.snapshot == 0);
  CHECK(m.resume_position == 8);
  CHECK(m.snapshot_version == vy);
  sequence_blocks y2;
  bm.allocate(y2, m, 12);
  CHECK(bm.match_prefix(x, 11).num_cached_tokens == 8);  // X's blocks, without a snapshot
  CHECK_FALSE(bm.match_prefix(x, 11).snapshot);

  // Another prompt reaching a boundary in the same step must not take snapshot 0 from Y (a
  // second save into it in this plan would overwrite the one y2 waits for).
  const auto z = prompt_tokens(3, 12);
  sequence_blocks sz = fill(bm, z);
  CHECK_FALSE(bm.reserve_snapshot(sz, 8));
  CHECK(bm.snapshot_version(0) == vy);
  bm.begin_step();  // the next plan may evict it (y2 holds it only as a restore already done)
  CHECK(bm.reserve_snapshot(sz, 8) == 0);
  CHECK(bm.snapshot_version(0) > vy);
  CHECK_FALSE(bm.match_prefix(y, 11).snapshot);
  bm.free(y1);
  bm.free(y2);
  bm.free(sz);
  bm.reset_prefix_cache();
  check_all_free(bm);
}

TEST_CASE("what rows that did not run were to write is withdrawn: blocks and snapshot") {
  // The scheduler registers a token block and reserves its snapshot when it plans the rows
  // that compute them. When the executor does not run those rows (the sequence failed before
  // the forward), neither was written: no later match may offer them.
  block_manager bm(config_with({32, 16, 16}, /*replay=*/false, /*num_snapshots=*/2,
                               /*interval=*/1));
  const auto x = prompt_tokens(1, 20);
  bm.begin_step();
  sequence_blocks a;
  bm.allocate(a, {}, 20);
  const std::vector<std::uint64_t> added = bm.cache_full_blocks(a, x, 20);
  REQUIRE(added.size() == 2);  // token blocks [0, 8) and [8, 16)
  CHECK(bm.cache_full_blocks(a, x, 20).empty());
  REQUIRE(bm.reserve_snapshot(a, 8) == 0);
  const std::uint64_t v = bm.snapshot_version(0);
  prefix_match m = bm.match_prefix(x, 19);  // b, planned with a, adopts both and the snapshot
  CHECK(m.num_cached_tokens == 16);
  CHECK(m.snapshot == 0);
  sequence_blocks b;
  bm.allocate(b, m, 20);

  bm.withdraw_snapshot(0, v + 1);  // another save of snapshot 0: not this one
  CHECK(bm.num_snapshots_used() == 1);
  bm.withdraw_snapshot(0, v);
  CHECK(bm.num_snapshots_used() == 0);
  for (std::uint64_t h : added) CHECK(bm.withdraw_entry(h).has_value());  // a and b hold them
  CHECK_FALSE(bm.withdraw_entry(added[0]));  // withdrawn already: nothing
  CHECK(bm.num_cached_entries() == 0);
  CHECK(bm.match_prefix(x, 19).num_cached_tokens == 0);
  CHECK_FALSE(bm.reserve_snapshot(a, 16));  // a withdrawn block gets no snapshot
  // Their holders keep them until freed; then they are free, not cached.
  bm.free(a);
  CHECK(bm.num_total_evictable_blocks() == 0);
  bm.free(b);
  CHECK(bm.num_total_evictable_blocks() == 0);
  CHECK(bm.num_total_free_blocks() == bm.num_total_blocks());

  // Computed again, the prefix is cached (and snapshotted) again. An unreferenced entry is
  // freed at once; the rest of the chain up to it stays.
  bm.begin_step();
  sequence_blocks c = fill(bm, x);
  CHECK(bm.num_cached_entries() == 2);
  CHECK(bm.reserve_snapshot(c, 16) == 0);
  const std::uint64_t tail = c.hashes.at(1);
  bm.free(c);
  CHECK_FALSE(bm.withdraw_entry(tail));  // nobody holds it
  CHECK(bm.num_cached_entries() == 1);
  CHECK(bm.num_snapshots_used() == 0);
  CHECK(bm.match_prefix(x, 19).num_cached_tokens == 8);
  bm.reset_prefix_cache();
  check_all_free(bm);
  CHECK(bm.num_total_free_blocks() == bm.num_total_blocks());
}

TEST_CASE("without snapshots or replay a hit resumes at 0 but still shares the blocks") {
  block_manager bm(config_with({16, 8, 8}));
  const auto tokens = prompt_tokens(8, 40);
  sequence_blocks a = fill(bm, tokens);
  prefix_match m = bm.match_prefix(tokens, 39);
  CHECK(m.num_cached_tokens == 32);
  CHECK(m.resume_position == 0);
  block_manager replay(config_with({16, 8, 8}, /*replay=*/true));
  sequence_blocks b = fill(replay, tokens);
  CHECK(replay.match_prefix(tokens, 39).resume_position == 32 - 9);
  bm.free(a);
  replay.free(b);
}

TEST_CASE("max_fitting_tokens finds the longest growth the pools allow") {
  block_manager bm(config_with({8, 4, 4}));
  sequence_blocks a, b;
  bm.allocate(a, {}, 20);  // stream 0: 5 blocks, stream 1: 3
  bm.allocate(b, {}, 8);   // 2 and 1
  CHECK(bm.max_fitting_tokens(a, 20, 40) == 24);
  CHECK(bm.max_fitting_tokens(b, 8, 9) == 9);
  bm.free(a);
  bm.free(b);
}

TEST_CASE("prefix caching off: no registration, no matches") {
  block_manager_config c = config_with({8, 4, 4});
  c.enable_prefix_caching = false;
  block_manager bm(c);
  const auto tokens = prompt_tokens(9, 16);
  sequence_blocks a = fill(bm, tokens);
  CHECK(bm.num_cached_entries() == 0);
  CHECK(bm.longest_cached_prefix(tokens) == 0);
  bm.free(a);
  CHECK(bm.num_free_blocks(0) == 8);
}

TEST_CASE("bad pool configurations are rejected") {
  CHECK_THROWS(block_manager(config_with({8})));
  CHECK_THROWS(block_manager(config_with({8, 4, -1})));
}
