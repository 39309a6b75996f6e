// The op interface's dispatch: each op runs on the backend of its first operand's device.
// Ops with a CUDA twin (kernels/cuda/cuda_ops.hpp) go there for CUDA tensors when the CUDA
// backend is built (DI_CUDA_TWIN); every other op given a CUDA tensor is a clear error
// naming the op (require_cpu).
#include "kernels/ops.hpp"

#include "kernels/cpu/cpu_ops.hpp"

#if defined(DEEPINFER_HAVE_CUDA)
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/cuda_model_twins.hpp"
/// Returns the CUDA twin's result when `operand` lives on a CUDA device.
#define DI_CUDA_TWIN(operand, call) \
  if ((operand).dev().kind == device_kind::cuda) return cuda::call
#else
#define DI_CUDA_TWIN(operand, call) static_cast<void>(0)
#endif

namespace di::ops {

namespace {

void require_cpu(const tensor& t, const char* op) {
  DI_CHECK(t.dev().kind == device_kind::cpu, "{}: no {} kernel for tensors on {}", op,
#if defined(DEEPINFER_HAVE_CUDA)
           "CUDA",
#else
           "CUDA (this build has no CUDA backend)",
#endif
           to_string(t.dev()));
}

}  // namespace

tensor embedding(const tensor& table, const tensor& ids) {
  DI_CUDA_TWIN(table, embedding(table, ids));
  require_cpu(table, "embedding");
  return cpu::embedding(table, ids);
}

tensor embedding_fp8(const tensor& codes, const tensor& scales, const tensor& ids) {
  DI_CUDA_TWIN(codes, embedding_fp8(codes, scales, ids));
  require_cpu(codes, "embedding_fp8");
  return cpu::embedding_fp8(codes, scales, ids);
}

tensor gather_rows(const tensor& x, const tensor& rows) {
  DI_CUDA_TWIN(x, gather_rows(x, rows));
  require_cpu(x, "gather_rows");
  return cpu::gather_rows(x, rows);
}

void scatter_add_rows(tensor& y, const tensor& rows, const tensor& src) {
  DI_CUDA_TWIN(y, scatter_add_rows(y, rows, src));
  require_cpu(y, "scatter_add_rows");
  cpu::scatter_add_rows(y, rows, src);
}

void gather_add_rows(tensor& y, const tensor& slots, const tensor& src) {
  DI_CUDA_TWIN(y, gather_add_rows(y, slots, src));
  require_cpu(y, "gather_add_rows");
  cpu::gather_add_rows(y, slots, src);
}

void add_inplace(tensor& y, const tensor& x) {
  DI_CUDA_TWIN(y, add_inplace(y, x));
  require_cpu(y, "add_inplace");
  cpu::add_inplace(y, x);
}

void detail::check_position_rows(const tensor& y, const tensor& table, const tensor& positions) {
  DI_CHECK(y.type() == dtype::f32 && y.rank() == 2 && y.is_contiguous(),
           "add_position_rows: target must be contiguous [rows, width] f32, got {}",
           y.shape().str());
  DI_CHECK(positions.defined() && positions.type() == dtype::i64 && positions.rank() == 1 &&
               positions.is_contiguous() && positions.size(0) == y.size(0),
           "add_position_rows: {} rows need [{}] i64 positions", y.size(0), y.size(0));
  DI_CHECK(table.type() == dtype::f32 && table.rank() == 2 && table.size(0) > 0 &&
               table.size(1) == y.size(1) && table.is_contiguous(),
           "add_position_rows: table must be contiguous [period, {}] f32, got {}", y.size(1),
           table.shape().str());
}

void add_position_rows(tensor& y, const tensor& table, const tensor& positions) {
  DI_CUDA_TWIN(y, add_position_rows(y, table, positions));
  require_cpu(y, "add_position_rows");
  cpu::add_position_rows(y, table, positions);
}

tensor concat_rows(std::span<const tensor> parts) {
  if (!parts.empty()) DI_CUDA_TWIN(parts[0], concat_rows(parts));
  for (const tensor& p : parts) require_cpu(p, "concat_rows");
  return cpu::concat_rows(parts);
}

tensor rms_norm(const tensor& x, const tensor& weight, float eps) {
  DI_CUDA_TWIN(x, rms_norm(x, weight, eps));
  require_cpu(x, "rms_norm");
  return cpu::rms_norm(x, weight, eps);
}

quantized_rows rms_norm_quantized(const tensor& x, const tensor& weight, float eps, int block) {
  DI_CUDA_TWIN(x, rms_norm_quantized(x, weight, eps, block));
  require_cpu(x, "rms_norm_quantized");
  return {cpu::rms_norm(x, weight, eps), {}, {}, block};  // the CPU's linear quantizes x
}

tensor linear(const quantized_rows& x, const weight_matrix& weight, const linear_params& params) {
  DI_CUDA_TWIN(x.x, linear(x, weight, params));
  return linear(x.x, weight, params);
}

std::pair<tensor, tensor> linear_pair(const quantized_rows& x, const weight_matrix& a,
                                      const weight_matrix& b, const linear_params& params) {
  DI_CUDA_TWIN(x.x, linear_pair(x, a, b, params));
  return linear_pair(x.x, a, b, params);
}

tensor expert_linear(const quantized_rows& x, const tensor& offsets, const weight_matrix& weights,
                     const expert_linear_params& params) {
  DI_CUDA_TWIN(x.x, expert_linear(x, offsets, weights, params));
  return expert_linear(x.x, offsets, weights, params);
}

tensor linear(const tensor& x, const weight_matrix& weight, const linear_params& params) {
  DI_CUDA_TWIN(x, linear(x, weight, params));
  require_cpu(x, "linear");
  return cpu::linear(x, weight, params);
}

std::pair<tensor, tensor> linear_pair(const tensor& x, const weight_matrix& a,
                                      const weight_matrix& b, const linear_params& params) {
  DI_CUDA_TWIN(x, linear_pair(x, a, b, params));
  require_cpu(x, "linear");
  return {cpu::linear(x, a, params), cpu::linear(x, b, params)};
}

tensor grouped_linear(const tensor& x, const weight_matrix& weight) {
  DI_CUDA_TWIN(x, grouped_linear(x, weight));
  require_cpu(x, "grouped_linear");
  return cpu::grouped_linear(x, weight);
}

tensor expert_linear(const tensor& x, const tensor& offsets, const weight_matrix& weights,
                     const expert_linear_params& params) {
  DI_CUDA_TWIN(x, expert_linear(x, offsets, weights, params));
  require_cpu(x, "expert_linear");
  return cpu::expert_linear(x, offsets, weights, params);
}

std::pair<tensor, tensor> expert_linear_pair(const tensor& x, const tensor& offsets,
                                             const weight_matrix& a, const weight_matrix& b,
                                             const expert_linear_params& params) {
  DI_CUDA_TWIN(x, expert_linear_pair(x, offsets, a, b, params));
  require_cpu(x, "expert_linear");
  return {cpu::expert_linear(x, offsets, a, params), cpu::expert_linear(x, offsets, b, params)};
}

void fp8_fake_quant(tensor& x, int block, std::int64_t num_dims) {
  DI_CUDA_TWIN(x, fp8_fake_quant(x, block, num_dims));
  require_cpu(x, "fp8_fake_quant");
  cpu::fp8_fake_quant(x, block, num_dims);
}

void fp4_fake_quant(tensor& x, int block, fp4_scale scale) {
  DI_CUDA_TWIN(x, fp4_fake_quant(x, block, scale));
  require_cpu(x, "fp4_fake_quant");
  cpu::fp4_fake_quant(x, block, scale);
}

void hadamard(tensor& x) {
  DI_CUDA_TWIN(x, hadamard(x));
  require_cpu(x, "hadamard");
  cpu::hadamard(x);
}

void rotary(tensor& x, const tensor& positions, const tensor& inv_freq, bool inverse) {
  DI_CUDA_TWIN(x, rotary(x, positions, inv_freq, inverse));
  require_cpu(x, "rotary");
  cpu::rotary(x, positions, inv_freq, inverse);
}

tensor norm_rope_quant(const tensor& x, const tensor& weight, float eps, const tensor& positions,
                       const tensor& inv_freq, int quant_block, std::int64_t quant_dims) {
  DI_CUDA_TWIN(x, norm_rope_quant(x, weight, eps, positions, inv_freq, quant_block, quant_dims));
  require_cpu(x, "norm_rope_quant");
  tensor y = cpu::rms_norm(x, weight, eps);
  cpu::rotary(y, positions, inv_freq, false);
  cpu::fp8_fake_quant(y, quant_block, quant_dims);
  return y;
}

tensor sparse_attention(const tensor& q, const tensor& kv, const tensor& sinks,
                        const tensor& indices, const sparse_attention_params& params) {
  DI_CUDA_TWIN(q, sparse_attention(q, kv, sinks, indices, params));
  require_cpu(q, "sparse_attention");
  return cpu::sparse_attention(q, kv, sinks, indices, params);
}

tensor index_scores(const tensor& q, const tensor& keys, const tensor& weights) {
  DI_CUDA_TWIN(q, index_scores(q, keys, weights));
  require_cpu(q, "index_scores");
  return cpu::index_scores(q, keys, weights);
}

tensor topk(const tensor& scores, int k) {
  DI_CUDA_TWIN(scores, topk(scores, k));
  require_cpu(scores, "topk");
  return cpu::topk(scores, k);
}

tensor masked_topk(const tensor& scores, const tensor& visible, const tensor& allowed, int k) {
  DI_CUDA_TWIN(scores, masked_topk(scores, visible, allowed, k));
  require_cpu(scores, "masked_topk");
  return cpu::masked_topk(scores, visible, allowed, k);
}

tensor candidate_blocks(const tensor& scores, const tensor& visible, int topk_blocks,
                        int block_size) {
  DI_CUDA_TWIN(scores, candidate_blocks(scores, visible, topk_blocks, block_size));
  require_cpu(scores, "candidate_blocks");
  return cpu::candidate_blocks(scores, visible, topk_blocks, block_size);
}

routing route(const tensor& logits, const tensor& bias, const tensor& fixed,
              const router_params& params) {
  DI_CUDA_TWIN(logits, route(logits, bias, fixed, params));
  require_cpu(logits, "route");
  return cpu::route(logits, bias, fixed, params);
}

expert_groups group_by_expert(const routing& route, int experts) {
  DI_CUDA_TWIN(route.experts, group_by_expert(route, experts));
  require_cpu(route.experts, "group_by_expert");
  return cpu::group_by_expert(route, experts);
}

quantized_rows swiglu_quantized(const tensor& gate, const tensor& up, float limit,
                                const tensor& row_scale, int block) {
  DI_CUDA_TWIN(gate, swiglu_quantized(gate, up, limit, row_scale, block));
  require_cpu(gate, "swiglu_quantized");
  return {cpu::swiglu(gate, up, limit, row_scale), {}, {}, block};
}

tensor swiglu(const tensor& gate, const tensor& up, float limit, const tensor& row_scale) {
  DI_CUDA_TWIN(gate, swiglu(gate, up, limit, row_scale));
  require_cpu(gate, "swiglu");
  return cpu::swiglu(gate, up, limit, row_scale);
}

tensor compress_tokens(const tensor& kv, const tensor& score, std::int64_t start, tensor& state_kv,
                       tensor& state_score, const compress_params& params) {
  DI_CUDA_TWIN(kv, compress_tokens(kv, score, start, state_kv, state_score, params));
  require_cpu(kv, "compress_tokens");
  return cpu::compress_tokens(kv, score, start, state_kv, state_score, params);
}

tensor engram_gate(const tensor& h, const tensor& key, const tensor& value, const tensor& weight,
                   const engram_params& params) {
  DI_CUDA_TWIN(h, engram_gate(h, key, value, weight, params));
  require_cpu(h, "engram_gate");
  return cpu::engram_gate(h, key, value, weight, params);
}

tensor engram_gate_kv(const tensor& h, const tensor& kv, const tensor& weight,
                      const engram_params& params) {
  DI_CUDA_TWIN(h, engram_gate_kv(h, kv, weight, params));
  require_cpu(h, "engram_gate_kv");
  return cpu::engram_gate_kv(h, kv, weight, params);
}

hc_mix hc_mixes(const tensor& x, const tensor& fn, const tensor& scale, const tensor& base,
                const hc_params& params) {
  DI_CUDA_TWIN(x, hc_mixes(x, fn, scale, base, params));
  require_cpu(x, "hc_mixes");
  return cpu::hc_mixes(x, fn, scale, base, params);
}

tensor hc_head_pre(const tensor& x, const tensor& fn, const tensor& scale, const tensor& base,
                   const hc_params& params) {
  DI_CUDA_TWIN(x, hc_head_pre(x, fn, scale, base, params));
  require_cpu(x, "hc_head_pre");
  return cpu::hc_head_pre(x, fn, scale, base, params);
}

tensor hc_collapse(const tensor& x, const tensor& pre) {
  DI_CUDA_TWIN(x, hc_collapse(x, pre));
  require_cpu(x, "hc_collapse");
  return cpu::hc_collapse(x, pre);
}

tensor hc_collapse_norm(const tensor& x, const tensor& pre, const tensor& weight, float eps) {
  DI_CUDA_TWIN(x, hc_collapse_norm(x, pre, weight, eps));
  require_cpu(x, "hc_collapse_norm");
  return rms_norm(cpu::hc_collapse(x, pre), weight, eps);
}

quantized_rows hc_collapse_norm_quantized(const tensor& x, const tensor& pre, const tensor& weight,
                                          float eps, int block) {
  DI_CUDA_TWIN(x, hc_collapse_norm_quantized(x, pre, weight, eps, block));
  return {hc_collapse_norm(x, pre, weight, eps), {}, {}, block};  // the CPU's linear quantizes
}

tensor hc_expand(const tensor& y, const tensor& residual, const tensor& post, const tensor& comb) {
  DI_CUDA_TWIN(y, hc_expand(y, residual, post, comb));
  require_cpu(y, "hc_expand");
  return cpu::hc_expand(y, residual, post, comb);
}

void encode_cache_rows(const tensor& x, const cache_row_format& fmt, tensor& out) {
  DI_CUDA_TWIN(x, encode_cache_rows(x, fmt, out));
  require_cpu(x, "encode_cache_rows");
  cpu::encode_cache_rows(x, fmt, out);
}

void decode_cache_rows(const tensor& rows, const cache_row_format& fmt, tensor& out) {
  DI_CUDA_TWIN(rows, decode_cache_rows(rows, fmt, out));
  require_cpu(rows, "decode_cache_rows");
  cpu::decode_cache_rows(rows, fmt, out);
}

}  // namespace di::ops
