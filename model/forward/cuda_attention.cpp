// The forward's CUDA glue: attention as one launch over two f32 row pools (the window rows and
// the compressed entries) with their own index lists, so the per-token indices never have to
// be merged on the host (a tensor-level wrapper over launch_attention); and asynchronous
// uploads of the small host-built index tensors through a pinned staging arena, so they do not
// drain the stream (every forward call starts with a sync, after which the arena is reused);
// side branches on a forked stream.
#include "model/forward/detail/forward_pass.hpp"

#if defined(DEEPINFER_HAVE_CUDA)
#include "kernels/cuda/basic_kernels.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_model_ops.hpp"
#include "kernels/cuda/device_memory.hpp"
#include "kernels/cuda/kernel_attributes.hpp"
#include "kernels/cuda/stream.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#endif

namespace di::detail {

#if defined(DEEPINFER_HAVE_CUDA)

namespace {

/// Pinned host memory the uploads of one forward call are staged in.
struct staging_arena {
  std::uint8_t* base = nullptr;
  std::size_t size = 0;
  std::size_t used = 0;
  bool mapped = false;  ///< kernels may read it at the host address
  ~staging_arena() {
    if (base != nullptr) cudaFreeHost(base);
  }
};

staging_arena& arena() {
  thread_local staging_arena a;
  if (a.base == nullptr) {
    a.size = std::size_t(64) << 20;
    void* p = nullptr;
    CUDA_CHECK(cudaMallocHost(&p, a.size));
    a.base = static_cast<std::uint8_t*>(p);
    a.mapped = cuda::mapped_at_host_address(p);
  }
  return a;
}

/// Uploads up to this size are read in place by the kernels (upload_async);
/// DEEPINFER_ZERO_COPY_UPLOADS=0 copies every one to device memory (for comparisons).
constexpr std::size_t zero_copy_max_bytes = std::size_t(64) << 10;
const bool g_zero_copy = cuda::detail::env_switch("DEEPINFER_ZERO_COPY_UPLOADS", true);

}  // namespace

struct side_branch::impl {
  cuda::stream_fork fork;
  std::optional<cuda::stream_scope> scope;  // destroyed first: the fork's join comes last
};

side_branch::side_branch(const forward_pass& pass) {
  if (!pass.on_cuda()) return;
  impl_ = std::make_unique<impl>();
  if (impl_->fork.active()) impl_->scope.emplace(impl_->fork.side());
}

side_branch::~side_branch() = default;

void side_branch::end() {
  if (impl_) impl_->scope.reset();
}

void side_branch::join() {
  if (!impl_) return;
  impl_->scope.reset();
  impl_->fork.join();
}

namespace {
std::atomic<bool> g_site_branches{cuda::detail::env_switch("DEEPINFER_SITE_BRANCHES", true)};
}

bool site_branches() {
  return g_site_branches;
}

void set_site_branches(bool on) {
  g_site_branches = on;
}

void reset_uploads() {
  cuda::synchronize();  // every staged copy of the last call has run
  arena().used = 0;
}

void device_sync(const forward_pass& pass) {
  if (pass.on_cuda()) cuda::synchronize();
}

tensor upload_async(const tensor& host, device dev) {
  DI_CHECK(host.dev().kind == device_kind::cpu && host.is_contiguous(),
           "upload_async: a contiguous host tensor");
  // A graph would keep the staging address, which later calls fill with other data.
  DI_CHECK(!cuda::is_capturing(), "upload_async inside a CUDA graph capture");
  staging_arena& a = arena();
  const std::size_t bytes = host.nbytes(), at = (a.used + 255) / 256 * 256;
  if (bytes == 0 || at + bytes > a.size) return host.to(dev);  // empty, or the arena is full
  std::memcpy(a.base + at, host.raw(), bytes);
  a.used = at + bytes;
  // Small uploads are read by the kernels where they are staged (the arena is mapped pinned
  // memory at the same address on the device, unchanged until the next call's reset_uploads):
  // no copy-engine node between the kernels of a decode step, whose ~35 per step each stopped
  // the programmatic launch of the kernel after it.
  if (a.mapped && bytes <= zero_copy_max_bytes && g_zero_copy)
    return tensor::view_of(a.base + at, host.shape(), host.type(), dev);
  tensor out = tensor::empty(host.shape(), host.type(), dev);
  CUDA_CHECK(cudaMemcpyAsync(out.raw(), a.base + at, bytes, cudaMemcpyHostToDevice,
                             cuda::current_stream()));
  return out;
}

namespace {
/// DEEPINFER_L2_PREFETCH_MB (0 off), read once.
const std::size_t g_l2_prefetch_bytes =
    std::size_t(cuda::detail::env_count("DEEPINFER_L2_PREFETCH_MB", 0, 1024, 0)) << 20;
}  // namespace

std::size_t l2_prefetch_bytes() {
  return g_l2_prefetch_bytes;
}

void prefetch_output_weights(const forward_pass& pass, int layer) {
  if (!pass.on_cuda() || g_l2_prefetch_bytes == 0) return;
  const layer_weights& w = pass.weights.layers[std::size_t(layer)];
  cuda::prefetch_l2_params p;
  std::size_t left = g_l2_prefetch_bytes;
  auto add = [&](const tensor& t) {
    if (!t.defined() || left == 0 || p.ranges == cuda::prefetch_l2_max_ranges) return;
    const std::size_t n = std::min(left, t.nbytes());
    p.base[p.ranges] = t.raw();
    p.bytes[p.ranges++] = n;
    left -= n;
  };
  // The bytes a decode step's GEMM reads: the decode tiles up to 8 rows (tile_gemv), else
  // the codes.
  const bool tiles = pass.tokens.defined() && pass.tokens.size(0) <= 8;
  auto add_matrix = [&](const weight_matrix& m) {
    add(m.scales);
    add(tiles && m.decode_tiles.defined() ? m.decode_tiles : m.values);
  };
  add_matrix(w.attn.wo_a);
  add_matrix(w.attn.wo_b.w);
  add_matrix(w.moe.shared.w1.w);
  add_matrix(w.moe.shared.w3.w);
  add_matrix(w.moe.shared.w2.w);
  cuda::launch_prefetch_l2(p, cuda::current_stream());
}

tensor two_pool_attention(const tensor& q, const tensor& sinks, const tensor& kv1,
                          const tensor& idx1, const tensor& kv2, const tensor& idx2, float scale) {
  check_cuda_tensor(q, dtype::f32, 3, "attention q");
  check_cuda_tensor(kv1, dtype::f32, 2, "attention window rows");
  check_cuda_tensor(idx1, dtype::i32, 2, "attention window indices");
  const std::int64_t tokens = q.size(0), heads = q.size(1), dim = q.size(2);
  check_tensor(sinks, dtype::f32, {heads}, "attention sinks");
  DI_CHECK(kv1.size(1) == dim && idx1.size(0) == tokens, "attention: window rows {} / indices {}",
           kv1.shape().str(), idx1.shape().str());
  cuda::attention_params p;
  if (kv2.defined() && kv2.size(0) > 0 && idx2.size(1) > 0) {
    check_cuda_tensor(kv2, dtype::f32, 2, "attention compressed rows");
    check_cuda_tensor(idx2, dtype::i32, 2, "attention compressed indices");
    DI_CHECK(kv2.size(1) == dim && idx2.size(0) == tokens,
             "attention: compressed rows {} / indices {}", kv2.shape().str(), idx2.shape().str());
    p.extra = {kv2.raw(), kv2.size(0), false, {}};
    p.extra_idx = idx2.data<std::int32_t>();
    p.extra_k = int(idx2.size(1));
  }
  p.q = q.data<float>();
  p.sinks = sinks.data<float>();
  p.tokens = int(tokens);
  p.heads = int(heads);
  p.dim = int(dim);
  p.softmax_scale = scale;
  p.window = {kv1.raw(), kv1.size(0), false, {}};
  p.window_idx = idx1.data<std::int32_t>();
  p.window_k = int(idx1.size(1));
  return run_attention(p, q.dev());
}

tensor run_attention(cuda::attention_params& p, device dev, const tensor& into) {
  tensor out = into;
  if (out.defined())
    check_tensor(out, dtype::f32, {p.tokens, p.heads, p.dim}, "attention output");
  else
    out = tensor::empty({p.tokens, p.heads, p.dim}, dtype::f32, dev);  // [tokens, H, hd]
  p.out = out.data<float>();
  const std::size_t bytes = cuda::attention_workspace_bytes(p);
  tensor work;  // freed in stream order after the launch
  if (bytes > 0) {
    work = tensor::empty({std::int64_t((bytes + 15) / 16) * 16}, dtype::u8, dev);
    p.workspace = work.raw();
    p.workspace_bytes = work.nbytes();
  }
  if (p.tokens > 0) cuda::launch_attention(p, cuda::current_stream());
  return out;
}

#else

struct side_branch::impl {};
side_branch::side_branch(const forward_pass&) {}
side_branch::~side_branch() = default;
void side_branch::end() {}
void side_branch::join() {}
bool site_branches() {
  return true;
}
void set_site_branches(bool) {}

void reset_uploads() {}

std::size_t l2_prefetch_bytes() {
  return 0;
}
void prefetch_output_weights(const forward_pass&, int) {}

void device_sync(const forward_pass&) {}

tensor upload_async(const tensor& host, device dev) {
  return host.to(dev);
}

tensor two_pool_attention(const tensor& q, const tensor&, const tensor&, const tensor&,
                          const tensor&, const tensor&, float) {
  DI_FAIL("attention on {} needs a build with the CUDA backend", to_string(q.dev()));
}

#endif

}  // namespace di::detail
