// The CLI's `--device` choice: moving a loaded model onto a CUDA device (`--device cuda`,
// `--device-weights stored|f32`) and the CUDA limits `deepinfer bench` compares against,
// measured in the same run (device copy bandwidth, cuBLAS bf16 dense matmul rate).
#pragma once

#include "kernels/timeline.hpp"
#include "model/forward/model.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace CLI {
class Option;
}

namespace di::cli {

/// Before the model loads: parses `device_name` and checks that the device can be used, and
/// on the CPU refuses each of `cuda_only` that was given (they were ignored there).
void check_device_choice(const std::string& device_name,
                         const std::vector<const CLI::Option*>& cuda_only);

/// "cpu" leaves the model where it is; "cuda" / "cuda:N" moves its weights to that GPU in
/// `weights` ("stored" or "f32") and returns the device. Throws di::error for other names or
/// a build without the CUDA backend.
device place_model(deepseek_model& model, const std::string& device_name,
                   const std::string& weights);

/// Device-to-device copy bandwidth (GB/s, bytes read + written) over a 1 GiB buffer.
double measure_device_copy_gbs(device dev);
/// cuBLAS bf16 GEMM rate (TFLOP/s) at 8192^3 on random data.
double measure_device_bf16_tflops(device dev);
/// Waits for the device's queued work (no-op on the CPU).
void synchronize_device(device dev);
/// CUDA GEMM K splits added in a fixed order (cuda::set_ordered_gemm_splits); turning it on
/// in a build without CUDA throws di::error.
void set_ordered_gemm_splits(bool on);

/// The device's kernel intervals (CUPTI, cuda::kernel_trace) from start_kernel_tracer() on, for
/// `bench decode --timeline`: now_ns() brackets a step on the records' clock, collect() returns
/// the device intervals and runtime calls recorded since the last call. Throws di::error without a
/// CUDA backend or when CUPTI cannot be loaded.
struct kernel_tracer {
  std::function<std::uint64_t()> now_ns;
  std::function<timeline_records()> collect;
  std::shared_ptr<void> handle;  ///< the tracer: recording stops when the last copy goes
};
kernel_tracer start_kernel_tracer();

}  // namespace di::cli
