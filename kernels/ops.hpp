// The op interface: every computation of the DeepSeek-V4/V4.1 forward pass, as functions of
// tensors that dispatch on the tensors' device. The CPU backend (kernels/cpu/) is the
// reference: plain loops, fp32 accumulation. A CUDA backend implements the same functions
// (same params structs, same rounding via kernels/quant_math.hpp) and slots in here.
#pragma once

#include "kernels/cache_format.hpp"
#include "kernels/tensor.hpp"
#include "kernels/weight_matrix.hpp"

#include <cstdint>
#include <span>
#include <utility>

namespace di::ops {

// ---- gathers and norms -------------------------------------------------------------------

/// Rows of `table` [vocab, dim] f32 or bf16 (read in place, widened) for `ids` [tokens] i64
/// -> [tokens, dim] f32. An id outside [0, vocab) is a di::error naming it.
tensor embedding(const tensor& table, const tensor& ids);

/// Rows of an FP8 table for `ids` [n] i64: codes [rows, dim] u8 (e4m3) times scales
/// [rows, dim / block] u8 (e8m0, one per block of the row) -> [n, dim] f32.
tensor embedding_fp8(const tensor& codes, const tensor& scales, const tensor& ids);

/// Rows `rows` [n] i64 of x [m, ...] (any dtype) -> [n, ...]; an index outside [0, m) is a
/// di::error.
tensor gather_rows(const tensor& x, const tensor& rows);

/// y[rows[i]] += src[i] for every i: y [m, ...] f32, rows [n] i64, src [n, ...] f32 (rows may
/// repeat; additions happen in index order).
void scatter_add_rows(tensor& y, const tensor& rows, const tensor& src);

/// y[r] += src[slots[r, j]] for j in ascending order of slots[r, :] (negative slots skipped):
/// y [m, ...] f32, slots [m, k] i32, src [n, ...] f32. When every source row s has exactly one
/// (r, j) with slots[r, j] == s, these are scatter_add_rows(y, rows, src)'s sums (rows[s] = r)
/// in its order -- the same bits -- at k loads per row instead of a scan of every source.
void gather_add_rows(tensor& y, const tensor& slots, const tensor& src);

/// y += x elementwise (same shape, f32).
void add_inplace(tensor& y, const tensor& x);

/// y[i] += table[positions[i] mod period] for every row i: y [n, width] f32, table [period,
/// width] f32, positions [n] i64 (the non-negative remainder: a row's phase in a period of
/// positions, e.g. a compressor's position bias). Reads positions on the device, so a CUDA
/// graph may capture it.
void add_position_rows(tensor& y, const tensor& table, const tensor& positions);
namespace detail {
/// add_position_rows' dtype and shape checks (both twins; device checks are theirs).
void check_position_rows(const tensor& y, const tensor& table, const tensor& positions);
}  // namespace detail

/// Rows of every tensor in `parts` (each [rows_i, dim...] f32, same trailing shape) stacked.
tensor concat_rows(std::span<const tensor> parts);

/// RMSNorm over the last dim of `x` [rows, dim]: x * rsqrt(mean(x^2) + eps) * weight, with
/// `weight` [dim] f32 or an undefined tensor for an unweighted norm. Returns [rows, dim].
tensor rms_norm(const tensor& x, const tensor& weight, float eps);
/// An activation with the FP8 quantization that a linear with act_quant_block == block computes
/// from it: codes [rows, cols] (e4m3 bytes) and scales [rows, cols / block] f32, filled by the
/// CUDA producers below in the kernel that computes x (one launch fewer per consumer). Where
/// they are empty (the CPU, shapes a fused kernel does not take) linear quantizes x itself;
/// either way the results are linear(x, w, {block})'s.
struct quantized_rows {
  tensor x;  ///< [rows, cols] f32
  tensor codes, scales;
  int block = 0;  ///< the activation block of codes and scales (0: x alone)
  /// CUDA producers, where cuBLASLt's block-scaled GEMM could read them (128-input blocks,
  /// rows a multiple of 16): the scales again as [cols / block, rows] (rows contiguous, as that
  /// GEMM reads them); else undefined. Rows of a copy cannot be sliced apart.
  tensor scales_mn;
};
/// rms_norm(x, weight, eps) with its quantization in blocks of `block` (quantized_rows).
quantized_rows rms_norm_quantized(const tensor& x, const tensor& weight, float eps, int block);

// ---- linear ------------------------------------------------------------------------------

struct linear_params {
  /// 0: multiply as is. > 0: first FP8-quantize each row of x per block of this many inputs
  /// with ue8m0 scales (DeepSeek's activation quantization before FP8/FP4-weight GEMMs).
  int act_quant_block = 0;
};

/// y = x W^T: x [rows, in] f32, weight [out, in] in any stored format -> [rows, out] f32. The
/// weight is decoded exactly to fp32 inside the product (fp32 accumulation), so the result
/// equals that of the dequantized fp32 matrix bit for bit.
tensor linear(const tensor& x, const weight_matrix& weight, const linear_params& params = {});

/// linear(x, a, params) and linear(x, b, params) -- exactly those results -- for two weights
/// that read the same input (V4's wq_a and wkv, an FFN's w1 and w3): on CUDA the activation
/// quantization runs once for both where both products take it.
std::pair<tensor, tensor> linear_pair(const tensor& x, const weight_matrix& a,
                                      const weight_matrix& b, const linear_params& params = {});

/// Block-diagonal grouped projection: x [rows, groups, in] and weight [groups * out, in]
/// (group g owns rows [g*out, (g+1)*out)) -> [rows, groups, out].
tensor grouped_linear(const tensor& x, const weight_matrix& weight);

struct expert_linear_params {
  int act_quant_block = 0;                ///< as linear_params::act_quant_block
  std::int64_t max_rows_per_expert = 0;   ///< bound on any expert's rows (0: all rows); the
                                          ///< CUDA kernel sizes its grid by it
  /// CUDA: rows an expert typically has when max_rows_per_expert is a loose bound (0: size
  /// the kernel's token tile by the bound). A small hint keeps the narrow tile (more blocks
  /// per SM); the grid still covers the bound, its surplus blocks exit at once.
  std::int64_t tile_rows_hint = 0;
  /// The caller's promise that offsets[experts] == x's rows (every row in some expert's range,
  /// as group_by_expert's gathered rows are): CUDA then leaves the output unzeroed before the
  /// kernels store every row (no fill node in a decode step). False: rows outside every range
  /// are zeroed as documented below.
  bool rows_all_grouped = false;
};

/// All MoE experts' projections in one call: rows [offsets[e], offsets[e+1]) of x [rows, in]
/// f32 (grouped by expert) go through expert e's matrix, rows [e*out, (e+1)*out) of `weights`
/// [experts * out, in] (the experts stacked in one stored-format matrix; out a multiple of
/// its scale block rows) -> [rows, out] f32, rows outside every range zero. offsets
/// [experts + 1] i32, non-decreasing, lives on x's device.
tensor expert_linear(const tensor& x, const tensor& offsets, const weight_matrix& weights,
                     const expert_linear_params& params = {});
/// linear(x.x, weight, params), from x's codes when they are params' quantization.
tensor linear(const quantized_rows& x, const weight_matrix& weight, const linear_params& params);
/// linear_pair(x.x, a, b, params), from x's codes when they are params' quantization.
std::pair<tensor, tensor> linear_pair(const quantized_rows& x, const weight_matrix& a,
                                      const weight_matrix& b, const linear_params& params);
/// expert_linear(x.x, ...), from x's codes when they are params' quantization.
tensor expert_linear(const quantized_rows& x, const tensor& offsets, const weight_matrix& weights,
                     const expert_linear_params& params);
/// expert_linear of x through `a` and through `b` (the experts' w1 and w3) -- exactly those
/// results -- with x's activation quantization done once on CUDA.
std::pair<tensor, tensor> expert_linear_pair(const tensor& x, const tensor& offsets,
                                             const weight_matrix& a, const weight_matrix& b,
                                             const expert_linear_params& params = {});

// ---- fake quantization (quantize, then dequantize in place) ------------------------------

/// FP8 e4m3 with a ue8m0 scale per `block` consecutive values of each row of `x` [rows, dim],
/// applied to the first `num_dims` values of the row (the rest pass through).
void fp8_fake_quant(tensor& x, int block, std::int64_t num_dims);

enum class fp4_scale : std::uint8_t { ue8m0, e4m3 };
/// FP4 e2m1 per `block` values of each row of `x` [rows, dim] with ue8m0 or e4m3 scales.
void fp4_fake_quant(tensor& x, int block, fp4_scale scale);

/// Normalised Walsh-Hadamard transform of each row of `x` [rows, dim] (dim a power of two),
/// in place: x <- H x / sqrt(dim), H the Sylvester-ordered Hadamard matrix.
void hadamard(tensor& x);

// ---- rotary embedding --------------------------------------------------------------------

/// Rotates, in place, the last 2 * inv_freq.size(0) values of every row of `x` [tokens, dim]
/// or [tokens, heads, dim] as interleaved (even, odd) pairs by angle positions[t] * inv_freq[i]
/// (angles formed in fp32), or by the negated angle when `inverse`.
void rotary(tensor& x, const tensor& positions, const tensor& inv_freq, bool inverse);

/// The window KV rows' preparation in one op: y = rms_norm(x, weight, eps), then rotary(y,
/// positions, inv_freq, false), then fp8_fake_quant(y, quant_block, quant_dims); x [tokens, dim].
/// The CPU runs exactly those three ops; the CUDA backend one kernel (a block per row).
tensor norm_rope_quant(const tensor& x, const tensor& weight, float eps, const tensor& positions,
                       const tensor& inv_freq, int quant_block, std::int64_t quant_dims);

// ---- attention ---------------------------------------------------------------------------

struct sparse_attention_params {
  float softmax_scale = 1.0f;
};

/// Attention of q [tokens, heads, dim] over the rows of kv [entries, dim] (one shared K = V
/// head) that `indices` [tokens, k] i32 names per token (-1 = unused slot), with a per-head
/// sink [heads] that joins the softmax denominator only. Returns [tokens, heads, dim].
tensor sparse_attention(const tensor& q, const tensor& kv, const tensor& sinks,
                        const tensor& indices, const sparse_attention_params& params);

// ---- scores and selection ----------------------------------------------------------------

/// Indexer scores [tokens, entries]: sum_h relu(q[t,h] . keys[e]) * weights[t,h], with
/// q [tokens, heads, dim], keys [entries, dim], weights [tokens, heads].
tensor index_scores(const tensor& q, const tensor& keys, const tensor& weights);

/// Indices [rows, k] i32 of the k largest values of each row of `scores` [rows, n] (k <= n),
/// in descending order of score; picks whose score is -inf come back as -1.
tensor topk(const tensor& scores, int k);

/// Top-k per row of `scores` [tokens, entries] after masking to -inf every entry e >=
/// visible[t] (`visible` [tokens] i64) and, when `allowed` [tokens, entries] u8 is defined,
/// every entry it marks 0. The same picks as topk (ties: the lower index) but returned in
/// ascending entry order, the masked picks as -1 after them: [tokens, k] i32 entry ids.
tensor masked_topk(const tensor& scores, const tensor& visible, const tensor& allowed, int k);

/// Level one of V4.1's two-level top-k: per token, score each block of `block_size` entries
/// by its best visible entry, always keep the block holding entry visible[t] - 1, keep the
/// `topk_blocks` best blocks with a finite score. Returns [tokens, entries] u8 (1 = kept).
tensor candidate_blocks(const tensor& scores, const tensor& visible, int topk_blocks,
                        int block_size);

// ---- MoE ---------------------------------------------------------------------------------

struct router_params {
  int top_k = 1;
  float gate_temp = 1.0f;      ///< logits are divided by it before the score function
  float route_scale = 1.0f;    ///< routed_scaling_factor
  bool normalize = true;       ///< divide the chosen weights by their sum
  float normalize_eps = 0.0f;  ///< added to that sum (V4.1: 1e-20)
};

struct routing {
  tensor weights;  // [tokens, top_k] f32
  tensor experts;  // [tokens, top_k] i32
};

/// MoE routing from gate logits [tokens, experts]: s = sqrt(softplus(logits / temp)); the
/// experts are the top-k of s + bias ([experts], undefined = none) or, when `fixed` [tokens,
/// top_k] i32 is defined (hash routing), those; weights = s[experts], normalised, scaled.
routing route(const tensor& logits, const tensor& bias, const tensor& fixed,
              const router_params& params);

/// Routed (token, expert) pairs grouped by expert, as ops::expert_linear takes them: pair
/// (r, j) of routing [tokens, k] lands in expert experts[r, j]'s group; within a group in
/// (r, j) order. Computed where the routing lives (no host read-back on the GPU).
struct expert_groups {
  tensor rows;     // [tokens * k] i64 token row of each grouped pair
  tensor weights;  // [tokens * k] f32 its routing weight
  tensor offsets;  // [experts + 1] i32 group e is [offsets[e], offsets[e + 1])
  tensor slots;    // [tokens * k] i32 the grouped row of pair i (rows[slots[i]] == i / k)
};
expert_groups group_by_expert(const routing& route, int experts);

/// silu(min(gate, limit)) * clamp(up, -limit, limit) (no clamp when limit <= 0), each row
/// scaled by row_scale[row] when `row_scale` [rows] is defined. gate, up [rows, inter].
tensor swiglu(const tensor& gate, const tensor& up, float limit, const tensor& row_scale);
/// swiglu(...) with its quantization in blocks of `block` (quantized_rows; block 0: none).
quantized_rows swiglu_quantized(const tensor& gate, const tensor& up, float limit,
                                const tensor& row_scale, int block);

// ---- compressor --------------------------------------------------------------------------

struct compress_params {
  int ratio = 1;         ///< tokens per entry
  bool overlap = false;  ///< V4 ratio 4: an entry also pools the previous group (first half)
};

/// Feeds the projected rows of consecutive tokens at positions [start, start + n) through a
/// compressor's partial-group state and returns the entries that complete, pooled with a
/// per-channel softmax over their group: [completed, entry_dim] f32. kv, score: [n, width]
/// (score with any position bias already added), width = (overlap ? 2 : 1) * entry_dim.
/// state_kv, state_score: [(overlap ? 2 : 1) * ratio, width], updated in place (the overlap
/// half holds the previous complete group). Initial state: kv 0, score -inf.
tensor compress_tokens(const tensor& kv, const tensor& score, std::int64_t start, tensor& state_kv,
                       tensor& state_score, const compress_params& params);

// ---- Engram ------------------------------------------------------------------------------

struct engram_params {
  float eps = 1e-20f;   ///< of both RMS statistics
  float clamp = 1e-6f;  ///< floor of |dot| before the signed square root
};

/// Adds the gated Engram value to each stream: h [tokens, hc, dim], key [tokens, hc, dim],
/// value [tokens, dim], weight [hc, dim] (q_weight * k_weight). gate = sigmoid(signed sqrt of
/// sum(h * weight * key) * rsqrt(ms(h) + eps) * rsqrt(ms(key) + eps) / sqrt(dim)). Returns
/// h + gate * value, [tokens, hc, dim].
tensor engram_gate(const tensor& h, const tensor& key, const tensor& value, const tensor& weight,
                   const engram_params& params);
/// engram_gate with the keys and the value read in place from the Engram projection's rows:
/// kv [tokens, (hc + 1) * dim] holds each token's hc keys, then its value. The same result,
/// bit for bit, as engram_gate on those rows gathered apart -- without the two gathers.
tensor engram_gate_kv(const tensor& h, const tensor& kv, const tensor& weight,
                      const engram_params& params);

// ---- manifold hyper-connections ----------------------------------------------------------

struct hc_params {
  int hc_mult = 4;
  int sinkhorn_iters = 20;
  float hc_eps = 1e-6f;    ///< added to pre and to the Sinkhorn sums
  float norm_eps = 1e-6f;  ///< of the RMS statistic of the flattened streams
};

struct hc_mix {
  tensor pre;   // [tokens, hc]
  tensor post;  // [tokens, hc]
  tensor comb;  // [tokens, hc, hc]: comb[j][k] moves stream j into stream k
};

/// The mixing coefficients of one mHC site from streams x [tokens, hc, dim]: mixes =
/// (x_flat fn^T) * rsqrt(mean(x_flat^2) + norm_eps) with fn [(2+hc)*hc, hc*dim]; pre =
/// sigmoid(.)+eps, post = 2 sigmoid(.), comb = Sinkhorn(softmax rows) (scale [3], base).
hc_mix hc_mixes(const tensor& x, const tensor& fn, const tensor& scale, const tensor& base,
                const hc_params& params);

/// The V4 head mix: pre = sigmoid(mixes * scale[0] + base) + hc_eps with fn [hc, hc*dim].
tensor hc_head_pre(const tensor& x, const tensor& fn, const tensor& scale, const tensor& base,
                   const hc_params& params);

/// sum_k pre[t,k] * x[t,k,:]: x [tokens, hc, dim], pre [tokens, hc] -> [tokens, dim].
tensor hc_collapse(const tensor& x, const tensor& pre);

/// rms_norm(hc_collapse(x, pre), weight, eps) in one op (the CUDA backend: one kernel, a block
/// per token, instead of two launches); the CPU computes exactly the two ops.
tensor hc_collapse_norm(const tensor& x, const tensor& pre, const tensor& weight, float eps);
/// hc_collapse_norm with its quantization in blocks of `block` (quantized_rows).
quantized_rows hc_collapse_norm_quantized(const tensor& x, const tensor& pre, const tensor& weight,
                                          float eps, int block);

/// out_k = post_k * y + sum_j comb[j][k] * residual_j: y [tokens, dim], residual
/// [tokens, hc, dim], post [tokens, hc], comb [tokens, hc, hc] -> [tokens, hc, dim].
tensor hc_expand(const tensor& y, const tensor& residual, const tensor& post, const tensor& comb);

// ---- quantized cache rows ----------------------------------------------------------------

/// Quantizes x [rows, fmt.dim()] f32 into packed rows out [rows, fmt.row_bytes()] u8.
void encode_cache_rows(const tensor& x, const cache_row_format& fmt, tensor& out);

/// Decodes packed rows [rows, fmt.row_bytes()] u8 into out [rows, fmt.dim()] f32.
void decode_cache_rows(const tensor& rows, const cache_row_format& fmt, tensor& out);

}  // namespace di::ops
