// Current-stream bookkeeping of the CUDA backend (see stream.hpp).
#include "kernels/cuda/stream.hpp"

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/kernel_attributes.hpp"

#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace di::cuda {

namespace {

thread_local cudaStream_t tl_stream = nullptr;
thread_local bool tl_has_stream = false;
thread_local bool tl_index_checks = true;

std::atomic<bool> g_programmatic_launch{detail::env_switch("DEEPINFER_PDL", true)};
std::atomic<bool> g_side_streams{detail::env_switch("DEEPINFER_SIDE_STREAMS", true)};

/// The fork open on this thread (stream_fork).
thread_local open_fork tl_fork;

/// A parent stream's side stream and the events of its forks.
struct side_entry {
  cudaStream_t side = nullptr;
  cudaEvent_t forked = nullptr, done = nullptr;
};

/// Side streams by parent stream and forking thread: two threads that fork from one parent
/// (e.g. two executors on the process-wide default stream) get a side stream and events each.
using side_key = std::pair<cudaStream_t, std::thread::id>;
std::mutex g_sides_mutex;
std::map<side_key, side_entry>& sides() {
  static auto* m = new std::map<side_key, side_entry>;  // never destroyed (static exit)
  return *m;
}

/// This thread's side stream of `parent` (created on first use) with its events.
side_entry side_of(cudaStream_t parent) {
  std::lock_guard<std::mutex> lock(g_sides_mutex);
  side_entry& e = sides()[{parent, std::this_thread::get_id()}];
  if (e.side == nullptr) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&e.side, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&e.forked, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&e.done, cudaEventDisableTiming));
  }
  return e;
}

/// Destroys `parent`'s side streams (the parent is going away and has been synchronised).
void drop_side_of(cudaStream_t parent) {
  std::vector<side_entry> dropped;
  {
    std::lock_guard<std::mutex> lock(g_sides_mutex);
    for (auto it = sides().begin(); it != sides().end();) {
      if (it->first.first != parent) {
        ++it;
        continue;
      }
      dropped.push_back(it->second);
      it = sides().erase(it);
    }
  }
  for (const side_entry& e : dropped) {
    cudaStreamSynchronize(e.side);
    cudaStreamDestroy(e.side);
    cudaEventDestroy(e.forked);
    cudaEventDestroy(e.done);
  }
}

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

void set_side_streams(bool on) {
  g_side_streams.store(on, std::memory_order_relaxed);
}

bool side_streams() {
  return g_side_streams.load(std::memory_order_relaxed);
}

open_fork current_fork() noexcept {
  return tl_fork;
}

cudaStream_t scoped_stream() noexcept {
  return tl_has_stream ? tl_stream : nullptr;
}

stream_fork::stream_fork() {
  parent_ = side_ = current_stream();
  if (!side_streams() || tl_fork.side != nullptr) return;  // off, or nested: inactive
  const side_entry e = side_of(parent_);
  CUDA_CHECK(cudaEventRecord(e.forked, parent_));
  CUDA_CHECK(cudaStreamWaitEvent(e.side, e.forked, 0));
  side_ = e.side;
  done_ = e.done;
  active_ = true;
  tl_fork = {side_, parent_};
}

void stream_fork::join() {
  if (!active_) return;
  active_ = false;
  tl_fork = {};
  CUDA_CHECK(cudaEventRecord(done_, side_));
  CUDA_CHECK(cudaStreamWaitEvent(parent_, done_, 0));
}

stream_fork::~stream_fork() {
  if (!active_) return;
  active_ = false;
  tl_fork = {};
  // A destructor must not throw: errors are left for the next checked call to report.
  if (cudaEventRecord(done_, side_) == cudaSuccess) cudaStreamWaitEvent(parent_, done_, 0);
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
    drop_side_of(stream_);
    cudaStreamDestroy(stream_);
  }
}

}  // namespace di::cuda
