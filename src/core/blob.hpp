// Framing for every opaque blob zcstore hands to a peer out of band (RDMA connection details,
// memory exports, sync event exports). UCX crashes on malformed worker addresses, so nothing
// from a peer reaches UCX before its frame (magic, version, kind, length, CRC32C) is checked.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.hpp"

namespace zc::core {

enum class blob_kind : uint16_t {
  rdma_connection = 1,
  rdma_memory = 2,
  pci_memory = 3,
};

inline constexpr uint32_t blob_magic = 0x5A43424C;  // "ZCBL"
inline constexpr uint16_t blob_version = 1;
inline constexpr size_t blob_header_size = 16;
inline constexpr size_t blob_max_payload = 64 * 1024;

// `version` is the version of the blob's own format: blob_version unless a kind has moved on
// (an rdma connection blob carries the version of the rdma protocol, FORMATS §7).
std::vector<uint8_t> frame_blob(blob_kind kind, std::span<const uint8_t> payload,
                                uint16_t version = blob_version);

// Checks the frame; on success points `payload` at the bytes inside `blob`. Errors:
// invalid_value (short, wrong magic, wrong kind, wrong length, bad checksum),
// unsupported_version (a well-framed blob of another `version`).
status parse_blob(std::span<const uint8_t> blob, blob_kind expected,
                  std::span<const uint8_t>& payload, uint16_t version = blob_version) noexcept;

// The kind a blob's header names, without checking the rest or logging; 0 when it is too short
// or not a zcstore blob. Only to pick the parser, which then checks everything.
uint16_t peek_blob_kind(std::span<const uint8_t> blob) noexcept;

}  // namespace zc::core
