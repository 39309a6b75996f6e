// scheduler: configuration, admission (add_request), abort, failure of everything, stats.
// The step passes live in schedule.cpp, result handling in apply_results.cpp.
#include "runtime/scheduler.hpp"

#include "common/error.hpp"

#include <algorithm>
#include <limits>
#include <utility>

namespace di::runtime {

std::string_view to_string(admission_status status) {
  switch (status) {
    case admission_status::accepted:
      return "accepted";
    case admission_status::invalid_request:
      return "invalid_request";
    case admission_status::duplicate_id:
      return "duplicate_id";
    case admission_status::too_long:
      return "too_long";
    case admission_status::queue_full:
      return "queue_full";
    case admission_status::queued_tokens_full:
      return "queued_tokens_full";
    case admission_status::unavailable:
      return "unavailable";
  }
  return "?";
}

failure_kind failure_of(admission_status status) {
  switch (status) {
    case admission_status::accepted:
      return failure_kind::none;
    case admission_status::queue_full:
    case admission_status::queued_tokens_full:
      return failure_kind::overloaded;
    case admission_status::unavailable:
      return failure_kind::unavailable;
    case admission_status::invalid_request:
    case admission_status::duplicate_id:
    case admission_status::too_long:
      break;
  }
  return failure_kind::invalid;
}

void scheduler_config::validate() const {
  DI_CHECK(max_num_batched_tokens > 0, "scheduler: max_num_batched_tokens must be positive, got {}",
           max_num_batched_tokens);
  DI_CHECK(max_prefill_chunk >= 0, "scheduler: max_prefill_chunk must be >= 0, got {}",
           max_prefill_chunk);
  DI_CHECK(max_num_running > 0, "scheduler: max_num_running must be positive, got {}",
           max_num_running);
  DI_CHECK(max_num_queued >= 0, "scheduler: max_num_queued must be >= 0, got {}", max_num_queued);
  DI_CHECK(max_queued_tokens > 0,
           "scheduler: max_queued_tokens must be positive (0 refuses every prompt), got {}",
           max_queued_tokens);
  DI_CHECK(max_model_len > 1, "scheduler: max_model_len must be at least 2, got {}", max_model_len);
}

scheduler::scheduler(scheduler_config config, text_decoder_factory make_decoder)
    : config_((config.validate(), std::move(config))),
      make_decoder_(std::move(make_decoder)),
      blocks_(config_.blocks) {
  // As vLLM: one request of max_model_len tokens must fit alone, or it could never finish.
  for (int s = 0; s < blocks_.geometry().num_streams(); ++s)
    DI_CHECK(blocks_.geometry().num_blocks(s, config_.max_model_len) <= blocks_.num_blocks(s),
             "scheduler: max_model_len {} needs {} blocks of KV stream {}, the pool has {}",
             config_.max_model_len, blocks_.geometry().num_blocks(s, config_.max_model_len), s,
             blocks_.num_blocks(s));
}

// ---- admission -----------------------------------------------------------------------------

sequence_limits scheduler::limits_for(const request& r) const {
  sequence_limits limits;
  const std::int64_t room = config_.max_model_len - std::int64_t(r.prompt_ids.size());
  limits.max_new_tokens = std::min<std::int64_t>(room, r.params.max_tokens.value_or(room));
  // EOS ends a request with a response_format even under ignore_eos: the runner then keeps
  // it out while the grammar may go on, so it comes only when the text is done.
  if (!r.params.ignore_eos || !r.params.response_format.empty())
    limits.stop_token_ids = config_.eos_token_ids;
  limits.stop_token_ids.insert(limits.stop_token_ids.end(), r.params.stop_token_ids.begin(),
                               r.params.stop_token_ids.end());
  return limits;
}

std::optional<admission_result> scheduler::invalid_reason(const request& r) const {
  using enum admission_status;
  const std::int64_t prompt = std::int64_t(r.prompt_ids.size());
  if (prompt == 0) return admission_result{invalid_request, "the prompt is empty", "prompt"};
  if (r.params.max_tokens && *r.params.max_tokens <= 0)
    return admission_result{
        invalid_request, fmt::format("max_tokens must be positive, got {}", *r.params.max_tokens),
        "max_tokens"};
  if (sequences_.contains(r.id))
    return admission_result{duplicate_id, fmt::format("request {} is already live", r.id)};
  if (prompt >= config_.max_model_len)
    return admission_result{too_long,
                            fmt::format("the prompt has {} tokens; this server's "
                                        "context is {} tokens including the output",
                                        prompt, config_.max_model_len),
                            "prompt"};
  // min_tokens past what the context leaves could never be met (the output stops at the
  // context's end); with max_tokens above it the sampling check caught it, without it not.
  if (const std::int64_t room = config_.max_model_len - prompt; r.params.min_tokens > room)
    return admission_result{invalid_request,
                            fmt::format("min_tokens {} is more than the {} tokens the context "
                                        "leaves after a {}-token prompt (max_model_len {})",
                                        r.params.min_tokens, room, prompt, config_.max_model_len),
                            "min_tokens"};
  // Waiting requests may hold max_queued_tokens tokens: a longer prompt could never wait, so
  // "queued_tokens_full, retry later" would be said to it forever.
  if (prompt > config_.max_queued_tokens)
    return admission_result{too_long,
                            fmt::format("the prompt has {} tokens; waiting requests may hold at "
                                        "most {} (scheduler.max_queued_tokens)",
                                        prompt, config_.max_queued_tokens),
                            "prompt"};
  return std::nullopt;
}

std::optional<admission_result> scheduler::limit_reason(std::int64_t prompt) const {
  using enum admission_status;
  // Only the waiting requests beyond the batch's free slots count: those within them start at
  // the next step, so a burst that arrives between two steps is not refused while slots are
  // free (the queue may then briefly hold max_num_queued + the free slots).
  const int free_slots = std::max(0, config_.max_num_running - int(running_.size()));
  // This request would wait for a slot if the waiting ones already take every free one; it is
  // refused when that would put more than max_num_queued in line. (Clamping the count at 0
  // before comparing refused everything with max_num_queued = 0, an idle group included.)
  if (int(waiting_.size()) + 1 - free_slots > config_.max_num_queued)
    return admission_result{
        queue_full, fmt::format("{} requests are already waiting for a batch slot (the limit)",
                                std::max(0, int(waiting_.size()) - free_slots))};
  if (num_queued_tokens() + prompt > config_.max_queued_tokens)
    return admission_result{queued_tokens_full,
                            fmt::format("waiting requests hold {} tokens; {} more exceed the "
                                        "limit of {}",
                                        num_queued_tokens(), prompt, config_.max_queued_tokens)};
  return std::nullopt;
}

admission_result scheduler::add_request(request r) {
  std::optional<admission_result> refused = invalid_reason(r);
  std::unique_ptr<sequence> seq;
  if (!refused) {
    try {  // the stop checker validates the stop parameters
      std::unique_ptr<text_decoder> decoder = make_decoder_ ? make_decoder_(r.params) : nullptr;
      sequence_limits limits = limits_for(r);
      seq = std::make_unique<sequence>(std::move(r), std::move(limits), std::move(decoder),
                                       next_serial_);
    } catch (const di::error& e) {
      refused = admission_result{admission_status::invalid_request, e.what(), param_of(e)};
    }
  }
  if (!refused) refused = limit_reason(seq->num_prompt_tokens());
  if (refused) {
    ++counters_.num_refused;
    return *refused;
  }
  ++next_serial_;
  waiting_.push_back(seq.get());
  const std::uint64_t id = seq->id();
  sequences_.emplace(id, std::move(seq));
  return {};
}

// ---- ending requests -----------------------------------------------------------------------

std::optional<token_event> scheduler::abort(std::uint64_t id) {
  sequence* seq = find(id);
  if (seq == nullptr) return std::nullopt;
  token_event event{.request_id = id};
  event.text = seq->flush_text();
  ++counters_.num_aborts;
  finish(*seq, sequence_status::finished_abort, event);
  return event;
}

std::vector<token_event> scheduler::fail_all(std::string_view message, failure_kind kind) {
  std::vector<std::uint64_t> ids;
  for (const auto& [id, seq] : sequences_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  std::vector<token_event> events;
  for (std::uint64_t id : ids) {
    sequence& seq = *find(id);
    token_event event{
        .request_id = id, .text = seq.flush_text(), .error = std::string(message), .failure = kind};
    ++counters_.num_errors;
    finish(seq, sequence_status::finished_error, event);
    events.push_back(std::move(event));
  }
  in_flight_.clear();
  blocks_.reset_prefix_cache();
  return events;
}

void scheduler::finish(sequence& seq, sequence_status status, token_event& event) {
  if (is_running(seq.status())) std::erase(running_, &seq);
  if (is_waiting(seq.status())) std::erase(waiting_, &seq);
  seq.set_status(status);
  blocks_.free(seq.blocks());
  finished_ids_.push_back(seq.id());
  event.status = status;
  sequences_.erase(seq.id());  // destroys seq
}

// ---- queries -------------------------------------------------------------------------------

sequence* scheduler::find(std::uint64_t id) const {
  auto it = sequences_.find(id);
  return it == sequences_.end() ? nullptr : it->second.get();
}

std::optional<sequence_status> scheduler::status_of(std::uint64_t id) const {
  const sequence* seq = find(id);
  return seq ? std::optional(seq->status()) : std::nullopt;
}

std::int64_t scheduler::longest_cached_prefix(std::span<const std::int32_t> tokens,
                                              std::uint64_t root) const {
  // What an admission of the prompt reuses: its last token runs for its logits (admit_one).
  const std::int64_t reusable = std::max<std::int64_t>(0, std::int64_t(tokens.size()) - 1);
  return blocks_.match_prefix(tokens, reusable, root).num_cached_tokens;
}

std::int64_t scheduler::num_queued_tokens() const {
  std::int64_t n = 0;
  for (const sequence* seq : waiting_) n += seq->num_tokens();
  return n;
}

scheduler_stats scheduler::stats() const {
  scheduler_stats s;
  s.counters = counters_;
  s.num_running = num_running();
  s.num_waiting = num_waiting();
  s.num_queued_tokens = num_queued_tokens();
  s.num_blocks = blocks_.num_total_blocks();
  s.num_free_blocks = blocks_.num_total_free_blocks();
  s.num_cached_blocks = blocks_.num_total_evictable_blocks();
  s.num_used_blocks = s.num_blocks - s.num_free_blocks - s.num_cached_blocks;
  s.num_snapshots_used = blocks_.num_snapshots_used();
  s.num_evictions = blocks_.num_evictions();
  return s;
}

void scheduler::patch_placeholders(step_plan& plan) const {
  for (scheduled_sequence& s : plan.sequences) {
    if (!s.has_placeholder) continue;
    const sequence* seq = find(s.seq_id);
    if (seq == nullptr || seq->num_known_tokens() <= s.first_position) continue;
    s.token_ids[0] = seq->known_tokens()[std::size_t(s.first_position)];
    s.has_placeholder = false;
  }
}

}  // namespace di::runtime
