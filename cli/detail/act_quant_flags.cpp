// add_act_quant_flags (see act_quant_flags.hpp).
#include "cli/detail/act_quant_flags.hpp"

#include <CLI/CLI.hpp>

#include <string>

namespace di::cli {

void add_act_quant_flags(CLI::App& sub, bool& is_on) {
  const CLI::Validator on_or_off(
      [](const std::string& v) {
        return v == "on" || v == "off" ? std::string() : "must be on or off, got '" + v + "'";
      },
      "");
  auto* aq = sub.add_option_function<std::string>(
                    "--act-quant", [&is_on](const std::string& v) { is_on = v == "on"; },
                    "FP8 activation quantization before FP8/FP4 GEMMs (on = DeepSeek's official "
                    "numerics; off = the reference's variant B)")
                 ->type_name("on|off")
                 ->default_str("on")
                 ->check(on_or_off);
  sub.add_flag_callback(
         "--no-act-quant", [&is_on] { is_on = false; }, "The same as --act-quant off")
      ->excludes(aq);
}

}  // namespace di::cli
