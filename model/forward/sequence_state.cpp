// The block pool and the per-sequence state. The slot is one byte buffer laid out by
// cache_layout (so a runtime can carve slots out of an arena and snapshot it by copy); stream
// entries live in pool blocks reached through per-stream block tables.
#include "model/forward/sequence_state.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>

namespace di {

kv_block_pool::kv_block_pool(const cache_layout& layout, std::vector<int> num_blocks, device dev,
                             int num_slots)
    : layout_(layout), dev_(dev), num_blocks_(std::move(num_blocks)), num_slots_(num_slots) {
  DI_CHECK(num_slots >= 0, "block pool: {} sequence slots", num_slots);
  DI_CHECK(num_blocks_.size() == layout.streams.size(),
           "block pool: {} block counts for {} streams", num_blocks_.size(), layout.streams.size());
  for (std::size_t s = 0; s < layout.streams.size(); ++s) {
    DI_CHECK(num_blocks_[s] >= 0, "block pool: {} blocks for stream {}", num_blocks_[s], s);
    const auto bytes = std::int64_t(num_blocks_[s]) * std::int64_t(layout.block_bytes(int(s)));
    arenas_.push_back(tensor::zeros({bytes}, dtype::u8, dev));  // [bytes]
    std::vector<int> ids;
    for (int b = num_blocks_[s] - 1; b >= 0; --b) ids.push_back(b);
    free_.push_back(std::move(ids));
  }
  const std::size_t row = layout.window_format.row_bytes();
  const std::size_t unit = std::lcm(row, std::size_t(16));
  slot_stride_ = std::max<std::size_t>(1, (layout.slot_bytes + unit - 1) / unit) * unit;
  if (num_slots_ > 0)
    slots_ = tensor::empty({std::int64_t(slot_stride_) * num_slots_}, dtype::u8, dev);
  for (int i = num_slots_ - 1; i >= 0; --i) free_slots_.push_back(i);
}

kv_block_pool::kv_block_pool(const cache_layout& layout, int blocks_per_stream, device dev,
                             int num_slots)
    : kv_block_pool(layout, std::vector<int>(layout.streams.size(), blocks_per_stream), dev,
                    num_slots) {}

int kv_block_pool::acquire_slot() {
  if (free_slots_.empty()) return -1;
  const int i = free_slots_.back();
  free_slots_.pop_back();
  return i;
}

void kv_block_pool::release_slot(int slot) {
  free_slots_.push_back(slot);
}

tensor kv_block_pool::slot_memory(int slot) const {
  DI_CHECK(slot >= 0 && slot < num_slots_, "block pool: slot {} of {}", slot, num_slots_);
  const auto at = std::int64_t(slot_stride_) * slot;
  return slots_.slice(0, at, at + std::int64_t(layout_.slot_bytes));
}

tensor kv_block_pool::ring_rows() const {
  DI_CHECK(num_slots_ > 0, "block pool: no slot arena");
  const auto row = std::int64_t(layout_.window_format.row_bytes());
  const auto at = std::int64_t(layout_.window_offset);
  const std::int64_t rows = (slots_.numel() - at) / row;
  return slots_.slice(0, at, at + rows * row).view({rows, row});
}

int kv_block_pool::allocate(int s) {
  auto& ids = free_[std::size_t(s)];
  DI_CHECK(!ids.empty(), "KV block pool exhausted: stream {} (layer {}) has all {} blocks in use",
           s, layout_.streams[std::size_t(s)].layer, num_blocks(s));
  const int b = ids.back();
  ids.pop_back();
  return b;
}

void kv_block_pool::release(int s, int block) {
  free_[std::size_t(s)].push_back(block);
}

tensor kv_block_pool::block(int s, int block) const {
  const std::int64_t per_block = layout_.entries_per_block;
  return arena(s).slice(0, std::int64_t(block) * per_block, std::int64_t(block + 1) * per_block);
}

tensor kv_block_pool::arena(int s) const {
  const auto row = std::int64_t(layout_.streams[std::size_t(s)].format.row_bytes());
  const tensor& a = arenas_[std::size_t(s)];
  return a.view({a.numel() / row, row});  // [blocks * entries_per_block, row_bytes]
}

sequence_state::sequence_state(kv_block_pool& pool, std::int64_t max_tokens, block_source source)
    : pool_(pool),
      source_(source),
      max_tokens_(max_tokens),
      slot_(tensor::zeros({std::int64_t(pool.layout().slot_bytes)}, dtype::u8)) {
  DI_CHECK(max_tokens > 0, "sequence state: capacity of {} tokens", max_tokens);
  const cache_layout& L = layout();
  block_tables_.resize(L.streams.size());
  num_entries_.assign(L.streams.size(), 0);
  for (std::size_t c = 0; c < L.compressors.size(); ++c) {
    const compressor_slot& s = L.compressors[c];
    const std::size_t n = std::size_t(s.rows) * std::size_t(s.width);
    float* kv = slot_floats(s.offset);
    std::fill(kv, kv + n, 0.0f);
    std::fill(kv + n, kv + 2 * n, -std::numeric_limits<float>::infinity());
  }
  if (L.has_engram) engram() = engram_history{};
  slot_index_ = pool.acquire_slot();
  if (slot_index_ >= 0) {  // initialised on the host, then copied into the arena slot
    tensor arena_slot = pool.slot_memory(slot_index_);
    arena_slot.copy_from(slot_);
    slot_ = arena_slot;
  } else if (dev().kind != device_kind::cpu) {
    slot_ = slot_.to(dev());
  }
}

sequence_state::~sequence_state() {
  if (slot_index_ >= 0) pool_.release_slot(slot_index_);
  if (source_ != block_source::pool) return;
  for (std::size_t s = 0; s < block_tables_.size(); ++s)
    for (int b : block_tables_[s]) pool_.release(int(s), b);
}

tensor sequence_state::window_ring(int layer) {
  const cache_layout& L = layout();
  const std::size_t row = L.window_format.row_bytes();
  std::uint8_t* base = slot_.data<std::uint8_t>() + L.window_offset +
                       std::size_t(layer) * std::size_t(L.window) * row;
  return tensor::view_of(base, {L.window, std::int64_t(row)}, dtype::u8, dev());
}

tensor sequence_state::compressor_kv(int c) {
  const compressor_slot& s = layout().compressors[std::size_t(c)];
  return tensor::view_of(slot_floats(s.offset), {s.rows, s.width}, dtype::f32, dev());
}

tensor sequence_state::compressor_score(int c) {
  const compressor_slot& s = layout().compressors[std::size_t(c)];
  const std::size_t n = std::size_t(s.rows) * std::size_t(s.width);
  return tensor::view_of(slot_floats(s.offset) + n, {s.rows, s.width}, dtype::f32, dev());
}

engram_history& sequence_state::engram() {
  DI_CHECK(layout().has_engram, "sequence state: the model has no Engram layers");
  if (slot_.dev().kind != device_kind::cpu) return engram_host_;
  return *reinterpret_cast<engram_history*>(slot_.data<std::uint8_t>() + layout().engram_offset);
}

std::span<const std::uint8_t> sequence_state::slot() const {
  if (slot_.dev().kind == device_kind::cpu) return {slot_.data<std::uint8_t>(), slot_.nbytes()};
  // A device slot is copied to a host mirror, with the host-kept Engram history in its place.
  host_slot_.resize(slot_.nbytes());
  tensor::view_of(host_slot_.data(), {std::int64_t(host_slot_.size())}, dtype::u8)
      .copy_from(slot_);
  if (layout().has_engram)
    std::memcpy(host_slot_.data() + layout().engram_offset, &engram_host_, sizeof engram_host_);
  return host_slot_;
}

void sequence_state::load_slot(std::span<const std::uint8_t> bytes) {
  DI_CHECK(bytes.size() == slot_.nbytes(),
           "sequence state: a slot of {} bytes, the layout's has {}", bytes.size(), slot_.nbytes());
  if (slot_.dev().kind == device_kind::cpu) {
    std::copy(bytes.begin(), bytes.end(), slot_.data<std::uint8_t>());
    return;
  }
  slot_.copy_from(tensor::view_of(bytes.data(), {std::int64_t(bytes.size())}, dtype::u8));
  if (layout().has_engram)
    std::memcpy(&engram_host_, bytes.data() + layout().engram_offset, sizeof engram_host_);
}

void sequence_state::adopt_prefix(std::int64_t num_cached_tokens, std::int64_t resume_position) {
  DI_CHECK(source_ == block_source::planned && num_tokens_ == 0,
           "sequence state: a cached prefix can only be adopted by a fresh, planned state");
  DI_CHECK(0 <= resume_position && resume_position <= num_cached_tokens &&
               num_cached_tokens <= max_tokens_,
           "sequence state: resume at {} over a cached prefix of {} tokens (capacity {})",
           resume_position, num_cached_tokens, max_tokens_);
  num_cached_tokens_ = num_cached_tokens;
  num_tokens_ = resume_position;
  for (std::size_t s = 0; s < num_entries_.size(); ++s)
    num_entries_[s] = resume_position / layout().streams[s].ratio;
}

void sequence_state::append_blocks(int s, std::span<const std::int32_t> ids) {
  DI_CHECK(source_ == block_source::planned,
           "sequence state: blocks are appended only to a planned state");
  for (std::int32_t b : ids)
    DI_CHECK(b >= 0 && b < pool_.num_blocks(s), "sequence state: block {} of stream {} (of {})", b,
             s, pool_.num_blocks(s));
  block_tables_[std::size_t(s)].insert(block_tables_[std::size_t(s)].end(), ids.begin(), ids.end());
}

void sequence_state::reserve(int s, std::int64_t entries) {
  auto& table = block_tables_[std::size_t(s)];
  const std::int64_t per_block = layout().entries_per_block;
  const std::int64_t needed = (entries + per_block - 1) / per_block - std::int64_t(table.size());
  if (needed <= 0) return;
  DI_CHECK(source_ == block_source::pool,
           "stream {} (layer {}): {} entries need {} more blocks than the plan gave ({})", s,
           layout().streams[std::size_t(s)].layer, entries, needed, table.size());
  DI_CHECK(pool_.num_free(s) >= needed,
           "KV block pool exhausted: layer {} needs {} more blocks, {} of {} are free",
           layout().streams[std::size_t(s)].layer, needed, pool_.num_free(s), pool_.num_blocks(s));
  for (std::int64_t i = 0; i < needed; ++i) table.push_back(pool_.allocate(s));
}

void sequence_state::append_entries(int s, const tensor& rows) {
  const cache_stream& stream = layout().streams[std::size_t(s)];
  const std::size_t row_bytes = stream.format.row_bytes();
  check_tensor(rows, dtype::u8, {rows.size(0), std::int64_t(row_bytes)}, "stream entries");
  DI_CHECK(rows.dev() == dev(), "stream entries on {}, the state on {}", to_string(rows.dev()),
           to_string(dev()));
  std::int64_t& count = num_entries_[std::size_t(s)];
  reserve(s, count + rows.size(0));
  const std::int64_t per_block = layout().entries_per_block;
  const std::int64_t num_shared = num_cached_tokens_ / stream.ratio;  // entries of the prefix
  std::int64_t i = 0;
  if (count < num_shared) {  // replay rows' entries: the cached blocks hold them
    const std::int64_t skip = std::min(rows.size(0), num_shared - count);
    i += skip;
    count += skip;
  }
  while (i < rows.size(0)) {  // the rest block by block, one copy per contiguous run
    const std::int64_t in_block = count % per_block;
    const std::int64_t n = std::min(rows.size(0) - i, per_block - in_block);
    tensor blk = pool_.block(s, block_tables_[std::size_t(s)][std::size_t(count / per_block)]);
    tensor dst = blk.slice(0, in_block, in_block + n);
    dst.copy_from(rows.slice(0, i, i + n));
    i += n;
    count += n;
  }
}

void sequence_state::commit_entries(int s, std::int64_t n) {
  std::int64_t& count = num_entries_[std::size_t(s)];
  DI_CHECK(n >= 0 && count >= num_cached_tokens_ / layout().streams[std::size_t(s)].ratio,
           "stream {}: {} entries committed over a cached prefix", s, n);
  reserve(s, count + n);
  count += n;
}

std::vector<std::int64_t> sequence_state::entry_rows(int s, std::int64_t begin,
                                                     std::int64_t end) const {
  DI_CHECK(0 <= begin && begin <= end && end <= num_entries(s), "stream {}: entries [{}, {}) of {}",
           s, begin, end, num_entries(s));
  const std::int64_t per_block = layout().entries_per_block;
  std::vector<std::int64_t> rows;
  rows.reserve(std::size_t(end - begin));
  for (std::int64_t e = begin; e < end; ++e)
    rows.push_back(std::int64_t(block_tables_[std::size_t(s)][std::size_t(e / per_block)]) *
                       per_block +
                   e % per_block);
  return rows;
}

void sequence_state::advance(std::int64_t n) {
  DI_CHECK(n >= 0 && num_tokens_ + n <= max_tokens_,
           "sequence state: {} + {} tokens exceed its capacity of {}", num_tokens_, n, max_tokens_);
  num_tokens_ += n;
}

}  // namespace di
