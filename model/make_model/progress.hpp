// A thread-safe progress bar on stderr for long generations: redrawn in place on a terminal
// (at most a few times a second), one line per 10% otherwise, silent when disabled.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace di {

class progress_bar {
 public:
  /// `total` units (bytes); `label` precedes the bar.
  progress_bar(std::uint64_t total, std::string label, bool enabled);
  /// Records `done` more units; any thread may call it.
  void advance(std::uint64_t done);
  /// Draws the final state and ends the line.
  void finish();

 private:
  void draw(std::uint64_t done, bool final);

  std::uint64_t total_;
  std::string label_;
  bool enabled_;
  bool is_tty_;
  std::atomic<std::uint64_t> done_{0};
  std::mutex draw_mutex_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  int last_decile_ = -1;
};

}  // namespace di
