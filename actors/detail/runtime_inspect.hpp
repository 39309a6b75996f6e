// CAF inspect() overloads for the runtime's plain value types (step plans and results,
// requests, sampling parameters, token events, scheduler statistics), so that they travel in
// actor messages between nodes. They live in namespace di::runtime for argument-dependent
// lookup; runtime/ itself stays free of CAF. std::optional has no CAF 0.17 support, so optional
// fields travel as (present, value) pairs through optional_field / optional_list. Floating-point
// fields travel as their bits (float_bits): CAF 0.17's float encoding (detail::pack754) never
// returns for an infinity -- the sending thread spins forever -- and garbles NaN.
#pragma once

#include "runtime/scheduler.hpp"
#include "runtime/step_runner.hpp"

#include <caf/meta/type_name.hpp>
#include <caf/sec.hpp>

#include <bit>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

namespace di::runtime {

/// A std::optional<T> member seen by an inspector as (present, value).
template <class T>
struct optional_field {
  std::optional<T>& ref;
};

template <class Inspector, class T>
typename Inspector::result_type inspect(Inspector& f, optional_field<T>& x) {
  if constexpr (Inspector::reads_state) {
    bool present = x.ref.has_value();
    T value = present ? *x.ref : T{};
    return f(present, value);
  } else {
    bool present = false;
    T value{};
    auto err = f(present, value);
    if (!err) x.ref = present ? std::optional<T>(std::move(value)) : std::nullopt;
    return err;
  }
}

/// A float or double member seen by an inspector as its IEEE 754 bits, so that infinities and
/// NaN travel unchanged (the receiver validates them like any other value).
template <class T>
struct float_bits {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  T& ref;
};

template <class Inspector, class T>
typename Inspector::result_type inspect(Inspector& f, float_bits<T>& x) {
  using bits_type = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  if constexpr (std::is_void_v<typename Inspector::result_type>) {
    return f(x.ref);  // to_string: the value, as text
  } else {
    bits_type bits = std::bit_cast<bits_type>(x.ref);
    auto err = f(bits);
    if constexpr (!Inspector::reads_state) x.ref = std::bit_cast<T>(bits);
    return err;
  }
}

/// A std::vector<std::optional<T>> seen as (presence flags as uint8, present values).
template <class T>
struct optional_list {
  std::vector<std::optional<T>>& ref;
};

template <class Inspector, class T>
typename Inspector::result_type inspect(Inspector& f, optional_list<T>& x) {
  // Flags as int32 rather than uint8 or bool: CAF resizes byte vectors to the size read from
  // the wire before checking it, so a peer could make us allocate 4 GiB; other vectors grow
  // element by element and are bounded by the message itself.
  std::vector<std::int32_t> present;
  std::vector<T> values;
  if constexpr (Inspector::reads_state) {
    for (const std::optional<T>& v : x.ref) {
      present.push_back(v.has_value());
      if (v) values.push_back(*v);
    }
    return f(present, values);
  } else {
    auto err = f(present, values);
    if (err) return err;
    std::size_t next = 0;
    x.ref.clear();
    for (std::int32_t p : present) {
      if (p == 0) {
        x.ref.emplace_back();
      } else if (next < values.size()) {
        x.ref.emplace_back(std::move(values[next++]));
      } else {
        return caf::make_error(caf::sec::invalid_argument, "optional_list: missing values");
      }
    }
    if (next != values.size())
      return caf::make_error(caf::sec::invalid_argument, "optional_list: extra values");
    return err;
  }
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_logprob& x) {
  float_bits<float> logprob{x.logprob};
  return f(caf::meta::type_name("token_logprob"), x.id, logprob);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, position_logprobs& x) {
  float_bits<float> logprob{x.logprob};
  return f(caf::meta::type_name("position_logprobs"), x.id, logprob, x.rank, x.top);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampling_params& x) {
  optional_field<std::uint64_t> seed{x.seed};
  optional_field<int> logprobs{x.logprobs};
  optional_field<int> prompt_logprobs{x.prompt_logprobs};
  optional_field<int> max_tokens{x.max_tokens};
  float_bits<double> temperature{x.temperature}, top_p{x.top_p}, min_p{x.min_p},
      repetition_penalty{x.repetition_penalty}, presence_penalty{x.presence_penalty},
      frequency_penalty{x.frequency_penalty};
  return f(caf::meta::type_name("sampling_params"), temperature, x.top_k, top_p, min_p,
           repetition_penalty, presence_penalty, frequency_penalty, seed, logprobs, prompt_logprobs,
           max_tokens, x.min_tokens, x.stop, x.stop_token_ids, x.ignore_eos, x.skip_special_tokens,
           x.include_stop_str_in_output, x.response_format, x.cache_salt);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, request& x) {
  return f(caf::meta::type_name("request"), x.id, x.prompt_ids, x.params, x.seed);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_event& x) {
  optional_list<position_logprobs> prompt_logprobs{x.prompt_logprobs};
  optional_field<std::int32_t> stop_token{x.stop_token};
  return f(caf::meta::type_name("token_event"), x.request_id, x.token_ids, x.text, x.logprobs,
           prompt_logprobs, x.status, stop_token, x.stop_string, x.error, x.failure,
           x.failure_param, x.num_cached_tokens);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, admission_result& x) {
  return f(caf::meta::type_name("admission_result"), x.status, x.message, x.param);
}

// ---- step plans and results ------------------------------------------------------------------

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sequence_start& x) {
  return f(caf::meta::type_name("sequence_start"), x.seq_id, x.params, x.seed,
           x.num_prompt_tokens, x.stop_token_ids);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, scheduled_sequence& x) {
  optional_field<std::int32_t> restore{x.restore_snapshot};
  optional_field<std::int32_t> save{x.save_snapshot};
  return f(caf::meta::type_name("scheduled_sequence"), x.seq_id, x.first_position, x.token_ids,
           x.has_placeholder, x.num_cached_tokens, x.lookback_tokens, x.prior_tokens, restore, save,
           x.restore_snapshot_version, x.save_snapshot_version, x.new_blocks, x.is_sampling,
           x.sample_index, x.prompt_logprob_rows, x.prompt_logprob_tokens);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_plan& x) {
  return f(caf::meta::type_name("step_plan"), x.step_id, x.finished, x.preempted, x.started,
           x.sequences);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sequence_output& x) {
  return f(caf::meta::type_name("sequence_output"), x.seq_id, x.token_ids, x.logprobs,
           x.prompt_logprobs, x.error, x.error_param, x.not_run);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_result& x) {
  return f(caf::meta::type_name("step_result"), x.step_id, x.outputs);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, runner_info& x) {
  return f(caf::meta::type_name("runner_info"), x.device, x.num_blocks, x.num_snapshots,
           x.max_model_len);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_geometry& x) {
  return f(caf::meta::type_name("kv_geometry"), x.stream_ratios, x.entries_per_block,
           x.num_layers, x.window, x.max_overlap_ratio, x.engram_lookback);
}

// ---- statistics ------------------------------------------------------------------------------

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, scheduler_counters& x) {
  return f(caf::meta::type_name("scheduler_counters"), x.num_steps, x.num_prefill_tokens,
           x.num_replay_tokens, x.num_decode_tokens, x.num_prefix_queries, x.num_prefix_hits,
           x.num_prefix_misses, x.num_prefix_query_tokens, x.num_prefix_hit_tokens,
           x.num_prefix_skipped_tokens, x.num_snapshot_restores, x.num_snapshot_saves,
           x.num_preemptions, x.num_aborts, x.num_errors, x.num_finished, x.num_refused,
           x.num_discarded_outputs);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, scheduler_stats& x) {
  return f(caf::meta::type_name("scheduler_stats"), x.counters, x.num_running, x.num_waiting,
           x.num_queued_tokens, x.num_blocks, x.num_free_blocks, x.num_cached_blocks,
           x.num_used_blocks, x.num_snapshots_used, x.num_evictions);
}

}  // namespace di::runtime
