// Current-stream bookkeeping of the CUDA backend (see stream.hpp).
#include "kernels/cuda/stream.hpp"

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/kernel_attributes.hpp"

#include <array>
#include <atomic>
#include <mutex>

namespace di::cuda {

namespace {

thread_local cudaStream_t tl_stream = nullptr;
thread_local bool tl_has_stream = false;
thread_local bool tl_index_checks = true;

std::atomic<bool> g_programmatic_launch{detail::env_switch("DEEPINFER_PDL", true)};

constexpr int max_devices = 16;

cudaStream_t default_stream(int device) {
  static std::mutex mutex;
  static std::array<cudaStream_t, max_devices> streams{};
  DI_CHECK(device >= 0 && device < max_devices, "CUDA device {} out of range", device);
  std::lock_guard<std::mutex> lock(mutex);
  if (!streams[std::size_t(device)])
    CUDA_CHECK(cudaStreamCreateWithFlags(&streams[std::size_t(device)], cudaStreamNonBlocking));
  return streams[std::size_t(device)];
}

}  // namespace

void set_programmatic_launch(bool on) {
  g_programmatic_launch.store(on, std::memory_order_relaxed);
}

bool programmatic_launch() {
  return g_programmatic_launch.load(std::memory_order_relaxed);
}

cudaStream_t current_stream() {
  if (tl_has_stream) return tl_stream;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  return default_stream(device);
}

void synchronize() {
  CUDA_CHECK(cudaStreamSynchronize(current_stream()));
}

bool is_capturing() {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(current_stream(), &status));
  return status != cudaStreamCaptureStatusNone;
}

bool index_checks_enabled() {
  return tl_index_checks;
}

index_check_scope::index_check_scope(bool enabled) : previous_(tl_index_checks) {
  tl_index_checks = enabled;
}

index_check_scope::~index_check_scope() {
  tl_index_checks = previous_;
}

stream_scope::stream_scope(cudaStream_t stream)
    : previous_(tl_stream), had_previous_(tl_has_stream) {
  tl_stream = stream;
  tl_has_stream = true;
}

stream_scope::~stream_scope() {
  tl_stream = previous_;
  tl_has_stream = had_previous_;
}

owned_stream::owned_stream() {
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

owned_stream::~owned_stream() {
  if (stream_) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
}

}  // namespace di::cuda
