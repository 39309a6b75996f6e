// Device enumeration through the CUDA runtime; never throws for "no GPU here".
#include "kernels/cuda/device_info.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>

namespace di::cuda {

std::vector<device_info> list_devices(std::string* why_none) {
  std::vector<device_info> out;
  int count = 0;
  cudaError_t st = cudaGetDeviceCount(&count);
  if (st != cudaSuccess) {
    if (why_none) *why_none = cudaGetErrorString(st);
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return out;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    out.push_back({.index = i,
                   .name = prop.name,
                   .sm_major = prop.major,
                   .sm_minor = prop.minor,
                   .num_sms = prop.multiProcessorCount,
                   .total_memory = prop.totalGlobalMem});
  }
  if (out.empty() && why_none) *why_none = "no CUDA devices visible";
  return out;
}

std::string runtime_version() {
  return fmt::format("{}.{}", CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10);
}

}  // namespace di::cuda
