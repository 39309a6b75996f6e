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

/// Zero `bytes` at device address `data`, asynchronously on the current stream.
void fill_zero(void* data, std::size_t bytes);

/// Copies `bytes` between host and device memory in any direction, ordered on the current
/// stream. Returns once a copy that reads or writes host memory has completed; a
/// device-to-device copy stays asynchronous.
void copy_bytes(void* dst, bool dst_on_device, const void* src, bool src_on_device,
                std::size_t bytes);

}  // namespace di::cuda
