#include "kernels/timeline.hpp"

#include <algorithm>
#include <map>

namespace di {

namespace {

/// Iterators over the intervals of `v` (sorted by start) whose start lies in window `w`.
template <typename T>
std::pair<typename std::vector<T>::const_iterator, typename std::vector<T>::const_iterator>
in_window(const std::vector<T>& v, const timeline_window& w) {
  auto first = std::lower_bound(v.begin(), v.end(), w.begin_ns,
                                [](const T& k, std::uint64_t t) { return k.start_ns < t; });
  auto last = std::upper_bound(first, v.end(), w.end_ns,
                               [](std::uint64_t t, const T& k) { return t < k.start_ns; });
  return {first, last};
}

template <typename T>
void sort_by_start(std::vector<T>& v) {
  std::sort(v.begin(), v.end(), [](const T& a, const T& b) { return a.start_ns < b.start_ns; });
}

/// Host calls per name over the windows: count, time inside, the longest one.
void summarize_api(timeline_summary& s, const std::vector<host_call>& calls,
                   const std::vector<timeline_window>& windows) {
  struct totals {
    double calls = 0, ns = 0, max_ns = 0;
  };
  std::map<std::string, totals> by_name;
  double sum = 0;
  for (const timeline_window& w : windows) {
    const auto [first, last] = in_window(calls, w);
    for (auto c = first; c != last; ++c) {
      const double ns = double(std::max(c->end_ns, c->start_ns) - c->start_ns);
      totals& t = by_name[c->name];
      t.calls += 1;
      t.ns += ns;
      t.max_ns = std::max(t.max_ns, ns);
      sum += ns;
    }
  }
  const double per = 1e-3 / s.steps;
  s.api_us = sum * per;
  for (const auto& [name, t] : by_name)
    s.api.push_back({name, t.calls / s.steps, t.ns * per, t.max_ns * 1e-3});
  std::stable_sort(s.api.begin(), s.api.end(),
                   [](const timeline_api_row& a, const timeline_api_row& b) {
                     return a.us_per_step > b.us_per_step;
                   });
}

}  // namespace

timeline_summary summarize_timeline(timeline_records records,
                                    const std::vector<timeline_window>& windows) {
  std::vector<timed_kernel>& kernels = records.device;
  sort_by_start(kernels);
  sort_by_start(records.host);
  struct totals {
    double launches = 0, ns = 0, own_ns = 0, idle_ns = 0;
  };
  std::map<std::string, totals> by_name;
  timeline_summary s;
  double wall = 0, lead = 0, span = 0, idle = 0, sum = 0, launches = 0;
  std::vector<timeline_window> used;  // windows with device work
  for (const timeline_window& w : windows) {
    const auto [first, last] = in_window(kernels, w);
    if (first == last) continue;
    used.push_back(w);
    ++s.steps;
    wall += double(w.end_ns - w.begin_ns);
    lead += double(first->start_ns - w.begin_ns);
    std::uint64_t reach = first->start_ns;  // the latest end so far: the device is busy up to it
    for (auto k = first; k != last; ++k) {
      const std::uint64_t end = std::max(k->end_ns, k->start_ns);
      totals& t = by_name[k->name];
      t.launches += 1;
      t.ns += double(end - k->start_ns);
      sum += double(end - k->start_ns);
      launches += 1;
      if (k->start_ns > reach) {
        t.idle_ns += double(k->start_ns - reach);
        idle += double(k->start_ns - reach);
      }
      if (end > reach) t.own_ns += double(end - std::max(reach, k->start_ns));
      reach = std::max(reach, end);
    }
    span += double(reach - first->start_ns);
  }
  if (s.steps == 0) return s;
  const double per = 1e-3 / s.steps;  // ns summed over the steps -> us per step
  s.wall_us = wall * per;
  s.lead_us = lead * per;
  s.span_us = span * per;
  s.idle_us = idle * per;
  s.busy_us = s.span_us - s.idle_us;
  s.kernel_us = sum * per;
  s.launches = launches / s.steps;
  for (const auto& [name, t] : by_name)
    s.kernels.push_back({name, t.launches / s.steps, t.ns * per, t.own_ns * per, t.idle_ns * per});
  std::stable_sort(s.kernels.begin(), s.kernels.end(),
                   [](const timeline_kernel_row& a, const timeline_kernel_row& b) {
                     return a.own_us_per_step > b.own_us_per_step;
                   });
  summarize_api(s, records.host, used);
  return s;
}

namespace {

/// Position of the last occurrence of `token` outside any <> or () nesting, or npos.
std::size_t last_top_level(const std::string& s, const std::string& token) {
  int depth = 0;
  std::size_t found = std::string::npos;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '<' || c == '(') {
      ++depth;
    } else if (c == '>' || c == ')') {
      --depth;
    } else if (depth == 0 && s.compare(i, token.size(), token) == 0) {
      found = i;
    }
  }
  return found;
}

void erase_all(std::string& s, const std::string& what) {
  for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at))
    s.erase(at, what.size());
}

}  // namespace

std::string short_kernel_name(const std::string& demangled, std::size_t max_chars) {
  std::string s = demangled;
  // The parameter list: the parenthesis that closes the name, matched back to its opening.
  if (!s.empty() && s.back() == ')') {
    int depth = 0;
    for (std::size_t i = s.size(); i-- > 0;) {
      if (s[i] == ')') ++depth;
      if (s[i] == '(' && --depth == 0) {
        s.erase(i);
        break;
      }
    }
  }
  if (const std::size_t sp = last_top_level(s, " "); sp != std::string::npos)
    s.erase(0, sp + 1);  // the return type
  if (const std::size_t ns = last_top_level(s, "::"); ns != std::string::npos)
    s.erase(0, ns + 2);                     // the namespaces of the name itself
  erase_all(s, "(anonymous namespace)::");  // and of template arguments
  erase_all(s, "di::cuda::");
  if (max_chars >= 4 && s.size() > max_chars) s = s.substr(0, max_chars - 3) + "...";
  return s;
}

}  // namespace di
