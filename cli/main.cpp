// `deepinfer`: the command-line entry point. Subcommands live in cli/cmd_*.cpp; errors from
// the library arrive as di::error and become one line on stderr and a non-zero exit code.
#include "cli/command.hpp"
#include "common/error.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>

namespace di::cli {

std::vector<setup_fn>& registered_commands() {
  static std::vector<setup_fn> commands;
  return commands;
}

command_registrar::command_registrar(setup_fn fn) { registered_commands().push_back(fn); }

namespace {
int g_exit_code = 0;
}
void set_exit_code(int code) { g_exit_code = code; }
int exit_code() { return g_exit_code; }

void check_stdin_read(const char* what) {
  DI_CHECK(!std::cin.bad() && !std::ferror(stdin), "{}: cannot read stdin: {}", what,
           errno ? std::strerror(errno) : "read error");
}

}  // namespace di::cli

namespace {

/// After a failed parse: the word given where the innermost command parsed expects one of its
/// subcommands and none matched ("" when that is not what went wrong).
std::string unknown_command(CLI::App& app) {
  CLI::App* cur = &app;
  while (!cur->get_subcommands().empty()) cur = cur->get_subcommands().front();
  if (cur->get_subcommands({}).empty()) return {};  // takes no subcommands
  const std::vector<std::string> rest = cur->remaining();
  if (rest.empty() || rest.front().empty() || rest.front().front() == '-') return {};
  return rest.front();
}

/// CLI11 reads "0x10", "0b11", "1'000" and " 5" as integers: every integer option of `app` and
/// its subcommands takes plain decimal digits (an optional sign) instead, so a typo is an
/// error naming the option rather than some other number.
void require_decimal_integers(CLI::App& app) {
  const CLI::Validator decimal(
      [](std::string& s) -> std::string {
        std::size_t i = s.size() > 1 && (s[0] == '-' || s[0] == '+') ? 1 : 0;
        const bool digits =
            i < s.size() && s.find_first_not_of("0123456789", i) == std::string::npos;
        return digits ? std::string() : "'" + s + "' is not a whole decimal number";
      },
      "");
  for (CLI::Option* o : app.get_options()) {
    const std::string type = o->get_type_name();
    if (type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0) o->check(decimal);
  }
  for (CLI::App* sub : app.get_subcommands({})) require_decimal_integers(*sub);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"DeepInfer-C++: inference engine for DeepSeek-V4.1-Flash and V4-Flash", "deepinfer"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "deepinfer " DEEPINFER_VERSION);
  app.footer("Run `deepinfer <command> --help` for the options of a command.");
  for (auto setup : di::cli::registered_commands()) setup(app);
  require_decimal_integers(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help, --version: a write failure is one too
      const int rc = app.exit(e);
      std::cout.flush();
      if (std::fflush(stdout) != 0 || std::ferror(stdout) || !std::cout) {
        std::fprintf(stderr, "error: cannot write the output: %s\n", std::strerror(errno));
        return 1;
      }
      return rc;
    }
    // `deepinfer nosuchcmd` (or `bench nosuch`): name the word rather than saying that a
    // subcommand is required.
    if (const std::string word = unknown_command(app); !word.empty()) {
      std::fprintf(stderr, "error: unknown command '%s' (see --help)\n", word.c_str());
      return 2;
    }
    // A usage error is one line too ("Could not convert: --max-tokens = abc").
    std::fprintf(stderr, "error: %s (see --help)\n", e.what());
    return 2;
  } catch (const di::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  // Output that could not be written (a full disk, a closed pipe) is a failure, not rc 0.
  std::cout.flush();
  if (std::fflush(stdout) != 0 || std::ferror(stdout) || !std::cout) {
    std::fprintf(stderr, "error: cannot write the output: %s\n", std::strerror(errno));
    return 1;
  }
  return di::cli::exit_code();
}
