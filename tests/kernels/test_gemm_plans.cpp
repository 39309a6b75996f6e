// Host-side launch plans of the CUDA decode GEMM (stream_gemm), checked without a GPU: the
// decisions that fix the order of a row's fp32 sums -- warps along K, K splits, split length,
// warp alignment, load batching -- must depend on the weight's shape only, never on how many
// rows the batch has (up to the 8 rows per group stream_gemm serves), or a token's logits would
// change with the batch. (The GPU test "cuda stream_gemm" checks the same property bitwise.)
#include <doctest/doctest.h>

#if defined(DEEPINFER_HAVE_CUDA)
#include "common/error.hpp"
#include "kernels/cuda/cublas_gemm.hpp"
#include "kernels/cuda/cuda_model_ops.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/gemm_kernels.hpp"
#include "kernels/cuda/kernel_attributes.hpp"

#include <cstdlib>
#include <utility>
#include <vector>

namespace di {
namespace {

struct shape {
  std::int64_t n, k;
  int block_cols;  // FP8 scale block; 0 = MXFP4
  int groups;      // > 1: grouped (MoE experts, offsets on the device)
  int act_block;
};

/// Params as gemm.cpp fills them for `rows` rows (pointers unused by the planner).
cuda::block_gemm_params params_for(const shape& s, std::int64_t rows) {
  cuda::block_gemm_params p{};
  p.fp4 = s.block_cols == 0;
  p.block_cols = p.fp4 ? 32 : s.block_cols;
  p.block_rows = p.fp4 ? 1 : s.block_cols;
  p.wscale_cols = s.k / p.block_cols;
  p.act_block = s.act_block;
  p.act_scale_stride = s.k / s.act_block;  // quantize_act's scales: one per block of a row
  p.n = s.n;
  p.k = s.k;
  p.groups = s.groups;
  p.y_stride = s.n;
  static const std::int32_t dummy_offsets[1] = {0};
  if (s.groups > 1) {
    p.offsets = dummy_offsets;  // grouped: rows = routed pairs (6 per token), bounded per group
    p.rows = rows * 6;
    p.max_rows = rows;
  } else {
    p.rows = rows;
    p.max_rows = rows;
  }
  return p;
}

/// V4.1's and V4's dense FP8 decode GEMMs (and ragged outputs).
const std::vector<shape> dense_fp8_shapes = {
    {32768, 1280, 32, 1, 32},    // V4.1 wq_b
    {5120, 8192, 32, 1, 32},     // V4.1 wo_b
    {1280, 5120, 32, 1, 32},     // V4.1 wq_a
    {512, 5120, 32, 1, 32},      // V4.1 wkv
    {2304, 5120, 32, 1, 32},     // V4.1 shared expert w1
    {32768, 1024, 128, 1, 128},  // V4 wq_b
    {4096, 8192, 128, 1, 128},   // V4 wo_b
    {200, 1280, 32, 1, 128},     // ragged outputs
};
/// V4.1's and V4's routed MXFP4 expert GEMMs.
const std::vector<shape> expert_shapes = {
    {2304, 5120, 0, 384, 32},   // V4.1 experts w1 / w3
    {5120, 2304, 0, 384, 32},   // V4.1 experts w2
    {2048, 4096, 0, 256, 128},  // V4 experts w1 / w3
    {4096, 2048, 0, 256, 128},  // V4 experts w2
};

/// Params of interleaved MXFP4 experts with e8m0 scales (planning reads no pointer, only
/// whether the scales are set).
cuda::block_gemm_params experts(const shape& s, std::int64_t rows) {
  static const std::uint8_t scales[16] = {};
  cuda::block_gemm_params p = params_for(s, rows);
  p.fp4_interleaved = true;
  p.wscale_e8m0 = scales;
  return p;
}

TEST_CASE("kernel switches take their defaults from the environment") {
  const char* name = "DEEPINFER_TEST_KERNEL_SWITCH";
  ::unsetenv(name);
  CHECK(cuda::detail::env_switch(name, true));
  CHECK_FALSE(cuda::detail::env_switch(name, false));
  ::setenv(name, "0", 1);  // turns a default-on switch off, leaves a default-off one off
  CHECK_FALSE(cuda::detail::env_switch(name, true));
  CHECK_FALSE(cuda::detail::env_switch(name, false));
  ::setenv(name, "1", 1);  // turns a default-off switch on
  CHECK(cuda::detail::env_switch(name, true));
  CHECK(cuda::detail::env_switch(name, false));
  // Three-way modes: -1 (automatic) unless set to -1, 0 or 1; anything else is ignored.
  CHECK(cuda::detail::env_mode(name, "auto") == 1);
  ::setenv(name, "0", 1);
  CHECK(cuda::detail::env_mode(name, "auto") == 0);
  ::setenv(name, "2", 1);
  CHECK(cuda::detail::env_mode(name, "auto") == -1);
  ::unsetenv(name);
  CHECK(cuda::detail::env_mode(name, "auto") == -1);
  ::setenv(name, "yes", 1);  // anything else: the default
  CHECK(cuda::detail::env_switch(name, true));
  CHECK_FALSE(cuda::detail::env_switch(name, false));
  ::unsetenv(name);
}

TEST_CASE("hc_collapse_norm's cluster variant: on by default, chosen by the width alone") {
  const bool before = cuda::hc_collapse_norm_cluster();
  if (!std::getenv("DEEPINFER_HC_NORM_CLUSTER")) CHECK(before);
  cuda::set_hc_collapse_norm_cluster(true);
  CHECK(cuda::hc_collapse_norm_uses_cluster(4096));         // V4: 8 slices of 512
  CHECK(cuda::hc_collapse_norm_uses_cluster(5120));         // V4.1: 8 x 640
  CHECK(cuda::hc_collapse_norm_uses_cluster(7168));         // 8 x 896: whole 128-column blocks
  CHECK(cuda::hc_collapse_norm_uses_cluster(8192));         // 8 x 1024: the registers' limit
  CHECK_FALSE(cuda::hc_collapse_norm_uses_cluster(4000));   // slices not whole blocks
  CHECK_FALSE(cuda::hc_collapse_norm_uses_cluster(3584));   // 8 x 448: not whole blocks either
  CHECK_FALSE(cuda::hc_collapse_norm_uses_cluster(16384));  // slices past the registers
  cuda::set_hc_collapse_norm_cluster(false);
  CHECK_FALSE(cuda::hc_collapse_norm_uses_cluster(4096));
  cuda::set_hc_collapse_norm_cluster(before);  // as the environment left it
}

TEST_CASE("fp8_split_wg's B image: one chunk's B per (group, chunk of K), by token tile") {
  // 16-token tiles (9..16 rows) and 32-token tiles take 128-input chunks, 64-token tiles
  // 64-input chunks; a chunk's B holds both bf16 parts of every token: chunk x tokens x 4 bytes.
  // K not a multiple of the chunk rounds up (the image's tail is zeros).
  CHECK(cuda::fp8_split_wg_image_bytes(9, 8, 4096) == 8u * 32 * 128 * 16 * 4);
  CHECK(cuda::fp8_split_wg_image_bytes(16, 8, 4096) == 8u * 32 * 128 * 16 * 4);
  CHECK(cuda::fp8_split_wg_image_bytes(17, 8, 4096) == 8u * 32 * 128 * 32 * 4);
  CHECK(cuda::fp8_split_wg_image_bytes(33, 8, 4096) == 8u * 64 * 64 * 64 * 4);
  CHECK(cuda::fp8_split_wg_image_bytes(64, 8, 4096) == 8u * 64 * 64 * 64 * 4);
  CHECK(cuda::fp8_split_wg_image_bytes(64, 3, 528) == 3u * 9 * 64 * 64 * 4);
  CHECK(cuda::fp8_split_wg_image_bytes(20, 1, 1040) == 1u * 9 * 128 * 32 * 4);
  // The staged path and the 4-column hc_expand are on by default (switches restored after).
  const bool staged = cuda::get_split_wg_staged(), vec = cuda::hc_expand_vec();
  if (!std::getenv("DEEPINFER_SPLIT_WG_STAGED")) CHECK(staged);
  if (!std::getenv("DEEPINFER_HC_EXPAND_VEC")) CHECK(vec);
  cuda::set_split_wg_staged(!staged);
  cuda::set_hc_expand_vec(!vec);
  CHECK(cuda::get_split_wg_staged() == !staged);
  CHECK(cuda::hc_expand_vec() == !vec);
  cuda::set_split_wg_staged(staged);
  cuda::set_hc_expand_vec(vec);
}

TEST_CASE("stream_gemm plans depend on the weight's shape, not on the batch") {
  std::vector<shape> shapes = dense_fp8_shapes;
  shapes.insert(shapes.end(), expert_shapes.begin(), expert_shapes.end());
  for (const shape& s : shapes) {
    CAPTURE(s.n);
    CAPTURE(s.k);
    const cuda::stream_gemm_plan one = cuda::plan_stream_gemm(params_for(s, 1));
    CHECK(one.warps_along_k >= 1);
    CHECK(one.warps_along_k <= 8);
    CHECK(one.steps_per_split * one.k_splits >= s.k / 32);  // the splits cover K
    CHECK(one.steps_per_split % 8 == 0);
    if (s.groups > 1) CHECK(one.k_splits == 1);  // experts: no atomics at all
    for (std::int64_t rows = 2; rows <= 8; ++rows) {
      CAPTURE(rows);
      const cuda::stream_gemm_plan p = cuda::plan_stream_gemm(params_for(s, rows));
      CHECK(p.warps_along_k == one.warps_along_k);
      CHECK(p.k_splits == one.k_splits);
      CHECK(p.steps_per_split == one.steps_per_split);
      CHECK(p.warp_align == one.warp_align);
      CHECK(p.batch_steps == one.batch_steps);
      CHECK(p.row_blocks == one.row_blocks);
      CHECK(p.token_tiles == 1);
    }
    // Groups bounded by more rows than one tile (a captured step bounded by its batch): the
    // blocks walk their token tiles, so the grid and the sums stay those of one tile.
    if (s.groups > 1) {
      const cuda::stream_gemm_plan walked = cuda::plan_stream_gemm(params_for(s, 64));
      CHECK(walked.token_tiles == 1);
      CHECK(walked.warps_along_k == one.warps_along_k);
      CHECK(walked.steps_per_split == one.steps_per_split);
      CHECK(walked.row_blocks == one.row_blocks);
    }
    // Decode tiles go to stream_gemm, whose splits need no workspace: plan_block_gemm says
    // one split for them (ordered-splits mode allocates nothing).
    CHECK(cuda::plan_block_gemm(params_for(s, 1)).splits == 1);
  }
}

TEST_CASE("linear_pair's dense weights share one stream_gemm launch where both plans agree") {
  // The attention's wq_a and wkv, the shared expert's w1 and w3 (V4.1 with e8m0 32-blocks, V4
  // with fp32 128-blocks): each alone would take stream_gemm with the same plan, and the first
  // weight's rows fill whole row blocks -- so each output gets the bits of its own launch.
  static const std::uint8_t scales[16] = {};
  static const float scales32[16] = {};
  static float y_b[1] = {};
  auto pair = [&](std::int64_t n_a, std::int64_t n_b, std::int64_t k, int block,
                  std::int64_t rows) {
    cuda::block_gemm_params p = params_for({n_a, k, block, 1, block}, rows);
    if (block == 32)
      p.wscale_e8m0 = p.wscale_e8m0_b = scales;
    else
      p.wscale_f32 = p.wscale_f32_b = scales32;
    p.weight_b = scales;  // (planning reads no pointer, only whether they are set)
    p.n_b = n_b;
    p.y_b = y_b;
    p.y_stride_b = n_b;
    return p;
  };
  const bool before = cuda::get_stream_gemm_pair();
  if (!std::getenv("DEEPINFER_STREAM_PAIR")) CHECK(before);
  cuda::set_stream_gemm_pair(true);
  for (std::int64_t rows = 1; rows <= 8; ++rows) {
    CAPTURE(rows);
    CHECK(cuda::stream_gemm_takes_pair(pair(1280, 512, 5120, 32, rows)));    // V4.1 wq_a, wkv
    CHECK(cuda::stream_gemm_takes_pair(pair(2304, 2304, 5120, 32, rows)));   // V4.1 shared w1, w3
    CHECK(cuda::stream_gemm_takes_pair(pair(1024, 512, 4096, 128, rows)));   // V4 wq_a, wkv
    CHECK(cuda::stream_gemm_takes_pair(pair(2048, 2048, 4096, 128, rows)));  // V4 shared w1, w3
  }
  // The pair's plan is each weight's own: the same as the first weight's alone.
  const cuda::stream_gemm_plan a = cuda::plan_stream_gemm(params_for({2304, 5120, 32, 1, 32}, 1));
  const cuda::stream_gemm_plan b =
      cuda::plan_stream_gemm(params_for({2304 * 2, 5120, 32, 1, 32}, 1));
  CHECK(a.k_splits == 2);
  CHECK(b.k_splits == 1);  // (planned as one stacked weight it would split K differently)
  // Refused: more than 8 rows (the wide tiles' or skinny_gemm's), a first weight that ends
  // inside a row block, scales in different formats, MXFP4, the switch off.
  CHECK_FALSE(cuda::stream_gemm_takes_pair(pair(1280, 512, 5120, 32, 9)));
  CHECK_FALSE(cuda::stream_gemm_takes_pair(pair(200, 512, 1280, 32, 1)));
  cuda::block_gemm_params mixed = pair(1280, 512, 5120, 32, 1);
  mixed.wscale_e8m0_b = nullptr;
  mixed.wscale_f32_b = scales32;
  CHECK_FALSE(cuda::stream_gemm_takes_pair(mixed));
  cuda::block_gemm_params fp4 = pair(2304, 2304, 5120, 32, 1);
  fp4.fp4 = true;
  CHECK_FALSE(cuda::stream_gemm_takes_pair(fp4));
  cuda::set_stream_gemm_pair(false);
  CHECK_FALSE(cuda::stream_gemm_takes_pair(pair(1280, 512, 5120, 32, 1)));
  cuda::set_stream_gemm_pair(before);
}

TEST_CASE("cuBLASLt's automatic K splits: V4's small decode projections, from the shape only") {
  for (std::int64_t rows = 1; rows <= 64; ++rows) {
    CAPTURE(rows);
    CHECK(cuda::cublaslt_auto_splits(1024, rows, 4096, 1) == 8);   // wq_a: 8 tiles of 128
    CHECK(cuda::cublaslt_auto_splits(512, rows, 4096, 1) == 8);    // wkv: 4 K blocks a split
    CHECK(cuda::cublaslt_auto_splits(2048, rows, 4096, 1) == 4);   // shared w1
    CHECK(cuda::cublaslt_auto_splits(4096, rows, 2048, 1) == 0);   // shared w2: 32 tiles, kept
    CHECK(cuda::cublaslt_auto_splits(4096, rows, 8192, 3) == 0);   // wo_b: the heuristic splits
    CHECK(cuda::cublaslt_auto_splits(32768, rows, 1024, 1) == 0);  // wq_b
  }
  CHECK(cuda::cublaslt_auto_splits(1024, 65, 4096, 1) == 0);  // prefill sizes: the heuristic's
  CHECK(cuda::cublaslt_auto_splits(1024, 16, 512, 1) == 0);   // K of 4 blocks: nothing to split
  CHECK(cuda::cublaslt_auto_splits(1024, 16, 1024, 1) == 2);
  const int before = cuda::get_cublaslt_splitk();
  if (!std::getenv("DEEPINFER_LT_SPLITK")) CHECK(before == 0);
  CHECK_THROWS_AS(cuda::set_cublaslt_splitk(65), error);
  CHECK_THROWS_AS(cuda::set_cublaslt_splitk(-2), error);
  cuda::set_cublaslt_splitk(-1);
  CHECK(cuda::get_cublaslt_splitk() == -1);
  cuda::set_cublaslt_splitk(before);
  // The heuristic's candidates a benchmark may pick: 0..15.
  CHECK_THROWS_AS(cuda::set_cublaslt_candidate(-1), error);
  CHECK_THROWS_AS(cuda::set_cublaslt_candidate(16), error);
  cuda::set_cublaslt_candidate(15);
  cuda::set_cublaslt_candidate(0);
}

TEST_CASE("stream_gemm FP8 load batching follows the shape; forcing a variant changes only that") {
  const shape short_k{32768, 1280, 32, 1, 32}, long_k{5120, 8192, 32, 1, 32};
  const shape wide{25600, 6144, 32, 1, 32};  // V4.1's Engram wkv: long K, many row blocks
  CHECK(cuda::plan_stream_gemm(params_for(short_k, 1)).batch_steps == 4);
  CHECK(cuda::plan_stream_gemm(params_for(long_k, 1)).batch_steps == 2);
  CHECK(cuda::plan_stream_gemm(params_for(wide, 1)).batch_steps == 4);
  CHECK(cuda::plan_stream_gemm(params_for(wide, 1)).blocks_per_sm == 2);
  const cuda::stream_gemm_plan by_k = cuda::plan_stream_gemm(params_for(long_k, 1));
  cuda::set_stream_gemm_variant(0);
  const cuda::stream_gemm_plan forced = cuda::plan_stream_gemm(params_for(long_k, 1));
  cuda::set_stream_gemm_variant(-1);
  CHECK(forced.batch_steps == 4);
  CHECK(forced.blocks_per_sm == 2);
  CHECK(forced.warps_along_k == by_k.warps_along_k);  // the same sums in the same order
  CHECK(forced.steps_per_split == by_k.steps_per_split);
  CHECK(forced.warp_align == by_k.warp_align);
}

TEST_CASE("stream_gemm reads FP8 in 16-byte loads where K holds whole pairs of steps") {
  const bool before = cuda::get_stream_gemm_wide();
  cuda::set_stream_gemm_wide(true);
  const shape wo_b{5120, 8192, 32, 1, 32}, v4{4096, 8192, 128, 1, 128}, odd{24, 96, 32, 1, 32};
  const shape fp4{2304, 5120, 0, 8, 32};
  CHECK(cuda::plan_stream_gemm(params_for(wo_b, 1)).wide_loads);
  CHECK(cuda::plan_stream_gemm(params_for(v4, 8))
            .wide_loads);  // (V4's 128-input blocks: the pair's steps mixed within their promotion
                           // block; V4.1's 32:
  // swapped between lanes -- both are 16-byte loads, which the GPU test compares.)
  CHECK_FALSE(cuda::plan_stream_gemm(params_for(odd, 1)).wide_loads);  // 3 steps: no pairs
  CHECK_FALSE(cuda::plan_stream_gemm(params_for(fp4, 1)).wide_loads);  // MXFP4: its own loads
  // Activation scales whose rows start at odd words (a pair's two could not load as one word).
  cuda::block_gemm_params odd_rows = params_for(wo_b, 1);
  odd_rows.act_scale_stride += 1;
  CHECK_FALSE(cuda::plan_stream_gemm(odd_rows).wide_loads);
  // Switched off: 8-byte loads, and nothing else about the launch changes.
  const cuda::stream_gemm_plan on = cuda::plan_stream_gemm(params_for(wo_b, 1));
  cuda::set_stream_gemm_wide(false);
  const cuda::stream_gemm_plan off = cuda::plan_stream_gemm(params_for(wo_b, 1));
  CHECK_FALSE(off.wide_loads);
  CHECK(off.warps_along_k == on.warps_along_k);
  CHECK(off.steps_per_split == on.steps_per_split);
  CHECK(off.batch_steps == on.batch_steps);
  CHECK(off.row_blocks == on.row_blocks);
  // Mixed pairs (V4's blocks) batch 4 steps even with long K; 8-byte loads 2 there.
  const shape v4_long{4096, 8192, 128, 1, 128};
  CHECK(cuda::plan_stream_gemm(params_for(v4_long, 1)).batch_steps == 2);  // switched off
  cuda::set_stream_gemm_wide(true);
  CHECK(cuda::plan_stream_gemm(params_for(v4_long, 1)).batch_steps == 4);
  CHECK(cuda::plan_stream_gemm(params_for(wo_b, 1)).batch_steps == 2);  // swapped pairs: 2 x 3
  cuda::set_stream_gemm_wide(before);
}

TEST_CASE("env_count: a whole number in range, else the default with a warning") {
  const char* name = "DEEPINFER_TEST_ENV_COUNT";
  ::unsetenv(name);
  CHECK(cuda::detail::env_count(name, 256, 1000) == 256);
  ::setenv(name, "16", 1);
  CHECK(cuda::detail::env_count(name, 256, 1000) == 16);
  for (const char* bad : {"", "0", "-3", "16x", "abc", "1001", "99999999999999999999999"}) {
    CAPTURE(bad);
    ::setenv(name, bad, 1);
    CHECK(cuda::detail::env_count(name, 256, 1000) == 256);
  }
  // Numbered modes from 0 (DEEPINFER_WG_PAIR, DEEPINFER_WG_N32): 0 taken, past max ignored.
  ::setenv(name, "0", 1);
  CHECK(cuda::detail::env_count(name, 2, 2, 0) == 0);
  for (const char* bad : {"3", "-1", "2x", ""}) {
    CAPTURE(bad);
    ::setenv(name, bad, 1);
    CHECK(cuda::detail::env_count(name, 2, 2, 0) == 2);
  }
  ::unsetenv(name);
}

TEST_CASE("row thresholds (cuBLASLt's FP8 GEMM, the bf16 temporary): settable, at least 1") {
  struct threshold {
    const char* env;
    std::int64_t by_default;
    void (*set)(std::int64_t);
    std::int64_t (*get)();
  };
  for (const threshold& t : {threshold{"DEEPINFER_LT_ROWS", 16, cuda::set_cublaslt_min_rows,
                                       cuda::get_cublaslt_min_rows},
                             threshold{"DEEPINFER_BF16_ROWS", 256, cuda::set_bf16_temp_min_rows,
                                       cuda::get_bf16_temp_min_rows}}) {
    CAPTURE(t.env);
    const std::int64_t before = t.get();
    if (!std::getenv(t.env)) CHECK(before == t.by_default);
    t.set(512);
    CHECK(t.get() == 512);
    CHECK_THROWS_WITH_AS(t.set(0), doctest::Contains("at least 1"), error);
    CHECK_THROWS_AS(t.set(-5), error);
    CHECK(t.get() == 512);  // a refused value changes nothing
    t.set(before);
  }
}

TEST_CASE("stream_gemm and fp8_gemv refuse what they do not take, with a clear error") {
  // Variants: -1, 0 and 1 only; a refused value leaves the switch as it was.
  CHECK_THROWS_WITH_AS(cuda::set_stream_gemm_variant(2),
                       doctest::Contains("expected -1 (by shape), 0"), error);
  CHECK_THROWS_AS(cuda::set_stream_gemm_variant(-2), error);
  const shape long_k{5120, 8192, 32, 1, 32};
  CHECK(cuda::plan_stream_gemm(params_for(long_k, 1)).batch_steps == 2);  // still by shape
  // fp8_gemv takes 1-8 rows, inputs in whole 16-code groups, power-of-two scale blocks >= 16;
  // grouped_linear sends anything else to the dequantize + SGEMM path.
  CHECK(cuda::fp8_gemv_fits(1, 4096, 32));
  CHECK(cuda::fp8_gemv_fits(8, 528, 128));
  CHECK_FALSE(cuda::fp8_gemv_fits(0, 4096, 32));
  CHECK_FALSE(cuda::fp8_gemv_fits(9, 4096, 32));
  CHECK_FALSE(cuda::fp8_gemv_fits(1, 4104, 32));
  CHECK_FALSE(cuda::fp8_gemv_fits(1, 4096, 8));
  CHECK_FALSE(cuda::fp8_gemv_fits(1, 4096, 48));
  // A direct launch with a shape it does not take is refused before anything reaches the GPU.
  cuda::fp8_gemv_params p{};
  p.rows = 9;
  p.in = 4096;
  p.block_cols = 32;
  CHECK_THROWS_WITH_AS(cuda::launch_fp8_gemv(p, nullptr), doctest::Contains("fp8_gemv: 9 rows"),
                       error);
}

/// grouped_linear decode parameters of `rows` rows, one group of 4096 inputs, 32-input e8m0
/// scale blocks (no data: for the launchers' refusals, which come before any launch).
cuda::fp8_gemv_params e8m0_rows(std::int64_t rows) {
  static const std::uint8_t scale = 127;
  cuda::fp8_gemv_params p{};
  p.rows = rows;
  p.in = 4096;
  p.groups = 1;
  p.block_cols = 32;
  p.scale_e8m0 = &scale;
  return p;
}

TEST_CASE("fp8_split_gemm takes 1..64 rows with e8m0 scales and refuses the rest") {
  // grouped_linear's decode kernel on the bf16 tensor cores: the e8m0 scale is folded exactly
  // into the bf16 weight, so f32 scales go to fp8_gemv.
  CHECK(cuda::fp8_split_gemm_fits(1, 4096, 32, true));
  CHECK(cuda::fp8_split_gemm_fits(64, 528, 128, true));
  CHECK_FALSE(cuda::fp8_split_gemm_fits(65, 4096, 32, true));
  CHECK_FALSE(cuda::fp8_split_gemm_fits(0, 4096, 32, true));
  CHECK_FALSE(cuda::fp8_split_gemm_fits(8, 4096, 32, false));
  CHECK_FALSE(cuda::fp8_split_gemm_fits(8, 4104, 32, true));
  CHECK_FALSE(cuda::fp8_split_gemm_fits(8, 4096, 48, true));
  const cuda::fp8_gemv_params p = e8m0_rows(65);
  CHECK_THROWS_WITH_AS(cuda::launch_fp8_split_gemm(p, nullptr),
                       doctest::Contains("fp8_split_gemm: 65 rows"), error);
}

TEST_CASE("fp8_split_wg (warpgroup MMA) takes 9..64 rows and refuses the rest before launching") {
  CHECK_FALSE(cuda::fp8_split_wg_fits(8, 4096, 32, true));  // 1..8: fp8_split_gemm's mma.sync
  CHECK(cuda::fp8_split_wg_fits(9, 4096, 32, true));
  CHECK(cuda::fp8_split_wg_fits(64, 1040, 128, true));
  CHECK_FALSE(cuda::fp8_split_wg_fits(65, 4096, 32, true));
  CHECK_FALSE(cuda::fp8_split_wg_fits(33, 4096, 32, false));  // f32 scales
  CHECK_FALSE(cuda::fp8_split_wg_fits(33, 4104, 32, true));   // inputs not a multiple of 16
  cuda::fp8_gemv_params p = e8m0_rows(8);
  CHECK_THROWS_WITH_AS(cuda::launch_fp8_split_wg(p, nullptr),
                       doctest::Contains("fp8_split_wg: 8 rows"), error);
  p.rows = 16;
  alignas(16) static float x[8];
  p.x = x + 1;  // not 16-byte aligned
  CHECK_THROWS_WITH_AS(cuda::launch_fp8_split_wg(p, nullptr),
                       doctest::Contains("not 16-byte aligned"), error);
}

TEST_CASE("skinny_gemm plans: dense FP8 of 9..64 rows, K splits from the weight's shape") {
  for (const shape& s : dense_fp8_shapes) {
    CAPTURE(s.n);
    CAPTURE(s.k);
    const cuda::block_gemm_params p9 = params_for(s, 9);
    REQUIRE(cuda::skinny_gemm_takes(p9));
    const cuda::block_gemm_plan first = cuda::plan_skinny_gemm(p9);
    CHECK(first.tiles == (s.n + 127) / 128);
    CHECK(first.splits >= 1);
    CHECK(first.splits * 1280 >= s.k);  // each split at most 1280 inputs
    for (std::int64_t rows = 10; rows <= 64; ++rows) {
      CAPTURE(rows);
      const cuda::block_gemm_params p = params_for(s, rows);
      CHECK(cuda::skinny_gemm_takes(p));
      const cuda::block_gemm_plan plan = cuda::plan_skinny_gemm(p);
      CHECK(plan.splits == first.splits);
      CHECK(plan.tiles == first.tiles);
      // launch_block_gemm hands it over, and its plan sizes the ordered-split workspace
      CHECK(cuda::plan_block_gemm(p).splits == plan.splits);
    }
    CHECK_FALSE(cuda::skinny_gemm_takes(params_for(s, 8)));   // stream_gemm's
    CHECK_FALSE(cuda::skinny_gemm_takes(params_for(s, 65)));  // sm90_block_gemm's
  }
  // Experts (grouped) and MXFP4 stay on the block_gemm kernels.
  CHECK_FALSE(cuda::skinny_gemm_takes(params_for({2304, 5120, 0, 384, 32}, 16)));
  CHECK_FALSE(cuda::skinny_gemm_takes(params_for({2304, 5120, 0, 1, 32}, 16)));
  CHECK_FALSE(cuda::skinny_gemm_takes(params_for({1024, 4096, 128, 8, 128}, 16)));
}

TEST_CASE("ring_gemm plans: whole tiles where they fill the waves, else stream-K; opt-in") {
  // V4's wq_b: 256 tiles fill two waves of 132 SMs to 0.97 -- whole tiles, no atomics.
  cuda::ring_gemm_plan p = cuda::plan_ring_gemm(32768, 1024, 132);
  CHECK(p.tiles == 256);
  CHECK(p.blocks_k == 8);
  CHECK_FALSE(p.stream_k);
  CHECK(p.blocks == 132);
  // 129 tiles (the last partial): one wave at 0.98 -- whole tiles.
  p = cuda::plan_ring_gemm(16448, 256, 132);
  CHECK(p.tiles == 129);
  CHECK_FALSE(p.stream_k);
  CHECK(p.blocks == 129);
  // 160 tiles take two waves at 0.61: stream-K over all 132 SMs.
  p = cuda::plan_ring_gemm(160 * 128, 1024, 132);
  CHECK(p.stream_k);
  CHECK(p.blocks == 132);
  // V4's wo_b: 32 tiles of 64 units -- stream-K; a tiny weight: no more blocks than units.
  p = cuda::plan_ring_gemm(4096, 8192, 132);
  CHECK(p.tiles == 32);
  CHECK(p.blocks_k == 64);
  CHECK(p.stream_k);
  CHECK(p.blocks == 132);
  p = cuda::plan_ring_gemm(130, 128, 132);
  CHECK(p.tiles == 2);
  CHECK(p.stream_k);
  CHECK(p.blocks == 2);
  // Off by default; when on, never outside 9..64 rows, V4's blocks, K a multiple of 128 up to
  // 32768, nor in the batch-invariant mode (the shape test needs no GPU to refuse).
  const bool on = cuda::get_ring_gemm();
  if (!std::getenv("DEEPINFER_RING_GEMM")) CHECK_FALSE(on);
  cuda::set_ring_gemm(true);
  CHECK_FALSE(cuda::ring_gemm_takes_shape(8, true, 128, 128, 128, 1024));
  CHECK_FALSE(cuda::ring_gemm_takes_shape(65, true, 128, 128, 128, 1024));
  CHECK_FALSE(cuda::ring_gemm_takes_shape(32, false, 128, 128, 128, 1024));
  CHECK_FALSE(cuda::ring_gemm_takes_shape(32, true, 32, 32, 32, 1024));
  CHECK_FALSE(cuda::ring_gemm_takes_shape(32, true, 128, 128, 32, 1024));
  CHECK_FALSE(cuda::ring_gemm_takes_shape(32, true, 128, 128, 128, 1000));
  CHECK_FALSE(cuda::ring_gemm_takes_shape(32, true, 128, 128, 128, 32896));
  const bool ordered = cuda::get_ordered_gemm_splits();
  cuda::set_ordered_gemm_splits(true);
  CHECK_FALSE(cuda::ring_gemm_takes_shape(32, true, 128, 128, 128, 1024));
  cuda::set_ordered_gemm_splits(ordered);
  cuda::set_ring_gemm(false);
  CHECK_FALSE(cuda::ring_gemm_takes_shape(32, true, 128, 128, 128, 1024));
  cuda::set_ring_gemm(on);
}

TEST_CASE("pipe_gemm takes interleaved MXFP4 experts and splits K as stream_gemm does") {
  cuda::set_pipe_gemm(true);  // off by default (opt-in)
  cuda::set_wg_gemm(false);   // on by default, and it comes first
  for (const shape& s : expert_shapes) {
    CAPTURE(s.n);
    CAPTURE(s.k);
    const cuda::pipe_gemm_plan first = cuda::plan_pipe_gemm(experts(s, 1));
    for (std::int64_t rows = 1; rows <= 8; ++rows) {
      const cuda::block_gemm_params p = experts(s, rows);
      REQUIRE(cuda::pipe_gemm_takes(p));
      const cuda::pipe_gemm_plan plan = cuda::plan_pipe_gemm(p);
      // stream_gemm's warps along K: the same K ranges, the same bits
      CHECK(plan.warps_along_k == cuda::plan_stream_gemm(p).warps_along_k);
      CHECK(plan.warps_along_k == first.warps_along_k);
      const std::int64_t rows_per_block = 8 / plan.warps_along_k * 32;
      CHECK(plan.row_blocks == (s.n + rows_per_block - 1) / rows_per_block);
      CHECK(plan.blocks == std::min<std::int64_t>(132, 6 * rows * plan.row_blocks));
      CHECK(cuda::plan_block_gemm(p).tiles == plan.blocks);
      CHECK(plan.tile_tokens == rows);
      CHECK(plan.stages >= 2);
      CHECK(plan.smem_bytes <= 200 * 1024);
    }
  }
  const shape w1{2304, 5120, 0, 384, 32};
  cuda::block_gemm_params p = experts(w1, 1);
  p.fp4_interleaved = false;  // rows as stored: stream_gemm's
  CHECK_FALSE(cuda::pipe_gemm_takes(p));
  CHECK_FALSE(cuda::pipe_gemm_takes(experts({2304, 5120, 0, 1, 32}, 1)));  // dense
  CHECK_FALSE(cuda::pipe_gemm_takes(experts({64, 8192, 0, 8, 32}, 1)));  // 8-token tile > 64 KB
  CHECK_FALSE(cuda::pipe_gemm_takes(experts({64, 384, 0, 8, 128}, 1)));  // K not 4 act blocks
  p = experts(w1, 1);
  p.act = reinterpret_cast<const std::uint8_t*>(std::uintptr_t(8));  // not 16-byte aligned
  CHECK_FALSE(cuda::pipe_gemm_takes(p));
  CHECK_THROWS_WITH_AS(cuda::launch_pipe_gemm(p, nullptr), doctest::Contains("pipe_gemm: grouped"),
                       error);
  CHECK(cuda::pipe_gemm_takes(experts(w1, 1)));
  cuda::set_pipe_gemm(false);  // the default
  CHECK_FALSE(cuda::pipe_gemm_takes(experts(w1, 1)));
  cuda::set_wg_gemm(true);
}

TEST_CASE("wg_gemm takes interleaved MXFP4 decode tiles; its splits depend on the shape only") {
  REQUIRE(cuda::get_wg_gemm());  // on by default
  struct expected {
    shape s;
    int k_splits;
  };
  // Two blocks along K where 8 experts' 128-row blocks are fewer than 200 (the w1s).
  // expert_shapes in order: V4.1 w1 / w3 (18 row blocks), V4.1 w2 (40), V4 w1 / w3 (16),
  // V4 w2 (32).
  const int want_splits[] = {2, 1, 2, 1};
  std::vector<expected> cases;
  for (std::size_t i = 0; i < expert_shapes.size(); ++i) cases.push_back({expert_shapes[i], want_splits[i]});
  for (const expected& e : cases) {
    CAPTURE(e.s.n);
    CAPTURE(e.s.k);
    const cuda::wg_gemm_plan first = cuda::plan_wg_gemm(experts(e.s, 1));
    CHECK(first.k_splits == e.k_splits);
    CHECK(first.row_blocks == (e.s.n + 127) / 128);
    CHECK(first.steps_per_split % 8 == 0);
    CHECK(first.steps_per_split * first.k_splits >= e.s.k / 32);
    CHECK_FALSE(first.walk);
    for (std::int64_t rows : {2, 5, 8, 9, 33, 64}) {  // decode batches: tight and walked
      CAPTURE(rows);
      cuda::block_gemm_params p = experts(e.s, rows);
      if (rows > 8) p.tile_rows = 2;  // a captured step: groups bounded by the batch
      REQUIRE(cuda::wg_gemm_takes(p));
      const cuda::wg_gemm_plan plan = cuda::plan_wg_gemm(p);
      CHECK(plan.k_splits == first.k_splits);
      CHECK(plan.steps_per_split == first.steps_per_split);
      CHECK(plan.row_blocks == first.row_blocks);
      CHECK(plan.walk == (rows > 8));
      CHECK(plan.walkers == 1);                     // a decode step's groups: one block walks each
      CHECK(cuda::plan_block_gemm(p).splits == 1);  // its splits need no workspace
    }
    // Prefill-sized groups (wide tiles, set_wg_gemm_wide_tiles): the same splits; an eager
    // chunk of 1024 tokens (6144 routed rows, bounded by the largest group) walked by as many
    // blocks per group as twice the mean group has 8-token tiles, or as the hint says.
    REQUIRE(cuda::get_wg_gemm_wide_tiles());
    CHECK(cuda::get_wg_gemm_n32() == 1);  // 32-token tiles on by default; first the 8-token walk
    cuda::set_wg_gemm_n32(0);
    cuda::block_gemm_params pf = experts(e.s, 1024);
    REQUIRE(cuda::wg_gemm_takes(pf));
    const cuda::wg_gemm_plan prefill = cuda::plan_wg_gemm(pf);
    CHECK(prefill.walk);
    CHECK(prefill.k_splits == first.k_splits);
    CHECK(prefill.steps_per_split == first.steps_per_split);
    const std::int64_t mean = (6144 + e.s.groups - 1) / e.s.groups;  // 16 (V4.1), 24 (V4)
    CHECK(prefill.walkers == (2 * mean + 7) / 8);
    pf.tile_rows = 48;
    CHECK(cuda::plan_wg_gemm(pf).walkers == 6);
    pf.tile_rows = 8;
    CHECK(cuda::plan_wg_gemm(pf).walkers == 1);
    pf.max_rows = 20;  // the hint never exceeds the largest group
    pf.tile_rows = 48;
    CHECK(cuda::plan_wg_gemm(pf).walkers == 3);
    CHECK(cuda::plan_wg_gemm(pf).tile_tokens == 8);
    // 32-token tiles: from a typical group of 24 rows, walkers counted in them; decode keeps 8.
    cuda::set_wg_gemm_n32(1);
    pf = experts(e.s, 1024);
    const cuda::wg_gemm_plan wide = cuda::plan_wg_gemm(pf);
    CHECK(wide.tile_tokens == (2 * mean >= 24 ? 32 : 8));
    CHECK(wide.walkers == (2 * mean + wide.tile_tokens - 1) / wide.tile_tokens);
    CHECK(wide.k_splits == first.k_splits);
    pf.tile_rows = 16;
    CHECK(cuda::plan_wg_gemm(pf).tile_tokens == 8);
    CHECK(cuda::plan_wg_gemm(experts(e.s, 64)).tile_tokens == 8);
    // A pair (expert_linear_pair's w1 and w3 in one launch): by default (mode 2) the splits of
    // twice the row blocks -- one for the w1s --, in mode 1 each weight's own; not without y_b.
    cuda::block_gemm_params pair = experts(e.s, 1);
    static std::uint8_t second_weight[1];
    static float second_y[1];
    pair.weight_b = second_weight;
    pair.wscale_e8m0_b = second_weight;
    CHECK_FALSE(cuda::wg_gemm_takes(pair));
    pair.y_b = second_y;
    REQUIRE(cuda::wg_gemm_takes(pair));
    CHECK(cuda::block_gemm_takes_pair(pair));
    // A prefill-sized pair follows its weights: with the wide tiles off each alone goes to
    // sm90_block_gemm's tiles, so the pair is two launches there too.
    cuda::block_gemm_params wide_pair = pair;
    wide_pair.max_rows = 300;
    wide_pair.rows = 1024 * 6;
    CHECK(cuda::block_gemm_takes_pair(wide_pair));
    cuda::set_wg_gemm_wide_tiles(false);
    CHECK_FALSE(cuda::block_gemm_takes_pair(wide_pair));
    CHECK(cuda::block_gemm_takes_pair(pair));  // decode tiles: wg_gemm still
    cuda::set_wg_gemm_wide_tiles(true);
    REQUIRE(cuda::get_wg_gemm_pair() == 2);
    CHECK(cuda::plan_wg_gemm(pair).k_splits == 1);
    CHECK(cuda::plan_wg_gemm(pair).row_blocks == first.row_blocks);
    // A prefill-sized pair walks 32-token tiles; where one split's 32-token B does not fit (V4.1's
    // w1/w3: 160 steps) it takes two splits, not 8-token tiles -- decode keeps one.
    REQUIRE(cuda::get_wg_gemm_n32_split());
    cuda::block_gemm_params prefill_pair = pair;
    prefill_pair.max_rows = 300;
    prefill_pair.rows = 1024 * 6;
    prefill_pair.tile_rows = 48;
    // The bf16 kernel (the default for prefill-sized groups): 32-token tiles whose bf16 B (2 KB
    // per 32-input step) fits one K split or two -- never more (two atomic addends onto zero
    // commute exactly) -- and never in the batch-invariant mode; decode plans keep FP8.
    REQUIRE(cuda::get_wg_gemm_bf16());
    const cuda::wg_gemm_plan pb = cuda::plan_wg_gemm(prefill_pair);
    CHECK(pb.bf16);
    CHECK(pb.tile_tokens == 32);
    CHECK(pb.k_splits == (e.s.k / 32 > 100 ? 2 : 1));
    CHECK(pb.steps_per_split * pb.k_splits >= e.s.k / 32);
    CHECK(pb.steps_per_split * 2048 <= 200 * 1024);
    CHECK(pb.walkers == 2);
    REQUIRE(cuda::get_wg_gemm_bf16_warpgroups() == 3);
    CHECK(pb.row_blocks == (e.s.n + 383) / 384);  // three warpgroups of 128 rows a block
    cuda::set_wg_gemm_bf16_warpgroups(2);
    const cuda::wg_gemm_plan pb2 = cuda::plan_wg_gemm(prefill_pair);
    cuda::set_wg_gemm_bf16_warpgroups(3);
    CHECK(pb2.row_blocks == (e.s.n + 255) / 256);
    CHECK(pb2.k_splits == pb.k_splits);  // the same K ranges: the same sums
    CHECK(pb2.steps_per_split == pb.steps_per_split);
    CHECK_THROWS_AS(cuda::set_wg_gemm_bf16_warpgroups(4), error);
    CHECK_FALSE(cuda::plan_wg_gemm(pair).bf16);
    cuda::set_ordered_gemm_splits(true);
    CHECK_FALSE(cuda::plan_wg_gemm(prefill_pair).bf16);
    cuda::set_ordered_gemm_splits(false);
    cuda::set_wg_gemm_bf16(false);  // the FP8 tiles below
    const cuda::wg_gemm_plan pp = cuda::plan_wg_gemm(prefill_pair);
    CHECK_FALSE(pp.bf16);
    CHECK(pp.tile_tokens == 32);
    CHECK(pp.k_splits == (e.s.k / 32 >= 160 ? 2 : 1));
    CHECK(pp.steps_per_split * pp.k_splits >= e.s.k / 32);
    CHECK(pp.walkers == 2);  // 48 rows in 32-token tiles
    cuda::set_wg_gemm_n32_split(false);
    const cuda::wg_gemm_plan pp8 = cuda::plan_wg_gemm(prefill_pair);
    CHECK(pp8.k_splits == 1);
    CHECK(pp8.tile_tokens == (e.s.k / 32 >= 160 ? 8 : 32));
    cuda::set_wg_gemm_n32_split(true);
    cuda::set_wg_gemm_bf16(true);
    cuda::set_wg_gemm_pair(1);
    CHECK(cuda::plan_wg_gemm(pair).k_splits == first.k_splits);
    cuda::set_wg_gemm_pair(0);
    CHECK_FALSE(cuda::wg_gemm_takes(pair));
    cuda::set_wg_gemm_pair(2);
  }
  CHECK_THROWS_AS(cuda::set_wg_gemm_n32(3), error);
  CHECK_THROWS_AS(cuda::set_wg_gemm_pair(-1), error);
  const shape w1{2304, 5120, 0, 384, 32};
  cuda::block_gemm_params p = experts(w1, 1);
  p.fp4_interleaved = false;  // rows as stored: stream_gemm's
  CHECK_FALSE(cuda::wg_gemm_takes(p));
  CHECK_FALSE(cuda::wg_gemm_takes(experts({64, 32768, 0, 8, 32}, 1)));  // a split's B > 48 KB
  CHECK_FALSE(cuda::wg_gemm_takes(experts({64, 4096, 0, 8, 256}, 1)));  // 256-input act blocks
  p = experts(w1, 1);
  p.act = reinterpret_cast<const std::uint8_t*>(std::uintptr_t(4));  // not 8-byte aligned
  CHECK_FALSE(cuda::wg_gemm_takes(p));
  CHECK_THROWS_WITH_AS(cuda::launch_wg_gemm(p, nullptr), doctest::Contains("wg_gemm:"), error);
  p = experts(w1, 1);
  p.act_scale = reinterpret_cast<const float*>(std::uintptr_t(4));  // float4 loads need 16
  CHECK_FALSE(cuda::wg_gemm_takes(p));
  cuda::set_wg_gemm(false);
  CHECK_FALSE(cuda::wg_gemm_takes(experts(w1, 1)));
  cuda::set_wg_gemm(true);  // the default
  CHECK(cuda::wg_gemm_takes(experts(w1, 1)));
}

TEST_CASE("wg_gemm's persistent blocks: decode steps on the ring with one K split, switchable") {
  REQUIRE(cuda::get_wg_gemm_chain());  // on by default
  static std::uint8_t second_weight[1];
  static float second_y[1];
  for (const shape& s : expert_shapes) {
    CAPTURE(s.n);
    CAPTURE(s.k);
    cuda::block_gemm_params single = experts(s, 64), pair = single;
    pair.weight_b = pair.wscale_e8m0_b = second_weight;
    pair.y_b = second_y;
    for (cuda::block_gemm_params* p : {&single, &pair}) {
      CAPTURE(p->weight_b != nullptr);
      const cuda::wg_gemm_plan plan = cuda::plan_wg_gemm(*p);
      // Batch 64 (384 routed rows, the ring): chained wherever the weight has one K split.
      CHECK(plan.chain == (plan.k_splits == 1));
      CHECK(plan.chain ==
            (p->weight_b != nullptr || s.n > 2304));  // V4.1's and V4's w1 alone split
      p->tile_rows = 2;  // a captured step (groups bounded by the batch): the same
      CHECK(cuda::plan_wg_gemm(*p).chain == plan.chain);
      // The other choices: the same splits, only the kernel differs.
      cuda::set_wg_gemm_chain(false);
      const cuda::wg_gemm_plan off = cuda::plan_wg_gemm(*p);
      cuda::set_wg_gemm_chain(true);
      CHECK_FALSE(off.chain);
      CHECK(off.k_splits == plan.k_splits);
      CHECK(off.steps_per_split == plan.steps_per_split);
      CHECK(off.row_blocks == plan.row_blocks);
    }
    // Batches 1 and 8 (no ring), the ring forced off, and prefill-sized groups: never chained.
    CHECK_FALSE(cuda::plan_wg_gemm(experts(s, 1)).chain);
    CHECK_FALSE(cuda::plan_wg_gemm(experts(s, 8)).chain);
    cuda::set_wg_gemm_ring(0);
    CHECK_FALSE(cuda::plan_wg_gemm(pair).chain);
    cuda::set_wg_gemm_ring(-1);
    CHECK_FALSE(cuda::plan_wg_gemm(experts(s, 1024)).chain);
    // More groups than the block lists, and no offsets: a block per item.
    cuda::block_gemm_params many = pair;
    many.groups = 513;
    CHECK_FALSE(cuda::plan_wg_gemm(many).chain);
    cuda::block_gemm_params dense = pair;
    dense.offsets = nullptr;
    CHECK_FALSE(cuda::plan_wg_gemm(dense).chain);
  }
  // Too few runs for a warp to request one a ring ahead (K 384: 12 steps, halves of 8 and 4).
  cuda::block_gemm_params short_k = experts({4096, 384, 0, 256, 128}, 64);
  REQUIRE(cuda::wg_gemm_takes(short_k));
  CHECK_FALSE(cuda::plan_wg_gemm(short_k).chain);
  CHECK(cuda::plan_wg_gemm(experts({4096, 768, 0, 256, 128}, 64)).chain);  // halves of 12
  CHECK(cuda::get_wg_gemm_chain_ring() == 4);
  CHECK_THROWS_AS(cuda::set_wg_gemm_chain_ring(3), error);
  CHECK_THROWS_AS(cuda::set_wg_gemm_chain_ring(7), error);
}

TEST_CASE("wg_gemm's shared-memory ring: from 128 routed rows by default, forced on or off") {
  const shape w1{2304, 5120, 0, 384, 32};
  CHECK_FALSE(cuda::wg_gemm_uses_ring(experts(w1, 1)));  // batch 1: 6 routed rows
  CHECK_FALSE(cuda::wg_gemm_uses_ring(experts(w1, 8)));  // 48
  CHECK(cuda::wg_gemm_uses_ring(experts(w1, 22)));       // 132
  CHECK(cuda::wg_gemm_uses_ring(experts(w1, 64)));       // 384
  cuda::block_gemm_params unknown = experts(w1, 64);
  unknown.rows = 0;  // the total unknown: the bound on one expert's rows decides
  CHECK_FALSE(cuda::wg_gemm_uses_ring(unknown));
  cuda::set_wg_gemm_ring(1);
  CHECK(cuda::wg_gemm_uses_ring(experts(w1, 1)));
  cuda::set_wg_gemm_ring(0);
  CHECK_FALSE(cuda::wg_gemm_uses_ring(experts(w1, 64)));
  CHECK_THROWS_AS(cuda::set_wg_gemm_ring(2), error);
  cuda::set_wg_gemm_ring(-1);  // the default
  CHECK(cuda::wg_gemm_uses_ring(experts(w1, 64)));
}

}  // namespace
}  // namespace di

namespace di {
namespace {

TEST_CASE("block_gemm launches refuse interleaved weights whose shape cuts stripes or runs") {
  // shape: n, k, block_cols (0 = MXFP4), groups, act_block
  cuda::block_gemm_params whole = params_for({2304, 5120, 0, 8, 32}, 1);
  whole.fp4_interleaved = true;
  cuda::check_interleaved(whole, "test");  // 72 stripes, 40 runs: taken
  cuda::block_gemm_params cut = params_for({48, 5120, 0, 8, 32}, 1);  // 1.5 stripes per expert
  cut.fp4_interleaved = true;
  CHECK_THROWS_WITH_AS(cuda::check_interleaved(cut, "test"), doctest::Contains("outputs of 32"),
                       error);
  cuda::block_gemm_params short_k = params_for({64, 96, 0, 1, 32}, 1);  // K not whole runs
  short_k.fp4_interleaved = true;
  CHECK_THROWS_WITH_AS(cuda::check_interleaved(short_k, "test"),
                       doctest::Contains("K a multiple of 128"), error);
  cuda::block_gemm_params fp8 = params_for({64, 256, 32, 1, 32}, 1);  // the layout is MXFP4's
  fp8.fp4_interleaved = true;
  CHECK_THROWS_AS(cuda::check_interleaved(fp8, "test"), error);
  fp8.fp4_interleaved = false;
  cuda::check_interleaved(fp8, "test");
}

TEST_CASE("dense_wg_gemm takes the dense FP8 decode tiles; its plans depend on the shape only") {
  static const std::uint8_t scales[16] = {};
  auto dense = [](const shape& s, std::int64_t rows) {
    cuda::block_gemm_params p = params_for(s, rows);
    p.wscale_e8m0 = scales;
    return p;
  };
  const bool before = cuda::get_dense_wg_gemm();
  const int wide = cuda::get_dense_wg_gemm_wide();
  cuda::set_dense_wg_gemm(true);
  cuda::set_dense_wg_gemm_wide(0);
  for (const shape& s : dense_fp8_shapes) {
    CAPTURE(s.n);
    CAPTURE(s.k);
    const std::int64_t steps = s.k / 32;
    const cuda::dense_wg_gemm_plan one = cuda::plan_dense_wg_gemm(dense(s, 1));
    CHECK(one.k_splits >= 1);
    CHECK(one.k_splits <= 8);  // one portable cluster
    CHECK(one.steps_per_split % 8 == 0);
    CHECK(one.steps_per_split * one.k_splits >= steps);       // the splits cover K
    CHECK(one.steps_per_split * (one.k_splits - 1) < steps);  // and none is empty
    CHECK(one.row_tiles == (s.n + 63) / 64);
    for (std::int64_t rows = 1; rows <= 8; ++rows) {
      CAPTURE(rows);
      CHECK(cuda::dense_wg_gemm_takes(dense(s, rows)));
      const cuda::dense_wg_gemm_plan p = cuda::plan_dense_wg_gemm(dense(s, rows));
      CHECK(p.k_splits == one.k_splits);
      CHECK(p.steps_per_split == one.steps_per_split);
      CHECK(p.row_tiles == one.row_tiles);
      CHECK(cuda::plan_block_gemm(dense(s, rows)).splits == 1);  // no workspace
    }
    CHECK(one.nt == 8);
    CHECK(one.tiles_per_block == 1);
    CHECK(one.fused == (s.block_cols >= 128 && s.act_block >= 128));
    CHECK_FALSE(cuda::dense_wg_gemm_takes(dense(s, 9)));  // skinny_gemm's
    // The wide tiles: 9..64 rows in tiles of 16, 32 and 64 tokens, the same plan for any rows
    // of a tile; the splits from the shape and the tile; never with ordered splits. (-1, the
    // default, and 1 differ only in whether cuBLASLt is tried first: gemm.cpp.)
    cuda::set_dense_wg_gemm_wide(s.block_cols == 32 ? -1 : 1);
    for (std::int64_t rows = 9; rows <= 64; ++rows) {
      CAPTURE(rows);
      CHECK(cuda::dense_wg_gemm_takes(dense(s, rows)));
      const cuda::dense_wg_gemm_plan p = cuda::plan_dense_wg_gemm(dense(s, rows));
      const int nt = rows <= 16 ? 16 : rows <= 32 ? 32 : 64;
      CHECK(p.nt == nt);
      const cuda::dense_wg_gemm_plan full = cuda::plan_dense_wg_gemm(dense(s, nt));
      CHECK(p.k_splits == full.k_splits);
      CHECK(p.steps_per_split == full.steps_per_split);
      CHECK(p.steps_per_split * p.k_splits >= steps);
      CHECK(p.steps_per_split * (p.k_splits - 1) < steps);
      CHECK(p.k_splits <= 16);  // (added with atomics, not in a cluster)
      CHECK(p.tiles_per_block == full.tiles_per_block);
      CHECK(p.tiles_per_block >= 1);
      CHECK(p.tiles_per_block <= p.row_tiles);
      // about three blocks per SM of a 132-SM GPU: fewer tiles a block would exceed that
      const std::int64_t blocks_x = (p.row_tiles + p.tiles_per_block - 1) / p.tiles_per_block;
      CHECK((p.tiles_per_block == 1 || (p.tiles_per_block - 1) * 396 < p.row_tiles * p.k_splits));
      CHECK(blocks_x * p.k_splits <= 396 + p.k_splits);
      CHECK(p.batch_steps == 4);
      CHECK(cuda::plan_block_gemm(dense(s, rows)).splits == 1);  // no workspace
    }
    CHECK_FALSE(cuda::dense_wg_gemm_takes(dense(s, 65)));
    cuda::set_ordered_gemm_splits(true);
    CHECK_FALSE(cuda::dense_wg_gemm_takes(dense(s, 16)));
    CHECK(cuda::dense_wg_gemm_takes(dense(s, 8)));  // (the 8-row tiles are batch-invariant)
    cuda::set_ordered_gemm_splits(false);
    cuda::set_dense_wg_gemm_wide(0);
  }
  // The grid aims at about four 128-thread blocks per SM of a 132-SM GPU: many row tiles keep
  // K whole, few split it (V4.1 wq_b: 512 tiles; wo_b: 80 tiles x 4; V4 wo_b: 64 x 8).
  const auto splits_of = [&](const shape& s) {
    const cuda::dense_wg_gemm_plan p = cuda::plan_dense_wg_gemm(dense(s, 1));
    return std::pair<int, int>{p.k_splits, p.steps_per_split};
  };
  CHECK(splits_of({32768, 1280, 32, 1, 32}) == std::pair<int, int>{1, 40});
  CHECK(splits_of({5120, 8192, 32, 1, 32}) == std::pair<int, int>{4, 64});
  CHECK(splits_of({4096, 8192, 128, 1, 128}) == std::pair<int, int>{8, 32});
  CHECK(splits_of({1280, 5120, 32, 1, 32}) == std::pair<int, int>{7, 24});
  // Refused: MXFP4, grouped experts, no scales, scale blocks of fewer than 16 rows, switched off.
  for (const shape& s : expert_shapes) CHECK_FALSE(cuda::dense_wg_gemm_takes(experts(s, 1)));
  cuda::block_gemm_params p = dense(dense_fp8_shapes[0], 1);
  p.wscale_e8m0 = nullptr;
  CHECK_FALSE(cuda::dense_wg_gemm_takes(p));
  p = dense(dense_fp8_shapes[0], 1);
  p.block_rows = 8;
  CHECK_FALSE(cuda::dense_wg_gemm_takes(p));
  // K too long for a split's staging even across 8 splits (2^16 steps): refused, not launched.
  CHECK_FALSE(cuda::dense_wg_gemm_takes(dense({64, std::int64_t(32) << 16, 32, 1, 32}, 1)));
  // Bad input is a clear error before anything reaches the GPU: a launch of a shape it does
  // not take, and a load batch other than 4 or 8 steps.
  CHECK_THROWS_AS(cuda::launch_dense_wg_gemm(experts(expert_shapes[0], 1), nullptr), di::error);
  CHECK_THROWS_AS(cuda::set_dense_wg_gemm_batch(6), di::error);
  CHECK_THROWS_AS(cuda::set_dense_wg_gemm_wide(2), di::error);
  CHECK_THROWS_AS(cuda::set_dense_wg_gemm_wide(-2), di::error);
  cuda::set_dense_wg_gemm(false);
  CHECK_FALSE(cuda::dense_wg_gemm_takes(dense(dense_fp8_shapes[0], 1)));
  CHECK_THROWS_AS(cuda::launch_dense_wg_gemm(dense(dense_fp8_shapes[0], 1), nullptr), di::error);
  cuda::set_dense_wg_gemm(before);  // as the environment left it
  cuda::set_dense_wg_gemm_wide(wide);
}

TEST_CASE("fp8_split_wg's warpgroups a block: two by default, one or two only") {
  if (!std::getenv("DEEPINFER_SPLIT_WG_WGS")) CHECK(cuda::split_wg_warpgroups() == 2);
  const int before = cuda::split_wg_warpgroups();
  CHECK_THROWS_WITH_AS(cuda::set_split_wg_warpgroups(0), doctest::Contains("1 or 2"), error);
  CHECK_THROWS_AS(cuda::set_split_wg_warpgroups(3), error);
  CHECK(cuda::split_wg_warpgroups() == before);  // a refused value changes nothing
  cuda::set_split_wg_warpgroups(1);
  CHECK(cuda::split_wg_warpgroups() == 1);
  cuda::set_split_wg_warpgroups(before);
}

}  // namespace
}  // namespace di
#endif  // DEEPINFER_HAVE_CUDA
