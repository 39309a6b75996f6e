#include "runtime/failure.hpp"

namespace di::runtime {

std::string_view to_string(failure_kind kind) {
  switch (kind) {
    case failure_kind::none:
      return "none";
    case failure_kind::invalid:
      return "invalid";
    case failure_kind::overloaded:
      return "overloaded";
    case failure_kind::unavailable:
      return "unavailable";
    case failure_kind::internal:
      return "internal";
  }
  return "?";
}

std::string param_of(const std::exception& e) {
  const auto* p = dynamic_cast<const invalid_param*>(&e);
  return p ? p->param() : std::string();
}

}  // namespace di::runtime
