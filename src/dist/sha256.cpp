// SHA-256 and HMAC-SHA-256 through GNU Nettle (src/dist/sha256.hpp).
#include "sha256.hpp"

#include <nettle/hmac.h>
#include <nettle/memops.h>
#include <nettle/sha2.h>

#include <fmt/format.h>

namespace meshrun::dist_detail {

static_assert(SHA256_DIGEST_SIZE == std::tuple_size_v<Sha256Digest>);

Sha256Digest sha256(std::string_view data) {
  sha256_ctx context;
  sha256_init(&context);
  sha256_update(&context, data.size(), reinterpret_cast<const std::uint8_t*>(data.data()));
  Sha256Digest digest{};
  sha256_digest(&context, digest.size(), digest.data());
  return digest;
}

Sha256Digest hmac_sha256(std::string_view key, std::string_view message) {
  hmac_sha256_ctx context;
  hmac_sha256_set_key(&context, key.size(), reinterpret_cast<const std::uint8_t*>(key.data()));
  hmac_sha256_update(&context, message.size(), reinterpret_cast<const std::uint8_t*>(message.data()));
  Sha256Digest digest{};
  hmac_sha256_digest(&context, digest.size(), digest.data());
  return digest;
}

std::string to_hex(const Sha256Digest& digest) {
  std::string text;
  for (const std::uint8_t byte : digest) text += fmt::format("{:02x}", byte);
  return text;
}

bool digests_equal(const Sha256Digest& a, const Sha256Digest& b) { return memeql_sec(a.data(), b.data(), a.size()) != 0; }

}  // namespace meshrun::dist_detail
