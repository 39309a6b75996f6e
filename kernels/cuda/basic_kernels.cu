// CUDA kernels of the gathers, scatters, elementwise ops and RMSNorm (launchers declared in
// basic_kernels.hpp). Gathers copy bytes, so they equal the CPU twin exactly; the scatter-add
// sums each target row's sources in index order, as the CPU does (bitwise equal too).
#include "kernels/cuda/basic_kernels.hpp"
#include "kernels/cuda/fresh_loads.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/rope_math.cuh"

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/dtype.hpp"
#include "kernels/quant_math.hpp"

#include <algorithm>

namespace di::cuda {

namespace {

constexpr int threads = 256;

unsigned grid_for(std::int64_t work, int per_block = threads) {
  std::int64_t blocks = (work + per_block - 1) / per_block;
  return unsigned(blocks < 1 ? 1 : (blocks > 65535 * 16 ? 65535 * 16 : blocks));
}

__device__ void flag_bad(bad_index_slot* slot, std::int64_t position) {
  atomicCAS(slot, 0ull, bad_index_slot(position) + 1ull);
}

__global__ void embedding_kernel(embedding_params p) {
  detail::grid_dependency_sync();
  const std::int64_t t = blockIdx.x;
  const std::int64_t id = p.ids[t];
  float* out = p.out + t * p.dim;
  if (id < 0 || id >= p.vocab) {
    if (threadIdx.x == 0) flag_bad(p.bad_index, t);
    for (std::int64_t i = threadIdx.x; i < p.dim; i += blockDim.x) out[i] = NAN;
    return;
  }
  if (p.table_bf16) {
    const auto* row = static_cast<const std::uint16_t*>(p.table) + id * p.dim;
    for (std::int64_t i = threadIdx.x; i < p.dim; i += blockDim.x) out[i] = bf16_to_f32(row[i]);
  } else {
    const auto* row = static_cast<const float*>(p.table) + id * p.dim;
    for (std::int64_t i = threadIdx.x; i < p.dim; i += blockDim.x) out[i] = row[i];
  }
}

__global__ void embedding_fp8_kernel(embedding_fp8_params p) {
  detail::grid_dependency_sync();
  const std::int64_t t = blockIdx.x;
  const std::int64_t id = p.ids[t];
  float* out = p.out + t * p.dim;
  if (id < 0 || id >= p.rows) {
    if (threadIdx.x == 0) flag_bad(p.bad_index, t);
    for (std::int64_t i = threadIdx.x; i < p.dim; i += blockDim.x) out[i] = NAN;
    return;
  }
  const std::int64_t block = p.dim / p.scale_cols;
  const std::uint8_t* codes = p.codes + id * p.dim;
  const std::uint8_t* scales = p.scales + id * p.scale_cols;
  for (std::int64_t i = threadIdx.x; i < p.dim; i += blockDim.x)
    out[i] = e4m3_to_f32(codes[i]) * e8m0_to_f32(scales[i / block]);
}

__global__ void gather_rows_kernel(gather_rows_params p) {
  detail::grid_dependency_sync();
  const std::int64_t i = blockIdx.x;
  const std::int64_t r = p.rows[i];
  std::uint8_t* out = p.out + i * p.row_bytes;
  if (r < 0 || r >= p.m) {
    if (threadIdx.x == 0) flag_bad(p.bad_index, i);
    return;
  }
  const std::uint8_t* src = p.src + r * p.row_bytes;
  // 16-byte words when both rows are aligned, bytes otherwise.
  const bool wide = p.row_bytes % 16 == 0 && (reinterpret_cast<std::uintptr_t>(src) % 16) == 0 &&
                    (reinterpret_cast<std::uintptr_t>(out) % 16) == 0;
  if (wide) {
    const auto* s = reinterpret_cast<const uint4*>(src);
    auto* o = reinterpret_cast<uint4*>(out);
    // 4 words loaded before any is stored (the stores may alias the loads for all the compiler
    // knows, so a plain copy loop waited for each load in turn).
    const std::int64_t words = p.row_bytes / 16, step = blockDim.x;
    for (std::int64_t k = threadIdx.x; k < words; k += 4 * step) {
      uint4 w[4];
#pragma unroll
      for (int u = 0; u < 4; ++u)
        if (k + u * step < words) w[u] = di::cuda::detail::load_fresh(s + k + u * step);
#pragma unroll
      for (int u = 0; u < 4; ++u)
        if (k + u * step < words) o[k + u * step] = w[u];
    }
  } else {
    for (std::int64_t k = threadIdx.x; k < p.row_bytes; k += blockDim.x) out[k] = src[k];
  }
}

/// Columns of a destination row that one scatter_add block covers (4 per thread).
constexpr int scatter_cols = threads * 4;

/// One block per destination row r and run of scatter_cols columns (launched with `threads`
/// threads): the sources i with rows[i] == r are added in ascending i -- the CPU twin's order,
/// so the sums are reproducible and equal the CPU's bit for bit (fp32 atomics from one block
/// per source left the order of a row's additions to the scheduler: an MoE token's k expert
/// outputs summed differently run to run). Each chunk of `threads` indices is compacted in
/// order into shared memory, then every thread adds those sources to its columns (the sources'
/// loads independent of each other). Block (0, 0) also flags indices outside [0, m). One block
/// per whole row left a decode step's single row to 256 threads: 36 us per call at 5120 wide.
__global__ void scatter_add_kernel(scatter_add_params p) {
  detail::grid_dependency_sync();
  __shared__ std::int64_t hits[threads];
  __shared__ int warp_hits[threads / 32];
  const std::int64_t r = blockIdx.x;
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  float* dst = p.y + r * p.width;
  const std::int64_t col_begin = std::int64_t(blockIdx.y) * scatter_cols;
  const std::int64_t col_end = min(p.width, col_begin + scatter_cols);
  for (std::int64_t base = 0; base < p.n; base += threads) {  // uniform over the block
    const std::int64_t i = base + tid;
    const std::int64_t target = i < p.n ? p.rows[i] : -1;
    if (r == 0 && blockIdx.y == 0 && i < p.n && (target < 0 || target >= p.m))
      flag_bad(p.bad_index, i);
    const bool hit = target == r && r < p.m;
    const unsigned ballot = __ballot_sync(0xffffffffu, hit);
    if (lane == 0) warp_hits[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < threads / 32; ++w) {
      if (w < warp) before += warp_hits[w];
      total += warp_hits[w];
    }
    if (hit) hits[before + __popc(ballot & ((1u << lane) - 1u))] = i;
    __syncthreads();
    if (total > 0) {
      // The thread's 4 columns; the loads of 8 sources x 4 columns are issued before the
      // first addition (a load-add chain per source took a memory latency each: ~10 us per
      // call at batch 1, ncu session 14). Sources are added in ascending i as before.
      std::int64_t col[4];
      float acc[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        col[c] = col_begin + tid + std::int64_t(c) * threads;
        acc[c] = col[c] < col_end ? dst[col[c]] : 0.0f;
      }
      for (int j0 = 0; j0 < total; j0 += 8) {
        float v[8][4];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
          const bool in = j0 + u < total;
          const std::int64_t h = in ? hits[j0 + u] : 0;
#pragma unroll
          for (int c = 0; c < 4; ++c)
            v[u][c] = in && col[c] < col_end
                          ? di::cuda::detail::load_fresh(p.src + h * p.width + col[c])
                          : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 8; ++u)
          if (j0 + u < total)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[c] += v[u][c];
      }
#pragma unroll
      for (int c = 0; c < 4; ++c)
        if (col[c] < col_end) dst[col[c]] = acc[c];
    }
    __syncthreads();  // the next chunk rewrites hits and warp_hits
  }
}

/// One block per target row r and run of scatter_cols columns: the row's k slots (at most
/// gather_add_max_k) sorted ascending -- the order scatter_add_kernel adds a row's sources in --
/// then every source row's 4 columns per thread loaded before the first addition.
__global__ void gather_add_kernel(gather_add_params p) {
  detail::grid_dependency_sync();
  const std::int64_t r = blockIdx.x;
  std::int32_t order[gather_add_max_k];
  int n = 0;
  for (int j = 0; j < p.k; ++j) {  // insertion sort of the row's valid slots
    const std::int32_t s = p.slots[r * p.k + j];
    if (s < 0) continue;
    if (s >= p.n) {
      if (threadIdx.x == 0 && blockIdx.y == 0) flag_bad(p.bad_index, r * p.k + j);
      continue;
    }
    int at = n++;
    while (at > 0 && order[at - 1] > s) {
      order[at] = order[at - 1];
      --at;
    }
    order[at] = s;
  }
  const std::int64_t col_begin = std::int64_t(blockIdx.y) * scatter_cols;
  const std::int64_t col_end = min(p.width, col_begin + scatter_cols);
  float* dst = p.y + r * p.width;
  std::int64_t col[4];
  float acc[4], v[gather_add_max_k][4];
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    col[c] = col_begin + threadIdx.x + std::int64_t(c) * blockDim.x;
    acc[c] = col[c] < col_end ? dst[col[c]] : 0.0f;
  }
#pragma unroll
  for (int j = 0; j < gather_add_max_k; ++j)
#pragma unroll
    for (int c = 0; c < 4; ++c)
      v[j][c] =
          j < n && col[c] < col_end
              ? di::cuda::detail::load_fresh(p.src + std::int64_t(order[j]) * p.width + col[c])
              : 0.0f;
#pragma unroll
  for (int j = 0; j < gather_add_max_k; ++j)
    if (j < n)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[c] += v[j][c];
#pragma unroll
  for (int c = 0; c < 4; ++c)
    if (col[c] < col_end) dst[col[c]] = acc[c];
}

__global__ void add_kernel(float* y, const float* x, std::int64_t n) {
  detail::grid_dependency_sync();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x)
    y[i] += x[i];
}

__global__ void add_position_rows_kernel(const add_position_rows_params p) {
  detail::grid_dependency_sync();
  const std::int64_t total = p.n * p.width;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t row = i / p.width, col = i % p.width;
    const std::int64_t r = (p.positions[row] % p.period + p.period) % p.period;
    p.y[i] += p.table[r * p.width + col];
  }
}

/// Bytes [0, bytes) of dst from src (VEC: 16-byte units, both aligned), or zeros (src null).
template <bool VEC>
__global__ void copy_bytes_kernel(std::uint8_t* dst, const std::uint8_t* src, std::size_t bytes) {
  detail::grid_dependency_sync();
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if constexpr (VEC) {
    const std::size_t units = bytes / 16;
    for (; i < units; i += stride)
      reinterpret_cast<uint4*>(dst)[i] =
          src ? reinterpret_cast<const uint4*>(src)[i] : make_uint4(0u, 0u, 0u, 0u);
    i = units * 16 + (std::size_t(blockIdx.x) * blockDim.x + threadIdx.x);  // the tail bytes
  }
  for (; i < bytes; i += stride) dst[i] = src ? src[i] : std::uint8_t(0);
}

/// The copy kernel's grid bound (it strides over the rest): 8 blocks of 256 on each of an H200's
/// 132 multiprocessors -- any GPU runs it, a larger one just not fuller.
constexpr std::size_t copy_max_blocks = 132 * 8;

void launch_copy_or_fill(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return;
  const bool vec =
      (reinterpret_cast<std::uintptr_t>(dst) | reinterpret_cast<std::uintptr_t>(src)) % 16 == 0;
  const std::size_t units = vec ? (bytes + 15) / 16 : bytes;
  const unsigned grid =
      unsigned(std::min<std::size_t>((units + threads - 1) / threads, copy_max_blocks));
  auto* d = static_cast<std::uint8_t*>(dst);
  const auto* s = static_cast<const std::uint8_t*>(src);
  if (vec)
    detail::launch("copy_bytes", copy_bytes_kernel<true>, dim3(grid), dim3(threads), 0, stream, d,
                   s, bytes);
  else
    detail::launch("copy_bytes", copy_bytes_kernel<false>, dim3(grid), dim3(threads), 0, stream, d,
                   s, bytes);
}

/// Sum of `v` over the block (every thread gets it); `scratch` holds one float per warp.

/// float4s of a row each thread holds between the sum and the scaling (the 16-byte path: rows
/// of up to 4 * 4 * blockDim.x values).
constexpr int norm_vectors = 4;
constexpr int threads_for_narrow = 256;  // rms_norm's threads per row below 1024 values

__global__ void rms_norm_kernel(rms_norm_params p) {
  detail::grid_dependency_sync();
  __shared__ float scratch[32];
  const std::int64_t r = blockIdx.x;
  const float* x = p.x + r * p.dim;
  float* out = p.out + r * p.dim;
  auto aligned = [](const void* q) { return (reinterpret_cast<std::uintptr_t>(q) & 15u) == 0; };
  const int n4 = int(p.dim / 4);
  if (p.dim % 4 == 0 && n4 <= norm_vectors * int(blockDim.x) && aligned(x) && aligned(out) &&
      (!p.weight || aligned(p.weight))) {  // uniform over the block
    // Every load issued before the first add, the row kept in registers for the scaling.
    float4 v[norm_vectors];
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < norm_vectors; ++j) {
      const int i = int(threadIdx.x) + j * int(blockDim.x);
      v[j] = i < n4 ? reinterpret_cast<const float4*>(x)[i] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int j = 0; j < norm_vectors; ++j)
      sum += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
    sum = detail::block_sum_in_order(sum, scratch);
    const float rs = 1.0f / sqrtf(sum / float(p.dim) + p.eps);
    // With quant_block > 0 (rms_norm_quantizes: 4 * 32 % quant_block == 0, dim % quant_block
    // == 0): the quant_block / 4 consecutive threads holding a block take its amax by a
    // butterfly (every lane takes part: no break before it), then each its 4 codes -- the
    // functions and order of act_quant_kernel, so the same bytes.
    const int group = p.quant_block / 4;
#pragma unroll
    for (int j = 0; j < norm_vectors; ++j) {
      const int i = int(threadIdx.x) + j * int(blockDim.x);
      const bool live = i < n4;
      float4 y = make_float4(v[j].x * rs, v[j].y * rs, v[j].z * rs, v[j].w * rs);
      if (p.weight && live) {
        const float4 w = reinterpret_cast<const float4*>(p.weight)[i];
        y = make_float4(w.x * y.x, w.y * y.y, w.z * y.z, w.w * y.w);
      }
      if (live) reinterpret_cast<float4*>(out)[i] = y;
      if (group > 0) {
        float amax = fmaxf(fmaxf(fabsf(y.x), fabsf(y.y)), fmaxf(fabsf(y.z), fabsf(y.w)));
        for (int o = 1; o < group; o <<= 1)
          amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        if (live) {
          const float scale = fp8_block_scale(amax);
          auto code = [&](float x) { return std::uint32_t(fp8_code(x, scale)); };
          reinterpret_cast<std::uint32_t*>(p.codes + r * p.dim)[i] =
              code(y.x) | (code(y.y) << 8) | (code(y.z) << 16) | (code(y.w) << 24);
          if (int(threadIdx.x) % group == 0) {
            const std::int64_t b = (4 * i) / p.quant_block;
            p.scales[r * (p.dim / p.quant_block) + b] = scale;
            if (p.scales_mn) p.scales_mn[b * p.rows + r] = scale;
          }
        }
      }
    }
    return;
  }
  float sum = 0.0f;
  for (std::int64_t i = threadIdx.x; i < p.dim; i += blockDim.x) sum += x[i] * x[i];
  sum = detail::block_sum_in_order(sum, scratch);
  const float rs = 1.0f / sqrtf(sum / float(p.dim) + p.eps);
  for (std::int64_t i = threadIdx.x; i < p.dim; i += blockDim.x) {
    const float v = x[i] * rs;
    out[i] = p.weight ? p.weight[i] * v : v;
  }
}

}  // namespace

void launch_embedding(const embedding_params& p, cudaStream_t stream) {
  if (p.n == 0) return;
  detail::launch("embedding", embedding_kernel, unsigned(p.n), threads, 0, stream, p);
}

void launch_embedding_fp8(const embedding_fp8_params& p, cudaStream_t stream) {
  if (p.n == 0) return;
  detail::launch("embedding_fp8", embedding_fp8_kernel, unsigned(p.n), threads, 0, stream, p);
}

void launch_gather_rows(const gather_rows_params& p, cudaStream_t stream) {
  if (p.n == 0 || p.row_bytes == 0) return;
  detail::launch("gather_rows", gather_rows_kernel, unsigned(p.n), threads, 0, stream, p);
}

void launch_scatter_add_rows(const scatter_add_params& p, cudaStream_t stream) {
  if (p.n == 0 || p.width == 0) return;
  DI_CHECK(p.m < (std::int64_t(1) << 31), "scatter_add_rows: {} target rows", p.m);
  const std::int64_t col_blocks = (p.width + scatter_cols - 1) / scatter_cols;
  DI_CHECK(col_blocks < 65536, "scatter_add_rows: rows of {} columns", p.width);
  // A block per target row and column run (at least one row: block (0, 0) checks the indices).
  const dim3 grid(unsigned(p.m > 0 ? p.m : 1), unsigned(col_blocks));
  detail::launch("scatter_add", scatter_add_kernel, grid, threads, 0, stream, p);
}

void launch_gather_add_rows(const gather_add_params& p, cudaStream_t stream) {
  DI_CHECK(p.k >= 0 && p.k <= gather_add_max_k, "gather_add_rows: {} slots per row (at most {})",
           p.k, gather_add_max_k);
  if (p.m == 0 || p.width == 0 || p.k == 0) return;
  DI_CHECK(p.m < (std::int64_t(1) << 31), "gather_add_rows: {} target rows", p.m);
  const std::int64_t col_blocks = (p.width + scatter_cols - 1) / scatter_cols;
  DI_CHECK(col_blocks < 65536, "gather_add_rows: rows of {} columns", p.width);
  const dim3 grid(unsigned(p.m), unsigned(col_blocks));
  detail::launch("gather_add", gather_add_kernel, grid, threads, 0, stream, p);
}

void launch_copy_bytes(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  DI_CHECK(src != nullptr || bytes == 0, "copy_bytes: no source");
  launch_copy_or_fill(dst, src, bytes, stream);
}

void launch_fill_zero(void* dst, std::size_t bytes, cudaStream_t stream) {
  launch_copy_or_fill(dst, nullptr, bytes, stream);
}

namespace {

constexpr std::size_t prefetch_chunk = 32 << 10;  // bytes per prefetch request

/// Each thread asks for every (gridDim.x * blockDim.x)-th 32 KB chunk of the ranges (each
/// range widened to whole 16-byte units, as the instruction requires), then waits for the
/// kernel before it like every other kernel, so completion stays transitive down the stream.
__global__ void prefetch_l2_kernel(prefetch_l2_params p) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  std::size_t chunk = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int r = 0; r < p.ranges; ++r) {
    const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(p.base[r]);
    const std::uintptr_t begin = a & ~std::uintptr_t(15);
    const std::uintptr_t end = (a + p.bytes[r] + 15) & ~std::uintptr_t(15);
    const std::size_t chunks = (end - begin + prefetch_chunk - 1) / prefetch_chunk;
    for (; chunk < chunks; chunk += stride) {
      const std::uintptr_t at = begin + chunk * prefetch_chunk;
      const unsigned n = unsigned(min(std::uintptr_t(prefetch_chunk), end - at));
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(at), "r"(n) : "memory");
    }
    chunk -= chunks;  // this thread's position in the next range's chunks
  }
  detail::grid_dependency_sync();
}

}  // namespace

void launch_prefetch_l2(const prefetch_l2_params& p, cudaStream_t stream) {
  DI_CHECK(p.ranges >= 0 && p.ranges <= prefetch_l2_max_ranges, "prefetch_l2: {} ranges", p.ranges);
  std::size_t total = 0;
  for (int r = 0; r < p.ranges; ++r) {
    DI_CHECK(p.base[r] != nullptr || p.bytes[r] == 0, "prefetch_l2: range {} has no address", r);
    total += p.bytes[r];
  }
  if (total == 0) return;
  const std::size_t requests = (total + prefetch_chunk - 1) / prefetch_chunk;
  const unsigned blocks = unsigned(std::min<std::size_t>((requests + 31) / 32, 264));
  detail::launch("prefetch_l2", prefetch_l2_kernel, blocks, 32, 0, stream, p);
}

void launch_add_inplace(float* y, const float* x, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  detail::launch("add", add_kernel, grid_for(n), threads, 0, stream, y, x, n);
}

void launch_add_position_rows(const add_position_rows_params& p, cudaStream_t stream) {
  DI_CHECK(p.n >= 0 && p.width >= 0 && p.period > 0, "add_position_rows: {} rows of {}, period {}",
           p.n, p.width, p.period);
  if (p.n == 0 || p.width == 0) return;
  detail::launch("add_position_rows", add_position_rows_kernel, grid_for(p.n * p.width), threads, 0,
                 stream, p);
}

bool rms_norm_quantizes(std::int64_t dim, int block) {
  const int threads = dim >= 4096 ? 1024 : dim >= 1024 ? 512 : threads_for_narrow;
  return (block == 32 || block == 64 || block == 128) && dim % block == 0 &&
         dim / 4 <= norm_vectors * threads;
}

void launch_rms_norm(const rms_norm_params& p, cudaStream_t stream) {
  if (p.rows == 0) return;
  DI_CHECK(
      p.quant_block == 0 || (rms_norm_quantizes(p.dim, p.quant_block) && p.codes && p.scales &&
                             reinterpret_cast<std::uintptr_t>(p.x) % 16 == 0 &&
                             reinterpret_cast<std::uintptr_t>(p.out) % 16 == 0 &&
                             (!p.weight || reinterpret_cast<std::uintptr_t>(p.weight) % 16 == 0)),
      "rms_norm: cannot quantize rows of {} in blocks of {} in its kernel", p.dim, p.quant_block);
  // One block per row. Decode normalises a handful of wide rows: 256 threads left each one
  // 20 dependent loads per pass over a 5120-wide row (17 us per call on the H200); wide rows
  // get up to 1024 threads. The thread count depends on the width alone (batch-invariant).
  const int row_threads = p.dim >= 4096 ? 1024 : p.dim >= 1024 ? 512 : threads_for_narrow;
  detail::launch("rms_norm", rms_norm_kernel, unsigned(p.rows), row_threads, 0, stream, p);
}

}  // namespace di::cuda
