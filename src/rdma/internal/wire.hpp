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

// The version of this protocol (the header below and its rules). Two contexts speak it only if
// they speak the same version: it is the version of the connection blob (FORMATS §7), so a
// mismatch is refused at connect, never found message by message. 1: 64-bit send numbers in
// `id`, acknowledgements only alone; 2: the 28-byte send header with 32-bit `seq` and `acked`,
// acknowledgements carried by any message (FORMATS §8).
inline constexpr uint16_t protocol_version = 2;

enum class op : uint16_t {
  send = 1,        // data for the peer's next posted receive (send, send with immediate)
  write = 2,       // data for an exported region (write, write with immediate, sync event set)
  read = 3,        // request for bytes of an exported region
  read_reply = 4,  // the bytes (or an error) for a read
  atomic = 5,      // compare-and-swap / fetch-and-add on 8 bytes of an exported region
  ack_sends = 6,   // an acknowledgement alone (has_ack), when nothing else went out to carry it
  nack_send = 7,   // send `seq` was not delivered: `status` says why
  ack_op = 8,      // write/atomic `id` completed with `status` (atomics: old value in operand0)
  disconnect = 9,  // the peer context stopped: fail what is in flight, leave running
};

enum flag : uint16_t {
  has_immediate = 1 << 0,
  atomic_fetch_add = 1 << 1,  // else compare-and-swap (unless atomic_set)
  atomic_set = 1 << 2,        // sync event set: one atomic store of operand0
  has_ack = 1 << 3,           // `acked` is valid, whatever the op
};

// Sends are numbered 1, 2, 3... per connection, and named on the wire by the low 32 bits of that
// number: far fewer than 2^31 are ever unacknowledged, so the receiver of an ack or a nack
// recovers the full number from its own count (see context::widen_send_seq).
struct wire_header {
  uint32_t dst_context;  // the receiving context's slot on its worker
  uint32_t dst_nonce;    // and its identity, so a recycled slot drops stale traffic
  uint32_t src_nonce;    // the sender's nonce: only the two connected contexts know both
  op code;
  uint16_t flags;
  uint32_t seq;    // send: its number; nack_send: the send refused
  uint32_t acked;  // has_ack: every send of the receiver's up to this one was delivered
  uint32_t immediate;
  // Replies and remote-memory operations only:
  uint32_t status;  // zc::status of a reply
  uint64_t id;      // task id of a read/write/atomic, echoed by its reply
  // Remote-memory operations only:
  uint64_t export_key;  // the secret of the export, from its blob
  uint64_t export_id;
  uint64_t offset;
  uint64_t length;
  uint64_t operand0;  // compare value / add value / old value in an ack
  uint64_t operand1;  // swap value
};

// Sends and acks carry only the first 28 bytes: with UCP's 8-byte header, a 64-byte send fits
// the 100 bytes of shared memory's am_short, UCX's fastest path.
inline constexpr size_t short_header_size = offsetof(wire_header, status);
inline constexpr size_t full_header_size = sizeof(wire_header);
// The layout docs/FORMATS.md §8 documents, field by field (tests/unit/rdma/wire_test.cpp checks
// the bytes).
static_assert(offsetof(wire_header, dst_context) == 0 && offsetof(wire_header, dst_nonce) == 4 &&
              offsetof(wire_header, src_nonce) == 8 && offsetof(wire_header, code) == 12 &&
              offsetof(wire_header, flags) == 14 && offsetof(wire_header, seq) == 16 &&
              offsetof(wire_header, acked) == 20 && offsetof(wire_header, immediate) == 24 &&
              offsetof(wire_header, status) == 28 && offsetof(wire_header, id) == 32 &&
              offsetof(wire_header, export_key) == 40 && offsetof(wire_header, export_id) == 48 &&
              offsetof(wire_header, offset) == 56 && offsetof(wire_header, length) == 64 &&
              offsetof(wire_header, operand0) == 72 && offsetof(wire_header, operand1) == 80 &&
              sizeof(wire_header) == 88 && short_header_size == 28);

inline constexpr size_t header_size_for(op code) {
  switch (code) {
    case op::send:
    case op::ack_sends:
    case op::disconnect:
      return short_header_size;
    case op::nack_send:
      return offsetof(wire_header, id);
    case op::read_reply:
      return offsetof(wire_header, export_key);
    case op::ack_op:
      return offsetof(wire_header, operand1);
    default:
      return full_header_size;
  }
}

// FORMATS §8's header length by op.
static_assert(header_size_for(op::send) == 28 && header_size_for(op::ack_sends) == 28 &&
              header_size_for(op::disconnect) == 28 && header_size_for(op::nack_send) == 32 &&
              header_size_for(op::read_reply) == 40 && header_size_for(op::ack_op) == 80 &&
              header_size_for(op::write) == 88 && header_size_for(op::read) == 88 &&
              header_size_for(op::atomic) == 88);

// Reads a header as it arrives from a peer: known op, long enough for that op. Pure (no state),
// so it is fuzzed on its own (tests/fuzz/rdma_wire_header_fuzz.cpp). Errors: invalid_value.
status decode_header(const void* bytes, size_t length, wire_header& out) noexcept;

}  // namespace zc::rdma::internal
