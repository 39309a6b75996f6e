// `--act-quant on|off` and its short form `--no-act-quant`, the spellings `generate` and `bench`
// share (bench had only the flags --act-quant / --no-act-quant, so `bench --act-quant off` was
// a usage error).
#pragma once

namespace CLI {
class App;
}

namespace di::cli {

/// Declares --act-quant on|off (FP8 activation quantization before the FP8/FP4 GEMMs; on =
/// DeepSeek's numerics) and --no-act-quant (= --act-quant off; the two exclude each other) on
/// `sub`, writing into `is_on` (which must outlive the parse; it keeps its value, normally true,
/// when neither is given). Any other value is a usage error naming the option.
void add_act_quant_flags(CLI::App& sub, bool& is_on);

}  // namespace di::cli
