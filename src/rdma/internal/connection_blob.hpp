// The connection blob an rdma context gives its peer out of band: which context to address, who
// the peer process is (to watch it on the same host), and the UCX worker address. Framed and
// checksummed by core/blob.hpp; decoded here, purely, before any byte reaches UCX (UCX crashes
// on malformed addresses: UCX_MEASURED.md §8). It carries no secret of the process.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.hpp"
#include "rdma/internal/host_process.hpp"

namespace zc::rdma::internal {

struct connection_info {
  uint32_t slot = 0;   // the context's slot on its UCX worker
  uint32_t nonce = 0;  // random, never 0: the context's identity in every message header
  host_process process;
  std::span<const uint8_t> worker_address;  // points into the decoded blob
};

// A UCX worker address is never shorter than this (tcp: 79 B, sm: 116 B measured).
inline constexpr size_t min_worker_address = 16;
// Nor longer than this: a blob is read from a peer and bounded before use.
inline constexpr size_t max_worker_address = 64 * 1024;

std::vector<uint8_t> encode_connection(const connection_info& info);
// invalid_value for a malformed, truncated, mis-framed or self-inconsistent blob;
// unsupported_version for a well-framed blob of a peer that speaks another protocol_version.
status decode_connection(std::span<const uint8_t> blob, connection_info& out) noexcept;

}  // namespace zc::rdma::internal
