// The CUDA backend of the op interface: the same functions and contracts as di::ops (see
// kernels/ops.hpp), for tensors on a CUDA device. Each entry point checks shapes and dtypes on
// the host, allocates its outputs on the operands' device and enqueues its kernels on the
// current stream (kernels/cuda/stream.hpp) without waiting for them. kernels/ops.cpp
// dispatches here when the first operand lives on a CUDA device.
//
// Index operands (ids, rows) are device tensors: a bad index is a di::error raised after a
// short sync, except while a CUDA graph is being captured (the row is then NaN / skipped).
#pragma once

#include "kernels/ops.hpp"

namespace di::cuda {

using ops::expert_linear_params;
using ops::fp4_scale;
using ops::linear_params;
using ops::quantized_rows;

tensor embedding(const tensor& table, const tensor& ids);
tensor embedding_fp8(const tensor& codes, const tensor& scales, const tensor& ids);
tensor gather_rows(const tensor& x, const tensor& rows);
void scatter_add_rows(tensor& y, const tensor& rows, const tensor& src);
void gather_add_rows(tensor& y, const tensor& slots, const tensor& src);
void add_inplace(tensor& y, const tensor& x);
void add_position_rows(tensor& y, const tensor& table, const tensor& positions);
tensor concat_rows(std::span<const tensor> parts);
tensor rms_norm(const tensor& x, const tensor& weight, float eps);
quantized_rows rms_norm_quantized(const tensor& x, const tensor& weight, float eps, int block);
/// Whether the producers of quantized_rows fill its codes for rows of `dim` in activation blocks
/// of `block`: DEEPINFER_FUSED_ACT_QUANT not 0, block 32, 64 or 128 and dividing dim. Defined
/// in basic_ops.cpp.
bool fuses_act_quant(int block, std::int64_t dim);
/// A quantized_rows of [rows, dim] values on `dev`, with room for their codes and scales in
/// blocks of `block` (which fuses_act_quant accepted). Defined in basic_ops.cpp.
quantized_rows quantized_rows_for(std::int64_t rows, std::int64_t dim, int block, device dev);
void fp8_fake_quant(tensor& x, int block, std::int64_t num_dims);
/// x itself when block <= 0 (no quantization), else an FP8 fake-quantized copy of x [rows, dim]
/// (blocks of `block` over all of a row). Defined in basic_ops.cpp.
tensor fp8_fake_quantized(const tensor& x, int block);
void fp4_fake_quant(tensor& x, int block, fp4_scale scale);
void hadamard(tensor& x);
void rotary(tensor& x, const tensor& positions, const tensor& inv_freq, bool inverse);
tensor norm_rope_quant(const tensor& x, const tensor& weight, float eps, const tensor& positions,
                       const tensor& inv_freq, int quant_block, std::int64_t quant_dims);

// ---- GEMMs (kernels/cuda/gemm.cpp) --------------------------------------------------------
//
// A CUDA weight_matrix keeps the format it was uploaded in (weight_to): FP8 e4m3 with block
// scales and packed MXFP4 run on sm90_block_gemm (activations FP8-quantized per
// act_quant_block, as the CPU's act_quant path), BF16 on cuBLAS (the correctness path: upload
// dequantize_weight(w, dtype::bf16)), f32 on cuBLAS SGEMM. Without activation quantization a
// stored-format weight is decoded exactly to an fp32 temporary and multiplied by SGEMM.

tensor linear(const tensor& x, const weight_matrix& weight, const linear_params& params);
tensor linear(const quantized_rows& x, const weight_matrix& weight, const linear_params& params);
std::pair<tensor, tensor> linear_pair(const quantized_rows& x, const weight_matrix& a,
                                      const weight_matrix& b, const linear_params& params);
tensor expert_linear(const quantized_rows& x, const tensor& offsets, const weight_matrix& weights,
                     const expert_linear_params& params);
std::pair<tensor, tensor> linear_pair(const tensor& x, const weight_matrix& a,
                                      const weight_matrix& b, const linear_params& params);
tensor grouped_linear(const tensor& x, const weight_matrix& weight);
tensor expert_linear(const tensor& x, const tensor& offsets, const weight_matrix& weights,
                     const expert_linear_params& params);
std::pair<tensor, tensor> expert_linear_pair(const tensor& x, const tensor& offsets,
                                             const weight_matrix& a, const weight_matrix& b,
                                             const expert_linear_params& params);

/// Which kernel multiplies FP8/FP4 weights when activations are quantized (tests and
/// benchmarks force one). `automatic`: cuBLASLt's block-scaled FP8 GEMM for 128x128 FP8 blocks
/// from set_cublaslt_min_rows' rows (256) when it accepts the shape, other FP8 weights from
/// set_bf16_temp_min_rows' rows (256) as dequant_bf16, else sm90_block_gemm.
/// `dequant_bf16`: the weight decoded to a bf16 temporary per call, then cuBLAS (exact: quantized
/// activations and decoded weights are bf16 numbers).
enum class gemm_backend { automatic, block_gemm, cublaslt, dequant_fp32, dequant_bf16 };
void set_gemm_backend(gemm_backend backend);
gemm_backend get_gemm_backend();
/// Rows from which `automatic` tries cuBLASLt's block-scaled FP8 GEMM (default 256; 16 also
/// takes V4's decode batches of 16k rows; with ordered splits never below 256, which keeps
/// decode batch-invariant; DEEPINFER_LT_ROWS sets the default). Below 1 is a di::error.
/// Defined in gemm.cpp.
void set_cublaslt_min_rows(std::int64_t rows);
std::int64_t get_cublaslt_min_rows();
/// Rows from which `automatic` multiplies FP8 weights that cuBLASLt's block-scaled GEMM does not
/// take (V4.1's 32-input blocks; V4's at row counts it refuses) as dequant_bf16 does -- the weight
/// decoded to a bf16 temporary, then cuBLAS -- instead of on sm90_block_gemm (default 256: prefill;
/// DEEPINFER_BF16_ROWS sets the default, a huge value turns it off). Exact either way: the same
/// products, other sums. Below 1 is a di::error. Defined in gemm.cpp.
void set_bf16_temp_min_rows(std::int64_t rows);
std::int64_t get_bf16_temp_min_rows();

/// sm90_block_gemm's K splits (decode shapes) add their partial sums with fp32 atomics by
/// default, in an order that varies from run to run. Ordered: each split stores its partials
/// and the last block of a tile adds them in split order -- bit-reproducible, and (split counts
/// depend on the batch only beyond 64 rows) the same for a row whatever else is in the batch.
/// Off by default (tested on the H200 in session 5; its cost was within the run-to-run spread).
/// Decode tiles of up to 8 rows run on stream_gemm, whose K splits are deterministic anyway.
void set_ordered_gemm_splits(bool on);
bool get_ordered_gemm_splits();

/// Decode tiles (<= 8 rows per group) go to stream_gemm -- weights streamed from global memory
/// into registers, K split by the weight's shape only (deterministic, batch-invariant up to 8
/// rows) -- unless switched off (then sm90_block_gemm's shared-memory tiles; default from
/// DEEPINFER_STREAM_GEMM=0). Defined in sm90_block_gemm.cu.
void set_stream_gemm(bool on);
bool get_stream_gemm();
/// stream_gemm's dense launches request their first weights before waiting for the previous
/// kernel (PDL; the weights must not be written by the kernel launched just before -- none
/// of the engine's are): on by default, DEEPINFER_STREAM_EARLY=0 off. The same sums either
/// way. Defined in stream_gemm.cu.
void set_stream_gemm_early(bool on);
bool get_stream_gemm_early();
/// stream_gemm reads FP8 weights (K a multiple of 64) in 16-byte loads, two lanes swapping
/// halves so that each holds its MMA fragments: on by default, DEEPINFER_STREAM_WIDE=0 off
/// (8-byte fragment loads). Each step sums the same products arranged differently: results
/// differ from the 8-byte loads' in rounding only; with either setting the same bits for a
/// token at any batch of up to 8 rows. Defined in stream_gemm.cu.
void set_stream_gemm_wide(bool on);
bool get_stream_gemm_wide();
/// linear_pair's two dense FP8 weights over the same decode rows (<= 8) in one stream_gemm
/// launch where each would take stream_gemm with the same plan (the attention's wq_a and wkv,
/// the shared expert's w1 and w3): on by default, DEEPINFER_STREAM_PAIR=0 off (two launches).
/// The same bits either way. Defined in stream_gemm.cu.
void set_stream_gemm_pair(bool on);
bool get_stream_gemm_pair();
/// Dense FP8 decode tiles (<= 8 rows) go to dense_wg_gemm -- the FP8 warpgroup MMA, native on
/// the H200, where stream_gemm's mma.sync e4m3 is emulated; K split by the weight's shape only
/// across a thread-block cluster (deterministic, batch-invariant up to 8 rows) -- when switched
/// on. Off by default (DEEPINFER_DENSE_WG=1 turns it on): on the H200 it streams no faster than
/// stream_gemm (session 20: wo_b 21.6 vs 20.7 us, v41-flash-L4 b1 1.81 vs 1.68 ms). Early: each
/// block loads its first weights before waiting for the previous kernel (PDL; the weights are
/// constant), default from DEEPINFER_DENSE_WG_EARLY=0. Batch: steps per load batch, 4 or 8 (the
/// default; DEEPINFER_DENSE_WG_BATCH), the same sums. Defined in dense_wg_gemm.cu.
void set_dense_wg_gemm(bool on);
bool get_dense_wg_gemm();
/// Dense FP8 GEMMs of 9..64 rows (decode batches) on dense_wg_gemm's wide tiles -- 16, 32 or 64
/// tokens a wgmma (m64nNk32), a promotion per step, or per 4 steps where both scale blocks span
/// 128 inputs (V4), K splits added with fp32 atomics -- never with ordered splits (the
/// batch-invariant mode). -1 (the default): instead of skinny_gemm, i.e. for the weights
/// cuBLASLt does not take (V4.1's 32 x 32 scale blocks); 1: also ahead of cuBLASLt (V4's 128 x
/// 128 blocks; measured slower there on the H200); 0: never. DEEPINFER_DENSE_WG_WIDE sets the
/// default; any other value is a di::error. Defined in dense_wg_gemm.cu.
void set_dense_wg_gemm_wide(int mode);
int get_dense_wg_gemm_wide();
void set_dense_wg_gemm_early(bool on);
void set_dense_wg_gemm_batch(int steps);
/// Launches of dense_wg_gemm so far in this process (tests: that it served a GEMM).
long dense_wg_gemm_launches();
/// Dense FP8 GEMMs of 9..64 rows with V4's 128 x 128 blocks on ring_gemm (TMA ring, persistent
/// blocks) instead of cuBLASLt: opt-in, DEEPINFER_RING_GEMM=1 (kernel by kernel a little faster
/// than cuBLASLt, in a decode step not: session 35); never in the batch-invariant mode.
/// set_ring_gemm_early(false) (DEEPINFER_RING_GEMM_EARLY=0) requests the first weights after the
/// wait for the previous kernel. Defined in ring_gemm.cu.
void set_ring_gemm(bool on);
bool get_ring_gemm();
void set_ring_gemm_early(bool on);
long ring_gemm_launches();
/// Dense FP8 GEMMs of 9..64 rows go to skinny_gemm unless switched off (then sm90_block_gemm's
/// tiles; default from DEEPINFER_SKINNY_GEMM=0). Defined in sm90_block_gemm.cu.
void set_skinny_gemm(bool on);
bool get_skinny_gemm();
/// Decode tiles of interleaved MXFP4 weights (the routed experts) go to pipe_gemm -- the
/// weights copied into shared memory by the bulk-copy engine, the same bits as stream_gemm --
/// when switched on. Off by default (DEEPINFER_PIPE_GEMM=1 turns it on): on the H200 it still
/// streams slower than stream_gemm (README, session 9). Defined in pipe_gemm.cu.
void set_pipe_gemm(bool on);
bool get_pipe_gemm();
/// Launches of pipe_gemm so far in this process (tests: that it served a GEMM).
long pipe_gemm_launches();
/// Decode tiles of interleaved MXFP4 weights (the routed experts) go to wg_gemm -- the FP8
/// warpgroup MMA, native on the H200, where stream_gemm's mma.sync e4m3 is emulated -- unless
/// switched off (then pipe_gemm when that is on, else stream_gemm; default from
/// DEEPINFER_WG_GEMM=0). Defined in wg_gemm.cu.
void set_wg_gemm(bool on);
bool get_wg_gemm();
/// Launches of wg_gemm so far in this process (tests: that it served a GEMM).
long wg_gemm_launches();
/// Of those, the launches on its persistent blocks (set_wg_gemm_chain).
long wg_gemm_chain_launches();
/// Grouped GEMMs of wider token tiles than decode's 8 rows (prefill's routed experts, eager
/// steps of large batches) also go to wg_gemm when it takes them -- it walks their 8-token
/// tiles, several blocks per group (the tile hint sets how many), with the sums it gives a
/// decode step (a token's expert outputs do not depend on its group's size) -- instead of
/// sm90_block_gemm's shared-memory tiles, whose mma.sync e4m3 sm_90 emulates. On by default;
/// DEEPINFER_WG_PREFILL=0 sets the default off. Defined in sm90_block_gemm.cu.
void set_wg_gemm_wide_tiles(bool on);
bool get_wg_gemm_wide_tiles();
/// wg_gemm's walked prefill-sized groups in 32-token tiles (m64n32k32: each weight fragment
/// decoded and each weight byte read from the L2 once per 32 tokens instead of 8) when a typical
/// group has 24 rows or more and the tile's B fits: 1 on (the default; the same bits as the
/// 8-token tiles), 0 off, 2 on with B's descriptor offsets swapped (a diagnostic: wrong
/// results). DEEPINFER_WG_N32 sets the default. Defined in wg_gemm.cu.
void set_wg_gemm_n32(int mode);
int get_wg_gemm_n32();
/// Prefill-sized groups whose 32-token B does not fit one K split take two (the default;
/// DEEPINFER_WG_N32_SPLIT=0: 8-token tiles, as before). Defined in wg_gemm.cu.
void set_wg_gemm_n32_split(bool on);
bool get_wg_gemm_n32_split();
/// Prefill-sized groups (32-token tiles) multiply in bf16 -- the weights' e2m1 values times
/// their scales and the activation codes times theirs, both exact in bf16, accumulated in the
/// wgmma's fp32 without a promotion per 32-input step -- on by default (DEEPINFER_WG_BF16=0: the
/// FP8 tiles); never with ordered splits. Sums in another order than the FP8 tiles (rounding-level
/// differences). Defined in wg_gemm.cu.
void set_wg_gemm_bf16(bool on);
bool get_wg_gemm_bf16();
/// Decode steps whose routed experts stream through wg_gemm's ring (batch >= 22 on V4 / V4.1)
/// on persistent blocks that take (token tile, row block) items in turn, each warp's weight
/// stream running on from one item into the next: on by default (DEEPINFER_WG_CHAIN=0 off, a
/// block per item); the same bits either way. Defined in wg_gemm.cu.
void set_wg_gemm_chain(bool on);
bool get_wg_gemm_chain();
/// The deepest weight ring (runs per warp) those blocks may take: 4 (the default) .. 6
/// (DEEPINFER_WG_CHAIN_RING); used where two blocks per SM still fit and every warp has the runs
/// (V4's and V4.1's w2 at 5). The same bits at any depth. Defined in wg_gemm.cu.
void set_wg_gemm_chain_ring(int runs);
int get_wg_gemm_chain_ring();
/// Warpgroups per block of that bf16 kernel (each 128 rows sharing the block's staged
/// activations): 3 (the default) or 2; the same bits either way. DEEPINFER_WG_BF16_WGS sets the
/// default; anything else is an error. Defined in wg_gemm.cu.
void set_wg_gemm_bf16_warpgroups(int n);
int get_wg_gemm_bf16_warpgroups();
/// The routed experts' w1 and w3 (expert_linear_pair) in one wg_gemm launch when it takes them:
/// 2 (the default) with the K splits the pair's row blocks together ask for (V4 and V4.1: one,
/// where each weight alone has two -- other last bits than a single launch, from the shapes
/// only, so prefill and decode still agree), 1 with each weight's own splits (the bits of two
/// launches), 0 two launches. DEEPINFER_WG_PAIR sets the default. Defined in wg_gemm.cu.
void set_wg_gemm_pair(int mode);
int get_wg_gemm_pair();
/// wg_gemm streams its weights through a per-warp shared-memory ring of 4 runs (cp.async: more
/// bytes in flight, no registers held) instead of one run ahead in registers; the same bits.
/// 1 always, 0 never, -1 (the default) from 128 routed rows on (batches of about 22 tokens and
/// more); DEEPINFER_WG_RING sets the default; any other value is a di::error. Defined in
/// wg_gemm.cu.
void set_wg_gemm_ring(int mode);
/// stream_gemm's FP8 (steps per load batch, blocks per SM): -1 = by shape (default), 0 = (4, 2),
/// 1 = (2, 3); the same results either way. Any other value is a di::error.
/// DEEPINFER_STREAM_VARIANT sets the default (a value other than -1, 0 or 1 is ignored with a
/// warning on stderr). Defined in stream_gemm.cu.
void set_stream_gemm_variant(int variant);
/// grouped_linear's decode batches (1..64 rows, FP8 with e8m0 scales) on fp8_split_gemm (bf16
/// tensor cores, activations split into two bf16 parts) -- the default -- or, switched off, on
/// fp8_gemv (CUDA cores, fp32 activations). For benchmarks and tests. Defined in gemm.cpp.
void set_split_gemm(bool on);
/// Within that: 9..64 rows on fp8_split_wg (warpgroup MMA; the default, DEEPINFER_SPLIT_WG=0
/// off) or on fp8_split_gemm's mma.sync. Defined in gemm.cpp.
void set_split_wg(bool on);
bool get_split_wg();
/// fp8_split_wg's activations split once into a B image that the bulk-copy engine stages (the
/// default; DEEPINFER_SPLIT_WG_STAGED=0 off) or split by the GEMM's threads per chunk. The same
/// bits either way. Defined in gemm.cpp.
void set_split_wg_staged(bool on);
bool get_split_wg_staged();
/// linear's fp32 weights with 1..8 rows on f32_gemv (the default; DEEPINFER_F32_GEMV=0 off) or
/// on cuBLAS SGEMV / SGEMM. Defined in gemm.cpp.
void set_f32_gemv(bool on);
/// linear's bf16 weights (the output head) of 1..rows rows on f32_gemv too -- fp32 activations
/// times the bf16 values, as the CPU multiplies them, while set_f32_gemv is on -- and more rows
/// on cuBLAS's bf16 GEMM with the activations rounded to bf16. 0..8; DEEPINFER_BF16_GEMV_ROWS
/// sets the default (bf16_gemv_default_rows; 0: the cuBLAS GEMM alone). Defined in gemm.cpp.
constexpr int bf16_gemv_default_rows = 1;
void set_bf16_gemv_rows(int rows);
bool get_split_gemm();

/// The weight decoded exactly (value times its block scale) to `to` (bf16 or f32), on the
/// weight's device: the dequantize-at-load path.
weight_matrix dequantize_weight(const weight_matrix& w, dtype to);

/// `w` with its packed FP4 rows in the layout asked for (weight_matrix::interleaved): the
/// interleaved one lets stream_gemm's warps read their fragments as contiguous 512-byte loads
/// (every block_gemm kernel and dequantize_weight read both layouts, with the same results;
/// a GEMM on it needs outputs per group in whole 32-row stripes). A weight that is not packed
/// FP4, is already in that layout, or whose shape does not take it (rows not a multiple of
/// fp4_interleave_rows or fp4_interleave_bytes) comes back as it is.
weight_matrix with_fp4_layout(const weight_matrix& w, bool interleaved);
/// Whether the model upload interleaves packed FP4 weights (default on; DEEPINFER_FP4_INTERLEAVE=0
/// switches it off for comparisons).
bool fp4_interleave_default();

/// Experts' matrices stacked into one [experts * rows, cols] matrix on `dev` (same format and
/// block), as expert_linear takes them. With `interleave`, packed FP4 experts whose rows are
/// whole stripes (rows % fp4_interleave_rows == 0, row bytes % fp4_interleave_bytes == 0) land
/// in weight_matrix::interleaved's layout -- the layout is stripe-local, so each expert is
/// interleaved into its own slice through a one-expert device temporary instead of the whole
/// stack being copied (the same bytes as with_fp4_layout(stack_weights(...), true)).
weight_matrix stack_weights(std::span<const weight_matrix> experts, device dev,
                            bool interleave = false);

/// True when the last FP8 GEMM that asked cuBLASLt for its block-scaled kernel got one.
bool cublaslt_block_fp8_available();
/// `w` with weight_matrix::lt_scales made (FP8 with 128 x 128 blocks on a CUDA device; any
/// other weight comes back as it is): cuBLASLt's GEMMs on it then launch no scale conversion
/// (30 launches per v4-flash-L4 step at batch 64, session 14's profile). The same values as the
/// per-call conversion: the same results. Defined in cublas_gemm.cpp.
weight_matrix with_lt_scales(const weight_matrix& w);
/// `w` (f32 values on a CUDA device that came from `source`, a bf16 matrix: then every value
/// is a bf16 value exactly) with weight_matrix::bf16_values made; any other weight comes back
/// as it is. Defined in gemm.cpp.
weight_matrix with_bf16_copy(const weight_matrix& w, const weight_matrix& source);
/// `w` with weight_matrix::decode_tiles made (a dense FP8 matrix on a CUDA device with e8m0
/// scales in 32-input blocks of a multiple of 16 rows, K a multiple of 128 -- V4.1's -- while
/// set_tile_gemv is on); any other weight comes back as it is. Defined in gemm.cpp.
weight_matrix with_decode_tiles(const weight_matrix& w);
/// On by default. DEEPINFER_TILE_GEMV=0 / set_tile_gemv(false): no decode tiles are made (a
/// second copy of V4.1's dense FP8 codes: ~4% of a V4.1-Flash checkpoint) and the decode GEMMs
/// of weights that have them run on stream_gemm over the row-major codes (tile_gemv.cu).
void set_tile_gemv(bool on);
bool get_tile_gemv();
/// linear's f32 weights that carry bf16_values, for more rows than f32_gemv takes, and
/// grouped_linear's prefill rows (FP8 with e8m0 scales or bf16 weights, decoded to bf16 --
/// exactly): x split into hi = bf16(x) and lo = bf16(x - hi) and y = W hi + W lo on cuBLAS's
/// bf16 tensor-core GEMM (on by default; DEEPINFER_SPLIT_BF16=0 or this switch: SGEMM as
/// before). Defined in gemm.cpp.
void set_split_bf16_linear(bool on);
bool get_split_bf16_linear();

}  // namespace di::cuda
