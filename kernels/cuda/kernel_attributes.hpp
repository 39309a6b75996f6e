// Kernel attributes and device properties, per device, and the kernel switches' defaults from
// the environment. cudaFuncSetAttribute applies to the
// current device only, so a launcher that raised a kernel's shared-memory limit once per
// process would have that kernel's launches fail ("invalid argument") on a second GPU of the
// same process (several executors on cuda:N): every launcher keeps a per-device record of the
// limit it has raised. C++17 (included by .cu files).
#pragma once

#include "common/env.hpp"
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

// The switches' environment defaults (common/env.hpp), by their names here.
using ::di::env_count;
using ::di::env_mode;
using ::di::env_switch;

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
