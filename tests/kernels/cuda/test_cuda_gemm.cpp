// The CUDA linear ops against the CPU's on random stored-format weights: FP8 e4m3 with
// 128x128 (V4) and 32x32 (V4.1) ue8m0 blocks and packed MXFP4, every path (sm90_block_gemm,
// cuBLASLt block-scaled FP8, exact fp32 dequantize + SGEMM, dequantized-at-load BF16 on
// cuBLAS), edge sizes (0 and 1 rows, outputs and inputs not multiples of the tiles, split K),
// MoE expert groups with empty and over-64-row experts, and the block-diagonal projection.
// Bounds: FP8 tensor-core products are exact and accumulate in fp32 per scale block, so the
// relative error stays near fp32 summation noise; a wrong scale or permutation gives O(1).
#include "gpu_test_support.hpp"
#include "kernels/cuda/cublas_gemm.hpp"
#include "kernels/cuda/cuda_model_ops.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/device_memory.hpp"
#include "kernels/cuda/gemm_kernels.hpp"
#include "kernels/cuda/stream.hpp"
#include "kernels/ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

namespace di {
namespace {

using test::check_close;
using test::gpu;

/// Random FP8 weight [rows, cols] with `block` scales in 2^-12 .. 2^8 (host).
weight_matrix random_fp8(std::int64_t rows, std::int64_t cols, std::int64_t block) {
  tensor codes = test::random_bytes({rows, cols}, dtype::f8_e4m3, true);
  const std::int64_t sr = (rows + block - 1) / block, sc = (cols + block - 1) / block;
  tensor scales = test::random_bytes({sr, sc}, dtype::f8_e8m0);
  for (std::int64_t i = 0; i < scales.numel(); ++i)
    static_cast<std::uint8_t*>(scales.raw())[i] =
        std::uint8_t(115 + (static_cast<std::uint8_t*>(scales.raw())[i] % 21));
  return weight_matrix::fp8(codes, scales, {block, block});
}

/// random_fp8 with its scales as fp32 when `f32_scales` (the same values; e8m0 otherwise).
weight_matrix random_fp8_scaled(std::int64_t rows, std::int64_t cols, std::int64_t block,
                                bool f32_scales) {
  const weight_matrix w = random_fp8(rows, cols, block);
  if (!f32_scales) return w;
  tensor f32 = tensor::empty(w.scales.shape(), dtype::f32, cpu_device);
  for (std::int64_t i = 0; i < f32.numel(); ++i)
    f32.data<float>()[i] = e8m0_to_f32(static_cast<const std::uint8_t*>(w.scales.raw())[i]);
  return weight_matrix::fp8(w.values, f32, {block, block});
}

/// Random packed MXFP4 weight [rows, cols] (host).
weight_matrix random_fp4(std::int64_t rows, std::int64_t cols) {
  tensor packed = test::random_bytes({rows, cols / 2}, dtype::i8);
  tensor scales = test::random_bytes({rows, cols / 32}, dtype::f8_e8m0);
  for (std::int64_t i = 0; i < scales.numel(); ++i)
    static_cast<std::uint8_t*>(scales.raw())[i] =
        std::uint8_t(115 + (static_cast<std::uint8_t*>(scales.raw())[i] % 21));
  return weight_matrix::fp4(packed, scales);
}

/// Random activations [rows, cols] whose blocks of 32 differ in magnitude (2^-6 .. 2^6), so
/// that every activation block gets its own scale and a misplaced scale shows.
tensor varied_input(std::int64_t rows, std::int64_t cols) {
  tensor x = test::random_f32({rows, cols}, 1.0f);
  std::uniform_int_distribution<int> e(-6, 6);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t b = 0; b < cols; b += 32) {
      const float f = std::ldexp(1.0f, e(test::rng()));
      for (std::int64_t i = b; i < std::min(cols, b + 32); ++i) x.data<float>()[r * cols + i] *= f;
    }
  return x;
}

/// The CUDA linear of x and w under `backend` against the CPU's.
void check_linear(const tensor& x, const weight_matrix& w, int act_block,
                  cuda::gemm_backend backend, double bound) {
  const tensor want = ops::linear(x, w, {act_block});
  cuda::set_gemm_backend(backend);
  test::poison_device_pool();
  const tensor got = ops::linear(x.to(gpu), weight_to(w, gpu), {act_block});
  cuda::set_gemm_backend(cuda::gemm_backend::automatic);
  INFO("rows " << x.size(0) << " out " << w.rows() << " in " << w.cols() << " act block "
               << act_block << " backend " << int(backend));
  check_close(got, want, bound);
}

TEST_CASE("cuda linear: FP8 weights (128x128 and 32x32 blocks) on every path") {
  for (std::int64_t block : {128, 32}) {
    for (std::int64_t rows : {0, 1, 3, 17, 64, 130}) {
      for (std::int64_t out : {16, 48, 320}) {
        for (std::int64_t in : {128, 384, 1280}) {
          const weight_matrix w = random_fp8(out, in, block);
          const tensor x = varied_input(rows, in);
          for (int act : {128, 32}) {
            check_linear(x, w, act, cuda::gemm_backend::block_gemm, 2e-3);
            check_linear(x, w, act, cuda::gemm_backend::dequant_fp32, 1e-5);
          }
          check_linear(x, w, 0, cuda::gemm_backend::automatic, 1e-5);  // no act quant
        }
      }
    }
  }
}

/// ||got - want|| / ||want|| on the host.
double rel_error(const tensor& got, const tensor& want) {
  const tensor h = got.to(cpu_device);
  double d = 0, n = 0;
  for (std::int64_t i = 0; i < h.numel(); ++i) {
    const double a = h.data<float>()[i], b = want.data<float>()[i];
    d += (a - b) * (a - b);
    n += b * b;
  }
  return std::sqrt(d / n);
}

TEST_CASE("cuda linear: fp32 weights of 1..8 rows on f32_gemv (batch-invariant) or cuBLAS") {
  // The router's shape, one output (cuBLAS's dot), widths not a multiple of 4 (the scalar path),
  // many outputs of a short row (no K split), with and without activation fake-quantization.
  struct shape {
    std::int64_t out, in;
  };
  for (const shape sh : {shape{384, 5120}, shape{1, 4096}, shape{7, 33}, shape{1000, 100},
                         shape{2048, 64}, shape{96, 512}}) {
    CAPTURE(sh.out);
    CAPTURE(sh.in);
    const tensor wf = test::random_f32({sh.out, sh.in});
    const weight_matrix w(wf.to(gpu));
    const tensor x8 = varied_input(8, sh.in);
    for (const int act : {0, 32}) {
      if (act > 0 && sh.in % act != 0) continue;
      CAPTURE(act);
      const ops::linear_params lp{act};
      test::poison_device_pool();
      const tensor y8 = ops::linear(x8.to(gpu), w, lp).to(cpu_device);
      check_close(y8, ops::linear(x8, weight_matrix(wf), lp), 1e-5);
      cuda::set_f32_gemv(false);  // cuBLAS SGEMM: the same products, summed in another order
      check_close(ops::linear(x8.to(gpu), w, lp), y8, 1e-5);
      cuda::set_f32_gemv(true);
      for (std::int64_t rows : {1, 2, 3, 5}) {  // fewer rows: the same bits for the same tokens
        CAPTURE(rows);
        const tensor part = ops::linear(x8.slice(0, 0, rows).clone().to(gpu), w, lp);
        test::check_bitwise(part.to(cpu_device), y8.slice(0, 0, rows).clone());
      }
    }
  }
}

/// A random bf16 checkpoint matrix (host), its upload, and the model's fp32 copy of it that
/// carries those bf16 bytes (with_bf16_copy), as the model upload makes it.
struct bf16_matrix {
  weight_matrix host, on_gpu, with_copy;
};
bf16_matrix random_bf16_matrix(std::int64_t rows, std::int64_t cols) {
  tensor wb = tensor::empty({rows, cols}, dtype::bf16);
  const tensor wr = test::random_f32({rows, cols}, 0.05f);
  for (std::int64_t i = 0; i < wb.numel(); ++i)
    wb.data<std::uint16_t>()[i] = f32_to_bf16(wr.data<float>()[i]);
  bf16_matrix m{weight_matrix(wb), {}, {}};
  m.on_gpu = weight_to(m.host, gpu);
  m.with_copy = cuda::with_bf16_copy(cuda::dequantize_weight(m.on_gpu, dtype::f32), m.on_gpu);
  return m;
}

TEST_CASE("cuda linear: f32_gemv reads the bf16 bytes where kept -- the fp32 copy's bits") {
  // Decode rows (1..8) of a weight the checkpoint stores in bf16: f32_gemv reads its bf16 bytes
  // (half the read) and widens them to the fp32 copy's values, in the same order: the same
  // bits as reading the fp32 copy. Widths not a multiple of 4 take the scalar path; a bf16
  // matrix that starts 8 but not 16 bytes into its allocation keeps the 4-wide loads.
  struct shape {
    std::int64_t out, in;
  };
  for (const shape sh : {shape{384, 5120}, shape{1024, 5120}, shape{7, 33}, shape{1000, 100},
                         shape{2048, 64}, shape{1, 4096}}) {
    CAPTURE(sh.out);
    CAPTURE(sh.in);
    const bf16_matrix m = random_bf16_matrix(sh.out, sh.in);
    const weight_matrix &on_gpu = m.on_gpu, &w = m.with_copy;
    REQUIRE(w.bf16_values.defined());
    const weight_matrix plain(w.values);              // the fp32 copy alone
    const tensor wr_exact = w.values.to(cpu_device);  // the bf16 values in fp32, on the host
    // the same bf16 bytes 8 bytes into a larger buffer
    tensor shifted_buf = tensor::empty({sh.out * sh.in + 4}, dtype::bf16, gpu);
    tensor shifted = shifted_buf.slice(0, 4, 4 + sh.out * sh.in).view({sh.out, sh.in});
    shifted.copy_from(on_gpu.values);
    weight_matrix w8 = w;
    w8.bf16_values = shifted;
    const tensor x8 = varied_input(8, sh.in);
    for (const int act : {0, 32}) {
      if (act > 0 && sh.in % act != 0) continue;
      CAPTURE(act);
      const ops::linear_params lp{act};
      for (std::int64_t rows : {1, 3, 8}) {
        CAPTURE(rows);
        const tensor x = x8.slice(0, 0, rows).clone().to(gpu);
        test::poison_device_pool();
        const tensor want = ops::linear(x, plain, lp).to(cpu_device);
        test::check_bitwise(ops::linear(x, w, lp).to(cpu_device), want);
        test::check_bitwise(ops::linear(x, w8, lp).to(cpu_device), want);
        check_close(want, ops::linear(x8.slice(0, 0, rows).clone(), weight_matrix(wr_exact), lp),
                    1e-5);
      }
    }
  }
}

TEST_CASE(
    "cuda linear: bf16 matrices (the head) of decode rows on f32_gemv -- the CPU's products") {
  // A checkpoint matrix stored in bf16 with no fp32 copy -- the output head: decode rows read
  // its bf16 bytes on f32_gemv with fp32 activations, as the CPU multiplies them (1e-5 of the
  // CPU), a row's result the same bits in any batch of 1..8 rows. The default takes f32_gemv
  // up to bf16_gemv_default_rows rows; set_bf16_gemv_rows(0) is the cuBLAS bf16 GEMM, which
  // rounds the activations to bf16 (2^-9 relative each): close, and without FP8 activation
  // quantization (whose values bf16 holds exactly) visibly less close to the CPU. Widths not a
  // multiple of 4 (33) take the scalar path.
  struct shape {
    std::int64_t out, in;
  };
  struct restore {
    ~restore() { cuda::set_bf16_gemv_rows(cuda::bf16_gemv_default_rows); }
  } restore_default;
  for (const shape sh : {shape{1000, 4096}, shape{7, 33}, shape{33, 100}, shape{2048, 64},
                         shape{1, 4096}, shape{129, 512}}) {
    CAPTURE(sh.out);
    CAPTURE(sh.in);
    const bf16_matrix m = random_bf16_matrix(sh.out, sh.in);
    REQUIRE(m.on_gpu.values.type() == dtype::bf16);
    REQUIRE(!m.on_gpu.bf16_values.defined());
    const tensor x9 = varied_input(9, sh.in);
    const tensor x8 = x9.slice(0, 0, 8).clone();
    auto gpu_rows = [&](std::int64_t rows, const ops::linear_params& lp) {
      return ops::linear(x9.slice(0, 0, rows).clone().to(gpu), m.on_gpu, lp).to(cpu_device);
    };
    for (const int act : {0, 32}) {
      if (act > 0 && sh.in % act != 0) continue;
      CAPTURE(act);
      const ops::linear_params lp{act};
      const tensor want = ops::linear(x8, m.host, lp);  // CPU: fp32 x times the bf16 values
      cuda::set_bf16_gemv_rows(8);
      test::poison_device_pool();
      const tensor y8 = gpu_rows(8, lp);
      check_close(y8, want, 1e-5);
      for (std::int64_t rows : {1, 2, 3, 5}) {  // fewer rows: the same bits for the same tokens
        CAPTURE(rows);
        test::check_bitwise(gpu_rows(rows, lp), y8.slice(0, 0, rows).clone());
      }
      cuda::set_bf16_gemv_rows(0);  // cuBLAS's bf16 GEMM: x rounded to bf16
      test::poison_device_pool();
      const tensor rounded = gpu_rows(8, lp);
      check_close(rounded, want, 1e-2);
      if (act == 0 && sh.in >= 512) CHECK(rel_error(rounded, want) > 10 * rel_error(y8, want));
      cuda::set_bf16_gemv_rows(cuda::bf16_gemv_default_rows);  // f32_gemv up to its rows
      for (std::int64_t rows = 1; rows <= cuda::bf16_gemv_default_rows; ++rows) {
        CAPTURE(rows);
        test::check_bitwise(gpu_rows(rows, lp), y8.slice(0, 0, rows).clone());
      }
      const std::int64_t past = cuda::bf16_gemv_default_rows + 1;
      check_close(gpu_rows(past, lp), ops::linear(x9.slice(0, 0, past).clone(), m.host, lp), 1e-2);
      check_close(gpu_rows(9, lp), ops::linear(x9, m.host, lp), 1e-2);  // past f32_gemv's rows
    }
  }
  CHECK_THROWS(cuda::set_bf16_gemv_rows(9));
  CHECK_THROWS(cuda::set_bf16_gemv_rows(-1));
}

TEST_CASE("cuda linear: bf16-exact fp32 weights past f32_gemv's rows on split-bf16 GEMMs") {
  // The model's fp32 copies of bf16 checkpoint matrices (router, compressors, indexer) carry
  // their bf16 bytes (with_bf16_copy); from 9 rows linear multiplies them on the bf16 tensor
  // cores with x split in three bf16 parts (their sum is x): SGEMM's precision, unlike rounding
  // x to bf16 once or splitting it in two (16 of its 24 significant bits).
  struct shape {
    std::int64_t out, in;
  };
  const bool before = cuda::get_split_bf16_linear();
  for (const shape sh : {shape{384, 5120}, shape{512, 4096}, shape{7, 33}, shape{100, 1000}}) {
    CAPTURE(sh.out);
    CAPTURE(sh.in);
    const bf16_matrix m = random_bf16_matrix(sh.out, sh.in);
    const weight_matrix &host = m.host, &on_gpu = m.on_gpu, &w = m.with_copy;
    REQUIRE(w.values.type() == dtype::f32);
    REQUIRE(w.bf16_values.defined());
    CHECK(w.bf16_values.raw() == on_gpu.values.raw());  // the uploaded bytes, not a second copy
    const weight_matrix plain(w.values);  // the same fp32 values, no bf16 bytes: SGEMM
    for (std::int64_t rows : {9, 64, 300}) {
      CAPTURE(rows);
      const tensor x = varied_input(rows, sh.in);
      const tensor want = ops::linear(x, host, {});  // CPU: fp32 x times the bf16 weight
      cuda::set_split_bf16_linear(true);
      test::poison_device_pool();
      const tensor split = ops::linear(x.to(gpu), w, {}).to(cpu_device);
      check_close(split, want, 1e-5);
      if (rows <= 64) {  // decode batches: the parts stacked in one GEMM, or three GEMMs
        cuda::set_split_bf16_stacked(false);
        check_close(ops::linear(x.to(gpu), w, {}).to(cpu_device), split, 1e-5);
        cuda::set_split_bf16_stacked(true);
      }
      check_close(ops::linear(x.to(gpu), plain, {}), want, 1e-5);
      cuda::set_split_bf16_linear(false);  // switched off: SGEMM on the fp32 values
      const tensor sgemm = ops::linear(x.to(gpu), w, {}).to(cpu_device);
      check_close(sgemm, want, 1e-5);
      // x rounded to bf16 once (the bf16 weight as it is) is far coarser: what mid and lo buy
      const tensor coarse = ops::linear(x.to(gpu), on_gpu, {}).to(cpu_device);
      double diff = 0, norm = 0, diff_split = 0, diff_sgemm = 0;
      for (std::int64_t i = 0; i < want.numel(); ++i) {
        const double wv = want.data<float>()[i];
        diff += std::pow(coarse.data<float>()[i] - wv, 2);
        diff_split += std::pow(split.data<float>()[i] - wv, 2);
        diff_sgemm += std::pow(sgemm.data<float>()[i] - wv, 2);
        norm += wv * wv;
      }
      CHECK(diff_split * 100.0 < diff);
      // and fp32-grade: a relative rms error under 2e-5. The parts carry all of x (split_bf16's
      // own test); what is left is the tensor cores' accumulation, coarser than SGEMM's (H200,
      // K 4096-5120: 1.5e-6..4.6e-6 against SGEMM's ~5e-7; at K 33-1000 the two are equal).
      MESSAGE(fmt::format("split-bf16 relative rms error {:.3g}, SGEMM {:.3g}",
                          std::sqrt(diff_split / norm), std::sqrt(diff_sgemm / norm)));
      CHECK(diff_split <= 4e-10 * norm);
    }
  }
  cuda::set_split_bf16_linear(before);
  // A matrix that was not bf16 (FP8 decoded to fp32) gets no copy: its values are not bf16's.
  const weight_matrix w8 = weight_to(random_fp8(64, 256, 128), gpu);
  CHECK_FALSE(
      cuda::with_bf16_copy(cuda::dequantize_weight(w8, dtype::f32), w8).bf16_values.defined());
  // A bf16 source of another shape is refused, naming both shapes.
  const weight_matrix other = weight_to(weight_matrix(tensor::zeros({8, 16}, dtype::bf16)), gpu);
  const weight_matrix f32(tensor::zeros({16, 8}, dtype::f32).to(gpu));
  CHECK_THROWS_WITH_AS(cuda::with_bf16_copy(f32, other),
                       "with_bf16_copy: source [8, 16] is not the matrix [16, 8]", error);
}

TEST_CASE("cuda split_bf16: three bf16 parts add up to x exactly, two to within 2^-16 |x|") {
  // The split-bf16 GEMMs' operands (three parts since session 25: the products then carry all
  // of x's bits). Values over many magnitudes, zeros, an infinity and a NaN (the first part
  // alone), a count off the kernel's block.
  const std::int64_t n = 100003;
  tensor x = test::random_f32({n});
  float* xv = x.data<float>();
  for (std::int64_t i = 0; i < n; ++i) xv[i] = std::ldexp(xv[i], int(i % 61) - 30);
  xv[5] = 0.0f;
  xv[6] = -0.0f;
  xv[7] = std::numeric_limits<float>::infinity();
  xv[8] = std::numeric_limits<float>::quiet_NaN();
  const tensor xg = x.to(gpu);
  for (const int count : {2, 3}) {
    CAPTURE(count);
    tensor parts = tensor::empty({count, n}, dtype::bf16, gpu);
    cuda::launch_split_bf16(xg.data<float>(), parts.data<std::uint16_t>(), count, n,
                            cuda::current_stream());
    const tensor host = parts.to(cpu_device);
    const std::uint16_t* pv = host.data<std::uint16_t>();
    int inexact = 0, outside = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      if (i == 7 || i == 8) {  // inf / NaN: the first part carries it, the others are zero
        CHECK(pv[i] == f32_to_bf16(xv[i]));
        for (int k = 1; k < count; ++k) CHECK(pv[k * n + i] == 0);
        continue;
      }
      double sum = 0.0;
      for (int k = 0; k < count; ++k) sum += double(bf16_to_f32(pv[k * n + i]));
      CHECK_MESSAGE(pv[i] == f32_to_bf16(xv[i]), i);  // the first part is bf16(x)
      const double d = std::abs(sum - double(xv[i]));
      inexact += d != 0.0;
      outside += d > std::ldexp(std::abs(double(xv[i])), -16);
    }
    CHECK(outside == 0);
    if (count == 3) CHECK(inexact == 0);
    if (count == 2) CHECK(inexact > n / 2);  // two parts do lose bits (the check can fail)
  }
  CHECK_THROWS_WITH_AS(
      cuda::launch_split_bf16(xg.data<float>(), nullptr, 4, n, cuda::current_stream()),
      doctest::Contains("split_bf16: 4 parts"), error);
  // sum_parts adds products in the accumulating GEMMs' order: (p0 + p1) + p2, bit for bit.
  const std::int64_t m = 1000;
  const tensor products = test::random_f32({3, m}, 1.0f);
  tensor sum = tensor::empty({m}, dtype::f32, gpu);
  const tensor pg = products.to(gpu);
  test::poison_device_pool();
  cuda::launch_sum_parts(pg.data<float>(), sum.data<float>(), 3, m, cuda::current_stream());
  const tensor got = sum.to(cpu_device);
  for (std::int64_t i = 0; i < m; ++i) {
    const float* p = products.data<float>();
    const float expect = (p[i] + p[m + i]) + p[2 * m + i];
    CHECK(std::memcmp(&expect, got.data<float>() + i, sizeof(float)) == 0);
  }
  CHECK_THROWS_AS(cuda::launch_sum_parts(pg.data<float>(), sum.data<float>(), 4, m,
                                         cuda::current_stream()),
                  error);
}

TEST_CASE("cuda fake_quant_bf16: to_bf16(fp8_fake_quant(x)) in one pass, bit for bit") {
  // The bf16-temporary GEMM route's input: blocks of 32 / 64 / 128, rows with an all-zero block
  // and a block of one large value among tiny ones, a row count off every tile.
  for (const int block : {32, 64, 128}) {
    for (const std::int64_t rows : {1, 7, 300}) {
      CAPTURE(block);
      CAPTURE(rows);
      const std::int64_t cols = 1024;
      tensor x = varied_input(rows, cols);
      for (std::int64_t i = 0; i < block; ++i) x.data<float>()[i] = 0.0f;  // a zero block
      x.data<float>()[block + 3] = 4096.0f;  // a block dominated by one value
      const tensor xg = x.to(gpu);
      tensor fq = xg.clone();
      cuda::fp8_fake_quant(fq, block, cols);
      tensor want = tensor::empty({rows, cols}, dtype::bf16, gpu);
      cuda::launch_to_bf16(fq.data<float>(), want.data<std::uint16_t>(), rows * cols,
                           cuda::current_stream());
      tensor got = tensor::empty({rows, cols}, dtype::bf16, gpu);
      cuda::launch_fake_quant_bf16(xg.data<float>(), got.data<std::uint16_t>(), rows, cols, block,
                                   cuda::current_stream());
      test::check_bitwise(got, want);
    }
  }
}

TEST_CASE("cuda linear: cuBLASLt scale layouts (probe; the default must be right)") {
  const weight_matrix w = random_fp8(384, 1280, 128);
  const tensor x = varied_input(256, 1280);
  const tensor want = ops::linear(x, w, {128});
  const weight_matrix wd = weight_to(w, gpu);
  cuda::set_gemm_backend(cuda::gemm_backend::cublaslt);
  int good = -1;
  for (int layout = 0; layout < 8; ++layout) {
    cuda::set_cublaslt_scale_layout(layout);
    const double err = rel_error(ops::linear(x.to(gpu), wd, {128}), want);
    MESSAGE("cuBLASLt scale layout " << layout << ": relative error " << err << " (available "
                                     << cuda::cublaslt_block_fp8_available() << ")");
    if (err < 2e-3 && good < 0) good = layout;
  }
  cuda::set_cublaslt_scale_layout(0);
  cuda::set_gemm_backend(cuda::gemm_backend::automatic);
  MESSAGE("first matching cuBLASLt scale layout: " << good);
  CHECK(good == 0);  // layout 0 is what linear uses
}

TEST_CASE("cuda linear: cuBLASLt block-scaled FP8 (prefill shapes) or its fallback") {
  for (std::int64_t rows : {256, 512}) {
    for (auto [out, in] :
         {std::pair<std::int64_t, std::int64_t>{256, 512}, {384, 1280}, {1024, 4096}}) {
      const weight_matrix w = random_fp8(out, in, 128);
      const tensor x = varied_input(rows, in);
      check_linear(x, w, 128, cuda::gemm_backend::cublaslt, 2e-3);
      MESSAGE(
          "cuBLASLt block-scaled FP8 kernel available: " << cuda::cublaslt_block_fp8_available());
      check_linear(x, w, 128, cuda::gemm_backend::block_gemm, 2e-3);
      check_linear(x, w, 128, cuda::gemm_backend::dequant_bf16, 1e-5);
    }
  }
  // Scales made once (with_lt_scales, as the model upload does): the per-call conversion's
  // bits; V4.1's 32-blocks take none.
  {
    const weight_matrix w = weight_to(random_fp8(1024, 4096, 128), gpu);
    const weight_matrix wl = cuda::with_lt_scales(w);
    REQUIRE(wl.lt_scales.defined());
    const tensor x = varied_input(256, 4096).to(gpu);
    cuda::set_gemm_backend(cuda::gemm_backend::cublaslt);
    test::check_bitwise(ops::linear(x, wl, {128}).to(cpu_device),
                        ops::linear(x, w, {128}).to(cpu_device));
    cuda::set_gemm_backend(cuda::gemm_backend::automatic);
    CHECK_FALSE(cuda::with_lt_scales(weight_to(random_fp8(256, 512, 32), gpu)).lt_scales.defined());
  }
  // Decode batches with the threshold lowered (DEEPINFER_LT_ROWS=16): cuBLASLt for 16k rows,
  // block_gemm for the others (8, 24 rows); right either way.
  const std::int64_t lt_before = cuda::get_cublaslt_min_rows();
  cuda::set_cublaslt_min_rows(16);
  for (std::int64_t rows : {8, 16, 24, 64}) {
    CAPTURE(rows);
    const weight_matrix w = random_fp8(512, 1024, 128);
    check_linear(varied_input(rows, 1024), w, 128, cuda::gemm_backend::automatic, 2e-3);
  }
  cuda::set_cublaslt_min_rows(lt_before);
  // V4.1 blocks at prefill sizes: the bf16 temporary is exact up to the sum order.
  for (std::int64_t rows : {128, 300}) {
    const weight_matrix w = random_fp8(256, 1280, 32);
    check_linear(varied_input(rows, 1280), w, 32, cuda::gemm_backend::dequant_bf16, 1e-5);
    check_linear(varied_input(rows, 1280), w, 32, cuda::gemm_backend::automatic, 2e-3);
    const weight_matrix w4 = random_fp4(192, 512);
    check_linear(varied_input(rows, 512), w4, 32, cuda::gemm_backend::dequant_bf16, 1e-5);
  }
}

TEST_CASE("cuda linear: cuBLASLt with K splits set for V4's small decode projections") {
  // wq_a / wkv / shared w1 widths at decode batches: the automatic rule splits K 8, 8 and 4
  // ways; each setting is right against the CPU, repeats bitwise, and a row's result does not
  // depend on the other rows of the batch (the splits come from the shape only).
  const int before = cuda::get_cublaslt_splitk();
  REQUIRE(before == 0);  // the default: the automatic rule
  cuda::set_gemm_backend(cuda::gemm_backend::cublaslt);
  for (const std::int64_t out : {1024, 512, 2048}) {
    CAPTURE(out);
    const weight_matrix host = random_fp8(out, 4096, 128);
    const weight_matrix w = weight_to(host, gpu);
    for (const std::int64_t rows : {16, 64}) {
      CAPTURE(rows);
      const tensor x = varied_input(rows, 4096);
      const tensor want = ops::linear(x, host, {128});
      for (const int splits : {0, -1, 2, 16}) {
        CAPTURE(splits);
        cuda::set_cublaslt_splitk(splits);
        test::poison_device_pool();
        const tensor got = ops::linear(x.to(gpu), w, {128});
        REQUIRE(cuda::cublaslt_block_fp8_available());
        check_close(got, want, 2e-3);
        test::check_bitwise(ops::linear(x.to(gpu), w, {128}).to(cpu_device), got.to(cpu_device));
        if (splits == 0) {  // the first 16 rows alone: the same bits as within 64
          const std::string algo = cuda::cublaslt_last_algo();
          CHECK(algo.find(out == 2048 ? "splitK 4 " : "splitK 8 ") != std::string::npos);
          const tensor head = ops::linear(x.slice(0, 0, 16).clone().to(gpu), w, {128});
          test::check_bitwise(head.to(cpu_device), got.slice(0, 0, 16).to(cpu_device).clone());
        }
      }
    }
  }
  cuda::set_cublaslt_splitk(before);
  cuda::set_gemm_backend(cuda::gemm_backend::automatic);
}

TEST_CASE(
    "cuda linear: automatic takes FP8 blocks cuBLASLt cannot from 256 rows to a bf16 "
    "temporary") {
  // V4.1's 32-blocks: from 256 rows the bits of dequant_bf16 (plain, pre-quantized rows as the
  // fused norms give them, and pairs), below them the bits of sm90_block_gemm.
  const std::int64_t before = cuda::get_bf16_temp_min_rows();
  cuda::set_bf16_temp_min_rows(256);
  const weight_matrix w = weight_to(random_fp8(320, 1280, 32), gpu);
  const weight_matrix w2 = weight_to(random_fp8(192, 1280, 32), gpu);
  auto run = [&](const tensor& x, cuda::gemm_backend backend) {
    cuda::set_gemm_backend(backend);
    const ops::quantized_rows q = ops::rms_norm_quantized(x, tensor(), 1e-6f, 32);
    std::vector<tensor> out{ops::linear(x, w, {32}).to(cpu_device),
                            ops::linear(q, w, {32}).to(cpu_device)};
    const auto [a, b] = ops::linear_pair(q, w, w2, {32});
    out.push_back(a.to(cpu_device));
    out.push_back(b.to(cpu_device));
    cuda::set_gemm_backend(cuda::gemm_backend::automatic);
    return out;
  };
  for (const std::int64_t rows : {255, 256, 300}) {
    CAPTURE(rows);
    const tensor x = varied_input(rows, 1280).to(gpu);
    const std::vector<tensor> got = run(x, cuda::gemm_backend::automatic);
    const std::vector<tensor> want =
        run(x, rows >= 256 ? cuda::gemm_backend::dequant_bf16 : cuda::gemm_backend::block_gemm);
    for (std::size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      test::check_bitwise(got[i], want[i]);
    }
    check_close(got[0], ops::linear(x.to(cpu_device), weight_to(w, cpu_device), {32}), 2e-3);
  }
  // The threshold moves it (a huge one: never); below 1 is refused and changes nothing.
  cuda::set_bf16_temp_min_rows(std::int64_t(1) << 40);
  const tensor x = varied_input(300, 1280).to(gpu);
  test::check_bitwise(run(x, cuda::gemm_backend::automatic)[0],
                      run(x, cuda::gemm_backend::block_gemm)[0]);
  CHECK_THROWS_WITH_AS(cuda::set_bf16_temp_min_rows(0), doctest::Contains("at least 1"), error);
  CHECK(cuda::get_bf16_temp_min_rows() == std::int64_t(1) << 40);
  cuda::set_bf16_temp_min_rows(before);
}

TEST_CASE("cuda linear: MXFP4 weights, split K and large M") {
  for (std::int64_t rows : {0, 1, 2, 9, 33, 100, 300}) {
    for (std::int64_t out : {16, 40, 256}) {
      for (std::int64_t in : {64, 256, 2304}) {
        const weight_matrix w = random_fp4(out, in);
        const tensor x = varied_input(rows, in);
        const int act = in % 128 == 0 ? 128 : 32;
        check_linear(x, w, act, cuda::gemm_backend::block_gemm, 2e-3);
        check_linear(x, w, act, cuda::gemm_backend::dequant_fp32, 1e-5);
      }
    }
  }
}

TEST_CASE("cuda linear: dequantized-at-load BF16 and f32 weights on cuBLAS") {
  for (std::int64_t rows : {0, 1, 7, 130}) {
    const weight_matrix w8 = random_fp8(192, 512, 128);
    const tensor x = varied_input(rows, 512);
    const weight_matrix bf = cuda::dequantize_weight(weight_to(w8, gpu), dtype::bf16);
    CHECK(bf.values.type() == dtype::bf16);
    // With activation quantization both operands are exact in bf16: only the sum order differs.
    check_close(ops::linear(x.to(gpu), bf, {128}), ops::linear(x, w8, {128}), 1e-5);
    // Without it x is rounded to bf16: bf16 accuracy.
    check_close(ops::linear(x.to(gpu), bf, {}), ops::linear(x, w8, {}), 1e-2);
    const tensor wf = test::random_f32({96, 512});
    check_close(ops::linear(x.to(gpu), weight_matrix(wf.to(gpu)), {}),
                ops::linear(x, weight_matrix(wf), {}), 1e-5);
  }
}

TEST_CASE("cuda grouped_linear (block-diagonal) matches the CPU") {
  // Rows 1-64 take fp8_split_gemm (bf16 tensor cores, activations split in two bf16 parts;
  // mma.sync up to 8 rows, fp8_split_wg's warpgroup MMA from 9) or,
  // switched off or with f32 scales, fp8_gemv (CUDA cores; chunks of 8 rows); the others the
  // dequantize + SGEMM path (fp8_split_wg staged from its B image, the default -- two warpgroups
  // a block sharing it, or one -- and split by its threads). V4's 128x128 and V4.1's 32x32 blocks,
  // outputs per group not a multiple of the scale block or of a 64-row block, inputs not a multiple
  // of a 128-input batch, a K split across two blocks (K 4096). A row's result does not depend on
  // the chunk, token tile or batch it runs in (bitwise).
  struct shape {
    std::int64_t groups, out, in, block;
  };
  const bool split_before = cuda::get_split_gemm();
  for (const bool split : {true, false}) {
    cuda::set_split_gemm(split);
    for (const shape sh : {shape{8, 128, 256, 128}, shape{8, 40, 1040, 32},
                           shape{1, 200, 4096, 32}, shape{3, 96, 528, 128}}) {
      const weight_matrix w = random_fp8(sh.groups * sh.out, sh.in, sh.block);
      const weight_matrix wg = weight_to(w, gpu);
      for (std::int64_t rows : {0, 1, 2, 3, 5, 8, 9, 17, 24, 33, 40, 64, 70, 300}) {
        CAPTURE(split);
        CAPTURE(rows);
        CAPTURE(sh.in);
        const tensor x = test::random_f32({rows, sh.groups, sh.in});
        test::poison_device_pool();
        const tensor y = ops::grouped_linear(x.to(gpu), wg).to(cpu_device);
        check_close(y, ops::grouped_linear(x, w), 1e-5);
        if (rows > 64) {  // prefill rows: the split-bf16 GEMMs, or switched off SGEMM
          const bool before = cuda::get_split_bf16_linear();
          cuda::set_split_bf16_linear(!before);
          check_close(ops::grouped_linear(x.to(gpu), wg), ops::grouped_linear(x, w), 1e-5);
          cuda::set_split_bf16_linear(before);
        }
        // 9..64 rows on the warpgroup MMA (fp8_split_wg) agree with fp8_split_gemm's mma.sync
        if (split && rows > 8 && rows <= 64) {
          REQUIRE(cuda::get_split_wg());
          cuda::set_split_wg(false);
          const tensor sync = ops::grouped_linear(x.to(gpu), wg).to(cpu_device);
          cuda::set_split_wg(true);
          check_close(y, sync, 1e-5);
          // Its activations split by the GEMM's threads per chunk instead of staged from the B
          // image by the bulk-copy engine: the same bytes through the same wgmmas, the same bits.
          REQUIRE(cuda::get_split_wg_staged());
          cuda::set_split_wg_staged(false);
          const tensor direct = ops::grouped_linear(x.to(gpu), wg);
          cuda::set_split_wg_staged(true);
          test::check_bitwise(direct, y);
          // Staged blocks of one warpgroup instead of two sharing each chunk: the same bits.
          REQUIRE(cuda::split_wg_warpgroups() == 2);
          cuda::set_split_wg_warpgroups(1);
          const tensor one_wg = ops::grouped_linear(x.to(gpu), wg);
          cuda::set_split_wg_warpgroups(2);
          test::check_bitwise(one_wg, y);
        }
        // The last rows alone give the same bits: 3 rows (1..8 rows: one kernel for them all),
        // 9 rows where the batch took the warpgroup MMA (its 16-token tile against 32 / 64).
        const std::int64_t tail_rows = split && rows > 8 ? 9 : 3;
        if (rows > tail_rows && rows <= 64) {
          const tensor tail = ops::grouped_linear(x.slice(0, rows - tail_rows, rows).to(gpu), wg);
          test::check_bitwise(tail, y.slice(0, rows - tail_rows, rows).clone());
        }
      }
    }
  }
  // f32 block scales: fp8_gemv even with the split kernel on (it folds e8m0 scales only).
  cuda::set_split_gemm(true);
  weight_matrix w = random_fp8(256, 512, 128);
  tensor s32 = tensor::empty(w.scales.shape(), dtype::f32);
  for (std::int64_t i = 0; i < s32.numel(); ++i)
    s32.data<float>()[i] = e8m0_to_f32(static_cast<const std::uint8_t*>(w.scales.raw())[i]) * 1.5f;
  w = weight_matrix::fp8(w.values, s32, w.block);
  const tensor x = test::random_f32({5, 2, 512});
  check_close(ops::grouped_linear(x.to(gpu), weight_to(w, gpu)), ops::grouped_linear(x, w), 1e-5);
  cuda::set_split_gemm(split_before);
}

/// Offsets [experts + 1] i32 for the given per-expert row counts (host).
tensor offsets_of(const std::vector<int>& counts) {
  tensor t = tensor::empty({std::int64_t(counts.size()) + 1}, dtype::i32);
  t.data<std::int32_t>()[0] = 0;
  for (std::size_t e = 0; e < counts.size(); ++e)
    t.data<std::int32_t>()[e + 1] = t.data<std::int32_t>()[e] + counts[e];
  return t;
}

/// y = linear(x, w) and ye = expert_linear(xe, offsets, w4) (act blocks of 128, tile hint 3)
/// captured on the current stream into a CUDA graph, replayed three times; check(y, ye) after
/// each replay.
template <typename Check>
void replay_dense_and_expert(const tensor& x, const weight_matrix& w, const tensor& xe,
                             const tensor& offsets, const weight_matrix& w4, Check check) {
  tensor y = tensor::empty({x.size(0), w.rows()}, dtype::f32, gpu);
  tensor ye = tensor::empty({xe.size(0), w4.rows() / (offsets.size(0) - 1)}, dtype::f32, gpu);
  cudaStream_t s = cuda::current_stream();
  cudaGraph_t graph;
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  y.copy_from(ops::linear(x, w, {128}));
  ye.copy_from(ops::expert_linear(xe, offsets, w4, {128, 3}));
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  cudaGraphExec_t exec;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  for (int replay = 0; replay < 3; ++replay) {
    REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
    check(y, ye);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

TEST_CASE("cuda expert_linear: MXFP4 and FP8 experts, empty and >64-row experts") {
  const std::vector<std::vector<int>> cases = {
      {1, 0, 3, 2, 0}, {0, 0, 0, 0, 1}, {70, 1, 0, 9, 64}, {8, 8, 8, 8, 8}};
  for (const auto& counts : cases) {
    const tensor offsets = offsets_of(counts);
    const std::int64_t rows = offsets.data<std::int32_t>()[counts.size()];
    int max_rows = 0;
    for (int c : counts) max_rows = std::max(max_rows, c);
    const tensor x = varied_input(rows + 2, 512);  // 2 rows past every expert
    const weight_matrix w4 = random_fp4(5 * 96, 512);
    for (std::int64_t hint : {std::int64_t(0), std::int64_t(max_rows)}) {
      const ops::expert_linear_params p{128, hint};
      check_close(ops::expert_linear(x.to(gpu), offsets.to(gpu), weight_to(w4, gpu), p),
                  ops::expert_linear(x, offsets, w4, p), 2e-3);
    }
    // A loose bound (every row) with a small tile hint (decode graphs): narrow tiles, more of
    // them; the same result.
    // Past 8 rows the stream_gemm blocks walk their group's token tiles (no idle tile blocks):
    // where every group fits one tile, bit for bit what the exact bound computes.
    const ops::expert_linear_params loose{128, rows + 2, 2};
    const tensor walked =
        ops::expert_linear(x.to(gpu), offsets.to(gpu), weight_to(w4, gpu), loose).to(cpu_device);
    check_close(walked, ops::expert_linear(x, offsets, w4, {128, 0}), 2e-3);
    if (max_rows <= 8)
      test::check_bitwise(walked, ops::expert_linear(x.to(gpu), offsets.to(gpu), weight_to(w4, gpu),
                                                     {128, max_rows})
                                      .to(cpu_device));
    const weight_matrix w8 = random_fp8(5 * 128, 512, 128);
    check_close(ops::expert_linear(x.to(gpu), offsets.to(gpu), weight_to(w8, gpu), {128, 0}),
                ops::expert_linear(x, offsets, w8, {128, 0}), 2e-3);
  }
  // Experts uploaded one by one and stacked on the device equal the stacked host matrix.
  std::vector<weight_matrix> parts;
  for (int e = 0; e < 3; ++e) parts.push_back(random_fp4(32, 256));
  const weight_matrix stacked = cuda::stack_weights(parts, gpu);
  CHECK(stacked.rows() == 96);
  CHECK_FALSE(stacked.interleaved);
  test::check_bitwise(stacked.values.slice(0, 32, 64), parts[1].values);
  // Interleaved while stacking (one expert at a time): the bytes of interleaving the stack.
  const weight_matrix tiled = cuda::stack_weights(parts, gpu, true);
  REQUIRE(tiled.interleaved);
  test::check_bitwise(tiled.values, cuda::with_fp4_layout(stacked, true).values);
  test::check_bitwise(tiled.scales, stacked.scales);
  std::vector<weight_matrix> on_gpu;  // experts already on the device: no temporary, same bytes
  for (const weight_matrix& w : parts) on_gpu.push_back(weight_to(w, gpu));
  test::check_bitwise(cuda::stack_weights(on_gpu, gpu, true).values, tiled.values);
  // Experts that are not whole stripes (48 rows) stack as they are.
  std::vector<weight_matrix> odd;
  for (int e = 0; e < 2; ++e) odd.push_back(random_fp4(48, 256));
  CHECK_FALSE(cuda::stack_weights(odd, gpu, true).interleaved);
}

}  // namespace
}  // namespace di

namespace di {
namespace {

TEST_CASE("cuda GEMMs captured in a CUDA graph replay the eager results") {
  // Decode shapes (split K: atomic adds, so compared by error, not bitwise) and an expert call.
  const weight_matrix w = weight_to(random_fp8(320, 1280, 128), gpu);
  const weight_matrix w4 = weight_to(random_fp4(4 * 64, 512), gpu);
  const tensor x = varied_input(3, 1280).to(gpu);
  const tensor xe = varied_input(6, 512).to(gpu);
  const tensor offsets = offsets_of({1, 0, 3, 2}).to(gpu);
  cuda::set_gemm_backend(cuda::gemm_backend::block_gemm);
  const tensor want = ops::linear(x, w, {128}).to(cpu_device);
  const tensor want_e = ops::expert_linear(xe, offsets, w4, {128, 3}).to(cpu_device);
  replay_dense_and_expert(x, w, xe, offsets, w4, [&](const tensor& y, const tensor& ye) {
    check_close(y, want, 1e-6);
    check_close(ye, want_e, 1e-6);
  });
  cuda::set_gemm_backend(cuda::gemm_backend::automatic);
}

}  // namespace
}  // namespace di

namespace di {
namespace {

/// Restores the GEMM switches a test case sets.
struct gemm_switches {
  explicit gemm_switches(bool ordered) {
    cuda::set_gemm_backend(cuda::gemm_backend::block_gemm);
    cuda::set_ordered_gemm_splits(ordered);
  }
  ~gemm_switches() {
    cuda::set_gemm_backend(cuda::gemm_backend::automatic);
    cuda::set_ordered_gemm_splits(false);
  }
};

TEST_CASE("cuda linear_pair and expert_linear_pair: the bits of two separate calls") {
  const gemm_switches ordered(true);  // K splits in a fixed order: separate calls repeat bitwise
  cuda::set_gemm_backend(cuda::gemm_backend::automatic);
  // V4.1 blocks (sm90_block_gemm's kernels at every row count: one quantization for both), V4
  // blocks at 64 and 300 rows (cuBLASLt's block-scaled GEMM takes both weights: x quantized
  // once for the two), and an FP8 weight paired with a bf16 one (cuBLAS: two separate calls).
  struct pair_case {
    std::int64_t in, out_a, out_b;
    int block;
    bool bf16_b;
  };
  for (const pair_case c :
       {pair_case{1280, 200, 512, 32, false}, pair_case{1024, 256, 128, 128, false},
        pair_case{512, 96, 64, 32, true}}) {
    CAPTURE(c.in);
    const weight_matrix a = weight_to(random_fp8(c.out_a, c.in, c.block), gpu);
    const weight_matrix b8 = weight_to(random_fp8(c.out_b, c.in, c.block), gpu);
    const weight_matrix b = c.bf16_b ? cuda::dequantize_weight(b8, dtype::bf16) : b8;
    for (std::int64_t rows : {1, 8, 64, 300}) {
      CAPTURE(rows);
      const tensor x = varied_input(rows, c.in).to(gpu);
      test::poison_device_pool();
      const auto [ya, yb] = ops::linear_pair(x, a, b, {c.block});
      test::check_bitwise(ya.to(cpu_device), ops::linear(x, a, {c.block}).to(cpu_device));
      test::check_bitwise(yb.to(cpu_device), ops::linear(x, b, {c.block}).to(cpu_device));
    }
  }
  // The experts' w1 and w3 (interleaved MXFP4 on wg_gemm, FP8 on stream_gemm), empty experts.
  const tensor off = offsets_of({8, 0, 3, 5, 1, 0, 7, 2});
  const tensor xe = varied_input(26, 1024).to(gpu);
  for (const bool fp4 : {true, false}) {
    CAPTURE(fp4);
    const weight_matrix w1 =
        fp4 ? cuda::with_fp4_layout(weight_to(random_fp4(8 * 64, 1024), gpu), true)
            : weight_to(random_fp8(8 * 64, 1024, 32), gpu);
    const weight_matrix w3 =
        fp4 ? cuda::with_fp4_layout(weight_to(random_fp4(8 * 64, 1024), gpu), true)
            : weight_to(random_fp8(8 * 64, 1024, 32), gpu);
    const ops::expert_linear_params p{32, 8};
    const auto [h1, h3] = ops::expert_linear_pair(xe, off.to(gpu), w1, w3, p);
    test::check_bitwise(h1.to(cpu_device),
                        ops::expert_linear(xe, off.to(gpu), w1, p).to(cpu_device));
    test::check_bitwise(h3.to(cpu_device),
                        ops::expert_linear(xe, off.to(gpu), w3, p).to(cpu_device));
  }
}

TEST_CASE("cuda linear_pair on one stream_gemm launch: each output the bits of its own launch") {
  // Decode rows of the attention's wq_a / wkv and the shared expert's w1 / w3 at V4.1's widths
  // (e8m0 32-blocks) and V4's (fp32 128-blocks): one launch of both weights (the default)
  // against two (DEEPINFER_STREAM_PAIR=0's path) and the CPU. Also through the norm's codes
  // (quantized_rows), as the forward calls it, and outputs poisoned before each call.
  struct pair_case {
    std::int64_t in, out_a, out_b;
    int block;
  };
  REQUIRE(cuda::get_stream_gemm_pair());
  for (const pair_case c : {pair_case{5120, 1280, 512, 32}, pair_case{5120, 2304, 2304, 32},
                            pair_case{4096, 1024, 512, 128}}) {
    CAPTURE(c.in);
    CAPTURE(c.out_a);
    const weight_matrix a_host = random_fp8_scaled(c.out_a, c.in, c.block, c.block == 128);
    const weight_matrix b_host = random_fp8_scaled(c.out_b, c.in, c.block, c.block == 128);
    const weight_matrix a = weight_to(a_host, gpu), b = weight_to(b_host, gpu);
    for (std::int64_t rows : {1, 2, 5, 8}) {
      CAPTURE(rows);
      const tensor x = varied_input(rows, c.in);
      test::poison_device_pool();
      const auto [ya, yb] = ops::linear_pair(x.to(gpu), a, b, {c.block});
      const ops::quantized_rows q = ops::rms_norm_quantized(x.to(gpu), tensor(), 1e-6f, c.block);
      const auto [qa, qb] = ops::linear_pair(q, a, b, {c.block});
      cuda::set_stream_gemm_pair(false);
      test::poison_device_pool();
      const auto [sa, sb] = ops::linear_pair(x.to(gpu), a, b, {c.block});
      const auto [ta, tb] = ops::linear_pair(q, a, b, {c.block});
      cuda::set_stream_gemm_pair(true);
      test::check_bitwise(ya.to(cpu_device), sa.to(cpu_device));
      test::check_bitwise(yb.to(cpu_device), sb.to(cpu_device));
      test::check_bitwise(qa.to(cpu_device), ta.to(cpu_device));
      test::check_bitwise(qb.to(cpu_device), tb.to(cpu_device));
      check_close(ya, ops::linear(x, a_host, {c.block}), 2e-3);
      check_close(yb, ops::linear(x, b_host, {c.block}), 2e-3);
    }
  }
}

TEST_CASE("cuda tile_gemv (FP8 decode tiles): stream_gemm's results, batch-invariant, pairs") {
  // V4.1's dense FP8 (32 x 32 blocks, activations in blocks of 32) at decode rows from the
  // weight's decode tiles: the tiles' bytes, against stream_gemm on the row-major codes (the
  // same products per step; other K ranges, so equal up to fp32 rounding) and the CPU;
  // batch-invariant (a token's bits the same in 1..8 rows); deterministic; a dense pair of
  // different heights in one launch gives each weight's own launch's bits; shapes it does
  // not take (K not a multiple of 128, 128-blocks) go to stream_gemm unchanged.
  const bool was_on = cuda::get_tile_gemv();
  cuda::set_tile_gemv(true);  // (opt-in)
  struct shape {
    std::int64_t out, in;
  };
  // wq_b (many stripes, short K), wo_b (long K: warps and a cluster split along K), the shared
  // expert, outputs not a multiple of 16, one step-batch of K.
  for (const shape sh : {shape{32768, 1280}, shape{5120, 8192}, shape{2304, 5120}, shape{200, 1280},
                         shape{24, 128}, shape{1000, 512}}) {
    CAPTURE(sh.out);
    CAPTURE(sh.in);
    const weight_matrix host = random_fp8(sh.out, sh.in, 32);
    const weight_matrix plain = weight_to(host, gpu);
    const weight_matrix w = cuda::with_decode_tiles(plain);
    REQUIRE(w.decode_tiles.defined());
    REQUIRE(w.decode_tiles.nbytes() == cuda::decode_tiles_bytes(sh.out, sh.in));
    {  // the layout: lane 4g + t of stripe 0, step 0 holds row g's inputs 8t.. then row g+8's
      const tensor tiles = w.decode_tiles.to(cpu_device);
      const auto* tb = static_cast<const std::uint8_t*>(tiles.raw());
      const auto* cb = static_cast<const std::uint8_t*>(host.values.raw());
      bool same = true;
      for (int lane = 0; lane < 32; ++lane)
        for (int j = 0; j < 16; ++j) {
          const std::int64_t row = lane / 4 + (j < 8 ? 0 : 8), col = 8 * (lane % 4) + j % 8;
          const std::uint8_t want = row < sh.out ? cb[row * sh.in + col] : 0;
          same = same && tb[lane * 16 + j] == want;
        }
      CHECK(same);
    }
    const tensor x8 = varied_input(8, sh.in);
    test::poison_device_pool();
    const tensor y8 = ops::linear(x8.to(gpu), w, {32}).to(cpu_device);
    cuda::set_tile_gemv(false);
    const tensor streamed = ops::linear(x8.to(gpu), w, {32}).to(cpu_device);
    cuda::set_tile_gemv(true);
    check_close(y8, streamed, 1e-5);
    check_close(y8, ops::linear(x8, host, {32}), 2e-3);
    test::check_bitwise(ops::linear(x8.to(gpu), w, {32}).to(cpu_device), y8);  // deterministic
    for (std::int64_t rows : {1, 2, 3, 5, 7}) {
      CAPTURE(rows);
      const tensor part = ops::linear(x8.slice(0, 0, rows).clone().to(gpu), w, {32});
      test::check_bitwise(part.to(cpu_device), y8.slice(0, 0, rows).clone());
    }
  }
  // A pair (wq_a / wkv, the shared expert's w1 / w3): one launch, each weight's own bits.
  for (const auto [in, out_a, out_b] :
       {std::tuple<std::int64_t, std::int64_t, std::int64_t>{5120, 1280, 512},
        {5120, 2304, 2304}}) {
    CAPTURE(out_a);
    const weight_matrix a_host = random_fp8(out_a, in, 32), b_host = random_fp8(out_b, in, 32);
    const weight_matrix a = cuda::with_decode_tiles(weight_to(a_host, gpu));
    const weight_matrix b = cuda::with_decode_tiles(weight_to(b_host, gpu));
    for (std::int64_t rows : {1, 8}) {
      CAPTURE(rows);
      const tensor x = varied_input(rows, in);
      test::poison_device_pool();
      const auto [ya, yb] = ops::linear_pair(x.to(gpu), a, b, {32});
      test::check_bitwise(ya.to(cpu_device), ops::linear(x.to(gpu), a, {32}).to(cpu_device));
      test::check_bitwise(yb.to(cpu_device), ops::linear(x.to(gpu), b, {32}).to(cpu_device));
      check_close(ya, ops::linear(x, a_host, {32}), 2e-3);
    }
  }
  // Not taken: 128-blocks (no tiles made), K of 96 (tiles made, kernel refuses: stream_gemm).
  const weight_matrix v4 = cuda::with_decode_tiles(weight_to(random_fp8(256, 512, 128), gpu));
  CHECK_FALSE(v4.decode_tiles.defined());
  const weight_matrix odd_host = random_fp8(48, 96, 32);
  const weight_matrix odd = cuda::with_decode_tiles(weight_to(odd_host, gpu));
  CHECK_FALSE(odd.decode_tiles.defined());
  const tensor xo = varied_input(3, 96);
  check_close(ops::linear(xo.to(gpu), odd, {32}), ops::linear(xo, odd_host, {32}), 2e-3);
  cuda::set_tile_gemv(was_on);
}

TEST_CASE("cuda expert_linear_pair on one wg_gemm launch: right, and its splits' bits") {
  REQUIRE(cuda::get_wg_gemm_pair() == 2);  // the default: one launch, the pair's own splits
  // V4.1's widths: a single w1 of 13 row blocks splits K in two, the pair's 26 would not (mode
  // 2). Decode tiles (groups of <= 8 rows) and walked groups (up to 40 rows, a tile hint of 48).
  const std::int64_t out = 13 * 128, in = 2304;
  const weight_matrix h1w = random_fp4(8 * out, in), h3w = random_fp4(8 * out, in);
  const weight_matrix w1 = cuda::with_fp4_layout(weight_to(h1w, gpu), true);
  const weight_matrix w3 = cuda::with_fp4_layout(weight_to(h3w, gpu), true);
  struct pair_case {
    std::vector<int> counts;
    ops::expert_linear_params params;
  };
  for (const pair_case& c : {pair_case{{8, 0, 3, 5, 1, 0, 7, 2}, {32, 8}},
                             pair_case{{40, 0, 9, 30, 1, 17, 0, 3}, {32, 0, 48}}}) {
    const tensor off = offsets_of(c.counts);
    const std::int64_t rows = off.data<std::int32_t>()[c.counts.size()];
    CAPTURE(rows);
    const tensor x = varied_input(rows, in);
    const tensor want1 = ops::expert_linear(x, off, h1w, {32, 0});
    const tensor want3 = ops::expert_linear(x, off, h3w, {32, 0});
    const tensor xg = x.to(gpu), offg = off.to(gpu);
    const tensor single1 = ops::expert_linear(xg, offg, w1, c.params).to(cpu_device);
    const tensor single3 = ops::expert_linear(xg, offg, w3, c.params).to(cpu_device);
    for (const int mode : {1, 2, 0}) {
      CAPTURE(mode);
      cuda::set_wg_gemm_pair(mode);
      test::poison_device_pool();
      const long before = cuda::wg_gemm_launches();
      const auto [g1, g3] = ops::expert_linear_pair(xg, offg, w1, w3, c.params);
      CHECK(cuda::wg_gemm_launches() - before == (mode == 0 ? 2 : 1));
      const tensor y1 = g1.to(cpu_device), y3 = g3.to(cpu_device);
      check_close(y1, want1, 2e-3);
      check_close(y3, want3, 2e-3);
      if (mode == 2) {  // one K split where the single weight has two: other last bits
        check_close(y1, single1, 1e-5);
        check_close(y3, single3, 1e-5);
      } else {
        test::check_bitwise(y1, single1);
        test::check_bitwise(y3, single3);
      }
      const auto [r1, r3] = ops::expert_linear_pair(xg, offg, w1, w3, c.params);  // repeats
      test::check_bitwise(r1.to(cpu_device), y1);
      test::check_bitwise(r3.to(cpu_device), y3);
    }
    cuda::set_wg_gemm_pair(2);
  }
  // A pair of different shapes is two launches.
  const weight_matrix narrow = cuda::with_fp4_layout(weight_to(random_fp4(8 * 128, in), gpu), true);
  const tensor off = offsets_of({1, 0, 0, 0, 0, 0, 0, 1});
  const long before = cuda::wg_gemm_launches();
  ops::expert_linear_pair(varied_input(2, in).to(gpu), off.to(gpu), w1, narrow, {32, 8});
  CHECK(cuda::wg_gemm_launches() - before == 2);
  CHECK_THROWS_AS(cuda::set_wg_gemm_pair(3), error);
}

TEST_CASE("cuda expert_linear with every row grouped: unzeroed outputs, every row stored") {
  // rows_all_grouped (the MoE's gathered pairs): the products leave y unzeroed, so each kernel
  // must store every row of every group -- the pool poisoned with NaN first, the bits of the
  // zeroed call. Single weights of one K split (in 512: stores) and two (in 2304, one row
  // block: atomic adds, zeroed by the launch), and the wg_gemm pair (its splits zeroed once);
  // decode tiles (<= 8 rows per group) and walked groups (up to 40 rows).
  REQUIRE(cuda::zero_kernels());  // (DEEPINFER_ZERO_KERNELS=0 zeroes everything, as before)
  for (const std::int64_t in : {std::int64_t(512), std::int64_t(2304)}) {
    const std::int64_t out = 128;
    const weight_matrix w1 = cuda::with_fp4_layout(weight_to(random_fp4(8 * out, in), gpu), true);
    const weight_matrix w3 = cuda::with_fp4_layout(weight_to(random_fp4(8 * out, in), gpu), true);
    for (const std::vector<int>& counts :
         {std::vector<int>{1, 0, 3, 2, 0, 1, 0, 1}, std::vector<int>{40, 0, 9, 30, 1, 17, 0, 3}}) {
      const tensor off = offsets_of(counts).to(gpu);
      const std::int64_t rows = offsets_of(counts).data<std::int32_t>()[counts.size()];
      CAPTURE(in);
      CAPTURE(rows);
      const tensor x = varied_input(rows, in).to(gpu);
      ops::expert_linear_params zeroed{32, rows, rows > 8 ? 48 : 8};
      ops::expert_linear_params grouped = zeroed;
      grouped.rows_all_grouped = true;
      const tensor want = ops::expert_linear(x, off, w1, zeroed).to(cpu_device);
      const auto [want1, want3] = ops::expert_linear_pair(x, off, w1, w3, zeroed);
      test::poison_device_pool();
      test::check_bitwise(ops::expert_linear(x, off, w1, grouped), want);
      test::poison_device_pool();
      const auto [got1, got3] = ops::expert_linear_pair(x, off, w1, w3, grouped);
      test::check_bitwise(got1, want1);
      test::check_bitwise(got3, want3);
    }
  }
}

TEST_CASE(
    "cuda expert_linear_pair, prefill-sized: 32-token tiles on two K splits where one "
    "does not fit") {
  // V4.1's K (5120 = 160 steps): a pair of 13 row blocks (mode 2: one split) walked in 32-token
  // tiles needs 160 KB of B -- past the limit with the ring -- so it takes two K splits (sums by
  // fp32 atomics onto a zeroed y) instead of 8-token tiles (set_wg_gemm_n32_split(false)).
  REQUIRE(cuda::get_wg_gemm_pair() == 2);
  REQUIRE(cuda::get_wg_gemm_n32_split());
  REQUIRE(cuda::get_wg_gemm_bf16());
  cuda::set_wg_gemm_bf16(false);  // the FP8 tiles (the bf16 kernel has its own case below)
  const std::int64_t out = 13 * 128, in = 5120;
  const weight_matrix h1w = random_fp4(8 * out, in), h3w = random_fp4(8 * out, in);
  const weight_matrix w1 = cuda::with_fp4_layout(weight_to(h1w, gpu), true);
  const weight_matrix w3 = cuda::with_fp4_layout(weight_to(h3w, gpu), true);
  const tensor off = offsets_of({48, 40, 56, 30, 64, 0, 50, 33});
  const std::int64_t rows = off.data<std::int32_t>()[8];
  const tensor x = varied_input(rows, in);
  const tensor want1 = ops::expert_linear(x, off, h1w, {32, 0});
  const tensor want3 = ops::expert_linear(x, off, h3w, {32, 0});
  const tensor xg = x.to(gpu), offg = off.to(gpu);
  const ops::expert_linear_params params{32, 0, 48};  // a prefill chunk's tile hint
  test::poison_device_pool();
  const auto [g1, g3] = ops::expert_linear_pair(xg, offg, w1, w3, params);
  const tensor y1 = g1.to(cpu_device), y3 = g3.to(cpu_device);
  check_close(y1, want1, 2e-3);
  check_close(y3, want3, 2e-3);
  cuda::set_wg_gemm_n32_split(false);  // 8-token tiles, one split: the same products
  const auto [e1, e3] = ops::expert_linear_pair(xg, offg, w1, w3, params);
  cuda::set_wg_gemm_n32_split(true);
  check_close(y1, e1.to(cpu_device), 1e-5);
  check_close(y3, e3.to(cpu_device), 1e-5);
  const auto [r1, r3] = ops::expert_linear_pair(xg, offg, w1, w3, params);  // two addends
  test::check_bitwise(r1.to(cpu_device), y1);  // onto zero: the same bits every run
  test::check_bitwise(r3.to(cpu_device), y3);
  cuda::set_wg_gemm_bf16(true);
}

TEST_CASE(
    "cuda wg_gemm bf16 (prefill-sized groups): right, the FP8 tiles' products, run-to-run bits") {
  // Prefill-sized groups (a tile hint of 48) multiply in bf16 -- e2m1 x e8m0 weights and e4m3 x
  // block-scale activations, both exact in bf16 -- accumulated without promotion: the CPU's
  // products and the FP8 tiles' (set_wg_gemm_bf16(false)) in another order. V4.1's K of the pair
  // (5120: two K splits, a 2-run weight ring beside B) and of w2 (2304: one split), V4's blocks
  // of 128 inputs (K 4096: two splits, the 4-run ring; 2048: one). Outputs that are not a
  // multiple of the 256-row block (1664, 640, 384); groups of 0, 1, 30, 33 and 64+ tokens (several
  // tiles a group, clamped last tiles); negative zeros and every code (random bytes).
  REQUIRE(cuda::get_wg_gemm_bf16());
  struct bf16_case {
    std::int64_t out, in;
    int act_block;
    bool pair;
  };
  for (const bf16_case c :
       {bf16_case{13 * 128, 5120, 32, true}, bf16_case{5 * 128, 2304, 32, false},
        bf16_case{4 * 128, 4096, 128, true}, bf16_case{3 * 128, 2048, 128, false}}) {
    CAPTURE(c.in);
    const weight_matrix h1w = random_fp4(8 * c.out, c.in), h3w = random_fp4(8 * c.out, c.in);
    const weight_matrix w1 = cuda::with_fp4_layout(weight_to(h1w, gpu), true);
    const weight_matrix w3 = cuda::with_fp4_layout(weight_to(h3w, gpu), true);
    const tensor off = offsets_of({48, 1, 97, 30, 64, 0, 50, 33});
    const std::int64_t rows = off.data<std::int32_t>()[8];
    const tensor x = varied_input(rows, c.in);
    const tensor want1 = ops::expert_linear(x, off, h1w, {c.act_block, 0});
    const tensor want3 = ops::expert_linear(x, off, h3w, {c.act_block, 0});
    const tensor xg = x.to(gpu), offg = off.to(gpu);
    const ops::expert_linear_params params{c.act_block, 0, 48};
    auto run = [&] {
      if (c.pair) return ops::expert_linear_pair(xg, offg, w1, w3, params);
      return std::make_pair(ops::expert_linear(xg, offg, w1, params),
                            ops::expert_linear(xg, offg, w3, params));
    };
    test::poison_device_pool();
    const auto [g1, g3] = run();
    const tensor y1 = g1.to(cpu_device), y3 = g3.to(cpu_device);
    check_close(y1, want1, 2e-3);
    check_close(y3, want3, 2e-3);
    cuda::set_wg_gemm_bf16(false);
    const auto [f1, f3] = run();
    cuda::set_wg_gemm_bf16(true);
    // The same products summed in another order; the FP8 tiles' wgmma adds each step's 32
    // products below fp32 precision (~2e-5 relative between the two on these inputs).
    check_close(y1, f1.to(cpu_device), 5e-5);
    check_close(y3, f3.to(cpu_device), 5e-5);
    MESSAGE("K " << c.in << ": relative rms error against the CPU, bf16 " << rel_error(y1, want1)
                 << " / FP8 tiles " << rel_error(f1.to(cpu_device), want1));
    const auto [r1, r3] = run();  // one or two addends onto zero: the same bits every run
    test::check_bitwise(r1.to(cpu_device), y1);
    test::check_bitwise(r3.to(cpu_device), y3);
    // Two warpgroups a block (256 rows sharing B, not the default 384): each row's K range and
    // order as with three.
    REQUIRE(cuda::get_wg_gemm_bf16_warpgroups() == 3);
    cuda::set_wg_gemm_bf16_warpgroups(2);
    test::poison_device_pool();
    const auto [t1, t3] = run();
    cuda::set_wg_gemm_bf16_warpgroups(3);
    test::check_bitwise(t1.to(cpu_device), y1);
    test::check_bitwise(t3.to(cpu_device), y3);
  }
}

TEST_CASE("cuda quantized_rows: RMSNorm's and SwiGLU's own codes give linear's exact results") {
  // The fused producers quantize as linear would (act_quant_kernel's functions and order), so
  // a linear from their codes is the same bits as one that quantizes x itself. V4.1 (32-input
  // blocks) and V4 (128) widths; a width the fused norm does not take (odd: codes stay empty).
  const gemm_switches ordered(true);  // K splits (9+ rows) in a fixed order: calls repeat bitwise
  cuda::set_gemm_backend(cuda::gemm_backend::automatic);
  struct norm_case {
    std::int64_t dim;
    int block;
    bool fused;
  };
  for (const norm_case nc :
       {norm_case{1280, 32, true}, norm_case{1024, 128, true}, norm_case{5120, 32, true},
        norm_case{96, 32, true}, norm_case{1280, 0, false}, norm_case{99, 32, false}}) {
    CAPTURE(nc.dim);
    CAPTURE(nc.block);
    const weight_matrix w = weight_to(random_fp8(256, nc.dim, nc.block > 0 ? nc.block : 32), gpu);
    const tensor nw = test::random_f32({nc.dim}).to(gpu);
    for (const std::int64_t rows : {1, 7, 64}) {
      CAPTURE(rows);
      const tensor x = varied_input(rows, nc.dim).to(gpu);
      test::poison_device_pool();
      const ops::quantized_rows q = ops::rms_norm_quantized(x, nw, 1e-6f, nc.block);
      CHECK(q.codes.defined() == nc.fused);
      test::check_bitwise(q.x.to(cpu_device), ops::rms_norm(x, nw, 1e-6f).to(cpu_device));
      if (nc.block == 0 || nc.dim % nc.block != 0) continue;
      test::check_bitwise(ops::linear(q, w, {nc.block}).to(cpu_device),
                          ops::linear(q.x, w, {nc.block}).to(cpu_device));
    }
  }
  // The mHC collapse + norm (wq_a / wkv, the shared experts' w1 / w3 as pairs), one block per
  // token and a cluster of 4.
  const bool cluster_before = cuda::hc_collapse_norm_cluster();
  for (const bool cluster : {false, true})
    for (const auto& [dim, block] :
         {std::pair<std::int64_t, int>{5120, 32}, {4096, 128}, {512, 64}}) {
      cuda::set_hc_collapse_norm_cluster(cluster);
      CAPTURE(cluster);
      CAPTURE(dim);
      CAPTURE(block);
      const weight_matrix a = weight_to(random_fp8(256, dim, block), gpu);
      const weight_matrix b = weight_to(random_fp8(128, dim, block), gpu);
      const tensor nw = test::random_f32({dim}).to(gpu);
      for (const std::int64_t rows : {1, 7, 64}) {
        CAPTURE(rows);
        const tensor streams = test::random_f32({rows, 4, dim}).to(gpu);
        const tensor pre = test::random_f32({rows, 4}).to(gpu);
        test::poison_device_pool();
        const ops::quantized_rows q =
            ops::hc_collapse_norm_quantized(streams, pre, nw, 1e-6f, block);
        REQUIRE(q.codes.defined());
        test::check_bitwise(q.x.to(cpu_device),
                            ops::hc_collapse_norm(streams, pre, nw, 1e-6f).to(cpu_device));
        const auto [ya, yb] = ops::linear_pair(q, a, b, {block});
        const auto [wa, wb] = ops::linear_pair(q.x, a, b, {block});
        test::check_bitwise(ya.to(cpu_device), wa.to(cpu_device));
        test::check_bitwise(yb.to(cpu_device), wb.to(cpu_device));
      }
    }
  cuda::set_hc_collapse_norm_cluster(cluster_before);
  for (const auto& [inter, block] : {std::pair<std::int64_t, int>{2304, 32}, {2048, 128}}) {
    CAPTURE(inter);
    CAPTURE(block);
    const weight_matrix w2 = weight_to(random_fp8(256, inter, block), gpu);
    // 4 experts, a whole number of scale blocks each
    const weight_matrix we = weight_to(random_fp8(4 * std::max(64, block), inter, block), gpu);
    for (const std::int64_t rows : {1, 6, 48}) {
      CAPTURE(rows);
      const tensor gate = varied_input(rows, inter).to(gpu), up = varied_input(rows, inter).to(gpu);
      const tensor scale = test::random_f32({rows}).to(gpu);
      for (const tensor& rs : {scale, tensor()}) {
        test::poison_device_pool();
        const ops::quantized_rows q = ops::swiglu_quantized(gate, up, 10.0f, rs, block);
        REQUIRE(q.codes.defined());
        test::check_bitwise(q.x.to(cpu_device), ops::swiglu(gate, up, 10.0f, rs).to(cpu_device));
        test::check_bitwise(ops::linear(q, w2, {block}).to(cpu_device),
                            ops::linear(q.x, w2, {block}).to(cpu_device));
        const int n = int(rows);
        const tensor off = offsets_of({n / 2, 0, n - n / 2 - n / 3, n / 3}).to(gpu);
        const ops::expert_linear_params ep{block, rows};
        test::check_bitwise(ops::expert_linear(q, off, we, ep).to(cpu_device),
                            ops::expert_linear(q.x, off, we, ep).to(cpu_device));
      }
    }
  }
}

/// scales_mn as the transpose of scales, bitwise.
void check_scales_mn(const ops::quantized_rows& q) {
  REQUIRE(q.scales_mn.defined());
  const tensor rows = q.scales.to(cpu_device), cols = q.scales_mn.to(cpu_device);
  REQUIRE(cols.size(0) == rows.size(1));
  REQUIRE(cols.size(1) == rows.size(0));
  bool same = true;
  for (std::int64_t r = 0; r < rows.size(0); ++r)
    for (std::int64_t b = 0; b < rows.size(1); ++b)
      same = same && std::memcmp(rows.data<float>() + r * rows.size(1) + b,
                                 cols.data<float>() + b * rows.size(0) + r, sizeof(float)) == 0;
  CHECK(same);
}

TEST_CASE("cuda quantized_rows to cuBLASLt: the producers' own codes and scales, the same bits") {
  // Decode batches of 16..64 rows with V4's 128 x 128 blocks go to cuBLASLt's block-scaled
  // GEMM (the automatic backend, outside the batch-invariant mode), which reads the activation
  // scales rows-contiguous: the fused producers write them so too (scales_mn), and a linear
  // from them is the bits of one that quantizes x itself.
  if (!cuda::cublaslt_block_fp8_available()) return;
  const gemm_switches unordered(false);
  cuda::set_gemm_backend(cuda::gemm_backend::automatic);
  const weight_matrix w = weight_to(random_fp8(384, 4096, 128), gpu);
  const weight_matrix w_b = weight_to(random_fp8(256, 4096, 128), gpu);
  const weight_matrix w2 = weight_to(random_fp8(512, 2048, 128), gpu);
  const tensor nw = test::random_f32({4096}).to(gpu);
  for (const std::int64_t rows : {16, 48, 64}) {
    CAPTURE(rows);
    const tensor x = varied_input(rows, 4096).to(gpu);
    test::poison_device_pool();
    const ops::quantized_rows q = ops::rms_norm_quantized(x, nw, 1e-6f, 128);
    check_scales_mn(q);
    test::check_bitwise(ops::linear(q, w, {128}).to(cpu_device),
                        ops::linear(q.x, w, {128}).to(cpu_device));
    const tensor streams = test::random_f32({rows, 4, 4096}).to(gpu);
    const tensor pre = test::random_f32({rows, 4}).to(gpu);
    const ops::quantized_rows h = ops::hc_collapse_norm_quantized(streams, pre, nw, 1e-6f, 128);
    check_scales_mn(h);
    const auto [ya, yb] = ops::linear_pair(h, w, w_b, {128});
    const auto [wa, wb] = ops::linear_pair(h.x, w, w_b, {128});
    test::check_bitwise(ya.to(cpu_device), wa.to(cpu_device));
    test::check_bitwise(yb.to(cpu_device), wb.to(cpu_device));
    const tensor gate = varied_input(rows, 2048).to(gpu), up = varied_input(rows, 2048).to(gpu);
    const ops::quantized_rows a = ops::swiglu_quantized(gate, up, 10.0f, tensor(), 128);
    check_scales_mn(a);
    test::check_bitwise(ops::linear(a, w2, {128}).to(cpu_device),
                        ops::linear(a.x, w2, {128}).to(cpu_device));
  }
}

TEST_CASE("cuda ordered K splits: bit-reproducible, batch-invariant, right, graph-safe") {
  const gemm_switches on(true);
  // Decode shapes that split K many ways (8 row tiles -> up to 8 splits; V4 and V4.1 blocks,
  // MXFP4), outputs not a multiple of the 64-row tile.
  struct shape {
    std::int64_t out, in;
    int block;  // 0: MXFP4
  };
  for (const shape sh : {shape{512, 4096, 128}, shape{200, 1280, 32}, shape{96, 2304, 0}}) {
    CAPTURE(sh.out);
    const weight_matrix host =
        sh.block ? random_fp8(sh.out, sh.in, sh.block) : random_fp4(sh.out, sh.in);
    const weight_matrix w = weight_to(host, gpu);
    const int act = sh.in % 128 == 0 ? 128 : 32;
    const tensor x7 = varied_input(7, sh.in);
    const tensor x1 = x7.slice(0, 0, 1).clone();
    const tensor first = ops::linear(x1.to(gpu), w, {act}).to(cpu_device);
    for (int run = 0; run < 3; ++run)  // the same bits every run
      test::check_bitwise(ops::linear(x1.to(gpu), w, {act}).to(cpu_device), first);
    // Row 0 of a batch of 7 (the same token tile, so the same splits) has the same bits.
    const tensor batch = ops::linear(x7.to(gpu), w, {act}).to(cpu_device);
    test::check_bitwise(batch.slice(0, 0, 1).clone(), first);
    check_close(batch, ops::linear(x7, host, {act}), 2e-3);
    // Against the atomic path: the same sums in another order.
    cuda::set_ordered_gemm_splits(false);
    check_close(ops::linear(x7.to(gpu), w, {act}), batch, 1e-5);
    cuda::set_ordered_gemm_splits(true);
  }
  // Experts: two splits, empty experts, and a grid compacted to the routed rows (3 rows over
  // 8 experts); against the CPU.
  {
    const weight_matrix host8 = random_fp4(8 * 64, 1024);
    const tensor xr = varied_input(3, 1024);
    const tensor off = offsets_of({0, 1, 0, 0, 2, 0, 0, 0});
    check_close(ops::expert_linear(xr.to(gpu), off.to(gpu), weight_to(host8, gpu), {128, 2}),
                ops::expert_linear(xr, off, host8, {128, 2}), 2e-3);
  }
  // A captured, replayed dense and expert call: the tile counters must come back to zero for
  // every replay, and every replay gives the eager bits.
  const weight_matrix host4 = random_fp4(4 * 64, 1024);
  const weight_matrix w4 = weight_to(host4, gpu);
  const tensor xe_host = varied_input(6, 1024);
  const tensor xe = xe_host.to(gpu);
  const tensor offsets_host = offsets_of({1, 0, 3, 2});
  const tensor offsets = offsets_host.to(gpu);
  const tensor want_e = ops::expert_linear(xe, offsets, w4, {128, 3}).to(cpu_device);
  check_close(want_e, ops::expert_linear(xe_host, offsets_host, host4, {128, 3}), 2e-3);
  const weight_matrix w = weight_to(random_fp8(320, 2048, 128), gpu);
  const tensor x = varied_input(3, 2048).to(gpu);
  const tensor want = ops::linear(x, w, {128}).to(cpu_device);
  replay_dense_and_expert(x, w, xe, offsets, w4, [&](const tensor& y, const tensor& ye) {
    test::check_bitwise(y.to(cpu_device), want);
    test::check_bitwise(ye.to(cpu_device), want_e);
  });
}

}  // namespace
}  // namespace di

namespace di {
namespace {

/// Restores the decode-kernel switches a test case sets.
struct stream_switches {
  stream_switches() {
    cuda::set_gemm_backend(cuda::gemm_backend::block_gemm);
    cuda::set_ring_gemm(false);  // (it would take V4's blocks at 9..64 rows first)
  }
  ~stream_switches() {
    cuda::set_gemm_backend(cuda::gemm_backend::automatic);
    cuda::set_dense_wg_gemm(dense_wg);  // as the environment left it
    cuda::set_dense_wg_gemm_wide(dense_wide);
    cuda::set_stream_gemm_early(stream_early);
    cuda::set_stream_gemm_wide(stream_wide);
    cuda::set_dense_wg_gemm_early(true);
    cuda::set_dense_wg_gemm_batch(8);
    cuda::set_stream_gemm(true);
    cuda::set_stream_gemm_variant(-1);
    cuda::set_skinny_gemm(true);
    cuda::set_pipe_gemm(false);
    cuda::set_wg_gemm(true);
    cuda::set_wg_gemm_ring(-1);
    cuda::set_wg_gemm_wide_tiles(true);
    cuda::set_wg_gemm_n32(1);
    cuda::set_wg_gemm_bf16(wg_bf16);
    cuda::set_wg_gemm_chain(true);
    cuda::set_wg_gemm_chain_ring(4);
    cuda::set_ring_gemm(ring);
    cuda::set_ring_gemm_early(true);
  }
  bool dense_wg = cuda::get_dense_wg_gemm();
  int dense_wide = cuda::get_dense_wg_gemm_wide();
  bool wg_bf16 = cuda::get_wg_gemm_bf16();
  bool stream_early = cuda::get_stream_gemm_early();
  bool stream_wide = cuda::get_stream_gemm_wide();
  bool ring = cuda::get_ring_gemm();
};

TEST_CASE("cuda stream_gemm (decode tiles): right, deterministic, batch-invariant") {
  const stream_switches restore;
  cuda::set_dense_wg_gemm(false);  // it would take the dense FP8 tiles first
  struct shape {
    std::int64_t out, in;
    int block;  // 0: MXFP4
  };
  // Outputs not a multiple of 16 or 32 rows; K from one step to a two-block split (6144 inputs
  // at 16 outputs asks for more warps than K has); V4 and V4.1 blocks and MXFP4;
  // FP8 K of 3 steps (no whole pairs: 8-byte loads either way) and of 66 (pairs, ranges ending
  // in a partial batch of one pair).
  const shape shapes[] = {{16, 32, 32},    {40, 256, 0},  {200, 1280, 32}, {48, 384, 128},
                          {16, 6144, 128}, {96, 2304, 0}, {1000, 512, 32}, {24, 8192, 0},
                          {24, 96, 32},    {48, 2112, 32}};
  for (const shape sh : shapes) {
    CAPTURE(sh.out);
    CAPTURE(sh.in);
    const weight_matrix host =
        sh.block ? random_fp8(sh.out, sh.in, sh.block) : random_fp4(sh.out, sh.in);
    const weight_matrix w = weight_to(host, gpu);
    const int act = sh.in % 128 == 0 ? 128 : 32;
    const tensor x8 = varied_input(8, sh.in);
    cuda::set_stream_gemm(false);  // the shared-memory tile kernel
    const tensor tiled = ops::linear(x8.to(gpu), w, {act}).to(cpu_device);
    cuda::set_stream_gemm(true);
    // FP8 in 16-byte loads (K % 64 == 0) or 8-byte fragments: the same products per step,
    // arranged differently, so the same sums up to rounding; within either, the variants batch
    // loads differently but add in the same order.
    tensor narrow;
    for (const bool wide : {false, true}) {
      CAPTURE(wide);
      cuda::set_stream_gemm_wide(wide);
      tensor first_variant;
      for (int variant : {0, 1, -1}) {
        CAPTURE(variant);
        cuda::set_stream_gemm_variant(variant);
        test::poison_device_pool();
        const tensor y8 = ops::linear(x8.to(gpu), w, {act}).to(cpu_device);
        if (variant == 0)
          first_variant = y8;
        else
          test::check_bitwise(y8, first_variant);
        if (!wide)
          narrow = y8;
        else
          check_close(y8, narrow, 1e-5);
        check_close(y8, ops::linear(x8, host, {act}), 2e-3);
        check_close(y8, tiled, 1e-5);  // the same sums, grouped differently
        test::check_bitwise(ops::linear(x8.to(gpu), w, {act}).to(cpu_device), y8);
        for (std::int64_t rows : {1, 3}) {  // fewer rows: the same bits for the same tokens
          const tensor part = ops::linear(x8.slice(0, 0, rows).clone().to(gpu), w, {act});
          test::check_bitwise(part.to(cpu_device), y8.slice(0, 0, rows).clone());
        }
      }
      // The first weights requested after the wait for the previous kernel: the same bits.
      cuda::set_stream_gemm_early(false);
      test::poison_device_pool();
      test::check_bitwise(ops::linear(x8.to(gpu), w, {act}).to(cpu_device), first_variant);
      cuda::set_stream_gemm_early(true);
    }
    if (sh.block) {  // dense FP8 batches of 9..64 rows: skinny_gemm, whose K splits (more
      // than two) add in a fixed order only with ordered splits
      const bool ordered_before = cuda::get_ordered_gemm_splits();
      cuda::set_ordered_gemm_splits(true);
      const tensor x64 = varied_input(64, sh.in);
      test::poison_device_pool();
      const tensor y64 = ops::linear(x64.to(gpu), w, {act}).to(cpu_device);
      check_close(y64, ops::linear(x64, host, {act}), 2e-3);
      cuda::set_skinny_gemm(false);  // sm90_block_gemm's tiles: the same sums, regrouped
      check_close(ops::linear(x64.to(gpu), w, {act}), y64, 1e-5);
      cuda::set_skinny_gemm(true);
      test::check_bitwise(ops::linear(x64.to(gpu), w, {act}), y64);
      for (std::int64_t rows : {9, 17, 33, 40}) {  // the same bits for the same tokens
        CAPTURE(rows);
        const tensor part = ops::linear(x64.slice(0, 0, rows).clone().to(gpu), w, {act});
        test::check_bitwise(part, y64.slice(0, 0, rows).clone());
      }
      cuda::set_ordered_gemm_splits(ordered_before);
    }
  }
  // Experts: empty ones, a compacted grid (3 routed rows over 8 experts), up to 8 rows per
  // expert, several token tiles under a small tile hint (decode graphs), FP8 and MXFP4.
  {
    for (const auto& counts : std::vector<std::vector<int>>{
             {0, 1, 0, 0, 2, 0, 0, 0}, {8, 0, 3, 5, 1, 0, 7, 2}, {17, 0, 1, 0, 0, 0, 0, 9}}) {
      const tensor off = offsets_of(counts);
      const std::int64_t rows = off.data<std::int32_t>()[counts.size()];
      const tensor xr = varied_input(rows, 1024);
      const weight_matrix w4 = random_fp4(8 * 72, 1024);
      const weight_matrix w8 = random_fp8(8 * 64, 1024, 32);
      for (const weight_matrix* w : {&w4, &w8}) {
        const ops::expert_linear_params hint{32, rows, 2};  // loose bound, tile for 2 rows
        const tensor want = ops::expert_linear(xr, off, *w, {32, 0});
        for (const bool wide : {false, true})
          for (int variant : {0, 1, -1}) {
            cuda::set_stream_gemm_wide(wide);
            cuda::set_stream_gemm_variant(variant);
            check_close(ops::expert_linear(xr.to(gpu), off.to(gpu), weight_to(*w, gpu), hint), want,
                        2e-3);
          }
        cuda::set_stream_gemm(false);
        check_close(ops::expert_linear(xr.to(gpu), off.to(gpu), weight_to(*w, gpu), hint), want,
                    2e-3);
        cuda::set_stream_gemm(true);
      }
    }
  }
}

TEST_CASE(
    "cuda dense_wg_gemm (dense FP8 decode tiles on wgmma): right, deterministic, "
    "batch-invariant, graph-safe, refusals") {
  const stream_switches restore;
  struct shape {
    std::int64_t out, in;
    int block;
    bool f32_scales;
  };
  // Outputs not a multiple of 16 or 64 (warps and rows past the last output); K of one step;
  // 41 steps (two K splits of 24 and 17: whole batches, then a tail of single steps); few row
  // tiles with long K (clusters of 7 and 8 splits); V4's 128 and V4.1's 32 blocks, 128-input
  // activation blocks over 32-input weight blocks; fp32 weight scales.
  const shape shapes[] = {{16, 32, 32, false},    {200, 1312, 32, false}, {48, 384, 128, false},
                          {16, 6144, 128, false}, {1000, 512, 32, false}, {64, 8192, 32, false},
                          {320, 2048, 128, true}, {130, 5120, 32, false}, {96, 2560, 32, true}};
  for (const shape sh : shapes) {
    CAPTURE(sh.out);
    CAPTURE(sh.in);
    CAPTURE(sh.f32_scales);
    const weight_matrix host = random_fp8_scaled(sh.out, sh.in, sh.block, sh.f32_scales);
    const weight_matrix w = weight_to(host, gpu);
    const int act = sh.in % 128 == 0 && sh.block == 32 ? 128 : 32;
    const tensor x8 = varied_input(8, sh.in);
    const tensor want = ops::linear(x8, host, {act});
    cuda::set_dense_wg_gemm(false);  // stream_gemm: the same products, other roundings
    const tensor streamed = ops::linear(x8.to(gpu), w, {act}).to(cpu_device);
    cuda::set_dense_wg_gemm(true);
    tensor first;
    for (const int batch : {8, 4}) {
      for (const bool early : {true, false}) {
        CAPTURE(batch);
        CAPTURE(early);
        cuda::set_dense_wg_gemm_batch(batch);
        cuda::set_dense_wg_gemm_early(early);
        const long before = cuda::dense_wg_gemm_launches();
        test::poison_device_pool();
        const tensor y8 = ops::linear(x8.to(gpu), w, {act}).to(cpu_device);
        CHECK(cuda::dense_wg_gemm_launches() - before == 1);
        if (!first.defined())
          first = y8;
        else
          test::check_bitwise(y8, first);  // batching and early loads: the same sums
        check_close(y8, want, 2e-3);
        // wgmma's FP8 MMA adds a step's 32 products at less than fp32 precision (about 2^-14
        // relative: H200, 6e-5 .. 9e-5 here), stream_gemm's emulated one in fp32.
        check_close(y8, streamed, 3e-4);
        for (const std::int64_t rows : {1, 3, 5}) {  // fewer rows: the same bits
          CAPTURE(rows);
          const tensor part = ops::linear(x8.slice(0, 0, rows).clone().to(gpu), w, {act});
          test::check_bitwise(part.to(cpu_device), y8.slice(0, 0, rows).clone());
        }
      }
    }
    // Nine rows are not a decode tile: skinny_gemm takes them (without the wide tiles).
    cuda::set_dense_wg_gemm_wide(0);
    const long before = cuda::dense_wg_gemm_launches();
    const tensor x9 = varied_input(9, sh.in);
    check_close(ops::linear(x9.to(gpu), w, {act}), ops::linear(x9, host, {act}), 2e-3);
    CHECK(cuda::dense_wg_gemm_launches() == before);
  }
  // Captured in a CUDA graph and replayed: the eager bits (K split across a cluster).
  const weight_matrix w = weight_to(random_fp8(320, 4096, 128), gpu);
  const weight_matrix w4 = weight_to(random_fp4(4 * 64, 512), gpu);
  const tensor x = varied_input(3, 4096).to(gpu);
  const tensor xe = varied_input(6, 512).to(gpu);
  const tensor offsets = offsets_of({1, 0, 3, 2}).to(gpu);
  const tensor eager = ops::linear(x, w, {128}).to(cpu_device);
  const long before = cuda::dense_wg_gemm_launches();
  replay_dense_and_expert(x, w, xe, offsets, w4, [&](const tensor& y, const tensor&) {
    test::check_bitwise(y.to(cpu_device), eager);
  });
  CHECK(cuda::dense_wg_gemm_launches() == before + 1);  // captured once
}

TEST_CASE(
    "cuda dense_wg_gemm wide tiles (9..64 rows on m64n16/32/64 wgmmas): right, the same sums "
    "within a tile, fused promotions, atomic K splits, refusals") {
  const stream_switches restore;
  const bool ordered = cuda::get_ordered_gemm_splits();
  struct shape {
    std::int64_t out, in;
    int block;
    bool f32_scales;
  };
  // V4's 128 blocks with fp32 scales (4-step fused promotions) and with e8m0; V4.1's 32 blocks
  // (a promotion a step); outputs not a multiple of 64; K of one step; 41 steps (two splits:
  // whole batches, then a tail of single steps); long K across a cluster of splits; 128-input
  // activation blocks over 32-input weight blocks; blocks taking two row tiles in turn (313
  // tiles: the last block's second is past the end; 128 tiles x 4 splits).
  const shape shapes[] = {{320, 2048, 128, true}, {200, 1312, 32, false}, {16, 32, 32, false},
                          {96, 4096, 128, false}, {64, 8192, 32, false},  {130, 5120, 32, false},
                          {1000, 512, 128, true}, {20000, 256, 32, false}, {8192, 4096, 128, true}};
  for (const shape sh : shapes) {
    CAPTURE(sh.out);
    CAPTURE(sh.in);
    CAPTURE(sh.block);
    const weight_matrix host = random_fp8_scaled(sh.out, sh.in, sh.block, sh.f32_scales);
    const weight_matrix w = weight_to(host, gpu);
    const int act = sh.in % 128 == 0 ? 128 : 32;
    const tensor x64 = varied_input(64, sh.in);
    const tensor want = ops::linear(x64, host, {act});
    cuda::set_dense_wg_gemm_wide(0);  // skinny_gemm: the same products, other roundings
    const tensor skinny = ops::linear(x64.to(gpu), w, {act}).to(cpu_device);
    cuda::set_dense_wg_gemm_wide(1);
    for (const std::int64_t rows : {9, 16, 17, 32, 33, 64}) {
      CAPTURE(rows);
      const tensor x = x64.slice(0, 0, rows).clone();
      const long before = cuda::dense_wg_gemm_launches();
      test::poison_device_pool();
      const tensor y = ops::linear(x.to(gpu), w, {act}).to(cpu_device);
      CHECK(cuda::dense_wg_gemm_launches() - before == 1);
      check_close(y, want.slice(0, 0, rows).clone(), 2e-3);
      // wgmma's FP8 MMA adds a step's products (fused: four steps') at less than fp32
      // precision, skinny_gemm's emulated one in fp32.
      check_close(y, skinny.slice(0, 0, rows).clone(), 5e-4);
      // Run to run, and fewer rows of the same tile (32, 64): the same sums, but K splits
      // past two add into the output in whichever order they finish (fp32 atomics).
      check_close(ops::linear(x.to(gpu), w, {act}).to(cpu_device), y, 1e-6);
      if (rows == 17 || rows == 33) {
        const tensor tile = ops::linear(x64.slice(0, 0, rows == 17 ? 32 : 64).clone().to(gpu), w,
                                        {act}).to(cpu_device);
        check_close(tile.slice(0, 0, rows).clone(), y, 1e-6);
      }
    }
  }
  // Decode batches under the automatic backend: V4's 128 x 128 blocks go to cuBLASLt by default
  // (-1) and to the wide tiles first with 1; V4.1's 32 x 32 blocks, which cuBLASLt does not
  // take, to the wide tiles by default (instead of skinny_gemm).
  {
    const weight_matrix w = weight_to(random_fp8(256, 1024, 128), gpu);
    const weight_matrix w32 = weight_to(random_fp8(256, 1024, 32), gpu);
    cuda::set_gemm_backend(cuda::gemm_backend::automatic);
    const long before = cuda::dense_wg_gemm_launches();
    (void)ops::linear(varied_input(32, 1024).to(gpu), w, {128});
    CHECK(cuda::dense_wg_gemm_launches() == before + 1);
    cuda::set_dense_wg_gemm_wide(-1);
    (void)ops::linear(varied_input(32, 1024).to(gpu), w32, {32});
    CHECK(cuda::dense_wg_gemm_launches() == before + 2);
    if (cuda::cublaslt_block_fp8_available()) {
      (void)ops::linear(varied_input(32, 1024).to(gpu), w, {128});
      CHECK(cuda::dense_wg_gemm_launches() == before + 2);
    }
    cuda::set_dense_wg_gemm_wide(1);
    cuda::set_gemm_backend(cuda::gemm_backend::block_gemm);
  }
  // Refused: with ordered splits (the batch-invariant mode), past 64 rows, switched off.
  const weight_matrix w = weight_to(random_fp8(128, 512, 32), gpu);
  const long before = cuda::dense_wg_gemm_launches();
  cuda::set_ordered_gemm_splits(true);
  (void)ops::linear(varied_input(16, 512).to(gpu), w, {32});
  cuda::set_ordered_gemm_splits(ordered);
  (void)ops::linear(varied_input(65, 512).to(gpu), w, {32});
  cuda::set_dense_wg_gemm_wide(0);
  (void)ops::linear(varied_input(16, 512).to(gpu), w, {32});
  CHECK(cuda::dense_wg_gemm_launches() == before);
}

TEST_CASE(
    "cuda ring_gemm (dense FP8 of 9..64 rows, V4 blocks, TMA ring): right, whole tiles "
    "batch-invariant, stream-K, early weights, graphs, automatic backend, refusals") {
  const stream_switches restore;
  const bool ordered = cuda::get_ordered_gemm_splits();
  cuda::set_ordered_gemm_splits(false);
  struct shape {
    std::int64_t out, in;
    bool f32_scales;
  };
  // Stream-K: 3 tiles over 16 units (fp32 scales), 8 tiles with the last partial (1000 rows), K
  // of one unit, V4's wo_b (32 tiles, 64 units each), K of 256 units (the most activation
  // scales staged); whole tiles: V4's wq_b (256 tiles, two waves on 132 SMs) and 129 tiles with
  // the last partial (one wave).
  const shape shapes[] = {{320, 2048, true},   {1000, 512, false},  {130, 128, false},
                          {4096, 8192, false}, {256, 32768, false}, {32768, 1024, false},
                          {16448, 256, true}};
  for (const shape sh : shapes) {
    CAPTURE(sh.out);
    CAPTURE(sh.in);
    const weight_matrix host = random_fp8_scaled(sh.out, sh.in, 128, sh.f32_scales);
    const weight_matrix w = weight_to(host, gpu);
    const cuda::ring_gemm_plan plan = cuda::plan_ring_gemm(sh.out, sh.in, 132);
    const tensor x64 = varied_input(64, sh.in);
    const tensor want = ops::linear(x64, host, {128});
    cuda::set_ring_gemm(false);  // skinny_gemm: the same products, other roundings
    const tensor skinny = ops::linear(x64.to(gpu), w, {128}).to(cpu_device);
    cuda::set_ring_gemm(true);
    test::poison_device_pool();
    const tensor y64 = ops::linear(x64.to(gpu), w, {128}).to(cpu_device);
    for (const std::int64_t rows : {9, 16, 33, 64}) {
      CAPTURE(rows);
      const tensor x = x64.slice(0, 0, rows).clone();
      for (const bool early : {true, false}) {
        CAPTURE(early);
        cuda::set_ring_gemm_early(early);
        const long before = cuda::ring_gemm_launches();
        test::poison_device_pool();
        const tensor y = ops::linear(x.to(gpu), w, {128}).to(cpu_device);
        CHECK(cuda::ring_gemm_launches() - before == 1);
        check_close(y, want.slice(0, 0, rows).clone(), 2e-3);
        // wgmma sums a promotion's products at less than fp32 precision, skinny_gemm in fp32.
        check_close(y, skinny.slice(0, 0, rows).clone(), 5e-4);
        if (plan.stream_k)  // atomics: the same sums, added in any order
          check_close(y, y64.slice(0, 0, rows).clone(), 1e-6);
        else  // whole tiles: a token's bits do not depend on the batch
          test::check_bitwise(y, y64.slice(0, 0, rows).clone());
      }
    }
  }
  cuda::set_ring_gemm_early(true);
  // Captured in a CUDA graph and replayed (stream-K's memset and atomics): the eager sums.
  {
    const weight_matrix w = weight_to(random_fp8(640, 4096, 128), gpu);
    const tensor x = varied_input(24, 4096).to(gpu);
    const tensor eager = ops::linear(x, w, {128}).to(cpu_device);
    tensor y = tensor::empty({24, 640}, dtype::f32, gpu);
    cudaStream_t s = cuda::current_stream();
    cudaGraph_t graph;
    const long before = cuda::ring_gemm_launches();
    REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    y.copy_from(ops::linear(x, w, {128}));
    REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
    CHECK(cuda::ring_gemm_launches() == before + 1);
    cudaGraphExec_t exec;
    REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    for (int replay = 0; replay < 3; ++replay) {
      y.copy_from(tensor::full({24, 640}, std::nanf("")).to(gpu));
      REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
      check_close(y.to(cpu_device), eager, 1e-6);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  // The automatic backend: V4's blocks at 16..64 rows go to ring_gemm first when it is on
  // (cuBLASLt with it off), from codes a fused norm made too.
  const weight_matrix w = weight_to(random_fp8(256, 1024, 128), gpu);
  cuda::set_gemm_backend(cuda::gemm_backend::automatic);
  long before = cuda::ring_gemm_launches();
  (void)ops::linear(varied_input(32, 1024).to(gpu), w, {128});
  CHECK(cuda::ring_gemm_launches() == before + 1);
  {
    const tensor x = varied_input(32, 1024).to(gpu);
    const tensor norm_w = tensor::full({1024}, 1.f).to(gpu);
    const ops::quantized_rows q = ops::rms_norm_quantized(x, norm_w, 1e-6f, 128);
    const tensor from_codes = ops::linear(q, w, {128}).to(cpu_device);
    CHECK(cuda::ring_gemm_launches() == before + 2);
    check_close(from_codes, ops::linear(q.x, w, {128}).to(cpu_device), 1e-6);
  }
  cuda::set_ring_gemm(false);
  before = cuda::ring_gemm_launches();
  (void)ops::linear(varied_input(32, 1024).to(gpu), w, {128});
  CHECK(cuda::ring_gemm_launches() == before);
  cuda::set_ring_gemm(true);
  cuda::set_gemm_backend(cuda::gemm_backend::block_gemm);
  // Refused: ordered splits (the batch-invariant mode), 8 and 65 rows, V4.1's 32-input blocks,
  // K past 256 units.
  before = cuda::ring_gemm_launches();
  cuda::set_ordered_gemm_splits(true);
  (void)ops::linear(varied_input(16, 1024).to(gpu), w, {128});
  cuda::set_ordered_gemm_splits(false);
  (void)ops::linear(varied_input(8, 1024).to(gpu), w, {128});
  (void)ops::linear(varied_input(65, 1024).to(gpu), w, {128});
  (void)ops::linear(varied_input(16, 1024).to(gpu), weight_to(random_fp8(128, 1024, 32), gpu),
                    {32});
  (void)ops::linear(varied_input(16, 32896).to(gpu), weight_to(random_fp8(128, 32896, 128), gpu),
                    {128});
  CHECK(cuda::ring_gemm_launches() == before);
  cuda::set_ordered_gemm_splits(ordered);
}

struct expert_shape {
  std::int64_t out, in;
  int act;
};

/// For interleaved MXFP4 expert weights of each shape (8 experts) and routings with a compacted
/// grid (3 routed rows over 8 experts), up to 8 rows per expert, and more than 8 (several 8-token
/// passes over the same weights under a loose bound): body(shape, il, x, offsets, want, p,
/// first) for each decode-tile bound p (tight; loose with a 2-row tile hint), want the CPU's
/// result, first whether p is the routing's first.
template <typename Body>
void for_each_expert_decode_tile(std::initializer_list<expert_shape> shapes, Body&& body) {
  const std::vector<std::vector<int>> cases = {
      {0, 1, 0, 0, 2, 0, 0, 0}, {8, 0, 3, 5, 1, 0, 7, 2}, {17, 0, 1, 0, 0, 0, 0, 9}};
  for (const expert_shape sh : shapes) {
    CAPTURE(sh.out);
    CAPTURE(sh.in);
    const weight_matrix host = random_fp4(8 * sh.out, sh.in);
    const weight_matrix il = cuda::with_fp4_layout(weight_to(host, gpu), true);
    REQUIRE(il.interleaved);
    for (const auto& counts : cases) {
      const tensor off = offsets_of(counts);
      const std::int64_t rows = off.data<std::int32_t>()[counts.size()];
      int max_rows = 0;
      for (int c : counts) max_rows = std::max(max_rows, c);
      const tensor x = varied_input(rows, sh.in);
      const tensor want = ops::expert_linear(x, off, host, {sh.act, 0});
      bool first = true;
      for (const ops::expert_linear_params p :
           {ops::expert_linear_params{sh.act, max_rows},
            ops::expert_linear_params{sh.act, rows, 2}}) {
        if (p.max_rows_per_expert > 8 && p.tile_rows_hint == 0) continue;  // not a decode tile
        CAPTURE(p.max_rows_per_expert);
        body(sh, il, x.to(gpu), off.to(gpu), want, p, first);
        first = false;
      }
    }
  }
}

TEST_CASE("cuda pipe_gemm (MXFP4 expert decode tiles): stream_gemm's bits, right, refusals") {
  const stream_switches restore;
  cuda::set_wg_gemm(false);  // it would take these tiles first
  // One run (K 128) up to V4.1's w1 (K 5120, 2 stripes per block); 3 stripes (warps past the
  // last one); V4's 128-input activation blocks; K 8192 with 32-input blocks, whose 8-token
  // tile does not fit the shared memory: stream_gemm's, with the same result.
  for_each_expert_decode_tile(
      {{32, 128, 32}, {96, 2304, 32}, {160, 1024, 128}, {256, 5120, 32}, {64, 4096, 128},
       {64, 8192, 32}},
      [](const expert_shape& sh, const weight_matrix& il, const tensor& x, const tensor& off,
         const tensor& want, const ops::expert_linear_params& p, bool) {
        cuda::set_pipe_gemm(false);
        test::poison_device_pool();
        const tensor streamed = ops::expert_linear(x, off, il, p).to(cpu_device);
        cuda::set_pipe_gemm(true);
        const long before = cuda::pipe_gemm_launches();
        test::poison_device_pool();
        const tensor piped = ops::expert_linear(x, off, il, p).to(cpu_device);
        const bool fits = !(sh.in == 8192 && sh.act == 32);
        CHECK(cuda::pipe_gemm_launches() - before == (fits ? 1 : 0));
        test::check_bitwise(piped, streamed);
        check_close(piped, want, 2e-3);
      });
}

TEST_CASE("cuda wg_gemm (MXFP4 expert decode tiles on wgmma): right, deterministic, "
          "batch-invariant, refusals") {
  const stream_switches restore;
  // One run (K 128, one warpgroup's half empty); 3 stripes (a warpgroup's 4th stripe past the
  // outputs); K 1024 (one block along K, warpgroup halves of 16 steps); few row blocks with
  // K >= 2048, so two blocks along K (K 2304: splits of 40 and 32 steps, halves of 20 and 16;
  // K 2048 with 64-input activation blocks; 4096 and 5120); V4.1's w2-like 3200 x 2304 (25 row
  // blocks: one block along K, halves of 36 steps).
  tensor first_y;  // tight bound (one tile per block) and loose bound (tiles walked): same bits
  for_each_expert_decode_tile(
      {{32, 128, 32}, {96, 2304, 32}, {160, 1024, 128}, {256, 5120, 32}, {64, 4096, 128},
       {128, 2048, 64}, {3200, 2304, 32}},
      [&](const expert_shape&, const weight_matrix& il, const tensor& x, const tensor& off,
          const tensor& want, const ops::expert_linear_params& p, bool first) {
        cuda::set_wg_gemm(false);
        const tensor streamed = ops::expert_linear(x, off, il, p).to(cpu_device);
        cuda::set_wg_gemm(true);
        const long before = cuda::wg_gemm_launches();
        test::poison_device_pool();
        const tensor y = ops::expert_linear(x, off, il, p).to(cpu_device);
        CHECK(cuda::wg_gemm_launches() - before == 1);
        check_close(y, want, 2e-3);
        // stream_gemm's emulated mma.sync (f16 products on the f16 tensor cores) and wgmma's
        // native FP8 step sums differ in the last bits: the FP8 tensor cores keep fewer
        // accumulation bits (the DeepSeek-V3 report's ~14), which every step's promotion bounds.
        check_close(y, streamed, 1e-4);
        test::check_bitwise(ops::expert_linear(x, off, il, p).to(cpu_device), y);
        if (!first) test::check_bitwise(y, first_y);
        first_y = y;
        cuda::set_wg_gemm_ring(1);  // the weights through shared memory: the same bits
        test::poison_device_pool();
        test::check_bitwise(ops::expert_linear(x, off, il, p).to(cpu_device), y);
        cuda::set_wg_gemm_ring(-1);
      });
  // What it does not take goes to stream_gemm: weights as stored (not interleaved), or a K
  // split whose 8-token tile exceeds 48 KB of shared memory (K 32768: 2 x 512 steps).
  const weight_matrix small_host = random_fp4(8 * 32, 256), big_host = random_fp4(8 * 32, 32768);
  const weight_matrix plain = weight_to(small_host, gpu);
  const weight_matrix big = cuda::with_fp4_layout(weight_to(big_host, gpu), true);
  REQUIRE(big.interleaved);
  const tensor off = offsets_of({1, 0, 0, 0, 0, 0, 0, 0});
  for (const auto& [w, w_host] : {std::pair{&plain, &small_host}, std::pair{&big, &big_host}}) {
    const tensor x = varied_input(1, w_host->cols());
    const long before = cuda::wg_gemm_launches();
    const tensor y = ops::expert_linear(x.to(gpu), off.to(gpu), *w, {32, 1}).to(cpu_device);
    CHECK(cuda::wg_gemm_launches() == before);
    check_close(y, ops::expert_linear(x, off, *w_host, {32, 0}), 2e-3);
  }
}

TEST_CASE("cuda wg_gemm persistent blocks (decode steps on the ring): a block per item's bits") {
  // Batch-64-like steps (>= 128 routed rows: the ring) whose weights take one K split: V4.1's
  // w2 (K 2304, 25 row blocks), a V4.1-like pair (K 5120, 13 + 13 columns), V4's pair (K 4096,
  // 128-input activation blocks) and a short K (1024: warpgroup 1 has 4 runs, one past the ring's
  // reach). Groups of 0..19 rows (several tiles a group, partial last tiles), a step bounded by
  // its batch (tile hint 2) and by its largest group (hint 8); each block's share of items spans
  // groups, tiles and both weights of a pair.
  const stream_switches restore;
  REQUIRE(cuda::get_wg_gemm_chain());
  struct chain_case {
    std::int64_t out, in;
    int act_block;
    bool pair, cpu;
  };
  std::vector<int> counts;  // 40 experts, 196 rows
  for (int e = 0; e < 40; ++e) counts.push_back(e % 7 == 3 ? 0 : (e * 5) % 11 + (e == 17 ? 9 : 0));
  counts[5] = 19;
  const tensor off = offsets_of(counts);
  const std::int64_t rows = off.data<std::int32_t>()[counts.size()];
  REQUIRE(rows >= 128);
  for (const chain_case c :
       {chain_case{3200, 2304, 32, false, false}, chain_case{13 * 128, 5120, 32, true, false},
        chain_case{2048, 4096, 128, true, false}, chain_case{384, 1024, 128, false, true}}) {
    CAPTURE(c.out);
    CAPTURE(c.in);
    const std::int64_t experts = std::int64_t(counts.size());
    const weight_matrix h1 = random_fp4(experts * c.out, c.in);
    const weight_matrix h3 = c.pair ? random_fp4(experts * c.out, c.in) : weight_matrix();
    const weight_matrix w1 = cuda::with_fp4_layout(weight_to(h1, gpu), true);
    const weight_matrix w3 = c.pair ? cuda::with_fp4_layout(weight_to(h3, gpu), true) : w1;
    const tensor x = varied_input(rows, c.in);
    const tensor xg = x.to(gpu), offg = off.to(gpu);
    for (const ops::expert_linear_params p : {ops::expert_linear_params{c.act_block, 64, 2},
                                              ops::expert_linear_params{c.act_block, 19, 8}}) {
      CAPTURE(p.max_rows_per_expert);
      auto run = [&] {
        test::poison_device_pool();
        if (c.pair) {
          const auto [y1, y3] = ops::expert_linear_pair(xg, offg, w1, w3, p);
          return std::make_pair(y1.to(cpu_device), y3.to(cpu_device));
        }
        return std::make_pair(ops::expert_linear(xg, offg, w1, p).to(cpu_device), tensor());
      };
      const long before = cuda::wg_gemm_chain_launches();
      const auto [c1, c3] = run();
      CHECK(cuda::wg_gemm_chain_launches() - before == 1);
      cuda::set_wg_gemm_chain(false);
      const auto [b1, b3] = run();
      cuda::set_wg_gemm_chain(true);
      CHECK(cuda::wg_gemm_chain_launches() - before == 1);
      test::check_bitwise(c1, b1);
      if (c.pair) test::check_bitwise(c3, b3);
      const auto [r1, r3] = run();  // run to run
      test::check_bitwise(r1, c1);
      cuda::set_wg_gemm_chain_ring(6);  // the deepest ring that fits (5 for the w2s): the same bits
      const auto [d1, d3] = run();
      cuda::set_wg_gemm_chain_ring(4);
      test::check_bitwise(d1, c1);
      if (c.pair) test::check_bitwise(d3, c3);
      if (c.cpu) check_close(c1, ops::expert_linear(x, off, h1, {c.act_block, 0}), 2e-3);
    }
  }
}

TEST_CASE(
    "cuda wg_gemm on prefill-sized expert groups (wide tiles walked by several blocks): "
    "right, deterministic, each token's bits as in a decode tile") {
  const stream_switches restore;
  REQUIRE(cuda::get_wg_gemm_wide_tiles());  // on by default
  // The FP8 tiles (the bf16 kernel, the default for prefill-sized groups outside the
  // batch-invariant mode, sums in another order: its own case, and the ordered mode below).
  cuda::set_wg_gemm_bf16(false);
  // Groups of 0 .. 130 rows (tiles walked, a partial last tile), by the largest group (an eager
  // step: walkers from twice the mean group) and by a tile hint of 48 rows (6 walkers); V4.1's
  // w1-like (two blocks along K), V4's 128-input activation blocks, and w2-like 3200 outputs.
  const std::vector<int> counts = {40, 0, 9, 130, 1, 17, 0, 64};
  const tensor off = offsets_of(counts);
  const std::int64_t rows = off.data<std::int32_t>()[counts.size()];
  for (const expert_shape sh :
       {expert_shape{96, 2304, 32}, expert_shape{256, 4096, 128}, expert_shape{3200, 2304, 32}}) {
    CAPTURE(sh.out);
    CAPTURE(sh.in);
    const weight_matrix host = random_fp4(8 * sh.out, sh.in);
    const weight_matrix il = cuda::with_fp4_layout(weight_to(host, gpu), true);
    REQUIRE(il.interleaved);
    const tensor x = varied_input(rows, sh.in);
    const tensor want = ops::expert_linear(x, off, host, {sh.act, 0});
    const tensor xg = x.to(gpu), offg = off.to(gpu);
    tensor first;
    cuda::set_wg_gemm_n32(0);  // the 8-token walk first
    for (const ops::expert_linear_params p :
         {ops::expert_linear_params{sh.act, 130}, ops::expert_linear_params{sh.act, rows, 48}}) {
      CAPTURE(p.tile_rows_hint);
      const long before = cuda::wg_gemm_launches();
      test::poison_device_pool();
      const tensor y = ops::expert_linear(xg, offg, il, p).to(cpu_device);
      CHECK(cuda::wg_gemm_launches() - before == 1);
      check_close(y, want, 2e-3);
      test::check_bitwise(ops::expert_linear(xg, offg, il, p).to(cpu_device), y);
      if (first.defined()) test::check_bitwise(y, first);  // the walkers change no result
      first = y;
    }
    // 32-token tiles (m64n32k32, set_wg_gemm_n32, the default): the 8-token tiles' bits -- each
    // output is the same chain of k32 products and promotions, only more columns per wgmma.
    cuda::set_wg_gemm_n32(1);
    for (const ops::expert_linear_params p :
         {ops::expert_linear_params{sh.act, 130}, ops::expert_linear_params{sh.act, rows, 48}}) {
      CAPTURE(p.tile_rows_hint);
      test::poison_device_pool();
      const tensor y32 = ops::expert_linear(xg, offg, il, p).to(cpu_device);
      check_close(y32, want, 2e-3);
      test::check_bitwise(y32, first);
      test::check_bitwise(ops::expert_linear(xg, offg, il, p).to(cpu_device), y32);
    }
    // Off: sm90_block_gemm's shared-memory tiles (emulated mma.sync: the last bits differ).
    cuda::set_wg_gemm_wide_tiles(false);
    const long before = cuda::wg_gemm_launches();
    const tensor tiles = ops::expert_linear(xg, offg, il, {sh.act, 130}).to(cpu_device);
    CHECK(cuda::wg_gemm_launches() == before);
    cuda::set_wg_gemm_wide_tiles(true);
    check_close(tiles, first, 1e-4);
    // A token's expert outputs are what a decode step alone with it gives: rows of the
    // 130-row group (first, last, a middle one) and of the 9-row group, each as a 1-row group.
    for (const std::int64_t r : {49, 53, 114, 178, 40, 48}) {  // expert 2: rows 40..48, 3: 49..178
      CAPTURE(r);
      const std::size_t e = r < 49 ? 2 : 3;
      std::vector<int> one(counts.size(), 0);
      one[e] = 1;
      const tensor y1 = ops::expert_linear(xg.slice(0, r, r + 1).clone(), offsets_of(one).to(gpu),
                                           il, {sh.act, 1})
                            .to(cpu_device);
      test::check_bitwise(y1, first.slice(0, r, r + 1).clone());
    }
    // The batch-invariant mode (ordered splits) keeps prefill-sized groups on the FP8 tiles
    // with the bf16 kernel switched on: the same bits.
    cuda::set_wg_gemm_bf16(true);
    cuda::set_ordered_gemm_splits(true);
    const tensor ordered = ops::expert_linear(xg, offg, il, {sh.act, rows, 48}).to(cpu_device);
    cuda::set_ordered_gemm_splits(false);
    cuda::set_wg_gemm_bf16(false);
    test::check_bitwise(ordered, first);
  }
}

}  // namespace
}  // namespace di

namespace di {
namespace {

/// A plain byte of two e2m1 codes as weight_matrix::interleaved stores it, bit by bit: the low
/// nibble's sign at 7 and magnitude at 4..2, the high nibble's sign at 5, magnitude bit 2 at 6
/// and bits 1..0 at 1..0 (what the decode kernels' fp4il_low / fp4il_high read).
std::uint8_t interleaved_byte(std::uint8_t b) {
  const auto bit = [&](int from, int to) { return std::uint8_t(((b >> from) & 1) << to); };
  return std::uint8_t(bit(3, 7) | bit(2, 4) | bit(1, 3) | bit(0, 2) | bit(7, 5) | bit(6, 6) |
                      bit(5, 1) | bit(4, 0));
}

/// The interleaved layout of packed FP4 rows computed on the host (weight_matrix::interleaved),
/// from the lanes' side: lane 4g + t of piece (m, h) of a run holds quarter t of the run's four
/// scale blocks u of stripe row 16m + 8h + g, each byte's bits as interleaved_byte moves them.
tensor interleaved_on_host(const tensor& packed) {
  tensor out = packed.clone();
  const auto* src = static_cast<const std::uint8_t*>(packed.raw());
  auto* dst = static_cast<std::uint8_t*>(out.raw());
  const std::int64_t row_bytes = packed.size(1);
  for (std::int64_t stripe = 0; stripe < packed.size(0) / 32; ++stripe)
    for (std::int64_t run = 0; run < row_bytes / 64; ++run)
      for (int m = 0; m < 2; ++m)
        for (int h = 0; h < 2; ++h)
          for (int g = 0; g < 8; ++g)
            for (int t = 0; t < 4; ++t)
              for (int u = 0; u < 4; ++u)
                for (int b = 0; b < 4; ++b) {
                  const std::int64_t row = stripe * 32 + 16 * m + 8 * h + g;
                  const std::int64_t from = row * row_bytes + run * 64 + 16 * u + 4 * t + b;
                  const std::int64_t to = stripe * 32 * row_bytes + run * 2048 +
                                          ((2 * m + h) * 32 + 4 * g + t) * 16 + 4 * u + b;
                  dst[to] = interleaved_byte(src[from]);
                }
  return out;
}

TEST_CASE("cuda MXFP4 interleaved rows: the layout, its round trip, and the same bits") {
  const stream_switches restore;
  const weight_matrix host = random_fp4(5 * 96, 512);
  const weight_matrix plain = weight_to(host, gpu);
  const weight_matrix il = cuda::with_fp4_layout(plain, true);
  REQUIRE(il.interleaved);
  test::check_bitwise(il.values.to(cpu_device), interleaved_on_host(host.values));
  test::check_bitwise(il.scales.to(cpu_device), host.scales);  // scales untouched
  const weight_matrix back = cuda::with_fp4_layout(il, false);
  CHECK_FALSE(back.interleaved);
  test::check_bitwise(back.values.to(cpu_device), host.values);
  CHECK(cuda::with_fp4_layout(il, true).values.raw() == il.values.raw());  // already so
  test::check_bitwise(cuda::dequantize_weight(il, dtype::f32).values.to(cpu_device),
                      cuda::dequantize_weight(plain, dtype::f32).values.to(cpu_device));
  // Rows that are not whole 64-byte runs (96 inputs) or whole 32-row stripes (48 rows), FP8
  // and f32 weights stay as they are.
  const weight_matrix odd = weight_to(random_fp4(64, 96), gpu);
  CHECK_FALSE(cuda::with_fp4_layout(odd, true).interleaved);
  CHECK_FALSE(cuda::with_fp4_layout(weight_to(random_fp4(48, 256), gpu), true).interleaved);
  const weight_matrix w8 = weight_to(random_fp8(64, 256, 128), gpu);
  CHECK_FALSE(cuda::with_fp4_layout(w8, true).interleaved);
  // An interleaved weight does not leave the GPU as if it were plain; experts whose rows cut
  // through its 32-row stripes (4 experts of 48) are refused, not misread.
  CHECK_THROWS_AS(weight_to(il, cpu_device), error);
  {
    const weight_matrix cut = cuda::with_fp4_layout(weight_to(random_fp4(4 * 48, 256), gpu), true);
    REQUIRE(cut.interleaved);
    CHECK_THROWS_WITH_AS(ops::expert_linear(varied_input(3, 256).to(gpu),
                                            offsets_of({1, 0, 2, 0}).to(gpu), cut, {32, 0}),
                         doctest::Contains("outputs of 32"), error);
  }

  // Experts: decode tiles (stream_gemm, tight bound and walked), the shared-memory tiles for
  // larger groups and with stream_gemm off: bit for bit what the stored rows give. (wg_gemm,
  // which takes interleaved decode tiles first, adds its FP8 step sums differently: its own
  // test case compares it with stream_gemm.)
  cuda::set_wg_gemm(false);
  const std::vector<std::vector<int>> cases = {
      {1, 0, 3, 2, 0}, {0, 0, 0, 0, 1}, {70, 1, 0, 9, 64}, {8, 8, 8, 8, 8}};
  for (const auto& counts : cases) {
    const tensor offsets = offsets_of(counts).to(gpu);
    const std::int64_t rows = offsets_of(counts).data<std::int32_t>()[counts.size()];
    int max_rows = 0;
    for (int c : counts) max_rows = std::max(max_rows, c);
    const tensor x = varied_input(rows + 2, 512).to(gpu);
    for (bool streamed : {true, false}) {
      cuda::set_stream_gemm(streamed);
      for (const ops::expert_linear_params p :
           {ops::expert_linear_params{128, 0}, ops::expert_linear_params{128, max_rows},
            ops::expert_linear_params{128, rows + 2, 2}, ops::expert_linear_params{32, 0}}) {
        CAPTURE(streamed);
        CAPTURE(p.max_rows_per_expert);
        test::poison_device_pool();
        test::check_bitwise(ops::expert_linear(x, offsets, il, p).to(cpu_device),
                            ops::expert_linear(x, offsets, plain, p).to(cpu_device));
      }
    }
  }
  cuda::set_stream_gemm(true);
  // Dense linear (stream_gemm's K split across two blocks at long K; sm90_block_gemm tiles
  // from 9 rows) and the exact dequantize path (no activation quantization).
  const weight_matrix long_host = random_fp4(64, 8192);
  const weight_matrix long_plain = weight_to(long_host, gpu);
  const weight_matrix long_il = cuda::with_fp4_layout(long_plain, true);
  REQUIRE(long_il.interleaved);
  cuda::set_ordered_gemm_splits(true);
  for (std::int64_t rows : {1, 5, 8, 40}) {
    CAPTURE(rows);
    const tensor x = varied_input(rows, 8192).to(gpu);
    test::check_bitwise(ops::linear(x, long_il, {32}).to(cpu_device),
                        ops::linear(x, long_plain, {32}).to(cpu_device));
    check_close(ops::linear(x, long_il, {32}), ops::linear(x.to(cpu_device), long_host, {32}),
                2e-3);
    test::check_bitwise(ops::linear(x, long_il, {0}).to(cpu_device),
                        ops::linear(x, long_plain, {0}).to(cpu_device));
  }
  cuda::set_ordered_gemm_splits(false);
  cuda::set_wg_gemm(true);
}

}  // namespace
}  // namespace di
