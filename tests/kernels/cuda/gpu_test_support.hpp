// Helpers of the GPU tests: fresh random host tensors, copies to the device, a NaN-poisoned
// device memory pool (so outputs an op fails to write read back as NaN), and comparisons of a
// CUDA result with its CPU twin (bitwise, or by relative error with a dtype-aware bound).
#pragma once

#include "kernels/cuda/stream.hpp"
#include "kernels/tensor.hpp"

#include <cuda_runtime.h>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

namespace di::test {

inline constexpr device gpu{device_kind::cuda, 0};

/// One generator per test binary, seeded afresh each run (the seed is printed on failure).
inline std::mt19937& rng() {
  static const unsigned seed = std::random_device{}();
  static std::mt19937 gen(seed);
  static bool printed = false;
  if (!printed) {
    MESSAGE("random seed " << seed);
    printed = true;
  }
  return gen;
}

/// Uniform values in [-scale, scale) as f32 [shape] on the host.
inline tensor random_f32(const tensor_shape& shape, float scale = 1.0f) {
  tensor t = tensor::empty(shape, dtype::f32);
  std::uniform_real_distribution<float> u(-scale, scale);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng());
  return t;
}

/// Random bytes as `type` [shape] on the host; `avoid_nan_e4m3` skips the e4m3 NaN codes.
inline tensor random_bytes(const tensor_shape& shape, dtype type, bool avoid_nan_e4m3 = false) {
  tensor t = tensor::empty(shape, type);
  std::uniform_int_distribution<int> byte(0, 255);
  auto* p = static_cast<std::uint8_t*>(t.raw());
  for (std::size_t i = 0; i < t.nbytes(); ++i) {
    do p[i] = std::uint8_t(byte(rng()));
    while (avoid_nan_e4m3 && (p[i] & 0x7f) == 0x7f);
  }
  return t;
}

/// Random i64 indices in [0, bound) [n] on the host.
inline tensor random_indices(std::int64_t n, std::int64_t bound) {
  tensor t = tensor::empty({n}, dtype::i64);
  std::uniform_int_distribution<std::int64_t> u(0, bound - 1);
  for (std::int64_t i = 0; i < n; ++i) t.data<std::int64_t>()[i] = u(rng());
  return t;
}

/// Fills a large stretch of the current stream's memory pool with 0xff bytes (NaN in f32 and
/// bf16) and frees it, so that the next outputs allocated from the pool start as NaN.
inline void poison_device_pool(std::size_t bytes = std::size_t(64) << 20) {
  tensor junk = tensor::empty({std::int64_t(bytes)}, dtype::u8, gpu);
  REQUIRE(cudaMemsetAsync(junk.raw(), 0xff, bytes, cuda::current_stream()) == cudaSuccess);
}

/// `t` on the host (itself when it is there already).
inline tensor on_host(const tensor& t) {
  return t.dev().kind == device_kind::cpu ? t : t.to(cpu_device);
}

/// The CUDA result `got` back on the host equals `want` (on any device) byte for byte.
inline void check_bitwise(const tensor& got, const tensor& want_any) {
  const tensor host = on_host(got), want = on_host(want_any);
  REQUIRE(host.shape() == want.shape());
  REQUIRE(host.type() == want.type());
  const auto* a = static_cast<const std::uint8_t*>(host.raw());
  const auto* b = static_cast<const std::uint8_t*>(want.raw());
  std::size_t mismatches = 0, first = 0;
  for (std::size_t i = 0; i < host.nbytes(); ++i)
    if (a[i] != b[i] && mismatches++ == 0) first = i;
  INFO("first differing byte " << first << " of " << host.nbytes());
  CHECK(mismatches == 0);
}

/// ||got - want|| / ||want|| <= rel (f32 tensors, either on any device); NaN anywhere in `got`
/// fails.
inline void check_close(const tensor& got, const tensor& want_any, double rel) {
  const tensor host = on_host(got), want = on_host(want_any);
  REQUIRE(host.shape() == want.shape());
  REQUIRE(host.type() == dtype::f32);
  double diff = 0.0, norm = 0.0;
  std::int64_t nans = 0;
  for (std::int64_t i = 0; i < host.numel(); ++i) {
    const double g = host.data<float>()[i], w = want.data<float>()[i];
    if (std::isnan(g) && !std::isnan(w)) ++nans;
    diff += (g - w) * (g - w);
    norm += w * w;
  }
  const double err = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
  INFO("relative error " << err << " (bound " << rel << "), NaNs " << nans);
  CHECK(nans == 0);
  CHECK(err <= rel);
}

}  // namespace di::test
