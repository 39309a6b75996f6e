// `deepinfer bench serve`: the HTTP load generator (server/bench_client.hpp) as a subcommand
// of `deepinfer bench` (cmd_bench.cpp adds it).
#pragma once

#include <CLI/CLI.hpp>

namespace di::cli {

void add_bench_serve(CLI::App* bench);

}  // namespace di::cli
