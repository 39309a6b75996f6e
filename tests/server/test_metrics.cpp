// /metrics exposition from a cluster status: gauges over the groups that are up and answered,
// counters over every group (a down group keeps its last counters, so no counter falls back).
#include "server/metrics.hpp"

#include <doctest/doctest.h>

#include <string>

namespace {

/// The value of `name`'s sample line in `text` ("" when absent).
std::string sample(const std::string& text, const std::string& name) {
  const std::size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return "";
  const std::size_t start = at + name.size() + 2;
  return text.substr(start, text.find('\n', start) - start);
}

}  // namespace

TEST_CASE("metrics: gauges count the groups up, counters every group's last values") {
  di::actors::cluster_status c;
  di::actors::group_status up, down;
  up.is_up = true;
  up.stats.num_blocks = 100;
  up.stats.num_used_blocks = 10;
  up.stats.num_running = 3;
  up.stats.counters.num_prefix_query_tokens = 50;
  down = up;  // its last answer, before it went down
  down.group = 1;
  down.is_up = false;
  down.answered = false;
  down.stats.counters.num_prefix_query_tokens = 70;
  c.groups = {up, down};
  const std::string text = di::server::server_metrics().render(&c, {});
  CHECK(sample(text, "deepinfer:kv_blocks_total") == "100");  // 200 counted the dead group
  CHECK(sample(text, "deepinfer:kv_blocks_used") == "10");
  CHECK(sample(text, "deepinfer:num_requests_running") == "3");
  CHECK(sample(text, "deepinfer:num_groups_up") == "1");
  CHECK(sample(text, "deepinfer:prefix_cache_queries_total") == "120");
}
