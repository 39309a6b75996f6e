// The process-wide seed source for requests without a seed: one splitmix64 stream whose start
// comes from std::random_device and the clock, advanced atomically so that threads never share
// a seed.
#include "runtime/sampling_rng.hpp"

#include <atomic>
#include <chrono>
#include <random>

namespace di::runtime {
namespace {

std::uint64_t initial_state() {
  std::random_device device;
  const std::uint64_t entropy = (std::uint64_t{device()} << 32) ^ device();
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  return entropy ^ mix64(static_cast<std::uint64_t>(now));
}

}  // namespace

std::uint64_t draw_request_seed() {
  static std::atomic<std::uint64_t> state{initial_state()};
  return mix64(state.fetch_add(splitmix_gamma, std::memory_order_relaxed) + splitmix_gamma);
}

}  // namespace di::runtime
