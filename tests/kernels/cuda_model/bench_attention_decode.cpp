// Attention decode benchmark beside the anchor: V4.1-like sparse attention (64 heads, head
// dim 512, a 128-row FP8 window + the top 512 of 4096 FP4 compressed entries per sequence,
// sink), one query token per sequence, at batch 1/32/64/128. Prints our time with L2 flushed
// before every launch (as DeepSeek's FlashMLA figures were measured) and back to back, the
// bytes one step must read and write, achieved GB/s, the copy bandwidth measured in the same
// run, and the ratio to FlashMLA sparse FP8 decode on this H200 (14.5 / 26.6 / 45 / 49 us).
// --splits-sweep adds each batch's time with the row list split 1, 2, 3, 4, 5, 6, 8 and 10 ways
// (the default picks by a wave model, attention_splits). A second table times V4's rows
// (448 FP8 + 7 scales + 64 fp32): the cache layout's 720-byte padded rows against 711-byte ones.
//   bench_attention_decode [--iters N] [--batch B] [--json FILE] [--splits-sweep]
#include "kernels/cache_format.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_model_ops.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace di;

constexpr int heads = 64, dim = 512, window = 128, topk = 512, entries = 4096;

struct anchor {
  int batch;
  double us;
};
constexpr anchor anchors[] = {{1, 14.5}, {32, 26.6}, {64, 45.0}, {128, 49.0}};

struct dev {
  void* p = nullptr;
  explicit dev(std::size_t n) { CUDA_CHECK(cudaMalloc(&p, n < 16 ? 16 : n)); }
  ~dev() { cudaFree(p); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Device-to-device copy bandwidth (bytes read + written per second) on 1 GiB.
double copy_bandwidth() {
  const std::size_t n = std::size_t(1) << 30;
  dev a(n), b(n);
  CUDA_CHECK(cudaMemset(a.p, 1, n));
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<double> t;
  for (int i = 0; i < 6; ++i) {
    CUDA_CHECK(cudaEventRecord(e0));
    CUDA_CHECK(cudaMemcpyAsync(b.p, a.p, n, cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaEventRecord(e1));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (i > 0) t.push_back(ms * 1e-3);
  }
  return 2.0 * double(n) / median(t);
}

struct result {
  int batch, splits;
  double flushed_us, hot_us, bytes;
};

/// The row formats one run attends: V4.1's (FP8 window, FP4 compressed entries; the anchor's
/// shape) or V4's (both lists of 448 FP8 + 7 scales + 64 fp32 rope values, padded or not).
struct rows_shape {
  cache_row_format wf, cf;
};
const rows_shape v41_rows{{cache_quant::fp8_ue8m0, 32, dim, 0},
                          {cache_quant::fp4_e4m3, 16, dim, 0}};
rows_shape v4_rows(int row_align) {
  const cache_row_format f{cache_quant::fp8_ue8m0, 64, dim - 64, 64, row_align};
  return {f, f};
}

result run(int batch, int iters, void* flush, std::size_t flush_bytes, int num_splits = 0,
           const rows_shape& shape = v41_rows) {
  const cache_row_format& wf = shape.wf;
  const cache_row_format& cf = shape.cf;
  std::mt19937 rng(1234 + batch);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  // Random packed rows: encode random f32 rows on the device (the codec under test elsewhere).
  const std::int64_t wrows = std::int64_t(batch) * window, crows = std::int64_t(batch) * entries;
  std::vector<float> host(std::size_t(std::max(wrows, crows)) * dim);
  for (float& v : host) v = nd(rng);
  dev src(host.size() * 4), win(std::size_t(wrows) * wf.row_bytes()),
      comp(std::size_t(crows) * cf.row_bytes());
  CUDA_CHECK(cudaMemcpy(src.p, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
  cuda::launch_encode_cache_rows({src.as<float>(), win.as<std::uint8_t>(), nullptr, wrows, wf}, nullptr);
  cuda::launch_encode_cache_rows({src.as<float>(), comp.as<std::uint8_t>(), nullptr, crows, cf}, nullptr);
  std::vector<float> q(std::size_t(batch) * heads * dim), sinks(heads);
  for (float& v : q) v = nd(rng);
  for (float& v : sinks) v = nd(rng);
  std::vector<std::int32_t> widx(std::size_t(batch) * window), cidx(std::size_t(batch) * topk);
  std::vector<std::int32_t> perm(entries);
  for (int b = 0; b < batch; ++b) {
    for (int j = 0; j < window; ++j) widx[std::size_t(b) * window + j] = b * window + j;
    for (int j = 0; j < entries; ++j) perm[std::size_t(j)] = j;
    std::shuffle(perm.begin(), perm.end(), rng);
    std::sort(perm.begin(), perm.begin() + topk);
    for (int j = 0; j < topk; ++j) cidx[std::size_t(b) * topk + j] = b * entries + perm[std::size_t(j)];
  }
  dev dq(q.size() * 4), dout(q.size() * 4), dsinks(heads * 4), dwidx(widx.size() * 4),
      dcidx(cidx.size() * 4);
  CUDA_CHECK(cudaMemcpy(dq.p, q.data(), q.size() * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dsinks.p, sinks.data(), heads * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dwidx.p, widx.data(), widx.size() * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dcidx.p, cidx.data(), cidx.size() * 4, cudaMemcpyHostToDevice));

  cuda::attention_params p;
  p.q = dq.as<float>();
  p.out = dout.as<float>();
  p.sinks = dsinks.as<float>();
  p.tokens = batch;
  p.heads = heads;
  p.dim = dim;
  p.softmax_scale = 1.0f / std::sqrt(float(dim));
  p.window = {win.p, wrows, true, wf};
  p.window_idx = dwidx.as<std::int32_t>();
  p.window_k = window;
  p.extra = {comp.p, crows, true, cf};
  p.extra_idx = dcidx.as<std::int32_t>();
  p.extra_k = topk;
  p.num_splits = num_splits;  // 0: attention_splits' choice
  const std::size_t ws = cuda::attention_workspace_bytes(p);
  dev work(ws);
  p.workspace = work.p;
  p.workspace_bytes = ws;

  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  for (int i = 0; i < 5; ++i) cuda::launch_attention(p, nullptr);
  std::vector<double> flushed, hot;
  for (int i = 0; i < iters; ++i) {
    CUDA_CHECK(cudaMemsetAsync(flush, i & 0xff, flush_bytes));
    CUDA_CHECK(cudaEventRecord(e0));
    cuda::launch_attention(p, nullptr);
    CUDA_CHECK(cudaEventRecord(e1));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    flushed.push_back(ms * 1e3);
  }
  const int reps = 20;
  for (int i = 0; i < iters / 4 + 1; ++i) {
    CUDA_CHECK(cudaEventRecord(e0));
    for (int r = 0; r < reps; ++r) cuda::launch_attention(p, nullptr);
    CUDA_CHECK(cudaEventRecord(e1));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    hot.push_back(ms * 1e3 / reps);
  }
  CUDA_CHECK(cudaGetLastError());
  // Bytes a step must move: the named rows, indices, q and out (f32), sinks.
  const double bytes = double(batch) * (window * double(wf.row_bytes()) + topk * double(cf.row_bytes()) +
                                        4.0 * (window + topk) + 2.0 * heads * dim * 4.0) +
                       heads * 4.0;
  return {batch, cuda::attention_splits(p), median(flushed), median(hot), bytes};
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 50;
  std::string json_path;
  int only_batch = 0;
  bool sweep = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc) iters = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) json_path = argv[++i];
    if (std::strcmp(argv[i], "--batch") == 0 && i + 1 < argc) only_batch = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--splits-sweep") == 0) sweep = true;
  }
  try {
    const double bw = copy_bandwidth();
    const std::size_t flush_bytes = std::size_t(256) << 20;
    dev flush(flush_bytes);
    std::vector<result> rs;
    std::vector<anchor> used;
    for (const anchor& a : anchors) {
      if (only_batch && a.batch != only_batch) continue;
      rs.push_back(run(a.batch, iters, flush.p, flush_bytes));
      used.push_back(a);
    }
    fmt::print("== bench_attention_decode ==\n");
    fmt::print(
        "attention decode: {} heads x {}, window {} (FP8) + top-{} of {} (FP4), sink; "
        "copy bandwidth {:.0f} GB/s; splits merged {}\n",
        heads, dim, window, topk, entries, bw * 1e-9,
        cuda::get_attention_cluster() > 0    ? "in thread-block clusters (DEEPINFER_ATTN_CLUSTER=1)"
        : cuda::get_attention_cluster() == 0 ? "by the combine kernel (DEEPINFER_ATTN_CLUSTER=0)"
                                             : "in clusters when two, else by the combine kernel");
    fmt::print("{:>6} {:>7} {:>12} {:>10} {:>10} {:>9} {:>10} {:>12}\n", "batch", "splits",
               "flushed us", "hot us", "MB/step", "GB/s", "anchor us", "ours/anchor");
    for (std::size_t i = 0; i < rs.size(); ++i) {
      const result& r = rs[i];
      fmt::print("{:>6} {:>7} {:>12.2f} {:>10.2f} {:>10.2f} {:>9.0f} {:>10.1f} {:>12.2f}\n", r.batch,
                 r.splits, r.flushed_us, r.hot_us, r.bytes * 1e-6, r.bytes / (r.flushed_us * 1e-6) * 1e-9,
                 used[i].us, r.flushed_us / used[i].us);
    }
    // V4's rows beside it (no anchor: FlashMLA's figures are V4.1-shaped): the layout's
    // 16-byte padded rows (staged) against the packed 711-byte rows (decoded from global
    // memory), same batches, same run.
    fmt::print("V4 rows (448 FP8 + 7 scales + 64 fp32): window {} + top-{} of {}, flushed us\n",
               window, topk, entries);
    fmt::print("{:>6} {:>7} {:>14} {:>9} {:>14} {:>9} {:>8}\n", "batch", "splits", "720 B rows us",
               "GB/s", "711 B rows us", "GB/s", "711/720");
    for (const anchor& a : used) {
      const result padded = run(a.batch, iters, flush.p, flush_bytes, 0, v4_rows(16));
      const result packed = run(a.batch, iters, flush.p, flush_bytes, 0, v4_rows(1));
      fmt::print("{:>6} {:>7} {:>14.2f} {:>9.0f} {:>14.2f} {:>9.0f} {:>8.2f}\n", a.batch,
                 padded.splits, padded.flushed_us, padded.bytes / (padded.flushed_us * 1e-6) * 1e-9,
                 packed.flushed_us, packed.bytes / (packed.flushed_us * 1e-6) * 1e-9,
                 packed.flushed_us / padded.flushed_us);
    }
    if (sweep) {
      fmt::print("splits sweep (flushed us; * = the default's choice):\n{:>6}", "batch");
      const int candidates[] = {1, 2, 3, 4, 5, 6, 8, 10};
      for (int c : candidates) fmt::print(" {:>8}", c);
      fmt::print("\n");
      for (const result& r : rs) {
        fmt::print("{:>6}", r.batch);
        for (int c : candidates) {
          const result t = run(r.batch, iters, flush.p, flush_bytes, c);
          fmt::print(" {:>7.2f}{}", t.flushed_us, t.splits == r.splits ? "*" : " ");
        }
        fmt::print("\n");
      }
    }
    if (!json_path.empty()) {
      std::FILE* f = std::fopen(json_path.c_str(), "w");
      DI_CHECK(f != nullptr, "cannot write {}", json_path);
      fmt::print(f, "[");
      for (std::size_t i = 0; i < rs.size(); ++i)
        fmt::print(f, "{}{{\"bench\":\"attention_decode\",\"batch\":{},\"splits\":{},"
                      "\"flushed_us\":{:.3f},\"hot_us\":{:.3f},\"bytes\":{:.0f},\"anchor_us\":{},"
                      "\"copy_gbps\":{:.1f}}}",
                   i ? "," : "", rs[i].batch, rs[i].splits, rs[i].flushed_us, rs[i].hot_us,
                   rs[i].bytes, used[i].us, bw * 1e-9);
      fmt::print(f, "]\n");
      std::fclose(f);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_attention_decode: {}\n", e.what());
    return 1;
  }
  return 0;
}
