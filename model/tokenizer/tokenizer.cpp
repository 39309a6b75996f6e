// tokenizer: building the tables from a tokenizer_spec, and the encode/decode pipelines
//   encode: added tokens -> pre-tokenizer pieces -> BPE (cached) -> ids
//   decode: ids -> token bytes (ByteLevel decoder) -> lossy UTF-8
#include "model/tokenizer/tokenizer.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <filesystem>
#include <unordered_map>

#include "common/error.hpp"
#include "common/mapped_file.hpp"
#include "model/tokenizer/detail/bpe.hpp"
#include "model/tokenizer/detail/byte_level.hpp"
#include "model/tokenizer/detail/spec.hpp"

namespace di::tok {

using namespace detail;

struct encode_workspace;

struct tokenizer::impl {
  std::vector<std::string> tokens;  // [vocab_size] token string by id ("" if none)
  std::vector<bool> has_token;      // [vocab_size]
  std::vector<bool> special;        // [vocab_size]
  std::unordered_map<std::string, token_id> token_ids;
  std::string decoded;                    // bytes of every token, concatenated
  std::vector<std::uint32_t> decoded_at;  // [vocab_size + 1] offsets into `decoded`
  std::vector<special_token> specials;
  std::array<std::uint32_t, 256> byte_ids{};
  merge_table merges;
  bool ignore_merges = false;
  std::unordered_map<std::string, token_id> piece_ids;  // raw bytes -> id, for ignore_merges
  std::unique_ptr<added_token_matcher> added;
  std::unique_ptr<pre_tokenizer> pre;
  std::optional<token_id> bos, eos;
  bool add_bos_token = false;
  bool add_eos_token = false;
  std::uint64_t serial = 0;  // identifies this tokenizer's per-thread workspaces

  void build_vocab(tokenizer_spec& spec, std::string_view origin);
  void build_added(const tokenizer_spec& spec, std::string_view origin);
  void build_model(const tokenizer_spec& spec);
  void build_decoder();
  void encode_text(std::string_view text, std::vector<token_id>& out, encode_workspace& ws) const;
  void encode_piece(std::string_view bytes, std::vector<token_id>& out, encode_workspace& ws) const;
};

namespace {
std::atomic<std::uint64_t> g_next_serial{1};
}  // namespace

// Per-thread scratch and word cache. A thread may use a few tokenizers; it keeps one
// workspace for each of the most recent ones.
struct encode_workspace {
  std::uint64_t owner = 0;
  std::uint64_t last_use = 0;
  word_cache cache;
  std::vector<text_segment> segments, segments_scratch;
  std::vector<piece> pieces, pieces_scratch;
  bpe_scratch bpe;
};

namespace {

encode_workspace& workspace_for(std::uint64_t serial) {
  constexpr std::size_t k_num_workspaces = 4;
  thread_local std::array<std::unique_ptr<encode_workspace>, k_num_workspaces> spaces;
  thread_local std::uint64_t clock = 0;
  encode_workspace* victim = nullptr;
  for (auto& ws : spaces) {
    if (!ws) {
      ws = std::make_unique<encode_workspace>();
      victim = ws.get();
      break;
    }
    if (ws->owner == serial) {
      ws->last_use = ++clock;
      return *ws;
    }
    if (victim == nullptr || ws->last_use < victim->last_use) victim = ws.get();
  }
  victim->cache.clear();
  victim->owner = serial;
  victim->last_use = ++clock;
  return *victim;
}

// A tokenizer file may be one line holding the relative path of the real file (the golden
// data's layout). Returns the path of the file to read: `path` itself unless it redirects.
std::filesystem::path resolve_redirect(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::file_size(path, ec) >= 4096 || ec) return path;
  std::string text = read_text_file(path.string());
  auto first = text.find_first_not_of(" \t\r\n");
  auto last = text.find_last_not_of(" \t\r\n");
  if (first == std::string::npos || text[first] == '{') return path;
  std::string line = text.substr(first, last - first + 1);
  if (line.find('\n') != std::string::npos) return path;
  std::filesystem::path target = path.parent_path() / line;
  return std::filesystem::is_regular_file(target, ec) ? target : path;
}

}  // namespace

void tokenizer::impl::build_vocab(tokenizer_spec& spec, std::string_view origin) {
  tokens = std::move(spec.vocab);
  has_token = std::move(spec.vocab_has_id);
  for (std::size_t id = 0; id < tokens.size(); ++id) {
    if (has_token[id]) token_ids.emplace(tokens[id], token_id(id));
  }
  for (int b = 0; b < 256; ++b) {
    std::string token = bytes_to_token(std::string(1, char(b)));
    auto it = token_ids.find(token);
    DI_CHECK(it != token_ids.end(),
             "{}: model.vocab lacks the byte-level token '{}' of byte 0x{:02X}", origin, token, b);
    byte_ids[std::size_t(b)] = std::uint32_t(it->second);
  }
}

void tokenizer::impl::build_added(const tokenizer_spec& spec, std::string_view origin) {
  for (std::size_t i = 0; i < spec.added_tokens.size(); ++i) {
    const added_token& t = spec.added_tokens[i];
    auto id = std::size_t(t.id);
    if (auto it = token_ids.find(t.content); it != token_ids.end()) {
      DI_CHECK(it->second == t.id, "{}: added_tokens[{}]: '{}' has id {} but is token {} already",
               origin, i, t.content, t.id, it->second);
    } else {
      DI_CHECK(id >= tokens.size() || !has_token[id],
               "{}: added_tokens[{}]: id {} of '{}' already belongs to token '{}'", origin, i, t.id,
               t.content, tokens[id]);
      if (id >= tokens.size()) {
        tokens.resize(id + 1);
        has_token.resize(id + 1, false);
      }
      tokens[id] = t.content;
      has_token[id] = true;
      token_ids.emplace(t.content, t.id);
    }
  }
  special.assign(tokens.size(), false);
  for (const added_token& t : spec.added_tokens) {
    if (t.special && !special[std::size_t(t.id)]) {
      special[std::size_t(t.id)] = true;
      specials.push_back({t.id, t.content});
    }
  }
  std::sort(specials.begin(), specials.end(),
            [](const special_token& a, const special_token& b) { return a.id < b.id; });
  added = std::make_unique<added_token_matcher>(spec.added_tokens);
}

// Runs before build_added, so `tokens` holds only the model vocabulary.
void tokenizer::impl::build_model(const tokenizer_spec& spec) {
  for (std::size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const merge_spec& m = spec.merges[rank];
    merges.insert(m.left, m.right, {std::uint32_t(rank), m.merged});
  }
  ignore_merges = spec.ignore_merges;
  if (ignore_merges) {
    for (std::size_t id = 0; id < tokens.size(); ++id) {
      if (!has_token[id]) continue;
      if (auto bytes = token_to_bytes(tokens[id])) piece_ids.emplace(*bytes, token_id(id));
    }
  }
}

void tokenizer::impl::build_decoder() {
  decoded_at.assign(tokens.size() + 1, 0);
  for (std::size_t id = 0; id < tokens.size(); ++id) {
    decoded_at[id] = std::uint32_t(decoded.size());
    if (!has_token[id]) continue;
    // ByteLevel decoder: map characters back to bytes; a token with characters outside the
    // byte alphabet (e.g. "<｜end▁of▁sentence｜>") decodes to its own UTF-8.
    auto bytes = token_to_bytes(tokens[id]);
    decoded += bytes ? *bytes : tokens[id];
  }
  decoded_at[tokens.size()] = std::uint32_t(decoded.size());
}

tokenizer::tokenizer(std::unique_ptr<impl> impl) : impl_(std::move(impl)) {}
tokenizer::~tokenizer() = default;
tokenizer::tokenizer(tokenizer&&) noexcept = default;
tokenizer& tokenizer::operator=(tokenizer&&) noexcept = default;

tokenizer tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json,
                               const load_options& options, std::string_view origin) {
  return load(tokenizer_json, config_json, options, origin, "tokenizer_config.json");
}

tokenizer tokenizer::load(std::string_view tokenizer_json, std::string_view config_json,
                          const load_options& options, std::string_view origin,
                          std::string_view config_origin) {
  tokenizer_spec spec = parse_tokenizer_json(tokenizer_json, origin);
  if (!config_json.empty()) parse_tokenizer_config(config_json, config_origin, spec);
  auto p = std::make_unique<impl>();
  p->serial = g_next_serial.fetch_add(1);
  p->build_vocab(spec, origin);
  p->build_model(spec);
  p->build_added(spec, origin);
  p->build_decoder();
  auto resolve = [&](const std::optional<std::string>& content, const char* key) {
    std::optional<token_id> id;
    if (!content) return id;
    auto it = p->token_ids.find(*content);
    DI_CHECK(it != p->token_ids.end(), "{}: {} '{}' is not a token of tokenizer.json",
             config_origin, key, *content);
    return id = it->second;
  };
  p->bos = resolve(spec.bos_token, "bos_token");
  p->eos = resolve(spec.eos_token, "eos_token");
  p->add_bos_token = spec.add_bos_token;
  p->add_eos_token = spec.add_eos_token;
  auto engine = options.allow_fast_pre_tokenizer ? pre_tokenizer_engine::automatic
                                                 : pre_tokenizer_engine::pcre2;
  p->pre = std::make_unique<pre_tokenizer>(std::move(spec.splits), engine);
  return tokenizer(std::move(p));
}

tokenizer tokenizer::from_dir(const std::string& dir, const load_options& options) {
  std::filesystem::path base(dir);
  std::filesystem::path json_path = resolve_redirect(base / "tokenizer.json");
  std::filesystem::path config_path = base / "tokenizer_config.json";
  std::string config;
  if (std::filesystem::exists(config_path)) {
    config_path = resolve_redirect(config_path);
    config = read_text_file(config_path.string());
  }
  return load(read_text_file(json_path.string()), config, options, json_path.string(),
              config_path.string());
}

void tokenizer::impl::encode_piece(std::string_view bytes, std::vector<token_id>& out,
                                   encode_workspace& ws) const {
  if (bytes.size() == 1) {
    out.push_back(token_id(byte_ids[static_cast<unsigned char>(bytes[0])]));
    return;
  }
  if (ignore_merges) {
    if (auto it = piece_ids.find(std::string(bytes)); it != piece_ids.end()) {
      out.push_back(it->second);
      return;
    }
  }
  bool cacheable = bytes.size() <= word_cache::k_max_key_bytes;
  std::uint64_t hash = 0;
  if (cacheable) {
    hash = hash_bytes(bytes);
    if (ws.cache.find(bytes, hash, out)) return;
  }
  auto& symbols = ws.bpe.symbols;
  symbols.resize(bytes.size());
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    symbols[i] = byte_ids[static_cast<unsigned char>(bytes[i])];
  }
  bpe_merge(merges, symbols, ws.bpe);
  std::size_t first = out.size();
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (cacheable) ws.cache.insert(bytes, hash, {out.data() + first, symbols.size()});
}

void tokenizer::impl::encode_text(std::string_view text, std::vector<token_id>& out,
                                  encode_workspace& ws) const {
  pre->split(text, ws.pieces, ws.pieces_scratch);
  for (piece p : ws.pieces) encode_piece(text.substr(p.begin, p.end - p.begin), out, ws);
}

void tokenizer::encode_into(std::string_view text, std::vector<token_id>& out,
                            const encode_options& options) const {
  DI_CHECK(text.size() < (std::size_t(1) << 32), "encode: text of {} bytes exceeds 4 GiB",
           text.size());
  std::size_t bad = find_invalid_utf8(text);
  DI_CHECK(bad == text.size(), "encode: text is not valid UTF-8 (byte 0x{:02X} at offset {})",
           static_cast<unsigned char>(text[bad]), bad);
  if (options.add_bos && impl_->add_bos_token) out.push_back(*impl_->bos);
  encode_workspace& ws = workspace_for(impl_->serial);
  impl_->added->split(text, ws.segments, ws.segments_scratch);
  for (const text_segment& seg : ws.segments) {
    if (seg.id >= 0) {
      out.push_back(seg.id);
    } else {
      impl_->encode_text(text.substr(seg.begin, seg.end - seg.begin), out, ws);
    }
  }
  // add_special_tokens: the ByteLevel post_processor (the only one accepted) adds no token.
  if (options.add_bos && impl_->add_eos_token) out.push_back(*impl_->eos);
}

std::vector<token_id> tokenizer::encode(std::string_view text,
                                        const encode_options& options) const {
  std::vector<token_id> ids;
  ids.reserve(text.size() / 3 + 4);
  encode_into(text, ids, options);
  return ids;
}

std::string_view tokenizer::token_bytes(token_id id) const {
  DI_CHECK(id >= 0 && std::size_t(id) < impl_->tokens.size() && impl_->has_token[std::size_t(id)],
           "token id {} is not in the vocabulary (size {})", id, impl_->tokens.size());
  auto i = std::size_t(id);
  return std::string_view(impl_->decoded)
      .substr(impl_->decoded_at[i], impl_->decoded_at[i + 1] - impl_->decoded_at[i]);
}

std::string tokenizer::decode(std::span<const token_id> ids, const decode_options& options) const {
  std::string bytes;
  bytes.reserve(ids.size() * 4);
  for (token_id id : ids) {
    std::string_view b = token_bytes(id);
    if (options.skip_special_tokens && impl_->special[std::size_t(id)]) continue;
    bytes.append(b);
  }
  if (find_invalid_utf8(bytes) == bytes.size()) return bytes;
  return utf8_lossy(bytes);
}

std::size_t tokenizer::vocab_size() const {
  return impl_->tokens.size();
}

std::optional<std::string_view> tokenizer::id_to_token(token_id id) const {
  if (id < 0 || std::size_t(id) >= impl_->tokens.size() || !impl_->has_token[std::size_t(id)]) {
    return std::nullopt;
  }
  return impl_->tokens[std::size_t(id)];
}

std::optional<token_id> tokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->token_ids.find(std::string(token));
  if (it == impl_->token_ids.end()) return std::nullopt;
  return it->second;
}

bool tokenizer::is_special(token_id id) const {
  return id >= 0 && std::size_t(id) < impl_->special.size() && impl_->special[std::size_t(id)];
}

std::optional<token_id> tokenizer::bos_id() const {
  return impl_->bos;
}
std::optional<token_id> tokenizer::eos_id() const {
  return impl_->eos;
}
const std::vector<special_token>& tokenizer::special_tokens() const {
  return impl_->specials;
}
bool tokenizer::uses_fast_pre_tokenizer() const {
  return impl_->pre->uses_fast_path();
}

incremental_detokenizer::incremental_detokenizer(const tokenizer& tok,
                                                 const decode_options& options)
    : tok_(&tok), options_(options) {}

std::string incremental_detokenizer::push(token_id id) {
  std::string out;
  std::string_view bytes = tok_->token_bytes(id);
  if (options_.skip_special_tokens && tok_->is_special(id)) return out;
  decoder_.feed(bytes, out);
  return out;
}

std::string incremental_detokenizer::finish() {
  std::string out;
  decoder_.finish(out);
  return out;
}

bool incremental_detokenizer::has_pending() const {
  return decoder_.has_pending();
}

bool incremental_detokenizer::abandons_pending(token_id id) const {
  if (options_.skip_special_tokens && tok_->is_special(id)) return false;
  const std::string_view bytes = tok_->token_bytes(id);
  return !bytes.empty() && decoder_.abandons_pending(static_cast<unsigned char>(bytes[0]));
}

}  // namespace di::tok
