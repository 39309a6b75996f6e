// Construction and validation of stored-format weight matrices: the shape rules between
// values and scales are checked once here so that the kernels can index without checks.
#include "kernels/weight_matrix.hpp"

namespace di {

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

void check_scales(const weight_matrix& w, std::string_view what) {
  const tensor& s = w.scales;
  DI_CHECK(s.defined(), "{}: {} weight without scales", what, dtype_name(w.values.type()));
  DI_CHECK(s.type() == dtype::f8_e8m0 || s.type() == dtype::f32,
           "{}: scales are {}, expected F8_E8M0 or F32", what, dtype_name(s.type()));
  DI_CHECK(s.dev() == w.values.dev() && s.is_contiguous(),
           "{}: scales must be contiguous and on the values' device", what);
  DI_CHECK(w.block.rows > 0 && w.block.cols > 0, "{}: scale block {}x{} must be positive", what,
           w.block.rows, w.block.cols);
  const std::int64_t want_rows = ceil_div(w.rows(), w.block.rows);
  const std::int64_t want_cols = ceil_div(w.cols(), w.block.cols);
  DI_CHECK(s.rank() == 2 && s.size(0) == want_rows && s.size(1) == want_cols,
           "{}: scales {} do not fit weight [{}, {}] in {}x{} blocks (need [{}, {}])", what,
           s.shape().str(), w.rows(), w.cols(), w.block.rows, w.block.cols, want_rows, want_cols);
}

}  // namespace

weight_matrix::weight_matrix(tensor dense) : values(std::move(dense)) {}

weight_matrix weight_matrix::fp8(tensor codes, tensor scales, scale_block block) {
  weight_matrix w;
  w.values = std::move(codes);
  w.scales = std::move(scales);
  w.block = block;
  return w;
}

weight_matrix weight_matrix::fp4(tensor packed, tensor scales) {
  weight_matrix w;
  w.values = std::move(packed);
  w.scales = std::move(scales);
  w.block = {1, mxfp4_block_cols};
  return w;
}

std::int64_t weight_matrix::cols() const {
  return values.type() == dtype::i8 ? 2 * values.size(1) : values.size(1);
}

std::size_t weight_matrix::nbytes() const {
  return values.nbytes() + (scales.defined() ? scales.nbytes() : 0);
}

void check_weight_matrix(const weight_matrix& w, std::string_view what, device_kind kind) {
  const tensor& v = w.values;
  DI_CHECK(v.defined(), "{}: weight not set", what);
  DI_CHECK(v.dev().kind == kind, "{}: weight lives on {}", what, to_string(v.dev()));
  DI_CHECK(v.rank() == 2 && v.is_contiguous(), "{}: weight must be a contiguous matrix, got {}",
           what, v.shape().str());
  if (w.interleaved) {
    DI_CHECK(v.type() == dtype::i8 && kind == device_kind::cuda &&
                 v.size(1) % fp4_interleave_bytes == 0 && v.size(0) % fp4_interleave_rows == 0,
             "{}: only packed FP4 on a CUDA device, {}-row stripes of rows of a multiple of {} "
             "bytes, is interleaved, got {} [{}] on {}",
             what, fp4_interleave_rows, fp4_interleave_bytes, dtype_name(v.type()),
             v.shape().str(), to_string(v.dev()));
  }
  switch (v.type()) {
    case dtype::f32:
    case dtype::bf16:
      DI_CHECK(!w.scales.defined(), "{}: {} weight with scales", what, dtype_name(v.type()));
      return;
    case dtype::f8_e4m3:
      check_scales(w, what);
      return;
    case dtype::i8:
      DI_CHECK(w.block.rows == 1 && w.block.cols == mxfp4_block_cols,
               "{}: packed FP4 takes one scale per 1x{} block, got {}x{}", what, mxfp4_block_cols,
               w.block.rows, w.block.cols);
      check_scales(w, what);
      return;
    default:
      DI_FAIL("{}: weight dtype {} is not F32, BF16, F8_E4M3 or packed FP4 (I8)", what,
              dtype_name(v.type()));
  }
}

weight_matrix weight_to(const weight_matrix& w, device dev) {
  DI_CHECK(!w.interleaved || dev.kind == device_kind::cuda,
           "weight_to {}: an interleaved FP4 weight stays on CUDA devices "
           "(cuda::with_fp4_layout(w, false) first)",
           to_string(dev));
  weight_matrix out = w;
  out.values = w.values.to(dev);
  if (w.scales.defined()) out.scales = w.scales.to(dev);
  out.lt_scales = tensor();  // derived data of the source device (cuda::with_lt_scales)
  out.bf16_values = tensor();  // likewise (cuda::with_bf16_copy)
  return out;
}

}  // namespace di
