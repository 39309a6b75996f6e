// The limits every kernel row is compared with, measured in the same run: device copy
// bandwidth and the cuBLAS bf16 dense matmul rate on random data (8192^3).
#include "bench/kernels/bench_sections.hpp"

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/stream.hpp"

#include <cublas_v2.h>
#include <fmt/format.h>

namespace di::bench {

namespace {

double copy_bandwidth(std::vector<result_row>& rows) {
  const std::int64_t bytes = std::int64_t(2) << 30;  // 2 GiB each way
  tensor src = random_device({bytes}, dtype::u8, 1);
  tensor dst = tensor::empty({bytes}, dtype::u8, src.dev());
  const double us = median_us([&] {
    CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), std::size_t(bytes), cudaMemcpyDeviceToDevice,
                               cuda::current_stream()));
  });
  const double gbps = 2.0 * double(bytes) / (us * 1e-6) / 1e9;
  rows.push_back({"copy d2d (read+write)", "2 GiB", gbps, "GB/s", us, "H200 HBM3e 4800 GB/s spec",
                  gbps / 4800.0});
  return gbps;
}

double cublas_bf16(std::vector<result_row>& rows, bool quick) {
  const int n = quick ? 4096 : 8192;
  tensor a = random_device({n, n}, dtype::bf16, 2), b = random_device({n, n}, dtype::bf16, 3);
  tensor c = tensor::empty({n, n}, dtype::bf16, a.dev());
  cublasHandle_t h;
  CUBLAS_CHECK(cublasCreate(&h));
  CUBLAS_CHECK(cublasSetStream(h, cuda::current_stream()));
  const float one = 1.0f, zero = 0.0f;
  const double us = median_us([&] {
    CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, a.raw(), CUDA_R_16BF, n,
                              b.raw(), CUDA_R_16BF, n, &zero, c.raw(), CUDA_R_16BF, n,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  });
  CUBLAS_CHECK(cublasDestroy(h));
  const double tflops = 2.0 * n * double(n) * n / (us * 1e-6) / 1e12;
  rows.push_back({"cuBLAS bf16 GEMM (random)", fmt::format("{}^3", n), tflops, "TFLOP/s", us,
                  "H200 dense bf16 989 TFLOP/s spec", tflops / 989.0});
  return tflops;
}

}  // namespace

void run_limits(limits& lim, std::vector<result_row>& rows, bool quick) {
  lim.copy_gbps = copy_bandwidth(rows);
  lim.bf16_tflops = cublas_bf16(rows, quick);
}

}  // namespace di::bench
