// Streaming detokenization as the scheduler needs it: one decoder per request turns sampled
// ids into text that is final (never half a UTF-8 character). An interface, so the scheduler
// is testable with scripted text and the tokenizer stays behind one adapter.
#pragma once

#include "runtime/sampling_params.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace di::tok {
class tokenizer;
}

namespace di::runtime {

class text_decoder {
 public:
  virtual ~text_decoder() = default;
  /// Text that `id` completes (often empty while a character is split across tokens).
  virtual std::string push(std::int32_t id) = 0;
  /// Ends the stream: bytes of a character that never completed (as U+FFFD).
  virtual std::string finish() = 0;
};

/// Makes the decoder of one request (its params choose e.g. skip_special_tokens).
using text_decoder_factory =
    std::function<std::unique_ptr<text_decoder>(const sampling_params& params)>;

/// Decoders over tok::incremental_detokenizer; `tokenizer` must outlive them.
text_decoder_factory tokenizer_decoder_factory(const tok::tokenizer& tokenizer);

}  // namespace di::runtime
