// The forward's CUDA attention entry: one launch over two f32 row pools (the window rows and
// the compressed entries) with their own index lists, so the per-token indices never have to
// be merged on the host. A tensor-level wrapper over helper kernels' launch_attention.
#include "model/forward/detail/forward_pass.hpp"

#if defined(DEEPINFER_HAVE_CUDA)
#include "kernels/cuda/cuda_model_ops.hpp"
#include "kernels/cuda/stream.hpp"
#endif

namespace di::detail {

#if defined(DEEPINFER_HAVE_CUDA)

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
  tensor out = tensor::empty({tokens, heads, dim}, dtype::f32, q.dev());  // [tokens, heads, dim]
  p.q = q.data<float>();
  p.out = out.data<float>();
  p.sinks = sinks.data<float>();
  p.tokens = int(tokens);
  p.heads = int(heads);
  p.dim = int(dim);
  p.softmax_scale = scale;
  p.window = {kv1.raw(), kv1.size(0), false, {}};
  p.window_idx = idx1.data<std::int32_t>();
  p.window_k = int(idx1.size(1));
  const std::size_t bytes = cuda::attention_workspace_bytes(p);
  tensor work;
  if (bytes > 0) {
    work = tensor::empty({std::int64_t((bytes + 15) / 16) * 16}, dtype::u8, q.dev());
    p.workspace = work.raw();
    p.workspace_bytes = work.nbytes();
  }
  if (tokens > 0) cuda::launch_attention(p, cuda::current_stream());
  return out;
}

#else

tensor two_pool_attention(const tensor& q, const tensor&, const tensor&, const tensor&,
                          const tensor&, const tensor&, float) {
  DI_FAIL("attention on {} needs a build with the CUDA backend", to_string(q.dev()));
}

#endif

}  // namespace di::detail
