// The OpenSSL error-queue guard (actors/tls_error_queue.hpp): this binary's SSL I/O calls are
// the guarded ones, and an error left on the thread's queue by an earlier failed call (what
// CAF 0.17 does after a failed handshake) no longer turns "no data yet" on a healthy, connected
// session into a fatal SSL_ERROR_SSL. (Without the guard, OpenSSL 3.0 answers SSL_ERROR_SSL
// here: SSL_get_error looks at the queue before anything else.)
#include "actors/tls_error_queue.hpp"

#include <doctest/doctest.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <string>

namespace {

/// A connected pair of in-memory TLS sessions (self-signed EC certificate, no verification).
struct tls_pair {
  SSL_CTX* server_ctx = nullptr;
  SSL_CTX* client_ctx = nullptr;
  SSL* server = nullptr;
  SSL* client = nullptr;
  bool connected = false;
  tls_pair() {
    EVP_PKEY* key = EVP_EC_gen("P-256");
    X509* cert = X509_new();
    ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
    X509_gmtime_adj(X509_getm_notBefore(cert), 0);
    X509_gmtime_adj(X509_getm_notAfter(cert), 3600);
    X509_set_pubkey(cert, key);
    X509_NAME* name = X509_get_subject_name(cert);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>("test"), -1, -1, 0);
    X509_set_issuer_name(cert, name);
    X509_sign(cert, key, EVP_sha256());
    server_ctx = SSL_CTX_new(TLS_server_method());
    client_ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_use_certificate(server_ctx, cert);
    SSL_CTX_use_PrivateKey(server_ctx, key);
    X509_free(cert);
    EVP_PKEY_free(key);
    server = SSL_new(server_ctx);
    client = SSL_new(client_ctx);
    BIO *a = nullptr, *b = nullptr;
    BIO_new_bio_pair(&a, 0, &b, 0);
    SSL_set_bio(server, a, a);
    SSL_set_bio(client, b, b);
    SSL_set_accept_state(server);
    SSL_set_connect_state(client);
    for (int i = 0; i < 20 && !connected; ++i) {
      const int c = SSL_do_handshake(client);
      const int s = SSL_do_handshake(server);
      connected = c == 1 && s == 1;
    }
  }
  ~tls_pair() {
    SSL_free(server);
    SSL_free(client);
    SSL_CTX_free(server_ctx);
    SSL_CTX_free(client_ctx);
  }
};

/// Leaves an error on this thread's queue, as a failed handshake on another connection does.
void leave_stale_error() {
  ERR_raise(ERR_LIB_SSL, SSL_R_WRONG_VERSION_NUMBER);
  REQUIRE(ERR_peek_error() != 0);
}

}  // namespace

TEST_CASE("tls guard: SSL I/O calls resolve to the guarded definitions") {
  CHECK(di::actors::tls_error_queue_guard_active());
}

TEST_CASE("tls guard: a stale error on the thread's queue does not fail a healthy session") {
  tls_pair p;
  REQUIRE(p.connected);
  char buf[16];
  leave_stale_error();
  const int none = SSL_read(p.server, buf, sizeof buf);  // nothing sent yet
  CHECK(none <= 0);
  CHECK(SSL_get_error(p.server, none) == SSL_ERROR_WANT_READ);
  leave_stale_error();
  REQUIRE(SSL_write(p.client, "ping", 4) == 4);
  leave_stale_error();
  const int got = SSL_read(p.server, buf, sizeof buf);
  REQUIRE(got == 4);
  CHECK(std::string(buf, 4) == "ping");
  ERR_clear_error();
}
