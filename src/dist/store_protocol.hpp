// Wire format of meshrun's rendezvous store, shared by store_server.cpp and
// store_client.cpp.
//
// Every message is a frame: a 4-byte little-endian length, then the payload.
// On connect the server speaks first: status ok, the protocol banner and a
// fresh nonce. The client's first request must be `auth` with
// HMAC-SHA-256(job token, nonce) (the empty token when there is none); any
// other first request, or a wrong proof, is answered `refused` and the
// connection closed. Requests are an op byte then fields; replies a status
// byte then fields. Strings are 4-byte length + bytes; integers are 8 bytes
// little-endian. A client has at most one request outstanding.
//
//   auth proof                   -> ok | refused(message)
//   set key value                -> ok
//   get key timeout_ms           -> ok(value) | timeout          (waits for the key)
//   add key delta                -> ok(new value)                (value kept as decimal text)
//   compare_set key expected new -> ok(value now held)           (c10d semantics)
//   check count keys...          -> ok(1 | 0)
//   wait count keys... timeout_ms-> ok | timeout(count, missing keys...)
//   remove key                   -> ok(1 | 0)
//   num_keys                     -> ok(count)
//   ages count keys...           -> ok(count, ms since each key was last written | -1)
// A timeout_ms of 0 answers at once.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "meshrun/dist/dist.hpp"

namespace meshrun::dist_detail {

inline constexpr std::string_view kStoreBanner = "meshrun-store/1";
inline constexpr std::uint32_t kMaxFrameBytes = 256u << 20;

enum class StoreOp : std::uint8_t {
  auth = 1,
  set,
  get,
  add,
  compare_set,
  check,
  wait,
  remove,
  num_keys,
  ages,
};

enum class StoreStatus : std::uint8_t { ok = 0, timeout = 1, refused = 2, error = 3 };

// A frame that does not parse.
class ProtocolError : public DistError {
 public:
  using DistError::DistError;
};

class MessageWriter {
 public:
  MessageWriter& u8(std::uint8_t value);
  MessageWriter& i64(std::int64_t value);
  MessageWriter& bytes(std::string_view value);
  MessageWriter& strings(const std::vector<std::string>& values);  // count, then each
  // The payload with its length prefix.
  std::string frame() const;

 private:
  std::string payload_;
};

class MessageReader {
 public:
  explicit MessageReader(std::string payload) : payload_(std::move(payload)) {}
  std::uint8_t u8();
  std::int64_t i64();
  std::string bytes();
  std::vector<std::string> strings();
  bool at_end() const { return position_ == payload_.size(); }

 private:
  std::string_view take(std::size_t count);
  std::string payload_;
  std::size_t position_ = 0;
};

// Reads the 4-byte length prefix.
std::uint32_t frame_length(const char* prefix);

}  // namespace meshrun::dist_detail
