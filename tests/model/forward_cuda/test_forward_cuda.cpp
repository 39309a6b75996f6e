// The whole V4.1 / V4 forward on the GPU (label `gpu`): the golden checkpoints under
// $DEEPINFER_SHARED_DIR/testdata/golden (those present: a device call may carry only some)
// run on CUDA weights in both device layouts -- `stored` (FP8/FP4 GEMMs) and `f32` (exactly
// decoded weights on SGEMM) -- for the prompt's logits and teacher-forced decode. Attention
// multiplies bf16/fp16 operands on the tensor cores in both layouts, so both are held to the
// README's bf16 rules (variant A: cos >= 0.99, mean|d| <= 0.6, argmax where the reference
// margin >= 1, one off row allowed and reported -- the README's near-tie clause; variant B:
// cos >= 0.995, mean|d| <= 0.3), and f32 variant B to cos >= 0.9999; and a
// the make-model presets tiny-v4 and tiny-v41 (generated here) against the CPU engine, prefill
// of three prompts plus batched decode steps; and decode steps through CUDA graphs (padded
// batches, captured then replayed) against the same model run eagerly.
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/kernel_attributes.hpp"
#include "kernels/cuda/stream.hpp"
#include "kernels/ops.hpp"
#include "model/checkpoint/safetensors.hpp"
#include "model/forward/detail/decode_graphs.hpp"
#include "model/forward/detail/forward_pass.hpp"
#include "model/make_model/make_model.hpp"
#include "model/runner/cpu_model_runner.hpp"
#include "tests/model/forward/golden.hpp"

#include <doctest/doctest.h>

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

namespace di::test {
namespace {

const device gpu{device_kind::cuda, 0};

struct rule {
  double min_cos;
  double max_mean_abs;
};

/// Largest minus second largest logit of a row.
double margin_of(const float* v, std::int64_t n) {
  float a = -1e30f, b = -1e30f;
  for (std::int64_t i = 0; i < n; ++i) {
    if (v[i] > a) {
      b = a;
      a = v[i];
    } else if (v[i] > b) {
      b = v[i];
    }
  }
  return double(a) - double(b);
}

/// The golden model `name` on the GPU in `format`, variant A (act_quant) or B.
std::unique_ptr<deepseek_model> gpu_model(const std::string& name, bool act_quant,
                                          device_weight_format format) {
  golden_case& g = golden(name);  // the CPU case: its hasher and expected outputs
  auto m = deepseek_model::load(shared_path("testdata/golden/" + name), {act_quant});
  if (g.model->hasher() != nullptr) {
    m->set_engram_hasher(std::make_shared<const engram_hasher>(*g.model->hasher()));
  }
  m->to_device(gpu, format);
  return m;
}

/// Prefill logits at the golden positions vs `key`; returns the worst cosine.
double check_prefill(const std::string& name, const deepseek_model& m, const std::string& key,
                     const rule& r, const std::string& label) {
  golden_case& g = golden(name);
  const std::vector<std::int64_t> ids = g.i64("input_ids"), rows = g.i64("positions");
  kv_block_pool pool(m.layout(), 64, gpu);
  sequence_state state(pool, 1024);
  std::vector<std::int64_t> positions;
  forward_request req = request_for(state, ids, positions, rows);
  if (m.config().is_v41()) {
    const tensor_view& h = g.expected->get("engram_hash_ids");
    req.engram_hash_ids = tensor::view_of(h.bytes.data(), tensor_shape(h.shape), dtype::i64);
  }
  const forward_output out = run_one(m, std::move(req));
  const std::int64_t vocab = m.config().vocab_size;
  double worst_cos = 1.0, worst_mean = 0.0, worst_max = 0.0;
  int argmax_checked = 0, argmax_agree = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::vector<float> want = g.f32_row(key, std::int64_t(i));
    const float* got = out.logits.data<float>() + std::int64_t(i) * vocab;
    const row_figures f = compare(got, want.data(), std::size_t(vocab));
    worst_cos = std::min(worst_cos, f.cosine);
    worst_mean = std::max(worst_mean, f.mean_abs);
    worst_max = std::max(worst_max, f.max_abs);
    if (margin_of(want.data(), vocab) >= 1.0) {
      ++argmax_checked;
      argmax_agree += argmax(got, std::size_t(vocab)) == argmax(want.data(), std::size_t(vocab));
    }
  }
  MESSAGE(
      fmt::format("GPU {} prefill {}: worst cos {:.6f}, worst mean|d| {:.4f}, max|d| {:.4f}, "
                  "argmax {}/{} (margin >= 1)",
                  label, key, worst_cos, worst_mean, worst_max, argmax_agree, argmax_checked));
  CHECK(worst_cos >= r.min_cos);
  CHECK(worst_mean <= r.max_mean_abs);
  if (argmax_agree != argmax_checked)
    MESSAGE(fmt::format("GPU {} prefill {}: {} row(s) with margin >= 1 differ in argmax", label,
                        key, argmax_checked - argmax_agree));
  CHECK(argmax_agree >= argmax_checked - 1);
  return worst_cos;
}

/// Teacher-forced decode along the reference's greedy path (variant A keys).
void check_decode(const std::string& name, const deepseek_model& m, const rule& r,
                  const std::string& label) {
  golden_case& g = golden(name);
  const std::vector<std::int64_t> ids = g.i64("input_ids"), greedy = g.i64("greedy_ids");
  const std::vector<std::int64_t> steps = g.i64("decode_steps");
  const std::vector<float> margins = g.f32("greedy_margins");
  const std::int64_t vocab = m.config().vocab_size;
  kv_block_pool pool(m.layout(), 64, gpu);
  sequence_state state(pool, 1024);
  std::vector<std::int64_t> pos;
  forward_output out = run_one(m, request_for(state, ids, pos, {std::int64_t(ids.size()) - 1}));
  int checked = 0, agree = 0;
  double worst_cos = 1.0, worst_mean = 0.0;
  for (std::size_t k = 0; k < greedy.size(); ++k) {
    if (k > 0) {
      std::vector<std::int64_t> p, token{greedy[k - 1]};
      out = run_one(m, request_for(state, token, p, {0}));
    }
    const float* got = out.logits.data<float>();
    if (margins[k] >= 1.0f) {
      ++checked;
      agree += argmax(got, std::size_t(vocab)) == greedy[k];
    }
    for (std::size_t j = 0; j < steps.size(); ++j) {
      if (steps[j] != std::int64_t(k)) continue;
      const std::vector<float> want = g.f32_row("decode_logits", std::int64_t(j));
      const row_figures f = compare(got, want.data(), want.size());
      worst_cos = std::min(worst_cos, f.cosine);
      worst_mean = std::max(worst_mean, f.mean_abs);
    }
  }
  MESSAGE(
      fmt::format("GPU {} teacher-forced decode: argmax {}/{} (margin >= 1), decode_logits "
                  "worst cos {:.6f}, worst mean|d| {:.4f}",
                  label, agree, checked, worst_cos, worst_mean));
  CHECK(agree == checked);
  CHECK(worst_cos >= r.min_cos);
  CHECK(worst_mean <= r.max_mean_abs);
}

bool have_golden(const std::string& name) {
  const bool ok = std::filesystem::exists(shared_path("testdata/golden/" + name + "/config.json"));
  if (!ok) MESSAGE(fmt::format("golden {} not present here: not run", name));
  return ok;
}

void golden_suite(const std::string& name) {
  if (!have_golden(name)) return;
  const rule bf16_a{0.99, 0.6}, bf16_b{0.995, 0.3}, fp32_b{0.9999, 0.05};
  {
    auto m = gpu_model(name, true, device_weight_format::stored);
    check_prefill(name, *m, "logits_last", bf16_a, name + " stored A");
    check_decode(name, *m, bf16_a, name + " stored A");
    forward_options graphs = m->options();
    graphs.cuda_graphs = true;
    m->set_options(graphs);
    check_decode(name, *m, bf16_a, name + " stored A, CUDA graphs");
    MESSAGE(fmt::format("{} stored A: {} graph pieces captured{}", name, m->captured_graphs(),
                        m->graph_failure().empty() ? "" : "; capture failed: " + m->graph_failure()));
    CHECK(m->captured_graphs() > 0);
  }
  {
    auto m = gpu_model(name, false, device_weight_format::stored);
    check_prefill(name, *m, "logits_last_noactq", bf16_b, name + " stored B");
  }
  {
    auto m = gpu_model(name, true, device_weight_format::f32);
    check_prefill(name, *m, "logits_last", bf16_a, name + " f32 A");
    check_decode(name, *m, bf16_a, name + " f32 A");
  }
  {
    auto m = gpu_model(name, false, device_weight_format::f32);
    check_prefill(name, *m, "logits_last_noactq", fp32_b, name + " f32 B");
  }
}

TEST_CASE("GPU forward: golden v41_public") {
  golden_suite("v41_public");
}
TEST_CASE("GPU forward: golden v4_public") {
  golden_suite("v4_public");
}

/// Logits of `batch` sequences after a prefill of distinct prompts (prompt - stagger * b
/// tokens) and `steps` batched decode steps (each step's logits appended), on `m` with states
/// on `dev`; with `slots`, the states live in the pool's slot arena (batched decode).
std::vector<float> run_batch(const deepseek_model& m, device dev, int batch, int prompt,
                             int steps, int slots = 0, int stagger = 7) {
  kv_block_pool pool(m.layout(), 64, dev, slots);
  std::vector<std::unique_ptr<sequence_state>> states;
  std::vector<std::vector<std::int64_t>> ids(static_cast<std::size_t>(batch));
  std::vector<std::vector<std::int64_t>> pos(static_cast<std::size_t>(batch));
  for (int b = 0; b < batch; ++b) {
    states.push_back(std::make_unique<sequence_state>(pool, 1024));
    for (int t = 0; t < prompt - stagger * b; ++t)
      ids[std::size_t(b)].push_back(100 + (t * 37 + b * 11) % 5000);
  }
  std::vector<float> logits;
  for (int s = 0; s <= steps; ++s) {
    std::vector<forward_request> reqs;
    for (int b = 0; b < batch; ++b) {
      if (s > 0) ids[std::size_t(b)] = {200 + s * 13 + b};
      reqs.push_back(request_for(*states[std::size_t(b)], ids[std::size_t(b)], pos[std::size_t(b)],
                                 {std::int64_t(ids[std::size_t(b)].size()) - 1}));
    }
    for (const forward_output& o : m.forward(reqs)) {
      // logits_to_host off: the step's logits come back on the device
      CHECK(o.logits.dev().kind == (m.options().logits_to_host ? device_kind::cpu : dev.kind));
      const tensor host = o.logits.to(cpu_device);
      logits.insert(logits.end(), host.data<float>(), host.data<float>() + host.numel());
    }
  }
  return logits;
}

/// Logit rows of `got` against `want` ([rows, vocab] each, the same size -- REQUIREd): the worst
/// row cosine, how many rows agree on the argmax, and the row count.
struct rows_figures {
  double worst_cos = 1.0;
  int argmax_agree = 0;
  int rows = 0;
};

rows_figures rows_against(const std::vector<float>& got, const std::vector<float>& want,
                          std::int64_t vocab) {
  REQUIRE(got.size() == want.size());
  rows_figures f;
  for (std::size_t r = 0; r * std::size_t(vocab) < want.size(); ++r, ++f.rows) {
    const float* a = got.data() + r * std::size_t(vocab);
    const float* b = want.data() + r * std::size_t(vocab);
    f.worst_cos = std::min(f.worst_cos, compare(a, b, std::size_t(vocab)).cosine);
    f.argmax_agree += argmax(a, std::size_t(vocab)) == argmax(b, std::size_t(vocab));
  }
  return f;
}

/// The bundled tokenizer: beside the working directory (a device call runs in the repo root)
/// or in the source tree this test was built from.
std::filesystem::path tokenizer_dir() {
  const std::filesystem::path rel = std::filesystem::path("assets") / bundled_tokenizer_dir;
  if (std::filesystem::exists(rel / "tokenizer.json")) return rel;
  return source_dir() / rel;
}

TEST_CASE("GPU forward: make-model presets against the CPU engine (prefill + batched decode)") {
  temp_dir tmp("gpu-forward");
  for (const char* preset : {"tiny-v4", "tiny-v41"}) {
    const std::string dir = (tmp.path() / preset).string();
    make_model({.preset = preset,
                .out_dir = dir,
                .tokenizer_dir = tokenizer_dir(),
                .show_progress = false});
    const tok::tokenizer tokenizer = tok::tokenizer::from_dir(dir);
    for (bool act_quant : {true, false}) {
      auto cpu = deepseek_model::load(dir, {act_quant});
      attach_engram_hasher(*cpu, tokenizer);
      const std::int64_t vocab = cpu->config().vocab_size;
      const std::vector<float> want = run_batch(*cpu, cpu_device, 3, 150, 4);
      for (device_weight_format f : {device_weight_format::f32, device_weight_format::stored}) {
        auto m = deepseek_model::load(dir, {act_quant});
        attach_engram_hasher(*m, tokenizer);
        m->to_device(gpu, f);
        const std::vector<float> got = run_batch(*m, gpu, 3, 150, 4);
        const auto [worst, agree, rows] = rows_against(got, want, vocab);
        const char* label = f == device_weight_format::f32 ? "f32" : "stored";
        MESSAGE(
            fmt::format("{} variant {} GPU {} vs CPU: worst cos {:.6f} over {} rows, argmax "
                        "{}/{}",
                        preset, act_quant ? "A" : "B", label, worst, rows, agree, rows));
        CHECK(worst >= (act_quant ? 0.99 : 0.999));
      }
    }
  }
}

/// Rewrites every hash-routed layer's `ffn.gate.tid2eid` in the checkpoint at `dir` so that
/// each token names each expert twice: row [0, 0, 1, 1, ...] for every token (what make-model
/// never writes: it draws distinct experts). Returns how many tables it rewrote.
int repeat_hash_routes(const std::filesystem::path& dir) {
  int patched = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    if (f.path().extension() != ".safetensors") continue;
    std::vector<std::uint8_t> bytes(std::filesystem::file_size(f.path()));
    {
      std::ifstream in(f.path(), std::ios::binary);
      in.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(bytes.size()));
      REQUIRE(in.good());
    }
    const safetensors_header h = parse_safetensors_header(bytes, f.path().string());
    bool changed = false;
    for (const tensor_entry& t : h.tensors) {
      if (!t.name.ends_with("ffn.gate.tid2eid")) continue;
      REQUIRE((t.type == dtype::i64 && t.shape.size() == 2 && t.shape[1] >= 2));
      const std::int64_t rows = t.shape[0], k = t.shape[1];
      std::uint8_t* table = bytes.data() + h.data_offset + t.begin;
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < k; ++c) {
          const std::int64_t e = c / 2;
          std::memcpy(table + (r * k + c) * 8, &e, 8);
        }
      changed = true;
      ++patched;
    }
    if (!changed) continue;
    std::ofstream out(f.path(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    REQUIRE(out.good());
  }
  return patched;
}

TEST_CASE(
    "GPU forward: a hash-routed table naming an expert twice per token gives the CPU's logits") {
  // moe_weights::route_repeats (session 50): the expert GEMM's row bound is tokens x the most
  // routes one token gives one expert. Here every token routes to expert 0 twice (and 1 twice,
  // ...), so expert 0's group holds 2 rows per token: 6 in an eager 3-sequence decode step (a
  // bound of 3 tokens would leave 3 uncomputed), 8 in a step captured at the padded size 4.
  // (tiny-v4: layers 0-2 hash-routed; tiny-v41 has no hash-routed layer.)
  temp_dir tmp("gpu-route-repeats");
  for (const char* preset : {"tiny-v4"}) {
    const std::filesystem::path dir = tmp.path() / preset;
    make_model({.preset = preset,
                .out_dir = dir.string(),
                .tokenizer_dir = tokenizer_dir(),
                .show_progress = false});
    const int tables = repeat_hash_routes(dir);
    REQUIRE(tables > 0);
    const tok::tokenizer tokenizer = tok::tokenizer::from_dir(dir.string());
    auto cpu = deepseek_model::load(dir.string(), {true});
    attach_engram_hasher(*cpu, tokenizer);
    const std::int64_t vocab = cpu->config().vocab_size;
    const std::vector<float> want = run_batch(*cpu, cpu_device, 3, 150, 4);
    for (bool graphs : {false, true}) {
      auto m = deepseek_model::load(dir.string(), {true});
      attach_engram_hasher(*m, tokenizer);
      m->to_device(gpu, device_weight_format::stored);
      forward_options o = m->options();
      o.cuda_graphs = graphs;
      m->set_options(o);
      const std::vector<float> got = run_batch(*m, gpu, 3, 150, 4);
      if (graphs) CHECK(m->graph_failure().empty());
      const auto [worst, agree, rows] = rows_against(got, want, vocab);
      MESSAGE(
          fmt::format("{} ({} tables with repeats) graphs {}: GPU vs CPU worst cos {:.6f} "
                      "over {} rows, argmax {}/{}",
                      preset, tables, graphs, worst, rows, agree, rows));
      CHECK(worst >= 0.99);
    }
  }
}

/// make-model preset `preset` generated under `tmp`, loaded on the GPU (stored weights,
/// variant A) with its Engram hasher.
std::unique_ptr<deepseek_model> gpu_preset(const temp_dir& tmp, const char* preset) {
  const std::string dir = (tmp.path() / preset).string();
  make_model(
      {.preset = preset, .out_dir = dir, .tokenizer_dir = tokenizer_dir(), .show_progress = false});
  auto m = deepseek_model::load(dir, {true});
  attach_engram_hasher(*m, tok::tokenizer::from_dir(dir));
  m->to_device(gpu, device_weight_format::stored);
  return m;
}

TEST_CASE("GPU forward: decode steps through CUDA graphs give the eager logits") {
  temp_dir tmp("gpu-graphs");
  for (const char* preset : {"tiny-v4", "tiny-v41"}) {
    auto m = gpu_preset(tmp, preset);
    const std::int64_t vocab = m->config().vocab_size;
    // 3 and 5 sequences pad to the captured sizes 4 and 8; 1 runs unpadded; 12 decode steps
    // cross compression boundaries (entries appended inside the eager attention).
    for (int batch : {3, 5, 1}) {
      forward_options o = m->options();
      o.cuda_graphs = false;
      m->set_options(o);
      const std::vector<float> eager = run_batch(*m, gpu, batch, 150, 12);
      o.cuda_graphs = true;
      m->set_options(o);
      const std::vector<float> graphed = run_batch(*m, gpu, batch, 150, 12);
      const std::int64_t pieces = m->captured_graphs();
      if (!m->graph_failure().empty()) MESSAGE("capture failed: " << m->graph_failure());
      CHECK(m->graph_failure().empty());
      const std::vector<float> again = run_batch(*m, gpu, batch, 150, 12);  // replays only
      CHECK(m->captured_graphs() == pieces);
      // Merged (the default), each layer's site is captured in the piece before it -- the
      // start, or with no start piece a site piece of its own for layer 0 -- so one piece per
      // layer plus one, and one more for each Engram layer past 0 whose projection is not
      // computed ahead (DEEPINFER_ENGRAM_AHEAD=0: it runs eagerly before its site); apart, two
      // per layer plus the start.
      const int layers = m->config().num_layers;
      int apart_sites = 0;
      if (!cuda::detail::env_switch("DEEPINFER_ENGRAM_AHEAD", true))
        for (int l = 1; l < layers; ++l) apart_sites += m->config().is_engram_layer(l);
      CHECK(pieces == (detail::graphs_merge_sites()
                           ? layers + 1 + apart_sites
                           : 2 * layers + (detail::graphs_capture_start() ? 1 : 0)));
      REQUIRE(graphed.size() == eager.size());
      REQUIRE(again.size() == eager.size());
      double worst = 1.0, max_abs = 0.0, scale = 0.0;
      int agree = 0, rows = 0;
      for (std::size_t r = 0; r * std::size_t(vocab) < eager.size(); ++r, ++rows) {
        for (const std::vector<float>* got : {&graphed, &again}) {
          const float* a = got->data() + r * std::size_t(vocab);
          const float* b = eager.data() + r * std::size_t(vocab);
          const row_figures f = compare(a, b, std::size_t(vocab));
          worst = std::min(worst, f.cosine);
          max_abs = std::max(max_abs, f.max_abs);
          for (std::int64_t i = 0; i < vocab; ++i) scale = std::max(scale, double(std::abs(b[i])));
          agree += argmax(a, std::size_t(vocab)) == argmax(b, std::size_t(vocab));
        }
      }
      MESSAGE(fmt::format("{} batch {}: graphs vs eager over {} rows x 2 runs: worst cos {:.8f}, "
                          "max|d| {:.3g} (max|logit| {:.3g}), argmax {}/{}, {} pieces",
                          preset, batch, rows, worst, max_abs, scale, agree, 2 * rows, pieces));
      CHECK(worst >= 0.99999);
      CHECK(max_abs <= 1e-3 * std::max(1.0, scale));
      CHECK(agree == 2 * rows);
    }
  }
}

TEST_CASE(
    "GPU forward: decode graph pieces read other pieces' outputs in place, never another "
    "tensor") {
  // Two pieces, each doubling its input; the second's input is the first's output, which it
  // reads where the first graph leaves it (bound at capture). 3 rows pad to 4.
  detail::decode_graphs graphs({4});
  const detail::piece_body twice = [](const std::vector<tensor>& in) {
    tensor y = in[0].clone();
    ops::add_inplace(y, in[0]);
    return std::vector<tensor>{y};
  };
  const tensor tokens = tensor::zeros({3}, dtype::i64, gpu);
  auto values = [](float base) {
    tensor h = tensor::empty({3, 8}, dtype::f32, cpu_device);
    for (std::int64_t i = 0; i < h.numel(); ++i) h.data<float>()[i] = base + 0.25f * float(i);
    return h;
  };
  for (const float base : {1.0f, -3.0f}) {  // the capture step, then a replay with new inputs
    CAPTURE(base);
    const tensor x = values(base);
    graphs.begin_step(3, tokens, tokens);
    const std::vector<tensor> first = graphs.run(0, 0, {x.to(gpu)}, twice);
    const std::vector<tensor> second = graphs.run(0, 1, {first[0]}, twice);
    const tensor got = second[0].to(cpu_device);
    REQUIRE(got.shape() == x.shape());
    for (std::int64_t i = 0; i < x.numel(); ++i)
      CHECK(got.data<float>()[i] == 4.0f * x.data<float>()[i]);
  }
  CHECK(graphs.captured() == 2);
  CHECK(graphs.usable());
  // A later step that hands the bound input another tensor: a clear error (copying it into
  // the first piece's output could overwrite what others still read), nothing launched.
  graphs.begin_step(3, tokens, tokens);
  const std::vector<tensor> first = graphs.run(0, 0, {values(2.0f).to(gpu)}, twice);
  const tensor elsewhere = values(5.0f).to(gpu);
  if (cuda::detail::env_switch("DEEPINFER_GRAPH_BIND", true))
    CHECK_THROWS_WITH_AS(graphs.run(0, 1, {elsewhere}, twice),
                         doctest::Contains("captured reading another piece's output"), error);
  else  // binding switched off: every input is copied, so any tensor will do
    CHECK(graphs.run(0, 1, {elsewhere}, twice)[0].to(cpu_device).data<float>()[0] == 2.0f * 5.0f);
  cuda::synchronize();
}

TEST_CASE("GPU forward: a decode graph piece reads an input_slot in place, another tensor copied") {
  // The eager producer of a piece's input (the batched attention) writes into input_slot's
  // buffer, which the piece captured as its input: no copy; handed any other tensor, the piece
  // copies it in as before. The body doubles its input in place (as the output piece's inverse
  // rotary changes the attention output): the capture step's eager warm-up must not leave its
  // change for the launch to double again. 3 rows pad to 4.
  detail::decode_graphs graphs({4});
  const detail::piece_body twice = [](const std::vector<tensor>& in) {
    tensor x = in[0];
    ops::add_inplace(x, in[0]);
    return std::vector<tensor>{x.clone()};
  };
  const tensor tokens = tensor::zeros({3}, dtype::i64, gpu);
  auto values = [](float base) {
    tensor h = tensor::empty({3, 8}, dtype::f32, cpu_device);
    for (std::int64_t i = 0; i < h.numel(); ++i) h.data<float>()[i] = base + 0.25f * float(i);
    return h;
  };
  for (const float base : {1.0f, -3.0f, 7.0f}) {  // capture, replay, replay with another tensor
    CAPTURE(base);
    graphs.begin_step(3, tokens, tokens);
    tensor slot = graphs.input_slot(2, 1, 0, {8}, dtype::f32, gpu);
    REQUIRE(slot.shape() == tensor_shape({3, 8}));
    tensor in = slot;
    if (base == 7.0f)
      in = values(base).to(gpu);
    else
      slot.copy_from(values(base).to(gpu));
    const tensor got = graphs.run(2, 1, {in}, twice)[0].to(cpu_device);
    const tensor x = values(base);
    for (std::int64_t i = 0; i < x.numel(); ++i)
      CHECK(got.data<float>()[i] == 2.0f * x.data<float>()[i]);
  }
  CHECK(graphs.captured() == 1);
  CHECK(graphs.usable());
  cuda::synchronize();
}

TEST_CASE("GPU forward: a decode graph constant is made once per padded size and read in place") {
  // decode_graphs::constant: the start piece's index lists and one-hot row live as long as the
  // graphs at one address per padded size (a captured piece reads them there); a piece that
  // gathers through one gives the same rows on every replay.
  const cuda::index_check_scope trusted(false);  // as in a forward: no read-back in the capture
  detail::decode_graphs graphs({4, 8});
  const tensor tokens = tensor::zeros({6}, dtype::i64, gpu);
  int made = 0;
  auto make = [&](std::int64_t padded) {
    ++made;
    tensor idx = tensor::empty({padded}, dtype::i64, cpu_device);
    for (std::int64_t r = 0; r < padded; ++r) idx.data<std::int64_t>()[r] = padded - 1 - r;
    return idx.to(gpu);
  };
  tensor table = tensor::empty({8, 2}, dtype::f32, cpu_device);
  for (std::int64_t i = 0; i < table.numel(); ++i) table.data<float>()[i] = float(i);
  const tensor table_gpu = table.to(gpu);
  const void* first_address = nullptr;
  for (int step = 0; step < 3; ++step) {  // capture, then replays
    graphs.begin_step(3, tokens.slice(0, 0, 3), tokens.slice(0, 0, 3));
    const tensor& idx = graphs.constant("reversed", make);
    REQUIRE(idx.shape() == tensor_shape({4}));
    if (step == 0) first_address = idx.raw();
    CHECK(idx.raw() == first_address);
    const std::vector<tensor> out = graphs.run(-1, 0, {}, [&](const std::vector<tensor>&) {
      return std::vector<tensor>{ops::gather_rows(table_gpu, idx)};
    });
    const tensor got = out[0].to(cpu_device);  // rows 3, 2, 1 of the table (the first 3 of 4)
    REQUIRE(got.shape() == tensor_shape({3, 2}));
    for (std::int64_t r = 0; r < 3; ++r)
      for (std::int64_t k = 0; k < 2; ++k)
        CHECK(got.data<float>()[r * 2 + k] == float((3 - r) * 2 + k));
  }
  CHECK(made == 1);
  graphs.begin_step(6, tokens, tokens);  // another padded size: its own constant
  CHECK(graphs.constant("reversed", make).shape() == tensor_shape({8}));
  CHECK(made == 2);
  CHECK(graphs.captured() == 1);
  CHECK(graphs.usable());
  cuda::synchronize();
}

/// Worst cosine, largest |difference|, largest |logit|, rows agreeing in argmax and rows
/// equal bit for bit of two runs' logits (rows of `vocab`).
struct run_diff {
  double worst = 1.0, max_abs = 0.0, scale = 0.0;
  int agree = 0, identical = 0, rows = 0;
};
run_diff diff_runs(const std::vector<float>& got, const std::vector<float>& want,
                   std::int64_t vocab) {
  run_diff d;
  for (std::size_t r = 0; r * std::size_t(vocab) < want.size(); ++r, ++d.rows) {
    const float* a = got.data() + r * std::size_t(vocab);
    const float* b = want.data() + r * std::size_t(vocab);
    const row_figures f = compare(a, b, std::size_t(vocab));
    d.worst = std::min(d.worst, f.cosine);
    d.max_abs = std::max(d.max_abs, f.max_abs);
    for (std::int64_t i = 0; i < vocab; ++i) d.scale = std::max(d.scale, double(std::abs(b[i])));
    d.agree += argmax(a, std::size_t(vocab)) == argmax(b, std::size_t(vocab));
    d.identical += std::equal(a, a + vocab, b);
  }
  return d;
}

TEST_CASE("GPU forward: batched decode attention gives the per-sequence logits") {
  temp_dir tmp("gpu-batched");
  for (const char* preset : {"tiny-v4", "tiny-v41"}) {
    auto m = gpu_preset(tmp, preset);
    const std::int64_t vocab = m->config().vocab_size;
    // Staggered prompts (different entry counts per sequence) and equal ones; 12 decode steps
    // cross compression boundaries (entries completed and appended inside the batched step);
    // ordered splits make both paths pick one attention split per sequence; graphs replay the
    // fixed-shape pieces around the batched attention.
    struct run_case {
      int batch, stagger;
      bool ordered, graphs;
    };
    for (const run_case rc : {run_case{3, 7, false, false}, run_case{3, 7, true, false},
                              run_case{5, 0, true, false}, run_case{1, 0, true, false},
                              run_case{5, 3, false, true}}) {
      cuda::set_ordered_gemm_splits(rc.ordered);
      forward_options o = m->options();
      o.cuda_graphs = false;
      m->set_options(o);
      const std::vector<float> reference = run_batch(*m, gpu, rc.batch, 150, 12, 0, rc.stagger);
      o.cuda_graphs = rc.graphs;
      m->set_options(o);
      const std::vector<float> batched =
          run_batch(*m, gpu, rc.batch, 150, 12, rc.batch, rc.stagger);
      // A pool with fewer slots than sequences: the call falls back to the per-sequence path.
      const std::vector<float> fallback =
          run_batch(*m, gpu, rc.batch, 150, 12, rc.batch - 1, rc.stagger);
      REQUIRE(batched.size() == reference.size());
      REQUIRE(fallback.size() == reference.size());
      const run_diff d = diff_runs(batched, reference, vocab);
      MESSAGE(fmt::format("{} batch {} (stagger {}, ordered splits {}, graphs {}): batched vs "
                          "per-sequence over {} rows: worst cos {:.8f}, max|d| {:.3g} "
                          "(max|logit| {:.3g}), argmax {}/{}, bitwise {}/{}",
                          preset, rc.batch, rc.stagger, rc.ordered, rc.graphs, d.rows, d.worst,
                          d.max_abs, d.scale, d.agree, d.rows, d.identical, d.rows));
      CHECK(d.worst >= 0.99999);
      CHECK(d.max_abs <= 1e-3 * std::max(1.0, d.scale));
      CHECK(d.agree == d.rows);
      if (rc.ordered && !rc.graphs) {  // the per-sequence path again: the same bits
        const run_diff f = diff_runs(fallback, reference, vocab);
        CHECK(f.identical == f.rows);
      }
    }
    cuda::set_ordered_gemm_splits(false);
  }
}

/// Runs 5 sequences x 12 decode steps of each tiny preset, eagerly and through graphs, with a
/// process-wide switch off and on (`set`; each run on a fresh model, so graphs are captured
/// under the setting) and checks that the logits are the same bits (ordered splits: every run
/// of a path the same bits). Restores the switch to `before` and the splits as they were.
void check_switch_changes_no_bit(const char* what, const std::function<void(bool)>& set,
                                 bool before) {
  const bool ordered_before = cuda::get_ordered_gemm_splits();
  cuda::set_ordered_gemm_splits(true);
  for (const char* preset : {"tiny-v4", "tiny-v41"}) {
    for (bool graphs : {false, true}) {
      std::vector<float> runs[2];
      std::int64_t vocab = 0;
      for (bool on : {false, true}) {
        set(on);
        temp_dir tmp("gpu-switch");
        auto m = gpu_preset(tmp, preset);  // fresh: graphs captured with this setting
        vocab = m->config().vocab_size;
        forward_options o = m->options();
        o.cuda_graphs = graphs;
        m->set_options(o);
        runs[on] = run_batch(*m, gpu, 5, 150, 12, 5, 3);
        if (graphs) CHECK(m->captured_graphs() > 0);
        if (graphs) CHECK(m->graph_failure().empty());
      }
      REQUIRE(runs[1].size() == runs[0].size());
      const run_diff d = diff_runs(runs[1], runs[0], vocab);
      MESSAGE(fmt::format("{} graphs {}: {} on vs off over {} rows: bitwise {}/{}, worst cos "
                          "{:.8f}",
                          preset, graphs, what, d.rows, d.identical, d.rows, d.worst));
      CHECK(d.rows > 0);
      CHECK(d.identical == d.rows);
    }
  }
  set(before);
  cuda::set_ordered_gemm_splits(ordered_before);
}

TEST_CASE("GPU forward: programmatic dependent launch changes no bit") {
  // Every kernel waits for its predecessor before touching memory, so launching with PDL (the
  // default) must give exactly the logits of launching without it -- eagerly and through
  // graphs captured either way. (DEEPINFER_PDL may have set the switch: restored after.)
  check_switch_changes_no_bit("PDL", cuda::set_programmatic_launch, cuda::programmatic_launch());
}

TEST_CASE("GPU forward: side branches on a forked stream change no bit") {
  // The mHC mixes, the shared expert and the kv rows run on a forked stream beside the rest
  // (cuda::stream_fork): the same kernels on the same inputs, so the same logits as with
  // side streams off.
  check_switch_changes_no_bit("side streams", cuda::set_side_streams, cuda::side_streams());
}

TEST_CASE("GPU forward: the step's start as a captured piece changes no bit") {
  // detail::graphs_capture_start (DEEPINFER_GRAPH_START=1): the embedding, its expansion to the
  // hc streams and the initial mix replay as one piece (layer -1) before layer 0's; the same
  // ops on the same values as the eager start, so the same logits, and layer 0's pieces read
  // its outputs in place. (Layer 0 is no Engram layer in the tiny presets: the Engram part of
  // the piece runs on v41-flash-L4, whose greedy text gpu-forward.sh compares with graphs on
  // and off.)
  check_switch_changes_no_bit("the captured start", detail::set_graphs_capture_start,
                              detail::graphs_capture_start());
}

TEST_CASE("GPU forward: the step's inputs staged in mapped memory change no bit") {
  // detail::graphs_stage_inputs (DEEPINFER_GRAPH_STAGED): with the captured start, a step's
  // tokens and positions wait in mapped host memory that the start piece's first nodes copy to
  // the device buffers (and layer 0's Engram hash ids, read in place), instead of eager copies
  // launched before the piece -- the same values, so the same logits. (The Engram part runs on
  // v41-flash-L4, whose greedy text gpu-forward.sh compares with graphs on and off.)
  REQUIRE(detail::graphs_capture_start());
  const std::int64_t staged_before = detail::graphs_staged_steps();
  check_switch_changes_no_bit("the staged step inputs", detail::set_graphs_stage_inputs,
                              detail::graphs_stage_inputs());
  CHECK(detail::graphs_staged_steps() > staged_before);  // the staged path ran
}

TEST_CASE("GPU forward: a layer's site captured in the piece before it changes no bit") {
  // detail::graphs_merge_sites (DEEPINFER_GRAPH_MERGE): layer 0's attention site inside the
  // start piece, every later layer's inside the previous layer's output piece (after its
  // Engram, on tiny-v41), instead of pieces of their own -- the same ops on the same values.
  check_switch_changes_no_bit("the merged sites", detail::set_graphs_merge_sites,
                              detail::graphs_merge_sites());
}

TEST_CASE("GPU forward: the attention site's two branches change no bit") {
  // detail::site_branches (DEEPINFER_SITE_BRANCHES): the window rows, the compressed branch's
  // projections of the normed input and V4.1's mix on the side branch beside the queries and
  // the index queries, against the earlier arrangement -- the same kernels on the same inputs.
  check_switch_changes_no_bit("the site's branches", detail::set_site_branches,
                              detail::site_branches());
}

TEST_CASE("GPU forward: logits left on the device are the logits copied to the host") {
  // forward_options::logits_to_host = false (the bench's default) returns the head's output
  // on the device without waiting; the same steps through the same graphs give the same bits
  // (ordered splits: every run of a path the same bits).
  const bool ordered_before = cuda::get_ordered_gemm_splits();
  cuda::set_ordered_gemm_splits(true);
  temp_dir tmp("gpu-logits");
  for (const char* preset : {"tiny-v4", "tiny-v41"}) {
    auto m = gpu_preset(tmp, preset);
    forward_options o = m->options();
    o.cuda_graphs = true;
    m->set_options(o);
    const std::vector<float> host = run_batch(*m, gpu, 3, 150, 6);
    const std::int64_t pieces = m->captured_graphs();
    o.logits_to_host = false;
    m->set_options(o);
    CHECK(m->captured_graphs() == pieces);  // kept: only where the logits go changed
    const std::vector<float> on_device = run_batch(*m, gpu, 3, 150, 6);
    const run_diff d = diff_runs(on_device, host, m->config().vocab_size);
    MESSAGE(fmt::format("{}: logits on the device vs copied, {} rows: bitwise {}/{}", preset,
                        d.rows, d.identical, d.rows));
    CHECK(d.rows == 3 * 7);
    CHECK(d.identical == d.rows);
  }
  cuda::set_ordered_gemm_splits(ordered_before);
}

}  // namespace
}  // namespace di::test
