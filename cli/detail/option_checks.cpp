// An option given twice is a usage error naming it ("--max-tokens: given more than once"):
// CLI11 refused it with "At Most 1 required but received 2". Installed for every command's
// options just before the parse (once all commands have added theirs), by a registered setup
// function that adds no command of its own.
#include "cli/detail/option_checks.hpp"
#include "cli/command.hpp"

namespace {

/// Fails when a single-value option has more than one value. First of its validators, so that
/// "--max-tokens 0 --max-tokens 2" says so rather than what is wrong with the first value.
CLI::Validator given_once(const CLI::Option* o) {
  return CLI::Validator(
      [o](std::string&) { return o->count() > 1 ? "given more than once" : std::string(); }, "");
}

void add_given_once(CLI::App& app) {
  for (CLI::Option* o : app.get_options()) {
    if (o->get_items_expected_max() == 1 && o->get_type_size_max() == 1 &&
        o->get_multi_option_policy() == CLI::MultiOptionPolicy::Throw)
      o->transform(given_once(o));
  }
  for (CLI::App* sub : app.get_subcommands({})) add_given_once(*sub);
}

void setup_option_checks(CLI::App& app) {
  app.preparse_callback([&app](std::size_t) { add_given_once(app); });
}

}  // namespace

DI_REGISTER_COMMAND(setup_option_checks);
