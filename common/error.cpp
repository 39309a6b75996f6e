// visible_nuls (see error.hpp).
#include "common/error.hpp"

namespace di {

std::string visible_nuls(std::string message) {
  for (std::size_t at = message.find('\0'); at != std::string::npos; at = message.find('\0', at))
    message.replace(at, 1, "\\0");
  return message;
}

}  // namespace di
