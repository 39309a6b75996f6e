// The compressor's partial-group state machine on the GPU (twin of ops::compress_tokens):
// every output channel is independent (it reads state columns c and, with V4's overlap,
// dim + c), so one thread owns its columns and walks the tokens in order, copying rows into
// the state, pooling each completed group with a softmax over the group's scores, and
// shifting the overlap half, exactly as the CPU loop does.
#include "kernels/cuda/model_common.cuh"

namespace di::cuda {

namespace {

__global__ void compress_kernel(const compress_params p) {
  const int coff = p.overlap ? 2 : 1;
  const int dim = p.width / coff;
  const int c = int(blockIdx.x) * int(blockDim.x) + int(threadIdx.x);
  if (c >= dim) return;
  const int r = p.ratio, rows = coff * r, width = p.width;
  std::int64_t emitted = 0;
  for (std::int64_t i = 0; i < p.n; ++i) {
    const std::int64_t pos = p.start + i;
    const std::int64_t slot = (p.overlap ? r : 0) + pos % r;
    for (int h = 0; h < coff; ++h) {
      const int col = h * dim + c;
      p.state_kv[slot * width + col] = p.kv[i * width + col];
      p.state_score[slot * width + col] = p.score[i * width + col];
    }
    if ((pos + 1) % r != 0) continue;
    // column of state row j that this channel pools
    auto col = [&](int j) { return (p.overlap && j >= r ? dim : 0) + c; };
    float mx = -INFINITY;
    for (int j = 0; j < rows; ++j) mx = fmaxf(mx, p.state_score[j * width + col(j)]);
    float sum = 0.0f;
    for (int j = 0; j < rows; ++j) sum += expf(p.state_score[j * width + col(j)] - mx);
    float acc = 0.0f;
    for (int j = 0; j < rows; ++j)
      acc += p.state_kv[j * width + col(j)] * (expf(p.state_score[j * width + col(j)] - mx) / sum);
    p.out[emitted++ * dim + c] = acc;
    if (p.overlap) {  // the finished group becomes the next group's overlap half
      for (int j = 0; j < r; ++j)
        for (int h = 0; h < 2; ++h) {
          const int cc = h * dim + c;
          p.state_kv[j * width + cc] = p.state_kv[(r + j) * width + cc];
          p.state_score[j * width + cc] = p.state_score[(r + j) * width + cc];
        }
    }
  }
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
  compress_kernel<<<detail::grid_for(dim, 128), 128, 0, stream>>>(p);
  detail::check_launch("compress_tokens");
}

}  // namespace di::cuda
