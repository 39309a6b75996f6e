// `bench_kernels_cuda [--json FILE] [--quick] [--filter TEXT]`: the CUDA backend's kernels against
// the limits measured in the same run -- device copy bandwidth (bytes read + written) and the
// cuBLAS bf16 dense matmul peak -- and against the anchors of issue 5 (DeepGEMM / cuBLASLt figures
// measured on this H200 model). Prints one table, ratios included; run by scripts/gpu-check.sh.
// --filter "read depth" adds the sweep of bytes in flight per SM for a plain read
// (run_read_depth: what a weight-streaming GEMM needs for a share of the copy rate), --filter
// "read pattern" reads in stream_gemm's geometry with row-major or tiled FP8 fragments.
#include "bench/kernels/bench_sections.hpp"
#include "bench/kernels/bench_timer.hpp"
#include "kernels/cuda/device_memory.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>

int main(int argc, char** argv) {
  std::string json;
  bool quick = false;
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc)
      json = argv[++i];
    else if (std::strcmp(argv[i], "--quick") == 0)
      quick = true;
    else if (std::strcmp(argv[i], "--filter") == 0 && i + 1 < argc)
      filter = argv[++i];
    else {
      std::fprintf(stderr, "usage: bench_kernels_cuda [--json FILE] [--quick] [--filter TEXT]\n");
      return 2;
    }
  }
  if (!di::cuda::have_device()) {
    std::printf("skipped: no GPU\n");
    return 0;
  }
  try {
    di::bench::limits lim;
    std::vector<di::bench::result_row> rows;
    di::bench::run_limits(lim, rows, quick);
    // The sweep of bytes in flight only when asked for (--filter "read depth").
    if (!filter.empty() && std::string_view("read depth").find(filter) != std::string_view::npos)
      di::bench::run_read_depth(lim, rows);
    if (!filter.empty() && std::string_view("read pattern").find(filter) != std::string_view::npos)
      di::bench::run_read_pattern(lim, rows);
    di::bench::run_gemms(lim, rows, quick, filter);
    di::bench::report("kernel benchmarks", rows, json);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_kernels_cuda: %s\n", e.what());
    return 1;
  }
  return 0;
}
