// CUDA_CHECK / CUBLAS_CHECK: turn a failed CUDA runtime or cuBLAS call
// into a di::error with the failing expression and the library's error name (library code
// never exits). C++17-clean so that .cu files compiled by nvcc can include it.
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

/// For cublasStatus_t / cublasLt calls (include cublas_api.h or cublasLt.h first).
#define CUBLAS_CHECK(expr)                                                           \
  do {                                                                               \
    auto di_cublas_status_ = (expr);                                                 \
    if (di_cublas_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                     \
      DI_FAIL("cuBLAS error {} ({}) in {}", cublasGetStatusName(di_cublas_status_),  \
              cublasGetStatusString(di_cublas_status_), #expr);                      \
  } while (0)
