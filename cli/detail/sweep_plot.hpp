// The PNG of a `bench serve` request-rate sweep, drawn by gnuplot (an optional tool: Debian's
// gnuplot-nox; scripts/setup.sh installs it). Two panels against the achieved request
// throughput: TTFT p50/p99 and TPOT p50/p99 (ms), one point per swept rate, labelled with the
// offered rate.
#pragma once

#include "server/bench_client.hpp"

#include <string>
#include <vector>

namespace di::cli {

struct sweep_point {
  double offered_rate = 0;  ///< requests/s; infinity = all at once
  server::bench_report report;
};

/// Fails with a clear message (naming --plot) unless gnuplot can be run; call before the sweep.
void require_gnuplot();

/// Writes `png_path` (and its data beside it, PATH.tsv). Throws di::error if gnuplot fails.
void plot_sweep(const std::vector<sweep_point>& points, const std::string& png_path);

}  // namespace di::cli
