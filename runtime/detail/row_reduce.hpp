// Reductions over one row of logits written with independent lanes, so that the compiler can
// vectorize them and a 129K row is not bound by the latency of one long dependency chain. The
// results are exactly those of the plain sequential loops.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <span>

namespace di::runtime::detail {

inline constexpr std::size_t num_reduce_lanes = 8;

/// The largest value of the row (-inf for an empty or all -inf row); the row holds no NaN.
inline float max_logit(std::span<const float> row) {
  std::array<float, num_reduce_lanes> lane_max;
  lane_max.fill(-std::numeric_limits<float>::infinity());
  std::size_t i = 0;
  for (; i + num_reduce_lanes <= row.size(); i += num_reduce_lanes) {
    for (std::size_t j = 0; j < num_reduce_lanes; ++j) {
      lane_max[j] = row[i + j] > lane_max[j] ? row[i + j] : lane_max[j];
    }
  }
  float m = -std::numeric_limits<float>::infinity();
  for (; i < row.size(); ++i) m = row[i] > m ? row[i] : m;
  for (float lane : lane_max) m = lane > m ? lane : m;
  return m;
}

/// The lowest index holding the row's largest value; the row is non-empty and holds no NaN.
inline std::int64_t argmax_lowest_index(std::span<const float> row) {
  std::array<float, num_reduce_lanes> lane_max;
  std::array<std::int64_t, num_reduce_lanes> lane_index{};
  lane_max.fill(-std::numeric_limits<float>::infinity());
  std::size_t i = 0;
  for (; i + num_reduce_lanes <= row.size(); i += num_reduce_lanes) {
    for (std::size_t j = 0; j < num_reduce_lanes; ++j) {
      // Strict '>' keeps each lane's first (lowest) index among its equal maxima.
      const bool is_better = row[i + j] > lane_max[j];
      lane_max[j] = is_better ? row[i + j] : lane_max[j];
      lane_index[j] = is_better ? static_cast<std::int64_t>(i + j) : lane_index[j];
    }
  }
  float best = row[0];
  std::int64_t best_index = 0;
  for (std::size_t j = 0; j < num_reduce_lanes && i > 0; ++j) {
    const bool is_better =
        lane_max[j] > best || (lane_max[j] == best && lane_index[j] < best_index);
    best = is_better ? lane_max[j] : best;
    best_index = is_better ? lane_index[j] : best_index;
  }
  for (; i < row.size(); ++i) {
    if (row[i] > best) {
      best = row[i];
      best_index = static_cast<std::int64_t>(i);
    }
  }
  return best_index;
}

}  // namespace di::runtime::detail
