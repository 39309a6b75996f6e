// The step-timeline arithmetic behind `deepinfer bench decode --timeline`, on hand-made kernel
// intervals: busy time as the union of overlapping kernels, idle gaps charged to the kernel
// that ends them, kernels assigned to the window their start lies in, per-step averages.
#include "kernels/timeline.hpp"

#include <doctest/doctest.h>

namespace di {
namespace {

TEST_CASE("timeline: busy, idle and per-kernel time of two steps") {
  // Step 1 (window 0..100 us): a 10-30, b 25-40 (overlaps a), c 50-60 (10 us gap before it).
  // Step 2 (window 200..300 us): a 210-220, c 230-252 (10 us gap).
  // A kernel at 150 us lies in no window and is ignored.
  const std::uint64_t us = 1000;
  std::vector<timed_kernel> k = {{"c", 50 * us, 60 * us},   {"a", 10 * us, 30 * us},
                                 {"b", 25 * us, 40 * us},   {"x", 150 * us, 160 * us},
                                 {"a", 210 * us, 220 * us}, {"c", 230 * us, 252 * us}};
  // Host calls: two launches in step 1 (3 and 5 us), one in step 2 (4 us), one sync (50 us) in
  // step 2, one call outside both windows.
  std::vector<host_call> h = {{"launch", 1 * us, 4 * us},
                              {"launch", 5 * us, 10 * us},
                              {"launch", 201 * us, 205 * us},
                              {"sync", 240 * us, 290 * us},
                              {"launch", 170 * us, 171 * us}};
  const timeline_summary s = summarize_timeline({k, h}, {{0 * us, 100 * us}, {200 * us, 300 * us}});
  CHECK(s.steps == 2);
  CHECK(s.wall_us == doctest::Approx(100.0));
  CHECK(s.lead_us == doctest::Approx((10.0 + 10.0) / 2));
  CHECK(s.span_us == doctest::Approx((50.0 + 42.0) / 2));  // 10..60 and 210..252
  CHECK(s.idle_us == doctest::Approx((10.0 + 10.0) / 2));  // 40..50 and 220..230
  CHECK(s.busy_us == doctest::Approx((40.0 + 32.0) / 2));
  CHECK(s.kernel_us == doctest::Approx((20.0 + 15 + 10 + 10 + 22) / 2));
  CHECK(s.launches == doctest::Approx(2.5));
  REQUIRE(s.kernels.size() == 3);  // no "x"
  // Own time (what each extended the busy time): a 20 + 10, b 10 (30..40: its first 5 us ran
  // under a), c 10 + 22. Sorted by it, largest first.
  CHECK(s.kernels[0].name == "c");
  CHECK(s.kernels[0].us_per_step == doctest::Approx(16.0));
  CHECK(s.kernels[0].own_us_per_step == doctest::Approx(16.0));
  CHECK(s.kernels[0].launches_per_step == doctest::Approx(1.0));
  CHECK(s.kernels[0].idle_before_us == doctest::Approx(10.0));
  CHECK(s.kernels[1].name == "a");
  CHECK(s.kernels[1].us_per_step == doctest::Approx(15.0));
  CHECK(s.kernels[1].own_us_per_step == doctest::Approx(15.0));
  CHECK(s.kernels[1].idle_before_us == doctest::Approx(0.0));
  CHECK(s.kernels[2].name == "b");
  CHECK(s.kernels[2].launches_per_step == doctest::Approx(0.5));
  CHECK(s.kernels[2].us_per_step == doctest::Approx(7.5));
  CHECK(s.kernels[2].own_us_per_step == doctest::Approx(5.0));
  double own = 0;
  for (const auto& r : s.kernels) own += r.own_us_per_step;
  CHECK(own == doctest::Approx(s.busy_us));
  CHECK(s.api_us == doctest::Approx((3.0 + 5 + 4 + 50) / 2));
  REQUIRE(s.api.size() == 2);
  CHECK(s.api[0].name == "sync");
  CHECK(s.api[0].calls_per_step == doctest::Approx(0.5));
  CHECK(s.api[0].max_us == doctest::Approx(50.0));
  CHECK(s.api[1].name == "launch");
  CHECK(s.api[1].calls_per_step == doctest::Approx(1.5));
  CHECK(s.api[1].us_per_step == doctest::Approx(6.0));
  CHECK(s.api[1].max_us == doctest::Approx(5.0));
}

TEST_CASE("timeline: a kernel inside a longer one leaves no gap; empty input") {
  const std::uint64_t us = 1000;
  // a 0-100 covers b 10-20; c starts at 50, still inside a: no idle time at all.
  const timeline_summary s = summarize_timeline(
      {{{"a", 0, 100 * us}, {"b", 10 * us, 20 * us}, {"c", 50 * us, 60 * us}}, {}},
      {{0, 200 * us}});
  CHECK(s.idle_us == doctest::Approx(0.0));
  CHECK(s.busy_us == doctest::Approx(100.0));
  CHECK(s.kernel_us == doctest::Approx(120.0));
  REQUIRE(s.kernels.size() == 3);
  CHECK(s.kernels[0].name == "a");  // b and c ran under a: no time of their own
  CHECK(s.kernels[0].own_us_per_step == doctest::Approx(100.0));
  CHECK(s.kernels[1].own_us_per_step == doctest::Approx(0.0));
  CHECK(s.kernels[2].own_us_per_step == doctest::Approx(0.0));
  const timeline_summary none = summarize_timeline({}, {{0, 100}});
  CHECK(none.api.empty());
  CHECK(none.steps == 0);
  CHECK(none.kernels.empty());
  CHECK(summarize_timeline({{{"a", 500, 600}}, {}}, {{0, 100}}).steps == 0);  // outside the window
}

TEST_CASE("timeline: short kernel names") {
  CHECK(short_kernel_name("void di::cuda::(anonymous namespace)::stream_gemm_kernel<false, true, "
                          "4, 2>(di::cuda::block_gemm_params, di::cuda::(anonymous "
                          "namespace)::stream_config)") == "stream_gemm_kernel<false, true, 4, 2>");
  CHECK(short_kernel_name("void di::cuda::(anonymous namespace)::k<di::cuda::(anonymous "
                          "namespace)::mode>(int)") == "k<mode>");
  CHECK(short_kernel_name("plain_c_kernel") == "plain_c_kernel");
  CHECK(short_kernel_name("_Z3fooi") == "_Z3fooi");  // not demangled: kept
  const std::string cut = short_kernel_name("void ns::" + std::string(100, 'x') + "()", 20);
  CHECK(cut.size() == 20);
  CHECK(cut.substr(17) == "...");
}

}  // namespace
}  // namespace di
