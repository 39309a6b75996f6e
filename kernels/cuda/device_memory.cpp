// Stream-ordered device allocation and host<->device copies for the tensor type (see
// device_memory.hpp).
#include "kernels/cuda/device_memory.hpp"

#include "kernels/cuda/basic_kernels.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/kernel_attributes.hpp"
#include "kernels/cuda/stream.hpp"

#include <cstdint>
#include <map>
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
  // Allocated on an open fork's side stream: released on its parent once the branch is over
  // (stream_fork's rules in stream.hpp).
  const open_fork at_alloc = current_fork();
  const cudaStream_t parent = stream == at_alloc.side ? at_alloc.parent : nullptr;
  void* p = nullptr;
  CUDA_CHECK(cudaMallocAsync(&p, bytes > 0 ? bytes : 1, stream));
  return std::shared_ptr<std::byte[]>(static_cast<std::byte*>(p), [stream, parent](std::byte* q) {
    cudaStream_t on = parent != nullptr ? parent : stream;
    const open_fork now = current_fork();
    if (now.side != nullptr && scoped_stream() == now.side &&
        (stream == now.side || stream == now.parent))
      on = now.side;  // dropped inside the branch: after every use on either stream
    // A destructor must not throw: if the stream is gone, fall back to a synchronous free.
    if (cudaFreeAsync(q, on) != cudaSuccess) {
      cudaGetLastError();
      cudaFree(q);
      cudaGetLastError();
    }
  });
}

namespace {

/// Freed pinned blocks by capacity. Never destroyed: handles may drop during static
/// destruction, after which the blocks are simply not returned.
struct pinned_cache {
  std::mutex mutex;
  std::multimap<std::size_t, std::byte*> free;
  std::size_t cached = 0;
};

pinned_cache& pinned() {
  static auto* cache = new pinned_cache;
  return *cache;
}

constexpr std::size_t pinned_cache_limit = std::size_t(1) << 30;

}  // namespace

bool mapped_at_host_address(const void* p) {
  void* on_device = nullptr;
  const bool mapped =
      cudaHostGetDevicePointer(&on_device, const_cast<void*>(p), 0) == cudaSuccess &&
      on_device == p;
  cudaGetLastError();
  return mapped;
}

std::shared_ptr<std::byte[]> allocate_host(std::size_t bytes) {
  std::size_t cap = 4096;
  while (cap < bytes) cap *= 2;
  pinned_cache& c = pinned();
  std::byte* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.free.find(cap);
    if (it != c.free.end()) {
      p = it->second;
      c.free.erase(it);
      c.cached -= cap;
    }
  }
  if (p == nullptr) {
    void* q = nullptr;
    if (cudaMallocHost(&q, cap) != cudaSuccess) {  // out of pinnable memory: plain pages
      cudaGetLastError();
      return std::shared_ptr<std::byte[]>(new std::byte[bytes > 0 ? bytes : 1]);
    }
    p = static_cast<std::byte*>(q);
  }
  return std::shared_ptr<std::byte[]>(p, [cap](std::byte* q) {
    pinned_cache& cache = pinned();
    {
      std::lock_guard<std::mutex> lock(cache.mutex);
      if (cache.cached + cap <= pinned_cache_limit) {
        cache.free.emplace(cap, q);
        cache.cached += cap;
        return;
      }
    }
    if (cudaFreeHost(q) != cudaSuccess) cudaGetLastError();
  });
}

namespace {

/// DEEPINFER_COPY_KERNELS=0: device copies and zero fills through the copy engine again
/// (cudaMemcpyAsync / cudaMemsetAsync; for comparisons). Read once.
const bool g_copy_kernels = detail::env_switch("DEEPINFER_COPY_KERNELS", true);

/// Whether a kernel on the current device may touch `p` as it is: memory of this device or
/// page-locked host memory mapped at the same address (what staged uploads are).
bool kernel_reachable(const void* p, bool host_ok) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  if (a.type == cudaMemoryTypeHost) return host_ok && a.devicePointer == p;
  if (a.type != cudaMemoryTypeDevice) return false;
  int current = -1;
  return cudaGetDevice(&current) == cudaSuccess && a.device == current;
}

/// Whether device `index` is the current device (the tensor type's memory of that device is
/// then what a kernel launched now reaches).
bool is_current_device(int index) {
  int current = -1;
  return cudaGetDevice(&current) == cudaSuccess && current == index;
}

}  // namespace

/// DEEPINFER_ZERO_KERNELS=0: zero fills as before session 52 (for comparisons; see
/// zero_kernels()). Read once.
const bool g_zero_kernels = detail::env_switch("DEEPINFER_ZERO_KERNELS", true);

bool zero_kernels() {
  return g_zero_kernels;
}

void fill_zero_allocated(void* data, std::size_t bytes, int index) {
  if (bytes == 0) return;
  // (DEEPINFER_ZERO_KERNELS=0: the driver asked what `data` is, as before session 52)
  const bool by_kernel =
      g_copy_kernels && (g_zero_kernels ? is_current_device(index) : kernel_reachable(data, false));
  if (by_kernel) {
    launch_fill_zero(data, bytes, current_stream());
    return;
  }
  cudaGetLastError();
  CUDA_CHECK(cudaMemsetAsync(data, 0, bytes, current_stream()));
}

void copy_bytes(void* dst, int dst_device, const void* src, int src_device, std::size_t bytes) {
  if (bytes == 0) return;
  cudaStream_t stream = current_stream();
  const bool dst_on_device = dst_device >= 0, src_on_device = src_device >= 0;
  bool by_kernel = dst_on_device && src_on_device && g_copy_kernels;
  if (by_kernel)  // (DEEPINFER_ZERO_KERNELS=0: the driver asked what both sides are, as before)
    by_kernel = g_zero_kernels ? dst_device == src_device && is_current_device(dst_device)
                               : kernel_reachable(dst, false) && kernel_reachable(src, true);
  if (by_kernel) {
    launch_copy_bytes(dst, src, bytes, stream);
    return;
  }
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
  if (!dst_on_device || !src_on_device) CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace di::cuda
