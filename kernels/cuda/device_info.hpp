// What the CUDA runtime reports about the visible GPUs (for `deepinfer env` and executors).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace di::cuda {

struct device_info {
  int index = 0;
  std::string name;
  int sm_major = 0;             ///< compute capability
  int sm_minor = 0;
  int num_sms = 0;
  std::size_t total_memory = 0;  ///< bytes
};

/// The visible devices; empty (not an error) when there is no driver or no GPU.
/// `why_none` receives the runtime's reason when the list is empty.
std::vector<device_info> list_devices(std::string* why_none = nullptr);

/// Version of the CUDA runtime this binary was built against, e.g. "13.0".
std::string runtime_version();

}  // namespace di::cuda
