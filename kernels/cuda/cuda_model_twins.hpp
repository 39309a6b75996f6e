// The tensor-level CUDA twins of the model ops of kernels/ops.hpp (same functions and
// contracts as di::ops, for tensors on a CUDA device): host-side shape/dtype checks, outputs
// allocated on the operands' device, kernels of cuda_model_ops.hpp enqueued on the current
// stream (kernels/cuda/stream.hpp). kernels/ops.cpp dispatches here for CUDA operands.
//
// Beyond the op interface, attention_packed() runs attention straight over packed cache rows
// (the window ring and the compressed stream) without decoding them first.
#pragma once

#include "kernels/cuda/cuda_model_ops.hpp"
#include "kernels/ops.hpp"

#include <span>

namespace di::cuda {

tensor sparse_attention(const tensor& q, const tensor& kv, const tensor& sinks,
                        const tensor& indices, const ops::sparse_attention_params& params);

/// Attention of q [tokens, heads, dim] over packed rows: window rows [w_rows, row_bytes] u8
/// (format wf) named by window_idx [tokens, kw] i32, then extra rows (format ef) named by
/// extra_idx [tokens, ke] i32 (-1 unused; an undefined extra tensor = none). Returns
/// [tokens, heads, dim] f32, equal to sparse_attention over the decoded rows (fp16 rounding).
tensor attention_packed(const tensor& q, const tensor& sinks, const tensor& window,
                        const cache_row_format& wf, const tensor& window_idx, const tensor& extra,
                        const cache_row_format& ef, const tensor& extra_idx, float softmax_scale);

tensor index_scores(const tensor& q, const tensor& keys, const tensor& weights);
/// index_scores over packed key rows [entries, fmt.row_bytes()] u8 (the FP4 index-key stream),
/// read in place.
tensor index_scores_packed(const tensor& q, const tensor& keys, const cache_row_format& fmt,
                           const tensor& weights);
tensor topk(const tensor& scores, int k);
tensor masked_topk(const tensor& scores, const tensor& visible, const tensor& allowed, int k);
/// masked_topk's picks [rows, k] and, by the same launch, map[r, pick] for each of them
/// (`map` [rows, n] i32; -1 where the pick is -1).
std::pair<tensor, tensor> masked_topk_mapped(const tensor& scores, const tensor& visible,
                                             const tensor& allowed, int k, const tensor& map);
tensor candidate_blocks(const tensor& scores, const tensor& visible, int topk_blocks,
                        int block_size);
ops::routing route(const tensor& logits, const tensor& bias, const tensor& fixed,
                   const ops::router_params& params);
ops::expert_groups group_by_expert(const ops::routing& route, int experts);
tensor swiglu(const tensor& gate, const tensor& up, float limit, const tensor& row_scale);
ops::quantized_rows swiglu_quantized(const tensor& gate, const tensor& up, float limit,
                                     const tensor& row_scale, int block);
tensor compress_tokens(const tensor& kv, const tensor& score, std::int64_t start, tensor& state_kv,
                       tensor& state_score, const ops::compress_params& params);
tensor engram_gate(const tensor& h, const tensor& key, const tensor& value, const tensor& weight,
                   const ops::engram_params& params);
tensor engram_gate_kv(const tensor& h, const tensor& kv, const tensor& weight,
                      const ops::engram_params& params);
ops::hc_mix hc_mixes(const tensor& x, const tensor& fn, const tensor& scale, const tensor& base,
                     const ops::hc_params& params);
tensor hc_head_pre(const tensor& x, const tensor& fn, const tensor& scale, const tensor& base,
                   const ops::hc_params& params);
tensor hc_collapse(const tensor& x, const tensor& pre);
tensor hc_collapse_norm(const tensor& x, const tensor& pre, const tensor& weight, float eps);
ops::quantized_rows hc_collapse_norm_quantized(const tensor& x, const tensor& pre,
                                               const tensor& weight, float eps, int block);
tensor hc_expand(const tensor& y, const tensor& residual, const tensor& post, const tensor& comb);
/// One token per row of adjusted logits [rows, vocab] f32 (device) with the rows' settings
/// (host, copied to the device): [rows] i32 on the device (launch_sample's rules). When
/// `logsumexp` is given it receives [rows] f32 log sum exp of each row.
tensor sample_tokens(const tensor& logits, std::span<const sample_row> settings,
                     tensor* logsumexp = nullptr);

void encode_cache_rows(const tensor& x, const cache_row_format& fmt, tensor& out);
/// Encodes row i of x [n, fmt.dim()] into row dst_rows[i] ([n] i64) of pool [rows,
/// fmt.row_bytes()] u8: the window ring's slots or a paged stream's rows, in one launch.
void encode_cache_rows_at(const tensor& x, const cache_row_format& fmt, tensor& pool,
                          const tensor& dst_rows);
void decode_cache_rows(const tensor& rows, const cache_row_format& fmt, tensor& out);

}  // namespace di::cuda
