// sequence: token bookkeeping and the detokenize -> stop-check pipeline of one request.
#include "runtime/sequence.hpp"

#include "common/error.hpp"

#include <utility>

namespace di::runtime {

namespace {

stop_config make_stop_config(const sampling_params& params, const sequence_limits& limits) {
  stop_config c;
  c.stop_strings = params.stop;
  c.stop_token_ids = limits.stop_token_ids;
  c.max_tokens = limits.max_new_tokens;
  c.min_tokens = params.min_tokens;
  c.include_stop_string = params.include_stop_str_in_output;
  return c;
}

/// Yields no text: for schedulers run on token ids only.
class silent_decoder final : public text_decoder {
 public:
  std::string push(std::int32_t) override { return {}; }
  std::string finish() override { return {}; }
};

}  // namespace

sequence::sequence(request r, sequence_limits limits, std::unique_ptr<text_decoder> decoder,
                   std::uint64_t serial)
    : request_(std::move(r)),
      limits_(std::move(limits)),
      serial_(serial),
      tokens_(request_.prompt_ids),
      stop_(make_stop_config(request_.params, limits_)),
      decoder_(decoder ? std::move(decoder) : std::make_unique<silent_decoder>()) {}

std::span<const std::int32_t> sequence::output_tokens() const {
  return std::span<const std::int32_t>(tokens_).subspan(request_.prompt_ids.size());
}

bool sequence::can_sample_more() const {
  return num_output_tokens() + num_pending_ < limits_.max_new_tokens;
}

std::vector<std::int32_t> sequence::take_new_blocks(int s) {
  if (num_blocks_sent_.size() < blocks_.tables.size())
    num_blocks_sent_.resize(blocks_.tables.size());
  const auto& table = blocks_.tables[std::size_t(s)];
  std::size_t& sent = num_blocks_sent_[std::size_t(s)];
  std::vector<std::int32_t> out(table.begin() + std::ptrdiff_t(sent), table.end());
  sent = table.size();
  return out;
}

void sequence::reset_computation() {
  DI_CHECK(blocks_.is_empty(), "sequence {}: reset while holding blocks", id());
  num_computed_ = 0;
  num_cached_tokens_ = 0;
  num_inexact_tokens_ = 0;
  num_blocks_sent_.clear();
}

stop_update sequence::accept_token(std::int32_t id) {
  DI_CHECK(num_pending_ > 0, "sequence {}: a token arrived that no step sampled", this->id());
  --num_pending_;
  tokens_.push_back(id);
  std::string text = decoder_->push(id);
  stop_update u = stop_.push(id, text);
  // A length stop ends the stream: bytes of an unfinished character are final now. A stop
  // token or string cuts the text there, so trailing bytes are dropped (as `generate` does).
  if (u.reason == finish_reason::length) u.text += decoder_->finish();
  return u;
}

std::string sequence::flush_text() {
  if (stop_.finished()) return {};
  std::string text = stop_.flush();
  return text + decoder_->finish();
}

bool sequence::needs_prompt_logprobs() const {
  return request_.params.prompt_logprobs.has_value() &&
         num_prompt_logprobs_sent_ < num_prompt_tokens();
}

}  // namespace di::runtime
