// Timing, random device data and the result table of the kernel benchmarks.
#include "bench/kernels/bench_timer.hpp"

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/stream.hpp"
#include "kernels/dtype.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace di::bench {

double median_us(const std::function<void()>& fn, int warmup, int repeats) {
  cudaStream_t s = cuda::current_stream();
  for (int i = 0; i < warmup; ++i) fn();
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    CUDA_CHECK(cudaEventRecord(a, s));
    fn();
    CUDA_CHECK(cudaEventRecord(b, s));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    times.push_back(double(ms) * 1e3);
  }
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

double median_graph_us(const std::function<void()>& fn, int repeats) {
  cudaStream_t s = cuda::current_stream();
  fn();
  CUDA_CHECK(cudaStreamSynchronize(s));
  cudaGraph_t graph;
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  fn();
  CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double us = median_us([&] { CUDA_CHECK(cudaGraphLaunch(exec, s)); }, 3, repeats);
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  return us;
}

tensor random_device(const tensor_shape& shape, dtype type, unsigned seed) {
  tensor host = tensor::empty(shape, type);
  std::uint64_t x = 0x9e3779b97f4a7c15ull ^ seed;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  const std::int64_t n = host.numel();
  if (type == dtype::f32) {
    for (std::int64_t i = 0; i < n; ++i)
      host.data<float>()[i] = float(next() >> 40) / float(1 << 23) - 1.0f;
  } else if (type == dtype::bf16) {
    for (std::int64_t i = 0; i < n; ++i)
      host.data<std::uint16_t>()[i] = f32_to_bf16(float(next() >> 40) / float(1 << 23) - 1.0f);
  } else {
    auto* p = static_cast<std::uint8_t*>(host.raw());
    for (std::size_t i = 0; i < host.nbytes(); i += 8) {
      std::uint64_t v = next();
      std::memcpy(p + i, &v, std::min<std::size_t>(8, host.nbytes() - i));
    }
    if (type == dtype::f8_e4m3)
      for (std::size_t i = 0; i < host.nbytes(); ++i)
        if ((p[i] & 0x7f) == 0x7f) p[i] = 0x3f;
  }
  return host.to({device_kind::cuda, 0});
}

void report(const std::string& title, const std::vector<result_row>& rows,
            const std::string& json_path) {
  fmt::print("== {} ==\n", title);
  fmt::print("{:<34} {:<26} {:>12} {:<8} {:>10}  {:<34} {:>7}\n", "kernel", "shape", "measured",
             "unit", "time_us", "vs", "ratio");
  for (const result_row& r : rows)
    fmt::print("{:<34} {:<26} {:>12.1f} {:<8} {:>10.1f}  {:<34} {:>7}\n", r.kernel, r.shape,
               r.value, r.unit, r.time_us, r.anchor,
               r.ratio > 0 ? fmt::format("{:.2f}", r.ratio) : std::string("-"));
  if (json_path.empty()) return;
  std::FILE* f = std::fopen(json_path.c_str(), "w");
  if (!f) return;
  std::fprintf(f, "[\n");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const result_row& r = rows[i];
    std::fprintf(f,
                 "  {\"kernel\": \"%s\", \"shape\": \"%s\", \"value\": %.3f, \"unit\": \"%s\", "
                 "\"time_us\": %.3f, \"anchor\": \"%s\", \"ratio\": %.4f}%s\n",
                 r.kernel.c_str(), r.shape.c_str(), r.value, r.unit.c_str(), r.time_us,
                 r.anchor.c_str(), r.ratio, i + 1 < rows.size() ? "," : "");
  }
  std::fprintf(f, "]\n");
  std::fclose(f);
}

}  // namespace di::bench
