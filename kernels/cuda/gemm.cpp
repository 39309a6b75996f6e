// The CUDA backend's linear ops: linear, grouped_linear (block-diagonal) and expert_linear
// (MoE experts), dispatched on the weight's stored format (see cuda_ops.hpp): FP8/MXFP4 on
// sm90_block_gemm or cuBLASLt's block-scaled FP8 GEMM after FP8 activation quantization,
// BF16 and f32 weights on cuBLAS, and an exact fp32 dequantize-then-SGEMM path for stored
// formats without activation quantization.
#include "kernels/cuda/cublas_gemm.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/device_memory.hpp"
#include "kernels/cuda/gemm_kernels.hpp"
#include "kernels/cuda/kernel_attributes.hpp"
#include "kernels/cuda/stream.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>

namespace di::cuda {

namespace {

std::atomic<gemm_backend> g_backend{gemm_backend::automatic};
std::atomic<bool> g_ordered_splits{false};
std::atomic<bool> g_split_gemm{true};
std::atomic<bool> g_f32_gemv{detail::env_switch("DEEPINFER_F32_GEMV", true)};
/// DEEPINFER_F32_GEMV_BF16=0: f32_gemv reads the fp32 copy even where the bf16 bytes are kept
/// (for comparisons: the same bits either way).
const bool g_f32_gemv_bf16 = detail::env_switch("DEEPINFER_F32_GEMV_BF16", true);
/// bf16 checkpoint matrices (the output head) of 1..g_bf16_gemv_rows rows on f32_gemv: fp32
/// activations times the stored bf16 values (the CPU's products), a row's sums independent of
/// the batch. Session 49, the V4.1 head (1.32 GB), graph replays, us at 1 / 2 / 4 / 8 rows,
/// f32_gemv against the cuBLAS bf16 GEMM it replaces (x rounded to bf16): H100 418 / 442 / 533 /
/// 814 against 456 / 457 / 449 / 451; H200 294 / 359 / 502 / 817 against 299 / 301 / 303 / 307.
/// Hence one row: at the rate of a kernel that only reads the bytes on both cards.
/// DEEPINFER_BF16_GEMV_ROWS=N / set_bf16_gemv_rows(N) (0: the cuBLAS GEMM alone; at most 8).
std::atomic<int> g_bf16_gemv_rows{int(
    detail::env_count("DEEPINFER_BF16_GEMV_ROWS", bf16_gemv_default_rows, f32_gemv_max_rows, 0))};
std::atomic<bool> g_split_bf16{detail::env_switch("DEEPINFER_SPLIT_BF16", true)};
std::atomic<bool> g_split_wg{detail::env_switch("DEEPINFER_SPLIT_WG", true)};
std::atomic<bool> g_split_wg_staged{detail::env_switch("DEEPINFER_SPLIT_WG_STAGED", true)};

/// Launches p on sm90_block_gemm; with ordered splits (set_ordered_gemm_splits), a K split
/// gets its partials workspace and zeroed tile counters (stream-ordered scratch, so CUDA graph
/// captures keep them as graph allocations).
void run_block_gemm(block_gemm_params& p, device dev) {
  tensor work, counters;
  if (g_ordered_splits) {
    const block_gemm_plan plan = plan_block_gemm(p);
    if (plan.splits > 1) {
      work = tensor::empty({plan.splits * p.y_elements}, dtype::f32, dev);  // [splits, y]
      counters = tensor::zeros({plan.tiles}, dtype::i32, dev);              // [tiles]
      p.split_work = work.data<float>();
      p.split_counters = static_cast<unsigned*>(counters.raw());
    }
  }
  launch_block_gemm(p, current_stream());
}

/// Rows from which `automatic` tries cuBLASLt's block-scaled FP8 GEMM (V4's 128x128 blocks).
/// A bf16 temporary per call (dequant_bf16) is not automatic: V4.1's wq_b at M=4096 ran at 420
/// TFLOP/s that way and at 76 on sm90_block_gemm (H200, session 8), yet with it automatic from
/// 256 rows the v41-flash-L4 2048-token prefill measured 362 ms against 359 without (and
/// session 5's element-wise dequantize kernel: 363 vs 316 ms), so it stays opt-in.
/// DEEPINFER_LT_ROWS / set_cublaslt_min_rows move the threshold. 16 puts V4's decode batches of
/// 16k rows (128-blocks) on it too: at 16..64 rows it streamed V4's wq_b at 0.40-0.44 of the
/// copy bandwidth against skinny_gemm's 0.15 (wo_b 0.36-0.38 vs 0.17), and v4-flash-L4 decoded
/// batch 64 in 7.80 ms against 8.11 (H200, session 13, one call; session 14: 8.06 vs 8.05, within
/// the spread); the whole GPU suite passes with it (session 14). With ordered splits (the
/// batch-invariant mode) decode batches stay on sm90_block_gemm, whose rows do not depend on the
/// batch: cuBLASLt from prefill_lt_rows only, whatever the threshold.
constexpr std::int64_t prefill_lt_rows = 256;
std::atomic<std::int64_t> g_lt_rows{
    detail::env_count("DEEPINFER_LT_ROWS", 16, std::int64_t(1) << 40)};

/// Rows from which `automatic` multiplies FP8 weights that cuBLASLt does not take (V4.1's
/// 32-input blocks) through a bf16 temporary (as dequant_bf16) instead of sm90_block_gemm:
/// prefill-sized GEMMs, where sm90_block_gemm's mma.sync tiles reach ~60-75 TFLOP/s and the
/// decoded weight on cuBLAS 300-420 (V4.1 wo_b / wq_b at M=4096, H200). Session 21's profile of
/// a v41-flash-L4 1024-token prefill forward had sm90_block_gemm at 36% of its kernel time.
/// DEEPINFER_BF16_ROWS / set_bf16_temp_min_rows move it (a huge value: never).
std::atomic<std::int64_t> g_bf16_rows{
    detail::env_count("DEEPINFER_BF16_ROWS", 256, std::int64_t(1) << 40)};

bool is_stored_format(const weight_matrix& w) {
  return w.values.type() == dtype::f8_e4m3 || w.values.type() == dtype::i8;
}

/// x [rows, cols] quantized to FP8 codes [rows, cols] and fp32 scales per `block`.
struct quantized_act {
  tensor codes;   // [rows, cols] u8
  tensor scales;  // [rows, cols / block] f32, or [cols / block, rows] when mn_major
};

quantized_act quantize_act(const tensor& x, int block, bool mn_major) {
  const std::int64_t rows = x.size(0), cols = x.numel() / std::max<std::int64_t>(1, rows);
  DI_CHECK(block > 0 && cols % block == 0, "activation quantization: rows of {} in blocks of {}",
           cols, block);
  quantized_act q{tensor::empty({rows, cols}, dtype::u8, x.dev()),
                  mn_major ? tensor::empty({cols / block, rows}, dtype::f32, x.dev())
                           : tensor::empty({rows, cols / block}, dtype::f32, x.dev())};
  launch_act_quant({x.data<float>(), rows, cols, block, q.codes.data<std::uint8_t>(),
                    q.scales.data<float>(), mn_major},
                   current_stream());
  return q;
}

/// Whether sm90_block_gemm takes this weight with this activation block: blocks of powers of
/// two (activations 32..256 inputs, FP8 weights at least 16 rows x 32 inputs), K a multiple
/// of 32 and of both blocks.
bool block_gemm_fits(const weight_matrix& w, std::int64_t k, int act_block) {
  auto pow2 = [](std::int64_t v) { return v > 0 && (v & (v - 1)) == 0; };
  if (!pow2(act_block) || act_block < 32 || act_block > 256 || k % 32 != 0 || k % act_block != 0)
    return false;
  if (w.values.type() == dtype::i8) return w.scales.type() == dtype::f8_e8m0;
  return pow2(w.block.cols) && w.block.cols >= 32 && w.block.rows % 16 == 0 &&
         k % w.block.cols == 0;
}

/// Shared fields of a block_gemm launch for weight `w` and quantized activations `q`.
block_gemm_params gemm_params(const weight_matrix& w, const quantized_act& q, int act_block,
                              std::int64_t k, std::int64_t n, int groups, tensor& y) {
  block_gemm_params p{};
  p.weight = static_cast<const std::uint8_t*>(w.values.raw());
  const bool e8m0 = w.scales.type() == dtype::f8_e8m0;
  p.wscale_e8m0 = e8m0 ? static_cast<const std::uint8_t*>(w.scales.raw()) : nullptr;
  p.wscale_f32 = e8m0 ? nullptr : w.scales.data<float>();
  p.wscale_cols = w.scales.size(1);
  p.block_rows = int(w.block.rows);
  p.block_cols = int(w.block.cols);
  p.fp4 = w.values.type() == dtype::i8;
  p.fp4_interleaved = w.interleaved;
  p.act = q.codes.data<std::uint8_t>();
  p.act_scale = q.scales.data<float>();
  p.act_stride = q.codes.size(1);
  p.act_scale_stride = q.scales.size(1);
  p.act_block = act_block;
  p.n = n;
  p.k = k;
  p.groups = groups;
  p.y = y.data<float>();
  p.y_elements = y.numel();
  // (A weight_matrix copied with its values sliced would carry its source's tiles: only tiles
  // of this matrix's own size are used.)
  if (w.decode_tiles.defined() && w.values.type() == dtype::f8_e4m3 &&
      w.decode_tiles.nbytes() == decode_tiles_bytes(w.values.size(0), w.values.size(1)))
    p.tiles = static_cast<const std::uint8_t*>(w.decode_tiles.raw());
  return p;
}

/// x (after optional FP8 fake quantization) times the weight decoded to fp32, on SGEMM.
tensor dequant_linear(const tensor& x, const weight_matrix& weight, int act_block) {
  const tensor input = fp8_fake_quantized(x, act_block);
  const weight_matrix dense = dequantize_weight(weight, dtype::f32);
  tensor y = tensor::empty({x.size(0), weight.rows()}, dtype::f32, x.dev());
  sgemm_nt(input, dense.values, y, 1);
  return y;
}

}  // namespace

void set_gemm_backend(gemm_backend backend) {
  g_backend = backend;
}
gemm_backend get_gemm_backend() {
  return g_backend;
}

void set_cublaslt_min_rows(std::int64_t rows) {
  DI_CHECK(rows >= 1, "cuBLASLt threshold of {} rows (expected at least 1)", rows);
  g_lt_rows = rows;
}
std::int64_t get_cublaslt_min_rows() {
  return g_lt_rows;
}
void set_bf16_temp_min_rows(std::int64_t rows) {
  DI_CHECK(rows >= 1, "bf16 temporary rows threshold {}: must be at least 1", rows);
  g_bf16_rows = rows;
}
std::int64_t get_bf16_temp_min_rows() {
  return g_bf16_rows;
}

void set_f32_gemv(bool on) {
  g_f32_gemv = on;
}

void set_bf16_gemv_rows(int rows) {
  DI_CHECK(rows >= 0 && rows <= f32_gemv_max_rows, "bf16 GEMV rows {} outside [0, {}]", rows,
           f32_gemv_max_rows);
  g_bf16_gemv_rows = rows;
}

void set_split_gemm(bool on) {
  g_split_gemm = on;
}
bool get_split_gemm() {
  return g_split_gemm;
}

void set_split_wg(bool on) {
  g_split_wg = on;
}
bool get_split_wg() {
  return g_split_wg;
}

void set_split_wg_staged(bool on) {
  g_split_wg_staged = on;
}
bool get_split_wg_staged() {
  return g_split_wg_staged;
}

void set_split_bf16_linear(bool on) {
  g_split_bf16 = on;
}
bool get_split_bf16_linear() {
  return g_split_bf16;
}

weight_matrix with_bf16_copy(const weight_matrix& w, const weight_matrix& source) {
  if (!w.values.defined() || w.values.type() != dtype::f32 ||
      w.values.dev().kind != device_kind::cuda || source.values.type() != dtype::bf16 ||
      w.bf16_values.defined())
    return w;
  DI_CHECK(source.values.shape() == w.values.shape(),
           "with_bf16_copy: source [{}, {}] is not the matrix [{}, {}]", source.rows(),
           source.cols(), w.rows(), w.cols());
  weight_matrix out = w;
  // the checkpoint's bf16 bytes, shared where they already sit on w's device (no second copy)
  const bool shared = source.values.dev() == w.values.dev() && source.values.is_contiguous();
  out.bf16_values = shared ? source.values : source.values.to(w.values.dev());
  return out;
}

weight_matrix with_decode_tiles(const weight_matrix& w) {
  if (!get_tile_gemv() || !w.values.defined() || w.values.type() != dtype::f8_e4m3 ||
      w.values.dev().kind != device_kind::cuda || !w.values.is_contiguous() ||
      w.scales.type() != dtype::f8_e8m0 || w.block.cols != 32 || w.block.rows % 16 != 0 ||
      w.values.size(1) % 128 != 0 || w.decode_tiles.defined())
    return w;
  weight_matrix out = w;
  const std::int64_t n = w.values.size(0), k = w.values.size(1);
  out.decode_tiles =
      tensor::empty({std::int64_t(decode_tiles_bytes(n, k))}, dtype::u8, w.values.dev());
  launch_make_decode_tiles(static_cast<const std::uint8_t*>(w.values.raw()),
                           static_cast<std::uint8_t*>(out.decode_tiles.raw()), n, k,
                           current_stream());
  return out;
}

void set_ordered_gemm_splits(bool on) {
  g_ordered_splits = on;
}
bool get_ordered_gemm_splits() {
  return g_ordered_splits;
}

namespace {

void check_linear_operands(const tensor& x, const weight_matrix& weight) {
  check_cuda_tensor(x, dtype::f32, 2, "linear input");
  check_weight_matrix(weight, "linear weight", device_kind::cuda);
  DI_CHECK(weight.cols() == x.size(1), "linear: input has {} features, weight [{}, {}] expects {}",
           x.size(1), weight.rows(), weight.cols(), weight.cols());
  DI_CHECK(x.dev() == weight.values.dev(), "linear: input on {}, weight on {}", to_string(x.dev()),
           to_string(weight.values.dev()));
}

/// Whether linear tries cuBLASLt's block-scaled FP8 GEMM first for this weight and x's rows.
bool tries_cublaslt(gemm_backend backend, const weight_matrix& weight, std::int64_t rows,
                    std::int64_t in, int act_block) {
  const std::int64_t lt_rows = g_lt_rows;
  const std::int64_t from = g_ordered_splits ? std::max(lt_rows, prefill_lt_rows) : lt_rows;
  // (dense_wg_gemm's wide tiles take decode batches of 9..64 rows first when set to 1; by
  // default only what cuBLASLt does not take)
  const bool wide = rows > 8 && rows <= 64 && get_dense_wg_gemm_wide() == 1 && !g_ordered_splits;
  // (and ring_gemm, when switched on, takes V4's blocks at those rows first)
  const bool ring =
      ring_gemm_takes_shape(rows, weight.values.type() == dtype::f8_e4m3, int(weight.block.rows),
                            int(weight.block.cols), act_block, in);
  const bool try_lt = backend == gemm_backend::cublaslt ||
                      (backend == gemm_backend::automatic && rows >= from && !wide && !ring);
  return try_lt && cublaslt_fp8_fits(weight, rows, in, act_block);
}

/// x quantized as cuBLASLt's block-scaled GEMM reads it (scales in its layout).
quantized_act lt_quantized(const tensor& x, int act_block) {
  return quantize_act(x, act_block, !(cublaslt_scale_layout() & 2));
}

/// y [rows, out] = x W^T on cuBLASLt's block-scaled FP8 GEMM from q (lt_quantized); an undefined
/// tensor, nothing enqueued, where cuBLASLt offers no kernel for it.
tensor lt_linear(const weight_matrix& w, const quantized_act& q) {
  tensor y = tensor::empty({q.codes.size(0), w.rows()}, dtype::f32, q.codes.dev());
  return cublaslt_block_fp8(w, q.codes, q.scales, y) ? y : tensor();
}

/// x's own codes and scales for cuBLASLt's block-scaled GEMM of `weight`, where linear would
/// try it and x's producer wrote the scales in its layout too (quantized_rows::scales_mn):
/// the codes and scales lt_quantized(x.x) would make, without that act_quant launch.
/// DEEPINFER_LT_CODES=0: cuBLASLt quantizes x again (as before session 35; for comparisons).
std::optional<quantized_act> lt_codes(const quantized_rows& x, const weight_matrix& weight,
                                      int act_block) {
  static const bool on = detail::env_switch("DEEPINFER_LT_CODES", true);
  if (!on || !x.codes.defined() || !x.scales_mn.defined() || x.block != act_block ||
      act_block <= 0 || (cublaslt_scale_layout() & 2) || x.x.rank() != 2 || x.x.size(0) == 0 ||
      !is_stored_format(weight) || !block_gemm_fits(weight, x.x.size(1), act_block) ||
      !tries_cublaslt(g_backend, weight, x.x.size(0), x.x.size(1), act_block))
    return std::nullopt;
  return quantized_act{x.codes, x.scales_mn};
}

/// Whether `automatic` takes linear(x, weight) of `rows` rows through a bf16 temporary of the
/// weight (g_bf16_rows): FP8 weights that fit sm90_block_gemm, which cuBLASLt does not take --
/// V4.1's 32-input blocks, and V4's 128-input blocks at row counts cuBLASLt refuses (not a
/// multiple of 16). (If cuBLASLt is tried but has no kernel, linear falls back to
/// sm90_block_gemm, as before.)
bool takes_bf16_temp(gemm_backend backend, const weight_matrix& weight, std::int64_t rows,
                     std::int64_t in, int act_block) {
  // With ordered splits (batch-invariant decode) from prefill rows only, as cuBLASLt.
  const std::int64_t from =
      g_ordered_splits ? std::max(g_bf16_rows.load(), prefill_lt_rows) : g_bf16_rows.load();
  return backend == gemm_backend::automatic && rows >= from &&
         weight.values.type() == dtype::f8_e4m3 && act_block > 0 &&
         !tries_cublaslt(backend, weight, rows, in, act_block);
}

/// Whether linear(x, weight) ends on sm90_block_gemm with quantize_act(x, act_block, false):
/// a stored format it fits, rows to multiply, and neither a dequantizing backend nor
/// cuBLASLt's block-scaled GEMM taking it first.
bool takes_block_gemm(const tensor& x, const weight_matrix& weight, int act_block) {
  const gemm_backend backend = g_backend;
  const std::int64_t rows = x.size(0), in = x.size(1);
  if (!is_stored_format(weight) || backend == gemm_backend::dequant_fp32 ||
      backend == gemm_backend::dequant_bf16 || !block_gemm_fits(weight, in, act_block) || rows == 0)
    return false;
  return !tries_cublaslt(backend, weight, rows, in, act_block) &&
         !takes_bf16_temp(backend, weight, rows, in, act_block);
}

/// y = x W^T on sm90_block_gemm from x's quantized activations q.
tensor block_linear(const tensor& x, const weight_matrix& weight, const quantized_act& q,
                    int act_block) {
  const std::int64_t rows = x.size(0), in = x.size(1), out = weight.rows();
  tensor y = tensor::empty({rows, out}, dtype::f32, x.dev());  // [rows, out]
  block_gemm_params p = gemm_params(weight, q, act_block, in, out, 1, y);
  p.rows = rows;
  p.max_rows = rows;
  p.y_stride = out;
  run_block_gemm(p, x.dev());
  return y;
}

}  // namespace

tensor linear(const tensor& x, const weight_matrix& weight, const linear_params& params) {
  check_linear_operands(x, weight);
  const std::int64_t rows = x.size(0), in = x.size(1), out = weight.rows();
  const int act_block = params.act_quant_block;
  const gemm_backend backend = g_backend;
  if (!is_stored_format(weight)) {
    tensor y = tensor::empty({rows, out}, dtype::f32, x.dev());  // [rows, out]
    const bool bf16_weight = weight.values.type() == dtype::bf16;
    // Decode rows on f32_gemv: fp32 weights (from their bf16 bytes where the model keeps them)
    // and bf16 checkpoint matrices -- the output head -- read as they are stored.
    const bool gemv = g_f32_gemv && f32_gemv_fits(rows, in, out) && weight.values.is_contiguous() &&
                      (!bf16_weight || rows <= g_bf16_gemv_rows);
    if (bf16_weight && !gemv) {
      bf16_gemm_nt(x, weight.values, y, act_block);  // fake-quantizes x on its way to bf16
      return y;
    }
    const tensor input = fp8_fake_quantized(x, act_block);
    if (g_split_bf16 && weight.bf16_values.defined() && rows > f32_gemv_max_rows &&
        input.is_contiguous()) {  // fp32-grade products on the bf16 tensor cores
      split_bf16_gemm_nt(input, weight.bf16_values, y);
    } else if (gemv && input.is_contiguous()) {  // instead of SGEMV / a bf16 GEMM of a few rows
      auto aligned = [](const void* q, int to) {
        return reinterpret_cast<std::uintptr_t>(q) % std::uintptr_t(to) == 0;
      };
      // The bf16 bytes where the weight is (or keeps) them: the same values, half the read.
      const tensor& bf = bf16_weight ? weight.values : weight.bf16_values;
      const bool use_bf16 =
          bf16_weight || (g_f32_gemv_bf16 && bf.defined() && bf.is_contiguous() &&
                          bf.type() == dtype::bf16 && bf.shape() == weight.values.shape());
      const bool vec = in % 4 == 0 && aligned(input.raw(), 16) &&
                       (use_bf16 ? aligned(bf.raw(), 8) : aligned(weight.values.raw(), 16));
      f32_gemv_params p{input.data<float>(),
                        bf16_weight ? nullptr : weight.values.data<float>(),
                        y.data<float>(),
                        rows,
                        in,
                        out,
                        vec};
      if (use_bf16) p.w_bf16 = static_cast<const std::uint16_t*>(bf.raw());
      launch_f32_gemv(p, current_stream());
    } else if (bf16_weight) {  // (an input f32_gemv cannot read)
      bf16_gemm_nt(x, weight.values, y, act_block);
    } else {
      sgemm_nt(input, weight.values, y, 1);
    }
    return y;
  }
  if (backend == gemm_backend::dequant_fp32 || !block_gemm_fits(weight, in, act_block))
    return dequant_linear(x, weight, act_block);
  if (rows == 0) return tensor::empty({0, out}, dtype::f32, x.dev());
  if (tries_cublaslt(backend, weight, rows, in, act_block)) {
    tensor y = lt_linear(weight, lt_quantized(x, act_block));
    if (y.defined()) return y;
  }
  if (backend == gemm_backend::dequant_bf16 ||
      takes_bf16_temp(backend, weight, rows, in, act_block)) {
    const weight_matrix bf = dequantize_weight(weight, dtype::bf16);  // [out, in] temporary
    tensor y = tensor::empty({rows, out}, dtype::f32, x.dev());       // [rows, out]
    bf16_gemm_nt(x, bf.values, y, act_block);  // x fake-quantized straight to bf16
    return y;
  }
  return block_linear(x, weight, quantize_act(x, act_block, false), act_block);
}

tensor linear(const quantized_rows& x, const weight_matrix& weight, const linear_params& params) {
  const int act_block = params.act_quant_block;
  if (const auto q = lt_codes(x, weight, act_block)) {  // cuBLASLt from x's own codes
    check_linear_operands(x.x, weight);
    tensor y = lt_linear(weight, *q);
    if (y.defined()) return y;
  }
  if (!x.codes.defined() || x.block != act_block || !takes_block_gemm(x.x, weight, act_block))
    return cuda::linear(x.x, weight, params);
  check_linear_operands(x.x, weight);
  return block_linear(x.x, weight, {x.codes, x.scales}, act_block);  // x's codes: no act_quant
}

namespace {

/// block_linear of both weights from the same codes q: one stream_gemm launch where it takes
/// the pair (stream_gemm_takes_pair: decode rows, the same plan for both -- each output the
/// bits of its own launch), else one launch each.
std::pair<tensor, tensor> block_linear_pair(const tensor& x, const weight_matrix& a,
                                            const weight_matrix& b, const quantized_act& q,
                                            int act_block) {
  const std::int64_t rows = x.size(0), in = x.size(1);
  const bool same_format = a.values.type() == b.values.type() && a.block.rows == b.block.rows &&
                           a.block.cols == b.block.cols && a.scales.type() == b.scales.type() &&
                           a.scales.size(1) == b.scales.size(1) && !a.interleaved && !b.interleaved;
  if (same_format && rows <= 8 && a.values.type() == dtype::f8_e4m3) {
    tensor ya = tensor::empty({rows, a.rows()}, dtype::f32, x.dev());  // [rows, out_a]
    tensor yb = tensor::empty({rows, b.rows()}, dtype::f32, x.dev());  // [rows, out_b]
    block_gemm_params p = gemm_params(a, q, act_block, in, a.rows(), 1, ya);
    p.rows = rows;
    p.max_rows = rows;
    p.y_stride = a.rows();
    const block_gemm_params pb = gemm_params(b, q, act_block, in, b.rows(), 1, yb);
    p.weight_b = pb.weight;
    p.wscale_e8m0_b = pb.wscale_e8m0;
    p.wscale_f32_b = pb.wscale_f32;
    p.n_b = b.rows();
    p.y_b = yb.data<float>();
    p.y_stride_b = b.rows();
    p.tiles_b = pb.tiles;
    // tile_gemv runs a pair only where both plans agree (each output its own launch's bits);
    // otherwise weights with decode tiles go one launch each, not to stream_gemm's pair.
    const bool tiled = p.tiles != nullptr || p.tiles_b != nullptr;
    if (tile_gemv_takes(p) || (!tiled && stream_gemm_takes_pair(p))) {
      run_block_gemm(p, x.dev());
      return {ya, yb};
    }
  }
  return {block_linear(x, a, q, act_block), block_linear(x, b, q, act_block)};
}

}  // namespace

std::pair<tensor, tensor> linear_pair(const tensor& x, const weight_matrix& a,
                                      const weight_matrix& b, const linear_params& params) {
  check_linear_operands(x, a);
  check_linear_operands(x, b);
  const int act_block = params.act_quant_block;
  const std::int64_t rows = x.size(0), in = x.size(1);
  const gemm_backend backend = g_backend;
  if (rows > 0 && is_stored_format(a) && is_stored_format(b) && block_gemm_fits(a, in, act_block) &&
      block_gemm_fits(b, in, act_block) && tries_cublaslt(backend, a, rows, in, act_block) &&
      tries_cublaslt(backend, b, rows, in, act_block)) {
    // Both on cuBLASLt's block-scaled GEMM (V4's blocks from 16 rows): x quantized once, as
    // each linear would have quantized it (the same codes and scales, so the same bits).
    const quantized_act q = lt_quantized(x, act_block);
    tensor ya = lt_linear(a, q);
    tensor yb = ya.defined() ? lt_linear(b, q) : tensor();
    if (yb.defined()) return {ya, yb};
  }
  if (!takes_block_gemm(x, a, act_block) || !takes_block_gemm(x, b, act_block))
    return {cuda::linear(x, a, params), cuda::linear(x, b, params)};
  const quantized_act q = quantize_act(x, act_block, false);  // once for both
  return block_linear_pair(x, a, b, q, act_block);
}

std::pair<tensor, tensor> linear_pair(const quantized_rows& x, const weight_matrix& a,
                                      const weight_matrix& b, const linear_params& params) {
  const int act_block = params.act_quant_block;
  if (const auto q = lt_codes(x, a, act_block); q && lt_codes(x, b, act_block)) {
    check_linear_operands(x.x, a);
    check_linear_operands(x.x, b);
    tensor ya = lt_linear(a, *q);
    tensor yb = ya.defined() ? lt_linear(b, *q) : tensor();
    if (yb.defined()) return {ya, yb};
  }
  // Without codes to use: the plain pair, which still quantizes x once for both.
  if (!x.codes.defined() || x.block != act_block || !takes_block_gemm(x.x, a, act_block) ||
      !takes_block_gemm(x.x, b, act_block))
    return cuda::linear_pair(x.x, a, b, params);
  check_linear_operands(x.x, a);
  check_linear_operands(x.x, b);
  const quantized_act q{x.codes, x.scales};  // x's codes: no act_quant launch
  return block_linear_pair(x.x, a, b, q, act_block);
}

tensor grouped_linear(const tensor& x, const weight_matrix& weight) {
  check_cuda_tensor(x, dtype::f32, 3, "grouped_linear input");
  check_weight_matrix(weight, "grouped_linear weight", device_kind::cuda);
  const std::int64_t rows = x.size(0), groups = x.size(1), in = x.size(2);
  DI_CHECK(groups > 0 && weight.cols() == in && weight.rows() % groups == 0,
           "grouped_linear: weight [{}, {}] does not fit {} groups of {} inputs", weight.rows(),
           weight.cols(), groups, in);
  const std::int64_t out = weight.rows() / groups;
  tensor y = tensor::empty({rows, groups, out}, dtype::f32, x.dev());  // [rows, groups, out]
  // No activation quantization here (as on the CPU). Decode batches of an FP8 weight stream
  // the stored codes once: up to fp8_split_gemm_max_rows rows with e8m0 scales on the bf16
  // tensor cores (activations split into two bf16 parts; mma.sync up to 8 rows, the warpgroup
  // MMA from 9), otherwise fp8_gemv (CUDA cores) in
  // chunks of fp8_gemv_max_rows up to fp8_gemv_chunked_rows rows; prefill runs SGEMM per group
  // over the decoded weight. A row's result does not depend on the batch it runs in.
  const bool fp8_decode = weight.values.type() == dtype::f8_e4m3 && weight.scales.defined() &&
                          x.is_contiguous() &&
                          reinterpret_cast<std::uintptr_t>(x.raw()) % 16 == 0 && rows > 0;
  const bool e8m0 = weight.scales.defined() && weight.scales.type() == dtype::f8_e8m0;
  auto params = [&](std::int64_t r0, std::int64_t n) {
    return fp8_gemv_params{x.data<float>() + r0 * groups * in,
                           static_cast<const std::uint8_t*>(weight.values.raw()),
                           e8m0 ? static_cast<const std::uint8_t*>(weight.scales.raw()) : nullptr,
                           e8m0 ? nullptr : weight.scales.data<float>(), weight.scales.size(1),
                           int(weight.block.rows), int(weight.block.cols), n, groups, in, out,
                           y.data<float>() + r0 * groups * out};
  };
  if (fp8_decode && g_split_gemm &&
      fp8_split_gemm_fits(rows, in, int(weight.block.cols), e8m0)) {
    if (g_split_wg && fp8_split_wg_fits(rows, in, int(weight.block.cols), e8m0)) {
      fp8_gemv_params p = params(0, rows);  // 9..64 rows: warpgroup MMA
      tensor image;  // x's bf16 parts as the GEMM stages them (dropped after the launch)
      if (g_split_wg_staged) {
        image = tensor::empty({std::int64_t(fp8_split_wg_image_bytes(rows, groups, in))}, dtype::u8,
                              x.dev());
        p.b_image = image.data<std::uint8_t>();
      }
      launch_fp8_split_wg(p, current_stream());
    } else
      launch_fp8_split_gemm(params(0, rows), current_stream());
    return y;
  }
  if (fp8_decode && rows <= fp8_gemv_chunked_rows &&
      fp8_gemv_fits(std::min(rows, fp8_gemv_max_rows), in, int(weight.block.cols))) {
    for (std::int64_t r0 = 0; r0 < rows; r0 += fp8_gemv_max_rows)
      launch_fp8_gemv(params(r0, std::min(fp8_gemv_max_rows, rows - r0)), current_stream());
    return y;
  }
  // Prefill: FP8 codes times power-of-two (e8m0) scales, and bf16 weights, are bf16 values
  // exactly -- decoded to bf16, they take the split-bf16 GEMMs (fp32-grade, tensor cores)
  // instead of an fp32 temporary and SGEMM.
  const bool bf16_exact = weight.values.type() == dtype::bf16 ||
                          (weight.values.type() == dtype::f8_e4m3 && e8m0);
  if (g_split_bf16 && bf16_exact && x.is_contiguous()) {
    const weight_matrix bf = weight.values.type() == dtype::bf16
                                 ? weight
                                 : dequantize_weight(weight, dtype::bf16);  // [groups * out, in]
    tensor yv = y.view({rows, groups * out});
    split_bf16_gemm_nt(x.view({rows, groups * in}), bf.values, yv, int(groups));
    return y;
  }
  const weight_matrix dense = is_stored_format(weight) || weight.values.type() == dtype::bf16
                                  ? dequantize_weight(weight, dtype::f32)
                                  : weight;
  sgemm_nt(x.view({rows, groups * in}), dense.values, y.view({rows, groups * out}), int(groups));
  return y;
}

namespace {

/// Checks expert_linear's operands; returns the outputs per expert.
std::int64_t check_expert_operands(const tensor& x, const tensor& offsets,
                                   const weight_matrix& weights, int act_block) {
  check_cuda_tensor(x, dtype::f32, 2, "expert_linear input");
  check_cuda_tensor(offsets, dtype::i32, 1, "expert_linear offsets");
  check_weight_matrix(weights, "expert_linear weights", device_kind::cuda);
  const std::int64_t experts = offsets.size(0) - 1, in = x.size(1);
  DI_CHECK(experts > 0 && weights.rows() % experts == 0 && weights.cols() == in,
           "expert_linear: weights [{}, {}] do not split into {} experts of {} inputs",
           weights.rows(), weights.cols(), experts, in);
  const std::int64_t out = weights.rows() / experts;
  DI_CHECK(!weights.scales.defined() || out % weights.block.rows == 0,
           "expert_linear: {} rows per expert is not a multiple of the {}-row scale block", out,
           weights.block.rows);
  DI_CHECK(is_stored_format(weights) && block_gemm_fits(weights, in, act_block) &&
               g_backend != gemm_backend::dequant_fp32,
           "expert_linear on CUDA: needs FP8/MXFP4 weights with activation quantization in "
           "blocks of 32 or 128 (got {}, act_quant_block {})",
           dtype_name(weights.values.type()), act_block);
  return out;
}

/// The launch of the experts' products from x's quantized activations q into y (not zeroed:
/// every kernel stores each output of the groups' rows, or zeroes y itself first where its K
/// splits add into it -- set y_zeroed where the caller did).
block_gemm_params expert_params(const tensor& x, const tensor& offsets,
                                const weight_matrix& weights, const expert_linear_params& params,
                                const quantized_act& q, tensor& y) {
  const std::int64_t experts = offsets.size(0) - 1, rows = x.size(0), in = x.size(1);
  const std::int64_t out = y.size(1);
  block_gemm_params p = gemm_params(weights, q, params.act_quant_block, in, out, int(experts), y);
  p.offsets = offsets.data<std::int32_t>();
  p.rows = rows;  // with offsets: the total, which bounds the non-empty experts
  p.max_rows = params.max_rows_per_expert > 0 ? std::min(params.max_rows_per_expert, rows) : rows;
  p.tile_rows = params.tile_rows_hint;
  p.y_stride = out;
  return p;
}

/// The experts' products from x's quantized activations q (rows > 0). y is not zeroed first:
/// a memset node between two kernels of a decode step holds up the programmatic launch of the
/// second (the launch zeroes it where its K splits add into it).
tensor block_expert_linear(const tensor& x, const tensor& offsets, const weight_matrix& weights,
                           const expert_linear_params& params, const quantized_act& q,
                           std::int64_t out) {
  const bool zeroed = !params.rows_all_grouped || !zero_kernels();  // (zero_kernels: comparisons)
  tensor y = zeroed ? tensor::zeros({x.size(0), out}, dtype::f32, x.dev())
                    : tensor::empty({x.size(0), out}, dtype::f32, x.dev());  // [rows, out]
  block_gemm_params p = expert_params(x, offsets, weights, params, q, y);
  p.y_zeroed = zeroed;
  run_block_gemm(p, x.dev());
  return y;
}

/// Both products in one wg_gemm launch when it takes the pair (the same shape and formats,
/// where each alone would run on wg_gemm: block_gemm_takes_pair), else an empty pair.
std::pair<tensor, tensor> paired_expert_linear(const tensor& x, const tensor& offsets,
                                               const weight_matrix& a, const weight_matrix& b,
                                               const expert_linear_params& params,
                                               const quantized_act& q, std::int64_t out) {
  if (!a.interleaved || !b.interleaved || a.values.shape() != b.values.shape() ||
      a.scales.shape() != b.scales.shape() || a.scales.type() != b.scales.type())
    return {};
  const std::int64_t rows = x.size(0);
  tensor both = tensor::empty({2 * rows, out}, dtype::f32, x.dev());  // [2, rows, out]
  tensor ya = both.slice(0, 0, rows), yb = both.slice(0, rows, 2 * rows);
  block_gemm_params p = expert_params(x, offsets, a, params, q, ya);
  p.weight_b = static_cast<const std::uint8_t*>(b.values.raw());
  p.wscale_e8m0_b = static_cast<const std::uint8_t*>(b.scales.raw());
  p.y_b = yb.data<float>();
  if (!block_gemm_takes_pair(p)) return {};
  if (!params.rows_all_grouped || !zero_kernels() || plan_wg_gemm(p).k_splits > 1) {  // one fill
    fill_zero_allocated(both.raw(), both.nbytes(), x.dev().index);
    p.y_zeroed = true;
  }
  run_block_gemm(p, x.dev());
  return {ya, yb};
}

}  // namespace

tensor expert_linear(const tensor& x, const tensor& offsets, const weight_matrix& weights,
                     const expert_linear_params& params) {
  const std::int64_t out = check_expert_operands(x, offsets, weights, params.act_quant_block);
  if (x.size(0) == 0) return tensor::zeros({0, out}, dtype::f32, x.dev());
  return block_expert_linear(x, offsets, weights, params,
                             quantize_act(x, params.act_quant_block, false), out);
}

tensor expert_linear(const quantized_rows& x, const tensor& offsets, const weight_matrix& weights,
                     const expert_linear_params& params) {
  if (!x.codes.defined() || x.block != params.act_quant_block)
    return cuda::expert_linear(x.x, offsets, weights, params);
  const std::int64_t out = check_expert_operands(x.x, offsets, weights, params.act_quant_block);
  if (x.x.size(0) == 0) return tensor::zeros({0, out}, dtype::f32, x.x.dev());
  return block_expert_linear(x.x, offsets, weights, params, {x.codes, x.scales}, out);
}

std::pair<tensor, tensor> expert_linear_pair(const tensor& x, const tensor& offsets,
                                             const weight_matrix& a, const weight_matrix& b,
                                             const expert_linear_params& params) {
  const std::int64_t out_a = check_expert_operands(x, offsets, a, params.act_quant_block);
  const std::int64_t out_b = check_expert_operands(x, offsets, b, params.act_quant_block);
  if (x.size(0) == 0)
    return {tensor::zeros({0, out_a}, dtype::f32, x.dev()),
            tensor::zeros({0, out_b}, dtype::f32, x.dev())};
  const quantized_act q = quantize_act(x, params.act_quant_block, false);  // once for both
  if (out_a == out_b) {
    auto paired = paired_expert_linear(x, offsets, a, b, params, q, out_a);
    if (paired.first.defined()) return paired;
  }
  return {block_expert_linear(x, offsets, a, params, q, out_a),
          block_expert_linear(x, offsets, b, params, q, out_b)};
}

weight_matrix dequantize_weight(const weight_matrix& w, dtype to) {
  check_weight_matrix(w, "dequantize_weight", device_kind::cuda);
  DI_CHECK(to == dtype::bf16 || to == dtype::f32, "dequantize_weight: to {} (bf16 or F32 only)",
           dtype_name(to));
  const dtype from = w.values.type();
  if (from == to) return w;
  tensor out = tensor::empty({w.rows(), w.cols()}, to, w.values.dev());  // [rows, cols]
  dequantize_params p{};
  p.values = static_cast<const std::uint8_t*>(w.values.raw());
  p.kind = from == dtype::f8_e4m3 ? 0 : from == dtype::i8 ? 1 : from == dtype::bf16 ? 2 : 3;
  if (w.scales.defined()) {
    const bool e8m0 = w.scales.type() == dtype::f8_e8m0;
    p.scale_e8m0 = e8m0 ? static_cast<const std::uint8_t*>(w.scales.raw()) : nullptr;
    p.scale_f32 = e8m0 ? nullptr : w.scales.data<float>();
    p.scale_cols = w.scales.size(1);
  }
  p.block_rows = int(w.block.rows);
  p.block_cols = int(w.block.cols);
  p.rows = w.rows();
  p.cols = w.cols();
  p.out = out.raw();
  p.out_bf16 = to == dtype::bf16;
  p.fp4_interleaved = w.interleaved;
  launch_dequantize(p, current_stream());
  return weight_matrix(out);
}

static_assert(fp4_interleave_rows == il_stripe_rows && fp4_interleave_bytes == il_run_bytes,
              "the kernels' stripes and runs are weight_matrix::interleaved's");

namespace {

/// The packed row bytes of FP4 values that weight_matrix::interleaved's layout takes (whole
/// 32-row stripes of whole 64-byte runs), else 0 (FP8, f32, or a shape that cuts them).
std::int64_t interleavable_row_bytes(const tensor& values) {
  if (values.type() != dtype::i8) return 0;
  const std::int64_t row_bytes = values.size(1);
  return row_bytes > 0 && row_bytes % fp4_interleave_bytes == 0 &&
                 values.size(0) % fp4_interleave_rows == 0
             ? row_bytes
             : 0;
}

}  // namespace

weight_matrix with_fp4_layout(const weight_matrix& w, bool interleaved) {
  check_weight_matrix(w, "with_fp4_layout", device_kind::cuda);
  const std::int64_t row_bytes = interleavable_row_bytes(w.values);
  if (row_bytes == 0 || w.interleaved == interleaved) return w;
  weight_matrix out = w;
  out.values = tensor::empty(w.values.shape(), dtype::i8, w.values.dev());
  out.interleaved = interleaved;
  launch_fp4_interleave(static_cast<const std::uint8_t*>(w.values.raw()),
                        static_cast<std::uint8_t*>(out.values.raw()), w.rows(), row_bytes,
                        !interleaved, current_stream());
  return out;
}

bool fp4_interleave_default() {
  static const bool on = detail::env_switch("DEEPINFER_FP4_INTERLEAVE", true);
  return on;
}

weight_matrix stack_weights(std::span<const weight_matrix> experts, device dev,
                            bool interleave) {
  DI_CHECK(!experts.empty(), "stack_weights: no experts");
  const weight_matrix& first = experts[0];
  const std::int64_t rows = first.values.size(0);
  const std::int64_t row_bytes = interleavable_row_bytes(first.values);
  const bool tiled = interleave && !first.interleaved && row_bytes > 0;
  tensor_shape vshape = first.values.shape();
  vshape[0] = rows * std::int64_t(experts.size());
  weight_matrix out = first;
  out.values = tensor::empty(vshape, first.values.type(), dev);
  std::int64_t srows = 0;
  if (first.scales.defined()) {
    srows = first.scales.size(0);
    tensor_shape sshape = first.scales.shape();
    sshape[0] = srows * std::int64_t(experts.size());
    out.scales = tensor::empty(sshape, first.scales.type(), dev);
  }
  for (std::size_t e = 0; e < experts.size(); ++e) {
    const weight_matrix& w = experts[e];
    DI_CHECK(w.values.shape() == first.values.shape() && w.values.type() == first.values.type(),
             "stack_weights: expert {} is {} {}, expert 0 {} {}", e, dtype_name(w.values.type()),
             w.values.shape().str(), dtype_name(first.values.type()), first.values.shape().str());
    DI_CHECK(w.interleaved == first.interleaved, "stack_weights: expert {} is {}interleaved",
             e, w.interleaved ? "" : "not ");
    const std::int64_t i = std::int64_t(e);
    tensor slice = out.values.slice(0, i * rows, (i + 1) * rows);
    if (tiled) {  // interleaved into the slice (from the host through a one-expert temporary)
      tensor part = w.values;
      if (part.dev() != dev) {
        part = tensor::empty(w.values.shape(), dtype::i8, dev);
        part.copy_from(w.values);
      }
      launch_fp4_interleave(static_cast<const std::uint8_t*>(part.raw()),
                            static_cast<std::uint8_t*>(slice.raw()), rows, row_bytes, false,
                            current_stream());
    } else {
      slice.copy_from(w.values);
    }
    if (srows > 0) out.scales.slice(0, i * srows, (i + 1) * srows).copy_from(w.scales);
  }
  out.interleaved = first.interleaved || tiled;
  return out;
}

}  // namespace di::cuda
