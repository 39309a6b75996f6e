// Microbenchmark of the CPU sampler on one DeepSeek-sized row (129280 logits): microseconds per
// sample for greedy, top-k 50, top-p 0.9, min-p 0.05 and plain temperature, plus one max over
// the row: the floor every mode pays.
#include <chrono>
#include <cstdio>
#include <vector>

#include "runtime/detail/row_reduce.hpp"
#include "runtime/sampler.hpp"
#include "tests/runtime/sampling_test_util.hpp"

using namespace di::runtime;

namespace {

double micros_per_call(int num_iters, const auto& fn) {
  fn(0);  // warm-up: sizes the scratch buffers
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < num_iters; ++i) fn(i);
  const std::chrono::duration<double, std::micro> elapsed =
      std::chrono::steady_clock::now() - start;
  return elapsed.count() / num_iters;
}

}  // namespace

int main() {
  const std::vector<float> logits = di::test::random_logits(di::test::deepseek_vocab_size, 1, 3.0);
  struct mode {
    const char* name;
    sampling_params params;
  };
  std::vector<mode> modes(6);
  modes[0] = {"greedy", {}};
  modes[0].params.temperature = 0;
  modes[1] = {"temperature 1", {}};
  modes[2] = {"top-k 50", {}};
  modes[2].params.top_k = 50;
  modes[3] = {"top-p 0.9", {}};
  modes[3].params.top_p = 0.9;
  modes[4] = {"min-p 0.05", {}};
  modes[4].params.min_p = 0.05;
  modes[5] = {"greedy + logprobs 20", {}};
  modes[5].params.temperature = 0;
  modes[5].params.logprobs = 20;

  volatile float sink = 0;
  const double floor_us = micros_per_call(200, [&](int) { sink = detail::max_logit(logits); });
  std::printf("%-24s %10s\n", "mode (vocab 129280)", "us/sample");
  std::printf("%-24s %10.1f\n", "max over the row", floor_us);
  sampler s;
  for (const mode& m : modes) {
    const double us = micros_per_call(100, [&](int i) {
      sink = float(s.sample(di::test::make_request(logits, m.params, 7, i)).token_id);
    });
    std::printf("%-24s %10.1f\n", m.name, us);
  }
  return 0;
}
