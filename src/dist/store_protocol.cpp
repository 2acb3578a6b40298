// Encoding of store frames; see store_protocol.hpp.
#include "store_protocol.hpp"

namespace meshrun::dist_detail {
namespace {

void append_le(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

std::uint64_t read_le(std::string_view in, int bytes) {
  std::uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= std::uint64_t{static_cast<unsigned char>(in[i])} << (8 * i);
  return value;
}

}  // namespace

MessageWriter& MessageWriter::u8(std::uint8_t value) {
  payload_.push_back(static_cast<char>(value));
  return *this;
}

MessageWriter& MessageWriter::i64(std::int64_t value) {
  append_le(payload_, static_cast<std::uint64_t>(value), 8);
  return *this;
}

MessageWriter& MessageWriter::bytes(std::string_view value) {
  append_le(payload_, value.size(), 4);
  payload_.append(value);
  return *this;
}

MessageWriter& MessageWriter::strings(const std::vector<std::string>& values) {
  i64(static_cast<std::int64_t>(values.size()));
  for (const auto& value : values) bytes(value);
  return *this;
}

std::string MessageWriter::frame() const {
  if (payload_.size() > kMaxFrameBytes)
    throw ProtocolError("a store message of " + std::to_string(payload_.size()) + " bytes is over the " +
                        std::to_string(kMaxFrameBytes) + "-byte limit");
  std::string out;
  out.reserve(payload_.size() + 4);
  append_le(out, payload_.size(), 4);
  out += payload_;
  return out;
}

std::string_view MessageReader::take(std::size_t count) {
  if (payload_.size() - position_ < count) throw ProtocolError("truncated store message");
  std::string_view part = std::string_view(payload_).substr(position_, count);
  position_ += count;
  return part;
}

std::uint8_t MessageReader::u8() { return static_cast<std::uint8_t>(take(1)[0]); }

std::int64_t MessageReader::i64() { return static_cast<std::int64_t>(read_le(take(8), 8)); }

std::string MessageReader::bytes() {
  const auto length = static_cast<std::size_t>(read_le(take(4), 4));
  return std::string(take(length));
}

std::vector<std::string> MessageReader::strings() {
  const std::int64_t count = i64();
  if (count < 0 || static_cast<std::uint64_t>(count) > payload_.size()) throw ProtocolError("bad key count");
  std::vector<std::string> values;
  values.reserve(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) values.push_back(bytes());
  return values;
}

std::uint32_t frame_length(const char* prefix) {
  return static_cast<std::uint32_t>(read_le(std::string_view(prefix, 4), 4));
}

}  // namespace meshrun::dist_detail
