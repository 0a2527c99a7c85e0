// What the NBD server's unit tests share: the server on its own thread over a memory backend,
// on a Unix socket in a temporary folder; real clients run as child processes (bounded); a raw
// client for what no polite client sends. Every wait is bounded.
#pragma once

#include "nbd/server.hpp"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/bytes.hpp"
#include "memory_backend.hpp"
#include "nbd/protocol.hpp"
#include "support/nbdinfo_map.hpp"
#include "support/subprocess.hpp"

namespace zc::nbd::test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

inline constexpr uint32_t block = 4096;
inline constexpr uint64_t disk_size = 16u << 20;
inline constexpr uint32_t max_io = 1u << 20;
inline constexpr auto client_timeout = 60s;

// The clients are Debian's (scripts/dev.sh installs them there).
inline bool have(const std::string& program) {
  return ::access(("/usr/bin/" + program).c_str(), X_OK) == 0;
}

inline size_t open_fds() {
  size_t n = 0;
  for ([[maybe_unused]] auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// Waits (bounded) until this process has `want` descriptors open again.
inline bool fds_return_to(size_t want) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (open_fds() <= want) return true;
    std::this_thread::sleep_for(10ms);
  }
  return open_fds() <= want;
}

inline std::vector<uint8_t> pattern(size_t size, uint32_t seed) {
  std::vector<uint8_t> v(size);
  uint32_t x = seed;
  for (auto& b : v) {
    x = x * 1103515245u + 12345u;
    b = static_cast<uint8_t>(x >> 16);
  }
  return v;
}

// The server on its own thread, over a memory backend.
class served {
 public:
  // memory_limit: the bytes all ios may hold at once (0: ios * max_io).
  // hold_completions: ios complete when the test lets them go (memory_backend::let_go).
  // prepare: called on the backend before the server starts.
  explicit served(server_options options = {}, uint32_t ios = 32, bool backend_read_only = false,
                  uint32_t segment = 0, uint64_t memory_limit = 0, bool hold_completions = false,
                  const std::function<void(test::memory_backend&)>& prepare = {})
      : dir_(fs::temp_directory_path() / zc::test::unique_name("nbd")),
        backend_(disk_size, block, max_io, ios, backend_read_only, segment) {
    backend_.limit_memory(memory_limit);
    if (hold_completions) backend_.hold_completions();
    if (prepare) prepare(backend_);
    fs::create_directories(dir_);
    socket_ = (dir_ / "sock").string();
    srv_ = std::make_unique<server>(backend_, std::move(options));
    srv_->listen_unix(socket_);
    thread_ = std::thread([this] { srv_->run(); });
  }
  ~served() {
    stop();
    fs::remove_all(dir_);
  }
  void stop() {
    if (!thread_.joinable()) return;
    srv_->stop();
    thread_.join();
  }

  std::string uri(const std::string& name = "") const {
    return "nbd+unix:///" + name + "?socket=" + socket_;
  }
  const std::string& socket_path() const { return socket_; }
  fs::path file(const std::string& name) const { return dir_ / name; }
  test::memory_backend& backend() { return backend_; }
  server& srv() { return *srv_; }

 private:
  fs::path dir_;
  std::string socket_;
  test::memory_backend backend_;
  std::unique_ptr<server> srv_;
  std::thread thread_;
};

struct run_result {
  std::optional<int> code;
  std::string output;
};

// Runs a client to its end (bounded). nbdsh and friends want Debian's python, not another first
// on PATH.
inline run_result run(std::vector<std::string> argv) {
  if (argv[0].find('/') == std::string::npos) argv[0] = "/usr/bin/" + argv[0];
  zc::test::subprocess p(std::move(argv), {{"PATH", "/usr/bin:/bin:/usr/sbin:/sbin"}});
  auto code = p.wait(client_timeout);
  return {code, p.output()};
}

inline void write_file(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

inline std::vector<uint8_t> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// ---- a raw client, blocking with a receive timeout so that nothing waits forever

class raw_client {
 public:
  explicit raw_client(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    timeval tv{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
  ~raw_client() { close(); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool connected() const { return connected_; }
  // shutdown(SHUT_WR): the server reads the end of the stream, the replies may still come.
  bool shutdown_write() { return ::shutdown(fd_, SHUT_WR) == 0; }

  bool send(const void* p, size_t n) {
    auto* b = static_cast<const uint8_t*>(p);
    while (n > 0) {
      ssize_t k = ::send(fd_, b, n, MSG_NOSIGNAL);
      if (k <= 0) return false;
      b += k;
      n -= static_cast<size_t>(k);
    }
    return true;
  }
  bool send(const std::vector<uint8_t>& v) { return send(v.data(), v.size()); }
  // Exactly n bytes; empty on end of stream, error or timeout.
  std::vector<uint8_t> recv(size_t n) {
    std::vector<uint8_t> v(n);
    size_t got = 0;
    while (got < n) {
      ssize_t k = ::recv(fd_, v.data() + got, n - got, 0);
      if (k <= 0) return {};
      got += static_cast<size_t>(k);
    }
    return v;
  }
  // True when the server closed the connection (end of stream within the timeout).
  bool closed_by_peer() {
    uint8_t b;
    for (;;) {
      ssize_t k = ::recv(fd_, &b, 1, 0);
      if (k == 0) return true;
      if (k < 0) return errno == ECONNRESET;
    }
  }

  // Greeting and client flags.
  bool start(uint32_t flags = client_flag::fixed_newstyle | client_flag::no_zeroes) {
    auto g = recv(server_greeting_size);
    if (g.size() != server_greeting_size || load_be64(g.data()) != nbd_magic) return false;
    uint8_t f[4];
    store_be32(f, flags);
    return send(f, 4);
  }
  bool option(uint32_t opt, const std::vector<uint8_t>& data) {
    uint8_t h[16];
    store_be64(h, ihaveopt);
    store_be32(h + 8, opt);
    store_be32(h + 12, static_cast<uint32_t>(data.size()));
    return send(h, 16) && send(data);
  }
  struct opt_reply {
    uint32_t option = 0, type = 0;
    std::vector<uint8_t> data;
  };
  // One option and the type of its (first) reply; 0 when none came.
  uint32_t ask(nbd::option o, const std::vector<uint8_t>& data = {}) {
    if (!option(static_cast<uint32_t>(o), data)) return 0;
    auto r = reply();
    return r ? r->type : 0;
  }
  std::optional<opt_reply> reply() {
    auto h = recv(option_reply_header_size);
    if (h.empty() || load_be64(h.data()) != option_reply_magic) return std::nullopt;
    opt_reply r{load_be32(h.data() + 8), load_be32(h.data() + 12), {}};
    const uint32_t len = load_be32(h.data() + 16);
    if (len > 0) {
      r.data = recv(len);
      if (r.data.size() != len) return std::nullopt;
    }
    return r;
  }
  // NBD_OPT_GO for export "", every reply up to the ACK.
  bool go() {
    if (!option(static_cast<uint32_t>(option::go), {0, 0, 0, 0, 0, 0})) return false;
    for (;;) {
      auto r = reply();
      if (!r) return false;
      if (r->type == reply_type::ack) return true;
      if (r->type != reply_type::info) return false;
    }
  }
  bool request(command c, uint64_t cookie, uint64_t offset, uint32_t length, uint16_t flags = 0) {
    uint8_t h[28];
    store_be32(h, request_magic);
    store_be16(h + 4, flags);
    store_be16(h + 6, static_cast<uint16_t>(c));
    store_be64(h + 8, cookie);
    store_be64(h + 16, offset);
    store_be32(h + 24, length);
    return send(h, 28);
  }
  // A simple reply: (error, cookie).
  std::optional<std::pair<uint32_t, uint64_t>> simple_reply() {
    auto r = recv(simple_reply_size);
    if (r.empty() || load_be32(r.data()) != simple_reply_magic) return std::nullopt;
    return std::make_pair(load_be32(r.data() + 4), load_be64(r.data() + 8));
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

// Each client through the handshake and GO: true when all got there.
// LIST/SET_META_CONTEXT data: the export name, then the queries.
inline std::vector<uint8_t> meta_context_data(const std::string& name,
                                              const std::vector<std::string>& queries) {
  std::vector<uint8_t> d(4);
  store_be32(d.data(), static_cast<uint32_t>(name.size()));
  d.insert(d.end(), name.begin(), name.end());
  const size_t count_at = d.size();
  d.resize(d.size() + 4);
  store_be32(d.data() + count_at, static_cast<uint32_t>(queries.size()));
  for (const auto& q : queries) {
    const size_t at = d.size();
    d.resize(d.size() + 4);
    store_be32(d.data() + at, static_cast<uint32_t>(q.size()));
    d.insert(d.end(), q.begin(), q.end());
  }
  return d;
}

inline bool open_all(std::initializer_list<raw_client*> clients) {
  for (raw_client* c : clients)
    if (!c->start() || !c->go()) return false;
  return true;
}

// The next `n` simple replies on `c`, each a success.
inline void expect_successes(raw_client& c, int n) {
  for (int i = 0; i < n; ++i) {
    auto rep = c.simple_reply();
    ASSERT_TRUE(rep) << "reply " << i << " of " << n;
    EXPECT_EQ(rep->first, 0u) << "reply " << i;
  }
}

}  // namespace zc::nbd::test
