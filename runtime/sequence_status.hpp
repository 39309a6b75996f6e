// The lifecycle of one request inside a scheduler, states in the order they happen:
//
//   1. queued      accepted by add_request, waiting for blocks and a place in the batch
//   2. prefilling  admitted: its prompt (or, after preemption, prompt + output) runs in chunks
//   3. decoding    the prompt is scheduled in full; one token per step is sampled and fed back
//   4. preempted   its blocks were taken back (recompute); queued again at the front, it
//                  re-enters prefilling later and recomputes what it had
//   5. finished_*  stop (EOS, stop token or stop string), length (max_tokens or the context),
//                  abort (the client or the router gave up), error (the executor failed it)
//
// Legal moves: queued -> prefilling; prefilling -> decoding | preempted; decoding -> preempted;
// preempted -> prefilling; decoding | preempted -> finished_stop | finished_length (a sampled
// token can arrive after its sequence was preempted, under overlapped scheduling); every live
// state -> finished_abort | finished_error. Finished states are final.
#pragma once

#include <cstdint>
#include <string_view>

namespace di::runtime {

enum class sequence_status : std::uint8_t {
  queued,
  prefilling,
  decoding,
  preempted,
  finished_stop,
  finished_length,
  finished_abort,
  finished_error,
};

/// "queued", "prefilling", ..., "finished_error".
std::string_view to_string(sequence_status status);
/// The OpenAI-style finish_reason of a finished status ("stop", "length", "abort", "error"),
/// empty for a live one.
std::string_view finish_reason_of(sequence_status status);

bool is_finished(sequence_status status);
/// Queued or preempted: in the waiting queue, holding no blocks.
bool is_waiting(sequence_status status);
/// Prefilling or decoding: in the running batch, holding blocks.
bool is_running(sequence_status status);

/// True when the lifecycle above allows `from` -> `to`.
bool is_legal_transition(sequence_status from, sequence_status to);
/// Moves `status` to `to`; throws di::error naming both states on an illegal move (a
/// scheduler bug, never a user error: user requests reach here only through legal paths).
void transition(sequence_status& status, sequence_status to);

}  // namespace di::runtime
