// `deepinfer env`: what this binary was built with and which devices it can see.
#include "cli/command.hpp"

#include <fmt/format.h>

#ifdef DEEPINFER_HAVE_CUDA
#include "kernels/cuda/device_info.hpp"
#endif

namespace {

void run_env() {
  fmt::print("deepinfer {}\n", DEEPINFER_VERSION);
#ifdef DEEPINFER_HAVE_CUDA
  fmt::print("cuda backend: built (runtime {})\n", di::cuda::runtime_version());
  std::string why;
  auto devices = di::cuda::list_devices(&why);
  if (devices.empty()) fmt::print("cuda devices: none ({})\n", why);
  for (const auto& d : devices)
    fmt::print("cuda device {}: {} (sm_{}{}, {} SMs, {:.1f} GiB)\n", d.index, d.name, d.sm_major,
               d.sm_minor, d.num_sms, double(d.total_memory) / (1024.0 * 1024 * 1024));
#else
  fmt::print("cuda backend: not built (CPU only)\n");
#endif
}

void setup_env(CLI::App& app) {
  auto* sub = app.add_subcommand("env", "Print build configuration and visible devices");
  sub->callback(run_env);
}

}  // namespace

DI_REGISTER_COMMAND(setup_env);
