#pragma once

#include <string>

namespace dlbench::operator_ {

// A fresh key pair for one case attempt, for the launcher's ssh into the workers.
struct SshKeyPair {
  std::string private_key_pem;  // "-----BEGIN EC PRIVATE KEY-----", read by OpenSSH
  std::string public_key;       // "ecdsa-sha2-nistp256 AAAA… dlbench", for authorized_keys
};

// ECDSA on P-256 with OpenSSL's generator; throws std::runtime_error naming the failed call.
SshKeyPair generate_ssh_key_pair(const std::string& comment = "dlbench");

}  // namespace dlbench::operator_
