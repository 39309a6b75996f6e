// Chunked, parallel generation of a planned checkpoint: jobs of whole block rows, per-thread
// buffers, quantization, and positional writes into the shard files.
#include "model/make_model/generate_shards.hpp"

#include "common/error.hpp"
#include "model/make_model/progress.hpp"
#include "model/make_model/quantize.hpp"
#include "model/make_model/safetensors_writer.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>

namespace di {

namespace {

/// Elements drawn per job (about 4 MB of fp32 per thread).
constexpr std::int64_t job_elements = std::int64_t(1) << 20;

/// Rows [row0, row0 + num_rows) of one planned tensor.
struct chunk_job {
  std::size_t tensor = 0;
  std::int64_t row0 = 0;
  std::int64_t num_rows = 0;
};

/// Where a planned tensor's weight and scale bytes go.
struct tensor_target {
  tensor_slot weight;
  tensor_slot scale;
  bool has_scale = false;
};

std::vector<chunk_job> make_jobs(const model_plan& plan) {
  std::vector<chunk_job> jobs;
  for (std::size_t i = 0; i < plan.tensors.size(); ++i) {
    const planned_tensor& t = plan.tensors[i];
    const std::int64_t unit = t.storage == storage_kind::fp8_blocks ? t.block.rows : 1;
    const std::int64_t rows =
        std::max(unit, job_elements / std::max<std::int64_t>(t.cols, 1) / unit * unit);
    for (std::int64_t r = 0; r < t.rows; r += rows)
      jobs.push_back({i, r, std::min(rows, t.rows - r)});
  }
  // Largest tensors first keeps threads busy to the end (dynamic scheduling fills the tail).
  std::stable_sort(jobs.begin(), jobs.end(), [&](const chunk_job& a, const chunk_job& b) {
    return plan.tensors[a.tensor].rows * plan.tensors[a.tensor].cols >
           plan.tensors[b.tensor].rows * plan.tensors[b.tensor].cols;
  });
  return jobs;
}

/// Per-thread scratch space, reused across jobs.
struct job_buffers {
  std::vector<float> values;
  std::vector<std::uint8_t> bytes;
  std::vector<std::uint8_t> scales;
  std::vector<std::int64_t> indices;
};

std::span<const std::uint8_t> as_bytes(const void* data, std::size_t size) {
  return {static_cast<const std::uint8_t*>(data), size};
}

/// Draws, quantizes and writes one job (weight and scale live in `shard`); returns the bytes
/// it wrote.
std::uint64_t run_job(const chunk_job& job, const planned_tensor& t, const init_rule& rule,
                      const tensor_target& target, safetensors_writer& shard, job_buffers& buf) {
  const std::int64_t n = job.num_rows * t.cols;
  if (rule.type == init_rule::kind::hash_routing) {
    buf.indices.resize(std::size_t(n));
    generate_routing_rows(rule, job.row0, job.num_rows, t.cols, buf.indices.data());
    shard.write(target.weight.index, std::uint64_t(job.row0 * t.cols) * 8,
                as_bytes(buf.indices.data(), std::size_t(n) * 8));
    return std::uint64_t(n) * 8;
  }
  buf.values.resize(std::size_t(n));
  generate_rows(rule, job.row0, job.num_rows, t.cols, buf.values.data());
  if (t.storage == storage_kind::plain) {
    const std::size_t elem = dtype_size(t.weight.type);
    if (t.weight.type == dtype::f32) {
      shard.write(target.weight.index, std::uint64_t(job.row0 * t.cols) * 4,
                  as_bytes(buf.values.data(), std::size_t(n) * 4));
    } else {
      DI_CHECK(t.weight.type == dtype::bf16, "make-model: cannot store '{}' as {}", t.weight.name,
               dtype_name(t.weight.type));
      buf.bytes.resize(std::size_t(n) * 2);
      convert_to_bf16(buf.values.data(), n, buf.bytes.data());
      shard.write(target.weight.index, std::uint64_t(job.row0 * t.cols) * 2, buf.bytes);
    }
    return std::uint64_t(n) * elem;
  }
  const bool fp4 = t.storage == storage_kind::fp4_blocks;
  const std::int64_t scale_cols = (t.cols + t.block.cols - 1) / t.block.cols;
  const std::int64_t scale_rows = (job.num_rows + t.block.rows - 1) / t.block.rows;
  buf.bytes.resize(std::size_t(fp4 ? n / 2 : n));
  buf.scales.resize(std::size_t(scale_rows * scale_cols));
  if (fp4) {
    quantize_fp4_blocks(buf.values.data(), job.num_rows, t.cols, buf.bytes.data(),
                        buf.scales.data());
  } else {
    quantize_fp8_blocks(buf.values.data(), job.num_rows, t.cols, t.block, buf.bytes.data(),
                        buf.scales.data());
  }
  shard.write(target.weight.index, std::uint64_t(job.row0 * t.cols / (fp4 ? 2 : 1)), buf.bytes);
  shard.write(target.scale.index, std::uint64_t(job.row0 / t.block.rows * scale_cols), buf.scales);
  return buf.bytes.size() + buf.scales.size();
}

std::vector<tensor_target> make_targets(const model_plan& plan) {
  std::vector<tensor_target> targets;
  for (const auto& t : plan.tensors) {
    tensor_target target;
    target.weight = plan.slots.at(t.weight.name);
    if (t.scale) {
      target.scale = plan.slots.at(t.scale->name);
      target.has_scale = true;
      DI_CHECK(target.scale.shard == target.weight.shard,
               "planning: '{}' and its scale are in "
               "different shards",
               t.weight.name);
    }
    targets.push_back(target);
  }
  return targets;
}

}  // namespace

void generate_shards(const shard_generation_params& p) {
  const model_plan& plan = *p.plan;
  std::vector<std::unique_ptr<safetensors_writer>> writers;
  for (std::size_t s = 0; s < plan.shard_files.size(); ++s)
    writers.push_back(std::make_unique<safetensors_writer>(p.out_dir / plan.shard_files[s],
                                                           plan.shard_tensors[s], p.metadata));
  std::vector<init_rule> rules;
  for (const auto& t : plan.tensors) rules.push_back(make_init_rule(t.weight, *p.context));
  const std::vector<tensor_target> targets = make_targets(plan);
  const std::vector<chunk_job> jobs = make_jobs(plan);
  constexpr std::uint64_t progress_threshold = std::uint64_t(1) << 30;
  progress_bar bar(plan.total_bytes, "make-model",
                   p.show_progress && plan.total_bytes >= progress_threshold);
  std::exception_ptr error;
  std::mutex error_mutex;
  std::atomic<bool> failed{false};
#pragma omp parallel
  {
    job_buffers buf;
#pragma omp for schedule(dynamic, 1)
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      if (failed) continue;
      try {
        DI_CHECK(p.cancel == nullptr || *p.cancel == 0, "interrupted");
        const chunk_job& job = jobs[j];
        const tensor_target& target = targets[job.tensor];
        safetensors_writer& shard = *writers[std::size_t(target.weight.shard)];
        bar.advance(run_job(job, plan.tensors[job.tensor], rules[job.tensor], target, shard, buf));
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        failed = true;
      }
    }
  }
  if (error) std::rethrow_exception(error);
  bar.finish();
  for (auto& w : writers) w->finish();
}

}  // namespace di
