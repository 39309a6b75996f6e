// --device for the CLI: placing the model and measuring the CUDA limits (copy bandwidth,
// cuBLAS bf16 rate) with CUDA events over the current stream, best of several runs.
#include "cli/detail/device_setup.hpp"

#include "common/error.hpp"

#include <CLI/CLI.hpp>

#if defined(DEEPINFER_HAVE_CUDA)
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/kernel_trace.hpp"
#include "kernels/cuda/stream.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <functional>

namespace di::cli {

void check_device_choice(const std::string& device_name,
                         const std::vector<const CLI::Option*>& cuda_only) {
  const device wanted = parse_device(device_name);
  require_device(wanted);
  if (wanted.kind != device_kind::cuda)
    for (const CLI::Option* opt : cuda_only)
      DI_CHECK(opt->count() == 0, "{} is for CUDA runs: it needs --device cuda", opt->get_name());
}

device place_model(deepseek_model& model, const std::string& device_name,
                   const std::string& weights) {
  const device dev = parse_device(device_name);
  const auto format = parse_device_weight_format(weights);  // checked on the CPU too
  if (dev == cpu_device) return cpu_device;  // callers ran require_device before the load
  model.to_device(dev, format);
  return dev;
}

#if defined(DEEPINFER_HAVE_CUDA)

namespace {

/// Best time (seconds) of `f` over 5 runs after a warm-up, by CUDA events.
double best_seconds(const std::function<void()>& f) {
  cudaStream_t s = cuda::current_stream();
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  f();
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    CUDA_CHECK(cudaEventRecord(a, s));
    f();
    CUDA_CHECK(cudaEventRecord(b, s));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    best = std::min(best, double(ms) * 1e-3);
  }
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  return best;
}

}  // namespace

double measure_device_copy_gbs(device dev) {
  const std::int64_t bytes = std::int64_t(1) << 30;
  tensor src = tensor::zeros({bytes}, dtype::u8, dev), dst = tensor::empty({bytes}, dtype::u8, dev);
  const double s = best_seconds([&] {
    CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), std::size_t(bytes), cudaMemcpyDeviceToDevice,
                               cuda::current_stream()));
  });
  return 2.0 * double(bytes) / s / 1e9;
}

double measure_device_bf16_tflops(device dev) {
  const int n = 8192;
  // Random-looking bf16 bits (finite: exponent kept small) so the rate is not a zeros rate.
  tensor host = tensor::empty({std::int64_t(n) * n}, dtype::bf16);
  std::uint32_t x = 12345;
  for (std::int64_t i = 0; i < host.numel(); ++i) {
    x = x * 1664525u + 1013904223u;
    host.data<std::uint16_t>()[i] = std::uint16_t(0x3c00u | ((x >> 16) & 0x80ffu));
  }
  tensor a = host.to(dev), b = host.to(dev);
  tensor c = tensor::empty({std::int64_t(n) * n}, dtype::bf16, dev);
  cublasHandle_t h;
  CUBLAS_CHECK(cublasCreate(&h));
  CUBLAS_CHECK(cublasSetStream(h, cuda::current_stream()));
  const float one = 1.0f, zero = 0.0f;
  const double s = best_seconds([&] {
    CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, a.raw(), CUDA_R_16BF, n,
                              b.raw(), CUDA_R_16BF, n, &zero, c.raw(), CUDA_R_16BF, n,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  });
  CUBLAS_CHECK(cublasDestroy(h));
  return 2.0 * double(n) * n * n / s / 1e12;
}

void synchronize_device(device dev) {
  if (dev.kind == device_kind::cuda) cuda::synchronize();
}

void set_ordered_gemm_splits(bool on) {
  cuda::set_ordered_gemm_splits(on);
}

kernel_tracer start_kernel_tracer() {
  auto trace = std::make_shared<cuda::kernel_trace>();
  return {[trace] { return trace->now_ns(); }, [trace] { return trace->collect(); }, trace};
}

#else

double measure_device_copy_gbs(device) {
  DI_FAIL("no CUDA backend in this build");
}
double measure_device_bf16_tflops(device) {
  DI_FAIL("no CUDA backend in this build");
}
void synchronize_device(device) {}

void set_ordered_gemm_splits(bool on) {
  DI_CHECK(!on, "--ordered-splits: no CUDA backend in this build");
}

kernel_tracer start_kernel_tracer() {
  DI_FAIL("a kernel timeline needs the CUDA backend, which this build does not have");
}

#endif

}  // namespace di::cli
