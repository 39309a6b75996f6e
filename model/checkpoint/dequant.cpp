// Reference loops for FP8 block and MXFP4 dequantization. Shapes are checked against each other
// first; the loops then read bytes only through validated extents (memcpy for unaligned F32).
#include "model/checkpoint/dequant.hpp"

#include "common/error.hpp"

#include <cstring>
#include <initializer_list>
#include <type_traits>

namespace di {

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return a / b + (a % b != 0);
}

// A rank-2 tensor of an allowed dtype whose byte span matches its shape.
void check_matrix(const tensor_view& t, std::string_view role, std::initializer_list<dtype> types) {
  bool type_ok = false;
  for (dtype d : types) type_ok = type_ok || t.type == d;
  DI_CHECK(type_ok, "{}: {} '{}' has dtype {}, which this dequantization does not take", t.file,
           role, t.name, dtype_name(t.type));
  DI_CHECK(t.shape.size() == 2, "{}: {} '{}' must be 2-D, has shape {}", t.file, role, t.name,
           format_shape(t.shape));
  auto bytes = checked_byte_size(t.shape, dtype_size(t.type));
  DI_CHECK(bytes && *bytes == t.bytes.size(), "{}: {} '{}' {} {} does not match its {} bytes",
           t.file, role, t.name, dtype_name(t.type), format_shape(t.shape), t.bytes.size());
}

void check_scale_shape(const tensor_view& weight, const tensor_view& scale, std::int64_t scale_rows,
                       std::int64_t scale_cols, std::string_view layout) {
  DI_CHECK(scale.shape[0] == scale_rows && scale.shape[1] == scale_cols,
           "{}: scale '{}' has shape {}, but weight '{}' {} with {} needs [{}, {}]", scale.file,
           scale.name, format_shape(scale.shape), weight.name, format_shape(weight.shape), layout,
           scale_rows, scale_cols);
}

// One row of scales [cols] as fp32, from F8_E8M0 or F32 storage.
std::vector<float> read_scale_row(const tensor_view& scale, std::int64_t row) {
  const std::int64_t cols = scale.shape[1];
  std::vector<float> out(static_cast<std::size_t>(cols));
  const std::uint8_t* p = scale.bytes.data() + row * cols * std::int64_t(dtype_size(scale.type));
  for (std::int64_t c = 0; c < cols; ++c) {
    if (scale.type == dtype::f8_e8m0) {
      out[c] = e8m0_to_f32(p[c]);
    } else {
      std::memcpy(&out[c], p + 4 * c, 4);
    }
  }
  return out;
}

template <typename T>
T store(float v) {
  if constexpr (std::is_same_v<T, float>)
    return v;
  else
    return f32_to_bf16(v);
}

template <typename T>
host_matrix<T> fp8_block(const tensor_view& weight, const tensor_view& scale, block_shape block) {
  check_matrix(weight, "weight", {dtype::f8_e4m3});
  check_matrix(scale, "scale", {dtype::f8_e8m0, dtype::f32});
  DI_CHECK(block.rows > 0 && block.cols > 0, "{}: weight '{}': block shape {}x{} must be positive",
           weight.file, weight.name, block.rows, block.cols);
  const std::int64_t n = weight.shape[0], k = weight.shape[1];
  check_scale_shape(weight, scale, ceil_div(n, block.rows), ceil_div(k, block.cols),
                    fmt::format("{}x{} blocks", block.rows, block.cols));
  host_matrix<T> out{n, k, std::vector<T>(std::size_t(n * k))};
  std::vector<float> scales;  // [ceil(K/block.cols)] for the current row block
  for (std::int64_t r = 0; r < n; ++r) {
    if (r % block.rows == 0) scales = read_scale_row(scale, r / block.rows);
    const std::uint8_t* w = weight.bytes.data() + r * k;  // [K]
    T* o = out.values.data() + r * k;                     // [K]
    for (std::int64_t c = 0; c < k; ++c)
      o[c] = store<T>(e4m3_to_f32(w[c]) * scales[c / block.cols]);
  }
  return out;
}

// K from the packing (two FP4 values per byte), checked against the caller's K when given.
std::int64_t fp4_cols(const tensor_view& weight, std::optional<std::int64_t> cols) {
  const std::int64_t packed = weight.shape[1];
  if (!cols) return 2 * packed;
  DI_CHECK(*cols % 2 == 0,
           "{}: weight '{}': K={} is odd, but FP4 e2m1 packs two values per byte (shape {} "
           "holds K={})",
           weight.file, weight.name, *cols, format_shape(weight.shape), 2 * packed);
  DI_CHECK(*cols == 2 * packed, "{}: weight '{}' {} packs K={} FP4 values per row, expected K={}",
           weight.file, weight.name, format_shape(weight.shape), 2 * packed, *cols);
  return *cols;
}

template <typename T>
host_matrix<T> fp4_block(const tensor_view& weight, const tensor_view& scale,
                         std::optional<std::int64_t> cols) {
  check_matrix(weight, "weight", {dtype::i8});
  check_matrix(scale, "scale", {dtype::f8_e8m0, dtype::f32});
  const std::int64_t n = weight.shape[0], k = fp4_cols(weight, cols);
  check_scale_shape(weight, scale, n, ceil_div(k, fp4_block_cols),
                    fmt::format("packed FP4 (K={}, {} per scale)", k, fp4_block_cols));
  host_matrix<T> out{n, k, std::vector<T>(std::size_t(n * k))};
  for (std::int64_t r = 0; r < n; ++r) {
    std::vector<float> scales = read_scale_row(scale, r);       // [ceil(K/32)]
    const std::uint8_t* w = weight.bytes.data() + r * (k / 2);  // [K/2]
    T* o = out.values.data() + r * k;                           // [K]
    for (std::int64_t j = 0; j < k / 2; ++j) {
      float s = scales[(2 * j) / fp4_block_cols];  // both nibbles share a 32-block (32 is even)
      o[2 * j] = store<T>(e2m1_to_f32(w[j] & 0xf) * s);
      o[2 * j + 1] = store<T>(e2m1_to_f32(w[j] >> 4) * s);
    }
  }
  return out;
}

}  // namespace

host_matrix<float> dequant_fp8_to_f32(const tensor_view& weight, const tensor_view& scale,
                                      block_shape block) {
  return fp8_block<float>(weight, scale, block);
}

host_matrix<std::uint16_t> dequant_fp8_to_bf16(const tensor_view& weight, const tensor_view& scale,
                                               block_shape block) {
  return fp8_block<std::uint16_t>(weight, scale, block);
}

host_matrix<float> dequant_fp4_to_f32(const tensor_view& weight, const tensor_view& scale,
                                      std::optional<std::int64_t> cols) {
  return fp4_block<float>(weight, scale, cols);
}

host_matrix<std::uint16_t> dequant_fp4_to_bf16(const tensor_view& weight, const tensor_view& scale,
                                               std::optional<std::int64_t> cols) {
  return fp4_block<std::uint16_t>(weight, scale, cols);
}

}  // namespace di
