// Peer program for the host_process tests: `zc_rdma_host_process_peer`.
// Prints its own host_process (the bytes host_process::write gives, in hex) as
// "identity HEX end", then waits until it is killed.
#include <unistd.h>

#include <cstdio>
#include <vector>

#include "core/bytes.hpp"
#include "rdma/internal/host_process.hpp"

int main() {
  std::vector<uint8_t> bytes;
  zc::byte_writer w(bytes);
  zc::rdma::internal::host_process::self().write(w);
  std::printf("identity ");
  for (uint8_t b : bytes) std::printf("%02x", b);
  std::printf(" end\n");
  std::fflush(stdout);
  for (;;) pause();
}
