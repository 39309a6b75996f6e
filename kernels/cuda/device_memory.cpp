// Stream-ordered device allocation and host<->device copies for the tensor type (see
// device_memory.hpp).
#include "kernels/cuda/device_memory.hpp"

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/stream.hpp"

#include <cstdint>
#include <mutex>
#include <set>

namespace di::cuda {

namespace {

/// Keeps freed blocks in the device's default pool instead of returning them to the driver
/// at every synchronisation (the pool then serves repeated same-size allocations at once).
void keep_pool_warm(int device) {
  static std::mutex mutex;
  static std::set<int> done;
  std::lock_guard<std::mutex> lock(mutex);
  if (!done.insert(device).second) return;
  cudaMemPool_t pool = nullptr;
  CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  std::uint64_t threshold = UINT64_MAX;
  CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
}

/// Makes `device` current for the guard's lifetime.
class device_guard {
 public:
  explicit device_guard(int device) {
    CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) CUDA_CHECK(cudaSetDevice(device));
    changed_ = previous_ != device;
  }
  ~device_guard() {
    if (changed_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
  bool changed_ = false;
};

}  // namespace

bool have_device() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
}

std::shared_ptr<std::byte[]> allocate(std::size_t bytes, int index) {
  device_guard guard(index);
  keep_pool_warm(index);
  cudaStream_t stream = current_stream();
  void* p = nullptr;
  CUDA_CHECK(cudaMallocAsync(&p, bytes > 0 ? bytes : 1, stream));
  return std::shared_ptr<std::byte[]>(static_cast<std::byte*>(p), [stream](std::byte* q) {
    // A destructor must not throw: if the stream is gone, fall back to a synchronous free.
    if (cudaFreeAsync(q, stream) != cudaSuccess) {
      cudaGetLastError();
      cudaFree(q);
      cudaGetLastError();
    }
  });
}

void fill_zero(void* data, std::size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemsetAsync(data, 0, bytes, current_stream()));
}

void copy_bytes(void* dst, bool dst_on_device, const void* src, bool src_on_device,
                std::size_t bytes) {
  if (bytes == 0) return;
  cudaStream_t stream = current_stream();
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
  if (!dst_on_device || !src_on_device) CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace di::cuda
