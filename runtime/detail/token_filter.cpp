// Temperature, top-k, top-p and min-p over one row (see token_filter.hpp). Everything is a
// threshold on the logit (or on the weight, for min-p), so tokens with equal logits are always
// kept or dropped together; ids only order the inverse-CDF walk. Cost per row: a few linear
// passes; top-k adds a heap pass (nth_element for large k); top-p sorts one histogram bucket.
#include "runtime/detail/token_filter.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "common/error.hpp"
#include "runtime/detail/row_reduce.hpp"

namespace di::runtime::detail {
namespace {
constexpr float neg_inf = -std::numeric_limits<float>::infinity();

std::int64_t count_finite(std::span<const float> logits) {
  std::int64_t n = 0;
  for (float l : logits) n += l > neg_inf;
  return n;
}

}  // namespace

void token_filter::apply(std::span<const float> logits, const filter_settings& settings) {
  DI_CHECK(settings.temperature > 0 && std::isfinite(settings.temperature),
           "sampling temperature must be finite and > 0, got {}", settings.temperature);
  max_logit_ = max_logit(logits);
  DI_CHECK(max_logit_ > neg_inf, "every logit of the row is -inf: nothing can be sampled");
  temperature_ = settings.temperature;

  float threshold = neg_inf;
  if (settings.top_k > 0 && settings.top_k < count_finite(logits)) {
    threshold = top_k_threshold(logits, settings.top_k);
  }
  const bool is_top_p = settings.top_p < 1;
  collect_survivors(logits, threshold, is_top_p);
  if (is_top_p) {
    threshold = std::max(threshold, top_p_threshold(logits, settings.top_p * survivor_mass_));
  }
  keep_survivors(logits, threshold, settings.min_p);
}

float token_filter::top_k_threshold(std::span<const float> logits, int k) {
  // The k-th largest logit (counting repeats); every token at least that large is kept.
  scratch_values_.clear();
  if (k <= small_top_k) {
    // One pass with a min-heap of the k largest: most logits fail the first comparison.
    const auto heap_size = static_cast<std::size_t>(k);
    for (float l : logits) {
      if (!(l > neg_inf)) continue;
      if (scratch_values_.size() < heap_size) {
        scratch_values_.push_back(l);
        std::push_heap(scratch_values_.begin(), scratch_values_.end(), std::greater<float>());
      } else if (l > scratch_values_.front()) {
        std::pop_heap(scratch_values_.begin(), scratch_values_.end(), std::greater<float>());
        scratch_values_.back() = l;
        std::push_heap(scratch_values_.begin(), scratch_values_.end(), std::greater<float>());
      }
    }
    return scratch_values_.front();
  }
  for (float l : logits) {
    if (l > neg_inf) scratch_values_.push_back(l);
  }
  std::nth_element(scratch_values_.begin(), scratch_values_.begin() + (k - 1),
                   scratch_values_.end(), std::greater<float>());
  return scratch_values_[k - 1];
}

double token_filter::distance_of(float logit) const {
  return (static_cast<double>(max_logit_) - logit) / temperature_;
}

int token_filter::bucket_of(double distance) {
  const double bucket = distance * buckets_per_unit;
  return bucket < num_buckets - 1 ? static_cast<int>(bucket) : num_buckets - 1;
}

void token_filter::collect_survivors(std::span<const float> logits, float threshold,
                                     bool needs_histogram) {
  kept_ids_.clear();
  kept_weights_.clear();
  survivor_mass_ = 0;
  if (needs_histogram) histogram_.fill(0);
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const float l = logits[i];
    if (!(l > neg_inf && l >= threshold)) continue;
    const double distance = distance_of(l);
    const double w = std::exp(-distance);
    if (w == 0) continue;  // underflow: the token can never be drawn
    kept_ids_.push_back(static_cast<std::int32_t>(i));
    kept_weights_.push_back(w);
    survivor_mass_ += w;
    if (needs_histogram) histogram_[bucket_of(distance)] += w;
  }
}

void token_filter::keep_survivors(std::span<const float> logits, float threshold, double min_p) {
  // min-p compares probabilities relative to the top token, whose weight is exactly 1.
  std::size_t num_kept = 0;
  total_weight_ = 0;
  for (std::size_t j = 0; j < kept_ids_.size(); ++j) {
    const double w = kept_weights_[j];
    if (w >= min_p && logits[kept_ids_[j]] >= threshold) {
      kept_ids_[num_kept] = kept_ids_[j];
      kept_weights_[num_kept] = w;
      ++num_kept;
      total_weight_ += w;
    }
  }
  kept_ids_.resize(num_kept);
  kept_weights_.resize(num_kept);
}

float token_filter::top_p_threshold(std::span<const float> logits, double target_mass) {
  // Buckets are ordered by logit, so every bucket before the one where the running mass
  // reaches the target is kept whole; only that boundary bucket needs sorting. The running
  // mass adds whole buckets, then the boundary bucket's tokens in rank order: the sorted-prefix
  // sum of the definition, up to double rounding.
  double mass_before = 0;
  int boundary = 0;
  for (; boundary < num_buckets; ++boundary) {
    if (mass_before + histogram_[boundary] >= target_mass) break;
    mass_before += histogram_[boundary];
  }
  if (boundary == num_buckets) return neg_inf;  // rounding: the whole mass is needed
  candidates_.clear();
  for (std::size_t j = 0; j < kept_ids_.size(); ++j) {
    if (bucket_of(distance_of(logits[kept_ids_[j]])) == boundary) candidates_.push_back(j);
  }
  // Survivors are in ascending id order, so ordering positions orders ids on ties.
  std::sort(candidates_.begin(), candidates_.end(), [&](std::size_t a, std::size_t b) {
    const float la = logits[kept_ids_[a]], lb = logits[kept_ids_[b]];
    return la > lb || (la == lb && a < b);
  });
  double mass = mass_before;
  for (std::size_t j : candidates_) {
    mass += kept_weights_[j];
    if (mass >= target_mass) return logits[kept_ids_[j]];
  }
  return logits[kept_ids_[candidates_.back()]];
}

std::int32_t token_filter::sample(double u) const {
  DI_CHECK(!kept_ids_.empty(), "token_filter::sample called before apply");
  DI_CHECK(u >= 0 && u < 1, "uniform draw must be in [0, 1), got {}", u);
  const double target = u * total_weight_;
  double running = 0;
  for (std::size_t j = 0; j < kept_ids_.size(); ++j) {
    running += kept_weights_[j];
    if (running > target) return kept_ids_[j];
  }
  return kept_ids_.back();
}

}  // namespace di::runtime::detail
