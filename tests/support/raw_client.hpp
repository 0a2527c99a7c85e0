// Test helper: a plain blocking TCP client on 127.0.0.1, to speak bytes the control channels
// would never send (malformed frames, plain text to a TLS server) and to watch what comes back.
// Every read is bounded.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

namespace zc::test {

class raw_client {
 public:
  // Connects at once; connected() says whether it worked.
  explicit raw_client(uint16_t port);
  ~raw_client();
  raw_client(const raw_client&) = delete;
  raw_client& operator=(const raw_client&) = delete;

  bool connected() const { return connected_; }
  int fd() const { return fd_; }
  // Everything or nothing; MSG_NOSIGNAL, as the peer may have closed already.
  bool send(std::span<const uint8_t> bytes);
  void shutdown_write();

  // Reads until the peer closes the connection, `enough` says what arrived is enough, or
  // `timeout` passes. Returns what arrived and whether the connection was closed.
  using predicate = std::function<bool(const std::vector<uint8_t>&)>;
  std::pair<std::vector<uint8_t>, bool> read(std::chrono::milliseconds timeout,
                                             const predicate& enough = {});

 private:
  int fd_ = -1;
  bool connected_ = false;
};

}  // namespace zc::test
