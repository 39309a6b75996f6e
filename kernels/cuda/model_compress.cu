// The compressor's partial-group state machine on the GPU (twin of ops::compress_tokens):
// every output channel is independent (it reads state columns c and, with V4's overlap,
// dim + c). Decode (one row per sequence): one thread owns a channel's columns and steps the
// state machine as the CPU loop does (compress_channel). A call of many rows (prefill): every
// completed group is pooled by its own thread from the rows it covers -- the call's rows, or
// the carried state for positions before the call -- with the same operations in the same
// order (pool_group), then one pass writes the state the serial walk would leave. (The serial
// walk over a 1024-token chunk took 10 ms with V4's 4-block grid, session 14's prefill profile.)
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/model_common.cuh"

namespace di::cuda {

namespace {

struct value_pair {
  float score, kv;
};

/// The pooled value of one channel of a completed group: a softmax over the scores of its rows
/// j = 0 .. rows - 1 (at(j) gives row j's score and kv) weighting their kv values -- one order of
/// operations for the serial walk and the parallel prefill, so both give the same bits.
template <class At>
__device__ __forceinline__ float pool_group(int rows, At at) {
  float mx = -INFINITY;
  for (int j = 0; j < rows; ++j) mx = fmaxf(mx, at(j).score);
  float sum = 0.0f;
  for (int j = 0; j < rows; ++j) sum += expf(at(j).score - mx);
  float acc = 0.0f;
  for (int j = 0; j < rows; ++j) {
    const value_pair v = at(j);
    acc += v.kv * (expf(v.score - mx) / sum);
  }
  return acc;
}

/// Channel c of one sequence: feeds rows kv/score [n, width] at positions [start, start + n)
/// through the state, writing each completed group's pooled value to out[emitted * dim + c].
__device__ void compress_channel(const float* kv, const float* score, float* state_kv,
                                 float* state_score, float* out, std::int64_t n,
                                 std::int64_t start, int c, int width, int r, bool overlap) {
  const int coff = overlap ? 2 : 1;
  const int dim = width / coff, rows = coff * r;
  std::int64_t emitted = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t pos = start + i;
    const std::int64_t slot = (overlap ? r : 0) + pos % r;
    for (int h = 0; h < coff; ++h) {
      const int col = h * dim + c;
      state_kv[slot * width + col] = kv[i * width + col];
      state_score[slot * width + col] = score[i * width + col];
    }
    if ((pos + 1) % r != 0) continue;
    // column of state row j that this channel pools
    auto col = [&](int j) { return (overlap && j >= r ? dim : 0) + c; };
    out[emitted++ * dim + c] = pool_group(rows, [&](int j) {
      return value_pair{state_score[j * width + col(j)], state_kv[j * width + col(j)]};
    });
    if (overlap) {  // the finished group becomes the next group's overlap half
      for (int j = 0; j < r; ++j)
        for (int h = 0; h < 2; ++h) {
          const int cc = h * dim + c;
          state_kv[j * width + cc] = state_kv[(r + j) * width + cc];
          state_score[j * width + cc] = state_score[(r + j) * width + cc];
        }
    }
  }
}

/// Block (channel tile, group slice): channel c of every completed group G of the call --
/// groups p.start / r .. (p.start + p.n) / r - 1, emitted in that order -- pooled from the rows
/// its positions hold: the call's row q - start for q >= start, else the state as the call
/// found it (the carried partial group in rows r.. with the overlap, rows 0.. without; the
/// overlap's previous group, when completed before the call, in rows 0..).
__global__ void compress_groups_kernel(const compress_params p) {
  detail::grid_dependency_sync();
  const int c = int(blockIdx.x) * int(blockDim.x) + int(threadIdx.x);
  const int r = p.ratio, coff = p.overlap ? 2 : 1, width = p.width, dim = width / coff;
  if (c >= dim) return;
  const std::int64_t first = p.start / r, last = (p.start + p.n) / r;  // groups [first, last)
  for (std::int64_t g = first + blockIdx.y; g < last; g += gridDim.y) {
    // Row j of the pool: with the overlap, j < r is the previous group's position (g-1) r + j
    // at column c and j >= r this group's g r + j - r at column dim + c; without, g r + j.
    p.out[(g - first) * dim + c] = pool_group(coff * r, [&](int j) {
      const bool prev = p.overlap && j < r;
      const std::int64_t q = prev ? (g - 1) * r + j : g * r + (p.overlap ? j - r : j);
      const int col = (p.overlap && !prev ? dim : 0) + c;
      if (q >= p.start)
        return value_pair{p.score[(q - p.start) * width + col], p.kv[(q - p.start) * width + col]};
      // Before the call: the state's row for q (the carried group's, or the previous one's).
      const int row =
          prev && q < first * r ? j : (p.overlap ? r : 0) + int(q - g * r + (prev ? r : 0));
      return value_pair{p.state_score[std::int64_t(row) * width + col],
                        p.state_kv[std::int64_t(row) * width + col]};
    });
  }
}

/// Thread (column, k): the state the serial walk leaves -- row (overlap ? r : 0) + k holds the
/// call's last row at a position of phase k (unchanged if none); with the overlap, row k holds
/// the last completed group's row k if the call completed one (taken before row r + k is
/// overwritten), else it is unchanged.
__global__ void compress_state_kernel(const compress_params p) {
  detail::grid_dependency_sync();
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int r = p.ratio, width = p.width;
  if (i >= std::int64_t(width) * r) return;
  const int col = int(i % width), k = int(i / width);
  const std::int64_t end = p.start + p.n;       // positions [start, end)
  const std::int64_t last_group = end / r - 1;  // completed by the call when >= start / r
  const int cur = (p.overlap ? r : 0) + k;
  float prev_kv = 0.0f, prev_score = 0.0f;
  const bool completed = last_group >= p.start / r;
  if (p.overlap && completed) {
    const std::int64_t q = last_group * r + k;
    prev_kv = q >= p.start ? p.kv[(q - p.start) * width + col]
                           : p.state_kv[std::int64_t(cur) * width + col];
    prev_score = q >= p.start ? p.score[(q - p.start) * width + col]
                              : p.state_score[std::int64_t(cur) * width + col];
  }
  // The last position of phase k in [start, end): end - 1 stepped back to phase k.
  const std::int64_t q = end - 1 - ((end - 1 - k) % r + r) % r;
  if (q >= p.start) {
    p.state_kv[std::int64_t(cur) * width + col] = p.kv[(q - p.start) * width + col];
    p.state_score[std::int64_t(cur) * width + col] = p.score[(q - p.start) * width + col];
  }
  if (p.overlap && completed) {
    p.state_kv[std::int64_t(k) * width + col] = prev_kv;
    p.state_score[std::int64_t(k) * width + col] = prev_score;
  }
}

/// Block (channel tile, sequence b): one new row of sequence b through its state in the slot
/// arena.
__global__ void compress_decode_kernel(const compress_decode_params p) {
  detail::grid_dependency_sync();
  const int c = int(blockIdx.x) * int(blockDim.x) + int(threadIdx.x);
  const int dim = p.width / (p.overlap ? 2 : 1);
  const std::int64_t b = blockIdx.y;
  if (c >= dim) return;
  const std::size_t state_floats =
      std::size_t(p.overlap ? 2 : 1) * std::size_t(p.ratio) * std::size_t(p.width);
  float* state_kv = reinterpret_cast<float*>(p.slots + std::size_t(p.slot_ids[b]) * p.slot_stride +
                                             p.state_offset);
  compress_channel(p.kv + b * p.width, p.score + b * p.width, state_kv, state_kv + state_floats,
                   p.out + b * dim, 1, p.starts[b], c, p.width, p.ratio, p.overlap);
}

}  // namespace

void launch_compress_tokens(const compress_params& p, cudaStream_t stream) {
  const int coff = p.overlap ? 2 : 1;
  DI_CHECK(p.ratio > 0 && p.width > 0 && p.width % coff == 0 && p.start >= 0 && p.n >= 0,
           "compress_tokens: ratio {}, rows of {}, start {}", p.ratio, p.width, p.start);
  if (p.n == 0) return;
  DI_CHECK(p.kv && p.score && p.state_kv && p.state_score, "compress_tokens: missing operand");
  const std::int64_t completed = (p.start + p.n) / p.ratio - p.start / p.ratio;
  DI_CHECK(completed == 0 || p.out, "compress_tokens: output missing");
  const int dim = p.width / coff;
  if (completed > 0) {  // reads the state as the call found it, so before the state pass
    const dim3 grid(detail::grid_for(dim, 128), unsigned(std::min<std::int64_t>(completed, 65535)));
    detail::launch("compress_groups", compress_groups_kernel, grid, 128, 0, stream, p);
  }
  detail::launch("compress_state", compress_state_kernel,
                 detail::grid_for(std::int64_t(p.width) * p.ratio, 256), 256, 0, stream, p);
}

void launch_compress_decode(const compress_decode_params& p, cudaStream_t stream) {
  const int coff = p.overlap ? 2 : 1;
  DI_CHECK(p.ratio > 0 && p.width > 0 && p.width % coff == 0 && p.batch >= 0 &&
               p.state_offset % 4 == 0 && p.slot_stride % 4 == 0,
           "compress_decode: ratio {}, rows of {}, {} sequences, state at {} (stride {})", p.ratio,
           p.width, p.batch, p.state_offset, p.slot_stride);
  if (p.batch == 0) return;
  DI_CHECK(p.kv && p.score && p.slots && p.slot_ids && p.starts && p.out,
           "compress_decode: missing operand");
  const dim3 grid(detail::grid_for(p.width / coff, 128), unsigned(p.batch));
  detail::launch("compress_decode", compress_decode_kernel, grid, 128, 0, stream, p);
}

}  // namespace di::cuda
