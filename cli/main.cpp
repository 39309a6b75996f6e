// `deepinfer`: the command-line entry point. Subcommands live in cli/cmd_*.cpp; errors from
// the library arrive as di::error and become one line on stderr and a non-zero exit code.
#include "actors/peer_handshake.hpp"
#include "cli/command.hpp"
#include "common/error.hpp"
#include "common/printable.hpp"

#include <pthread.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <new>
#include <string>
#include <string_view>

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

/// serve, launch and node stop in order on SIGINT/SIGTERM, and on one before they are ready
/// they end at once with 128 + its number. Both are blocked from the program's first
/// initializer on, so that one sent early stays pending until the command takes it (serve's
/// sigwait thread, launch's and node's handlers, which unblock them). Before, a SIGINT sent in
/// the first ~50 ms was lost when the process had inherited it ignored -- as a non-interactive
/// shell's `cmd &` does -- and the server then ran on as if never told. (glibc passes argc and
/// argv to the functions of .preinit_array, which run before every shared library's
/// initializers -- cuBLAS's take tens of milliseconds.)
void block_stop_signals_early(int argc, char** argv, char**) {
  if (argc < 2) return;
  const std::string_view cmd = argv[1];
  if (cmd != "serve" && cmd != "launch" && cmd != "node") return;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}
using preinit_fn = void (*)(int, char**, char**);
[[gnu::section(".preinit_array"), gnu::used]] const preinit_fn block_stop_signals_entry =
    block_stop_signals_early;

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

/// CLI11 reads "0x10", "0b11", "1'000" and " 5" as integers, "010" as octal 8, and wraps "-1"
/// or saturates 2^64 into an unsigned option: every integer option of `app` and its
/// subcommands takes plain decimal digits instead (an optional sign; none below zero for an
/// unsigned one; within 64 bits), leading zeros dropped before CLI11 converts, so a typo is an
/// error naming the option rather than some other number.
CLI::Validator decimal_integer(bool is_unsigned) {
  return CLI::Validator(
      [is_unsigned](std::string& s) -> std::string {
        const bool negative = !s.empty() && s[0] == '-';
        const std::size_t i = !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0;
        if (i >= s.size() || s.find_first_not_of("0123456789", i) != std::string::npos)
          return "'" + s + "' is not a whole decimal number";
        std::string digits = s.substr(i);
        digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size() - 1));
        if (is_unsigned && negative && digits != "0") return "'" + s + "' is below zero";
        // 64-bit limits, compared as digit strings (same length: lexicographic = numeric).
        const std::string limit = is_unsigned ? "18446744073709551615"
                                  : negative  ? "9223372036854775808"
                                              : "9223372036854775807";
        if (digits.size() > limit.size() || (digits.size() == limit.size() && digits > limit))
          return "'" + s + "' is out of range";
        s = (negative && digits != "0" ? "-" : "") + digits;
        return {};
      },
      "");
}

/// A floating-point option's value that CLI11 cannot read is an error in the integers' words
/// ("--temperature: 'abc' is not a number"; CLI11 said "Could not convert: --temperature =
/// abc"). What CLI11 reads is unchanged: the check runs CLI11's own conversion.
CLI::Validator readable_number() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        double v = 0;
        return CLI::detail::lexical_cast(s, v) ? std::string() : "'" + s + "' is not a number";
      },
      "");
}

void require_decimal_integers(CLI::App& app) {
  for (CLI::Option* o : app.get_options()) {
    const std::string type = o->get_type_name();
    if (type.find(":SIZE") != std::string::npos) continue;  // "4GiB": CLI::AsSizeValue reads it
    if (type.rfind("INT", 0) == 0)
      o->transform(decimal_integer(false));
    else if (type.rfind("UINT", 0) == 0)
      o->transform(decimal_integer(true));
    else if (type.rfind("FLOAT", 0) == 0)
      o->transform(readable_number());
  }
  for (CLI::App* sub : app.get_subcommands({})) require_decimal_integers(*sub);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"DeepInfer-C++: inference engine for DeepSeek-V4.1-Flash and V4-Flash", "deepinfer"};
  app.require_subcommand(1);
  // The wire fingerprint: the nodes and clients of a cluster need the same one.
  app.set_version_flag("--version", "deepinfer " DEEPINFER_VERSION " (wire fingerprint " +
                                        std::string(di::actors::wire_fingerprint()) + ")");
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
      std::fprintf(stderr, "error: unknown command '%s' (see --help)\n",
                   di::printable(word).c_str());
      return 2;
    }
    // A usage error is one line too ("The following argument was not expected: x").
    std::fprintf(stderr, "error: %s (see --help)\n", di::printable(e.what()).c_str());
    return 2;
  } catch (const di::error& e) {
    // One line of text whatever the message quotes (an argument, a file's bytes): control
    // characters and bytes that are not UTF-8 are escaped (a newline split the line, an ESC
    // sequence reached the terminal; see common/printable.hpp).
    std::fprintf(stderr, "error: %s\n", di::printable(e.what()).c_str());
    return 1;
  } catch (const std::bad_alloc&) {  // said only "std::bad_alloc" (e.g. bench --batch 1000000000)
    std::fprintf(stderr,
                 "error: out of memory: the host could not allocate what this run needs "
                 "(smaller --batch, --context or model?)\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", di::printable(e.what()).c_str());
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
