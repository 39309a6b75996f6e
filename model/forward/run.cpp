// The layer stack and the head: embedding expanded to hc_mult streams, Engram ahead of its
// layers, the blocks (capturing block outputs where asked), then the final collapse (V4.1:
// the last FFN site's pre; V4: its own head mix), RMSNorm and the BF16 head in fp32 -- only
// for the rows whose logits were requested.
#include "model/forward/detail/forward_pass.hpp"

#include "common/env.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

namespace di::detail {

double host_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

namespace {

/// DEEPINFER_FORWARD_TIMING=1: every forward call prints to stderr where its wall time went --
/// the host time spent issuing each phase (from the call's entry: "prep" is its work before
/// the first layer), then (after one synchronisation at the end) the whole call; a diagnostic
/// for host-bound steps, off by default.
class phase_timer {
 public:
  /// `entered`: when the forward call began (its host work before run_model is reported as
  /// "prep"; 0: none).
  explicit phase_timer(double entered) : on_(enabled()), t0_(host_seconds()), last_(t0_) {
    if (on_ && entered > 0.0) line_ = fmt::format(" prep {:.2f}", (t0_ - entered) * 1e3);
  }
  void mark(const char* what) {
    if (!on_) return;
    const double t = host_seconds();
    line_ += fmt::format(" {} {:.2f}", what, (t - last_) * 1e3);
    last_ = t;
  }
  void finish(const forward_pass& pass, std::int64_t rows) {
    if (!on_) return;
    const double issued = host_seconds();
    device_sync(pass);
    std::fprintf(stderr, "forward timing: %lld rows | host ms:%s | issued %.2f, done %.2f ms\n",
                 static_cast<long long>(rows), line_.c_str(), (issued - t0_) * 1e3,
                 (host_seconds() - t0_) * 1e3);
  }

 private:
  static bool enabled() {  // read once per process
    static const bool on = env_switch("DEEPINFER_FORWARD_TIMING", false);
    return on;
  }
  bool on_;
  double t0_, last_;
  std::string line_;
};

/// The hash ids of Engram slot `slot`: [rows, columns].
tensor engram_slot_ids(const tensor& all, std::int64_t slot) {
  const std::int64_t rows = all.size(0), layers = all.size(1), cols = all.size(2);
  tensor out = tensor::empty({rows, cols}, dtype::i64);  // [rows, cols]
  for (std::int64_t r = 0; r < rows; ++r)
    std::copy_n(all.data<std::int64_t>() + (r * layers + slot) * cols, cols,
                out.data<std::int64_t>() + r * cols);
  return out;
}

/// Rows `picked` of a [rows, ...] tensor, stacked.
tensor gather_rows(const forward_pass& pass, const tensor& t,
                   const std::vector<std::int64_t>& picked) {
  return ops::gather_rows(t, pass.index(picked));
}

/// gather_rows for a read-only use: `t` itself when `picked` is all its rows in order (a
/// decode step's logit rows), with no index upload and no copy before the head.
tensor read_rows(const forward_pass& pass, const tensor& t,
                 const std::vector<std::int64_t>& picked) {
  bool all = std::int64_t(picked.size()) == t.size(0);
  for (std::size_t i = 0; all && i < picked.size(); ++i) all = picked[i] == std::int64_t(i);
  return all ? t : gather_rows(pass, t, picked);
}

/// Batch rows whose logits (and captures) were asked for, in request order.
std::vector<std::int64_t> logit_rows(const forward_pass& pass, std::span<forward_request> batch) {
  std::vector<std::int64_t> rows;
  for (std::size_t i = 0; i < batch.size(); ++i)
    for (std::int64_t r : batch[i].logit_rows) rows.push_back(pass.seqs[i].offset + r);
  return rows;
}

tensor embed_streams(const forward_pass& pass) {
  const std::int64_t rows = pass.tokens.size(0), hc = pass.config.hc_mult;
  const std::int64_t dim = pass.config.hidden_size;
  tensor e = ops::embedding(pass.weights.embed, pass.tokens);  // [rows, dim]
  std::vector<std::int64_t> repeat;                            // row r hc times
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t k = 0; k < hc; ++k) repeat.push_back(r);
  return ops::gather_rows(e, pass.index(repeat)).view({rows, hc, dim});  // [rows, hc, dim]
}

/// The one-hot initial mix [rows, hc]: every row takes stream 0.
tensor initial_mix(const forward_pass& pass, std::int64_t rows) {
  const std::int64_t hc = pass.config.hc_mult;
  tensor pre_mix = tensor::zeros({rows, hc}, dtype::f32);
  for (std::int64_t r = 0; r < rows; ++r) pre_mix.data<float>()[r * hc] = 1.0f;
  return pass.upload(pre_mix);
}

/// A step's start through the decode graphs (graphs_capture_start): embed_streams, the
/// initial mix and, given layer 0's Engram hash ids, that layer's Engram, as one captured
/// piece (layer -1) over the padded rows instead of eager launches -- a synchronous step's
/// device otherwise idles between them while the host issues each. The same ops on the same
/// values (the index lists and the one-hot row are device constants of the padded size, the
/// mix rows gathered from that row): the same bits. Its outputs stay where the graph leaves
/// them, so layer 0's pieces read them in place.
struct graphed_start_out {
  tensor x;        // [rows, hc, dim]
  tensor pre_mix;  // [rows, hc]
  std::vector<tensor> site;  // merging (pass.merge_sites): layer 0's attention-site outputs
};
graphed_start_out graphed_start(const forward_pass& pass, const tensor& engram0_ids) {
  decode_graphs& g = *pass.graphs;
  const std::int64_t hc = pass.config.hc_mult, dim = pass.config.hidden_size;
  const tensor& repeat = g.constant("start.rows", [&](std::int64_t padded) {
    tensor idx = tensor::empty({padded * hc}, dtype::i64);  // row r hc times
    for (std::int64_t r = 0; r < padded; ++r)
      for (std::int64_t k = 0; k < hc; ++k) idx.data<std::int64_t>()[r * hc + k] = r;
    return idx.to(pass.dev());
  });
  const tensor& zero_rows = g.constant("start.zeros", [&](std::int64_t padded) {
    return tensor::zeros({padded}, dtype::i64).to(pass.dev());
  });
  const tensor& one_hot = g.constant("start.one_hot", [&](std::int64_t) {
    tensor row = tensor::zeros({1, hc}, dtype::f32);
    row.data<float>()[0] = 1.0f;
    return row.to(pass.dev());
  });
  const bool engram = engram0_ids.defined();
  // A staged step (begin_step_staged): its tokens and positions, and layer 0's hash ids, wait
  // in mapped host memory that the piece reads by address -- its first nodes copy the tokens
  // and positions to the device buffers the later pieces read -- so nothing is launched
  // before it. Else the ids are an input the piece's buffer receives by a copy.
  const bool staged = g.step_staged();
  std::vector<tensor> inputs;
  tensor staged_ids;
  if (engram && staged)
    staged_ids = g.staged_input("start.engram0", engram0_ids);
  else if (engram)
    inputs.push_back(engram0_ids);
  // (piece 1 when staged: a graph of its own, so a switch between steps never replays a
  // start captured the other way; 2 and 3 likewise when layer 0's site runs in it too)
  const bool merge = pass.merge_sites;
  const std::vector<tensor> out =
      g.run(-1, (staged ? 1 : 0) + (merge ? 2 : 0), inputs, [&](const std::vector<tensor>& in) {
        if (staged) g.copy_step_inputs();
        const forward_pass p = padded_pass(pass);
        const std::int64_t rows = p.tokens.size(0);
        const tensor e = ops::embedding(p.weights.embed, p.tokens);    // [rows, dim]
        tensor x = ops::gather_rows(e, repeat).view({rows, hc, dim});  // [rows, hc, dim]
        const tensor pre_mix = ops::gather_rows(one_hot, zero_rows);   // [rows, hc]
        if (engram) x = engram_apply(p, 0, x, engram_project(p, 0, staged ? staged_ids : in[0]));
        std::vector<tensor> result{x, pre_mix};
        if (merge)
          for (tensor& t : graphed_site_outputs(p, 0, x, pre_mix)) result.push_back(std::move(t));
        return result;
      });
  return {out[0], out[1], std::vector<tensor>(out.begin() + 2, out.end())};
}

/// Final collapse and norm of the picked rows: [picked, dim].
tensor final_norm(const forward_pass& pass, const tensor& x_rows, const tensor& pre_rows) {
  const model_config& c = pass.config;
  tensor pre = pre_rows;  // [picked, hc]
  if (!c.is_v41()) {
    const ops::hc_params hp{c.hc_mult, c.hc_sinkhorn_iters, float(c.hc_eps), float(c.rms_norm_eps)};
    const hc_site_weights& h = pass.weights.hc_head;
    pre = ops::hc_head_pre(x_rows, h.fn, h.scale, h.base, hp);
  }
  return ops::hc_collapse_norm(x_rows, pre, pass.weights.norm, float(c.rms_norm_eps));
}

/// Splits the stacked outputs back into one forward_output per request.
std::vector<forward_output> split_outputs(std::span<forward_request> batch, const tensor& logits,
                                          const std::vector<tensor>& hidden, const tensor& normed) {
  std::vector<forward_output> out(batch.size());
  std::int64_t at = 0;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const std::int64_t n = std::int64_t(batch[i].logit_rows.size());
    out[i].logits = logits.slice(0, at, at + n);  // a view: the rows share one buffer
    if (batch[i].capture_hidden) {
      out[i].final_norm = normed.slice(0, at, at + n).clone();
      std::vector<tensor> per_layer;  // each [n, hc, dim]
      for (const tensor& h : hidden) per_layer.push_back(h.slice(0, at, at + n));
      const std::int64_t layers = std::int64_t(hidden.size());
      tensor hid = tensor::empty({n, layers, hidden[0].size(1), hidden[0].size(2)}, dtype::f32);
      const std::int64_t block = hidden[0].size(1) * hidden[0].size(2);
      for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t l = 0; l < layers; ++l)
          std::copy_n(per_layer[std::size_t(l)].data<float>() + r * block, block,
                      hid.data<float>() + (r * layers + l) * block);
      out[i].hidden = hid;
    }
    at += n;
  }
  return out;
}

}  // namespace

std::vector<forward_output> run_model(forward_pass& pass, std::span<forward_request> batch,
                                      const tensor& hash_ids) {
  const model_config& c = pass.config;
  const std::vector<std::int64_t> picked = logit_rows(pass, batch);
  bool capture = false;
  for (const forward_request& r : batch) capture = capture || r.capture_hidden;

  phase_timer timer(pass.entered);
  std::vector<tensor> hidden;  // per layer [picked, hc, dim]
  // An Engram layer's projection reads the token ids only: the block before it computes it
  // beside its per-sequence attention (engram_ahead); a first-layer Engram computes its own,
  // as every Engram layer does with DEEPINFER_ENGRAM_AHEAD=0 (for comparisons; the same bits).
  static const bool ahead_on = env_switch("DEEPINFER_ENGRAM_AHEAD", true);
  auto engram_ids_of = [&](int layer) {
    const auto& ids = c.engram.layer_ids;
    const std::int64_t slot = std::find(ids.begin(), ids.end(), layer) - ids.begin();
    return pass.upload(engram_slot_ids(hash_ids, slot));
  };
  tensor x, pre_mix;     // [rows, hc, dim], [rows, hc]: the streams and the initial mix
  int engram_done = -1;  // an Engram layer already applied by the graphed start
  pass.merge_sites = pass.graphs != nullptr && graphs_merge_sites();
  if (pass.graphs != nullptr && graphs_capture_start()) {
    const bool engram0 = c.is_engram_layer(0);
    // (host ids when the step is staged: graphed_start stages them itself)
    const tensor ids0 = !engram0                     ? tensor()
                        : pass.graphs->step_staged() ? engram_slot_ids(hash_ids, 0)
                                                     : engram_ids_of(0);
    const graphed_start_out s = graphed_start(pass, ids0);
    x = s.x;
    pre_mix = s.pre_mix;
    if (pass.merge_sites) pass.next_site = {0, s.site, tensor()};
    if (engram0) engram_done = 0;
  } else {
    x = embed_streams(pass);
    pre_mix = initial_mix(pass, x.size(0));
  }
  engram_ahead ahead;
  for (int l = 0; l < c.num_layers; ++l) {
    if (c.is_engram_layer(l) && l != engram_done) {
      if (pass.next_site.layer == l && pass.next_site.engram_x.defined()) {
        x = pass.next_site.engram_x;  // applied in the piece before, with the layer's site
      } else {
        const tensor kv = ahead.layer == l ? ahead.kv : engram_project(pass, l, engram_ids_of(l));
        x = engram_apply(pass, l, x, kv);
      }
      ahead = {};
    }
    const bool next_engram = ahead_on && l + 1 < c.num_layers && c.is_engram_layer(l + 1);
    if (next_engram) ahead = {l + 1, engram_ids_of(l + 1), tensor()};
    x = block_forward(pass, l, x, pre_mix, next_engram ? &ahead : nullptr);
    if (capture) hidden.push_back(gather_rows(pass, x, picked));
    timer.mark("layer");
  }
  tensor normed =
      final_norm(pass, read_rows(pass, x, picked), read_rows(pass, pre_mix, picked));
  tensor logits = ops::linear(normed, pass.weights.head);  // [picked, vocab]
  timer.mark("head");
  if (pass.on_cuda()) {  // outputs are host tensors (the logits unless asked to stay)
    if (pass.options.logits_to_host) logits = logits.to(cpu_device);
    if (capture) {  // each copy to the host waits for the stream
      normed = normed.to(cpu_device);
      for (tensor& h : hidden) h = h.to(cpu_device);
    }
  }
  timer.mark("to-host");
  std::vector<forward_output> out = split_outputs(batch, logits, hidden, normed);
  timer.mark("split");
  timer.finish(pass, pass.tokens.size(0));
  return out;
}

}  // namespace di::detail
