// The compressor's partial-group state machine on the GPU (twin of ops::compress_tokens):
// every output channel is independent (it reads state columns c and, with V4's overlap,
// dim + c), so one thread owns its columns and walks the tokens in order, copying rows into
// the state, pooling each completed group with a softmax over the group's scores, and
// shifting the overlap half, exactly as the CPU loop does.
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/model_common.cuh"

namespace di::cuda {

namespace {

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
    float mx = -INFINITY;
    for (int j = 0; j < rows; ++j) mx = fmaxf(mx, state_score[j * width + col(j)]);
    float sum = 0.0f;
    for (int j = 0; j < rows; ++j) sum += expf(state_score[j * width + col(j)] - mx);
    float acc = 0.0f;
    for (int j = 0; j < rows; ++j)
      acc += state_kv[j * width + col(j)] * (expf(state_score[j * width + col(j)] - mx) / sum);
    out[emitted++ * dim + c] = acc;
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

__global__ void compress_kernel(const compress_params p) {
  detail::grid_dependency_sync();
  const int c = int(blockIdx.x) * int(blockDim.x) + int(threadIdx.x);
  if (c >= p.width / (p.overlap ? 2 : 1)) return;
  compress_channel(p.kv, p.score, p.state_kv, p.state_score, p.out, p.n, p.start, c, p.width,
                   p.ratio, p.overlap);
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
  detail::launch("compress", compress_kernel, detail::grid_for(dim, 128), 128, 0, stream, p);
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
