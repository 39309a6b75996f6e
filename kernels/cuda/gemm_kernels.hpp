// Launchers of the CUDA GEMMs in the stored formats (C++17, raw device pointers):
//  - act_quant: activations -> FP8 e4m3 codes + one power-of-two (ue8m0) fp32 scale per block,
//    the same codes the CPU's fp8_fake_quant rounds to;
//  - block_gemm: y = x W^T with W in FP8 e4m3 (block scales, any block multiple of 16 x 32)
//    or packed MXFP4 (e2m1, ue8m0 per 32 inputs), read as stored and decoded in registers,
//    with mma.sync m16n8k32 e4m3 (fp32 accumulation, promoted to an fp32 accumulator with the
//    scales every scale block; on sm_90 ptxas emulates that instruction with e4m3 -> f16
//    conversions and f16 HMMAs), or for interleaved MXFP4 decode tiles with the native
//    warpgroup MMA (wg_gemm). Groups cover MoE experts (row ranges from device offsets) and
//    block-diagonal projections (column offsets);
//  - dequantize: a stored-format matrix -> fp32 or bf16 (exact decode), for the cuBLAS paths.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace di::cuda {

struct act_quant_params {
  const float* x;  ///< [rows, cols]
  std::int64_t rows;
  std::int64_t cols;    ///< multiple of block
  int block;            ///< values per scale
  std::uint8_t* codes;  ///< [rows, cols] e4m3
  float* scales;        ///< [rows, cols / block], or [cols / block, rows] when mn_major
  bool mn_major;        ///< scales laid out for cuBLASLt (rows contiguous)
};
void launch_act_quant(const act_quant_params& p, cudaStream_t stream);

struct block_gemm_params {
  const std::uint8_t* weight;       ///< FP8: [groups * n, k] codes; FP4: [groups * n, k / 2]
  const std::uint8_t* wscale_e8m0;  ///< weight scales as e8m0 bytes, or nullptr
  const float* wscale_f32;          ///< weight scales as fp32, when wscale_e8m0 is nullptr
  std::int64_t wscale_cols;         ///< scales per weight row block
  int block_rows;                   ///< weight rows per scale (FP4: 1)
  int block_cols;                   ///< weight inputs per scale (FP4: 32)
  bool fp4;
  bool fp4_interleaved;  ///< FP4 in weight_matrix::interleaved's layout (k % 128, n % 32 == 0)
  const std::uint8_t*
      act;  ///< e4m3 codes; row r of group g at act + r * act_stride + g * act_group_offset
  const float* act_scale;  ///< [rows, act_scale_stride]
  std::int64_t act_stride;
  std::int64_t act_group_offset;  ///< elements; 0 for MoE experts
  std::int64_t act_scale_stride;
  int act_block;                ///< activation values per scale
  const std::int32_t* offsets;  ///< [groups + 1] row ranges (device), or nullptr: rows each
  std::int64_t rows;            ///< rows of every group when offsets is nullptr; with offsets
                                ///< their total (0: unknown), which bounds the non-empty groups
  std::int64_t max_rows;        ///< bound on any group's rows (sizes the grid)
  std::int64_t tile_rows;       ///< rows the token tile is sized for (0: max_rows)
  std::int64_t n;               ///< outputs per group
  std::int64_t k;               ///< inputs (multiple of 32; of block_cols for FP8)
  int groups;
  float* y;  ///< row r of group g at y + r * y_stride + g * y_group_offset
  std::int64_t y_stride;
  std::int64_t y_group_offset;
  std::int64_t y_elements;  ///< size of the whole y buffer (zeroed when K is split)
  /// Deterministic split K (when plan_block_gemm(p).splits > 1): every split stores its partial
  /// sums in split_work[split * y_elements + ...] (y's layout) and the last block of a tile to
  /// finish adds them in split order into y; split_counters (tiles entries, zeroed by the
  /// caller) count the finished splits of each tile and are left zeroed again. Both nullptr:
  /// fp32 atomic adds into the zeroed y, whose order varies from run to run.
  float* split_work = nullptr;
  unsigned* split_counters = nullptr;
  /// y (and y_b) zeroed by the caller already: a K split's atomic adds need no memset.
  bool y_zeroed = false;
  /// A second weight of the same shape, format and scale layout over the same activations
  /// (the experts' w1 and w3), its outputs in y_b (y's layout): one wg_gemm launch computes
  /// both -- wg_gemm only (wg_gemm_takes), see set_wg_gemm_pair. nullptr: a single weight.
  const std::uint8_t* weight_b = nullptr;
  const std::uint8_t* wscale_e8m0_b = nullptr;
  float* y_b = nullptr;
  /// A dense pair of different heights (n_b > 0; stream_gemm only, stream_gemm_takes_pair): the
  /// second weight [n_b, k] -- FP8 in the first's format and scale blocks, scales in
  /// wscale_e8m0_b or wscale_f32_b -- over the same activations, its outputs in y_b with row
  /// stride y_stride_b. One launch: the first weight's row blocks, then the second's.
  std::int64_t n_b = 0;
  const float* wscale_f32_b = nullptr;
  std::int64_t y_stride_b = 0;
  /// The weight's (and a dense pair's second weight's) decode tiles (weight_matrix::
  /// decode_tiles), or nullptr: tile_gemv reads them instead of `weight` where it takes p.
  const std::uint8_t* tiles = nullptr;
  const std::uint8_t* tiles_b = nullptr;
};
/// tile_gemv (tile_gemv.cu): dense FP8 decode GEMMs (1..8 rows, one group) with 32-input scale
/// blocks on both sides, from the weight's decode tiles (a copy in MMA-fragment order; see
/// weight_matrix::decode_tiles), one weight or a dense pair (n_b, tiles_b) in one launch.
/// Whether it takes p (tiles set, shapes and alignments; set_tile_gemv on).
bool tile_gemv_takes(const block_gemm_params& p);
void launch_tile_gemv(const block_gemm_params& p, cudaStream_t stream);
/// Bytes of the decode tiles of an FP8 [n, k] weight (k a multiple of 32; n padded to 16).
std::size_t decode_tiles_bytes(std::int64_t n, std::int64_t k);
/// Writes the decode tiles of the row-major FP8 codes w [n, k].
void launch_make_decode_tiles(const std::uint8_t* w, std::uint8_t* tiles, std::int64_t n,
                              std::int64_t k, cudaStream_t stream);
/// How launch_block_gemm will run p: its K splits and the output tiles each split covers
/// (deterministic splits need splits * y_elements floats of split_work and tiles counters).
struct block_gemm_plan {
  int splits = 1;
  std::int64_t tiles = 0;
};
block_gemm_plan plan_block_gemm(const block_gemm_params& p);
/// Enqueues the GEMM (zeroing y first when it splits K across blocks with atomics). Token
/// tiles of at most 8 rows (decode) go to stream_gemm unless that is switched off.
/// (A pair -- p.weight_b set -- goes to wg_gemm, which must take it: block_gemm_takes_pair.)
void launch_block_gemm(const block_gemm_params& p, cudaStream_t stream);
/// Zeroes `elements` floats of a GEMM's output before K splits add into it: a kernel, so that
/// the programmatic launch of the GEMM after it goes on (a memset node would hold it up).
void zero_outputs(float* y, std::int64_t elements, cudaStream_t stream);
/// Whether p's pair of weights (p.weight_b) runs as one wg_gemm launch: where each weight alone
/// would go to wg_gemm (decode tiles; wider tiles only with set_wg_gemm_wide_tiles) and wg_gemm
/// takes the pair (set_wg_gemm_pair).
bool block_gemm_takes_pair(const block_gemm_params& p);
/// block_gemm's decode kernel (stream_gemm.cu): weights streamed into registers; its K splits
/// depend on the weight's shape only and add deterministically (no workspace).
void launch_stream_gemm(const block_gemm_params& p, cudaStream_t stream);
/// Whether p (a dense pair: n_b > 0) runs as one stream_gemm launch: each weight alone would go
/// to stream_gemm with the same plan (so each output has the bits of its own launch), and the
/// first weight's rows fill whole row blocks. launch_block_gemm runs such a pair; otherwise the
/// caller launches the two weights one after the other. set_stream_gemm_pair(false) /
/// DEEPINFER_STREAM_PAIR=0: never.
bool stream_gemm_takes_pair(const block_gemm_params& p);
/// stream_gemm's part of that (stream_gemm.cu): the same plan for both weights, whole row
/// blocks for the first, the switch on. launch_stream_gemm checks it for every pair.
bool stream_gemm_pair_fits(const block_gemm_params& p);
/// One weight of a dense pair (the first, or with `second` the second) as a launch of its own.
block_gemm_params dense_pair_part(const block_gemm_params& p, bool second);
/// How launch_stream_gemm runs p (host-side; depends on the weight's shape, the groups and the
/// switches, never on the rows: the grid's token tiles and compacted groups aside).
struct stream_gemm_plan {
  int warps_along_k;    ///< warps of a block splitting K (1, 2, 4, 8), added in warp order
  int k_splits;         ///< blocks along K (1 or 2: a cluster, added in distributed shared memory)
  int steps_per_split;  ///< 32-input steps per K split
  int warp_align;       ///< a warp's K range starts at a multiple of this many steps
  int batch_steps;      ///< steps per load batch
  int blocks_per_sm;    ///< the kernel's launch bound
  std::int64_t row_blocks, grid_groups, token_tiles;  ///< the grid
  bool wide_loads;  ///< FP8 weights in 16-byte loads (set_stream_gemm_wide; K a multiple of 64)
};
stream_gemm_plan plan_stream_gemm(const block_gemm_params& p);
/// block_gemm's decode kernel for interleaved MXFP4 weights (pipe_gemm.cu): the weights
/// streamed into shared memory by the bulk-copy engine through an mbarrier ring, consumed by
/// 8 warps per block. launch_block_gemm hands token tiles of <= 8 rows to it when
/// pipe_gemm_takes(p), which is false unless it is switched on (set_pipe_gemm,
/// DEEPINFER_PIPE_GEMM=1; off by default).
struct pipe_gemm_plan {
  int warps_along_k = 1;       ///< consumer warps per 32-row stripe splitting K (1, 2, 4, 8)
  std::int64_t row_blocks = 0;  ///< per group: 8 / warps_along_k stripes each
  std::int64_t blocks = 0;      ///< persistent blocks (one per SM at most)
  int tile_tokens = 0;          ///< token rows per tile (two tile buffers)
  int stages = 0;               ///< ring depth
  std::int64_t smem_bytes = 0;  ///< dynamic shared memory
};
bool pipe_gemm_takes(const block_gemm_params& p);
/// The launch on a GPU of `sms` multiprocessors (the grid only depends on it).
pipe_gemm_plan plan_pipe_gemm(const block_gemm_params& p, int sms = 132);
void launch_pipe_gemm(const block_gemm_params& p, cudaStream_t stream);
/// block_gemm's decode kernel for interleaved MXFP4 weights (wg_gemm.cu) on the warpgroup MMA
/// (wgmma e4m3, native on sm_90, where stream_gemm's mma.sync e4m3 is emulated): the routed
/// experts of a decode step. launch_block_gemm hands token tiles of <= 8 rows to it when
/// wg_gemm_takes(p) (switched on by default: set_wg_gemm, DEEPINFER_WG_GEMM=0 turns it off).
/// Its K splits depend on the weight's shape only (two warpgroups, two blocks with exact
/// atomics): deterministic and batch-invariant.
bool wg_gemm_takes(const block_gemm_params& p);
/// Whether GEMMs run in the batch-invariant mode (cuda_ops.hpp's set_ordered_gemm_splits).
bool get_ordered_gemm_splits();
struct wg_gemm_plan {
  int k_splits;         ///< blocks along K (1 or 2, exact atomics)
  int steps_per_split;  ///< 32-input steps per K split (its two warpgroups take half each)
  std::int64_t row_blocks, grid_groups;  ///< the grid (x: 128-row blocks -- 256 bf16 --, y: groups)
  bool walk;            ///< groups bounded by more than 8 rows: blocks walk their token tiles
  std::int64_t walkers;  ///< blocks walking each group's tiles (1 unless a tile hint > 8 rows)
  int tile_tokens;       ///< 8, or 32 for walked prefill-sized groups (set_wg_gemm_n32)
  bool bf16;             ///< 32-token tiles on the bf16 kernel (set_wg_gemm_bf16)
  bool chain;            ///< persistent blocks (wg_chain_kernel, set_wg_gemm_chain)
};
/// How launch_wg_gemm runs p: the splits from the weight's shape only, never the rows.
wg_gemm_plan plan_wg_gemm(const block_gemm_params& p);
/// Whether launch_wg_gemm streams p's weights through its shared-memory ring (set_wg_gemm_ring).
bool wg_gemm_uses_ring(const block_gemm_params& p);
void launch_wg_gemm(const block_gemm_params& p, cudaStream_t stream);
/// block_gemm's decode kernel for dense FP8 weights (dense_wg_gemm.cu) on the warpgroup MMA:
/// launch_block_gemm hands token tiles of <= 8 rows to it when dense_wg_gemm_takes(p) (switched
/// off by default: set_dense_wg_gemm), and of 9..64 rows with the wide tiles
/// (set_dense_wg_gemm_wide, on by default; never in the batch-invariant mode). The 8-row tiles'
/// K splits (a thread-block cluster, added in rank order) depend on the weight's shape only:
/// deterministic, batch-invariant up to 8 rows, no workspace; the wide tiles' splits (from the
/// shape and the tile) add into the zeroed output with fp32 atomics. It reads
/// the weight and its scales before waiting for the previous kernel (unless
/// set_dense_wg_gemm_early(false)): they must not be written by the kernel launched just before.
/// block_gemm's dense FP8 GEMM for decode batches of 9..64 rows with V4's 128 x 128 weight
/// blocks and 128-input activation blocks (ring_gemm.cu): weights and activations through a
/// TMA-filled shared-memory ring, persistent blocks, a promotion every 128 inputs. Whole tiles
/// (deterministic, batch-invariant within 9..64 rows) where they fill the grid's waves, else
/// "stream-K" with fp32 atomics into the zeroed output; never in the batch-invariant mode
/// (ordered splits). Opt-in (set_ring_gemm, DEEPINFER_RING_GEMM=1: no faster than cuBLASLt in a
/// decode step, session 35); the shape test alone is what gemm.cpp asks before it would choose
/// cuBLASLt.
bool ring_gemm_takes_shape(std::int64_t rows, bool fp8, int block_rows, int block_cols,
                           int act_block, std::int64_t k);
bool ring_gemm_takes(const block_gemm_params& p);
struct ring_gemm_plan {
  int blocks = 0;          ///< persistent blocks (at most one per multiprocessor)
  std::int64_t tiles = 0;  ///< 128-row tiles
  int blocks_k = 0;        ///< 128-input units per tile
  bool stream_k = false;   ///< units cut evenly across the blocks, atomics into a zeroed y
};
/// Host-side: how ring_gemm runs an [n, k] weight on `multiprocessors` SMs (never on the rows).
ring_gemm_plan plan_ring_gemm(std::int64_t n, std::int64_t k, int multiprocessors);
void launch_ring_gemm(const block_gemm_params& p, cudaStream_t stream);
bool dense_wg_gemm_takes(const block_gemm_params& p);
struct dense_wg_gemm_plan {
  int k_splits;            ///< blocks along K (1, 2, 4 or 8: one cluster)
  int steps_per_split;     ///< 32-input steps per K split
  std::int64_t row_tiles;  ///< 64-row blocks per group
  int batch_steps;         ///< steps per load batch
  int nt;                  ///< the token tile: 8, 16, 32 or 64 (the wgmma's N)
  bool fused;              ///< a promotion per 4 steps (both scale blocks >= 128 inputs)
  int tiles_per_block;     ///< row tiles a block takes in turn (wide tiles), sharing its B
};
dense_wg_gemm_plan plan_dense_wg_gemm(const block_gemm_params& p);
void launch_dense_wg_gemm(const block_gemm_params& p, cudaStream_t stream);
/// Dense FP8 GEMMs of 9..64 rows (skinny_gemm.cu): 128-row blocks whose warps share each
/// activation fragment, the block's K range of activations staged once in shared memory.
/// launch_block_gemm hands them over when skinny_gemm_takes(p) (and it is switched on); its
/// plan (K splits, row blocks as tiles) is what plan_block_gemm reports for them.
bool skinny_gemm_takes(const block_gemm_params& p);
block_gemm_plan plan_skinny_gemm(const block_gemm_params& p);
void launch_skinny_gemm(const block_gemm_params& p, cudaStream_t stream);
/// (The switches that choose between stream_gemm and sm90_block_gemm, and stream_gemm's load
/// batching, are declared with the other GEMM switches in cuda_ops.hpp.)

/// y = x W^T for 1..fp8_gemv_max_rows fp32 rows without activation quantization, W FP8 e4m3
/// with block scales, block-diagonal over `groups` (group g: inputs [g * in, (g + 1) * in) of
/// x, weight rows and outputs [g * out, (g + 1) * out)); groups = 1 is a plain linear.
struct fp8_gemv_params {
  const float* x;                  ///< [rows, groups * in], 16-byte aligned
  const std::uint8_t* w;           ///< [groups * out, in] e4m3 codes
  const std::uint8_t* scale_e8m0;  ///< block scales as e8m0 bytes, or nullptr
  const float* scale_f32;          ///< block scales as fp32, when scale_e8m0 is nullptr
  std::int64_t scale_cols;         ///< scales per row block
  int block_rows;
  int block_cols;  ///< a power of two >= 16
  std::int64_t rows;
  std::int64_t groups;
  std::int64_t in;   ///< multiple of 16
  std::int64_t out;  ///< outputs per group
  float* y;          ///< [rows, groups * out]
  /// fp8_split_wg only: fp8_split_wg_image_bytes of device scratch (128-byte aligned) for x's
  /// split bf16 parts, staged by the bulk-copy engine; nullptr: split by the GEMM's threads.
  /// The same results either way.
  std::uint8_t* b_image = nullptr;
};
constexpr std::int64_t fp8_gemv_max_rows = 8;
/// grouped_linear runs fp8_gemv in chunks of fp8_gemv_max_rows up to this many rows.
constexpr std::int64_t fp8_gemv_chunked_rows = 64;
bool fp8_gemv_fits(std::int64_t rows, std::int64_t in, int block_cols);
void launch_fp8_gemv(const fp8_gemv_params& p, cudaStream_t stream);

/// y = x W^T for 1..f32_gemv_max_rows fp32 rows and an fp32 weight (f32_gemv.cu); a row's
/// result does not depend on the batch.
struct f32_gemv_params {
  const float* x;  ///< [rows, in], contiguous
  const float* w;  ///< [out, in]
  float* y;        ///< [rows, out]
  std::int64_t rows, in, out;
  bool vec;  ///< in % 4 == 0 and x, w 16-byte aligned (w_bf16: 8-byte): 4-wide loads
  /// [out, in] bf16, or null: the same weight's bf16 bytes, read instead of w (which may then
  /// be null) -- the same results from half the bytes.
  const std::uint16_t* w_bf16 = nullptr;
};
constexpr std::int64_t f32_gemv_max_rows = 8;
bool f32_gemv_fits(std::int64_t rows, std::int64_t in, std::int64_t out);
void launch_f32_gemv(const f32_gemv_params& p, cudaStream_t stream);
/// The same product for 1..fp8_split_gemm_max_rows rows on the bf16 tensor cores, each
/// activation split into two bf16 parts (fp8_split_gemm.cu); e8m0 weight scales only.
constexpr std::int64_t fp8_split_gemm_max_rows = 64;
bool fp8_split_gemm_fits(std::int64_t rows, std::int64_t in, int block_cols, bool e8m0);
void launch_fp8_split_gemm(const fp8_gemv_params& p, cudaStream_t stream);
/// The same product for 9..fp8_split_gemm_max_rows rows on the warpgroup MMA (wgmma bf16, 16 /
/// 32 / 64-token tiles; fp8_split_gemm.cu): equal to fp8_split_gemm's to fp32 rounding.
bool fp8_split_wg_fits(std::int64_t rows, std::int64_t in, int block_cols, bool e8m0);
/// Warpgroups of an fp8_split_wg block with a staged B image: 2 (the default; 64 rows each,
/// sharing every staged chunk of B) or 1 (DEEPINFER_SPLIT_WG_WGS=1). The same bits either way.
int split_wg_warpgroups();
void set_split_wg_warpgroups(int wgs);
void launch_fp8_split_wg(const fp8_gemv_params& p, cudaStream_t stream);
/// Bytes of fp8_split_wg's B image (fp8_gemv_params::b_image) for rows x groups x in.
std::size_t fp8_split_wg_image_bytes(std::int64_t rows, std::int64_t groups, std::int64_t in);

struct dequantize_params {
  const std::uint8_t* values;      ///< FP8 [rows, cols], FP4 [rows, cols / 2], or bf16/f32
  int kind;                        ///< 0 FP8, 1 FP4, 2 bf16, 3 f32
  const std::uint8_t* scale_e8m0;  ///< or nullptr
  const float* scale_f32;
  std::int64_t scale_cols;
  int block_rows;
  int block_cols;
  std::int64_t rows;
  std::int64_t cols;
  void* out;  ///< [rows, cols] f32, or bf16 when out_bf16
  bool out_bf16;
  bool fp4_interleaved;  ///< FP4 rows in weight_matrix::interleaved's layout
};
void launch_dequantize(const dequantize_params& p, cudaStream_t stream);

/// weight_matrix::interleaved's stripe rows and run bytes (the same as kernels/weight_matrix.hpp's
/// fp4_interleave_rows / fp4_interleave_bytes, which this C++17 header cannot include).
inline constexpr std::int64_t il_stripe_rows = 32;
inline constexpr std::int64_t il_run_bytes = 64;
/// Throws di::error (naming `what`) when p's weight is interleaved but its outputs per group
/// cut the stripes or K the runs, or it is not MXFP4. Both block_gemm kernels call it.
void check_interleaved(const block_gemm_params& p, const char* what);

/// Packed FP4 rows [rows, row_bytes] (rows a multiple of il_stripe_rows, row_bytes of
/// il_run_bytes) from the plain layout to weight_matrix::interleaved's, or back (to_plain).
/// src and dst must not overlap.
void launch_fp4_interleave(const std::uint8_t* src, std::uint8_t* dst, std::int64_t rows,
                           std::int64_t row_bytes, bool to_plain, cudaStream_t stream);

/// Block scales [rows, cols] (e8m0 bytes, or f32 when e8m0 is nullptr) -> f32 [rows, ld]
/// (columns past cols zero): the weight scales as cuBLASLt's BLK128x128_32F mode reads them.
void launch_scales_to_f32(const std::uint8_t* e8m0, const float* f32, std::int64_t rows,
                          std::int64_t cols, std::int64_t ld, float* out, cudaStream_t stream);

/// f32 -> bf16 (round to nearest even), n values.
void launch_to_bf16(const float* x, std::uint16_t* out, std::int64_t n, cudaStream_t stream);
/// out [rows, cols] bf16 = fp8 fake quantization of x [rows, cols] f32 (16-byte aligned) in
/// blocks of `block` (32, 64 or 128, dividing cols): to_bf16(fp8_fake_quant(x)) bit for bit, one
/// pass.
void launch_fake_quant_bf16(const float* x, std::uint16_t* out, std::int64_t rows,
                            std::int64_t cols, int block, cudaStream_t stream);
/// parts [count, n] bf16, element-wise (round to nearest even, as to_bf16): part 0 = bf16(x),
/// part k = bf16(x - parts before it). Two parts keep 16 of fp32's 24 significant bits (what
/// is left is below 2^-17 |x|); three keep all of them (x = the parts' sum, exactly, for
/// normal x).
void launch_split_bf16(const float* x, std::uint16_t* parts, int count, std::int64_t n,
                       cudaStream_t stream);
/// y [n] = (p0 + p1) + p2 over parts [count, n] f32 (count 1..3), the order of GEMMs that add
/// one part's products after another into y.
void launch_sum_parts(const float* parts, float* y, int count, std::int64_t n,
                      cudaStream_t stream);

}  // namespace di::cuda
