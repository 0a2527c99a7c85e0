// The zcstore RDMA protocol over UCX active messages (DESIGN §3 "Transports"): UCX only moves
// bytes here; ranges, permissions and export lifetimes are checked by the memory owner.
// Fields are host order: peers are assumed to share endianness (x86-64 and Arm64 both little).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.hpp"

namespace zc::rdma::internal {

// One UCX active-message id carries the whole protocol; `op` says what a message is.
inline constexpr unsigned am_id = 0x5A;

enum class op : uint16_t {
  send = 1,        // data for the peer's next posted receive (send, send with immediate)
  write = 2,       // data for an exported region (write, write with immediate, sync event set)
  read = 3,        // request for bytes of an exported region
  read_reply = 4,  // the bytes (or an error) for a read
  atomic = 5,      // compare-and-swap / fetch-and-add on 8 bytes of an exported region
  ack_sends = 6,   // every send up to `id` was delivered
  nack_send = 7,   // send `id` was not delivered: `status` says why
  ack_op = 8,      // write/atomic `id` completed with `status` (atomics: old value in operand0)
  disconnect = 9,  // the peer context stopped: fail what is in flight, leave running
};

enum flag : uint16_t {
  has_immediate = 1 << 0,
  atomic_fetch_add = 1 << 1,  // else compare-and-swap (unless atomic_set)
  atomic_set = 1 << 2,        // sync event set: one atomic store of operand0
};

struct wire_header {
  uint32_t dst_context;  // the receiving context's slot on its worker
  uint32_t dst_nonce;    // and its identity, so a recycled slot drops stale traffic
  op code;
  uint16_t flags;
  uint32_t status;  // zc::status of a reply
  uint64_t id;      // send sequence number, or task id of a read/write/atomic
  uint32_t immediate;
  uint32_t src_nonce;  // the sender's nonce: only the two connected contexts know both
  // Remote-memory operations only:
  uint64_t export_key;  // the secret of the export, from its blob
  uint64_t export_id;
  uint64_t offset;
  uint64_t length;
  uint64_t operand0;  // compare value / add value / old value in an ack
  uint64_t operand1;  // swap value
};

// Sends and acks carry only the first part of the header.
inline constexpr size_t short_header_size = offsetof(wire_header, export_key);
inline constexpr size_t full_header_size = sizeof(wire_header);

inline constexpr size_t header_size_for(op code) {
  switch (code) {
    case op::send:
    case op::ack_sends:
    case op::nack_send:
    case op::read_reply:
    case op::disconnect:
      return short_header_size;
    case op::ack_op:
      return offsetof(wire_header, operand1);
    default:
      return full_header_size;
  }
}

// Reads a header as it arrives from a peer: known op, long enough for that op. Pure (no state),
// so it is fuzzed on its own (tests/fuzz/rdma_wire_header_fuzz.cpp). Errors: invalid_value.
status decode_header(const void* bytes, size_t length, wire_header& out) noexcept;

}  // namespace zc::rdma::internal
