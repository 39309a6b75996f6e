// sequence_status: names and the legal-transition table of the request lifecycle.
#include "runtime/sequence_status.hpp"

#include "common/error.hpp"

namespace di::runtime {

std::string_view to_string(sequence_status status) {
  switch (status) {
    case sequence_status::queued:
      return "queued";
    case sequence_status::prefilling:
      return "prefilling";
    case sequence_status::decoding:
      return "decoding";
    case sequence_status::preempted:
      return "preempted";
    case sequence_status::finished_stop:
      return "finished_stop";
    case sequence_status::finished_length:
      return "finished_length";
    case sequence_status::finished_abort:
      return "finished_abort";
    case sequence_status::finished_error:
      return "finished_error";
  }
  return "?";
}

std::string_view finish_reason_of(sequence_status status) {
  switch (status) {
    case sequence_status::finished_stop:
      return "stop";
    case sequence_status::finished_length:
      return "length";
    case sequence_status::finished_abort:
      return "abort";
    case sequence_status::finished_error:
      return "error";
    default:
      return "";
  }
}

bool is_finished(sequence_status status) {
  return status >= sequence_status::finished_stop;
}

bool is_waiting(sequence_status status) {
  return status == sequence_status::queued || status == sequence_status::preempted;
}

bool is_running(sequence_status status) {
  return status == sequence_status::prefilling || status == sequence_status::decoding;
}

bool is_legal_transition(sequence_status from, sequence_status to) {
  using enum sequence_status;
  if (is_finished(from)) return false;
  if (to == finished_abort || to == finished_error) return true;
  switch (from) {
    case queued:
      return to == prefilling;
    case prefilling:
      return to == decoding || to == preempted;
    case decoding:
      return to == preempted || to == finished_stop || to == finished_length;
    case preempted:
      return to == prefilling || to == finished_stop || to == finished_length;
    default:
      return false;
  }
}

void transition(sequence_status& status, sequence_status to) {
  DI_CHECK(is_legal_transition(status, to), "illegal sequence transition {} -> {}",
           to_string(status), to_string(to));
  status = to;
}

}  // namespace di::runtime
