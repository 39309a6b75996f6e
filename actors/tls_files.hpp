// The TLS files of a node or client, loaded once with OpenSSL before CAF's OpenSSL manager
// starts. CAF 0.17 loads them inside its middleman actor, where a failure ("cannot load
// certificate") is an exception that aborts a node (std::terminate) and leaves a client
// waiting forever; checked here first, each problem is one error naming the file.
#pragma once

#include "config/cluster_config.hpp"

namespace di::actors {

/// Throws di::error naming the file unless the certificate chain, the private key (with the
/// passphrase, if any), their match and the CA file all load as CAF will load them.
void check_tls_files(const tls_section& tls);

}  // namespace di::actors
