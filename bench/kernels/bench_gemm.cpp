// GEMMs in the stored formats on V4.1-Flash (FP8 32x32 blocks, activations in blocks of 32)
// and V4-Flash (128x128 blocks, activations in blocks of 128) shapes: TFLOP/s at M = 4096
// against the cuBLAS bf16 peak of this run and DeepGEMM's 1270-1440 TFLOP/s; time at M = 1
// against DeepGEMM's 6-20 us and the time to stream the weight bytes at the copy bandwidth;
// the MXFP4 grouped expert GEMM's weight streaming rate at 1..64 tokens per expert against
// the copy bandwidth (DeepGEMM's grouped FP8 GEMMs: 92-98% of it).
#include "bench/kernels/bench_sections.hpp"

#include "kernels/cuda/cublas_gemm.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/ops.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <utility>

namespace di::bench {

namespace {

constexpr device gpu{device_kind::cuda, 0};

struct shape {
  const char* name;
  std::int64_t n, k;
};

weight_matrix device_fp8(std::int64_t n, std::int64_t k, std::int64_t block, unsigned seed) {
  tensor scales =
      random_device({(n + block - 1) / block, (k + block - 1) / block}, dtype::u8, seed);
  // Scales near 1 (2^-8 .. 2^7): random bytes would overflow the fp32 accumulators.
  tensor host = scales.to(cpu_device);
  for (std::int64_t i = 0; i < host.numel(); ++i)
    host.data<std::uint8_t>()[i] = std::uint8_t(119 + host.data<std::uint8_t>()[i] % 16);
  tensor s = tensor::empty(host.shape(), dtype::f8_e8m0, gpu);
  s.copy_from(tensor::view_of(host.raw(), host.shape(), dtype::f8_e8m0));
  return weight_matrix::fp8(random_device({n, k}, dtype::f8_e4m3, seed + 1), s, {block, block});
}

weight_matrix device_fp4(std::int64_t n, std::int64_t k, unsigned seed) {
  tensor host = random_device({n, k / 32}, dtype::u8, seed).to(cpu_device);
  for (std::int64_t i = 0; i < host.numel(); ++i)
    host.data<std::uint8_t>()[i] = std::uint8_t(119 + host.data<std::uint8_t>()[i] % 16);
  tensor s = tensor::empty(host.shape(), dtype::f8_e8m0, gpu);
  s.copy_from(tensor::view_of(host.raw(), host.shape(), dtype::f8_e8m0));
  return weight_matrix::fp4(random_device({n, k / 2}, dtype::i8, seed + 1), s);
}

/// The decode (<= 8 rows per group) kernels compared: wg_gemm and pipe_gemm (interleaved
/// MXFP4 experts only), stream_gemm (its FP8 variants picked by K, and each forced) and
/// sm90_block_gemm's shared-memory tiles. The first two are wg_gemm with its shared-memory
/// ring forced off and on; the default (default_decode_kernel) picks by the routed rows.
struct decode_kernel {
  const char* name;
  bool stream;
  int variant;  // set_stream_gemm_variant
  bool pipe;    // set_pipe_gemm
  bool wg;      // set_wg_gemm
  int ring = 0;  // set_wg_gemm_ring (forced on or off in these rows)
  int dense = 0;  // dense_wg_gemm: 0 off, 1 on, 2 on without early weights, 3 on in batches of 4
  bool tile = false;  // tile_gemv on the weight's decode tiles (V4.1's 32-blocks)
  void select() const {
    cuda::set_tile_gemv(tile);
    cuda::set_stream_gemm(stream);
    cuda::set_stream_gemm_variant(variant);
    cuda::set_pipe_gemm(pipe);
    cuda::set_wg_gemm(wg);
    cuda::set_wg_gemm_ring(ring);
    cuda::set_dense_wg_gemm(dense > 0);
    cuda::set_dense_wg_gemm_early(dense != 2);
    cuda::set_dense_wg_gemm_batch(dense == 3 ? 4 : 8);
  }
  bool interleaved_only() const { return pipe || wg; }
  bool dense_only() const { return dense > 0; }  // dense FP8 weights only
};
const decode_kernel decode_kernels[] = {{"wg_gemm", true, -1, false, true},
                                        {"wg_gemm ring", true, -1, false, true, 1},
                                        {"stream_gemm", true, -1, false, false},
                                        {"pipe_gemm", true, -1, true, false},
                                        {"stream 4x2", true, 0, false, false},
                                        {"stream 2x3", true, 1, false, false},
                                        {"smem tiles", false, -1, false, false},
                                        {"dense_wg_gemm", true, -1, false, false, 0, 1},
                                        {"dense_wg late weights", true, -1, false, false, 0, 2},
                                        {"dense_wg batch 4", true, -1, false, false, 0, 3},
                                        {"tile_gemv", true, -1, false, false, 0, 0, true}};
void default_decode_kernel() {
  decode_kernels[0].select();
  cuda::set_wg_gemm_ring(-1);  // by the routed rows
  cuda::set_skinny_gemm(true);
  cuda::set_dense_wg_gemm(false);  // opt-in: slower than stream_gemm on the H200 (session 20)
  cuda::set_ring_gemm(false);      // (its own rows below: V4's blocks at 16..64 rows)
}

/// Copies of a weight so that rotating through them streams more than the 60 MB L2.
int copies_for(std::size_t bytes) {
  return int(std::max<std::size_t>(2, (std::size_t(256) << 20) / std::max<std::size_t>(1, bytes)));
}

void fp8_rows(const limits& lim, std::vector<result_row>& rows, const char* model,
              std::int64_t block, const shape& s, bool quick) {
  const int act = int(block);
  // M = 4096: throughput (skipped with DEEPINFER_BENCH_DECODE_ONLY=1, e.g. under ncu).
  if (!std::getenv("DEEPINFER_BENCH_DECODE_ONLY")) {
    const std::int64_t m = quick ? 1024 : 4096;
    const weight_matrix w = device_fp8(s.n, s.k, block, 11);
    const tensor x = random_device({m, s.k}, dtype::f32, 12);
    const double flop = 2.0 * double(m) * double(s.n) * double(s.k);
    for (auto backend : {cuda::gemm_backend::block_gemm, cuda::gemm_backend::cublaslt}) {
      if (backend == cuda::gemm_backend::cublaslt && block != 128) continue;
      cuda::set_gemm_backend(backend);
      const double us = median_us([&] { ops::linear(x, w, {act}); }, 2, 10);
      const bool lt = backend == cuda::gemm_backend::cublaslt;
      if (lt && !cuda::cublaslt_block_fp8_available()) continue;  // fell back: same kernel
      const double tf = flop / (us * 1e-6) / 1e12;
      rows.push_back(
          {fmt::format("{} fp8 {} {}", model, lt ? "cuBLASLt-blk" : "block_gemm", s.name),
           fmt::format("M{} N{} K{}", m, s.n, s.k), tf, "TFLOP/s", us,
           "DeepGEMM 1270 TFLOP/s (low end)", tf / 1270.0});
      if (lt)
        rows.push_back({"  same, vs cuBLASLt fp8 per-tensor", "", tf, "TFLOP/s", us,
                        "cuBLASLt per-tensor 1434 TFLOP/s", tf / 1434.0});
      rows.push_back({"  same, vs cuBLAS bf16 peak", "", tf, "TFLOP/s", us,
                      fmt::format("bf16 peak {:.0f}", lim.bf16_tflops), tf / lim.bf16_tflops});
    }
    cuda::set_gemm_backend(cuda::gemm_backend::automatic);
    {  // The bf16 temporary per call (dequant_bf16): dequantize + cuBLAS.
      cuda::set_gemm_backend(cuda::gemm_backend::dequant_bf16);
      const double us = median_us([&] { ops::linear(x, w, {act}); }, 2, 10);
      cuda::set_gemm_backend(cuda::gemm_backend::automatic);
      const double tf = flop / (us * 1e-6) / 1e12;
      rows.push_back({fmt::format("{} fp8 bf16-temp per call {}", model, s.name),
                      fmt::format("M{} N{} K{}", m, s.n, s.k), tf, "TFLOP/s", us,
                      fmt::format("bf16 peak {:.0f}", lim.bf16_tflops), tf / lim.bf16_tflops});
    }
    // The dequantized-at-load path on the same shape: cuBLAS bf16.
    const weight_matrix bf = cuda::dequantize_weight(w, dtype::bf16);
    const double us = median_us([&] { ops::linear(x, bf, {}); }, 2, 10);
    const double tf = flop / (us * 1e-6) / 1e12;
    rows.push_back({fmt::format("{} bf16 cuBLAS (dequant) {}", model, s.name),
                    fmt::format("M{} N{} K{}", m, s.n, s.k), tf, "TFLOP/s", us,
                    fmt::format("bf16 peak {:.0f}", lim.bf16_tflops), tf / lim.bf16_tflops});
  }
  // M = 1: weight streaming.
  {
    const std::size_t bytes = std::size_t(s.n * s.k) + std::size_t(((s.n + block - 1) / block) *
                                                                   ((s.k + block - 1) / block));
    std::vector<weight_matrix> ws;
    // (with the decode tiles where tile_gemv takes the shape: its row reads them, the others
    // the row-major codes)
    cuda::set_tile_gemv(true);
    for (int i = 0; i < copies_for(bytes); ++i)
      ws.push_back(cuda::with_decode_tiles(device_fp8(s.n, s.k, block, 20 + i)));
    const tensor x = random_device({1, s.k}, dtype::f32, 13);
    const double read_us = read_stream_us(bytes);
    // The activation codes made beforehand, as the model's fused norms hand them over (where
    // the norm fuses the quantization): stream_gemm's row below then times the GEMM (and its
    // K-split memset) without the act-quant node.
    const ops::quantized_rows q = ops::rms_norm_quantized(x, tensor(), 1e-6f, act);
    cuda::set_gemm_backend(cuda::gemm_backend::block_gemm);
    for (const decode_kernel& kernel : decode_kernels) {
      if (kernel.interleaved_only()) continue;  // MXFP4 experts only
      if (kernel.tile && !ws.front().decode_tiles.defined()) continue;  // V4.1's blocks only
      kernel.select();
      std::size_t next = 0;
      const double eager = median_us([&] { ops::linear(x, ws[next++ % ws.size()], {act}); }, 3, 30);
      // Graph replays: one graph per weight copy would be needed to rotate; replay over the
      // first copy with the L2 flushed by streaming the others between replays is not possible
      // inside one graph, so capture a graph that runs every copy once and divide.
      const double all = median_graph_us([&] {
        for (const weight_matrix& w : ws) ops::linear(x, w, {act});
      });
      const double us = all / double(ws.size());
      const double gbps = double(bytes) / (us * 1e-6) / 1e9;
      rows.push_back({fmt::format("{} fp8 {} M=1 {}", model, kernel.name, s.name),
                      fmt::format("N{} K{} {:.1f} MB", s.n, s.k, double(bytes) / 1e6), us,
                      "us graph", us, "DeepGEMM M=1: 6-20 us (20 / ours)", 20.0 / us});
      rows.push_back({"  same, eager (launch overheads in)", "", eager, "us", eager,
                      "DeepGEMM M=1: 6-20 us (20 / ours)", 20.0 / eager});
      rows.push_back({"  same, weight stream rate (graph)", "", gbps, "GB/s", us,
                      fmt::format("copy {:.0f} GB/s", lim.copy_gbps), gbps / lim.copy_gbps});
      rows.push_back({"  same, vs one kernel reading its bytes", "", read_us, "us read", us,
                      "read time / ours", read_us / us});
      if (std::string_view(kernel.name) == "stream_gemm" && q.codes.defined()) {
        const double alone = median_graph_us([&] {
                               for (const weight_matrix& w : ws) ops::linear(q, w, {act});
                             }) /
                             double(ws.size());
        rows.push_back({"  same, activation codes given (no act-quant node)", "", alone, "us graph",
                        alone, "read time / ours", read_us / alone});
      }
    }
    // One decode row: linear over the weight copies at m rows, as a share of the copy rate.
    auto decode_row = [&](const std::string& kernel, std::int64_t m) {
      const tensor xm = random_device({m, s.k}, dtype::f32, 14);
      const double us = median_graph_us([&] {
                          for (const weight_matrix& w : ws) ops::linear(xm, w, {act});
                        }) /
                        double(ws.size());
      const double gbps = double(bytes) / (us * 1e-6) / 1e9;
      return result_row{fmt::format("{} fp8 {} M={} {}", model, kernel, m, s.name),
                        fmt::format("N{} K{} {:.1f} MB", s.n, s.k, double(bytes) / 1e6),
                        gbps,
                        "GB/s",
                        us,
                        fmt::format("copy {:.0f} GB/s", lim.copy_gbps),
                        gbps / lim.copy_gbps};
    };
    // Decode batches of 8 and 64 rows: stream_gemm (8) or skinny_gemm (64; the wide tiles off)
    // against sm90_block_gemm's shared-memory tiles, as a share of the copy bandwidth.
    default_decode_kernel();
    const int wide = cuda::get_dense_wg_gemm_wide();
    cuda::set_dense_wg_gemm_wide(0);
    for (const std::int64_t m : {8, 64})
      for (const bool stream : {true, false}) {
        cuda::set_stream_gemm(stream);
        cuda::set_skinny_gemm(stream);
        rows.push_back(decode_row(!stream  ? "smem tiles"
                                  : m <= 8 ? "dense_wg_gemm"
                                           : "skinny_gemm",
                                  m));
      }
    if (ws.front().decode_tiles.defined()) {  // tile_gemv at 8 rows (V4.1's blocks)
      cuda::set_tile_gemv(true);
      rows.push_back(decode_row("tile_gemv", 8));
      cuda::set_tile_gemv(false);
    }
    // dense_wg_gemm's wide tiles (16, 32 and 64 tokens a wgmma) at the same decode batches.
    // (DEEPINFER_BENCH_WIDE_M: one of them only, e.g. for a profile)
    cuda::set_dense_wg_gemm_wide(1);
    const char* only = std::getenv("DEEPINFER_BENCH_WIDE_M");
    for (const std::int64_t m : {16, 32, 64})
      if (!only || std::atoll(only) == m) rows.push_back(decode_row("dense_wg wide", m));
    cuda::set_dense_wg_gemm_wide(wide);
    if (block == 128) {  // V4's blocks: cuBLASLt's block-scaled GEMM at decode batches (16k rows)
      cuda::set_gemm_backend(cuda::gemm_backend::cublaslt);
      for (const std::int64_t m : {16, 32, 64}) {
        result_row row = decode_row("cuBLASLt-blk", m);
        if (!cuda::cublaslt_block_fp8_available()) break;  // fell back: block_gemm's rows above
        rows.push_back(std::move(row));
      }
      // ring_gemm (opt-in TMA ring) at the same decode batches
      cuda::set_gemm_backend(cuda::gemm_backend::block_gemm);
      cuda::set_ring_gemm(true);
      for (const std::int64_t m : {16, 32, 64}) rows.push_back(decode_row("ring_gemm", m));
      cuda::set_ring_gemm(false);
    }
    default_decode_kernel();
    cuda::set_gemm_backend(cuda::gemm_backend::automatic);
  }
}

void fp4_grouped_rows(const limits& lim, std::vector<result_row>& rows, const char* model,
                      const shape& s, int experts, bool quick) {
  const weight_matrix stored = device_fp4(std::int64_t(experts) * s.n, s.k, 31);
  const std::size_t bytes = stored.nbytes();
  // Rows interleaved as the model uploads them, and as the checkpoint stores them.
  for (const weight_matrix& w : {cuda::with_fp4_layout(stored, true), stored}) {
    for (int t : {1, 2, 4, 8, 16, 32, 64}) {
      if (quick && t > 8) break;
      tensor off = tensor::empty({experts + 1}, dtype::i32);
      for (int e = 0; e <= experts; ++e) off.data<std::int32_t>()[e] = e * t;
      const tensor offsets = off.to(gpu);
      const tensor x = random_device({std::int64_t(experts) * t, s.k}, dtype::f32, 32);
      const ops::expert_linear_params p{32, t};
      double us = 0;
      for (const decode_kernel& kernel : decode_kernels) {  // tiles of > 8 rows: one kernel
        if (t > 8 && &kernel != &decode_kernels[0]) continue;
        if (kernel.interleaved_only() && !w.interleaved) continue;  // they read that layout only
        if (kernel.dense_only()) continue;
        kernel.select();
        us = median_graph_us([&] { ops::expert_linear(x, offsets, w, p); });
        const double gbps = double(bytes) / (us * 1e-6) / 1e9;
        rows.push_back(
            {fmt::format("{} mxfp4{} grouped {} x{} {}", model, w.interleaved ? " il" : "", s.name,
                         experts, t > 8 ? "smem tiles" : kernel.name),
             fmt::format("{} tok/expert N{} K{}", t, s.n, s.k), gbps, "GB/s", us,
             fmt::format("copy {:.0f} (DeepGEMM 92-98%)", lim.copy_gbps), gbps / lim.copy_gbps});
      }
      default_decode_kernel();
      const double tflops =
          2.0 * double(experts) * t * double(s.n) * double(s.k) / (us * 1e-6) / 1e12;
      if (t >= 16)
        rows.push_back({"  same, rate", "", tflops, "TFLOP/s", us,
                        fmt::format("bf16 peak {:.0f}", lim.bf16_tflops),
                        tflops / lim.bf16_tflops});
    }
  }
}

/// The decode batches of the routed-expert rows: 1, 8 and 64, or the comma-separated list in
/// DEEPINFER_BENCH_ROUTED_BATCHES (e.g. "64", so that a profiler sees only that batch's launches).
std::vector<int> routed_batches() {
  const char* env = std::getenv("DEEPINFER_BENCH_ROUTED_BATCHES");
  if (!env || !*env) return {1, 8, 64};
  std::vector<int> out;
  for (const char* c = env; *c;) {
    char* end = nullptr;
    const long v = std::strtol(c, &end, 10);
    if (end == c || v < 1 || v > 4096) {
      fmt::print(stderr, "DEEPINFER_BENCH_ROUTED_BATCHES='{}': expected batch sizes like 1,8,64\n", env);
      std::exit(2);
    }
    out.push_back(int(v));
    c = *end == ',' ? end + 1 : end;
  }
  return out;
}

/// The routed experts of one decode step as the model runs them (captured: the groups bounded
/// by the batch, the tile hint twice the mean group): `batch` tokens each routed to 6 distinct
/// experts at random over all `experts`, interleaved MXFP4. Weight bytes counted are those of
/// the experts touched; small batches rotate over several routings in one graph so that the
/// touched weights exceed the L2. With `pair` (w1's shape) also w1 and a w3 together
/// (expert_linear_pair): two launches, one (set_wg_gemm_pair 1), one with the pair's splits (2).
void fp4_routed_rows(const limits& lim, std::vector<result_row>& rows, const char* model,
                     const shape& s, int experts, int act, bool pair = false) {
  const weight_matrix w = cuda::with_fp4_layout(device_fp4(std::int64_t(experts) * s.n, s.k, 51),
                                                true);
  const weight_matrix w3 =
      pair ? cuda::with_fp4_layout(device_fp4(std::int64_t(experts) * s.n, s.k, 54), true) : w;
  const double expert_bytes = double(s.n) * double(s.k) * (0.5 + 1.0 / 32.0);
  std::mt19937 rng(52);
  for (const int batch : routed_batches()) {
    const std::int64_t pairs = std::int64_t(batch) * 6;
    struct routing {
      tensor offsets;
      int touched;
    };
    std::vector<routing> routings;
    double touched = 0;
    while (routings.empty() || touched * expert_bytes < double(256 << 20)) {
      std::vector<int> counts(std::size_t(experts), 0);
      for (int b = 0; b < batch; ++b) {
        std::vector<int> picked;
        while (picked.size() < 6) {
          const int e = int(rng() % unsigned(experts));
          if (std::find(picked.begin(), picked.end(), e) == picked.end()) picked.push_back(e);
        }
        for (int e : picked) ++counts[std::size_t(e)];
      }
      tensor off = tensor::empty({experts + 1}, dtype::i32);
      int used = 0;
      off.data<std::int32_t>()[0] = 0;
      for (int e = 0; e < experts; ++e) {
        off.data<std::int32_t>()[e + 1] = off.data<std::int32_t>()[e] + counts[std::size_t(e)];
        used += counts[std::size_t(e)] > 0 ? 1 : 0;
      }
      routings.push_back({off.to(gpu), used});
      touched += used;
    }
    const tensor x = random_device({pairs, s.k}, dtype::f32, 53);
    const ops::expert_linear_params p{act, batch, std::max<std::int64_t>(1, (2 * pairs + experts - 1) / experts)};
    // Past 8 rows per tile (a prefill chunk's groups) wg_gemm walks wide tiles and the others
    // fall back to sm90_block_gemm's shared-memory tiles: those two are compared, in TFLOP/s
    // too (the weights are re-read per 8-token tile, mostly from the L2).
    const bool wide = p.tile_rows_hint > 8;
    auto time_row = [&](const char* name, bool both = false) {
      const double us = median_graph_us([&] {
                          for (const routing& r : routings) {
                            if (both)
                              ops::expert_linear_pair(x, r.offsets, w, w3, p);
                            else
                              ops::expert_linear(x, r.offsets, w, p);
                          }
                        }) /
                        double(routings.size());
      const double bytes = (both ? 2 : 1) * touched / double(routings.size()) * expert_bytes;
      const double gbps = bytes / (us * 1e-6) / 1e9;
      rows.push_back(
          {fmt::format("{} mxfp4 il routed {} x{} b{} {}", model, s.name, experts, batch, name),
           fmt::format("{:.0f} experts N{} K{}", touched / double(routings.size()), s.n, s.k), gbps,
           "GB/s", us, fmt::format("copy {:.0f} GB/s", lim.copy_gbps), gbps / lim.copy_gbps});
      if (wide) {
        const double tflops =
            (both ? 4.0 : 2.0) * double(pairs) * double(s.n) * double(s.k) / (us * 1e-6) / 1e12;
        rows.push_back({"  same, TFLOP/s", "", tflops, "TFLOP/s", us,
                        fmt::format("bf16 peak {:.0f}", lim.bf16_tflops),
                        tflops / lim.bf16_tflops});
      }
    };
    for (const decode_kernel& kernel : decode_kernels) {
      if (&kernel > &decode_kernels[3]) continue;  // wg_gemm (both), stream_gemm, pipe_gemm
      if (wide && kernel.pipe) continue;           // the same tiles as the stream_gemm row
      kernel.select();
      time_row(!wide       ? kernel.name
               : kernel.wg ? (kernel.ring ? "wg_gemm wide tiles ring" : "wg_gemm wide tiles")
                           : "smem tiles");
    }
    if (wide) {  // the wide rows above take 32-token tiles (the default); the 8-token walk
      default_decode_kernel();
      cuda::set_wg_gemm_n32(0);
      time_row("wg_gemm 8-token tiles");
      cuda::set_wg_gemm_n32(1);
    }
    default_decode_kernel();
    if (pair) {
      for (const int mode : {0, 1, 2}) {
        cuda::set_wg_gemm_pair(mode);
        time_row(mode == 0   ? "w1+w3 two launches"
                 : mode == 1 ? "w1+w3 one launch"
                             : "w1+w3 one launch, pair's splits",
                 true);
      }
      cuda::set_wg_gemm_pair(2);
    }
  }
}

/// attention's wo_a (block-diagonal, no activation quantization) at decode batches: the stored
/// codes on fp8_split_gemm (bf16 tensor cores: from 9 rows the warpgroup MMA, or mma.sync as up
/// to 8) and on fp8_gemv (CUDA cores), against cuBLAS on
/// the weight decoded to fp32 (what the model kept before).
void wo_a_rows(const limits& lim, std::vector<result_row>& rows, const char* model,
               std::int64_t groups, std::int64_t out, std::int64_t in, std::int64_t block) {
  const std::size_t bytes = std::size_t(groups * out * in);
  std::vector<weight_matrix> stored, decoded;
  for (int i = 0; i < copies_for(bytes); ++i) {
    stored.push_back(device_fp8(groups * out, in, block, 40 + i));
    decoded.push_back(cuda::dequantize_weight(stored.back(), dtype::f32));
  }
  const bool split_before = cuda::get_split_gemm(), wg_before = cuda::get_split_wg();
  for (const std::int64_t m : {1, 8, 16, 32, 64}) {
    const tensor x = random_device({m, groups, in}, dtype::f32, 41);
    struct path {
      const char* name;
      bool fp8, split, wg;
    };
    for (const path k :
         {path{"fp8_split_gemm", true, true, true},
          path{"fp8_split_gemm mma.sync", true, true, false}, path{"fp8_gemv", true, false, false},
          path{"fp32 cuBLAS", false, false, false}}) {
      if (!k.wg && k.split && m <= 8) continue;  // 1..8 rows: mma.sync either way
      cuda::set_split_gemm(k.split);
      cuda::set_split_wg(k.wg);
      const std::vector<weight_matrix>& ws = k.fp8 ? stored : decoded;
      const double us = median_graph_us([&] {
                          for (const weight_matrix& w : ws) ops::grouped_linear(x, w);
                        }) /
                        double(ws.size());
      const double read = double(k.fp8 ? bytes : 4 * bytes);
      rows.push_back({fmt::format("{} wo_a M={} {}", model, m, k.name),
                      fmt::format("{} x N{} K{} {:.1f} MB", groups, out, in, read / 1e6), us,
                      "us graph", us, fmt::format("copy {:.0f} GB/s", lim.copy_gbps),
                      read / (us * 1e-6) / 1e9 / lim.copy_gbps});
    }
  }
  cuda::set_split_gemm(split_before);
  cuda::set_split_wg(wg_before);
}

/// cuBLASLt's block-scaled FP8 GEMM (V4's 128-blocks) at decode batches of 16, 32 and 64 rows
/// with each candidate its heuristic offers (set_cublaslt_candidate), not only its first choice,
/// and with K splits set onto it (set_cublaslt_splitk: the automatic rule, then 1..16). Each row
/// times the linear (activation quantization included) over weight copies that exceed the L2.
void lt_candidate_rows(const limits& lim, std::vector<result_row>& rows, const shape& s) {
  const std::size_t bytes =
      std::size_t(s.n * s.k) + std::size_t(((s.n + 127) / 128) * ((s.k + 127) / 128));
  std::vector<weight_matrix> ws;
  for (int i = 0; i < copies_for(bytes); ++i) ws.push_back(device_fp8(s.n, s.k, 128, 40 + i));
  cuda::set_gemm_backend(cuda::gemm_backend::cublaslt);
  const int splits_before = cuda::get_cublaslt_splitk();
  for (const std::int64_t m : {16, 32, 64}) {
    const tensor xm = random_device({m, s.k}, dtype::f32, 14);
    cuda::set_cublaslt_candidate(0);
    ops::linear(xm, ws[0], {128});
    const int found = cuda::cublaslt_candidates_found();
    // Each candidate as offered (split -1), then the first with the automatic rule (split 0,
    // the default) and with K split 1..16 ways (forced).
    for (int c = 0; c < found + 6; ++c) {
      const int split = c < found ? -1 : c == found ? 0 : 1 << (c - found - 1);
      cuda::set_cublaslt_candidate(c < found ? c : 0);
      cuda::set_cublaslt_splitk(split);
      const double us = median_graph_us([&] {
                          for (const weight_matrix& w : ws) ops::linear(xm, w, {128});
                        }) /
                        double(ws.size());
      if (!cuda::cublaslt_block_fp8_available()) break;
      const double gbps = double(bytes) / (us * 1e-6) / 1e9;
      rows.push_back(
          {fmt::format("V4 lt candidate {} split {} M={} {}", c < found ? c : 0, split, m, s.name),
           cuda::cublaslt_last_algo(), gbps, "GB/s", us,
           fmt::format("copy {:.0f} GB/s", lim.copy_gbps), gbps / lim.copy_gbps});
    }
  }
  cuda::set_cublaslt_candidate(0);
  cuda::set_cublaslt_splitk(splits_before);
  cuda::set_gemm_backend(cuda::gemm_backend::automatic);
}

}  // namespace

/// The output head (bf16 [vocab, hidden], read as stored) at decode rows: f32_gemv (the
/// default up to cuda::bf16_gemv_default_rows rows) against cuBLAS's bf16 GEMM, as a share of
/// the copy rate. One copy of the weight: it is 20-30 times the L2.
void head_rows(const limits& lim, std::vector<result_row>& rows, const char* model,
               std::int64_t vocab, std::int64_t hidden) {
  const weight_matrix w(random_device({vocab, hidden}, dtype::bf16, 31));
  const double bytes = double(vocab) * double(hidden) * 2.0;
  for (const std::int64_t m : {1, 2, 4, 8}) {
    const tensor x = random_device({m, hidden}, dtype::f32, 32);
    for (const int gemv_rows : {8, 0}) {
      cuda::set_bf16_gemv_rows(gemv_rows);
      const double us = median_graph_us([&] { ops::linear(x, w, {}); });
      const double gbps = bytes / (us * 1e-6) / 1e9;
      rows.push_back(
          {fmt::format("{} head bf16 {} M={}", model, gemv_rows > 0 ? "f32_gemv" : "cuBLAS", m),
           fmt::format("N{} K{} {:.0f} MB", vocab, hidden, bytes / 1e6), gbps, "GB/s", us,
           fmt::format("copy {:.0f} GB/s", lim.copy_gbps), gbps / lim.copy_gbps});
    }
  }
  cuda::set_bf16_gemv_rows(cuda::bf16_gemv_default_rows);
}

void run_gemms(const limits& lim, std::vector<result_row>& rows, bool quick,
               const std::string& filter) {
  auto wanted = [&](const std::string& label) {
    return filter.empty() || label.find(filter) != std::string::npos;
  };
  // V4.1-Flash: hidden 5120, q_lora 1280, 64 heads x 512, o_lora 8 x 1024, MoE 2304; Engram's
  // wkv maps 24 hash columns x 256 to (4 + 1) x hidden.
  const shape v41[] = {{"wq_b", 32768, 1280}, {"wo_b", 5120, 8192}, {"shared_w1", 2304, 5120},
                       {"wq_a", 1280, 5120},  {"wkv", 512, 5120},   {"engram_wkv", 25600, 6144}};
  for (const shape& s : v41)
    if (wanted(std::string("V4.1 fp8 ") + s.name)) fp8_rows(lim, rows, "V4.1", 32, s, quick);
  // V4-Flash: hidden 4096, q_lora 1024, MoE 2048, 128x128 blocks.
  const shape v4[] = {{"wq_b", 32768, 1024}, {"wo_b", 4096, 8192}, {"shared_w1", 2048, 4096}};
  for (const shape& s : v4)
    if (wanted(std::string("V4 fp8 ") + s.name)) fp8_rows(lim, rows, "V4", 128, s, quick);
  if (wanted("V4.1 head")) head_rows(lim, rows, "V4.1", 129280, 5120);
  if (wanted("V4 head")) head_rows(lim, rows, "V4", 129280, 4096);
  if (wanted("V4.1 wo_a")) wo_a_rows(lim, rows, "V4.1", 8, 1024, 4096, 32);
  if (wanted("V4 wo_a")) wo_a_rows(lim, rows, "V4", 8, 1024, 4096, 128);
  if (wanted("V4.1 mxfp4 w1")) fp4_grouped_rows(lim, rows, "V4.1", {"w1", 2304, 5120}, 32, quick);
  if (wanted("V4.1 mxfp4 w2")) fp4_grouped_rows(lim, rows, "V4.1", {"w2", 5120, 2304}, 32, quick);
  if (wanted("V4.1 mxfp4 il routed w1"))
    fp4_routed_rows(lim, rows, "V4.1", {"w1", 2304, 5120}, 384, 32, true);
  if (wanted("V4.1 mxfp4 il routed w2"))
    fp4_routed_rows(lim, rows, "V4.1", {"w2", 5120, 2304}, 384, 32);
  if (wanted("V4 mxfp4 il routed w1"))
    fp4_routed_rows(lim, rows, "V4", {"w1", 2048, 4096}, 256, 128, true);
  if (wanted("V4 mxfp4 il routed w2")) fp4_routed_rows(lim, rows, "V4", {"w2", 4096, 2048}, 256, 128);
  // Every cuBLASLt candidate on V4's decode projections: only when asked for (--filter "V4 lt").
  if (!filter.empty() && std::string("V4 lt candidates").find(filter) != std::string::npos) {
    const shape lt[] = {{"wq_a", 1024, 4096},      {"wkv", 512, 4096},    {"shared_w1", 2048, 4096},
                        {"shared_w2", 4096, 2048}, {"wq_b", 32768, 1024}, {"wo_b", 4096, 8192}};
    for (const shape& s : lt) lt_candidate_rows(lim, rows, s);
  }
}

}  // namespace di::bench
