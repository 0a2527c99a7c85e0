// The NBD wire format (the NetworkBlockDevice project's doc/proto.md), fixed newstyle only: the
// constants, and decoders and encoders as pure functions over byte spans. No I/O, no allocation
// beyond the std::string an encoder appends to. Every length a decoder reads is checked against
// what it was given; the caller decides what to do with a header it rejected.
//
//   auto h = zc::nbd::decode_request(bytes);  // 28 bytes from the client
//   if (!h) close_connection();
//   zc::nbd::append_simple_reply(out, h->cookie, zc::nbd::error_code::eio);
//
// Thread rules: plain functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace zc::nbd {

// ---- handshake
inline constexpr uint64_t nbd_magic = 0x4e42444d41474943;  // "NBDMAGIC"
inline constexpr uint64_t ihaveopt = 0x49484156454f5054;   // "IHAVEOPT"
inline constexpr uint64_t option_reply_magic = 0x0003e889045565a9;
inline constexpr size_t server_greeting_size = 18;  // magic, IHAVEOPT, 16-bit flags
inline constexpr size_t client_flags_size = 4;
inline constexpr size_t option_header_size = 16;  // IHAVEOPT, option, length
inline constexpr size_t option_reply_header_size = 20;
// Longer option data is read and thrown away, then refused with ERR_TOO_BIG: no option we know
// carries more than an export name and a few meta context queries.
inline constexpr uint32_t max_option_length = 64 * 1024;
// An export name or a meta context query is at most 4096 bytes (proto.md "string" rule).
inline constexpr uint32_t max_string_length = 4096;
// NBD_OPT_EXPORT_NAME's answer without NO_ZEROES carries 124 zero bytes.
inline constexpr size_t export_name_zeroes = 124;

namespace handshake_flag {
inline constexpr uint16_t fixed_newstyle = 1u << 0;
inline constexpr uint16_t no_zeroes = 1u << 1;
}  // namespace handshake_flag

namespace client_flag {
inline constexpr uint32_t fixed_newstyle = 1u << 0;
inline constexpr uint32_t no_zeroes = 1u << 1;
inline constexpr uint32_t known = fixed_newstyle | no_zeroes;
}  // namespace client_flag

enum class option : uint32_t {
  export_name = 1,
  abort = 2,
  list = 3,
  peek_export = 4,
  starttls = 5,
  info = 6,
  go = 7,
  structured_reply = 8,
  list_meta_context = 9,
  set_meta_context = 10,
  extended_headers = 11,
};

namespace reply_type {
inline constexpr uint32_t ack = 1;
inline constexpr uint32_t server = 2;
inline constexpr uint32_t info = 3;
inline constexpr uint32_t meta_context = 4;
inline constexpr uint32_t error_bit = 1u << 31;
inline constexpr uint32_t err_unsup = error_bit | 1;
inline constexpr uint32_t err_policy = error_bit | 2;
inline constexpr uint32_t err_invalid = error_bit | 3;
inline constexpr uint32_t err_platform = error_bit | 4;
inline constexpr uint32_t err_tls_reqd = error_bit | 5;
inline constexpr uint32_t err_unknown = error_bit | 6;
inline constexpr uint32_t err_shutdown = error_bit | 7;
inline constexpr uint32_t err_block_size_reqd = error_bit | 8;
inline constexpr uint32_t err_too_big = error_bit | 9;
}  // namespace reply_type

namespace info_type {
inline constexpr uint16_t export_info = 0;
inline constexpr uint16_t name = 1;
inline constexpr uint16_t description = 2;
inline constexpr uint16_t block_size = 3;
}  // namespace info_type

// ---- transmission
namespace transmission_flag {
inline constexpr uint16_t has_flags = 1u << 0;
inline constexpr uint16_t read_only = 1u << 1;
inline constexpr uint16_t send_flush = 1u << 2;
inline constexpr uint16_t send_fua = 1u << 3;
inline constexpr uint16_t rotational = 1u << 4;
inline constexpr uint16_t send_trim = 1u << 5;
inline constexpr uint16_t send_write_zeroes = 1u << 6;
inline constexpr uint16_t send_df = 1u << 7;
inline constexpr uint16_t can_multi_conn = 1u << 8;
inline constexpr uint16_t send_resize = 1u << 9;
inline constexpr uint16_t send_cache = 1u << 10;
inline constexpr uint16_t send_fast_zero = 1u << 11;
}  // namespace transmission_flag

inline constexpr uint32_t request_magic = 0x25609513;
inline constexpr uint32_t simple_reply_magic = 0x67446698;
inline constexpr uint32_t structured_reply_magic = 0x668e33ef;
inline constexpr size_t request_header_size = 28;
inline constexpr size_t simple_reply_size = 16;
inline constexpr size_t structured_reply_header_size = 20;
// OFFSET_DATA's payload starts with the 64-bit offset the data belongs at.
inline constexpr size_t offset_data_prefix_size = 8;

namespace command_flag {
inline constexpr uint16_t fua = 1u << 0;
inline constexpr uint16_t no_hole = 1u << 1;
inline constexpr uint16_t df = 1u << 2;
inline constexpr uint16_t req_one = 1u << 3;
inline constexpr uint16_t fast_zero = 1u << 4;
}  // namespace command_flag

enum class command : uint16_t {
  read = 0,
  write = 1,
  disc = 2,
  flush = 3,
  trim = 4,
  cache = 5,
  write_zeroes = 6,
  block_status = 7,
};

namespace chunk_type {
inline constexpr uint16_t none = 0;
inline constexpr uint16_t offset_data = 1;
inline constexpr uint16_t offset_hole = 2;
inline constexpr uint16_t block_status = 5;
inline constexpr uint16_t error = (1u << 15) | 1;
}  // namespace chunk_type
inline constexpr uint16_t reply_flag_done = 1u << 0;

// base:allocation's status flags.
namespace block_state {
inline constexpr uint32_t hole = 1u << 0;
inline constexpr uint32_t zero = 1u << 1;
}  // namespace block_state

struct block_extent {
  uint32_t length = 0;
  uint32_t flags = 0;
};

// The errno values of the protocol (Linux numbering, fixed by proto.md).
enum class error_code : uint32_t {
  ok = 0,
  eperm = 1,
  eio = 5,
  enomem = 12,
  einval = 22,
  enospc = 28,
  eoverflow = 75,
  enotsup = 95,
  eshutdown = 108,
};

inline constexpr std::string_view base_allocation = "base:allocation";

// ---- decoders (nullopt: not what the protocol allows there)

struct option_header {
  uint32_t option = 0;  // raw: unknown values are answered ERR_UNSUP
  uint32_t length = 0;  // of the data that follows; not yet capped
};
// 16 bytes: IHAVEOPT, option, length. nullopt on a bad magic.
std::optional<option_header> decode_option_header(std::span<const uint8_t, option_header_size> b);

struct request_header {
  uint16_t flags = 0;
  uint16_t type = 0;  // raw: unknown commands are answered EINVAL
  uint64_t cookie = 0;
  uint64_t offset = 0;
  uint32_t length = 0;
};
// 28 bytes. nullopt on a bad magic.
std::optional<request_header> decode_request(std::span<const uint8_t, request_header_size> b);

// NBD_OPT_INFO / NBD_OPT_GO data: export name, then the info types asked for.
struct go_request {
  std::string_view name;
  std::span<const uint8_t> info_requests;  // 2 bytes each, big-endian
  size_t info_count() const noexcept { return info_requests.size() / 2; }
  uint16_t info(size_t i) const noexcept;
};
// nullopt when the lengths inside do not add up to exactly `data`.
std::optional<go_request> decode_go(std::span<const uint8_t> data);

// NBD_OPT_{LIST,SET}_META_CONTEXT data: export name, then the queries.
struct meta_context_request {
  std::string_view name;
  uint32_t query_count = 0;
  std::vector<std::string_view> queries;  // into the decoded data, walked once
  // The i-th query; only valid for i < query_count.
  std::string_view query(uint32_t i) const noexcept { return queries[i]; }
};
std::optional<meta_context_request> decode_meta_context(std::span<const uint8_t> data);

// ---- encoders (append to `out`)

void append_greeting(std::string& out, uint16_t handshake_flags);
void append_option_reply(std::string& out, uint32_t option, uint32_t type,
                         std::span<const uint8_t> data = {});
void append_option_reply(std::string& out, uint32_t option, uint32_t type, std::string_view data);
// NBD_REP_INFO payloads.
void append_info_export(std::string& out, uint32_t option, uint64_t size, uint16_t flags);
void append_info_block_size(std::string& out, uint32_t option, uint32_t minimum, uint32_t preferred,
                            uint32_t maximum);
// NBD_REP_SERVER for NBD_OPT_LIST: the name's length, then the name.
void append_server_reply(std::string& out, uint32_t option, std::string_view name);
// NBD_REP_META_CONTEXT: context id, then the context's name.
void append_meta_context_reply(std::string& out, uint32_t option, uint32_t id,
                               std::string_view name);
// NBD_OPT_EXPORT_NAME's answer: size, flags, and the 124 zeroes unless NO_ZEROES was agreed.
void append_export_name_reply(std::string& out, uint64_t size, uint16_t flags, bool no_zeroes);

// Fixed-size reply headers, written into `out`.
void encode_simple_reply(std::span<uint8_t, simple_reply_size> out, uint64_t cookie,
                         error_code error);
void encode_structured_header(std::span<uint8_t, structured_reply_header_size> out, uint16_t flags,
                              uint16_t type, uint64_t cookie, uint32_t length);
// The header of a final OFFSET_DATA chunk carrying `data_length` bytes at `offset`, plus the
// offset itself (28 bytes): the data follows on the wire.
inline constexpr size_t offset_data_header_size =
    structured_reply_header_size + offset_data_prefix_size;
void encode_offset_data_header(std::span<uint8_t, offset_data_header_size> out, uint64_t cookie,
                               uint64_t offset, uint32_t data_length);
// A final NONE chunk (20 bytes).
void encode_none_chunk(std::span<uint8_t, structured_reply_header_size> out, uint64_t cookie);
// A final ERROR chunk with no message (26 bytes).
inline constexpr size_t error_chunk_size = structured_reply_header_size + 6;
void encode_error_chunk(std::span<uint8_t, error_chunk_size> out, uint64_t cookie,
                        error_code error);
// A final BLOCK_STATUS chunk with one extent (32 bytes).
inline constexpr size_t block_status_chunk_size = structured_reply_header_size + 12;
void encode_block_status_chunk(std::span<uint8_t, block_status_chunk_size> out, uint64_t cookie,
                               uint32_t context_id, uint32_t extent_length, uint32_t status_flags);
// A final BLOCK_STATUS chunk with any number of extents (at least one): its header into `header`,
// the context id and the descriptors appended to `body`.
void encode_block_status(std::span<uint8_t, structured_reply_header_size> header, std::string& body,
                         uint64_t cookie, uint32_t context_id,
                         std::span<const block_extent> extents);

// "NBD_OPT_GO"-style names for logs ("option 1234" for unknown ones).
std::string option_name(uint32_t option);
std::string_view command_name(uint16_t type) noexcept;

}  // namespace zc::nbd
