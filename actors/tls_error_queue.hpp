// A guard against a defect of CAF 0.17's OpenSSL layer (libcaf_openssl): one failed TLS
// handshake on a node broke that node's other TLS links.
//
// Cause. OpenSSL keeps one error queue per thread, and SSL_get_error() reports SSL_ERROR_SSL
// whenever that queue is not empty, whatever the call it is asked about did. CAF's
// caf::openssl::session calls SSL_accept/SSL_connect/SSL_read/SSL_write on the middleman's
// one I/O thread and, on failure, asks SSL_get_error() but never empties the queue (its
// handle_ssl_result leaves the error there). So after a peer fails a handshake (a plain TCP
// client on a TLS port, a certificate from another CA), the next SSL_read on any other
// connection of that thread that merely has no data yet (SSL_ERROR_WANT_READ, the normal case
// on a non-blocking socket) is reported as SSL_ERROR_SSL, and CAF closes that healthy
// connection: the router node dropped its executor node and the group went down.
//
// Fix. OpenSSL's rule is that the thread's error queue must be empty before an SSL I/O call.
// This binary defines SSL_read, SSL_write, SSL_accept and SSL_connect itself: each empties the
// calling thread's error queue and calls libssl's function (found with dlsym(RTLD_NEXT)).
// Because libcaf_openssl references these symbols, the linker exports the executable's
// definitions and the dynamic loader binds CAF's calls to them (symbol interposition); every
// other caller gets the same, always-correct, behaviour.
#pragma once

namespace di::actors {

/// Whether this process's SSL_read/SSL_write/SSL_accept/SSL_connect resolve to the guarded
/// definitions (false if the linker did not export them, e.g. in a static build). Nodes and
/// clients with TLS on check it at start and warn when the guard is not in effect.
bool tls_error_queue_guard_active();

}  // namespace di::actors
