// The SSL I/O wrappers that empty the thread's OpenSSL error queue before each call (see
// tls_error_queue.hpp for the CAF 0.17 defect they work around).
#include "actors/tls_error_queue.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace {

/// libssl's definition of `name`, looked up once (the next object after this executable).
template <class Fn>
Fn real_function(std::atomic<Fn>& cache, const char* name) {
  Fn fn = cache.load(std::memory_order_acquire);
  if (fn) return fn;
  fn = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
  if (!fn) {  // no libssl behind us: nothing sane to call
    std::fprintf(stderr, "fatal: %s not found in libssl (%s)\n", name, dlerror());
    std::abort();
  }
  cache.store(fn, std::memory_order_release);
  return fn;
}

using io_fn = int (*)(SSL*, void*, int);
using const_io_fn = int (*)(SSL*, const void*, int);
using handshake_fn = int (*)(SSL*);

std::atomic<io_fn> g_read{nullptr};
std::atomic<const_io_fn> g_write{nullptr};
std::atomic<handshake_fn> g_accept{nullptr};
std::atomic<handshake_fn> g_connect{nullptr};

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int SSL_read(SSL* ssl, void* buf, int num) {
  ERR_clear_error();
  return real_function(g_read, "SSL_read")(ssl, buf, num);
}

__attribute__((visibility("default"))) int SSL_write(SSL* ssl, const void* buf, int num) {
  ERR_clear_error();
  return real_function(g_write, "SSL_write")(ssl, buf, num);
}

__attribute__((visibility("default"))) int SSL_accept(SSL* ssl) {
  ERR_clear_error();
  return real_function(g_accept, "SSL_accept")(ssl);
}

__attribute__((visibility("default"))) int SSL_connect(SSL* ssl) {
  ERR_clear_error();
  return real_function(g_connect, "SSL_connect")(ssl);
}

}  // extern "C"

namespace di::actors {

bool tls_error_queue_guard_active() {
  return dlsym(RTLD_DEFAULT, "SSL_read") == reinterpret_cast<void*>(&SSL_read) &&
         dlsym(RTLD_DEFAULT, "SSL_accept") == reinterpret_cast<void*>(&SSL_accept);
}

}  // namespace di::actors
