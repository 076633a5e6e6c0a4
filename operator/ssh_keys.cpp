#include "ssh_keys.hpp"

#include <openssl/bio.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

// The OpenSSL check: a failed call throws naming the call and file:line.
#define DLBENCH_OPENSSL_CHECK(ok, call)                                                                     \
  do {                                                                                                      \
    if (!(ok)) {                                                                                            \
      throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": OpenSSL: " call \
                               " failed");                                                                  \
    }                                                                                                       \
  } while (false)

namespace dlbench::operator_ {
namespace {

// SSH wire format "string": a 32-bit big-endian length, then the bytes.
void put_string(std::vector<unsigned char>& out, const unsigned char* data, std::size_t size) {
  const auto n = static_cast<std::uint32_t>(size);
  for (const int shift : {24, 16, 8, 0}) out.push_back(static_cast<unsigned char>((n >> shift) & 0xFF));
  out.insert(out.end(), data, data + size);
}

void put_string(std::vector<unsigned char>& out, const std::string& text) {
  put_string(out, reinterpret_cast<const unsigned char*>(text.data()), text.size());
}

}  // namespace

SshKeyPair generate_ssh_key_pair(const std::string& comment) {
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"),
                                                          EVP_PKEY_free);
  DLBENCH_OPENSSL_CHECK(key != nullptr, "EVP_PKEY_Q_keygen(EC, P-256)");

  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  DLBENCH_OPENSSL_CHECK(bio != nullptr, "BIO_new");
  DLBENCH_OPENSSL_CHECK(
      PEM_write_bio_PrivateKey_traditional(bio.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) == 1,
      "PEM_write_bio_PrivateKey_traditional");
  char* pem = nullptr;
  const long pem_length = BIO_get_mem_data(bio.get(), &pem);
  SshKeyPair pair;
  pair.private_key_pem.assign(pem, static_cast<std::size_t>(pem_length));

  unsigned char point[133];
  std::size_t point_length = 0;
  DLBENCH_OPENSSL_CHECK(EVP_PKEY_get_octet_string_param(key.get(), OSSL_PKEY_PARAM_ENCODED_PUBLIC_KEY, point,
                                                        sizeof point, &point_length) == 1,
                        "EVP_PKEY_get_octet_string_param(encoded public key)");
  DLBENCH_OPENSSL_CHECK(point_length == 65 && point[0] == 0x04, "uncompressed P-256 point");
  std::vector<unsigned char> blob;
  put_string(blob, "ecdsa-sha2-nistp256");
  put_string(blob, "nistp256");
  put_string(blob, point, point_length);
  std::string base64(4 * ((blob.size() + 2) / 3) + 1, '\0');
  const int written = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(base64.data()), blob.data(),
                                      static_cast<int>(blob.size()));
  base64.resize(static_cast<std::size_t>(written));
  pair.public_key = "ecdsa-sha2-nistp256 " + base64 + " " + comment;
  return pair;
}

}  // namespace dlbench::operator_
