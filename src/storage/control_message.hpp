// Control-plane messages (REFERENCE_SPEC §2, docs/FORMATS.md): the 13 message types, their
// payloads, and the frame codec. Pure values and functions: safe from any thread.
//
//   auto frame = zc::storage::encode({message_type::query_storage_request, 0, 0, empty_payload{}});
//   auto r = zc::storage::decode_frame(received_bytes);
//   if (r.outcome == decode_outcome::message) { use(r.msg); drop(r.consumed); }
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/status.hpp"

namespace zc::storage {

// Wire values are fixed by the reference; never renumber.
enum class message_type : uint32_t {
  error_response = 0,
  query_storage_request = 1,
  query_storage_response = 2,
  init_storage_request = 3,
  init_storage_response = 4,
  create_rdma_connection_request = 5,
  create_rdma_connection_response = 6,
  start_storage_request = 7,
  start_storage_response = 8,
  stop_storage_request = 9,
  stop_storage_response = 10,
  shutdown_request = 11,
  shutdown_response = 12,
  // zcstore's own (FORMATS.md §6): the reference's types keep their numbers. A control client
  // sends keep_alive_request when due (keep_alive_interval); the server answers at once, in any
  // stage, and neither changes the session's stage. Empty payload.
  keep_alive_request = 13,
  keep_alive_response = 14,
};
inline constexpr uint32_t message_type_count = 15;

// Which of a worker's two RDMA connections a create_rdma_connection message is about.
enum class rdma_role : uint32_t {
  io_data = 0,     // bulk read/write initiated by the target
  io_control = 1,  // 64-byte IO messages, send/receive
};

// "query_storage_request", as the reference names them; "unknown" for values off the table.
std::string_view to_string(message_type type) noexcept;
// "io_data" / "io_control"; "unknown" otherwise.
std::string_view to_string(rdma_role role) noexcept;

// Payload of the types that carry none (1, 4, 7..14).
struct empty_payload {
  bool operator==(const empty_payload&) const = default;
};

// Type 0. error_code keeps the sender's raw value, even one we do not know, so a relayed error
// reaches the initiator unchanged.
struct error_response_payload {
  status error_code = status::success;
  std::string message;
  bool operator==(const error_response_payload&) const = default;
};

// Type 2.
struct query_storage_response_payload {
  uint64_t total_size = 0;  // bytes
  uint32_t block_size = 0;  // bytes
  bool operator==(const query_storage_response_payload&) const = default;
};

// Type 3. mmap_export is an opaque memory-export blob (PCI export from the initiator, RDMA export
// from a service).
struct init_storage_request_payload {
  uint32_t transaction_count = 0;
  uint32_t core_count = 0;
  std::vector<uint8_t> mmap_export;
  bool operator==(const init_storage_request_payload&) const = default;
};

// Types 5 and 6 (same layout). connection_details is an opaque RDMA connection blob.
struct rdma_connection_payload {
  uint32_t context_idx = 0;  // worker index, 0-based
  rdma_role role = rdma_role::io_data;
  std::vector<uint8_t> connection_details;
  bool operator==(const rdma_connection_payload&) const = default;
};

using message_payload =
    std::variant<empty_payload, error_response_payload, query_storage_response_payload,
                 init_storage_request_payload, rdma_connection_payload>;

// One control message. A response copies message_id and correlation_id from its request
// (REFERENCE_SPEC §2.5).
struct message {
  message_type type = message_type::query_storage_request;
  uint32_t message_id = 0;
  uint32_t correlation_id = 0;
  message_payload payload;
  bool operator==(const message&) const = default;
};

// Frame = u32 BE body length + body; body = type, message_id, correlation_id (u32 BE each) +
// payload.
inline constexpr size_t frame_header_size = 4;
inline constexpr size_t message_header_size = 12;
// Largest body a decoder accepts unless told otherwise: far above any real message (blobs are a
// few hundred bytes) and small enough that a hostile length cannot make us buffer much.
inline constexpr size_t default_max_body_size = 64 * 1024;

// True when `payload` holds the alternative that `type` carries.
bool payload_matches(message_type type, const message_payload& payload) noexcept;

// Builds a response to `request`: same message_id and correlation_id.
message make_response(const message& request, message_type type, message_payload payload = {});
message make_error_response(const message& request, status code, std::string text);
// A request of the wrong type for the session's stage: logged once (warning) and answered
// UNEXPECTED, "Unexpected <request> while expecting a <expected>" (REFERENCE_SPEC §2.9).
message make_unexpected_response(const message& request, message_type expected);

// The full frame (header + body). Throws status_error(invalid_value) if the payload does not
// match the type or a field does not fit its u32 length.
std::vector<uint8_t> encode(const message& msg);
// Same, appended to `out` (reuses a send buffer).
void encode_to(const message& msg, std::vector<uint8_t>& out);

enum class decode_outcome {
  need_more,  // the buffer holds no complete frame yet; nothing consumed
  message,    // `msg` decoded from the first `consumed` bytes
  error,      // malformed input; `error` and `error_text` say why. The stream cannot resync.
};

struct decode_result {
  decode_outcome outcome = decode_outcome::need_more;
  message msg;
  size_t consumed = 0;
  status error = status::success;
  std::string error_text;
};

// Decodes the first frame of `buffer`. Strict: the payload must fill the body exactly (no
// trailing bytes), lengths must stay inside the frame, the type and rdma role must be known, and
// the body must be 12..max_body_size bytes. A bad length is reported as soon as the header is
// there, without waiting for the body. Never reads outside `buffer`, never throws.
decode_result decode_frame(std::span<const uint8_t> buffer,
                           size_t max_body_size = default_max_body_size) noexcept;

}  // namespace zc::storage
