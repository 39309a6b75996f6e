// cpu_model_runner: construction (pools sized per stream from the cache geometry), loading,
// and run(), which walks the step-plan protocol in order (forward waves included) and times
// its phases. The steps themselves live in runner_steps.cpp.
#include "model/runner/cpu_model_runner.hpp"

#include "common/error.hpp"
#include "model/engram/token_map.hpp"
#include "model/tokenizer/tokenizer.hpp"

#include <algorithm>
#include <chrono>
#include <limits>

#include <unistd.h>

namespace di {

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

runtime::kv_geometry geometry_of(const deepseek_model& m) {
  return runtime::make_kv_geometry(m.layout(), m.config().engram.max_ngram_size);
}

std::int64_t checked_max_model_len(const deepseek_model& m, const cpu_runner_config& c) {
  DI_CHECK(c.kv_pool_tokens > 0, "runner: kv_pool_tokens must be positive, got {}",
           c.kv_pool_tokens);
  DI_CHECK(c.num_snapshots >= 0, "runner: num_snapshots must be >= 0, got {}", c.num_snapshots);
  const std::int64_t context = m.config().max_position_embeddings;
  DI_CHECK(c.max_model_len > 0 || c.kv_pool_tokens > 1,
           "kv.pool_tokens must be at least 2 for the model runner (a prompt token and the one it "
           "predicts), got {}",
           c.kv_pool_tokens);
  std::int64_t len = c.max_model_len > 0 ? c.max_model_len : c.kv_pool_tokens;
  if (c.max_model_len <= 0 && context > 0) len = std::min(len, context);
  DI_CHECK(len > 1 && (context <= 0 || len <= context),
           "runner: max_model_len {} must be in [2, {}] (max_position_embeddings)", len, context);
  DI_CHECK(!m.layout().has_engram || m.hasher() != nullptr,
           "runner: the model has Engram layers but no Engram hasher is attached");
  return len;
}

std::int64_t checked_token_ids(const deepseek_model& m, const cpu_runner_config& c) {
  const std::int64_t vocab = m.config().vocab_size;
  DI_CHECK(c.num_token_ids >= 0 && c.num_token_ids <= vocab,
           "runner: num_token_ids must be in [0, {}] (the model's vocab_size), got {}", vocab,
           c.num_token_ids);
  return c.num_token_ids > 0 ? c.num_token_ids : vocab;
}

std::vector<int> pool_blocks(const runtime::kv_geometry& g, std::int64_t tokens, int min_blocks) {
  // No stream holds fewer blocks than the one with the most (the lowest ratio: as many
  // sequences as the pool can hold at all), up to min_blocks.
  std::int64_t most = 0;
  for (int s = 0; s < g.num_streams(); ++s) most = std::max(most, g.num_blocks(s, tokens));
  const std::int64_t floor = std::min<std::int64_t>(min_blocks, most);
  std::vector<int> n;
  for (int s = 0; s < g.num_streams(); ++s) {
    const std::int64_t blocks = std::max<std::int64_t>(g.num_blocks(s, tokens), floor);
    DI_CHECK(blocks <= std::numeric_limits<std::int32_t>::max(),
             "runner: kv_pool_tokens {} needs {} blocks of stream {}; at most 2^31 - 1", tokens,
             blocks, s);
    n.push_back(int(blocks));
  }
  return n;
}

/// pool_blocks of config.kv_pool_tokens, checked against the host's memory when the pool
/// lives there: it is allocated and zeroed at once, so a pool past the host's memory failed
/// as a bare std::bad_alloc ("cannot load the runner: std::bad_alloc"), or, when each arena
/// alone was allocated, had all its pages touched by the zeroing (the out-of-memory killer).
std::vector<int> checked_pool_blocks(const deepseek_model& m, const runtime::kv_geometry& g,
                                     const cpu_runner_config& c) {
  std::vector<int> blocks = pool_blocks(g, c.kv_pool_tokens, c.min_blocks_per_stream);
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  if (m.dev().kind != device_kind::cpu || pages <= 0 || page_size <= 0) return blocks;
  const cache_layout& layout = m.layout();
  double bytes = double(c.num_state_slots) * double(layout.slot_bytes);
  double per_token = 0;  // bytes of pool per token of context, over every stream
  for (int s = 0; s < int(blocks.size()); ++s) {
    bytes += double(blocks[std::size_t(s)]) * double(layout.block_bytes(s));
    per_token += double(layout.block_bytes(s)) /
                 (double(g.stream_ratios[std::size_t(s)]) * double(g.entries_per_block));
  }
  const double memory = double(pages) * double(page_size);
  DI_CHECK(bytes <= memory,
           "kv.pool_tokens = {} needs {:.1f} GiB of host memory for the KV block pools; this "
           "machine has {:.1f} GiB: at most about {} tokens fit",
           c.kv_pool_tokens, bytes / double(1 << 30), memory / double(1 << 30),
           std::int64_t(per_token > 0 ? memory / per_token : 0));
  return blocks;
}

/// config.num_snapshots, checked against the host's memory: a snapshot is a host copy of the
/// slot (slot_bytes), and 2^31 - 1 of them failed as a bare std::bad_alloc.
std::size_t checked_snapshots(const deepseek_model& m, const cpu_runner_config& c) {
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  const double slot = double(m.layout().slot_bytes);
  if (pages > 0 && page_size > 0 && slot > 0) {
    const double memory = double(pages) * double(page_size);
    DI_CHECK(double(c.num_snapshots) * slot <= memory,
             "kv.num_snapshots = {} needs {:.1f} GiB of host memory ({} bytes per snapshot); "
             "this machine has {:.1f} GiB: at most {} fit",
             c.num_snapshots, double(c.num_snapshots) * slot / double(1 << 30),
             m.layout().slot_bytes, memory / double(1 << 30), std::int64_t(memory / slot));
  }
  return std::size_t(c.num_snapshots);
}

}  // namespace

cpu_model_runner::cpu_model_runner(std::shared_ptr<const deepseek_model> model,
                                   const cpu_runner_config& config)
    : model_(std::move(model)),
      num_token_ids_(checked_token_ids(*model_, config)),
      geometry_(geometry_of(*model_)),
      max_model_len_(checked_max_model_len(*model_, config)),
      pool_(model_->layout(), checked_pool_blocks(*model_, geometry_, config), model_->dev(),
            config.num_state_slots),
      snapshots_(checked_snapshots(*model_, config)),
      snapshot_positions_(std::size_t(config.num_snapshots), -1),
      snapshot_versions_(std::size_t(config.num_snapshots), 0),
      skipped_versions_(std::size_t(config.num_snapshots), 0) {}

std::int64_t sampleable_ids(const tok::tokenizer& tokenizer, std::int64_t vocab_size) {
  return std::min<std::int64_t>(std::int64_t(tokenizer.vocab_size()), vocab_size);
}

std::unique_ptr<cpu_model_runner> cpu_model_runner::load(const std::filesystem::path& dir,
                                                         const cpu_runner_config& config,
                                                         forward_options options) {
  std::shared_ptr<deepseek_model> model = deepseek_model::load(dir, options);
  if (!model->config().engram.layer_ids.empty())
    attach_engram_hasher(*model, tok::tokenizer::from_dir(dir.string()));
  return std::make_unique<cpu_model_runner>(std::move(model), config);
}

runtime::runner_info cpu_model_runner::info() const {
  // The model's device, and on a GPU whether decode steps replay CUDA graphs (the executor
  // logs this when the runner is ready).
  const bool gpu = model_->dev().kind == device_kind::cuda;
  runtime::runner_info r{.device = to_string(model_->dev()) +
                                   (gpu && model_->options().cuda_graphs ? " (CUDA graphs)" : ""),
                         .num_snapshots = std::int32_t(snapshots_.size()),
                         .max_model_len = max_model_len_};
  for (int s = 0; s < geometry_.num_streams(); ++s) r.num_blocks.push_back(pool_.num_blocks(s));
  return r;
}

runtime::step_result cpu_model_runner::run(const runtime::step_plan& plan) {
  const auto t0 = clock_type::now();
  for (std::uint64_t id : plan.finished) live_.erase(id);
  for (std::uint64_t id : plan.preempted) live_.erase(id);
  for (const runtime::sequence_start& s : plan.started) start(s);

  runtime::step_result result{.step_id = plan.step_id};
  result.outputs.resize(plan.sequences.size());
  planned_saves saves;
  for (const runtime::scheduled_sequence& s : plan.sequences)
    if (s.save_snapshot)
      saves[*s.save_snapshot] = {s.first_position + s.num_rows(), s.save_snapshot_version};
  std::vector<batch_entry> batch;
  for (std::size_t i = 0; i < plan.sequences.size(); ++i) {
    result.outputs[i].seq_id = plan.sequences[i].seq_id;
    if (std::optional<batch_entry> e = prepare(i, plan.sequences[i], saves, result.outputs[i]))
      batch.push_back(std::move(*e));
  }
  drop_unsaved_restores(plan, batch, result);
  for (std::size_t i = 0; i < plan.sequences.size(); ++i)  // a restore of these waits no more
    if (const auto& s = plan.sequences[i]; s.save_snapshot && result.outputs[i].not_run)
      skipped_versions_[std::size_t(*s.save_snapshot)] = s.save_snapshot_version;
  std::vector<forward_output> logits = run_waves(plan, batch);
  const auto t_sample = clock_type::now();
  sample(plan, batch, logits, result);
  stats_.sampling_seconds += seconds_since(t_sample);
  ++stats_.num_steps;
  stats_.total_seconds += seconds_since(t0);
  return result;
}

/// A sequence waiting for a save that no sequence of the batch makes (its sequence did not
/// run, in this plan or an earlier one) does not run either: its output says so without an
/// error, and the scheduler computes it again from scratch (its prefix's blocks were never
/// written either). Its own save is then not made, so this repeats until every wait is met.
void cpu_model_runner::drop_unsaved_restores(const runtime::step_plan& plan,
                                             std::vector<batch_entry>& batch,
                                             runtime::step_result& result) {
  for (bool changed = true; changed;) {
    changed = false;
    planned_saves made;
    for (const batch_entry& e : batch)
      if (const runtime::scheduled_sequence& s = plan.sequences[e.index]; s.save_snapshot)
        made[*s.save_snapshot] = {s.first_position + s.num_rows(), s.save_snapshot_version};
    std::erase_if(batch, [&](batch_entry& e) {
      if (!e.deferred_restore) return false;
      const runtime::scheduled_sequence& s = plan.sequences[e.index];
      auto m = made.find(*e.deferred_restore);
      if (m != made.end() && m->second.position == s.first_position &&
          m->second.version == s.restore_snapshot_version)
        return false;
      result.outputs[e.index].not_run = true;
      e.seq->dropped = "";
      ++stats_.num_unsaved_restores;
      changed = true;
      return true;
    });
  }
}

/// Forwards the batch in waves: every sequence whose slot is ready, then the snapshots those
/// sequences save, then the sequences that waited for one of them (normally a single wave).
std::vector<forward_output> cpu_model_runner::run_waves(const runtime::step_plan& plan,
                                                        std::vector<batch_entry>& batch) {
  std::vector<forward_output> logits(batch.size());
  std::vector<bool> is_done(batch.size(), false);
  for (std::size_t num_done = 0, wave_index = 0; num_done < batch.size(); ++wave_index) {
    std::vector<batch_entry*> wave;
    std::vector<std::size_t> members;
    for (std::size_t b = 0; b < batch.size(); ++b) {
      batch_entry& e = batch[b];
      const runtime::scheduled_sequence& s = plan.sequences[e.index];
      const std::int64_t p = s.first_position;
      const std::uint64_t v = s.restore_snapshot_version;
      if (is_done[b] || (e.deferred_restore && !snapshot_holds(*e.deferred_restore, p, v)))
        continue;
      if (e.deferred_restore) load_snapshot(*e.seq->state, *e.deferred_restore, p, v);
      wave.push_back(&e);
      members.push_back(b);
    }
    DI_CHECK(!wave.empty(), "runner: step {} restores snapshots that no sequence of it saves",
             plan.step_id);
    const auto t0 = clock_type::now();
    std::vector<forward_output> out = run_forward(wave);
    stats_.forward_seconds += seconds_since(t0);
    stats_.num_extra_forwards += wave_index > 0;
    for (std::size_t i = 0; i < members.size(); ++i) {
      const batch_entry& e = batch[members[i]];
      const runtime::scheduled_sequence& s = plan.sequences[e.index];
      if (s.save_snapshot) save_snapshot(*e.seq, *s.save_snapshot, s.save_snapshot_version);
      stats_.num_rows += s.num_rows();
      stats_.num_replay_rows +=
          std::clamp<std::int64_t>(s.num_cached_tokens - s.first_position, 0, s.num_rows());
      logits[members[i]] = std::move(out[i]);
      is_done[members[i]] = true;
    }
    num_done += members.size();
  }
  return logits;
}

void attach_engram_hasher(deepseek_model& model, const tok::tokenizer& tokenizer) {
  const model_config& c = model.config();
  if (c.engram.layer_ids.empty()) return;
  model.set_engram_hasher(
      std::make_shared<engram_hasher>(c.engram, build_engram_token_map(tokenizer)));
}

runtime::scheduler_config scheduler_config_for(const cpu_model_runner& runner,
                                               runtime::scheduler_config base) {
  const runtime::runner_info info = runner.info();
  base.max_model_len = info.max_model_len;
  if (base.eos_token_ids.empty())
    base.eos_token_ids.push_back(std::int32_t(runner.model().config().eos_token_id));
  base.blocks.geometry = runner.geometry();
  base.blocks.num_blocks = info.num_blocks;
  base.blocks.num_snapshots = info.num_snapshots;
  return base;
}

}  // namespace di
