// Abandoning a compile from another thread: a server that shuts down must not wait for a
// grammar it will never use. A thread names the flag it obeys for the compiles it runs
// (interrupt_scope); the compiler's long loops call check_interrupt(), which throws
// compile_interrupted once that flag is set. Without a scope, check_interrupt() does nothing.
// The compile's partial results are dropped with the exception (nothing is cached).
#pragma once

#include "common/error.hpp"

#include <atomic>

namespace di::grammar {

class compile_interrupted : public di::error {
 public:
  using di::error::error;
};

namespace detail {
inline thread_local const std::atomic<bool>* interrupt_flag = nullptr;
}

/// While alive, compiles on this thread stop (compile_interrupted) once `flag` is true.
class interrupt_scope {
 public:
  explicit interrupt_scope(const std::atomic<bool>& flag) : saved_(detail::interrupt_flag) {
    detail::interrupt_flag = &flag;
  }
  ~interrupt_scope() { detail::interrupt_flag = saved_; }
  interrupt_scope(const interrupt_scope&) = delete;
  interrupt_scope& operator=(const interrupt_scope&) = delete;

 private:
  const std::atomic<bool>* saved_;
};

/// Throws compile_interrupted when this thread's flag is set (cheap: one relaxed load).
inline void check_interrupt() {
  const std::atomic<bool>* f = detail::interrupt_flag;
  if (f != nullptr && f->load(std::memory_order_relaxed)) [[unlikely]]
    throw compile_interrupted("the grammar compile was interrupted (the server is stopping)",
                              __FILE__, __LINE__);
}

}  // namespace di::grammar
