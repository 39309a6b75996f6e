// cuBLAS / cuBLASLt calls of the CUDA backend's linear ops, on the current stream with one
// handle (and cuBLASLt workspace) per thread: fp32 SGEMM (exact-path reference products),
// bf16 GEMM with fp32 output (the dequantize-at-load path), and cuBLASLt's block-scaled FP8
// GEMM (128x128 weight blocks, 1x128 activation blocks, fp32 scales) for prefill shapes.
#pragma once

#include "kernels/weight_matrix.hpp"

#include <string>

namespace di::cuda {

/// y [rows, groups * out] = per group g: x[:, g*in:(g+1)*in] W_g^T with W [groups * out, in]
/// f32 (no TF32), x [rows, groups * in] f32.
void sgemm_nt(const tensor& x, const tensor& w, tensor y, int groups);

/// y [rows, out] f32 = x W^T with W [out, in] bf16; x f32 [rows, in] is rounded to bf16 -- with
/// act_block > 0 after FP8 fake quantization in blocks of act_block (then exactly: a code times
/// a power of two is a bf16 value; one pass, no fp32 copy, where the blocks are 32, 64 or 128).
void bf16_gemm_nt(const tensor& x, const tensor& w, tensor& y, int act_block = 0);

/// y [rows, out] f32 = x W^T with W [out, in] bf16 and x f32 split into three bf16 parts (hi =
/// bf16(x), mid = bf16(x - hi), lo = bf16(x - hi - mid); x = hi + mid + lo exactly): y = W hi +
/// W mid + W lo, three bf16 GEMMs with fp32 accumulation over exact products -- SGEMM's
/// precision on the tensor cores. (Two parts, which lose what lies below 2^-17 |x|, moved
/// enough FP8 activation roundings downstream to push the v41_public variant-A prefill past the
/// golden's mean-difference bound: 0.6056 against 0.6.)
/// With groups > 1 (x [rows, groups * in], W [groups * out, in], y [rows, groups * out]) each
/// group's columns of x meet its rows of W, as sgemm_nt's groups (strided-batched GEMMs).
/// Up to 64 rows (decode batches) the three parts run as one GEMM of 3 x rows rows (the weight
/// read once, one launch) and a kernel adds their products in the same order;
/// set_split_bf16_stacked(false) / DEEPINFER_SPLIT_BF16_STACKED=0: three accumulating GEMMs.
void split_bf16_gemm_nt(const tensor& x, const tensor& w, tensor& y, int groups = 1);
void set_split_bf16_stacked(bool on);

/// Whether cuBLASLt's block-scaled FP8 GEMM applies: FP8 weight with 128x128 blocks,
/// activations in blocks of 128, aligned extents.
bool cublaslt_fp8_fits(const weight_matrix& w, std::int64_t rows, std::int64_t k, int act_block);

/// y [rows, out] f32 = dequant(codes, scales_mn) W^T on cuBLASLt, with activation codes
/// [rows, k] e4m3 and their scales [k / 128, rows] f32 (rows contiguous). False (nothing
/// enqueued) when cuBLASLt offers no kernel for it.
bool cublaslt_block_fp8(const weight_matrix& w, const tensor& codes, const tensor& scales_mn,
                        tensor& y);

/// Which of the cuBLASLt heuristic's candidates cublaslt_block_fp8 runs: 0 (the default) its
/// first choice, i its (i+1)-th where it offers that many (else its last); for benchmarks that
/// compare them. cublaslt_candidates_found: how many the last call was offered;
/// cublaslt_last_algo: the last call's algorithm (id, tile, split-K, reduction, stages,
/// cluster, waves) in words.
void set_cublaslt_candidate(int index);
/// K splits set onto the algorithm cublaslt_block_fp8 runs (reduced in the compute type through
/// the workspace, where cuBLASLt accepts the configuration): 0 (the default) the automatic
/// rule of cublaslt_auto_splits, -1 the heuristic's own always, 1..64 that many. From
/// DEEPINFER_LT_SPLITK at start-up. A row's sums depend on the splits, which depend on the
/// weight's shape only (decode batches of up to 64 rows).
void set_cublaslt_splitk(int splits);
int get_cublaslt_splitk();
/// The automatic K splits for y [rows, out] over K = k when the heuristic chose
/// `heuristic_splits` (0: keep them): decode batches (<= 64 rows) whose outputs make fewer
/// than 32 tiles of 128 and whose algorithm keeps K whole get splits up to about 64 blocks,
/// at least 4 K blocks of 128 each.
int cublaslt_auto_splits(std::int64_t out, std::int64_t rows, std::int64_t k, int heuristic_splits);
int cublaslt_candidates_found();
std::string cublaslt_last_algo();

/// Layout of the scale tensors handed to cuBLASLt, as bits (a GPU test probes them; 0, the
/// layout PyTorch uses with these modes, was measured right on the H200): 1 = weight scales
/// block-column-major, 2 = activation scales row-major [rows, k / 128], 4 = no padding of the
/// weight scales' leading dimension to a multiple of 4.
void set_cublaslt_scale_layout(int bits);
int cublaslt_scale_layout();

}  // namespace di::cuda
