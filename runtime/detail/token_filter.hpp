// The random-sampling core of the sampler: temperature, top-k, top-p and min-p over one row of
// adjusted logits, giving the kept tokens (ascending ids) and their unnormalised weights, then
// an inverse-CDF draw over them. Keeps its scratch buffers between rows to avoid allocation.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace di::runtime::detail {

struct filter_settings {
  double temperature = 1.0;  ///< > 0
  int top_k = 0;             ///< <= 0: off
  double top_p = 1.0;        ///< 1: off
  double min_p = 0.0;        ///< 0: off
};

class token_filter {
 public:
  /// Computes the kept set of `logits` ([vocab]; finite or -inf, at least one finite).
  void apply(std::span<const float> logits, const filter_settings& settings);

  std::span<const std::int32_t> kept_ids() const { return kept_ids_; }
  /// exp((logit - max_logit) / temperature) of each kept token (> 0; the top token has 1).
  std::span<const double> kept_weights() const { return kept_weights_; }
  /// Sum of kept_weights() in ascending id order.
  double total_weight() const { return total_weight_; }

  /// Inverse CDF in ascending id order: the first kept token whose running weight sum exceeds
  /// u * total_weight(); the last kept token when rounding leaves none. u in [0, 1).
  std::int32_t sample(double u) const;

 private:
  /// Top-p works on a histogram of scaled distances (max - logit) / T, 8 buckets per unit.
  static constexpr int num_buckets = 1024;
  static constexpr double buckets_per_unit = 8.0;
  /// Top-k up to this size selects with a heap in one pass; larger k uses nth_element.
  static constexpr int small_top_k = 256;

  float top_k_threshold(std::span<const float> logits, int k);
  float top_p_threshold(std::span<const float> logits, double target_mass);
  /// Fills kept_ids_/kept_weights_ with the tokens at or above `threshold` (positive weight).
  void collect_survivors(std::span<const float> logits, float threshold, bool needs_histogram);
  /// Drops, in place, the survivors below `threshold` or below min_p; sums what remains.
  void keep_survivors(std::span<const float> logits, float threshold, double min_p);
  /// (max_logit - logit) / temperature: the weight is exp(-distance).
  double distance_of(float logit) const;
  static int bucket_of(double distance);

  float max_logit_ = 0;
  double temperature_ = 1;
  double survivor_mass_ = 0;                     // weight of the top-k survivors, id order
  std::array<double, num_buckets> histogram_{};  // survivor mass per distance bucket
  std::vector<float> scratch_values_;            // top-k heap, or finite logits for nth_element
  std::vector<std::size_t> candidates_;          // positions in kept_* of top-p's boundary bucket
  // Top-k survivors, then (filtered in place) the kept tokens: ids ascending, weights > 0.
  std::vector<std::int32_t> kept_ids_;
  std::vector<double> kept_weights_;
  double total_weight_ = 0;
};

}  // namespace di::runtime::detail
