#include <doctest/doctest.h>

#include <string>

#include "src/dist/sha256.hpp"

namespace meshrun::dist_detail {
namespace {

TEST_CASE("sha256 matches the FIPS 180-4 examples") {
  CHECK(to_hex(sha256("")) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(to_hex(sha256("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(to_hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")) ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // Crosses the one-block padding boundary (56..64 bytes).
  CHECK(to_hex(sha256(std::string(1000, 'a'))) == "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
}

TEST_CASE("hmac-sha256 matches RFC 4231") {
  CHECK(to_hex(hmac_sha256(std::string(20, '\x0b'), "Hi There")) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  CHECK(to_hex(hmac_sha256("Jefe", "what do ya want for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // A key longer than the block is hashed first.
  CHECK(to_hex(hmac_sha256(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First")) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST_CASE("digests compare equal only when every byte does") {
  const auto a = sha256("token-a");
  auto b = a;
  CHECK(digests_equal(a, b));
  b[31] ^= 1;
  CHECK_FALSE(digests_equal(a, b));
  CHECK_FALSE(digests_equal(sha256("x"), sha256("y")));
}

}  // namespace
}  // namespace meshrun::dist_detail
