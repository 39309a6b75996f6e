// Validation of sampling parameters: every bad value is rejected with a message naming the
// parameter and the value; the boundary values that OpenAI and vLLM accept pass.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "runtime/failure.hpp"
#include "runtime/sampling_params.hpp"
#include "tests/runtime/sampling_test_util.hpp"

using di::runtime::sampling_limits;
using di::runtime::sampling_params;
using di::test::error_of;

namespace {

constexpr std::int64_t vocab = 1000;
constexpr double nan_value = std::numeric_limits<double>::quiet_NaN();
constexpr double inf_value = std::numeric_limits<double>::infinity();

/// The validation message after applying `edit` to default parameters.
std::string message_after(const std::function<void(sampling_params&)>& edit,
                          const sampling_limits& limits = {}) {
  sampling_params p;
  edit(p);
  return error_of([&] { p.validate(vocab, limits); });
}

/// The field the validation error blames (runtime::invalid_param), or "" when none is thrown.
std::string param_after(const std::function<void(sampling_params&)>& edit) {
  sampling_params p;
  edit(p);
  try {
    p.validate(vocab, {});
  } catch (const std::exception& e) {
    return di::runtime::param_of(e);
  }
  return "";
}

}  // namespace

TEST_CASE("default sampling parameters are valid") {
  CHECK(message_after([](sampling_params&) {}) == "");
}

TEST_CASE("each invalid sampling parameter is rejected with a message naming it") {
  struct bad_case {
    std::function<void(sampling_params&)> edit;
    std::string message;
  };
  const bad_case cases[] = {
      {[](auto& p) { p.temperature = -1; }, "temperature must be >= 0, got -1"},
      {[](auto& p) { p.temperature = nan_value; }, "temperature must be a finite number, got nan"},
      {[](auto& p) { p.temperature = inf_value; }, "temperature must be a finite number, got inf"},
      {[](auto& p) { p.top_p = 0; }, "top_p must be in (0, 1], got 0"},
      {[](auto& p) { p.top_p = 1.5; }, "top_p must be in (0, 1], got 1.5"},
      {[](auto& p) { p.top_p = -0.5; }, "top_p must be in (0, 1], got -0.5"},
      {[](auto& p) { p.top_p = nan_value; }, "top_p must be in (0, 1], got nan"},
      {[](auto& p) { p.top_k = -2; }, "top_k must be -1 or 0 (disabled) or at least 1, got -2"},
      {[](auto& p) { p.min_p = -0.1; }, "min_p must be in [0, 1], got -0.1"},
      {[](auto& p) { p.min_p = 1.5; }, "min_p must be in [0, 1], got 1.5"},
      {[](auto& p) { p.min_p = nan_value; }, "min_p must be in [0, 1], got nan"},
      {[](auto& p) { p.repetition_penalty = 0; }, "repetition_penalty must be > 0, got 0"},
      {[](auto& p) { p.repetition_penalty = -1; }, "repetition_penalty must be > 0, got -1"},
      {[](auto& p) { p.repetition_penalty = inf_value; },
       "repetition_penalty must be a finite number, got inf"},
      {[](auto& p) { p.repetition_penalty = nan_value; },
       "repetition_penalty must be a finite number, got nan"},
      {[](auto& p) { p.presence_penalty = 2.5; }, "presence_penalty must be in [-2, 2], got 2.5"},
      {[](auto& p) { p.presence_penalty = -3; }, "presence_penalty must be in [-2, 2], got -3"},
      {[](auto& p) { p.presence_penalty = nan_value; },
       "presence_penalty must be in [-2, 2], got nan"},
      {[](auto& p) { p.frequency_penalty = 2.01; },
       "frequency_penalty must be in [-2, 2], got 2.01"},
      {[](auto& p) { p.frequency_penalty = -inf_value; },
       "frequency_penalty must be in [-2, 2], got -inf"},
      {[](auto& p) { p.logprobs = -1; }, "logprobs must be >= 0, got -1"},
      {[](auto& p) { p.logprobs = 21; }, "logprobs must be <= 20 (the limit max_logprobs), got 21"},
      {[](auto& p) { p.prompt_logprobs = -3; }, "prompt_logprobs must be >= 0, got -3"},
      {[](auto& p) { p.prompt_logprobs = 100; },
       "prompt_logprobs must be <= 20 (the limit max_logprobs), got 100"},
      {[](auto& p) { p.max_tokens = 0; }, "max_tokens must be at least 1, got 0"},
      {[](auto& p) { p.min_tokens = -1; }, "min_tokens must be >= 0, got -1"},
      {[](auto& p) {
         p.max_tokens = 5;
         p.min_tokens = 6;
       },
       "min_tokens must be <= max_tokens (5), got 6"},
      {[](auto& p) {
         p.stop = {"ok", ""};
       },
       "stop must not contain an empty string"},
      {[](auto& p) {
         p.stop_token_ids = {3, 1000};
       },
       "stop_token_ids must be token ids in [0, 1000), got 1000"},
      {[](auto& p) { p.stop_token_ids = {-1}; },
       "stop_token_ids must be token ids in [0, 1000), got -1"},
  };
  for (const bad_case& c : cases) {
    CAPTURE(c.message);
    CHECK(message_after(c.edit) == c.message);
    // The error names its field as data too (the HTTP error's `param`): the message's first word.
    CHECK(param_after(c.edit) == c.message.substr(0, c.message.find(' ')));
  }
}

TEST_CASE("boundary values that OpenAI and vLLM accept are valid") {
  const std::function<void(sampling_params&)> edits[] = {
      [](auto& p) { p.temperature = 0; },
      [](auto& p) { p.temperature = 5; },
      [](auto& p) { p.top_k = -1; },
      [](auto& p) { p.top_k = 1; },
      [](auto& p) { p.top_k = 1'000'000; },  // larger than the vocabulary: keeps everything
      [](auto& p) { p.top_p = 1e-9; },
      [](auto& p) { p.min_p = 1; },
      [](auto& p) { p.repetition_penalty = 1e-3; },
      [](auto& p) { p.presence_penalty = -2; },
      [](auto& p) { p.frequency_penalty = 2; },
      [](auto& p) { p.logprobs = 0; },
      [](auto& p) { p.logprobs = 20; },
      [](auto& p) { p.prompt_logprobs = 20; },
      [](auto& p) {
        p.max_tokens = 1;
        p.min_tokens = 1;
      },
      [](auto& p) {
        p.stop_token_ids = {0, 999};
      },
      [](auto& p) { p.seed = std::numeric_limits<std::uint64_t>::max(); },
  };
  for (const auto& edit : edits) CHECK(message_after(edit) == "");
}

TEST_CASE("the logprobs limit comes from the server limits") {
  const sampling_limits limits{.max_logprobs = 5};
  CHECK(message_after([](auto& p) { p.logprobs = 5; }, limits) == "");
  CHECK(message_after([](auto& p) { p.logprobs = 6; }, limits) ==
        "logprobs must be <= 5 (the limit max_logprobs), got 6");
}

TEST_CASE("an invalid vocabulary size is an error, not a pass") {
  sampling_params p;
  CHECK(error_of([&] { p.validate(0); }) == "vocab_size must be positive, got 0");
}

TEST_CASE("greedy means a temperature below 1e-5; penalties are detected") {
  sampling_params p;
  CHECK_FALSE(p.is_greedy());
  p.temperature = 0;
  CHECK(p.is_greedy());
  p.temperature = 9e-6;
  CHECK(p.is_greedy());
  p.temperature = 1e-5;
  CHECK_FALSE(p.is_greedy());

  CHECK_FALSE(p.has_penalties());
  p.repetition_penalty = 1.1;
  CHECK(p.has_penalties());
  p.repetition_penalty = 1;
  p.presence_penalty = -0.5;
  CHECK(p.has_penalties());
  p.presence_penalty = 0;
  p.frequency_penalty = 0.1;
  CHECK(p.has_penalties());
}
