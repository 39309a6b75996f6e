// The model entry points: loading, validating a batch before touching any state, running
// embedding -> (Engram) blocks -> stream collapse, norm and head for the requested rows, and
// advancing every sequence's state.
#include "model/forward/model.hpp"
#include "model/model_summary.hpp"

#include "model/checkpoint/checkpoint.hpp"
#include "model/forward/detail/forward_pass.hpp"
#include "model/forward/rope.hpp"

#include <algorithm>
#include <optional>

#if defined(DEEPINFER_HAVE_CUDA)
#include "kernels/cuda/stream.hpp"
#endif

namespace di {

deepseek_model::deepseek_model(model_config config, model_weights weights, forward_options options)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      options_(options),
      layout_(make_cache_layout(config_)),
      inv_freq_main_(rope_inv_freq(config_, false)),
      inv_freq_compress_(rope_inv_freq(config_, true)) {}

std::unique_ptr<deepseek_model> deepseek_model::load(const std::filesystem::path& dir,
                                                     forward_options options) {
  model_config config = load_model_config(dir.string());
  auto ckpt = std::make_shared<const checkpoint>(dir);
  require_matching_checkpoint(*ckpt, config, dir.string());  // headers only
  model_weights weights = load_model_weights(ckpt, config);
  return std::make_unique<deepseek_model>(std::move(config), std::move(weights), options);
}

void deepseek_model::set_options(const forward_options& options) {
  // Where the logits go does not change a captured piece (the head runs eagerly); any other
  // option (including one added later) drops the pieces.
  forward_options pieces_of_new = options;
  pieces_of_new.logits_to_host = options_.logits_to_host;
  if (!(pieces_of_new == options_)) graphs_.reset();
  options_ = options;
}

std::int64_t deepseek_model::captured_graphs() const {
  return graphs_ ? graphs_->captured() : 0;
}

std::string deepseek_model::graph_failure() const {
  return graphs_ ? graphs_->failure() : std::string();
}

void deepseek_model::to_device(device dev, device_weight_format format) {
  graphs_.reset();
  weights_ = weights_to_device(weights_, config_, dev, format);
  inv_freq_main_ = inv_freq_main_.to(dev);
  inv_freq_compress_ = inv_freq_compress_.to(dev);
}

namespace {

void validate_request(const model_config& c, const forward_request& r, std::size_t index) {
  DI_CHECK(r.state != nullptr, "request {}: no sequence state", index);
  DI_CHECK(!r.tokens.empty(), "request {}: no tokens", index);
  DI_CHECK(r.positions.size() == r.tokens.size(), "request {}: {} positions for {} tokens", index,
           r.positions.size(), r.tokens.size());
  const std::int64_t start = r.state->num_tokens();
  for (std::size_t i = 0; i < r.tokens.size(); ++i) {
    DI_CHECK(r.tokens[i] >= 0 && r.tokens[i] < c.vocab_size,
             "request {}: token id {} at index {} is outside the vocabulary [0, {})", index,
             r.tokens[i], i, c.vocab_size);
    DI_CHECK(r.positions[i] == start + std::int64_t(i),
             "request {}: position {} at index {} does not continue the sequence (expected {})",
             index, r.positions[i], i, start + std::int64_t(i));
  }
  const std::int64_t end = start + std::int64_t(r.tokens.size());
  DI_CHECK(c.max_position_embeddings <= 0 || end <= c.max_position_embeddings,
           "request {}: position {} is beyond max_position_embeddings {}", index, end - 1,
           c.max_position_embeddings);
  DI_CHECK(end <= r.state->max_tokens(),
           "request {}: position {} is beyond the state's capacity "
           "of {} tokens",
           index, end - 1, r.state->max_tokens());
  for (std::int64_t row : r.logit_rows)
    DI_CHECK(row >= 0 && row < std::int64_t(r.tokens.size()), "request {}: logit row {} of {}",
             index, row, r.tokens.size());
}

/// Whether a batch runs through the decode graphs: CUDA, graphs on, one new token per
/// sequence, no hidden-state capture, few enough rows, every MoE layer free of read-backs.
bool use_graphs(const detail::forward_pass& pass, std::span<forward_request> batch,
                std::int64_t largest) {
  if (!pass.on_cuda() || !pass.options.cuda_graphs || std::int64_t(batch.size()) > largest)
    return false;
  for (const forward_request& r : batch)
    if (r.tokens.size() != 1 || r.capture_hidden) return false;
  for (int l = 0; l < pass.config.num_layers; ++l)
    if (!detail::moe_is_graphable(pass, l)) return false;
  return true;
}

/// Blocks for every entry the request will append, taken before anything is written.
void reserve_streams(const cache_layout& L, const forward_request& r) {
  const std::int64_t end = r.state->num_tokens() + std::int64_t(r.tokens.size());
  for (std::size_t s = 0; s < L.streams.size(); ++s)
    r.state->reserve(int(s), end / L.streams[s].ratio);
}

/// Hash ids [rows, engram layers, columns] of every request, stacked; `histories` receives
/// each sequence's advanced Engram history (committed only once the forward succeeded).
tensor engram_ids(const model_config& c, std::span<forward_request> batch,
                  const engram_hasher* hasher, std::vector<engram_history>& histories) {
  const std::int64_t layers = std::int64_t(c.engram.layer_ids.size());
  const std::int64_t cols = c.engram.num_hash_columns();
  std::int64_t rows = 0;
  for (const forward_request& r : batch) rows += std::int64_t(r.tokens.size());
  tensor out = tensor::empty({rows, layers, cols}, dtype::i64);  // [rows, layers, cols]
  std::int64_t at = 0;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const forward_request& r = batch[i];
    const std::int64_t n = std::int64_t(r.tokens.size());
    histories.push_back(r.state->engram());
    std::span<std::int64_t> dst(out.data<std::int64_t>() + at * layers * cols,
                                std::size_t(n * layers * cols));
    if (hasher != nullptr) {
      const std::vector<tok::token_id> ids(r.tokens.begin(), r.tokens.end());
      hasher->hash_into({.ids = ids, .first_position = r.state->num_tokens(), .is_live = {}},
                        histories.back(), dst);
    }
    if (r.engram_hash_ids.defined()) {
      check_tensor(r.engram_hash_ids, dtype::i64, {n, layers, cols}, "engram hash ids");
      std::copy_n(r.engram_hash_ids.data<std::int64_t>(), dst.size(), dst.data());
    } else {
      DI_CHECK(hasher != nullptr,
               "request {}: the model has Engram layers but neither hash ids "
               "nor an engram hasher were given",
               i);
    }
    at += n;
  }
  return out;
}

}  // namespace

std::vector<forward_output> deepseek_model::forward(std::span<forward_request> batch) const {
  DI_CHECK(!batch.empty(), "forward: empty batch");
  const double entered = detail::host_seconds();
  for (std::size_t i = 0; i < batch.size(); ++i) {
    validate_request(config_, batch[i], i);
    DI_CHECK(batch[i].state->dev() == dev(), "request {}: a state on {}, the model on {}", i,
             to_string(batch[i].state->dev()), to_string(dev()));
  }
  for (std::size_t i = 0; i < batch.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      DI_CHECK(batch[i].state != batch[j].state, "requests {} and {} share a sequence state", j, i);
  tensor hash_ids;                        // [rows, engram layers, columns]
  std::vector<engram_history> histories;  // per request, advanced
  if (layout_.has_engram) hash_ids = engram_ids(config_, batch, hasher_.get(), histories);
  for (const forward_request& r : batch) reserve_streams(layout_, r);

  detail::forward_pass pass{
      config_, weights_, layout_, options_, inv_freq_main_, inv_freq_compress_, {}, {}, {}};
  std::int64_t rows = 0;
  for (const forward_request& r : batch) rows += std::int64_t(r.tokens.size());
  pass.tokens = tensor::empty({rows}, dtype::i64);
  pass.positions = tensor::empty({rows}, dtype::i64);
  for (const forward_request& r : batch) {
    detail::sequence_pass s;
    s.state = r.state;
    s.start = r.state->num_tokens();
    s.count = std::int64_t(r.tokens.size());
    s.offset = pass.seqs.empty() ? 0 : pass.seqs.back().offset + pass.seqs.back().count;
    std::copy(r.tokens.begin(), r.tokens.end(), pass.tokens.data<std::int64_t>() + s.offset);
    std::copy(r.positions.begin(), r.positions.end(),
              pass.positions.data<std::int64_t>() + s.offset);
    s.positions = pass.positions.slice(0, s.offset, s.offset + s.count);
    pass.seqs.push_back(s);
  }
#if defined(DEEPINFER_HAVE_CUDA)
  // Every index the CUDA path hands to a gather is built (and validated) on the host above or
  // derived from the model's own top-k and routing: no per-op read-back of bad-index flags.
  std::optional<cuda::index_check_scope> trusted;
  if (dev().kind == device_kind::cuda) trusted.emplace(false);
#endif
  const tensor host_tokens = pass.tokens, host_positions = pass.positions;
  if (dev().kind != device_kind::cpu) {  // small index tensors travel once per call
    detail::reset_uploads();
    pass.tokens = detail::upload_async(pass.tokens, dev());
    pass.positions = detail::upload_async(pass.positions, dev());
    for (detail::sequence_pass& s : pass.seqs)
      s.positions = pass.positions.slice(0, s.offset, s.offset + s.count);
  }
  const std::vector<int>& sizes = options_.graph_batch_sizes;
  const std::int64_t largest = sizes.empty() ? 0 : *std::max_element(sizes.begin(), sizes.end());
  if (use_graphs(pass, batch, largest) && (!graphs_ || graphs_->usable())) {
    if (!graphs_) graphs_ = std::make_shared<detail::decode_graphs>(sizes);
    // With the captured start piece the step's tokens and positions are staged in mapped host
    // memory and copied by that piece's first nodes: no eager copy launched before it.
    const bool staged = detail::graphs_capture_start() && detail::graphs_stage_inputs() &&
                        graphs_->begin_step_staged(rows, host_tokens, host_positions, dev());
    if (!staged) graphs_->begin_step(rows, pass.tokens, pass.positions);
    pass.graphs = graphs_.get();
  }
  pass.batched = detail::make_decode_batch(pass);
  pass.entered = entered;
  std::vector<forward_output> out = detail::run_model(pass, batch, hash_ids);
  for (std::size_t i = 0; i < batch.size(); ++i) {
    batch[i].state->advance(std::int64_t(batch[i].tokens.size()));
    if (layout_.has_engram && hasher_) batch[i].state->engram() = histories[i];
  }
  return out;
}

void deepseek_model::synchronize() const {
#if defined(DEEPINFER_HAVE_CUDA)
  if (dev().kind == device_kind::cuda) cuda::synchronize();
#endif
}

}  // namespace di
