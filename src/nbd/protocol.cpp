#include "nbd/protocol.hpp"

#include <fmt/format.h>

#include "core/bytes.hpp"

namespace zc::nbd {

namespace {

void put16(std::string& out, uint16_t v) {
  uint8_t b[2];
  store_be16(b, v);
  out.append(reinterpret_cast<const char*>(b), sizeof b);
}
void put32(std::string& out, uint32_t v) {
  uint8_t b[4];
  store_be32(b, v);
  out.append(reinterpret_cast<const char*>(b), sizeof b);
}
void put64(std::string& out, uint64_t v) {
  uint8_t b[8];
  store_be64(b, v);
  out.append(reinterpret_cast<const char*>(b), sizeof b);
}

// A 32-bit length and that many bytes at `at`; advances `at`. nullopt if it runs past the end or
// past max_string_length.
std::optional<std::string_view> take_string(std::span<const uint8_t> data, size_t& at) {
  if (data.size() - at < 4) return std::nullopt;
  const uint32_t length = load_be32(data.data() + at);
  at += 4;
  if (length > max_string_length || data.size() - at < length) return std::nullopt;
  std::string_view s(reinterpret_cast<const char*>(data.data() + at), length);
  at += length;
  return s;
}

}  // namespace

std::optional<option_header> decode_option_header(std::span<const uint8_t, option_header_size> b) {
  if (load_be64(b.data()) != ihaveopt) return std::nullopt;
  return option_header{load_be32(b.data() + 8), load_be32(b.data() + 12)};
}

std::optional<request_header> decode_request(std::span<const uint8_t, request_header_size> b) {
  if (load_be32(b.data()) != request_magic) return std::nullopt;
  return request_header{load_be16(b.data() + 4), load_be16(b.data() + 6), load_be64(b.data() + 8),
                        load_be64(b.data() + 16), load_be32(b.data() + 24)};
}

uint16_t go_request::info(size_t i) const noexcept {
  return load_be16(info_requests.data() + 2 * i);
}

std::optional<go_request> decode_go(std::span<const uint8_t> data) {
  size_t at = 0;
  auto name = take_string(data, at);
  if (!name || data.size() - at < 2) return std::nullopt;
  const uint16_t count = load_be16(data.data() + at);
  at += 2;
  if (data.size() - at != size_t(count) * 2) return std::nullopt;
  return go_request{*name, data.subspan(at)};
}

std::optional<meta_context_request> decode_meta_context(std::span<const uint8_t> data) {
  size_t at = 0;
  auto name = take_string(data, at);
  if (!name || data.size() - at < 4) return std::nullopt;
  const uint32_t count = load_be32(data.data() + at);
  at += 4;
  // Each query takes at least its 4-byte length: a count the data cannot hold is refused before
  // anything is reserved for it.
  if (count > (data.size() - at) / 4) return std::nullopt;
  meta_context_request m{*name, count, {}};
  m.queries.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    auto q = take_string(data, at);
    if (!q) return std::nullopt;
    m.queries.push_back(*q);
  }
  if (at != data.size()) return std::nullopt;
  return m;
}

void append_greeting(std::string& out, uint16_t handshake_flags) {
  put64(out, nbd_magic);
  put64(out, ihaveopt);
  put16(out, handshake_flags);
}

void append_option_reply(std::string& out, uint32_t option, uint32_t type,
                         std::span<const uint8_t> data) {
  append_option_reply(out, option, type,
                      std::string_view(reinterpret_cast<const char*>(data.data()), data.size()));
}

void append_option_reply(std::string& out, uint32_t option, uint32_t type, std::string_view data) {
  put64(out, option_reply_magic);
  put32(out, option);
  put32(out, type);
  put32(out, static_cast<uint32_t>(data.size()));
  out.append(data);
}

void append_info_export(std::string& out, uint32_t option, uint64_t size, uint16_t flags) {
  std::string d;
  put16(d, info_type::export_info);
  put64(d, size);
  put16(d, flags);
  append_option_reply(out, option, reply_type::info, d);
}

void append_info_block_size(std::string& out, uint32_t option, uint32_t minimum, uint32_t preferred,
                            uint32_t maximum) {
  std::string d;
  put16(d, info_type::block_size);
  put32(d, minimum);
  put32(d, preferred);
  put32(d, maximum);
  append_option_reply(out, option, reply_type::info, d);
}

void append_server_reply(std::string& out, uint32_t option, std::string_view name) {
  std::string d;
  put32(d, static_cast<uint32_t>(name.size()));
  d.append(name);
  append_option_reply(out, option, reply_type::server, d);
}

void append_meta_context_reply(std::string& out, uint32_t option, uint32_t id,
                               std::string_view name) {
  std::string d;
  put32(d, id);
  d.append(name);
  append_option_reply(out, option, reply_type::meta_context, d);
}

void append_export_name_reply(std::string& out, uint64_t size, uint16_t flags, bool no_zeroes) {
  put64(out, size);
  put16(out, flags);
  if (!no_zeroes) out.append(export_name_zeroes, '\0');
}

void encode_simple_reply(std::span<uint8_t, simple_reply_size> out, uint64_t cookie,
                         error_code error) {
  store_be32(out.data(), simple_reply_magic);
  store_be32(out.data() + 4, static_cast<uint32_t>(error));
  store_be64(out.data() + 8, cookie);
}

void encode_structured_header(std::span<uint8_t, structured_reply_header_size> out, uint16_t flags,
                              uint16_t type, uint64_t cookie, uint32_t length) {
  store_be32(out.data(), structured_reply_magic);
  store_be16(out.data() + 4, flags);
  store_be16(out.data() + 6, type);
  store_be64(out.data() + 8, cookie);
  store_be32(out.data() + 16, length);
}

void encode_offset_data_header(std::span<uint8_t, offset_data_header_size> out, uint64_t cookie,
                               uint64_t offset, uint32_t data_length) {
  encode_structured_header(out.first<structured_reply_header_size>(), reply_flag_done,
                           chunk_type::offset_data, cookie,
                           data_length + static_cast<uint32_t>(offset_data_prefix_size));
  store_be64(out.data() + structured_reply_header_size, offset);
}

void encode_none_chunk(std::span<uint8_t, structured_reply_header_size> out, uint64_t cookie) {
  encode_structured_header(out, reply_flag_done, chunk_type::none, cookie, 0);
}

void encode_error_chunk(std::span<uint8_t, error_chunk_size> out, uint64_t cookie,
                        error_code error) {
  encode_structured_header(out.first<structured_reply_header_size>(), reply_flag_done,
                           chunk_type::error, cookie, 6);
  store_be32(out.data() + structured_reply_header_size, static_cast<uint32_t>(error));
  store_be16(out.data() + structured_reply_header_size + 4, 0);  // no message
}

void encode_block_status_chunk(std::span<uint8_t, block_status_chunk_size> out, uint64_t cookie,
                               uint32_t context_id, uint32_t extent_length, uint32_t status_flags) {
  encode_structured_header(out.first<structured_reply_header_size>(), reply_flag_done,
                           chunk_type::block_status, cookie, 12);
  store_be32(out.data() + structured_reply_header_size, context_id);
  store_be32(out.data() + structured_reply_header_size + 4, extent_length);
  store_be32(out.data() + structured_reply_header_size + 8, status_flags);
}

void encode_block_status(std::span<uint8_t, structured_reply_header_size> header, std::string& body,
                         uint64_t cookie, uint32_t context_id,
                         std::span<const block_extent> extents) {
  const size_t length = 4 + 8 * extents.size();
  encode_structured_header(header, reply_flag_done, chunk_type::block_status, cookie,
                           static_cast<uint32_t>(length));
  const size_t at = body.size();
  body.resize(at + length);
  auto* p = reinterpret_cast<uint8_t*>(body.data() + at);
  store_be32(p, context_id);
  for (const block_extent& e : extents) {
    store_be32(p + 4, e.length);
    store_be32(p + 8, e.flags);
    p += 8;
  }
}

std::string option_name(uint32_t option) {
  switch (static_cast<enum option>(option)) {
    case option::export_name:
      return "NBD_OPT_EXPORT_NAME";
    case option::abort:
      return "NBD_OPT_ABORT";
    case option::list:
      return "NBD_OPT_LIST";
    case option::peek_export:
      return "NBD_OPT_PEEK_EXPORT";
    case option::starttls:
      return "NBD_OPT_STARTTLS";
    case option::info:
      return "NBD_OPT_INFO";
    case option::go:
      return "NBD_OPT_GO";
    case option::structured_reply:
      return "NBD_OPT_STRUCTURED_REPLY";
    case option::list_meta_context:
      return "NBD_OPT_LIST_META_CONTEXT";
    case option::set_meta_context:
      return "NBD_OPT_SET_META_CONTEXT";
    case option::extended_headers:
      return "NBD_OPT_EXTENDED_HEADERS";
  }
  return fmt::format("option {}", option);
}

std::string_view command_name(uint16_t type) noexcept {
  switch (static_cast<command>(type)) {
    case command::read:
      return "NBD_CMD_READ";
    case command::write:
      return "NBD_CMD_WRITE";
    case command::disc:
      return "NBD_CMD_DISC";
    case command::flush:
      return "NBD_CMD_FLUSH";
    case command::trim:
      return "NBD_CMD_TRIM";
    case command::cache:
      return "NBD_CMD_CACHE";
    case command::write_zeroes:
      return "NBD_CMD_WRITE_ZEROES";
    case command::block_status:
      return "NBD_CMD_BLOCK_STATUS";
  }
  return "unknown command";
}

}  // namespace zc::nbd
