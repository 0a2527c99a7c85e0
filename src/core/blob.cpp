#include "core/blob.hpp"

#include <isa-l/crc.h>

#include "core/bytes.hpp"
#include "core/log.hpp"

namespace zc::core {
namespace {
uint32_t checksum(std::span<const uint8_t> payload) {
  return crc32_iscsi(const_cast<unsigned char*>(payload.data()), static_cast<int>(payload.size()),
                     0xFFFFFFFFu);
}
}  // namespace

std::vector<uint8_t> frame_blob(blob_kind kind, std::span<const uint8_t> payload,
                                uint16_t version) {
  std::vector<uint8_t> out;
  out.reserve(blob_header_size + payload.size());
  byte_writer w(out);
  w.u32(blob_magic);
  w.u16(version);
  w.u16(static_cast<uint16_t>(kind));
  w.u32(static_cast<uint32_t>(payload.size()));
  w.u32(checksum(payload));
  w.bytes(payload);
  return out;
}

uint16_t peek_blob_kind(std::span<const uint8_t> blob) noexcept {
  byte_reader r(blob);
  const uint32_t magic = r.u32();
  r.u16();  // version
  const uint16_t kind = r.u16();
  return r.ok() && magic == blob_magic ? kind : 0;
}

status parse_blob(std::span<const uint8_t> blob, blob_kind expected,
                  std::span<const uint8_t>& payload, uint16_t version) noexcept {
  byte_reader r(blob);
  uint32_t magic = r.u32();
  uint16_t found_version = r.u16();
  uint16_t kind = r.u16();
  uint32_t length = r.u32();
  uint32_t crc = r.u32();
  if (!r.ok() || magic != blob_magic) {
    ZC_SDK_LOG_ERROR("rejected blob of {} bytes: not a zcstore blob", blob.size());
    return status::invalid_value;
  }
  // The kind first: versions are counted per kind (an rdma connection blob moves with the rdma
  // protocol), so another kind's version says nothing.
  if (kind != static_cast<uint16_t>(expected)) {
    ZC_SDK_LOG_ERROR("rejected blob: kind {} where kind {} was expected", kind,
                     static_cast<uint16_t>(expected));
    return status::invalid_value;
  }
  if (found_version != version) {
    ZC_SDK_LOG_ERROR("rejected blob: version {} (this build speaks {})", found_version, version);
    return status::unsupported_version;
  }
  if (length > blob_max_payload || length != r.remaining()) {
    ZC_SDK_LOG_ERROR("rejected blob: declares {} payload bytes, carries {}", length, r.remaining());
    return status::invalid_value;
  }
  auto body = r.bytes(length);
  if (checksum(body) != crc) {
    ZC_SDK_LOG_ERROR("rejected blob: checksum mismatch");
    return status::invalid_value;
  }
  payload = body;
  return status::success;
}

}  // namespace zc::core
