// add_sampling_flags (see sampling_flags.hpp). Ranges the parser can check are checked here
// (a negative seed or --logprobs is a usage error); the rest is sampling_params::validate's.
#include "cli/detail/sampling_flags.hpp"

#include "cli/detail/option_checks.hpp"

#include <CLI/CLI.hpp>

#include <string>

namespace di::cli {

runtime::sampling_params sampling_flags::to_params() const {
  runtime::sampling_params p = params;
  p.max_tokens = max_tokens;
  p.seed = seed;
  p.logprobs = logprobs;
  p.prompt_logprobs = prompt_logprobs;
  return p;
}

void add_sampling_flags(CLI::App& sub, sampling_flags& f) {
  runtime::sampling_params& p = f.params;
  sub.add_option("--max-tokens", f.max_tokens, "Tokens to generate at most")
      ->capture_default_str()
      ->check(integer_range(1));
  sub.add_option("--temperature", p.temperature, "Sampling temperature; 0 = greedy")
      ->capture_default_str();
  // (-1 is off too, as in vLLM and the HTTP API's top_k)
  sub.add_option("--top-k", p.top_k, "Keep the k most likely tokens (0 or -1 = off)")
      ->check(integer_range(-1));
  sub.add_option("--top-p", p.top_p, "Nucleus sampling mass in (0, 1]");
  sub.add_option("--min-p", p.min_p, "Drop tokens below min_p x the top probability");
  sub.add_option("--repetition-penalty", p.repetition_penalty, "> 1 discourages repeats");
  sub.add_option("--presence-penalty", p.presence_penalty, "OpenAI presence penalty [-2, 2]");
  sub.add_option("--frequency-penalty", p.frequency_penalty, "OpenAI frequency penalty [-2, 2]");
  sub.add_option("--seed", f.seed,
                 "Random seed in [0, 2^64) (same seed, same output; default: a random one, "
                 "printed with the result)");
  sub.add_option("--stop", p.stop, "Stop string (repeatable); not included in the output");
  sub.add_flag("--ignore-eos", p.ignore_eos, "Do not stop at the end-of-sequence token");
  sub.add_option("--logprobs", f.logprobs, "Return the top-K logprobs of every generated token")
      ->check(non_negative_integer())
      ->check(integer_range(0));
  sub.add_option("--prompt-logprobs", f.prompt_logprobs,
                 "Return the top-K logprobs of every prompt token")
      ->check(non_negative_integer())
      ->check(integer_range(0));
}

CLI::Validator non_negative_integer(const char* name) {
  return CLI::Validator(
      [](const std::string& v) -> std::string {
        return !v.empty() && v.find_first_not_of("0123456789") == std::string::npos
                   ? std::string()
                   : "must be a non-negative integer, got '" + v + "'";
      },
      std::string(name) + " >= 0");
}

}  // namespace di::cli
