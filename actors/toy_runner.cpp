// The toy runner (see toy_runner.hpp): protocol bookkeeping, the hash "forward" and sampling.
#include "actors/toy_runner.hpp"

#include "common/error.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

namespace di::actors {

namespace {

constexpr std::uint64_t unwritten = 0xDEADBEEFDEADBEEFull;

std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a * 0x9E3779B97F4A7C15ull + b + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

toy_runner::toy_runner(toy_runner_config config)
    : config_(std::move(config)),
      pool_(std::size_t(config_.num_blocks) * std::size_t(config_.entries_per_block), unwritten) {
  DI_CHECK(config_.vocab_size > 1 && config_.entries_per_block > 0 && config_.num_blocks > 0,
           "toy runner: vocab_size, entries_per_block and num_blocks must be positive");
}

runtime::kv_geometry toy_runner::geometry(const toy_runner_config& config) {
  return {.stream_ratios = {1}, .entries_per_block = config.entries_per_block, .num_layers = 1,
          .window = 1, .max_overlap_ratio = 0, .engram_lookback = 0};
}

runtime::runner_info toy_runner::info() const {
  return {.device = config_.device, .num_blocks = {config_.num_blocks}, .num_snapshots = 0,
          .max_model_len = config_.max_model_len};
}

runtime::step_result toy_runner::run(const runtime::step_plan& plan) {
  const std::int64_t start = steady_ns();
  for (std::uint64_t id : plan.finished) seqs_.erase(id);
  for (std::uint64_t id : plan.preempted) seqs_.erase(id);
  for (const runtime::sequence_start& s : plan.started) seqs_[s.seq_id] = {.start = s};
  runtime::step_result result{.step_id = plan.step_id};
  for (const runtime::scheduled_sequence& s : plan.sequences) result.outputs.push_back(run_sequence(s));
  simulate_time(start, plan.num_rows());
  return result;
}

std::uint64_t* toy_runner::entry(const sequence_record& q, std::int64_t position) {
  const std::int64_t per = config_.entries_per_block;
  const std::size_t i = std::size_t(position / per);
  if (position < 0 || i >= q.table.size()) return nullptr;
  const std::int32_t block = q.table[i];
  if (block < 0 || block >= config_.num_blocks) return nullptr;
  return &pool_[std::size_t(block) * std::size_t(per) + std::size_t(position % per)];
}

runtime::sequence_output toy_runner::run_sequence(const runtime::scheduled_sequence& s) {
  runtime::sequence_output out{.seq_id = s.seq_id};
  auto it = seqs_.find(s.seq_id);
  if (it == seqs_.end()) {
    out.error = fmt::format("toy runner: rows for unknown sequence {}", s.seq_id);
    return out;
  }
  sequence_record& q = it->second;
  for (const std::vector<std::int32_t>& blocks : s.new_blocks)
    q.table.insert(q.table.end(), blocks.begin(), blocks.end());
  if (q.next_position != s.first_position && !(q.next_position == 0 && s.num_cached_tokens >= s.first_position)) {
    out.error = fmt::format("toy runner: rows start at {}, the sequence is at {}", s.first_position,
                            q.next_position);
    return out;
  }
  std::vector<std::uint64_t> hs;
  for (std::int64_t i = 0; i < s.num_rows(); ++i) {
    const std::int64_t p = s.first_position + i;
    std::int32_t token = s.token_ids[std::size_t(i)];
    if (i == 0 && s.has_placeholder) {
      if (!q.last_sample) {
        out.error = "toy runner: a placeholder without a previous sample";
        return out;
      }
      token = *q.last_sample;
    }
    std::uint64_t prev = 0x1234;
    if (p > 0) {
      const std::uint64_t* e = entry(q, p - 1);
      if (e == nullptr || *e == unwritten) {
        out.error = fmt::format("toy runner: entry {} of sequence {} is missing", p - 1, s.seq_id);
        return out;
      }
      prev = *e;
    }
    const std::uint64_t h = mix(mix(prev, std::uint64_t(std::uint32_t(token))), std::uint64_t(p));
    std::uint64_t* e = entry(q, p);
    if (e == nullptr) {
      out.error = fmt::format("toy runner: no block for position {} of sequence {}", p, s.seq_id);
      return out;
    }
    if (p < s.num_cached_tokens) {
      if (*e != h) {
        out.error = fmt::format("toy runner: cached entry {} of sequence {} differs", p, s.seq_id);
        return out;
      }
      ++num_replay_rows_run_;
    } else {
      *e = h;
    }
    hs.push_back(h);
    ++num_rows_run_;
  }
  q.next_position = s.first_position + s.num_rows();
  for (std::size_t i = 0; i < s.prompt_logprob_rows.size(); ++i) {
    const std::size_t row = std::size_t(s.prompt_logprob_rows[i]);
    const int num_top = q.start.params.prompt_logprobs.value_or(0);
    out.prompt_logprobs.push_back(
        make_logprobs(s.prompt_logprob_tokens[i], row < hs.size() ? hs[row] : 0, num_top));
  }
  if (s.is_sampling && !hs.empty()) {
    const std::int32_t token = sample(q, s, hs.back());
    out.token_ids.push_back(token);
    if (q.start.params.logprobs)
      out.logprobs.push_back(make_logprobs(token, hs.back(), *q.start.params.logprobs));
    q.last_sample = token;
  }
  return out;
}

std::int32_t toy_runner::sample(const sequence_record& q, const runtime::scheduled_sequence& s,
                                std::uint64_t h) const {
  const runtime::sampling_params& p = q.start.params;
  std::uint64_t x = p.is_greedy() ? h : mix(mix(h, q.start.seed), std::uint64_t(s.sample_index));
  std::int32_t token = std::int32_t(x % std::uint64_t(config_.vocab_size));
  const auto& stops = q.start.stop_token_ids;
  // min_tokens: stop tokens are suppressed, as the sampler does (bounded: vocab_size > stops).
  for (int i = 0; s.sample_index < p.min_tokens && i <= int(stops.size()) &&
                  std::find(stops.begin(), stops.end(), token) != stops.end();
       ++i)
    token = (token + 1) % config_.vocab_size;
  return token;
}

runtime::position_logprobs toy_runner::make_logprobs(std::int32_t token, std::uint64_t h,
                                                     int num_top) const {
  runtime::position_logprobs lp{.id = token, .logprob = -float((h >> 8) % 1000) / 100.0f, .rank = 1};
  for (int i = 0; i < num_top; ++i)
    lp.top.push_back({.id = std::int32_t((std::int64_t(token) + i) % config_.vocab_size),
                      .logprob = lp.logprob - float(i)});
  return lp;
}

void toy_runner::simulate_time(std::int64_t start_ns, std::int64_t num_rows) const {
  const double total_us = config_.step_ms * 1e3 + config_.row_us * double(num_rows);
  if (total_us <= 0) return;
  const std::int64_t until = start_ns + std::int64_t(total_us * 1e3);
  // Sleep most of it, then spin: a device step ends on time, not a scheduler tick later.
  const std::int64_t sleep_ns = until - steady_ns() - 200000;
  if (sleep_ns > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(sleep_ns));
  while (steady_ns() < until) {
  }
}

}  // namespace di::actors
