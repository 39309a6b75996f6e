// The limits every kernel row is compared with, measured in the same run: device copy
// bandwidth, the cuBLAS bf16 dense matmul rate on random data (8192^3), and one kernel's plain
// read of the decode weights' sizes.
#include "bench/kernels/bench_sections.hpp"

#include "bench/kernels/read_stream.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/kernel_attributes.hpp"
#include "kernels/cuda/stream.hpp"

#include <cublas_v2.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>

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

namespace {

/// Copies of `bytes` (16-byte multiple) that together stream more than the L2 holds.
std::size_t read_copies(std::size_t bytes) {
  return std::max<std::size_t>(2, (std::size_t(256) << 20) / bytes);
}

/// One read of `bytes` out of `buf` (read_copies(bytes) copies of them, read one after another
/// in a graph, so that each starts L2-cold): `loads` 16-byte loads per thread, `per_sm` blocks
/// of 256 per SM; microseconds per read.
double read_once_us(const tensor& buf, const tensor& sink, std::size_t bytes, int loads,
                    int per_sm) {
  const int sms = cuda::detail::multiprocessor_count();
  const std::size_t copies = read_copies(bytes);
  return median_graph_us([&] {
           for (std::size_t c = 0; c < copies; ++c)
             launch_read_stream_depth(static_cast<const std::uint8_t*>(buf.raw()) + c * bytes,
                                      bytes, sms * per_sm, loads,
                                      static_cast<unsigned*>(sink.raw()), cuda::current_stream());
         }) /
         double(copies);
}

}  // namespace

double read_stream_us(std::size_t bytes) {
  bytes = (bytes + 15) / 16 * 16;
  static std::map<std::size_t, double> measured;  // sizes the GEMM rows share (wq_b / wo_b)
  if (const auto it = measured.find(bytes); it != measured.end()) return it->second;
  tensor buf = random_device({std::int64_t(read_copies(bytes) * bytes)}, dtype::u8, 7);
  tensor sink = tensor::zeros({1}, dtype::i32, buf.dev());
  double best = 0;
  for (const int per_sm : {2, 4, 8}) {
    const double one = read_once_us(buf, sink, bytes, 8, per_sm);
    if (best == 0 || one < best) best = one;
  }
  measured[bytes] = best;
  return best;
}

void run_read_depth(const limits& lim, std::vector<result_row>& rows) {
  for (const double mb : {11.8, 42.0}) {
    const std::size_t bytes = std::size_t(mb * 1e6) / 16 * 16;
    tensor buf = random_device({std::int64_t(read_copies(bytes) * bytes)}, dtype::u8, 11);
    tensor sink = tensor::zeros({1}, dtype::i32, buf.dev());
    for (const int loads : {1, 2, 4, 8})
      for (const int per_sm : {1, 2, 4, 8}) {
        const double us = read_once_us(buf, sink, bytes, loads, per_sm);
        const double gbps = double(bytes) / (us * 1e-6) / 1e9;
        const int in_flight_kb = loads * 16 * 256 * per_sm / 1024;
        rows.push_back({"read depth",
                        fmt::format("{:.1f} MB, {} KB/SM in flight ({} x 16 B, {} blk/SM)", mb,
                                    in_flight_kb, loads, per_sm),
                        gbps, "GB/s", us, fmt::format("copy {:.0f} GB/s", lim.copy_gbps),
                        gbps / lim.copy_gbps});
      }
  }
}

void run_read_pattern(const limits& lim, std::vector<result_row>& rows) {
  struct shape {
    const char* name;
    int n, k, wk;  // wk: stream_gemm's warps along K on this shape at batch 1
  };
  const shape shapes[] = {{"V4.1 wo_b", 5120, 8192, 8}, {"V4.1 shared_w1", 2304, 5120, 8}};
  const std::pair<read_layout, const char*> layouts[] = {{read_layout::rows8, "rows, 8 B loads"},
                                                         {read_layout::rows16, "rows, 16 B loads"},
                                                         {read_layout::tiles, "2 KB tiles"}};
  for (const shape& sh : shapes) {
    const std::size_t bytes = std::size_t(sh.n) * std::size_t(sh.k);
    const std::size_t copies = read_copies(bytes);
    tensor buf = random_device({std::int64_t(copies * bytes)}, dtype::u8, 13);
    tensor sink = tensor::zeros({1}, dtype::i32, buf.dev());
    const double plain = read_stream_us(bytes);
    for (const auto& [layout, what] : layouts)
      for (const int per_sm : {2, 3, 0}) {
        const double us =
            median_graph_us([&] {
              for (std::size_t c = 0; c < copies; ++c)
                launch_read_pattern(static_cast<const std::uint8_t*>(buf.raw()) + c * bytes, sh.n,
                                    sh.k, layout, sh.wk, per_sm, static_cast<unsigned*>(sink.raw()),
                                    cuda::current_stream());
            }) /
            double(copies);
        const double gbps = double(bytes) / (us * 1e-6) / 1e9;
        rows.push_back(
            {"read pattern",
             fmt::format("{} {}x{}: {}, {} blk/SM", sh.name, sh.n, sh.k, what,
                         per_sm > 0 ? std::to_string(per_sm) : std::string("any")),
             gbps, "GB/s", us,
             fmt::format("copy {:.0f} GB/s; plain read {:.2f} of it", lim.copy_gbps, plain / us),
             gbps / lim.copy_gbps});
      }
  }
}

void run_limits(limits& lim, std::vector<result_row>& rows, bool quick) {
  lim.copy_gbps = copy_bandwidth(rows);
  lim.bf16_tflops = cublas_bf16(rows, quick);
  // A plain read at the sizes of the decode weights (V4.1 wkv, wq_a, shared w1, wq_b / wo_b,
  // Engram wkv) and a large one: the per-kernel ceiling of a weight-streaming GEMM.
  for (const double mb : {2.6, 6.6, 11.8, 42.0, 157.4, 1024.0}) {
    const std::size_t bytes = std::size_t(mb * 1e6);
    const double us = read_stream_us(bytes);
    const double gbps = double(bytes) / (us * 1e-6) / 1e9;
    rows.push_back({"read once (one kernel, L2 cold)", fmt::format("{:.1f} MB", mb), gbps, "GB/s",
                    us, fmt::format("copy {:.0f} GB/s", lim.copy_gbps), gbps / lim.copy_gbps});
  }
}

}  // namespace di::bench
