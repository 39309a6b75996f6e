// Parallel memcpy bandwidth probe (first touch in parallel so pages spread over threads).
#include "cli/detail/memory_bandwidth.hpp"

#include <chrono>
#include <cstddef>
#include <cstring>
#include <memory>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace di::cli {

double measure_copy_bandwidth(std::size_t bytes, int repeats) {
  const std::size_t n = bytes / sizeof(double);
  std::unique_ptr<double[]> src(new double[n]);
  std::unique_ptr<double[]> dst(new double[n]);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t i = 0; i < std::ptrdiff_t(n); ++i) {
    src[std::size_t(i)] = double(i);
    dst[std::size_t(i)] = 0.0;
  }
  double best = 0.0;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel
    {
      int threads = 1, id = 0;
#ifdef _OPENMP
      threads = omp_get_num_threads();
      id = omp_get_thread_num();
#endif
      std::size_t chunk = (n + std::size_t(threads) - 1) / std::size_t(threads);
      std::size_t begin = std::min(n, chunk * std::size_t(id));
      std::size_t end = std::min(n, begin + chunk);
      std::memcpy(dst.get() + begin, src.get() + begin, (end - begin) * sizeof(double));
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * double(n * sizeof(double)) / s / 1e9);
  }
  return best;
}

}  // namespace di::cli
