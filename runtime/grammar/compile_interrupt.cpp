// compile_cancel and the thread's interrupt chain (see compile_interrupt.hpp).
#include "runtime/grammar/compile_interrupt.hpp"

#include <fmt/format.h>

namespace di::grammar {

namespace {
std::int64_t ticks(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
}  // namespace

compile_cancel::compile_cancel(std::chrono::nanoseconds limit)
    : limit_(limit), deadline_(ticks(start_ + limit)) {}

void compile_cancel::cancel(std::string reason) {
  std::lock_guard lock(mutex_);
  if (is_cancelled_.load(std::memory_order_relaxed)) return;
  reason_ = std::move(reason);
  is_cancelled_.store(true, std::memory_order_release);
}

bool compile_cancel::extend_deadline() {
  if (deadline_.load() == k_none) return !is_cancelled();  // no deadline to move
  const std::int64_t wanted = ticks(clock::now() + limit_);
  std::int64_t d = deadline_.load();
  for (;;) {
    if (is_cancelled() || d == k_passed) return false;
    if (d != k_none && d >= wanted) return true;
    if (deadline_.compare_exchange_weak(d, wanted)) return true;
  }
}

bool compile_cancel::is_cancelled() const {
  if (is_cancelled_.load(std::memory_order_acquire)) return true;
  std::int64_t d = deadline_.load();
  while (d != k_none && d != k_passed) {
    if (ticks(clock::now()) < d) return false;
    if (deadline_.compare_exchange_weak(d, k_passed)) return true;
  }
  return d == k_passed;
}

void compile_cancel::check() const {
  if (!is_cancelled()) return;
  const double seconds = std::chrono::duration<double>(clock::now() - start_).count();
  std::string why;
  if (is_cancelled_.load(std::memory_order_acquire)) {
    std::lock_guard lock(mutex_);
    why = reason_;
  } else {
    why = fmt::format("the limit is {:g} s", std::chrono::duration<double>(limit_).count());
  }
  throw compile_interrupted(
      fmt::format("the grammar compile was cancelled after {:.1f} s: {}", seconds, why));
}

namespace detail {
void check_interrupt_chain(const interrupt_link* link) {
  for (; link != nullptr; link = link->outer) link->cancel->check();
}
}  // namespace detail

}  // namespace di::grammar
