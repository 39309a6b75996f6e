// A grammar that lets the output run free until a marker, then follows another grammar: how a
// response_format constrains only a reasoning model's answer (the text after `</think>`), as
// vLLM does with a reasoning parser. The free text is any bytes that do not contain the marker;
// the output may end inside it (cut off, or EOS while thinking), so it never forces the marker.
#pragma once

#include "runtime/grammar/grammar.hpp"

#include <string_view>

namespace di::grammar {

/// Free text (not containing `marker`), then optionally `marker` followed by a sentence of
/// `answer`. `marker` must be non-empty and its first byte must not appear again in it (as in
/// `</think>`), which keeps the free text a plain repetition; di::error otherwise.
grammar free_text_then(const grammar& answer, std::string_view marker);

}  // namespace di::grammar
