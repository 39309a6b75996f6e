// GEMMs in the stored formats (filled in with the FP8 / MXFP4 kernels).
#include "bench/kernels/bench_sections.hpp"

namespace di::bench {

void run_gemms(const limits&, std::vector<result_row>&, bool) {}

}  // namespace di::bench
