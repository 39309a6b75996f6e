#include "actors/tls_files.hpp"

#include "common/error.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace di::actors {

namespace {

/// OpenSSL's reasons for the last failure (its thread error queue, each reason once), emptied.
std::string openssl_reason() {
  std::vector<std::string> seen;
  while (unsigned long e = ERR_get_error()) {
    const char* r = ERR_reason_error_string(e);
    std::string reason = r != nullptr ? r : "unknown OpenSSL error";
    if (std::find(seen.begin(), seen.end(), reason) == seen.end()) seen.push_back(reason);
  }
  return seen.empty() ? "unknown OpenSSL error" : fmt::format("{}", fmt::join(seen, "; "));
}

/// A file that cannot be opened says why (OpenSSL's reason would be "system lib").
void check_readable(const std::string& path, const char* what) {
  std::ifstream in(path);
  DI_CHECK(in.good(), "TLS {} {}: cannot open: {}", what, path, std::strerror(errno));
}

struct passphrase {
  std::string text;
  bool asked = false;  ///< the key is encrypted
};

/// Always installed: OpenSSL's default callback prompts on the terminal for an encrypted key.
int passphrase_cb(char* buf, int size, int, void* user) {
  passphrase& p = *static_cast<passphrase*>(user);
  p.asked = true;
  const int n = int(p.text.size()) < size ? int(p.text.size()) : size;
  std::memcpy(buf, p.text.data(), std::size_t(n));
  return n;
}

}  // namespace

void check_tls_files(const tls_section& tls) {
  check_readable(tls.certificate, "certificate");
  check_readable(tls.key, "key");
  check_readable(tls.cafile, "CA file");
  ERR_clear_error();
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_method()), SSL_CTX_free);
  DI_CHECK(ctx != nullptr, "TLS: cannot create an OpenSSL context: {}", openssl_reason());
  passphrase pass{tls.passphrase};  // read during the key's load only
  SSL_CTX_set_default_passwd_cb(ctx.get(), passphrase_cb);
  SSL_CTX_set_default_passwd_cb_userdata(ctx.get(), &pass);
  // The key first, alone (loaded after the certificate, a key that does not match fails
  // the load itself, and its message would blame the key's format or passphrase).
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), tls.key.c_str(), SSL_FILETYPE_PEM) != 1) {
    const std::string why = openssl_reason();
    DI_CHECK(!pass.asked, "TLS key {}: cannot load it: {}", tls.key,
             pass.text.empty() ? "it is encrypted and no passphrase was given"
                               : "it is encrypted and the passphrase does not decrypt it");
    DI_FAIL("TLS key {}: cannot load it: {}", tls.key, why);
  }
  DI_CHECK(SSL_CTX_use_certificate_chain_file(ctx.get(), tls.certificate.c_str()) == 1,
           "TLS certificate {}: cannot load it: {}", tls.certificate, openssl_reason());
  if (SSL_CTX_check_private_key(ctx.get()) != 1) {
    ERR_clear_error();  // OpenSSL's reason here is "no private key assigned": not helpful
    DI_FAIL("TLS key {} does not match the certificate {}", tls.key, tls.certificate);
  }
  DI_CHECK(SSL_CTX_load_verify_locations(ctx.get(), tls.cafile.c_str(), nullptr) == 1,
           "TLS CA file {}: cannot load it: {}", tls.cafile, openssl_reason());
  ERR_clear_error();
}

}  // namespace di::actors
