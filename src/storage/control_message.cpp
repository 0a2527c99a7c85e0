#include "storage/control_message.hpp"

#include <fmt/format.h>

#include <array>
#include <limits>

#include "core/bytes.hpp"
#include "core/log.hpp"

namespace zc::storage {
namespace {

constexpr std::array<std::string_view, message_type_count> type_names = {
    "error_response",
    "query_storage_request",
    "query_storage_response",
    "init_storage_request",
    "init_storage_response",
    "create_rdma_connection_request",
    "create_rdma_connection_response",
    "start_storage_request",
    "start_storage_response",
    "stop_storage_request",
    "stop_storage_response",
    "shutdown_request",
    "shutdown_response",
    "keep_alive_request",
    "keep_alive_response",
};

// Index into message_payload of the alternative each type carries.
constexpr size_t payload_index(message_type type) noexcept {
  switch (type) {
    case message_type::error_response:
      return 1;
    case message_type::query_storage_response:
      return 2;
    case message_type::init_storage_request:
      return 3;
    case message_type::create_rdma_connection_request:
    case message_type::create_rdma_connection_response:
      return 4;
    default:
      return 0;
  }
}

void check_fits_u32(size_t size, std::string_view what) {
  if (size > std::numeric_limits<uint32_t>::max())
    throw status_error(status::invalid_value,
                       fmt::format("{} of {} bytes does not fit a u32 length", what, size));
}

void encode_payload(byte_writer& w, const message_payload& payload) {
  std::visit(
      [&w](const auto& p) {
        using T = std::decay_t<decltype(p)>;
        if constexpr (std::is_same_v<T, error_response_payload>) {
          check_fits_u32(p.message.size(), "error_response message");
          w.u32(static_cast<uint32_t>(p.error_code));
          w.sized_string(p.message);
        } else if constexpr (std::is_same_v<T, query_storage_response_payload>) {
          w.u64(p.total_size);
          w.u32(p.block_size);
        } else if constexpr (std::is_same_v<T, init_storage_request_payload>) {
          check_fits_u32(p.mmap_export.size(), "init_storage_request mmap_export");
          w.u32(p.transaction_count);
          w.u32(p.core_count);
          w.sized_bytes(p.mmap_export);
        } else if constexpr (std::is_same_v<T, rdma_connection_payload>) {
          check_fits_u32(p.connection_details.size(), "connection_details");
          w.u32(p.context_idx);
          w.u32(static_cast<uint32_t>(p.role));
          w.sized_bytes(p.connection_details);
        }
      },
      payload);
}

// Decoding failures carry the status and the text; a small type so the per-field code stays flat.
struct failure {
  status code;
  std::string text;
};

// Reads one u32-length-prefixed field, telling a missing prefix apart from a length that runs
// past the frame (the two ways a hostile peer can lie about it).
bool read_sized(byte_reader& r, message_type type, std::string_view field,
                std::span<const uint8_t>& out, failure& fail) {
  if (r.remaining() < 4) {
    fail = {status::invalid_value,
            fmt::format("{} payload truncated: no length for {}", to_string(type), field)};
    return false;
  }
  const size_t left = r.remaining() - 4;
  byte_reader peek = r;
  const uint32_t length = peek.u32();
  if (length > left) {
    fail = {status::invalid_value,
            fmt::format("{} {} length {} runs past the end of the frame ({} bytes left)",
                        to_string(type), field, length, left)};
    return false;
  }
  out = r.sized_bytes();
  return true;
}

bool need_fixed(const byte_reader& r, message_type type, size_t needed, failure& fail) {
  if (r.remaining() >= needed) return true;
  fail = {status::invalid_value,
          fmt::format("{} payload truncated: needs at least {} bytes, frame has {}",
                      to_string(type), needed, r.remaining())};
  return false;
}

bool decode_payload(byte_reader& r, message_type type, message_payload& out, failure& fail) {
  std::span<const uint8_t> bytes;
  switch (type) {
    case message_type::error_response: {
      if (!need_fixed(r, type, 4, fail)) return false;
      error_response_payload p;
      p.error_code = static_cast<status>(r.u32());
      if (!read_sized(r, type, "message", bytes, fail)) return false;
      p.message.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
      out = std::move(p);
      return true;
    }
    case message_type::query_storage_response: {
      if (!need_fixed(r, type, 12, fail)) return false;
      query_storage_response_payload p;
      p.total_size = r.u64();
      p.block_size = r.u32();
      out = p;
      return true;
    }
    case message_type::init_storage_request: {
      if (!need_fixed(r, type, 8, fail)) return false;
      init_storage_request_payload p;
      p.transaction_count = r.u32();
      p.core_count = r.u32();
      if (!read_sized(r, type, "mmap_export", bytes, fail)) return false;
      p.mmap_export.assign(bytes.begin(), bytes.end());
      out = std::move(p);
      return true;
    }
    case message_type::create_rdma_connection_request:
    case message_type::create_rdma_connection_response: {
      if (!need_fixed(r, type, 8, fail)) return false;
      rdma_connection_payload p;
      p.context_idx = r.u32();
      const uint32_t role = r.u32();
      if (role > static_cast<uint32_t>(rdma_role::io_control)) {
        fail = {status::invalid_value,
                fmt::format("{} has unknown rdma role {}", to_string(type), role)};
        return false;
      }
      p.role = static_cast<rdma_role>(role);
      if (!read_sized(r, type, "connection_details", bytes, fail)) return false;
      p.connection_details.assign(bytes.begin(), bytes.end());
      out = std::move(p);
      return true;
    }
    default:
      out = empty_payload{};
      return true;
  }
}

decode_result error_result(status code, std::string text) {
  decode_result result;
  result.outcome = decode_outcome::error;
  result.error = code;
  result.error_text = std::move(text);
  return result;
}

}  // namespace

std::string_view to_string(message_type type) noexcept {
  const auto index = static_cast<uint32_t>(type);
  return index < message_type_count ? type_names[index] : "unknown";
}

std::string_view to_string(rdma_role role) noexcept {
  switch (role) {
    case rdma_role::io_data:
      return "io_data";
    case rdma_role::io_control:
      return "io_control";
  }
  return "unknown";
}

bool payload_matches(message_type type, const message_payload& payload) noexcept {
  return static_cast<uint32_t>(type) < message_type_count && payload.index() == payload_index(type);
}

message make_response(const message& request, message_type type, message_payload payload) {
  return message{type, request.message_id, request.correlation_id, std::move(payload)};
}

message make_error_response(const message& request, status code, std::string text) {
  return make_response(request, message_type::error_response,
                       error_response_payload{code, std::move(text)});
}

message make_unexpected_response(const message& request, message_type expected) {
  ZC_LOG_WARN("unexpected {} while expecting a {}", to_string(request.type), to_string(expected));
  return make_error_response(request, status::unexpected,
                             fmt::format("Unexpected {} while expecting a {}",
                                         to_string(request.type), to_string(expected)));
}

void encode_to(const message& msg, std::vector<uint8_t>& out) {
  if (!payload_matches(msg.type, msg.payload))
    throw status_error(status::invalid_value,
                       fmt::format("cannot encode {} (type {}): payload does not match the type",
                                   to_string(msg.type), static_cast<uint32_t>(msg.type)));
  const size_t start = out.size();
  byte_writer w(out);
  w.u32(0);  // body length, patched below once the payload size is known
  w.u32(static_cast<uint32_t>(msg.type));
  w.u32(msg.message_id);
  w.u32(msg.correlation_id);
  try {
    encode_payload(w, msg.payload);
  } catch (...) {
    out.resize(start);
    throw;
  }
  const size_t body = out.size() - start - frame_header_size;
  if (body > std::numeric_limits<uint32_t>::max()) {
    out.resize(start);
    check_fits_u32(body, "control message body");
  }
  store_be32(out.data() + start, static_cast<uint32_t>(body));
}

std::vector<uint8_t> encode(const message& msg) {
  std::vector<uint8_t> out;
  encode_to(msg, out);
  return out;
}

namespace {

decode_result decode_frame_unchecked(std::span<const uint8_t> buffer, size_t max_body_size) {
  if (buffer.size() < frame_header_size) return {};
  const uint32_t body_size = load_be32(buffer.data());
  if (body_size < message_header_size)
    return error_result(status::invalid_value,
                        fmt::format("control frame body of {} bytes is shorter than the {}-byte "
                                    "message header",
                                    body_size, message_header_size));
  if (body_size > max_body_size)
    return error_result(status::too_big,
                        fmt::format("control frame body of {} bytes exceeds the maximum of {}",
                                    body_size, max_body_size));
  if (buffer.size() - frame_header_size < body_size) return {};

  byte_reader r(buffer.subspan(frame_header_size, body_size));
  const uint32_t raw_type = r.u32();
  if (raw_type >= message_type_count)
    return error_result(status::not_supported,
                        fmt::format("unknown control message type {}", raw_type));
  decode_result result;
  result.msg.type = static_cast<message_type>(raw_type);
  result.msg.message_id = r.u32();
  result.msg.correlation_id = r.u32();
  failure fail{};
  if (!decode_payload(r, result.msg.type, result.msg.payload, fail))
    return error_result(fail.code, std::move(fail.text));
  // Strict: trailing bytes mean the peer speaks another version of a payload, or lies about
  // a length; the reference silently ignored them.
  if (r.remaining() != 0)
    return error_result(status::invalid_value,
                        fmt::format("{} has {} trailing bytes after its payload",
                                    to_string(result.msg.type), r.remaining()));
  result.outcome = decode_outcome::message;
  result.consumed = frame_header_size + body_size;
  return result;
}

}  // namespace

decode_result decode_frame(std::span<const uint8_t> buffer, size_t max_body_size) noexcept {
  // Allocation (strings, blobs, error texts) is the only thing that can throw here; the frame
  // size limit keeps it small, but a decoder must not take the process down either way.
  decode_result result;
  result.outcome = decode_outcome::error;
  result.error = status::no_memory;
  try {
    return decode_frame_unchecked(buffer, max_body_size);
  } catch (...) {
  }
  try {
    result.error_text = "out of memory decoding a control message";
  } catch (...) {
  }
  return result;
}

}  // namespace zc::storage
