#include "rdma/internal/connection_blob.hpp"

#include "core/blob.hpp"
#include "core/bytes.hpp"
#include "rdma/internal/wire.hpp"

namespace zc::rdma::internal {

// Payload: u32 slot, u32 nonce, the process identity (host_process::write), then the worker
// address as u32 length + bytes.
std::vector<uint8_t> encode_connection(const connection_info& info) {
  std::vector<uint8_t> payload;
  byte_writer w(payload);
  w.u32(info.slot);
  w.u32(info.nonce);
  info.process.write(w);
  w.sized_bytes(info.worker_address);
  return core::frame_blob(core::blob_kind::rdma_connection, payload, protocol_version);
}

status decode_connection(std::span<const uint8_t> blob, connection_info& out) noexcept {
  out = {};
  std::span<const uint8_t> payload;
  const status framed =
      core::parse_blob(blob, core::blob_kind::rdma_connection, payload, protocol_version);
  if (framed == status::unsupported_version) return framed;
  if (!ok(framed)) return status::invalid_value;
  byte_reader r(payload);
  connection_info info;
  info.slot = r.u32();
  info.nonce = r.u32();
  if (!host_process::read(r, info.process)) return status::invalid_value;
  info.worker_address = r.sized_bytes();
  if (!r.ok() || r.remaining() != 0 || info.nonce == 0 ||
      info.worker_address.size() < min_worker_address ||
      info.worker_address.size() > max_worker_address)
    return status::invalid_value;
  out = info;
  return status::success;
}

}  // namespace zc::rdma::internal
