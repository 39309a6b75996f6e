// CUDA_CHECK: turns a failed CUDA runtime call into a di::error with file/line and the
// CUDA error string (library code never exits).
#pragma once

#include "common/error.hpp"

#include <cuda_runtime.h>

#define CUDA_CHECK(expr)                                                             \
  do {                                                                               \
    cudaError_t di_cuda_status_ = (expr);                                            \
    if (di_cuda_status_ != cudaSuccess) [[unlikely]]                                 \
      DI_FAIL("CUDA error {} ({}) in {}", cudaGetErrorName(di_cuda_status_),         \
              cudaGetErrorString(di_cuda_status_), #expr);                           \
  } while (0)
