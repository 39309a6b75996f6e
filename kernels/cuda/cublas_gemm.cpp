// cuBLAS and cuBLASLt products of the CUDA backend (see cublas_gemm.hpp).
#include "kernels/cuda/cublas_gemm.hpp"

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/gemm_kernels.hpp"
#include "kernels/cuda/kernel_attributes.hpp"
#include "kernels/cuda/stream.hpp"
#include "kernels/dtype.hpp"

#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>

namespace di::cuda {

namespace {

constexpr std::size_t lt_workspace_bytes = std::size_t(32) << 20;

/// One cuBLAS and one cuBLASLt handle per thread (a handle is not safe to share across
/// threads) and one more for an open stream_fork's side stream (their workspaces must not be
/// shared by two streams at once), created on first use.
struct handles {
  cublasHandle_t blas = nullptr;
  cublasLtHandle_t lt = nullptr;
  tensor workspace;  // [lt_workspace_bytes] u8 on the device
  handles() {
    CUBLAS_CHECK(cublasCreate(&blas));
    CUBLAS_CHECK(cublasLtCreate(&lt));
  }
  ~handles() {
    cublasDestroy(blas);
    cublasLtDestroy(lt);
  }
};

handles& thread_handles() {
  thread_local handles main_h, side_h;
  const cudaStream_t stream = current_stream();
  handles& h = stream == current_fork().side ? side_h : main_h;
  CUBLAS_CHECK(cublasSetStream(h.blas, stream));
  return h;
}

std::atomic<bool> g_lt_available{false};
/// Which of the heuristic's candidates cublaslt_block_fp8 takes (0: its first choice), how many
/// the last call found, and the last call's algorithm, described on request (set_cublaslt_
/// candidate, cublaslt_last_algo: for benchmarks comparing them).
constexpr int lt_max_candidates = 16;
std::atomic<int> g_lt_candidate{0};
std::atomic<int> g_lt_found{0};
thread_local cublasLtMatmulHeuristicResult_t g_lt_last{};
/// K splits set onto the chosen algorithm (set_cublaslt_splitk): -1 none (the heuristic's own),
/// 0 the automatic rule (lt_splits_for), n > 0 n splits.
std::atomic<int> g_lt_splitk{int(detail::env_count("DEEPINFER_LT_SPLITK", 0, 64, -1))};

std::int32_t algo_attr(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t a) {
  std::int32_t v = -1;
  std::size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, a, &v, sizeof v, &written) !=
      CUBLAS_STATUS_SUCCESS)
    v = -1;
  return v;
}

}  // namespace

int cublaslt_auto_splits(std::int64_t out, std::int64_t rows, std::int64_t k,
                         int heuristic_splits) {
  // The heuristic keeps K whole for V4's small decode projections (one 128 x 128 output tile per
  // 128 outputs: wq_a's 8, wkv's 4, the shared expert's w1 16), so a handful of blocks each
  // walk all of K: ~14 us for 2-8 MB. Split until about 64 blocks, at least 4 K blocks each
  // (H200, session 33, with act-quant: wq_a 17.7 -> 10.5 us at 8 splits, wkv 17.5 -> 10.1,
  // shared w1 17.9 -> 12.1 at 4; from 32 tiles on -- shared w2, wo_b, wq_b -- the heuristic's
  // choice was as fast or faster).
  const std::int64_t tiles = (out + 127) / 128;
  if (rows > 64 || heuristic_splits != 1 || tiles >= 32) return 0;
  int splits = 1;
  while (splits * 2 * tiles <= 64 && splits * 2 * 4 <= k / 128) splits *= 2;
  return splits > 1 ? splits : 0;
}

namespace {

/// The K splits to set onto `result` for y [n rows, m outputs] over K = k (0: keep its own).
int lt_splits_for(const cublasLtMatmulHeuristicResult_t& result, std::int64_t m, std::int64_t n,
                  std::int64_t k) {
  const int mode = g_lt_splitk.load();
  if (mode != 0) return mode < 0 ? 0 : mode;
  return cublaslt_auto_splits(m, n, k, algo_attr(result.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM));
}

/// An algorithm's configuration as cuBLASLt reports it (attributes it does not report: -1).
std::string algo_text(const cublasLtMatmulHeuristicResult_t& r) {
  auto attr = [&](cublasLtMatmulAlgoConfigAttributes_t a) { return int(algo_attr(r.algo, a)); };
  return "algo " + std::to_string(attr(CUBLASLT_ALGO_CONFIG_ID)) + " tile " +
         std::to_string(attr(CUBLASLT_ALGO_CONFIG_TILE_ID)) + " splitK " +
         std::to_string(attr(CUBLASLT_ALGO_CONFIG_SPLITK_NUM)) + " reduction " +
         std::to_string(attr(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME)) + " stages " +
         std::to_string(attr(CUBLASLT_ALGO_CONFIG_STAGES_ID)) + " cluster " +
         std::to_string(attr(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID)) + " waves " +
         std::to_string(r.wavesCount);
}
/// split_bf16_gemm_nt's parts as one stacked GEMM up to this many rows (decode batches).
constexpr std::int64_t split_bf16_stacked_rows = 64;
std::atomic<bool> g_split_stacked{detail::env_switch("DEEPINFER_SPLIT_BF16_STACKED", true)};
std::atomic<int> g_lt_layout{0};

/// Weight scales as cuBLASLt's BLK128x128_32F wants them: fp32 [ceil(n/128), ld] row-major
/// with ld = ceil(k/128) rounded up to a multiple of 4 (or the variants of
/// set_cublaslt_scale_layout): w.lt_scales when the weight carries them (with_lt_scales, the
/// default layout), else converted on the device for this call (a few KB; a cache keyed by
/// address would go stale when the pool hands the address to another weight).
tensor lt_weight_scales(const weight_matrix& w, int layout) {
  if (layout == 0 && w.lt_scales.defined()) return w.lt_scales;
  const bool col_major = layout & 1, pad = !(layout & 4);
  tensor src = w.scales;
  if (col_major) {  // rare probe layout: transpose on the host
    tensor h = w.scales.to(cpu_device);
    tensor t = tensor::empty({h.size(1), h.size(0)}, h.type());
    const std::size_t es = dtype_size(h.type());
    for (std::int64_t r = 0; r < h.size(0); ++r)
      for (std::int64_t c = 0; c < h.size(1); ++c)
        std::memcpy(static_cast<std::uint8_t*>(t.raw()) + (c * h.size(0) + r) * es,
                    static_cast<const std::uint8_t*>(h.raw()) + (r * h.size(1) + c) * es, es);
    src = t.to(w.scales.dev());
  }
  const std::int64_t rows = src.size(0), cols = src.size(1);
  const std::int64_t ld = pad ? (cols + 3) / 4 * 4 : cols;
  tensor out = tensor::empty({rows, ld}, dtype::f32, w.scales.dev());
  const bool e8m0 = src.type() == dtype::f8_e8m0;
  launch_scales_to_f32(e8m0 ? static_cast<const std::uint8_t*>(src.raw()) : nullptr,
                       e8m0 ? nullptr : src.data<float>(), rows, cols, ld, out.data<float>(),
                       current_stream());
  return out;
}

/// RAII for the cuBLASLt descriptors of one call.
struct lt_call {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~lt_call() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

/// The empty products y = x W^T: true (y done) when there are no rows or outputs, or no inputs
/// (then y is zeroed).
bool nothing_to_multiply(std::int64_t rows, std::int64_t in, std::int64_t out, const tensor& y) {
  if (rows == 0 || out == 0) return true;
  if (in != 0) return false;
  CUDA_CHECK(cudaMemsetAsync(y.raw(), 0, y.nbytes(), current_stream()));
  return true;
}

}  // namespace

void sgemm_nt(const tensor& x, const tensor& w, tensor y, int groups) {
  const std::int64_t rows = x.size(0), in = x.size(1) / groups, out = w.size(0) / groups;
  if (nothing_to_multiply(rows, in, out, y)) return;
  handles& h = thread_handles();
  const float one = 1.0f, zero = 0.0f;
  // Column-major view: y^T [out, rows] = W [in, out]^T x^T [in, rows].
  CUBLAS_CHECK(cublasSgemmStridedBatched(h.blas, CUBLAS_OP_T, CUBLAS_OP_N, int(out), int(rows),
                                         int(in), &one, w.data<float>(), int(in), out * in,
                                         x.data<float>(), int(x.size(1)), in, &zero,
                                         y.data<float>(), int(y.size(1)), out, groups));
}

namespace {

/// y [rows, groups * out] (f32) = per group g: xb[:, g*in:(g+1)*in] W_g^T (+ y when accumulate)
/// for xb [rows, groups * in] and W [groups * out, in] bf16.
void gemm_ex_bf16(const tensor& xb, const tensor& w, tensor& y, bool accumulate, int groups = 1) {
  const std::int64_t rows = xb.size(0), in = xb.size(1) / groups, out = w.size(0) / groups;
  handles& h = thread_handles();
  const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  if (groups == 1) {
    CUBLAS_CHECK(cublasGemmEx(h.blas, CUBLAS_OP_T, CUBLAS_OP_N, int(out), int(rows), int(in), &one,
                              w.raw(), CUDA_R_16BF, int(in), xb.raw(), CUDA_R_16BF, int(in), &beta,
                              y.raw(), CUDA_R_32F, int(out), CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
    return;
  }
  // Column-major view per group: y_g^T [out, rows] = W_g [in, out]^T x_g^T [in, rows].
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      h.blas, CUBLAS_OP_T, CUBLAS_OP_N, int(out), int(rows), int(in), &one, w.raw(), CUDA_R_16BF,
      int(in), out * in, xb.raw(), CUDA_R_16BF, int(groups * in), in, &beta, y.raw(), CUDA_R_32F,
      int(groups * out), out, groups, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void bf16_gemm_nt(const tensor& x, const tensor& w, tensor& y, int act_block) {
  const std::int64_t rows = x.size(0), in = x.size(1), out = w.size(0);
  if (nothing_to_multiply(rows, in, out, y)) return;
  tensor xb = tensor::empty({rows, in}, dtype::bf16, x.dev());  // [rows, in]
  const bool fused = (act_block == 32 || act_block == 64 || act_block == 128) &&
                     in % act_block == 0 && x.is_contiguous() &&
                     reinterpret_cast<std::uintptr_t>(x.raw()) % 16 == 0;
  if (fused) {  // the fake-quantized values straight to bf16 (exactly representable)
    launch_fake_quant_bf16(x.data<float>(), xb.data<std::uint16_t>(), rows, in, act_block,
                           current_stream());
  } else {
    const tensor input = fp8_fake_quantized(x, act_block);
    launch_to_bf16(input.data<float>(), xb.data<std::uint16_t>(), rows * in, current_stream());
  }
  gemm_ex_bf16(xb, w, y, false);
}

void split_bf16_gemm_nt(const tensor& x, const tensor& w, tensor& y, int groups) {
  const std::int64_t rows = x.size(0), in = x.size(1), out = w.size(0);
  if (nothing_to_multiply(rows, in, out, y)) return;
  constexpr int parts = 3;
  tensor split = tensor::empty({parts, rows, in}, dtype::bf16, x.dev());  // [parts, rows, in]
  launch_split_bf16(x.data<float>(), split.data<std::uint16_t>(), parts, rows * in,
                    current_stream());
  if (rows <= split_bf16_stacked_rows && g_split_stacked) {
    // Decode batches: the parts as one GEMM of 3 x rows rows -- the weight read once, one
    // launch (and its split-K reduction) instead of three -- then the parts' products added
    // in the accumulating GEMMs' order.
    tensor products = tensor::empty({parts * rows, out}, dtype::f32, x.dev());  // [parts*rows, out]
    gemm_ex_bf16(split.view({parts * rows, in}), w, products, false, groups);
    launch_sum_parts(products.data<float>(), y.data<float>(), parts, rows * out,
                     current_stream());
    return;
  }
  for (int k = 0; k < parts; ++k)
    gemm_ex_bf16(split.slice(0, k, k + 1).view({rows, in}), w, y, k > 0, groups);
}

void set_split_bf16_stacked(bool on) {
  g_split_stacked = on;
}

bool cublaslt_fp8_fits(const weight_matrix& w, std::int64_t rows, std::int64_t k, int act_block) {
  return w.values.type() == dtype::f8_e4m3 && w.block.rows == 128 && w.block.cols == 128 &&
         act_block == 128 && k % 128 == 0 && w.rows() % 16 == 0 && rows % 16 == 0;
}

bool cublaslt_block_fp8(const weight_matrix& w, const tensor& codes, const tensor& scales_mn,
                        tensor& y) {
  const std::int64_t m = w.rows(), n = codes.size(0), k = codes.size(1);
  handles& h = thread_handles();
  if (!h.workspace.defined())
    h.workspace = tensor::empty({std::int64_t(lt_workspace_bytes)}, dtype::u8, y.dev());
  const tensor a_scales = lt_weight_scales(w, g_lt_layout);
  const float* a_scale = a_scales.data<float>();
  const float* b_scale = scales_mn.data<float>();
  lt_call call;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&call.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  const cublasLtMatmulMatrixScale_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  const cublasLtMatmulMatrixScale_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode,
                                              sizeof a_mode));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode,
                                              sizeof b_mode));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                              &a_scale, sizeof a_scale));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(call.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                              &b_scale, sizeof b_scale));
  // Column-major: D [m = out, n = rows] = A^T B with A = W stored [k, m], B = codes [k, n].
  CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&call.a, CUDA_R_8F_E4M3, std::uint64_t(k), std::uint64_t(m), k));
  CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&call.b, CUDA_R_8F_E4M3, std::uint64_t(k), std::uint64_t(n), k));
  CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&call.c, CUDA_R_32F, std::uint64_t(m), std::uint64_t(n), m));
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&call.pref));
  const std::size_t ws = lt_workspace_bytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      call.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  // The heuristic's first choice, or (set_cublaslt_candidate) a later one where it has one.
  const int want = g_lt_candidate.load();
  cublasLtMatmulHeuristicResult_t results[lt_max_candidates] = {};
  int found = 0;
  if (cublasLtMatmulAlgoGetHeuristic(h.lt, call.op, call.a, call.b, call.c, call.c, call.pref,
                                     want + 1, results, &found) != CUBLAS_STATUS_SUCCESS ||
      found == 0) {
    g_lt_available = false;
    return false;
  }
  g_lt_found = found;
  cublasLtMatmulHeuristicResult_t result = results[std::min(want, found - 1)];
  if (const int split = lt_splits_for(result, m, n, k); split > 0) {
    cublasLtMatmulHeuristicResult_t forced = result;
    const std::int32_t num = split;
    const std::uint32_t scheme =
        split > 1 ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE : CUBLASLT_REDUCTION_SCHEME_NONE;
    if (cublasLtMatmulAlgoConfigSetAttribute(&forced.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &num,
                                             sizeof num) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulAlgoConfigSetAttribute(&forced.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                             &scheme, sizeof scheme) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulAlgoCheck(h.lt, call.op, call.a, call.b, call.c, call.c, &forced.algo,
                                &forced) == CUBLAS_STATUS_SUCCESS &&
        forced.workspaceSize <= ws)
      result = forced;
  }
  g_lt_last = result;
  const float one = 1.0f, zero = 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(h.lt, call.op, &one, w.values.raw(), call.a, codes.raw(), call.b,
                              &zero, y.raw(), call.c, y.raw(), call.c, &result.algo,
                              h.workspace.raw(), ws, current_stream()));
  g_lt_available = true;
  return true;
}

weight_matrix with_lt_scales(const weight_matrix& w) {
  if (w.values.type() != dtype::f8_e4m3 || w.block.rows != 128 || w.block.cols != 128 ||
      w.values.dev().kind != device_kind::cuda || w.lt_scales.defined())
    return w;
  weight_matrix out = w;
  out.lt_scales = lt_weight_scales(w, 0);
  return out;
}

void set_cublaslt_candidate(int index) {
  DI_CHECK(index >= 0 && index < lt_max_candidates, "cuBLASLt candidate {} (0..{})", index,
           lt_max_candidates - 1);
  g_lt_candidate = index;
}
void set_cublaslt_splitk(int splits) {
  DI_CHECK(splits >= -1 && splits <= 64,
           "cuBLASLt split-K {} (-1: the heuristic's, 0: automatic, 1..64 forced)", splits);
  g_lt_splitk = splits;
}
int get_cublaslt_splitk() {
  return g_lt_splitk;
}
int cublaslt_candidates_found() {
  return g_lt_found;
}
std::string cublaslt_last_algo() {
  return algo_text(g_lt_last);
}

bool cublaslt_block_fp8_available() {
  return g_lt_available;
}

void set_cublaslt_scale_layout(int bits) {
  g_lt_layout = bits;
}
int cublaslt_scale_layout() {
  return g_lt_layout;
}

}  // namespace di::cuda
