// SHA-256 and HMAC-SHA-256 (FIPS 180-4, RFC 2104), for the job token's
// challenge-response at the rendezvous store: GNU Nettle's (Debian's
// nettle-dev), behind this small interface so the store's code does not
// depend on which library computes them.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace meshrun::dist_detail {

using Sha256Digest = std::array<std::uint8_t, 32>;

Sha256Digest sha256(std::string_view data);
Sha256Digest hmac_sha256(std::string_view key, std::string_view message);

std::string to_hex(const Sha256Digest& digest);

// Comparison whose duration does not depend on where the digests differ.
bool digests_equal(const Sha256Digest& a, const Sha256Digest& b);

}  // namespace meshrun::dist_detail
