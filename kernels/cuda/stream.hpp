// The CUDA stream the ops of the CUDA backend enqueue on. Every op runs asynchronously on
// `current_stream()`: an executor owns one stream (owned_stream) and makes it current for
// its thread with a stream_scope, so its kernels, copies and allocations stay ordered on
// that stream and can be captured into CUDA graphs. Without a scope, a process-wide
// non-blocking stream per device is used.
#pragma once

#include <cuda_runtime.h>

namespace di::cuda {

/// This thread's current stream: the innermost stream_scope's, else the default stream of
/// the current device (created on first use, never destroyed).
cudaStream_t current_stream();

/// Blocks until everything enqueued on the current stream has finished (errors throw).
void synchronize();

/// True while the current stream is capturing a CUDA graph (ops then skip host syncs).
bool is_capturing();

/// Whether the backend's kernels launch with programmatic dependent launch (kernels/cuda/
/// launch.cuh: each kernel's scheduling overlaps the end of the one before it; the same results
/// either way). On by default; DEEPINFER_PDL=0 sets the default off. Process-wide, read at each
/// launch (a CUDA graph keeps what was set when it was captured).
void set_programmatic_launch(bool on);
bool programmatic_launch();

/// Whether the gathers of this thread read their bad-index flag back (one short sync per op).
/// On by default; an executor whose indices are built and validated on the host turns it off
/// with an index_check_scope so that its steps never drain the stream.
bool index_checks_enabled();

/// Sets index_checks_enabled() for this thread for the scope's lifetime (scopes nest).
class index_check_scope {
 public:
  explicit index_check_scope(bool enabled);
  ~index_check_scope();
  index_check_scope(const index_check_scope&) = delete;
  index_check_scope& operator=(const index_check_scope&) = delete;

 private:
  bool previous_;
};

/// Makes `stream` this thread's current stream for the scope's lifetime (scopes nest).
class stream_scope {
 public:
  explicit stream_scope(cudaStream_t stream);
  ~stream_scope();
  stream_scope(const stream_scope&) = delete;
  stream_scope& operator=(const stream_scope&) = delete;

 private:
  cudaStream_t previous_;
  bool had_previous_;
};

/// Whether forward passes run independent work on a forked stream (stream_fork): on by
/// default; DEEPINFER_SIDE_STREAMS=0 sets the default off. Process-wide, read at each fork (a
/// CUDA graph keeps what was set when it was captured). Same results either way.
void set_side_streams(bool on);
bool side_streams();

/// A fork of the current stream (the parent): work enqueued while side() is current (a
/// stream_scope) runs beside what the parent enqueues after the fork point, and join() (or the
/// destructor) makes the parent wait for it. Works eagerly and inside a graph capture (the
/// branch becomes a parallel path of the graph). Each parent stream has one side stream per
/// forking thread, created on first use and kept while the parent lives. One fork at a time per thread, and
/// none from a side stream: such a fork is inactive (side() is the parent, join() a no-op).
///
/// Memory (the allocator follows the open fork): a tensor allocated on the side stream is
/// released on it while it is current (the branch's own temporaries) and on the parent
/// otherwise (the branch's outputs, dropped after the join); a parent's tensor whose last
/// handle the branch drops is released on the side stream. So the branch may read the
/// parent's tensors that the caller holds until join() -- it must not read what the parent
/// enqueues after the fork, and the parent must not read the branch's outputs before join().
class stream_fork {
 public:
  stream_fork();
  ~stream_fork();
  stream_fork(const stream_fork&) = delete;
  stream_fork& operator=(const stream_fork&) = delete;
  /// The stream the branch enqueues on (the parent when the fork is inactive).
  cudaStream_t side() const { return side_; }
  bool active() const { return active_; }
  /// Makes the parent wait for everything enqueued on the side stream so far (once).
  void join();

 private:
  cudaStream_t parent_ = nullptr, side_ = nullptr;
  cudaEvent_t done_ = nullptr;
  bool active_ = false;
};

/// The fork open on this thread: its side and parent streams (both null when none is open).
struct open_fork {
  cudaStream_t side = nullptr, parent = nullptr;
};
open_fork current_fork() noexcept;
/// The innermost stream_scope's stream of this thread, or null (never throws).
cudaStream_t scoped_stream() noexcept;

/// An owned non-blocking stream on the current device (one per executor). Tensors
/// allocated while it is current are released on it, so it must outlive them.
class owned_stream {
 public:
  owned_stream();
  ~owned_stream();
  owned_stream(const owned_stream&) = delete;
  owned_stream& operator=(const owned_stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace di::cuda
