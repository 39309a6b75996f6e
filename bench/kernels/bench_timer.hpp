// Timing and reporting helpers of the kernel benchmarks: CUDA-event timing on the current
// stream after warm-up (median of repeats), random device buffers, and the result table
// (measured figure, the physical limit or anchor beside it, their ratio) with a JSON copy.
#pragma once

#include "kernels/tensor.hpp"

#include <functional>
#include <string>
#include <vector>

namespace di::bench {

/// Median time in microseconds of `fn` (enqueued on the current stream), after `warmup`
/// untimed calls; each repeat is timed alone with CUDA events.
double median_us(const std::function<void()>& fn, int warmup = 3, int repeats = 20);

/// The same, timing replays of a CUDA graph captured from one call of `fn` (after one eager
/// warm-up call): launch and allocation overheads vanish, as in the executor's decode graphs.
/// `fn` must enqueue the same work every call.
double median_graph_us(const std::function<void()>& fn, int repeats = 20);

/// A device tensor of `shape` filled with random bytes (any dtype; e4m3 NaN codes avoided;
/// f32/bf16 values uniform in [-1, 1)).
tensor random_device(const tensor_shape& shape, dtype type, unsigned seed);

struct result_row {
  std::string kernel;  ///< what ran
  std::string shape;   ///< problem size
  double value = 0;    ///< measured figure
  std::string unit;    ///< of value
  double time_us = 0;  ///< median time
  std::string anchor;  ///< what it is compared with (limit or a peer's figure)
  double ratio = 0;    ///< value / anchor value (or anchor time / our time), 0 = none
};

/// Prints the table (headed "== <title> ==") and writes it as JSON to `json_path` if set.
void report(const std::string& title, const std::vector<result_row>& rows,
            const std::string& json_path);

}  // namespace di::bench
