// `deepinfer node --config FILE --rank N [--set key=value]...`: runs one node of a cluster (for
// multi-host use; `deepinfer launch` starts the local nodes this way). The node of rank 0
// coordinates and prints `ready: HOST:PORT` on stdout once clients can connect; logs go to
// stderr. SIGINT/SIGTERM shut the node (on rank 0: the whole cluster) down in order.
#include "actors/logging.hpp"
#include "actors/node_runtime.hpp"
#include "cli/command.hpp"
#include "cli/detail/option_checks.hpp"
#include "config/cluster_config.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <memory>

namespace {

struct node_options {
  std::string config;
  int rank = -1;
  std::vector<std::string> sets;
};

void run_node_command(const node_options& o) {
  const di::cluster_config c = di::load_cluster_config(o.config, o.sets);
  di::actors::configure_logging(c.logging.level, c.logging.file, fmt::format("node{}", o.rank));
  const int code = di::actors::run_node(c, o.rank, [](const std::string& address) {
    std::fprintf(stdout, "ready: %s\n", address.c_str());
    std::fflush(stdout);
  });
  di::cli::set_exit_code(code);
}

void setup_node(CLI::App& app) {
  auto o = std::make_shared<node_options>();
  auto* sub = app.add_subcommand("node", "Run one node of a cluster (rank 0 coordinates)");
  sub->add_option("--config", o->config, "Cluster file (TOML; see the README's \"Cluster file\")")->required();
  sub->add_option("--rank", o->rank, "This node's index in the file's [[nodes]]")
      ->required()
      ->check(di::cli::integer_range<int>(0));
  sub->add_option("--set", o->sets, "Override a key of the cluster file: --set model.path=/models/x "
                  "(repeatable; every node must get the same overrides)");
  sub->callback([o] { run_node_command(*o); });
}

}  // namespace

DI_REGISTER_COMMAND(setup_node);
