// plot_sweep (see sweep_plot.hpp): a TSV of the sweep and a gnuplot script fed on stdin.
#include "cli/detail/sweep_plot.hpp"

#include "common/error.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace di::cli {

namespace {

std::string rate_label(double rate) {
  return std::isfinite(rate) ? fmt::format("{:g}/s", rate) : std::string("inf");
}

/// gnuplot takes single-quoted strings; a quote inside one is doubled.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

}  // namespace

void require_gnuplot() {
  DI_CHECK(std::system("gnuplot --version >/dev/null 2>&1") == 0,
           "--plot needs gnuplot on the PATH (Debian: apt-get install gnuplot-nox)");
}

void plot_sweep(const std::vector<sweep_point>& points, const std::string& png_path) {
  const std::string data_path = png_path + ".tsv";
  {
    std::ofstream data(data_path);
    DI_CHECK(data.good(), "--plot: cannot write {}", data_path);
    data << "# offered_rate\treq_per_s\tout_tok_per_s\tttft_p50_ms\tttft_p99_ms\ttpot_p50_ms\t"
            "tpot_p99_ms\tfailed\n";
    for (const sweep_point& p : points) {
      const server::bench_report& r = p.report;
      auto ms = [](const server::latency_summary& s, double x) {  // NaN: gnuplot skips it
        return s.count > 0 ? fmt::format("{:.3f}", x) : "NaN";
      };
      data << fmt::format("{}\t{:.4f}\t{:.2f}\t{}\t{}\t{}\t{}\t{}\n", rate_label(p.offered_rate),
                          r.request_throughput, r.output_throughput, ms(r.ttft_ms, r.ttft_ms.p50),
                          ms(r.ttft_ms, r.ttft_ms.p99), ms(r.tpot_ms, r.tpot_ms.p50),
                          ms(r.tpot_ms, r.tpot_ms.p99), r.num_failed);
    }
  }
  // A panel none of whose points has a sample (every request failed; TPOT of one-token outputs)
  // gets a fixed y range: gnuplot refuses to autoscale only undefined values.
  auto yrange = [&](auto summary) {
    for (const sweep_point& p : points)
      if ((p.report.*summary).count > 0) return "set yrange [*:*]";
    return "set yrange [0:1]";
  };
  const std::string script = fmt::format(
      "set terminal pngcairo size 1200,500 noenhanced\n"
      "set output {png}\n"
      "set datafile separator '\\t'\n"
      "set key top left\n"
      "set grid\n"
      "set xlabel 'achieved request throughput (req/s)'\n"
      "set multiplot layout 1,2 title 'deepinfer bench serve: request-rate sweep'\n"
      "set ylabel 'TTFT (ms)'\n{ttft_range}\n"
      "plot {data} using 2:4 with linespoints title 'TTFT p50', \\\n"
      "     {data} using 2:5 with linespoints title 'TTFT p99', \\\n"
      "     {data} using 2:5:1 with labels offset 0,1 notitle\n"
      "set ylabel 'TPOT (ms)'\n{tpot_range}\n"
      "plot {data} using 2:6 with linespoints title 'TPOT p50', \\\n"
      "     {data} using 2:7 with linespoints title 'TPOT p99', \\\n"
      "     {data} using 2:7:1 with labels offset 0,1 notitle\n"
      "unset multiplot\n",
      fmt::arg("png", quoted(png_path)), fmt::arg("data", quoted(data_path)),
      fmt::arg("ttft_range", yrange(&server::bench_report::ttft_ms)),
      fmt::arg("tpot_range", yrange(&server::bench_report::tpot_ms)));
  FILE* gp = popen("gnuplot 1>&2", "w");
  DI_CHECK(gp != nullptr, "--plot: cannot start gnuplot");
  std::fwrite(script.data(), 1, script.size(), gp);
  const int status = pclose(gp);
  DI_CHECK(status == 0, "--plot: gnuplot failed (exit status {}) drawing {}", status, png_path);
}

}  // namespace di::cli
