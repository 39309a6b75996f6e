// Where a step's device time goes: kernel intervals as a tracer records them (start and end on
// the device clock, in ns) summarised per step window -- how long the device was busy, how long
// it sat idle between kernels, and which kernels took the time. Backend-free: the CUDA tracer
// (kernels/cuda/kernel_trace.hpp) fills it from CUPTI, `deepinfer bench decode --timeline`
// prints it, and the arithmetic is tested on hand-made intervals without a GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace di {

/// A device interval: a kernel (its short_kernel_name) or a copy / memset ("[memcpy HtoD]").
struct timed_kernel {
  std::string name;
  std::uint64_t start_ns = 0, end_ns = 0;
};

/// A call into the CUDA runtime on the host ("cudaLaunchKernelExC"), on the same clock.
struct host_call {
  std::string name;
  std::uint64_t start_ns = 0, end_ns = 0;
};

struct timeline_records {
  std::vector<timed_kernel> device;
  std::vector<host_call> host;
};

/// A step as the host saw it: from before its first launch to after its last completion.
struct timeline_window {
  std::uint64_t begin_ns = 0, end_ns = 0;
};

struct timeline_kernel_row {
  std::string name;
  double launches_per_step = 0;
  double us_per_step = 0;  ///< sum of the launches' durations (start to end)
  /// The time the launches extended the device's busy time: end minus the later of start and
  /// the latest end before. A kernel launched early (programmatic launch) starts while its
  /// predecessor runs and waits for it, so its duration includes that wait; this does not.
  /// Over all kernels it adds up to busy_us.
  double own_us_per_step = 0;
  double idle_before_us = 0;  ///< idle device time (per step) that ended with this kernel's start
};

struct timeline_api_row {
  std::string name;
  double calls_per_step = 0;
  double us_per_step = 0;  ///< host time inside the call
  double max_us = 0;       ///< the longest single call
};

struct timeline_summary {
  int steps = 0;         ///< windows with at least one kernel
  double wall_us = 0;    ///< per step: the window's length
  double lead_us = 0;    ///< per step: window begin -> first kernel start (host work)
  double span_us = 0;    ///< per step: first kernel start -> last kernel end
  double busy_us = 0;    ///< per step: union of the kernel intervals (device busy)
  double idle_us = 0;    ///< per step: span - busy (gaps between kernels)
  double kernel_us = 0;  ///< per step: sum of durations (> busy where kernels overlap)
  double launches = 0;   ///< per step
  std::vector<timeline_kernel_row> kernels;  ///< by own_us_per_step, largest first
  double api_us = 0;                         ///< per step: host time inside CUDA runtime calls
  std::vector<timeline_api_row> api;         ///< by us_per_step, largest first
};

/// Per-step averages over the windows; an interval or call belongs to the window its start lies
/// in (those outside every window are ignored). Device intervals may overlap (other streams,
/// programmatic launch).
timeline_summary summarize_timeline(timeline_records records,
                                    const std::vector<timeline_window>& windows);

/// A demangled kernel name without namespaces, parameter list and return type, template
/// arguments kept ("di::cuda::(anonymous namespace)::k<4, true>(params)" -> "k<4, true>");
/// cut to `max_chars` with "..." (names of library kernels run to hundreds of characters).
std::string short_kernel_name(const std::string& demangled, std::size_t max_chars = 72);

}  // namespace di
