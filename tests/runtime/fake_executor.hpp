// A fake executor for scheduler tests that follows the executor's side of the step-plan
// contract (runtime/step_plan.hpp) on a toy model with the same dependency structure as
// DeepSeek-V4: `num_layers` layers, each attending a sliding window of `window` positions
// (a ring per layer in the slot) and the entries of its own paged streams (stream s belongs to
// layer s % num_layers; entry e of a stream is written when position (e + 1) * ratio - 1
// runs), plus an Engram-like look-back of the previous tokens. Values are 64-bit hashes, so a
// wrong block table, a missing or wrong snapshot, a short replay or a bad look-back changes the
// sampled tokens, and outputs can be compared with an unconstrained run of the same requests.
// Protocol violations (a position gap, an unknown sequence, a stale snapshot) throw.
#pragma once

#include "runtime/kv_geometry.hpp"
#include "runtime/sampling_rng.hpp"
#include "runtime/step_plan.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace di::test {

class fake_executor {
 public:
  /// `num_blocks`: the pool of each stream; `vocab`: sampled tokens are hash % vocab.
  fake_executor(runtime::kv_geometry model, std::vector<std::int32_t> num_blocks, int num_snapshots,
                std::int32_t vocab)
      : model_(std::move(model)), vocab_(vocab), snapshots_(std::size_t(num_snapshots)) {
    for (std::size_t s = 0; s < num_blocks.size(); ++s)
      memory_.emplace_back(std::size_t(num_blocks[s]) * std::size_t(model_.entries_per_block),
                           poison);
  }

  runtime::step_result run(const runtime::step_plan& plan) {
    for (std::uint64_t id : plan.finished) seqs_.erase(id);
    for (std::uint64_t id : plan.preempted) seqs_.erase(id);
    for (const runtime::sequence_start& s : plan.started) {
      if (seqs_.contains(s.seq_id)) fail("started twice", s.seq_id);
      seqs_[s.seq_id].start = s;
    }
    runtime::step_result result{.step_id = plan.step_id};
    for (const runtime::scheduled_sequence& s : plan.sequences)
      result.outputs.push_back(run_one(s));
    return result;
  }

  std::int64_t num_rows_run() const { return num_rows_run_; }
  std::int64_t num_replay_rows_run() const { return num_replay_rows_run_; }
  std::int64_t num_placeholders_patched() const { return num_placeholders_patched_; }
  std::size_t num_live() const { return seqs_.size(); }

 private:
  static constexpr std::uint64_t poison = 0xDEADBEEFDEADBEEFull;
  static constexpr std::uint64_t absent = 0x5A5A5A5A5A5A5A5Aull;

  struct slot {
    std::int64_t next_position = 0;
    std::vector<std::map<std::int64_t, std::uint64_t>> rings;  // [layer] position -> h_l
    std::vector<std::int32_t> lookback;                        // previous tokens, oldest first
  };
  struct saved_slot {
    slot s;
    std::uint64_t version = 0;  // the plan's save_snapshot_version
  };
  struct seq_state {
    runtime::sequence_start start;
    slot s;
    std::vector<std::vector<std::int32_t>> tables;
    std::optional<std::int32_t> last_sample;
  };

  [[noreturn]] static void fail(const std::string& what, std::uint64_t id) {
    throw std::logic_error("fake executor: " + what + " (sequence " + std::to_string(id) + ")");
  }
  static std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
    return runtime::mix64(a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull);
  }

  std::uint64_t& entry(int s, const seq_state& q, std::int64_t e) {
    const std::int64_t per = model_.entries_per_block;
    const auto& table = q.tables[std::size_t(s)];
    if (e / per >= std::int64_t(table.size())) fail("entry beyond the block table", q.start.seq_id);
    return memory_[std::size_t(s)][std::size_t(table[std::size_t(e / per)] * per + e % per)];
  }

  /// One row: returns h after the last layer; writes stream entries unless a replay row.
  std::uint64_t run_row(seq_state& q, std::int64_t p, std::int32_t token, bool is_replay) {
    const int L = model_.num_layers, w = model_.window;
    slot& s = q.s;
    if (s.rings.empty()) s.rings.resize(std::size_t(L));
    std::uint64_t h = mix(std::uint64_t(token), std::uint64_t(p));
    for (std::int32_t t : s.lookback) h = mix(h, std::uint64_t(t));
    for (int l = 0; l < L; ++l) {
      for (int st = l; st < model_.num_streams(); st += L) {  // this layer's compressors
        const int r = model_.stream_ratios[std::size_t(st)];
        if ((p + 1) % r == 0 && !is_replay)
          entry(st, q, (p + 1) / r - 1) = mix(h, std::uint64_t(st));
      }
      std::uint64_t acc = mix(h, 0x77);
      auto& ring = s.rings[std::size_t(l)];
      for (std::int64_t j = std::max<std::int64_t>(0, p - w + 1); j < p; ++j) {
        auto it = ring.find(j);
        acc = mix(acc, it == ring.end() ? absent : it->second);
      }
      for (int st = l; st < model_.num_streams(); st += L)
        for (std::int64_t e = 0; e < (p + 1) / model_.stream_ratios[std::size_t(st)]; ++e)
          acc = mix(acc, entry(st, q, e));
      ring[p] = h;
      while (!ring.empty() && ring.begin()->first <= p - w + 1) ring.erase(ring.begin());
      h = acc;
    }
    s.lookback.push_back(token);
    if (int(s.lookback.size()) > model_.engram_lookback) s.lookback.erase(s.lookback.begin());
    s.next_position = p + 1;
    return h;
  }

  void prepare(seq_state& q, const runtime::scheduled_sequence& s) {
    for (std::size_t st = 0; st < s.new_blocks.size(); ++st) {
      q.tables.resize(s.new_blocks.size());
      q.tables[st].insert(q.tables[st].end(), s.new_blocks[st].begin(), s.new_blocks[st].end());
    }
    if (s.restore_snapshot) {
      const std::optional<saved_slot>& snap = snapshots_.at(std::size_t(*s.restore_snapshot));
      if (!snap || snap->s.next_position != s.first_position ||
          snap->version != s.restore_snapshot_version)
        fail("stale snapshot", s.seq_id);
      q.s = snap->s;
    } else if (q.s.next_position == 0 && s.first_position > 0) {  // fresh slot mid-sequence
      const std::size_t expect =
          std::size_t(std::min<std::int64_t>(model_.engram_lookback, s.first_position));
      if (s.lookback_tokens.size() != expect) fail("look-back of the wrong length", s.seq_id);
      q.s.lookback = s.lookback_tokens;
      q.s.next_position = s.first_position;
    }
    if (q.s.next_position != s.first_position) fail("rows do not continue the slot", s.seq_id);
  }

  runtime::sequence_output run_one(const runtime::scheduled_sequence& s) {
    auto it = seqs_.find(s.seq_id);
    if (it == seqs_.end()) fail("rows for an unknown sequence", s.seq_id);
    seq_state& q = it->second;
    prepare(q, s);
    std::vector<std::int32_t> tokens = s.token_ids;
    if (s.has_placeholder) {
      if (!q.last_sample) fail("placeholder without a previous sample", s.seq_id);
      tokens[0] = *q.last_sample;
      ++num_placeholders_patched_;
    }
    runtime::sequence_output out{.seq_id = s.seq_id};
    std::vector<std::uint64_t> hs;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const std::int64_t p = s.first_position + std::int64_t(i);
      const bool is_replay = p < s.num_cached_tokens;
      hs.push_back(run_row(q, p, tokens[i], is_replay));
      ++num_rows_run_;
      num_replay_rows_run_ += is_replay;
    }
    if (s.save_snapshot)
      snapshots_.at(std::size_t(*s.save_snapshot)) = saved_slot{q.s, s.save_snapshot_version};
    for (std::size_t i = 0; i < s.prompt_logprob_rows.size(); ++i) {
      const std::uint64_t h = hs[std::size_t(s.prompt_logprob_rows[i])];
      out.prompt_logprobs.push_back(
          {.id = s.prompt_logprob_tokens[i], .logprob = -float(h % 1000) / 100.0f, .rank = 1});
    }
    if (s.is_sampling) {
      const std::int64_t next = s.first_position + s.num_rows();  // the sampled token's position
      if (s.sample_index != next - q.start.num_prompt_tokens) fail("wrong sample index", s.seq_id);
      const std::int32_t token = std::int32_t(hs.back() % std::uint64_t(vocab_));
      out.token_ids.push_back(token);
      if (q.start.params.logprobs)
        out.logprobs.push_back({.id = token, .logprob = -float(hs.back() % 97) / 10.0f, .rank = 1});
      q.last_sample = token;
    }
    return out;
  }

  runtime::kv_geometry model_;
  std::int32_t vocab_;
  std::vector<std::vector<std::uint64_t>> memory_;  // [stream][block * E + row]
  std::vector<std::optional<saved_slot>> snapshots_;
  std::unordered_map<std::uint64_t, seq_state> seqs_;
  std::int64_t num_rows_run_ = 0;
  std::int64_t num_replay_rows_run_ = 0;
  std::int64_t num_placeholders_patched_ = 0;
};

}  // namespace di::test
