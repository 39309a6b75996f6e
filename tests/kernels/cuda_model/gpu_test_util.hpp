// Helpers of the model-kernel GPU tests: a device buffer, host<->device copies, NaN
// poisoning, random tensors, and the skip rule (no GPU: the test returns after a message).
#pragma once

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/tensor.hpp"

#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace di::test {

inline bool have_gpu() {
  static const bool yes = [] {
    int n = 0;
    const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    cudaGetLastError();
    return ok;
  }();
  return yes;
}

#define DI_REQUIRE_GPU()                                      \
  do {                                                        \
    if (!::di::test::have_gpu()) {                            \
      MESSAGE("no CUDA device: GPU test skipped");            \
      return;                                                 \
    }                                                         \
  } while (0)

/// Device memory of `bytes` (at least 16 so that empty tensors still have an address),
/// filled with 0xff bytes (NaN for floats, -1 for ints) so unwritten outputs show.
class dbuf {
 public:
  dbuf() = default;
  explicit dbuf(std::size_t bytes) : bytes_(bytes) {
    CUDA_CHECK(cudaMalloc(&p_, bytes < 16 ? 16 : bytes));
    poison();
  }
  dbuf(const void* host, std::size_t bytes) : dbuf(bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpy(p_, host, bytes, cudaMemcpyHostToDevice));
  }
  explicit dbuf(const tensor& t) : dbuf(t.raw(), t.nbytes()) {}
  ~dbuf() {
    if (p_) cudaFree(p_);
  }
  dbuf(dbuf&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr; }
  dbuf& operator=(dbuf&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  void poison() { CUDA_CHECK(cudaMemset(p_, 0xff, bytes_ < 16 ? 16 : bytes_)); }
  template <typename T = void>
  T* get() const {
    return static_cast<T*>(p_);
  }
  std::size_t bytes() const { return bytes_; }
  /// Copies back into a fresh CPU tensor of `shape` and `type`.
  tensor to_host(const tensor_shape& shape, dtype type) const {
    tensor t = tensor::empty(shape, type);
    REQUIRE(t.nbytes() <= bytes_);
    CUDA_CHECK(cudaDeviceSynchronize());
    if (t.nbytes()) CUDA_CHECK(cudaMemcpy(t.raw(), p_, t.nbytes(), cudaMemcpyDeviceToHost));
    return t;
  }

 private:
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};

inline std::mt19937& rng() {
  static std::mt19937 g(std::random_device{}());
  return g;
}

/// Normal(0, sigma) f32 tensor.
inline tensor randn(const tensor_shape& shape, float sigma = 1.0f) {
  tensor t = tensor::empty(shape, dtype::f32);
  std::normal_distribution<float> d(0.0f, sigma);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng());
  return t;
}

inline bool bytes_equal(const tensor& a, const tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

/// ||a - b|| / ||b|| over all elements (f32), +inf if any element of a is NaN.
inline double rel_l2(const tensor& a, const tensor& b) {
  REQUIRE(a.numel() == b.numel());
  double num = 0.0, den = 0.0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.data<float>()[i], y = b.data<float>()[i];
    if (std::isnan(x)) return INFINITY;
    num += (x - y) * (x - y);
    den += y * y;
  }
  return den == 0.0 ? std::sqrt(num) : std::sqrt(num / den);
}

/// Largest |a - b| / (atol + rtol |b|) (<= 1 passes), +inf for a NaN in a.
inline double max_scaled_err(const tensor& a, const tensor& b, double rtol, double atol) {
  REQUIRE(a.numel() == b.numel());
  double worst = 0.0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.data<float>()[i], y = b.data<float>()[i];
    if (std::isnan(x) != std::isnan(y)) return INFINITY;
    if (std::isnan(x)) continue;
    worst = std::max(worst, std::fabs(x - y) / (atol + rtol * std::fabs(y)));
  }
  return worst;
}

}  // namespace di::test
