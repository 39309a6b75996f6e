// Byte layouts of the quantized cache rows DeepSeek-V4/V4.1 keep per token (window KV) or per
// compressed entry (compressed KV, indexer keys). Quantization of these caches is part of the
// model, so rows are stored packed exactly as the model defines them and decoded on read.
#pragma once

#include <cstddef>
#include <cstdint>

namespace di {

enum class cache_quant : std::uint8_t {
  fp8_ue8m0,  ///< e4m3 codes, one power-of-two e8m0 scale per block
  fp4_e4m3,   ///< e2m1 codes packed two per byte (low nibble first), one e4m3 scale per block
  fp4_ue8m0,  ///< e2m1 codes packed two per byte, one e8m0 scale per block
};

/// One cache row: `quant_dims` leading values quantized per `block`, then `raw_dims` trailing
/// values kept as fp32 (V4 keeps the rope tail of its KV unquantized). Bytes, in order:
///   codes  [quant_dims] (FP8) or [quant_dims / 2] (FP4)
///   scales [quant_dims / block]   (e8m0 or e4m3)
///   raw    [raw_dims] little-endian fp32
///   pad    zero bytes up to a multiple of `row_align` (the row stride)
/// The cache layout pads V4's 711-byte rows to 720 (row_align 16) so that the attention kernel
/// stages them with 16-byte copies like V4.1's 528-byte rows; the codecs never read the pad.
struct cache_row_format {
  cache_quant quant = cache_quant::fp8_ue8m0;
  int block = 32;
  int quant_dims = 0;
  int raw_dims = 0;
  int row_align = 1;  ///< row stride multiple (1: no padding)

  int dim() const { return quant_dims + raw_dims; }
  bool is_fp4() const { return quant != cache_quant::fp8_ue8m0; }
  std::size_t code_bytes() const { return std::size_t(is_fp4() ? quant_dims / 2 : quant_dims); }
  std::size_t scale_bytes() const { return std::size_t(quant_dims / block); }
  /// Bytes the values occupy (codes, scales, raw), without the pad.
  std::size_t payload_bytes() const {
    return code_bytes() + scale_bytes() + std::size_t(raw_dims) * sizeof(float);
  }
  /// The row stride: payload_bytes rounded up to row_align.
  std::size_t row_bytes() const {
    const std::size_t a = row_align > 1 ? std::size_t(row_align) : 1;
    return (payload_bytes() + a - 1) / a * a;
  }
};

}  // namespace di
