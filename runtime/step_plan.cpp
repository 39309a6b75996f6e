// step_plan: row counts of a plan.
#include "runtime/step_plan.hpp"

namespace di::runtime {

std::int64_t step_plan::num_rows() const {
  std::int64_t n = 0;
  for (const scheduled_sequence& s : sequences) n += s.num_rows();
  return n;
}

bool step_plan::is_empty() const {
  return finished.empty() && preempted.empty() && started.empty() && sequences.empty();
}

}  // namespace di::runtime
