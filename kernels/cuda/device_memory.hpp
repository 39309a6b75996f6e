// Device memory for tensors on device_kind::cuda: stream-ordered allocation on the current
// stream (cudaMallocAsync from the device's memory pool, kept warm so that steady-state
// allocation costs no driver call), zero fills and byte copies between host and device.
// Plain C++ (no CUDA headers): kernels/tensor.cpp calls it when the CUDA backend is built.
#pragma once

#include <cstddef>
#include <memory>

namespace di::cuda {

/// True when a CUDA device is usable in this process (driver present, at least one GPU).
bool have_device();

/// `bytes` of device memory on GPU `index`, allocated on the current stream and released on
/// that same stream once the last handle drops -- except around an open stream_fork, whose
/// rules (stream.hpp) say which of its two streams releases it.
std::shared_ptr<std::byte[]> allocate(std::size_t bytes, int index);

/// `bytes` of page-locked host memory (what device-to-host copies land in: no page faults
/// on first touch, full-speed DMA), from a cache of earlier blocks (sizes rounded up to a
/// power of two; at most 1 GiB kept), returned to the cache when the last handle drops.
/// Falls back to ordinary host memory when the driver cannot pin more.
std::shared_ptr<std::byte[]> allocate_host(std::size_t bytes);

/// Whether page-locked host memory at `p` is mapped at the same address on the device (unified
/// addressing), so kernels may read it in place; clears the CUDA error a refusal leaves.
bool mapped_at_host_address(const void* p);

/// Zeroes `bytes` of memory that allocate(bytes, index) returned, asynchronously on the current
/// stream: a kernel whenever device `index` is current, without asking the driver what `data`
/// is -- inside a stream capture it does not know the capture's own allocations yet, so the
/// fill asked that way left a memset node there (13 in a v41-flash-L4 decode step's graphs:
/// each holding up the programmatic launch after it).
void fill_zero_allocated(void* data, std::size_t bytes, int index);
/// Whether zero fills inside a forward run as kernels (fill_zero_allocated, the GEMMs'
/// zero_outputs) and the experts' products skip zeroing outputs that every kernel stores:
/// on by default; DEEPINFER_ZERO_KERNELS=0 gives the memset nodes as before (the same bits).
bool zero_kernels();

/// Copies `bytes` between host and device memory in any direction, ordered on the current
/// stream. `dst_device` / `src_device`: the CUDA device index of a side that is a device
/// tensor's memory, -1 for host memory. Returns once a copy that reads or writes host memory
/// has completed; a device-to-device copy stays asynchronous. Between two device tensors of
/// the current device it is a kernel (the programmatic launch of the kernels around it goes
/// on), told so by the tensor type -- whose CUDA tensors are its own allocations or views of
/// memory their device's kernels reach at that address (device memory, or pinned host memory
/// mapped at the same address: the staged uploads) -- rather than by asking the driver, which
/// inside a stream capture does not know the capture's own allocations yet and so made such a
/// copy a copy-engine node. DEEPINFER_ZERO_KERNELS=0 asks the driver as before (comparisons).
void copy_bytes(void* dst, int dst_device, const void* src, int src_device, std::size_t bytes);

}  // namespace di::cuda
