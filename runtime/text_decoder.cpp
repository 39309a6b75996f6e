// text_decoder over the tokenizer's incremental detokenizer.
#include "runtime/text_decoder.hpp"

#include "model/tokenizer/tokenizer.hpp"

namespace di::runtime {

namespace {

class tokenizer_decoder final : public text_decoder {
 public:
  tokenizer_decoder(const tok::tokenizer& tokenizer, const sampling_params& params)
      : detok_(tokenizer, {.skip_special_tokens = params.skip_special_tokens}) {}
  std::string push(std::int32_t id) override { return detok_.push(id); }
  std::string finish() override { return detok_.finish(); }

 private:
  tok::incremental_detokenizer detok_;
};

}  // namespace

text_decoder_factory tokenizer_decoder_factory(const tok::tokenizer& tokenizer) {
  return [&tokenizer](const sampling_params& params) -> std::unique_ptr<text_decoder> {
    return std::make_unique<tokenizer_decoder>(tokenizer, params);
  };
}

}  // namespace di::runtime
