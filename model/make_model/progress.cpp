// Progress bar drawing: percentage, GB done, throughput and time left.
#include "model/make_model/progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace di {

progress_bar::progress_bar(std::uint64_t total, std::string label, bool enabled)
    : total_(total),
      label_(std::move(label)),
      enabled_(enabled && total > 0),
      is_tty_(::isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

void progress_bar::advance(std::uint64_t done) {
  std::uint64_t now_done = done_ += done;
  if (!enabled_) return;
  std::unique_lock lock(draw_mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return;  // another thread is drawing; skip rather than wait
  auto now = std::chrono::steady_clock::now();
  int decile = int(10 * now_done / total_);
  bool due = is_tty_ ? now - last_draw_ >= std::chrono::milliseconds(250)
                     : decile > last_decile_ && decile < 10;  // finish() draws 100%
  if (!due) return;
  last_draw_ = now;
  last_decile_ = decile;
  draw(now_done, false);
}

void progress_bar::finish() {
  if (!enabled_) return;
  std::lock_guard lock(draw_mutex_);
  draw(done_, true);
}

void progress_bar::draw(std::uint64_t done, bool final) {
  constexpr int width = 30;
  double fraction = total_ ? double(done) / double(total_) : 1.0;
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double rate = seconds > 0 ? double(done) / seconds : 0.0;
  int filled = int(fraction * width);
  std::string bar =
      std::string(std::size_t(filled), '#') + std::string(std::size_t(width - filled), '.');
  std::string eta = rate > 0 && !final ? fmt::format(", {:.0f}s left", double(total_ - done) / rate)
                                       : fmt::format(" in {:.1f}s", seconds);
  fmt::print(stderr, "{}{} [{}] {:3.0f}%  {:.2f}/{:.2f} GB  {:.2f} GB/s{}{}", is_tty_ ? "\r" : "",
             label_, bar, 100.0 * fraction, double(done) / 1e9, double(total_) / 1e9, rate / 1e9,
             eta, is_tty_ && !final ? "" : "\n");
  std::fflush(stderr);
}

}  // namespace di
