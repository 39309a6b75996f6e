// CPU GEMMs y = x W^T on weights in their stored format (fp32, BF16, FP8 e4m3 with block
// scales, packed MXFP4), with optional FP8 activation quantization, plus the block-diagonal
// grouped projection of the attention output. Each weight row is decoded to fp32 (value times
// its scale, rounded once as the host dequantization rounds it) into an L2-resident tile right
// before its dot products, so results are bitwise those of dequantizing on load and the
// weights can stay memory-mapped. OpenMP over tiles of output rows; fp32 accumulation; an AVX2
// clone where the CPU has it.
#include "kernels/cpu/cpu_ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace di::cpu {

namespace {

/// Decoded weight rows per tile: enough to reuse each input row from L1 across several dot
/// products, few enough that the tile stays in L2 while every input row streams past it.
constexpr std::int64_t tile_bytes = std::int64_t(256) << 10;
constexpr std::int64_t max_tile_rows = 64;

/// Eight fp32 lanes (one AVX register, two SSE ones): element-wise IEEE operations, so the
/// result of each lane does not depend on the vector width the compiler picks.
using lanes8 = float __attribute__((vector_size(32)));

/// K dot products out[k] = a[k] . b[k] of length n, each with eight partial sums combined in a
/// fixed tree, then the tail in order. Every output of every weight format goes through this
/// one order of operations, which is what keeps stored-format results bitwise equal to the
/// dequantized ones. K > 1 interleaves independent products so that their additions overlap
/// instead of each waiting on its own accumulator's latency. Product and sum are separate
/// statements so that no compiler contracts them into an FMA.
template <int K>
[[gnu::always_inline]] inline void dots(const float* const* a, const float* const* b,
                                        std::int64_t n, float* out) {
  lanes8 acc[K];
  for (int k = 0; k < K; ++k) acc[k] = lanes8{};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < K; ++k) {
      lanes8 x, w;  // unaligned loads
      std::memcpy(&x, a[k] + i, sizeof x);
      std::memcpy(&w, b[k] + i, sizeof w);
      const lanes8 product = x * w;
      acc[k] += product;
    }
  }
  for (int k = 0; k < K; ++k) {
    const lanes8& s = acc[k];
    float sum = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (std::int64_t t = i; t < n; ++t) {
      const float product = a[k][t] * b[k][t];
      sum += product;
    }
    out[k] = sum;
  }
}

// Decoding by moving a code's bits into an fp32 as they are: the exponent field then sits
// 120 (e4m3) or 126 (e2m1) below its fp32 bias, and codes with a zero exponent land on fp32
// subnormals with the matching spacing. So value = shifted * 2^rebias for every code, exactly,
// with no branch and no table: a row decodes in SIMD lanes. (This needs subnormals honoured,
// as they are unless a -ffast-math object sets flush-to-zero for the process.)

/// e4m3 code -> value * 2^-120 (S.1111.111 -> NaN, as e4m3_to_f32).
[[gnu::always_inline]] inline float e4m3_shifted(std::uint8_t code) {
  const std::uint32_t sign = std::uint32_t(code & 0x80u) << 24;
  const std::uint32_t mag = code & 0x7fu;
  return bits_to_f32(mag == 0x7f ? (sign | 0x7fc00000u) : (sign | (mag << 20)));
}
constexpr float e4m3_rebias = 0x1p120f;

/// e2m1 nibble -> value * 2^-126.
[[gnu::always_inline]] inline float e2m1_shifted(std::uint8_t nibble) {
  return bits_to_f32((std::uint32_t(nibble & 0x8u) << 28) | (std::uint32_t(nibble & 0x7u) << 22));
}
constexpr float e2m1_rebias = 0x1p126f;

/// Factors with shifted * first * second == fl(value * scale), the reference's one rounding:
/// (2^rebias * scale, 1) when that product is finite (it is then exact), else (2^rebias,
/// scale) -- shifted * 2^rebias is the exact value.
struct scale_factors {
  float first;
  float second;
};

[[gnu::always_inline]] inline scale_factors fold_scale(float scale, float rebias) {
  const float folded = scale * rebias;
  return std::isinf(folded) ? scale_factors{rebias, scale} : scale_factors{folded, 1.0f};
}

/// Scale `i` of a scale row stored as F8_E8M0 or (unaligned) F32.
[[gnu::always_inline]] inline float scale_at(const std::uint8_t* row, bool is_e8m0,
                                             std::int64_t i) {
  if (is_e8m0) return e8m0_to_f32(row[i]);
  float s;
  std::memcpy(&s, row + 4 * i, 4);
  return s;
}

/// The reader of one weight matrix: row n as fp32, decoded into caller storage.
class row_decoder {
 public:
  explicit row_decoder(const weight_matrix& w)
      : w_(w),
        type_(w.values.type()),
        cols_(w.cols()),
        values_(static_cast<const std::uint8_t*>(w.values.raw())),
        scales_(w.scales.defined() ? static_cast<const std::uint8_t*>(w.scales.raw()) : nullptr),
        is_e8m0_(w.scales.defined() && w.scales.type() == dtype::f8_e8m0) {}

  /// Row `n` [cols] as fp32: aligned f32 storage is returned in place, anything else is
  /// decoded into `buf` [cols].
  [[gnu::always_inline]] const float* row(std::int64_t n, float* buf) const {
    switch (type_) {
      case dtype::f32: {
        const std::uint8_t* src = values_ + 4 * n * cols_;
        if (reinterpret_cast<std::uintptr_t>(src) % alignof(float) == 0)
          return reinterpret_cast<const float*>(src);
        std::memcpy(buf, src, std::size_t(cols_) * 4);
        return buf;
      }
      case dtype::bf16:
        bf16_row(n, buf);
        return buf;
      case dtype::f8_e4m3:
        fp8_row(n, buf);
        return buf;
      default:
        fp4_row(n, buf);
        return buf;
    }
  }

 private:
  [[gnu::always_inline]] const std::uint8_t* scale_row(std::int64_t n) const {
    return scales_ + (n / w_.block.rows) * w_.scales.size(1) * (is_e8m0_ ? 1 : 4);
  }

  [[gnu::always_inline]] void bf16_row(std::int64_t n, float* out) const {
    const std::uint8_t* src = values_ + 2 * n * cols_;
    for (std::int64_t i = 0; i < cols_; ++i) {
      std::uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      out[i] = bits_to_f32(std::uint32_t(h) << 16);
    }
  }

  [[gnu::always_inline]] void fp8_row(std::int64_t n, float* out) const {
    const std::uint8_t* codes = values_ + n * cols_;
    const std::uint8_t* scales = scale_row(n);
    const std::int64_t bc = w_.block.cols;
    for (std::int64_t b = 0; b * bc < cols_; ++b) {
      const scale_factors f = fold_scale(scale_at(scales, is_e8m0_, b), e4m3_rebias);
      const std::int64_t end = std::min(cols_, (b + 1) * bc);
      for (std::int64_t i = b * bc; i < end; ++i)
        out[i] = e4m3_shifted(codes[i]) * f.first * f.second;
    }
  }

  [[gnu::always_inline]] void fp4_row(std::int64_t n, float* out) const {
    const std::uint8_t* packed = values_ + n * (cols_ / 2);
    const std::uint8_t* scales = scale_row(n);
    constexpr std::int64_t block_bytes = mxfp4_block_cols / 2;
    const std::int64_t num_bytes = cols_ / 2;
    std::int64_t b = 0;
    // Whole blocks with a trip count known at compile time (fully vectorized), then the rest.
    for (; (b + 1) * block_bytes <= num_bytes; ++b)
      fp4_bytes(packed, scale_at(scales, is_e8m0_, b), b * block_bytes, block_bytes, out);
    if (b * block_bytes < num_bytes)
      fp4_bytes(packed, scale_at(scales, is_e8m0_, b), b * block_bytes, num_bytes - b * block_bytes,
                out);
  }

  /// Bytes [begin, begin + count) of a packed row, both nibbles, times `scale`.
  [[gnu::always_inline]] static void fp4_bytes(const std::uint8_t* packed, float scale,
                                               std::int64_t begin, std::int64_t count, float* out) {
    const scale_factors f = fold_scale(scale, e2m1_rebias);
    for (std::int64_t j = begin; j < begin + count; ++j) {
      out[2 * j] = e2m1_shifted(packed[j] & 0xf) * f.first * f.second;
      out[2 * j + 1] = e2m1_shifted(packed[j] >> 4) * f.first * f.second;
    }
  }

  const weight_matrix& w_;
  dtype type_;
  std::int64_t cols_;
  const std::uint8_t* values_;
  const std::uint8_t* scales_;
  bool is_e8m0_;
};

/// One product y [rows, out] = per-group x W^T: the input of output j for row r is
/// a[r * groups * in + (j / (out / groups)) * in ...], W's row j. groups = 1 is a plain linear.
struct product_params {
  const float* a;  // [rows, groups, in]
  std::int64_t rows;
  std::int64_t groups;
  const row_decoder* weight;  // [out, in]
  std::int64_t in;
  std::int64_t out;
  float* y;  // [rows, out]
};

/// Outputs [n0, n0 + count) of every row: decode those weight rows into `buf` [count, in],
/// then each input row's dot products against them (its row stays in L1 across the tile).
/// Cloned for AVX2: the same operations per lane in wider vectors (no FMA), so results do not
/// depend on which clone runs.
[[gnu::target_clones("avx2", "default")]] void product_tile(const product_params& p,
                                                            std::int64_t n0, std::int64_t count,
                                                            float* buf) {
  const float* wrow[max_tile_rows];          // [count] decoded weight rows
  std::int64_t group_offset[max_tile_rows];  // [count] where each row's group input starts
  const std::int64_t in = p.in, per_group = p.out / p.groups;
  for (std::int64_t i = 0; i < count; ++i) {
    wrow[i] = p.weight->row(n0 + i, buf + i * in);
    group_offset[i] = (n0 + i) / per_group * in;
  }
  constexpr int K = 4;  // products in flight
  for (std::int64_t r = 0; r < p.rows; ++r) {
    const float* ar = p.a + r * p.groups * in;  // [groups, in]
    float* yr = p.y + r * p.out + n0;           // [count]
    const float* inputs[max_tile_rows];         // [count] this row's input of each output
    for (std::int64_t i = 0; i < count; ++i) inputs[i] = ar + group_offset[i];
    std::int64_t i = 0;
    for (; i + K <= count; i += K) dots<K>(inputs + i, wrow + i, in, yr + i);
    for (; i < count; ++i) dots<1>(inputs + i, wrow + i, in, yr + i);
  }
}

void multiply(const float* a, std::int64_t rows, std::int64_t groups, const weight_matrix& w,
              float* y) {
  const std::int64_t in = w.cols(), out = w.rows();
  if (rows == 0 || out == 0) return;
  const std::int64_t tile =
      std::clamp<std::int64_t>(tile_bytes / std::max<std::int64_t>(1, 4 * in), 1, max_tile_rows);
  const std::int64_t num_tiles = (out + tile - 1) / tile;
  const row_decoder decoder(w);
  const product_params p{a, rows, groups, &decoder, in, out, y};
#pragma omp parallel if (rows * out * in > parallel_work)
  {
    // Reused across calls: a fresh 256 KB per call and thread would go back to mmap each time.
    thread_local std::vector<float> buf;
    buf.resize(std::size_t(tile * in));
#pragma omp for schedule(static)
    for (std::int64_t t = 0; t < num_tiles; ++t)
      product_tile(p, t * tile, std::min(tile, out - t * tile), buf.data());
  }
}

}  // namespace

tensor linear(const tensor& x, const weight_matrix& weight, const linear_params& params) {
  check_cpu_tensor(x, dtype::f32, 2, "linear input");
  check_weight_matrix(weight, "linear weight");
  const std::int64_t rows = x.size(0), in = x.size(1), out_dim = weight.rows();
  DI_CHECK(weight.cols() == in, "linear: input has {} features, weight [{}, {}] expects {}", in,
           weight.rows(), weight.cols(), weight.cols());
  tensor input = x;  // [rows, in]
  if (params.act_quant_block > 0) {
    input = x.clone();
    fp8_fake_quant(input, params.act_quant_block, in);
  }
  tensor out = tensor::empty({rows, out_dim}, dtype::f32);  // [rows, out]
  multiply(input.data<float>(), rows, 1, weight, out.data<float>());
  return out;
}

tensor grouped_linear(const tensor& x, const weight_matrix& weight) {
  check_cpu_tensor(x, dtype::f32, 3, "grouped_linear input");
  check_weight_matrix(weight, "grouped_linear weight");
  const std::int64_t rows = x.size(0), groups = x.size(1), in = x.size(2);
  DI_CHECK(groups > 0 && weight.cols() == in && weight.rows() % groups == 0,
           "grouped_linear: weight [{}, {}] does not fit {} groups of {} inputs", weight.rows(),
           weight.cols(), groups, in);
  const std::int64_t out_dim = weight.rows() / groups;
  tensor out = tensor::empty({rows, groups, out_dim}, dtype::f32);  // [rows, groups, out]
  multiply(x.data<float>(), rows, groups, weight, out.data<float>());
  return out;
}

tensor expert_linear(const tensor& x, const tensor& offsets, const weight_matrix& weights,
                     const expert_linear_params& params) {
  check_cpu_tensor(x, dtype::f32, 2, "expert_linear input");
  check_cpu_tensor(offsets, dtype::i32, 1, "expert_linear offsets");
  check_weight_matrix(weights, "expert_linear weights");
  const std::int64_t experts = offsets.size(0) - 1, rows = x.size(0);
  DI_CHECK(experts > 0 && weights.rows() % experts == 0,
           "expert_linear: {} stacked weight rows do not split into {} experts", weights.rows(),
           experts);
  const std::int64_t out_dim = weights.rows() / experts;
  DI_CHECK(!weights.scales.defined() || out_dim % weights.block.rows == 0,
           "expert_linear: {} rows per expert is not a multiple of the {}-row scale block",
           out_dim, weights.block.rows);
  const std::int32_t* off = offsets.data<std::int32_t>();
  // rows_all_grouped is the caller's promise that the experts' ranges cover every row, on which
  // CUDA leaves its output unzeroed: a row outside them would come back as whatever the memory
  // held, not zero. Checked here, where the offsets are host memory, so that a CPU forward
  // (the MoE's own caller, model/forward/moe.cpp) finds a broken promise; on CUDA they are the
  // device's, and reading them would sync the step and break its graph capture.
  DI_CHECK(!params.rows_all_grouped || (off[0] == 0 && off[experts] == rows),
           "expert_linear: rows_all_grouped is set, but the experts' ranges cover rows [{}, {}) "
           "of x's {} (offsets[0] and offsets[{}]): the rows outside them are in no expert's "
           "range, and CUDA would leave their outputs unwritten",
           off[0], off[experts], rows, experts);
  tensor out = tensor::zeros({rows, out_dim}, dtype::f32);  // [rows, out]
  for (std::int64_t e = 0; e < experts; ++e) {
    DI_CHECK(0 <= off[e] && off[e] <= off[e + 1] && off[e + 1] <= rows,
             "expert_linear: offsets [{}, {}) of expert {} outside [0, {}]", off[e], off[e + 1], e,
             rows);
    if (off[e] == off[e + 1]) continue;
    weight_matrix w = weights;
    w.values = weights.values.slice(0, e * out_dim, (e + 1) * out_dim);
    if (weights.scales.defined()) {
      const std::int64_t br = weights.block.rows;
      w.scales = weights.scales.slice(0, e * out_dim / br, (e + 1) * out_dim / br);
    }
    const tensor y = linear(x.slice(0, off[e], off[e + 1]), w, {params.act_quant_block});
    std::memcpy(out.data<float>() + off[e] * out_dim, y.data<float>(), y.nbytes());
  }
  return out;
}

}  // namespace di::cpu
