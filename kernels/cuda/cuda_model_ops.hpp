// The CUDA kernels of the model-level ops of kernels/ops.hpp (attention with sinks over packed
// cache rows, indexer scores and top-k, MoE routing, SwiGLU, compressor pooling, mHC mixing,
// the Engram gate, cache-row codecs), as launchers over raw device pointers: one params
// struct per kernel, shape checks on the host before launch (di::error), the launch error
// checked after. Embedding rows, gathers and scatter-adds are in basic_kernels.hpp; the
// tensor-level twins that ops.cpp dispatches to are in cuda_model_twins.hpp. Each kernel
// computes the same function as its CPU twin in kernels/cpu/ with the same scalar definitions
// (kernels/quant_math.hpp): cache writes and top-k are bit-exact, the rest agree to fp32
// rounding (fp16 operands for attention, which multiplies on the tensor cores).
//
// Pointers are device pointers; every launcher is asynchronous on `stream`. Index arguments
// are device arrays the host cannot see: an attention index outside its table is treated as
// unused (-1) by the kernel rather than read out of bounds.
#pragma once

#include "kernels/cache_format.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace di::cuda {

/// Rows of a KV or key table in device memory: packed cache rows (`format`, row_bytes each)
/// or, when !packed, plain f32 rows of `dim` values.
struct device_rows {
  const void* data = nullptr;
  std::int64_t rows = 0;
  bool packed = true;
  cache_row_format format;  ///< when packed
};

// ---- attention -----------------------------------------------------------------------

/// Sparse attention with sinks for every query token over the rows two index lists name
/// (the sliding window's rows, then the selected compressed entries), K = V shared:
///   out[t,h] = sum_j softmax_j(q[t,h] . kv_j * scale ; sink[h]) kv_j
/// the sink joining the denominator only; a token with no valid row gets zeros. Serves
/// prefill (many tokens per sequence) and decode (one) alike. Rows are dequantized to bf16
/// (exact for the FP8/FP4 cache formats) and q is rounded to bf16 for the tensor cores.
struct attention_params {
  const float* q = nullptr;      ///< [tokens, heads, dim]
  float* out = nullptr;          ///< [tokens, heads, dim]
  const float* sinks = nullptr;  ///< [heads]
  int tokens = 0, heads = 0, dim = 0;  ///< dim in {128, 256, 512}
  float softmax_scale = 1.0f;
  device_rows window;                       ///< first pool
  const std::int32_t* window_idx = nullptr; ///< [tokens, window_k], -1 = unused
  int window_k = 0;
  device_rows extra;                        ///< second pool (compressed entries)
  const std::int32_t* extra_idx = nullptr;  ///< [tokens, extra_k], -1 = unused
  int extra_k = 0;
  int num_splits = 0;  ///< split of the rows across blocks (flash-decoding); 0 = choose
  void* workspace = nullptr;  ///< attention_workspace_bytes(p) bytes when splits > 1
  std::size_t workspace_bytes = 0;
};

/// The split the launcher will use for `p` (p.num_splits, or its own choice when 0).
int attention_splits(const attention_params& p);
/// Device workspace `p` needs (0 when it runs unsplit).
std::size_t attention_workspace_bytes(const attention_params& p);
void launch_attention(const attention_params& p, cudaStream_t stream);
/// Splits of 2..16 merged inside thread-block clusters through distributed shared memory (no
/// workspace, no combine launch; the same arithmetic in the same order as the combine kernel:
/// the same bits) where the GPU can hold such clusters: 1 any 2..16 splits, 0 never, -1 (the
/// default) two splits only -- larger clusters were slower on the H200 (model_attention.cu).
/// DEEPINFER_ATTN_CLUSTER sets the default. Defined in model_attention.cu.
void set_attention_cluster(int mode);
int get_attention_cluster();

// ---- cache rows ----------------------------------------------------------------------

/// Quantizes x [rows, fmt.dim()] f32 into packed rows. Row r goes to out + dst_row(r) *
/// row_bytes, dst_row(r) = dst_rows[r] when given (a ring slot or a paged pool row), else r.
struct encode_rows_params {
  const float* x = nullptr;
  std::uint8_t* out = nullptr;
  const std::int64_t* dst_rows = nullptr;  ///< [rows] or null
  std::int64_t rows = 0;
  cache_row_format format;
  std::int64_t pool_rows = -1;  ///< with dst_rows: rows of `out`; a destination outside is skipped
};
void launch_encode_cache_rows(const encode_rows_params& p, cudaStream_t stream);

/// Decodes packed rows (src_rows[r] of `rows` when given, else r) into out [n, fmt.dim()].
struct decode_rows_params {
  const std::uint8_t* rows = nullptr;
  const std::int64_t* src_rows = nullptr;  ///< [n] or null
  float* out = nullptr;
  std::int64_t n = 0;
  cache_row_format format;
};
void launch_decode_cache_rows(const decode_rows_params& p, cudaStream_t stream);

/// Pool rows of paged entries: out[b, e] = tables[b, e / per_block] * per_block + e % per_block
/// for e < counts[b], else -1 (b < batch, e < entries). tables [batch, max_blocks] i32.
struct entry_rows_params {
  const std::int32_t* tables = nullptr;
  const std::int64_t* counts = nullptr;  ///< [batch]
  std::int32_t* out = nullptr;           ///< [batch, entries]
  std::int64_t batch = 0, entries = 0;
  int max_blocks = 0, per_block = 1;
};
void launch_entry_rows(const entry_rows_params& p, cudaStream_t stream);

/// Per-row index translation: out[b, j] = map[b, idx[b, j]] (-1 where idx is < 0 or >= n).
struct map_rows_params {
  const std::int32_t* idx = nullptr;  ///< [batch, k]
  const std::int32_t* map = nullptr;  ///< [batch, n]
  std::int32_t* out = nullptr;        ///< [batch, k]
  std::int64_t batch = 0, k = 0, n = 0;
};
void launch_map_rows(const map_rows_params& p, cudaStream_t stream);

// ---- indexer -------------------------------------------------------------------------

/// scores[t,e] = sum_h relu(q[t,h] . key_e) * weights[t,h] over keys [entries, dim] given
/// as f32 rows or packed FP4 cache rows (read in place).
struct index_scores_params {
  const float* q = nullptr;        ///< [tokens, heads, dim]
  const float* weights = nullptr;  ///< [tokens, heads]
  device_rows keys;                ///< keys.rows entries
  float* scores = nullptr;         ///< [tokens, entries]
  int tokens = 0, heads = 0, dim = 0;  ///< heads <= 64, dim <= 256, dim % 8 == 0
  /// Per-token keys (batched decode): token t scores rows key_rows[t * entries + e] of the
  /// key table for e < entries (a row < 0 or beyond the table scores 0); null: every token
  /// scores all keys.rows rows (entries = keys.rows).
  const std::int32_t* key_rows = nullptr;  ///< [tokens, entries]
  std::int64_t entries = 0;                ///< with key_rows
};
void launch_index_scores(const index_scores_params& p, cudaStream_t stream);

/// Top-k of each row of scores [rows, n] (ties: lower index first), -1 for picks whose
/// (masked) score is -inf; in descending order, or in entry order (index_order, as masked_topk
/// returns them). Entries e >= visible[r] and, with `allowed`, those it marks 0 are masked
/// first (masked_topk); both null = plain topk.
struct topk_params {
  const float* scores = nullptr;           ///< [rows, n]
  const std::int64_t* visible = nullptr;   ///< [rows] or null
  const std::uint8_t* allowed = nullptr;   ///< [rows, n] or null
  std::int32_t* out = nullptr;             ///< [rows, k]
  std::int64_t rows = 0, n = 0;
  int k = 0;  ///< <= topk_max_k
  /// false: descending score (ties: the lower index first), masked picks -1 in their place;
  /// true: the same picks in ascending entry order, masked picks -1 after them (no sort).
  bool index_order = false;
  /// index_order only, optional: mapped[r, j] = map[r, out[r, j]] (-1 where out is -1), the
  /// picks' rows in another numbering written by the same launch. map is [rows, n].
  const std::int32_t* map = nullptr;
  std::int32_t* mapped = nullptr;  ///< [rows, k]
};
inline constexpr int topk_max_k = 2048;
void launch_topk(const topk_params& p, cudaStream_t stream);

/// V4.1's candidate blocks: keep[t,e] = 1 for the entries of the topk_blocks best blocks
/// (best visible entry; the newest entry's block always kept). `work` needs
/// candidate_blocks_work_bytes(tokens, entries, block_size) bytes.
struct candidate_blocks_params {
  const float* scores = nullptr;          ///< [tokens, entries]
  const std::int64_t* visible = nullptr;  ///< [tokens]
  std::uint8_t* keep = nullptr;           ///< [tokens, entries]
  std::int64_t tokens = 0, entries = 0;
  int topk_blocks = 0, block_size = 0;
  void* work = nullptr;
};
std::size_t candidate_blocks_work_bytes(std::int64_t tokens, std::int64_t entries, int block_size,
                                        int topk_blocks);
void launch_candidate_blocks(const candidate_blocks_params& p, cudaStream_t stream);

// ---- MoE -----------------------------------------------------------------------------

/// sqrt(softplus(logits / temp)) scores, top-k of scores + bias (or the fixed hash-routed
/// experts), weights = chosen scores, normalised (+eps), scaled.
struct route_params {
  const float* logits = nullptr;      ///< [tokens, experts]
  const float* bias = nullptr;        ///< [experts] or null
  const std::int32_t* fixed = nullptr;///< [tokens, top_k] or null
  float* weights = nullptr;           ///< [tokens, top_k]
  std::int32_t* experts_out = nullptr;///< [tokens, top_k]
  std::int64_t tokens = 0;
  int experts = 0;  ///< <= 1024
  int top_k = 1;    ///< <= 16
  float gate_temp = 1.0f, route_scale = 1.0f, normalize_eps = 0.0f;
  bool normalize = true;
};
void launch_route(const route_params& p, cudaStream_t stream);

/// ops::group_by_expert on the device: one block counts each expert's pairs, scans the
/// counts into offsets and writes every group in (token, slot) order (no atomics: the same
/// order as the CPU twin). Out-of-range experts count as expert 0 (contained, as in routing).
struct group_experts_params {
  const std::int32_t* experts_in = nullptr;  ///< [pairs] (routing [tokens, k] flattened)
  const float* weights_in = nullptr;         ///< [pairs]
  std::int64_t* rows = nullptr;              ///< [pairs] token of each grouped pair
  float* weights = nullptr;                  ///< [pairs]
  std::int32_t* offsets = nullptr;           ///< [experts + 1]
  std::int32_t* slots = nullptr;             ///< [pairs] grouped row of each pair, or nullptr
  std::int64_t pairs = 0;
  int k = 1;        ///< pairs per token
  int experts = 0;  ///< <= 1024
  /// group_experts_workspace_bytes(*this): per-chunk counts when the pairs are many.
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};
/// Past group_experts_one_block_pairs pairs the grouping runs as three kernels over chunks of
/// pairs (counts per chunk, their scan, then each chunk placed by one warp in pair order):
/// the one-block kernel took 840 us for 12288 pairs of 384 experts. Both give the same rows.
constexpr std::int64_t group_experts_one_block_pairs = 2048;
std::size_t group_experts_workspace_bytes(const group_experts_params& p);
void launch_group_experts(const group_experts_params& p, cudaStream_t stream);

/// silu(min(gate, limit)) * clamp(up, ±limit) (no clamp for limit <= 0), times row_scale.
struct swiglu_params {
  const float* gate = nullptr;  ///< [rows, inter]
  const float* up = nullptr;    ///< [rows, inter]
  const float* row_scale = nullptr;  ///< [rows] or null
  float* out = nullptr;         ///< [rows, inter]
  std::int64_t rows = 0, inter = 0;
  float limit = 0.0f;
  /// Also out's FP8 activation quantization (gemm's quantize_act layout: codes [rows, inter],
  /// scales [rows, inter / quant_block]) when quant_block > 0 (32, 64 or 128 dividing inter).
  std::uint8_t* codes = nullptr;
  float* scales = nullptr;
  int quant_block = 0;
  float* scales_mn = nullptr;  ///< the scales again, rows contiguous (cuBLASLt's), or nullptr
};
void launch_swiglu(const swiglu_params& p, cudaStream_t stream);

// ---- compressor ----------------------------------------------------------------------

/// ops::compress_tokens: feeds n rows at positions [start, start + n) through the partial
/// group state (updated in place) and writes the completed entries to out [completed, dim].
struct compress_params {
  const float* kv = nullptr;     ///< [n, width]
  const float* score = nullptr;  ///< [n, width]
  float* state_kv = nullptr;     ///< [(overlap ? 2 : 1) * ratio, width]
  float* state_score = nullptr;  ///< same
  float* out = nullptr;          ///< [(start + n) / ratio - start / ratio, dim]
  std::int64_t n = 0, start = 0;
  int width = 0, ratio = 1;
  bool overlap = false;
};
void launch_compress_tokens(const compress_params& p, cudaStream_t stream);

/// compress_tokens for one new row of each of `batch` decoding sequences whose partial-group
/// states live in one slot arena: sequence b's state (kv then score, as compress_params'
/// state_kv / state_score) starts at slots + slot_ids[b] * slot_stride + state_offset, its
/// row is at position starts[b]; out row b receives its entry when that row completes a group
/// ((starts[b] + 1) % ratio == 0; otherwise out row b is left as it was).
struct compress_decode_params {
  const float* kv = nullptr;     ///< [batch, width]
  const float* score = nullptr;  ///< [batch, width]
  std::uint8_t* slots = nullptr;
  std::size_t slot_stride = 0, state_offset = 0;  ///< bytes (multiples of 4)
  const std::int32_t* slot_ids = nullptr;  ///< [batch]
  const std::int64_t* starts = nullptr;    ///< [batch]
  float* out = nullptr;                    ///< [batch, dim]
  std::int64_t batch = 0;
  int width = 0, ratio = 1;
  bool overlap = false;
};
void launch_compress_decode(const compress_decode_params& p, cudaStream_t stream);

// ---- mHC -----------------------------------------------------------------------------

/// ops::hc_mixes (num_mixes = (2 + hc) * hc) or, with head_pre, ops::hc_head_pre (num_mixes
/// = hc, only pre written).
struct hc_mixes_params {
  const float* x = nullptr;      ///< [tokens, hc, dim]
  const float* fn = nullptr;     ///< [num_mixes, hc * dim]
  const float* scale = nullptr;  ///< [3] ([1] for head_pre)
  const float* base = nullptr;   ///< [num_mixes]
  float* pre = nullptr;          ///< [tokens, hc]
  float* post = nullptr;         ///< [tokens, hc]
  float* comb = nullptr;         ///< [tokens, hc, hc]
  std::int64_t tokens = 0, dim = 0;
  int hc = 4, sinkhorn_iters = 20;
  float hc_eps = 1e-6f, norm_eps = 1e-6f;
  bool head_pre = false;
  void* workspace = nullptr;  ///< hc_mixes_workspace_bytes(*this): per-chunk partial sums
  std::size_t workspace_bytes = 0;
};
std::size_t hc_mixes_workspace_bytes(const hc_mixes_params& p);
void launch_hc_mixes(const hc_mixes_params& p, cudaStream_t stream);

struct hc_collapse_params {
  const float* x = nullptr;    ///< [tokens, hc, dim]
  const float* pre = nullptr;  ///< [tokens, hc]
  float* out = nullptr;        ///< [tokens, dim]
  std::int64_t tokens = 0, dim = 0;
  int hc = 4;
};
void launch_hc_collapse(const hc_collapse_params& p, cudaStream_t stream);

/// out = rms_norm(hc_collapse(x, pre), weight, eps) with a block per token (up to
/// hc_collapse_norm_max_streams streams of hc_collapse_norm_max_dim values; the op falls back
/// to the two kernels past that).
struct hc_collapse_norm_params {
  const float* x = nullptr;       ///< [tokens, hc, dim]
  const float* pre = nullptr;     ///< [tokens, hc]
  const float* weight = nullptr;  ///< [dim], or nullptr
  float* out = nullptr;           ///< [tokens, dim]
  std::int64_t tokens = 0, dim = 0;
  int hc = 4;
  float eps = 1e-6f;
  /// Also out's FP8 activation quantization (gemm's quantize_act layout: codes [tokens, dim],
  /// scales [tokens, dim / quant_block]) when quant_block > 0 (32, 64 or 128 dividing dim).
  std::uint8_t* codes = nullptr;
  float* scales = nullptr;
  int quant_block = 0;
  float* scales_mn = nullptr;  ///< the scales again, rows contiguous (cuBLASLt's), or nullptr
};
constexpr std::int64_t hc_collapse_norm_max_dim = 8192;
constexpr std::int64_t hc_collapse_norm_max_streams = 4;  ///< the op runs two kernels past it
void launch_hc_collapse_norm(const hc_collapse_norm_params& p, cudaStream_t stream);
/// hc_collapse_norm on a cluster of 8 blocks per token (each an eighth of the row; the sum of
/// squares added across them through distributed shared memory) for widths that are a multiple
/// of 1024, instead of one block per token: on by default (DEEPINFER_HC_NORM_CLUSTER=0 or this
/// switch turns it off; session 19: v41-flash-L4 batch 1 1.80 -> 1.74 ms). Its sums group
/// differently, so its bits differ from the one-block kernel's in the last places; either is
/// batch-invariant (the choice depends on the width only).
void set_hc_collapse_norm_cluster(bool on);
bool hc_collapse_norm_cluster();
bool hc_collapse_norm_uses_cluster(std::int64_t dim);

struct hc_expand_params {
  const float* y = nullptr;         ///< [tokens, dim]
  const float* residual = nullptr;  ///< [tokens, hc, dim]
  const float* post = nullptr;      ///< [tokens, hc]
  const float* comb = nullptr;      ///< [tokens, hc, hc]
  float* out = nullptr;             ///< [tokens, hc, dim]
  std::int64_t tokens = 0, dim = 0;
  int hc = 4;
};
void launch_hc_expand(const hc_expand_params& p, cudaStream_t stream);
/// Whether launch_hc_expand takes the 4-column kernel where it fits (dim % 4 == 0, 16-byte
/// aligned, hc <= 4; DEEPINFER_HC_EXPAND_VEC=0 off): each residual value read once instead of
/// once per output stream. The same bits either way.
void set_hc_expand_vec(bool on);
bool hc_expand_vec();

// ---- Engram --------------------------------------------------------------------------

struct engram_gate_params {
  const float* h = nullptr;       ///< [tokens, hc, dim]
  const float* key = nullptr;     ///< [tokens, hc, dim]
  const float* value = nullptr;   ///< [tokens, dim]
  const float* weight = nullptr;  ///< [hc, dim]
  float* out = nullptr;           ///< [tokens, hc, dim]
  std::int64_t tokens = 0, dim = 0;
  int hc = 4;
  float eps = 1e-20f, clamp = 1e-6f;
  /// Floats from one token's keys (value) to the next; 0: hc * dim (dim), contiguous.
  /// (engram_gate_kv: both (hc + 1) * dim, read in place from the projection's rows.)
  std::int64_t key_stride = 0, value_stride = 0;
};
void launch_engram_gate(const engram_gate_params& p, cudaStream_t stream);

}  // namespace di::cuda

namespace di::cuda {

// ---- sampling ------------------------------------------------------------------------

/// One row's sampling settings (runtime/sampler.hpp's rules; greedy below 1e-5).
struct sample_row {
  double temperature = 1.0;
  double top_p = 1.0;
  double min_p = 0.0;
  int top_k = 0;            ///< <= 0: off
  std::uint64_t seed = 0;
  std::int64_t step = 0;    ///< the draw is random_uniform(seed, step), lane 0
};

/// Samples one token per row of adjusted logits [rows, vocab] (finite or -inf; masks,
/// suppressions and penalties already applied) exactly by runtime::sampler's definition:
/// greedy = lowest id of the largest logit; otherwise weights exp(-(m - l) / T) in double,
/// top-k (ties kept), top-p (ties never split), min-p, then the inverse-CDF walk in ascending
/// id order. Sums are deterministic block reductions (their order differs from the CPU's, so a
/// draw within double rounding of a boundary could pick the neighbour). A row with no finite
/// logit gives -1. `logsumexp` [rows] (optional) receives log sum exp(l) of the row, for
/// logprobs l - logsumexp.
struct sample_params {
  const float* logits = nullptr;     ///< [rows, vocab]
  const sample_row* rows_cfg = nullptr;  ///< [rows] (device)
  std::int32_t* tokens = nullptr;    ///< [rows]
  float* logsumexp = nullptr;        ///< [rows] or null
  std::int64_t rows = 0, vocab = 0;
};
void launch_sample(const sample_params& p, cudaStream_t stream);

/// The sampler's logit edits, in place and in its order (runtime/logits_processors.hpp):
/// allowed-token bitmask (bit i of word i / 32; 0 = -inf), suppressed ids (-inf), then the
/// penalties over each row's distinct seen tokens: x = x > 0 ? x / repetition : x * repetition,
/// minus frequency * num_output + presence when the token was generated (double, as the CPU).
/// Rows' lists are CSR: entries [offsets[r], offsets[r + 1]). Ids outside the vocabulary are
/// skipped (the CPU raises an error for them at admission).
struct penalty_row {
  double repetition = 1.0, frequency = 0.0, presence = 0.0;
};
struct logit_edit_params {
  float* logits = nullptr;                   ///< [rows, vocab]
  std::int64_t rows = 0, vocab = 0;
  const std::uint32_t* allowed = nullptr;    ///< [rows, (vocab + 31) / 32] or null
  const std::int64_t* suppressed_offsets = nullptr;  ///< [rows + 1] or null
  const std::int32_t* suppressed_ids = nullptr;
  const std::int64_t* seen_offsets = nullptr;        ///< [rows + 1] or null (no penalties)
  const std::int32_t* seen_ids = nullptr;            ///< distinct per row
  const std::int32_t* seen_num_output = nullptr;
  const penalty_row* penalties = nullptr;            ///< [rows]
};
void launch_logit_edits(const logit_edit_params& p, cudaStream_t stream);

}  // namespace di::cuda
