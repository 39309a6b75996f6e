// Kernel attributes and device properties, per device, and the kernel switches' defaults from
// the environment. cudaFuncSetAttribute applies to the
// current device only, so a launcher that raised a kernel's shared-memory limit once per
// process would have that kernel's launches fail ("invalid argument") on a second GPU of the
// same process (several executors on cuda:N): every launcher keeps a per-device record of the
// limit it has raised. C++17 (included by .cu files).
#pragma once

#include "common/error.hpp"
#include "kernels/cuda/cuda_check.hpp"

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace di::cuda::detail {

inline constexpr int max_tracked_devices = 16;

/// A kernel switch's default from environment variable `name`: a switch on by default is off
/// only when it is "0"; one off by default is on only when it is "1".
inline bool env_switch(const char* name, bool default_on) {
  const char* env = std::getenv(name);
  if (!env) return default_on;
  return default_on ? std::string_view(env) != "0" : std::string_view(env) == "1";
}

/// A three-way kernel mode's default from environment variable `name`: -1 (automatic, also
/// when unset), 0 or 1; anything else is ignored with a warning on stderr naming `what_auto`,
/// what the automatic mode does.
inline int env_mode(const char* name, const char* what_auto) {
  const char* env = std::getenv(name);
  if (!env) return -1;
  const std::string_view v(env);
  if (v == "-1" || v == "0" || v == "1") return v == "-1" ? -1 : v == "0" ? 0 : 1;
  std::fprintf(stderr, "deepinfer: %s=%s ignored (expected -1, 0 or 1); %s\n", name, env,
               what_auto);
  return -1;
}

/// A count's (or numbered mode's) default from environment variable `name`: `fallback` when
/// unset; a value that is not a whole number in [min, max] is ignored with a warning on stderr.
inline std::int64_t env_count(const char* name, std::int64_t fallback, std::int64_t max,
                              std::int64_t min = 1) {
  const char* env = std::getenv(name);
  if (!env) return fallback;
  char* end = nullptr;
  const long long v = std::strtoll(env, &end, 10);
  if (end != env && *end == '\0' && v >= min && v <= max) return v;
  std::fprintf(stderr,
               "deepinfer: %s=%s ignored (expected a whole number in %lld..%lld); using %lld\n",
               name, env, static_cast<long long>(min), static_cast<long long>(max),
               static_cast<long long>(fallback));
  return fallback;
}

/// The current device's ordinal, within the devices the records below track.
inline int tracked_device() {
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  DI_CHECK(dev >= 0 && dev < max_tracked_devices, "CUDA device {} beyond the {} the kernels track",
           dev, max_tracked_devices);
  return dev;
}

/// Raises `kernel`'s dynamic shared-memory limit to `bytes` on the current device (once per
/// device and size; thread-safe). `limits` is the kernel's own per-device record.
inline void ensure_smem(const void* kernel, std::size_t bytes,
                        std::atomic<std::size_t> (&limits)[max_tracked_devices]) {
  if (bytes <= 48 * 1024) return;
  const int dev = tracked_device();
  std::size_t seen = limits[dev].load(std::memory_order_acquire);
  if (bytes <= seen) return;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  while (seen < bytes && !limits[dev].compare_exchange_weak(seen, bytes)) {
  }
}

/// The current device's multiprocessor count (queried once per device).
inline int multiprocessor_count() {
  static std::atomic<int> counts[max_tracked_devices] = {};
  const int dev = tracked_device();
  int n = counts[dev].load(std::memory_order_relaxed);
  if (n == 0) {
    CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    counts[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}

}  // namespace di::cuda::detail
