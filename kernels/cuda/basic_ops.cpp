// Tensor-level entry points of the CUDA backend's simple ops: host-side shape/dtype checks,
// output allocation on the operands' device, one launch each (kernels in basic_kernels.cu and
// quant_kernels.cu), and the bad-index check of the gathers.
#include "kernels/cuda/basic_kernels.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/kernel_attributes.hpp"
#include "kernels/cuda/quant_kernels.hpp"
#include "kernels/cuda/stream.hpp"

namespace di::cuda {

namespace {

/// A device slot the gather kernels set to 1 + the position of an out-of-range index; read
/// back (one short sync) unless the stream is capturing a graph or this thread turned index
/// checks off (index_check_scope), in which case the slot is not even cleared.
class bad_index_check {
 public:
  explicit bad_index_check(device dev)
      : enabled_(index_checks_enabled() && !is_capturing()),
        slot_(enabled_ ? tensor::zeros({1}, dtype::i64, dev)
                       : tensor::empty({1}, dtype::i64, dev)) {}
  bad_index_slot* get() const { return static_cast<bad_index_slot*>(slot_.raw()); }
  void check(const char* what, std::int64_t bound) const {
    if (!enabled_) return;
    std::int64_t value = 0;
    tensor host = tensor::view_of(&value, {1}, dtype::i64);
    host.copy_from(slot_);
    DI_CHECK(value == 0, "{}: the index at position {} is outside [0, {})", what, value - 1, bound);
  }

 private:
  bool enabled_;
  tensor slot_;
};

void check_same_device(const tensor& a, const tensor& b, const char* what) {
  DI_CHECK(a.dev() == b.dev(), "{}: operands on {} and {}", what, to_string(a.dev()),
           to_string(b.dev()));
}

}  // namespace

tensor embedding(const tensor& table, const tensor& ids) {
  const bool bf16 = table.type() == dtype::bf16;
  check_cuda_tensor(table, bf16 ? dtype::bf16 : dtype::f32, 2, "embedding table");
  check_cuda_tensor(ids, dtype::i64, 1, "embedding ids");
  check_same_device(table, ids, "embedding");
  const std::int64_t n = ids.size(0), dim = table.size(1);
  tensor out = tensor::empty({n, dim}, dtype::f32, table.dev());  // [tokens, dim]
  bad_index_check bad(table.dev());
  launch_embedding({table.raw(), bf16, ids.data<std::int64_t>(), n, dim, table.size(0),
                    out.data<float>(), bad.get()},
                   current_stream());
  bad.check("embedding: token id", table.size(0));
  return out;
}

tensor embedding_fp8(const tensor& codes, const tensor& scales, const tensor& ids) {
  check_cuda_tensor(codes, dtype::u8, 2, "fp8 table codes");
  check_cuda_tensor(scales, dtype::u8, 2, "fp8 table scales");
  check_cuda_tensor(ids, dtype::i64, 1, "fp8 table ids");
  check_same_device(codes, ids, "embedding_fp8");
  const std::int64_t rows = codes.size(0), dim = codes.size(1), n = ids.size(0);
  DI_CHECK(scales.size(0) == rows && scales.size(1) > 0 && dim % scales.size(1) == 0,
           "fp8 table: scales {} do not fit codes {}", scales.shape().str(), codes.shape().str());
  tensor out = tensor::empty({n, dim}, dtype::f32, codes.dev());  // [n, dim]
  bad_index_check bad(codes.dev());
  launch_embedding_fp8(
      {codes.data<std::uint8_t>(), scales.data<std::uint8_t>(), ids.data<std::int64_t>(), n, dim,
       rows, scales.size(1), out.data<float>(), bad.get()},
      current_stream());
  bad.check("fp8 table: row", rows);
  return out;
}

tensor gather_rows(const tensor& x, const tensor& rows) {
  DI_CHECK(x.rank() >= 1 && x.is_contiguous(), "gather_rows: source must be contiguous");
  check_cuda_tensor(rows, dtype::i64, 1, "gather_rows indices");
  check_same_device(x, rows, "gather_rows");
  const std::int64_t m = x.size(0), n = rows.size(0);
  const std::int64_t row_bytes = m > 0 ? std::int64_t(x.nbytes()) / m : 0;
  tensor_shape shape = x.shape();
  shape[0] = n;
  tensor out = tensor::empty(shape, x.type(), x.dev());  // [n, ...]
  bad_index_check bad(x.dev());
  launch_gather_rows({static_cast<const std::uint8_t*>(x.raw()), rows.data<std::int64_t>(), n, m,
                      row_bytes, static_cast<std::uint8_t*>(out.raw()), bad.get()},
                     current_stream());
  bad.check("gather_rows: row", m);
  return out;
}

void scatter_add_rows(tensor& y, const tensor& rows, const tensor& src) {
  DI_CHECK(y.type() == dtype::f32 && y.rank() >= 1 && y.is_contiguous(),
           "scatter_add_rows: target must be a contiguous f32 tensor");
  check_cuda_tensor(rows, dtype::i64, 1, "scatter_add_rows indices");
  tensor_shape shape = y.shape();
  shape[0] = rows.size(0);
  check_tensor(src, dtype::f32, shape, "scatter_add_rows source");
  check_same_device(y, rows, "scatter_add_rows");
  check_same_device(y, src, "scatter_add_rows");
  const std::int64_t m = y.size(0), width = m > 0 ? y.numel() / m : 0;
  bad_index_check bad(y.dev());
  launch_scatter_add_rows({y.data<float>(), rows.data<std::int64_t>(), src.data<float>(),
                           rows.size(0), m, width, bad.get()},
                          current_stream());
  bad.check("scatter_add_rows: row", m);
}

void gather_add_rows(tensor& y, const tensor& slots, const tensor& src) {
  DI_CHECK(y.type() == dtype::f32 && y.rank() >= 1 && y.is_contiguous(),
           "gather_add_rows: target must be a contiguous f32 tensor");
  check_cuda_tensor(slots, dtype::i32, 2, "gather_add_rows slots");
  const std::int64_t m = y.size(0), width = m > 0 ? y.numel() / m : 0;
  DI_CHECK(slots.size(0) == m, "gather_add_rows: {} rows of slots for {} target rows",
           slots.size(0), m);
  DI_CHECK(src.type() == dtype::f32 && src.rank() == y.rank() && src.is_contiguous() &&
               (m == 0 || src.numel() == src.size(0) * width),
           "gather_add_rows: source must be contiguous f32 rows of the target's width");
  check_same_device(y, slots, "gather_add_rows");
  check_same_device(y, src, "gather_add_rows");
  bad_index_check bad(y.dev());
  launch_gather_add_rows({y.data<float>(), slots.data<std::int32_t>(), src.data<float>(), m,
                          src.size(0), width, int(slots.size(1)), bad.get()},
                         current_stream());
  bad.check("gather_add_rows: slot", src.size(0));
}

void add_inplace(tensor& y, const tensor& x) {
  check_tensor(x, dtype::f32, y.shape(), "add_inplace operand");
  DI_CHECK(y.type() == dtype::f32 && y.is_contiguous(), "add_inplace: target must be f32");
  check_same_device(y, x, "add_inplace");
  launch_add_inplace(y.data<float>(), x.data<float>(), y.numel(), current_stream());
}

void add_position_rows(tensor& y, const tensor& table, const tensor& positions) {
  ops::detail::check_position_rows(y, table, positions);
  check_cuda_tensor(positions, dtype::i64, 1, "add_position_rows positions");
  check_same_device(y, table, "add_position_rows");
  check_same_device(y, positions, "add_position_rows");
  launch_add_position_rows({y.data<float>(), table.data<float>(), positions.data<std::int64_t>(),
                            y.size(0), y.size(1), table.size(0)},
                           current_stream());
}

tensor concat_rows(std::span<const tensor> parts) {
  DI_CHECK(!parts.empty(), "concat_rows: nothing to concatenate");
  std::int64_t rows = 0;
  for (const tensor& p : parts) {
    DI_CHECK(p.type() == dtype::f32 && p.is_contiguous() && p.rank() == parts[0].rank(),
             "concat_rows: parts must be contiguous f32 tensors of one rank");
    for (int d = 1; d < p.rank(); ++d)
      DI_CHECK(p.size(d) == parts[0].size(d), "concat_rows: {} vs {}", p.shape().str(),
               parts[0].shape().str());
    check_same_device(p, parts[0], "concat_rows");
    rows += p.size(0);
  }
  tensor_shape shape = parts[0].shape();
  shape[0] = rows;
  tensor out = tensor::empty(shape, dtype::f32, parts[0].dev());  // [sum rows, ...]
  std::int64_t at = 0;
  for (const tensor& p : parts) {
    if (p.numel() > 0) out.slice(0, at, at + p.size(0)).copy_from(p);
    at += p.size(0);
  }
  return out;
}

tensor rms_norm(const tensor& x, const tensor& weight, float eps) {
  check_cuda_tensor(x, dtype::f32, 2, "rms_norm input");
  const std::int64_t rows = x.size(0), dim = x.size(1);
  const float* w = nullptr;
  if (weight.defined()) {
    check_tensor(weight, dtype::f32, {dim}, "rms_norm weight");
    check_same_device(x, weight, "rms_norm");
    w = weight.data<float>();
  }
  tensor out = tensor::empty({rows, dim}, dtype::f32, x.dev());  // [rows, dim]
  launch_rms_norm({x.data<float>(), w, out.data<float>(), rows, dim, eps}, current_stream());
  return out;
}

bool fuses_act_quant(int block, std::int64_t dim) {
  static const bool on = detail::env_switch("DEEPINFER_FUSED_ACT_QUANT", true);
  return on && (block == 32 || block == 64 || block == 128) && dim % block == 0;
}

quantized_rows quantized_rows_for(std::int64_t rows, std::int64_t dim, int block, device dev) {
  // The rows-contiguous copy of the scales only where cuBLASLt's block-scaled GEMM could read
  // them (cublaslt_fp8_fits: 128-input blocks, rows a multiple of 16); elsewhere no consumer
  // takes it (V4.1's 32-input blocks, decode batches of 1..15 rows).
  const bool lt = block == 128 && rows > 0 && rows % 16 == 0;
  return {tensor::empty({rows, dim}, dtype::f32, dev), tensor::empty({rows, dim}, dtype::u8, dev),
          tensor::empty({rows, dim / block}, dtype::f32, dev), block,
          lt ? tensor::empty({dim / block, rows}, dtype::f32, dev) : tensor()};
}

quantized_rows rms_norm_quantized(const tensor& x, const tensor& weight, float eps, int block) {
  check_cuda_tensor(x, dtype::f32, 2, "rms_norm input");
  const std::int64_t rows = x.size(0), dim = x.size(1);
  auto aligned = [](const tensor& t) {
    return !t.defined() || reinterpret_cast<std::uintptr_t>(t.raw()) % 16 == 0;
  };
  if (!fuses_act_quant(block, dim) || !rms_norm_quantizes(dim, block) || !aligned(x) ||
      !aligned(weight) || rows == 0)
    return {rms_norm(x, weight, eps), {}, {}, block};  // the consumer quantizes
  const float* w = nullptr;
  if (weight.defined()) {
    check_tensor(weight, dtype::f32, {dim}, "rms_norm weight");
    check_same_device(x, weight, "rms_norm");
    w = weight.data<float>();
  }
  quantized_rows q = quantized_rows_for(rows, dim, block, x.dev());
  launch_rms_norm(
      {x.data<float>(), w, q.x.data<float>(), rows, dim, eps, q.codes.data<std::uint8_t>(),
       q.scales.data<float>(), block,
       q.scales_mn.defined() ? q.scales_mn.data<float>() : nullptr},
      current_stream());
  return q;
}

void fp8_fake_quant(tensor& x, int block, std::int64_t num_dims) {
  check_cuda_tensor(x, dtype::f32, 2, "fp8_fake_quant input");
  DI_CHECK(block > 0 && num_dims >= 0 && num_dims <= x.size(1),
           "fp8_fake_quant: block {} / {} dims of rows of {}", block, num_dims, x.size(1));
  launch_fake_quant({x.data<float>(), x.size(0), x.size(1), num_dims, block, 0}, current_stream());
}

tensor fp8_fake_quantized(const tensor& x, int block) {
  if (block <= 0) return x;
  tensor out = x.clone();
  fp8_fake_quant(out, block, out.size(1));
  return out;
}

void fp4_fake_quant(tensor& x, int block, fp4_scale scale) {
  check_cuda_tensor(x, dtype::f32, 2, "fp4_fake_quant input");
  DI_CHECK(block > 0 && x.size(1) % block == 0, "fp4_fake_quant: rows of {} in blocks of {}",
           x.size(1), block);
  launch_fake_quant(
      {x.data<float>(), x.size(0), x.size(1), x.size(1), block, scale == fp4_scale::ue8m0 ? 1 : 2},
      current_stream());
}

void hadamard(tensor& x) {
  check_cuda_tensor(x, dtype::f32, 2, "hadamard input");
  const std::int64_t dim = x.size(1);
  DI_CHECK(dim > 0 && (dim & (dim - 1)) == 0, "hadamard: dim {} is not a power of two", dim);
  DI_CHECK(dim <= 32768, "hadamard: rows of {} exceed the kernel's 32768 (shared memory)", dim);
  launch_hadamard(x.data<float>(), x.size(0), dim, current_stream());
}

void rotary(tensor& x, const tensor& positions, const tensor& inv_freq, bool inverse) {
  DI_CHECK(x.rank() == 2 || x.rank() == 3,
           "rotary: input {} must be [tokens, dim] or [tokens, heads, dim]", x.shape().str());
  check_cuda_tensor(x, dtype::f32, x.rank(), "rotary input");
  check_cuda_tensor(positions, dtype::i64, 1, "rotary positions");
  check_cuda_tensor(inv_freq, dtype::f32, 1, "rotary inv_freq");
  const std::int64_t tokens = x.size(0), dim = x.size(-1);
  const std::int64_t heads = x.rank() == 3 ? x.size(1) : 1, pairs = inv_freq.size(0);
  DI_CHECK(positions.size(0) == tokens, "rotary: {} positions for {} tokens", positions.size(0),
           tokens);
  DI_CHECK(2 * pairs <= dim, "rotary: {} rope dims exceed the row of {}", 2 * pairs, dim);
  launch_rotary({x.data<float>(), positions.data<std::int64_t>(), inv_freq.data<float>(), tokens,
                 heads, dim, pairs, inverse},
                current_stream());
}

tensor norm_rope_quant(const tensor& x, const tensor& weight, float eps, const tensor& positions,
                       const tensor& inv_freq, int quant_block, std::int64_t quant_dims) {
  check_cuda_tensor(x, dtype::f32, 2, "norm_rope_quant input");
  const std::int64_t tokens = x.size(0), dim = x.size(1);
  static const bool fused = detail::env_switch("DEEPINFER_NORM_ROPE_QUANT", true);  // EXPERIMENT
  if (!fused || dim > norm_rope_quant_max_dim || inv_freq.size(0) > 256) {  // the three kernels
    tensor y = rms_norm(x, weight, eps);
    rotary(y, positions, inv_freq, false);
    fp8_fake_quant(y, quant_block, quant_dims);
    return y;
  }
  const float* w = nullptr;
  if (weight.defined()) {
    check_tensor(weight, dtype::f32, {dim}, "norm_rope_quant weight");
    check_same_device(x, weight, "norm_rope_quant");
    w = weight.data<float>();
  }
  check_cuda_tensor(positions, dtype::i64, 1, "norm_rope_quant positions");
  check_cuda_tensor(inv_freq, dtype::f32, 1, "norm_rope_quant inv_freq");
  const std::int64_t pairs = inv_freq.size(0);
  DI_CHECK(positions.size(0) == tokens, "norm_rope_quant: {} positions for {} tokens",
           positions.size(0), tokens);
  DI_CHECK(2 * pairs <= dim, "norm_rope_quant: {} rope dims exceed the row of {}", 2 * pairs, dim);
  DI_CHECK(quant_block > 0 && quant_dims >= 0 && quant_dims <= dim,
           "norm_rope_quant: block {} / {} dims of rows of {}", quant_block, quant_dims, dim);
  tensor out = tensor::empty({tokens, dim}, dtype::f32, x.dev());  // [tokens, dim]
  launch_norm_rope_quant({x.data<float>(), w, out.data<float>(), positions.data<std::int64_t>(),
                          inv_freq.data<float>(), tokens, dim, pairs, eps, quant_block, quant_dims},
                         current_stream());
  return out;
}

}  // namespace di::cuda
