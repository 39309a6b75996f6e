// Declarations of the CPU backend of the op interface (kernels/ops.hpp): the same functions
// and contracts, implemented with plain loops in kernels/cpu/*.cpp. Only ops.cpp and the
// kernel tests include this; everything else calls di::ops.
#pragma once

#include "kernels/ops.hpp"

namespace di::cpu {

/// Work (multiply-adds or element updates) below which an op runs on one thread: OpenMP's
/// fork/join and spin-waiting cost more than they save on small tensors.
inline constexpr std::int64_t parallel_work = std::int64_t(1) << 22;

using ops::compress_params;
using ops::engram_params;
using ops::expert_linear_params;
using ops::fp4_scale;
using ops::hc_mix;
using ops::hc_params;
using ops::linear_params;
using ops::router_params;
using ops::expert_groups;
using ops::routing;
using ops::sparse_attention_params;

tensor embedding(const tensor& table, const tensor& ids);
tensor embedding_fp8(const tensor& codes, const tensor& scales, const tensor& ids);
tensor gather_rows(const tensor& x, const tensor& rows);
void scatter_add_rows(tensor& y, const tensor& rows, const tensor& src);
void gather_add_rows(tensor& y, const tensor& slots, const tensor& src);
void add_inplace(tensor& y, const tensor& x);
void add_position_rows(tensor& y, const tensor& table, const tensor& positions);
tensor concat_rows(std::span<const tensor> parts);
tensor rms_norm(const tensor& x, const tensor& weight, float eps);
tensor linear(const tensor& x, const weight_matrix& weight, const linear_params& params);
tensor grouped_linear(const tensor& x, const weight_matrix& weight);
tensor expert_linear(const tensor& x, const tensor& offsets, const weight_matrix& weights,
                     const expert_linear_params& params);
void fp8_fake_quant(tensor& x, int block, std::int64_t num_dims);
void fp4_fake_quant(tensor& x, int block, fp4_scale scale);
void hadamard(tensor& x);
void rotary(tensor& x, const tensor& positions, const tensor& inv_freq, bool inverse);
tensor sparse_attention(const tensor& q, const tensor& kv, const tensor& sinks,
                        const tensor& indices, const sparse_attention_params& params);
tensor index_scores(const tensor& q, const tensor& keys, const tensor& weights);
tensor topk(const tensor& scores, int k);
tensor masked_topk(const tensor& scores, const tensor& visible, const tensor& allowed, int k);
tensor candidate_blocks(const tensor& scores, const tensor& visible, int topk_blocks,
                        int block_size);
routing route(const tensor& logits, const tensor& bias, const tensor& fixed,
              const router_params& params);
expert_groups group_by_expert(const routing& route, int experts);
tensor swiglu(const tensor& gate, const tensor& up, float limit, const tensor& row_scale);
tensor compress_tokens(const tensor& kv, const tensor& score, std::int64_t start, tensor& state_kv,
                       tensor& state_score, const compress_params& params);
tensor engram_gate(const tensor& h, const tensor& key, const tensor& value, const tensor& weight,
                   const engram_params& params);
tensor engram_gate_kv(const tensor& h, const tensor& kv, const tensor& weight,
                      const engram_params& params);
hc_mix hc_mixes(const tensor& x, const tensor& fn, const tensor& scale, const tensor& base,
                const hc_params& params);
tensor hc_head_pre(const tensor& x, const tensor& fn, const tensor& scale, const tensor& base,
                   const hc_params& params);
tensor hc_collapse(const tensor& x, const tensor& pre);
tensor hc_expand(const tensor& y, const tensor& residual, const tensor& post, const tensor& comb);
void encode_cache_rows(const tensor& x, const cache_row_format& fmt, tensor& out);
void decode_cache_rows(const tensor& rows, const cache_row_format& fmt, tensor& out);

}  // namespace di::cpu
