// FP8 block and MXFP4 quantization of generated weights, built on the scalar conversions
// of kernels/dtype.hpp (the project's definition of each format).
#include "model/make_model/quantize.hpp"

#include "common/error.hpp"
#include "kernels/dtype.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace di {

namespace {

/// f32_to_e2m1 for finite inputs without its loop: the code counts the grid midpoints below
/// |x|, ties going to the even code (up at 0.75, 1.75, 3.5; down at 0.25, 1.25, 2.5, 5).
/// Branch-free, so the packing loop vectorizes; equal to f32_to_e2m1 (tested).
inline std::uint8_t e2m1_code(float x) {
  const float a = std::fabs(x);
  const int code = int(a > 0.25f) + int(a >= 0.75f) + int(a > 1.25f) + int(a >= 1.75f) +
                   int(a > 2.5f) + int(a >= 3.5f) + int(a > 5.0f);
  return std::uint8_t(code | (std::signbit(x) ? 0x8 : 0x0));
}

}  // namespace

std::uint8_t ue8m0_scale_for(float amax, float max_value) {
  float ratio = std::max(amax, 1e-4f) / max_value;
  int exp = 0;
  float mantissa = std::frexp(ratio, &exp);  // ratio = mantissa x 2^exp, mantissa in [0.5, 1)
  if (mantissa == 0.5f) --exp;               // an exact power of two needs no rounding up
  return std::uint8_t(std::clamp(exp + 127, 0, 254));
}

void quantize_fp8_blocks(const float* values, std::int64_t num_rows, std::int64_t cols,
                         block_shape block, std::uint8_t* out, std::uint8_t* scales) {
  const std::int64_t scale_cols = (cols + block.cols - 1) / block.cols;
  for (std::int64_t r0 = 0; r0 < num_rows; r0 += block.rows) {
    const std::int64_t r1 = std::min(num_rows, r0 + block.rows);
    for (std::int64_t c0 = 0, sc = 0; c0 < cols; c0 += block.cols, ++sc) {
      const std::int64_t c1 = std::min(cols, c0 + block.cols);
      float amax = 0.0f;
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t c = c0; c < c1; ++c)
          amax = std::max(amax, std::fabs(values[r * cols + c]));
      const std::uint8_t s = ue8m0_scale_for(amax, e4m3_max);
      scales[(r0 / block.rows) * scale_cols + sc] = s;
      const float inv = 1.0f / e8m0_to_f32(s);  // exact: a power of two
      for (std::int64_t r = r0; r < r1; ++r)
        for (std::int64_t c = c0; c < c1; ++c)
          out[r * cols + c] = f32_to_e4m3(values[r * cols + c] * inv);
    }
  }
}

void quantize_fp4_blocks(const float* values, std::int64_t num_rows, std::int64_t cols,
                         std::uint8_t* out, std::uint8_t* scales) {
  DI_CHECK(cols % 2 == 0, "FP4 packing needs an even number of columns, got {}", cols);
  const std::int64_t scale_cols = (cols + fp4_block_cols - 1) / fp4_block_cols;
  for (std::int64_t r = 0; r < num_rows; ++r) {
    const float* row = values + r * cols;
    std::uint8_t* packed = out + r * (cols / 2);
    for (std::int64_t c0 = 0, sc = 0; c0 < cols; c0 += fp4_block_cols, ++sc) {
      const std::int64_t c1 = std::min(cols, c0 + fp4_block_cols);
      float amax = 0.0f;
      for (std::int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(row[c]));
      const std::uint8_t s = ue8m0_scale_for(amax, e2m1_max);
      scales[r * scale_cols + sc] = s;
      const float inv = 1.0f / e8m0_to_f32(s);
      for (std::int64_t c = c0; c < c1; c += 2) {
        std::uint8_t lo = e2m1_code(row[c] * inv), hi = e2m1_code(row[c + 1] * inv);
        packed[c / 2] = std::uint8_t(lo | (hi << 4));
      }
    }
  }
}

void convert_to_bf16(const float* values, std::int64_t count, std::uint8_t* out) {
  for (std::int64_t i = 0; i < count; ++i) {
    std::uint16_t h = f32_to_bf16(values[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

}  // namespace di
