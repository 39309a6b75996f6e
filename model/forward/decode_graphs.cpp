// decode_graphs (detail/decode_graphs.hpp): per (layer, piece, padded rows) a graph captured
// on the executor's current stream. Memory the body allocates is captured as graph
// allocations (stream-ordered allocator); the outputs' allocations stay alive with the
// piece and are re-made at the same addresses on every launch (auto-free on launch), so the
// returned views always name the latest replay's outputs.
#include "model/forward/detail/decode_graphs.hpp"

#include "common/error.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <tuple>

#if defined(DEEPINFER_HAVE_CUDA)
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/device_memory.hpp"
#include "kernels/cuda/kernel_attributes.hpp"
#include "kernels/cuda/stream.hpp"

#include <cuda_runtime_api.h>
#endif

namespace di::detail {

namespace {

/// `t`'s shape with its first dimension replaced by `rows`.
tensor_shape with_rows(const tensor& t, std::int64_t rows) {
  tensor_shape shape = t.shape();
  shape[0] = rows;
  return shape;
}

/// Copies src [rows, ...] into the first rows of dst [padded, ...].
void copy_rows(tensor& dst, const tensor& src) {
  DI_CHECK(src.type() == dst.type() && src.rank() == dst.rank() && src.size(0) <= dst.size(0),
           "decode graph input {} does not fit its buffer {}", src.shape().str(),
           dst.shape().str());
  tensor head = dst.slice(0, 0, src.size(0));
  head.copy_from(src);
}

}  // namespace

#if defined(DEEPINFER_HAVE_CUDA)

namespace {

/// The first `rows` rows of each output (an output the piece leaves undefined stays so).
std::vector<tensor> head_rows(const std::vector<tensor>& outputs, std::int64_t rows) {
  std::vector<tensor> out;
  for (const tensor& o : outputs) out.push_back(o.defined() ? o.slice(0, 0, rows) : tensor());
  return out;
}

/// The CUDA error's text, the error cleared (capture errors do not poison the context).
std::string cuda_text(cudaError_t e) {
  cudaGetLastError();
  return cudaGetErrorString(e);
}

}  // namespace

struct decode_graphs::impl {
  struct piece {
    std::vector<tensor> inputs;   // [padded, ...] persistent buffers, or another piece's output
    std::vector<bool> bound;      // inputs[i] is another piece's output, read in place
    std::vector<tensor> outputs;  // [padded, ...] graph allocations kept with the graph
    cudaGraphExec_t exec = nullptr;
    ~piece() {
      outputs.clear();  // freed (outside the graph) before the graph goes
      if (exec != nullptr) cudaGraphExecDestroy(exec);
    }
  };
  struct step_buffers {
    tensor tokens;     // [padded] i64
    tensor positions;  // [padded] i64
  };
  /// Pinned host memory mapped at the same address on the device (kernels read it in place).
  struct mapped_block {
    void* base = nullptr;
    std::size_t bytes = 0;
    ~mapped_block() {
      if (base != nullptr) cudaFreeHost(base);
    }
  };
  struct staged_tensor {
    std::unique_ptr<mapped_block> memory;
    tensor view;  // [padded, ...] on the device, at the host address
  };
  std::vector<int> sizes;
  std::map<std::int64_t, step_buffers> steps;
  std::map<std::tuple<int, int, std::int64_t>, std::unique_ptr<piece>> pieces;
  /// input_slot's buffers by (layer, piece, padded rows, input).
  std::map<std::tuple<int, int, std::int64_t, int>, tensor> slots;
  /// constant()'s tensors by (name, padded rows).
  std::map<std::pair<std::string, std::int64_t>, tensor> constants;
  /// begin_step_staged's and staged_input()'s buffers by (name, padded rows).
  std::map<std::pair<std::string, std::int64_t>, staged_tensor> staging;
  std::int64_t rows = 0, padded = 0;
  bool staged = false;  // this step began with begin_step_staged
  device dev;           // the staged step's device
  std::string failure;  // why a capture failed (empty: none did)

  static std::string capture(cudaStream_t stream, piece& p, const piece_body& body);
  /// The staging buffer `name` of shape [padded, row...] (made zeroed on first use; an
  /// undefined tensor where pinned memory is not mapped at its host address) with host's
  /// rows written and the rest zero.
  tensor stage(const std::string& name, const tensor& host);
  /// The output of a captured piece of `padded` rows that `in` ([rows, ...]) is the head of,
  /// or an undefined tensor.
  tensor output_holding(const tensor& in, std::int64_t padded) const;
};

/// DEEPINFER_GRAPH_BIND=0: every input copied into a buffer of its own (as before binding;
/// for comparisons).
const bool g_bind_outputs = cuda::detail::env_switch("DEEPINFER_GRAPH_BIND", true);
const bool g_capture_compressed = cuda::detail::env_switch("DEEPINFER_GRAPH_COMPRESSED", true);
const bool g_slots = cuda::detail::env_switch("DEEPINFER_GRAPH_SLOTS", true);
std::atomic<bool> g_capture_start{cuda::detail::env_switch("DEEPINFER_GRAPH_START", true)};
std::atomic<bool> g_stage_inputs{cuda::detail::env_switch("DEEPINFER_GRAPH_STAGED", true)};
std::atomic<bool> g_merge_sites{cuda::detail::env_switch("DEEPINFER_GRAPH_MERGE", true)};
std::atomic<std::int64_t> g_staged_steps{0};

tensor decode_graphs::impl::output_holding(const tensor& in, std::int64_t padded) const {
  if (!g_bind_outputs || in.raw() == nullptr) return {};
  for (const auto& [key, p] : pieces) {
    if (!p || std::get<2>(key) != padded) continue;
    for (const tensor& o : p->outputs)
      if (o.raw() == in.raw() && o.type() == in.type() && o.shape() == with_rows(in, padded) &&
          o.is_contiguous() && in.is_contiguous())
        return o;
  }
  return {};
}

/// Captures `body` over p's inputs into p (outputs and instantiated graph); returns why it
/// failed, or an empty string.
std::string decode_graphs::impl::capture(cudaStream_t stream, piece& p, const piece_body& body) {
  cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed);
  if (e != cudaSuccess) return "begin capture: " + cuda_text(e);
  std::string failure;
  try {
    p.outputs = body(p.inputs);
  } catch (const std::exception& ex) {
    failure = ex.what();
  }
  cudaGraph_t graph = nullptr;
  e = cudaStreamEndCapture(stream, &graph);
  if (failure.empty() && e != cudaSuccess) failure = "end capture: " + cuda_text(e);
  if (failure.empty()) {
    e = cudaGraphInstantiateWithFlags(&p.exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch);
    if (e != cudaSuccess) failure = "instantiate: " + cuda_text(e);
  }
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaGetLastError();
  if (!failure.empty()) p.outputs.clear();  // never launched: dropped with the graph
  return failure;
}

decode_graphs::decode_graphs(std::vector<int> sizes) : impl_(std::make_unique<impl>()) {
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  DI_CHECK(!sizes.empty() && sizes.front() > 0, "CUDA graph batch sizes must be positive");
  impl_->sizes = std::move(sizes);
}

decode_graphs::~decode_graphs() {
  cudaDeviceSynchronize();  // no replay still uses the buffers (any thread's stream)
  impl_->pieces.clear();
  impl_->steps.clear();
}

std::int64_t decode_graphs::padded_size(std::int64_t rows) const {
  for (int s : impl_->sizes)
    if (s >= rows) return s;
  return 0;
}

tensor decode_graphs::impl::stage(const std::string& name, const tensor& host) {
  DI_CHECK(host.dev().kind == device_kind::cpu && host.is_contiguous() && host.rank() >= 1 &&
               host.size(0) <= padded,
           "decode graphs: staged input '{}' must be a contiguous host tensor of at most {} rows, "
           "got {} on {}",
           name, padded, host.shape().str(), to_string(host.dev()));
  staged_tensor& st = staging[{name, padded}];
  const tensor_shape shape = with_rows(host, padded);
  const std::size_t bytes = std::size_t(shape.numel()) * dtype_size(host.type());
  if (!st.memory || st.view.shape() != shape || st.view.type() != host.type()) {
    auto block = std::make_unique<mapped_block>();
    void* p = nullptr;
    if (cudaMallocHost(&p, std::max<std::size_t>(bytes, 1)) != cudaSuccess) {
      cudaGetLastError();
      return {};
    }
    block->base = p;
    block->bytes = bytes;
    if (!cuda::mapped_at_host_address(p)) return {};
    std::memset(p, 0, bytes);
    st.view = tensor::view_of(p, shape, host.type(), dev);
    st.memory = std::move(block);
  }
  // The previous step's reads of this memory are over: every forward call begins with a
  // synchronization (reset_uploads) before its step starts.
  auto* base = static_cast<std::uint8_t*>(st.memory->base);
  std::memcpy(base, host.raw(), host.nbytes());
  std::memset(base + host.nbytes(), 0, bytes - host.nbytes());
  return st.view;
}

bool decode_graphs::begin_step_staged(std::int64_t rows, const tensor& tokens,
                                      const tensor& positions, device dev) {
  const std::int64_t padded = padded_size(rows);
  DI_CHECK(rows > 0 && padded > 0, "decode graphs: {} rows exceed the captured sizes", rows);
  DI_CHECK(tokens.size(0) == rows && positions.size(0) == rows,
           "decode graphs: {} tokens and {} positions for a step of {} rows", tokens.size(0),
           positions.size(0), rows);
  impl_->rows = rows;
  impl_->padded = padded;
  impl_->staged = false;
  impl_->dev = dev;
  if (!impl_->stage("step.tokens", tokens).defined() ||
      !impl_->stage("step.positions", positions).defined())
    return false;
  impl::step_buffers& b = impl_->steps[padded];
  if (!b.tokens.defined()) {
    b.tokens = tensor::zeros({padded}, dtype::i64, dev);
    b.positions = tensor::zeros({padded}, dtype::i64, dev);
  }
  impl_->staged = true;
  ++g_staged_steps;
  return true;
}

bool decode_graphs::step_staged() const {
  return impl_->staged;
}

void decode_graphs::copy_step_inputs() {
  DI_CHECK(impl_->staged, "decode graphs: copy_step_inputs without begin_step_staged");
  const std::int64_t padded = impl_->padded;
  impl::step_buffers& b = impl_->steps.at(padded);
  b.tokens.copy_from(impl_->staging.at({"step.tokens", padded}).view);
  b.positions.copy_from(impl_->staging.at({"step.positions", padded}).view);
}

tensor decode_graphs::staged_input(const std::string& name, const tensor& host) {
  DI_CHECK(impl_->staged, "decode graphs: staged_input '{}' outside a staged step", name);
  const tensor t = impl_->stage(name, host);
  DI_CHECK(t.defined(), "decode graphs: staged input '{}' could not be mapped", name);
  return t;
}

void decode_graphs::begin_step(std::int64_t rows, const tensor& tokens, const tensor& positions) {
  const std::int64_t padded = padded_size(rows);
  DI_CHECK(rows > 0 && padded > 0, "decode graphs: {} rows exceed the captured sizes", rows);
  impl::step_buffers& b = impl_->steps[padded];
  if (!b.tokens.defined()) {
    b.tokens = tensor::zeros({padded}, dtype::i64, tokens.dev());
    b.positions = tensor::zeros({padded}, dtype::i64, tokens.dev());
  }
  copy_rows(b.tokens, tokens);
  copy_rows(b.positions, positions);
  impl_->rows = rows;
  impl_->padded = padded;
  impl_->staged = false;
}

const tensor& decode_graphs::tokens() const {
  return impl_->steps.at(impl_->padded).tokens;
}

const tensor& decode_graphs::positions() const {
  return impl_->steps.at(impl_->padded).positions;
}

std::vector<tensor> decode_graphs::run(int layer, int piece_id, const std::vector<tensor>& inputs,
                                       const piece_body& body) {
  const std::int64_t rows = impl_->rows, padded = impl_->padded;
  DI_CHECK(padded > 0, "decode graphs: run before begin_step");
  for (const tensor& in : inputs)
    DI_CHECK(in.size(0) == rows, "decode graph input {} for a step of {} rows", in.shape().str(),
             rows);
  const auto key = std::make_tuple(layer, piece_id, padded);
  std::unique_ptr<impl::piece>& p = impl_->pieces[key];
  cudaStream_t stream = cuda::current_stream();
  std::vector<tensor> kept(inputs.size());  // input_slot inputs as the producer left them
  if (!p) {
    auto fresh = std::make_unique<impl::piece>();
    // An input that is another captured piece's output (the layer's input from the last
    // layer's FFN piece, the mix from the attention piece) is read where that graph leaves it:
    // its allocation comes back at the same address on every launch, so no buffer and no
    // copy before each launch (a device copy outside the graphs' programmatic launches).
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const tensor& in = inputs[i];
      const tensor held = impl_->output_holding(in, padded);
      fresh->bound.push_back(held.defined());
      if (held.defined()) {
        fresh->inputs.push_back(held);
        continue;
      }
      // An input_slot buffer (the eager producer wrote there): the piece's own input buffer.
      const auto slot = impl_->slots.find({layer, piece_id, padded, int(i)});
      const bool fits = slot != impl_->slots.end() && slot->second.type() == in.type() &&
                        slot->second.shape() == with_rows(in, padded);
      fresh->inputs.push_back(fits ? slot->second
                                   : tensor::zeros(with_rows(in, padded), in.type(), in.dev()));
    }
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (fresh->bound[i]) continue;
      if (fresh->inputs[i].raw() != inputs[i].raw())
        copy_rows(fresh->inputs[i], inputs[i]);
      else  // the warm-up may change it in place (the inverse rotary of the attention output)
        kept[i] = inputs[i].clone();
    }
    // Eager warm-up: lazy setup (handles, attributes) happens outside the capture, and its
    // outputs carry the step on if the capture fails.
    const std::vector<tensor> warm = body(fresh->inputs);
    std::string failure = impl::capture(stream, *fresh, body);
    if (!failure.empty()) {
      impl_->pieces.erase(key);
      impl_->failure =
          fmt::format("layer {} piece {} at {} rows: {}", layer, piece_id, padded, failure);
      return head_rows(warm, rows);
    }
    p = std::move(fresh);
  }
  // Inputs are (re)copied right before the launch: the warm-up may have changed them in place.
  // A bound input must come from the same piece's output every step (the graph reads that
  // address; copying another tensor there would overwrite an output others may still read).
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!p->bound[i]) {  // (already there when the producer wrote into the input_slot)
      if (kept[i].defined())
        copy_rows(p->inputs[i], kept[i]);
      else if (p->inputs[i].raw() != inputs[i].raw())
        copy_rows(p->inputs[i], inputs[i]);
      continue;
    }
    DI_CHECK(p->inputs[i].raw() == inputs[i].raw(),
             "decode graphs: layer {} piece {} input {} was captured reading another piece's "
             "output, but this step passes a different tensor",
             layer, piece_id, i);
  }
  CUDA_CHECK(cudaGraphLaunch(p->exec, stream));
  return head_rows(p->outputs, rows);
}

bool graphs_capture_compressed() {
  return g_capture_compressed;
}

bool graphs_use_slots() {
  return g_slots;
}

bool graphs_capture_start() {
  return g_capture_start.load();
}

void set_graphs_capture_start(bool on) {
  g_capture_start.store(on);
}

bool graphs_stage_inputs() {
  return g_stage_inputs.load();
}

void set_graphs_stage_inputs(bool on) {
  g_stage_inputs.store(on);
}

std::int64_t graphs_staged_steps() {
  return g_staged_steps.load();
}

bool graphs_merge_sites() {
  return g_merge_sites.load();
}

void set_graphs_merge_sites(bool on) {
  g_merge_sites.store(on);
}

const tensor& decode_graphs::constant(const std::string& name,
                                      const std::function<tensor(std::int64_t)>& make) {
  DI_CHECK(impl_->padded > 0, "decode graphs: constant before begin_step");
  tensor& t = impl_->constants[{name, impl_->padded}];
  if (!t.defined()) t = make(impl_->padded);
  DI_CHECK(t.defined(), "decode graphs: constant '{}' was not made", name);
  return t;
}

tensor decode_graphs::input_slot(int layer, int piece, int index, const tensor_shape& row,
                                 dtype type, device dev) {
  const std::int64_t rows = impl_->rows, padded = impl_->padded;
  DI_CHECK(padded > 0, "decode graphs: input_slot before begin_step");
  std::vector<std::int64_t> dims{padded};
  dims.insert(dims.end(), row.dims().begin(), row.dims().end());
  const tensor_shape shape{std::span<const std::int64_t>(dims)};
  tensor& t = impl_->slots[{layer, piece, padded, index}];
  if (!t.defined() || t.shape() != shape || t.type() != type)
    t = tensor::zeros(shape, type, dev);  // (padding rows stay zero: never written)
  return t.slice(0, 0, rows);
}

std::int64_t decode_graphs::captured() const {
  std::int64_t n = 0;
  for (const auto& [key, piece] : impl_->pieces) n += piece != nullptr;
  return n;
}

bool decode_graphs::usable() const {
  return impl_->failure.empty();
}

const std::string& decode_graphs::failure() const {
  return impl_->failure;
}

#else

struct decode_graphs::impl {};

bool graphs_capture_compressed() {
  return true;
}

bool graphs_use_slots() {
  return false;
}

bool graphs_capture_start() {
  return false;
}

void set_graphs_capture_start(bool) {}

bool graphs_stage_inputs() {
  return false;
}

void set_graphs_stage_inputs(bool) {}

std::int64_t graphs_staged_steps() {
  return 0;
}

bool graphs_merge_sites() {
  return false;
}

void set_graphs_merge_sites(bool) {}

decode_graphs::decode_graphs(std::vector<int>) {
  DI_FAIL("CUDA graphs need a build with the CUDA backend");
}
decode_graphs::~decode_graphs() = default;
std::int64_t decode_graphs::padded_size(std::int64_t) const {
  return 0;
}
void decode_graphs::begin_step(std::int64_t, const tensor&, const tensor&) {}
bool decode_graphs::begin_step_staged(std::int64_t, const tensor&, const tensor&, device) {
  return false;
}
bool decode_graphs::step_staged() const {
  return false;
}
void decode_graphs::copy_step_inputs() {
  DI_FAIL("CUDA graphs need a build with the CUDA backend");
}
tensor decode_graphs::staged_input(const std::string&, const tensor&) {
  DI_FAIL("CUDA graphs need a build with the CUDA backend");
}
const tensor& decode_graphs::tokens() const {
  DI_FAIL("CUDA graphs need a build with the CUDA backend");
}
const tensor& decode_graphs::positions() const {
  DI_FAIL("CUDA graphs need a build with the CUDA backend");
}
std::vector<tensor> decode_graphs::run(int, int, const std::vector<tensor>&, const piece_body&) {
  DI_FAIL("CUDA graphs need a build with the CUDA backend");
}
tensor decode_graphs::input_slot(int, int, int, const tensor_shape&, dtype, device) {
  DI_FAIL("CUDA graphs need a build with the CUDA backend");
}
const tensor& decode_graphs::constant(const std::string&,
                                      const std::function<tensor(std::int64_t)>&) {
  DI_FAIL("CUDA graphs need a build with the CUDA backend");
}
std::int64_t decode_graphs::captured() const {
  return 0;
}
bool decode_graphs::usable() const {
  return false;
}
const std::string& decode_graphs::failure() const {
  static const std::string none = "CUDA graphs need a build with the CUDA backend";
  return none;
}

#endif

}  // namespace di::detail
