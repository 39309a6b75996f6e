// Device-side kernel intervals through CUPTI's activity API (concurrent-kernel records: every
// kernel's start and end on the GPU, also for the nodes of CUDA graphs; copies and memsets; the
// host's calls into the CUDA runtime), for
// `deepinfer bench decode --timeline`. libcupti is loaded at run time (dlopen), so nothing links
// against it and only a traced run needs it: the name in DEEPINFER_CUPTI_LIB, else
// libcupti.so.13 on the library path (the GPU bundle carries one in lib/), else the CUDA
// toolkit's copies.
#pragma once

#include "kernels/timeline.hpp"

#include <cstdint>
#include <vector>

namespace di::cuda {

/// Records every kernel the process runs on any device from construction until destruction
/// (one tracer at a time). Construction fails with a di::error naming what could not be loaded
/// or enabled. Enable it before graphs are captured: their kernels are then recorded too.
class kernel_trace {
 public:
  kernel_trace();
  ~kernel_trace();
  kernel_trace(const kernel_trace&) = delete;
  kernel_trace& operator=(const kernel_trace&) = delete;

  /// The tracer's clock (ns; the records' time base): bracket host-side windows with it.
  std::uint64_t now_ns() const;

  /// What completed so far (flushed from CUPTI's buffers): kernels with short names, copies and
  /// memsets, runtime calls; each record is returned once.
  timeline_records collect();
};

}  // namespace di::cuda
