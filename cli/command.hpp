// How `deepinfer` subcommands plug in: each cli/cmd_*.cpp defines a setup function that adds
// its CLI11 subcommand and registers it with DI_REGISTER_COMMAND, so commands stay
// independent files and main.cpp never changes when one is added.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace di::cli {

/// Adds one subcommand (with options and a callback) to the top-level app.
using setup_fn = void (*)(CLI::App& app);

struct command_registrar {
  explicit command_registrar(setup_fn fn);
};

/// Every registered setup function, in registration order.
std::vector<setup_fn>& registered_commands();

/// Sets the process exit code for commands whose result is not just success/failure
/// (e.g. `grammar check` exits 2 on a compile error). Default 0.
void set_exit_code(int code);
int exit_code();

/// A CLI11 check refusing an empty value (an unset $VAR): "" named the working directory or
/// the default instead. `hint` says what to do instead.
inline auto not_empty(std::string hint) {
  return [hint = std::move(hint)](const std::string& v) {
    return v.empty() ? "is empty: " + hint : std::string();
  };
}

/// Throws di::error unless stdin could be read to its end (a directory or a closed stdin
/// read as empty input).
void check_stdin_read(const char* what);

}  // namespace di::cli

#define DI_REGISTER_COMMAND(fn) static ::di::cli::command_registrar di_registrar_##fn{fn}
