// The request lifecycle: every (from, to) pair against the documented table, names, and that
// an illegal move throws and leaves the status unchanged.
#include "common/error.hpp"
#include "runtime/sequence_status.hpp"

#include <doctest/doctest.h>

#include <set>
#include <utility>

using namespace di::runtime;
using enum di::runtime::sequence_status;

namespace {

constexpr sequence_status all[] = {queued,        prefilling,      decoding,       preempted,
                                   finished_stop, finished_length, finished_abort, finished_error};

}  // namespace

TEST_CASE("exactly the documented transitions are legal") {
  const std::set<std::pair<sequence_status, sequence_status>> legal = {
      {queued, prefilling},         {queued, finished_abort},   {queued, finished_error},
      {prefilling, decoding},       {prefilling, preempted},    {prefilling, finished_abort},
      {prefilling, finished_error}, {decoding, preempted},      {decoding, finished_stop},
      {decoding, finished_length},  {decoding, finished_abort}, {decoding, finished_error},
      {preempted, prefilling},      {preempted, finished_stop}, {preempted, finished_length},
      {preempted, finished_abort},  {preempted, finished_error}};
  for (sequence_status from : all)
    for (sequence_status to : all) {
      CAPTURE(to_string(from));
      CAPTURE(to_string(to));
      CHECK(is_legal_transition(from, to) == legal.contains({from, to}));
    }
}

TEST_CASE("abort is allowed in every live state and nothing leaves a finished one") {
  for (sequence_status s : all) {
    CAPTURE(to_string(s));
    CHECK(is_legal_transition(s, finished_abort) == !is_finished(s));
    for (sequence_status to : all)
      if (is_finished(s)) CHECK_FALSE(is_legal_transition(s, to));
  }
}

TEST_CASE("an illegal transition throws and keeps the status") {
  sequence_status s = queued;
  CHECK_THROWS_WITH_AS(transition(s, decoding), "illegal sequence transition queued -> decoding",
                       di::error);
  CHECK(s == queued);
  transition(s, prefilling);
  transition(s, decoding);
  transition(s, preempted);
  transition(s, prefilling);
  transition(s, decoding);
  transition(s, finished_stop);
  CHECK(s == finished_stop);
  CHECK_THROWS_AS(transition(s, finished_abort), di::error);
}

TEST_CASE("state groups and finish reasons") {
  CHECK(is_waiting(queued));
  CHECK(is_waiting(preempted));
  CHECK(is_running(prefilling));
  CHECK(is_running(decoding));
  CHECK_FALSE(is_running(preempted));
  CHECK(finish_reason_of(finished_stop) == "stop");
  CHECK(finish_reason_of(finished_length) == "length");
  CHECK(finish_reason_of(finished_abort) == "abort");
  CHECK(finish_reason_of(finished_error) == "error");
  CHECK(finish_reason_of(decoding).empty());
  // Declared in the order they happen.
  CHECK(queued < prefilling);
  CHECK(prefilling < decoding);
  CHECK(decoding < preempted);
  CHECK(preempted < finished_stop);
}
