// The NBD server over a memory backend, on a Unix socket in a temporary folder, driven by real
// clients as child processes (nbdinfo, an nbdsh script, nbdcopy, qemu-io) and by a raw socket
// for what no polite client sends (unknown options, garbage, huge lengths, a flood of
// connections, a disconnect in the middle of a request). Every wait is bounded.
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

namespace zc::nbd {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr uint32_t block = 4096;
constexpr uint64_t disk_size = 16u << 20;
constexpr uint32_t max_io = 1u << 20;
constexpr auto client_timeout = 60s;

// The clients are Debian's (scripts/dev.sh installs them there).
bool have(const std::string& program) {
  return ::access(("/usr/bin/" + program).c_str(), X_OK) == 0;
}

size_t open_fds() {
  size_t n = 0;
  for ([[maybe_unused]] auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// Waits (bounded) until this process has `want` descriptors open again.
bool fds_return_to(size_t want) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (open_fds() <= want) return true;
    std::this_thread::sleep_for(10ms);
  }
  return open_fds() <= want;
}

std::vector<uint8_t> pattern(size_t size, uint32_t seed) {
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
run_result run(std::vector<std::string> argv) {
  if (argv[0].find('/') == std::string::npos) argv[0] = "/usr/bin/" + argv[0];
  zc::test::subprocess p(std::move(argv), {{"PATH", "/usr/bin:/bin:/usr/sbin:/sbin"}});
  auto code = p.wait(client_timeout);
  return {code, p.output()};
}

void write_file(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

std::vector<uint8_t> read_file(const fs::path& path) {
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
bool open_all(std::initializer_list<raw_client*> clients) {
  for (raw_client* c : clients)
    if (!c->start() || !c->go()) return false;
  return true;
}

// The next `n` simple replies on `c`, each a success.
void expect_successes(raw_client& c, int n) {
  for (int i = 0; i < n; ++i) {
    auto rep = c.simple_reply();
    ASSERT_TRUE(rep) << "reply " << i << " of " << n;
    EXPECT_EQ(rep->first, 0u) << "reply " << i;
  }
}

// ---- nbdinfo

TEST(nbd_server, nbdinfo_reports_size_block_sizes_and_flags) {
  if (!have("nbdinfo")) GTEST_SKIP() << "nbdinfo (libnbd-bin) is not installed";
  served s;
  auto r = run({"nbdinfo", "--json", s.uri()});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output;
  const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  const auto& e = j.at("exports").at(0);
  EXPECT_EQ(e.at("export-size").get<uint64_t>(), disk_size);
  // Any byte range (read-modify-write below the block), preferably whole blocks, and at most one
  // block short of the largest io (the blocks around an unaligned request must fit it).
  EXPECT_EQ(e.at("block_size_minimum").get<uint32_t>(), 1u);
  EXPECT_EQ(e.at("block_size_preferred").get<uint32_t>(), 4096u);
  EXPECT_EQ(e.at("block_size_maximum").get<uint32_t>(), max_io - block);
  EXPECT_EQ(e.at("is_read_only").get<bool>(), false);
  for (const char* key : {"can_flush", "can_fua", "can_multi_conn", "can_trim", "can_zero",
                          "can_fast_zero", "can_cache", "can_df"})
    EXPECT_TRUE(e.at(key).get<bool>()) << key << "\n" << r.output;
}

TEST(nbd_server, tcp_listener_serves_nbdinfo) {
  if (!have("nbdinfo")) GTEST_SKIP() << "nbdinfo (libnbd-bin) is not installed";
  test::memory_backend backend(disk_size, block, max_io, 4);
  server srv(backend, {});
  const uint16_t port = srv.listen_tcp({0x7f000001, 0});
  ASSERT_NE(port, 0);
  std::thread t([&] { srv.run(); });
  auto r = run({"nbdinfo", "--size", "nbd://127.0.0.1:" + std::to_string(port)});
  srv.stop();
  t.join();
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output;
  EXPECT_EQ(std::stoull(r.output), disk_size) << r.output;
}

TEST(nbd_server, nbdinfo_sees_a_read_only_export) {
  if (!have("nbdinfo")) GTEST_SKIP() << "nbdinfo (libnbd-bin) is not installed";
  served s({.read_only = true});
  auto r = run({"nbdinfo", "--json", s.uri()});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output;
  const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  EXPECT_TRUE(j.at("exports").at(0).at("is_read_only").get<bool>()) << r.output;
}

// Storage without allocation maps: one allocated extent over everything.
TEST(nbd_server, nbdinfo_map_is_one_allocated_extent_without_a_map) {
  if (!have("nbdinfo")) GTEST_SKIP() << "nbdinfo (libnbd-bin) is not installed";
  served s({}, 32, false, 0, 0, false, [](test::memory_backend& b) { b.without_sparse(); });
  auto r = run({"nbdinfo", "--map", s.uri()});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output;
  // "         0    16777216    0  data"
  std::istringstream in(r.output);
  uint64_t offset = 1, length = 0;
  uint32_t type = 9;
  std::string what;
  in >> offset >> length >> type >> what;
  EXPECT_EQ(offset, 0u) << r.output;
  EXPECT_EQ(length, disk_size) << r.output;
  EXPECT_EQ(type, 0u) << r.output;
  EXPECT_EQ(what, "data") << r.output;
}

TEST(nbd_server, nbdinfo_list_names_the_export) {
  if (!have("nbdinfo")) GTEST_SKIP() << "nbdinfo (libnbd-bin) is not installed";
  served s({.export_name = "disk"});
  auto r = run({"nbdinfo", "--list", "--json", s.uri("disk")});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output;
  const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  ASSERT_EQ(j.at("exports").size(), 1u) << r.output;
  EXPECT_EQ(j.at("exports").at(0).at("export-name").get<std::string>(), "disk");
}

// ---- nbdsh: handshake options and errors

constexpr const char* nbdsh_script = R"PY(
import errno, sys
import nbd

sock = SOCK
def uri(name=''):
    return 'nbd+unix:///' + name + '?socket=' + sock

def errno_of(e):
    return e.errno if isinstance(e.errno, int) else getattr(errno, e.errno)  # a name in 1.14

def expect_errno(f, want, what):
    try:
        f()
    except nbd.Error as e:
        assert errno_of(e) == want, '%s: errno %s, wanted %s (%s)' % (what, e.errno, want, e)
        print('ok:', what)
        return
    raise AssertionError(what + ': no error')

# Options: LIST, INFO on a wrong name (ERR_UNKNOWN), then INFO and GO on the right one.
h = nbd.NBD()
h.set_opt_mode(True)
h.set_export_name('disk')
h.connect_uri(uri('disk'))
names = []
h.opt_list(lambda name, desc: names.append(name))
assert names == ['disk'], names
print('ok: list')
h.set_export_name('nope')
expect_errno(lambda: h.opt_info(), errno.ENOENT, 'unknown export refused (ERR_UNKNOWN)')
h.set_export_name('disk')
h.opt_info()
assert h.get_size() == SIZE, h.get_size()
assert h.get_block_size(nbd.SIZE_MINIMUM) == 1
assert h.get_block_size(nbd.SIZE_PREFERRED) == 4096
print('ok: info')
contexts = []
h.add_meta_context('base:allocation')
n = h.opt_list_meta_context(lambda name: contexts.append(name))
assert contexts == ['base:allocation'], contexts
print('ok: list meta contexts')
h.opt_go()
assert h.get_structured_replies_negotiated()
assert h.can_meta_context('base:allocation')
print('ok: go')

# Transmission: data, block status, and the errors a server must give.
h.set_strict_mode(0)  # let libnbd send what it would refuse itself
data = bytes(range(256)) * 32
h.pwrite(data, 8192, nbd.CMD_FLAG_FUA)
assert h.pread(8192, 8192) == data
print('ok: write fua, read back')
h.zero(4096, 8192)
assert h.pread(8192, 8192) == bytes(4096) + data[4096:]
h.trim(4096, 0)
h.cache(4096, 0)
h.flush()
print('ok: zero, trim, cache, flush')
extents = []
h.block_status(65536, 0, lambda ctx, off, ents, err: extents.append((ctx, off, list(ents))))
# Blocks 1 and 2 zeroed (no data, so holes), block 3 written: the storage's own map.
assert extents == [('base:allocation', 0, [12288, 3, 4096, 0, 49152, 3])], extents
print('ok: block status')
# Below the block: sectors read and written in place, the bytes around them kept.
before = h.pread(3 * 4096, 16384)
h.pwrite(b'\xab' * 512, 16384 + 512)
h.pwrite(b'\xcd' * 1000, 16384 + 4096 - 300)  # across a block boundary
after = h.pread(3 * 4096, 16384)
want = bytearray(before)
want[512:1024] = b'\xab' * 512
want[4096 - 300:4096 + 700] = b'\xcd' * 1000
assert after == bytes(want), 'unaligned writes changed other bytes'
assert h.pread(100, 16384 + 500) == bytes(want[500:600])
h.zero(700, 16384 + 8000)
want[8000:8700] = bytes(700)
assert h.pread(3 * 4096, 16384) == bytes(want)
print('ok: unaligned read, write and zero')
expect_errno(lambda: h.pread(4096, SIZE), errno.EINVAL, 'read past the end')
expect_errno(lambda: h.pread(8192, SIZE - 4096), errno.EINVAL, 'read across the end')
expect_errno(lambda: h.pwrite(b'x' * 4096, SIZE), errno.ENOSPC, 'write past the end')
expect_errno(lambda: h.pread(4096, BAD), errno.EIO, 'storage error')
assert h.pread(4096, 0) == bytes(4096)
print('ok: still serving after the errors')
h.shutdown()

# A read-only export: writes, zeroes and trims are EPERM, reads work.
r = nbd.NBD()
r.connect_uri(uri('ro'))
assert r.is_read_only()
r.set_strict_mode(0)
expect_errno(lambda: r.pwrite(b'y' * 4096, 0), errno.EPERM, 'write to read-only')
expect_errno(lambda: r.zero(4096, 0), errno.EPERM, 'zero on read-only')
expect_errno(lambda: r.trim(4096, 0), errno.EPERM, 'trim on read-only')
r.pread(4096, 0)
r.shutdown()

# ABORT ends the handshake cleanly.
a = nbd.NBD()
a.set_opt_mode(True)
a.connect_uri(uri('disk'))
a.opt_abort()
print('ok: abort')
print('all ok')
)PY";

TEST(nbd_server, nbdsh_options_and_errors) {
  if (!have("nbdsh")) GTEST_SKIP() << "nbdsh (python3-libnbd) is not installed";
  // Two exports on two servers: 'disk' and a read-only 'ro', same socket folder.
  served s({.export_name = "disk"});
  served ro({.export_name = "ro", .read_only = true});
  const uint64_t bad = 1u << 20;
  s.backend().fail_at(bad);
  std::string script = nbdsh_script;
  const std::string prelude =
      "SOCK = '" + s.socket_path() + "'\nSIZE = " + std::to_string(disk_size) +
      "\nBAD = " + std::to_string(bad) + "\nRO_SOCK = '" + ro.socket_path() + "'\n";
  // The read-only export lives on its own socket.
  const std::string ro_uri = "uri('ro')";
  script.replace(script.find(ro_uri), ro_uri.size(), "'nbd+unix:///ro?socket=' + RO_SOCK");
  const auto path = s.file("script.py");
  {
    std::ofstream out(path);
    out << prelude << script;
  }
  auto r = run({"nbdsh", "-n", "-c", "exec(open('" + path.string() + "').read())"});
  EXPECT_EQ(r.code, std::optional<int>(0)) << r.output;
  EXPECT_NE(r.output.find("all ok"), std::string::npos) << r.output;
  s.stop();
  EXPECT_GE(s.backend().flushes, 2u);  // the FUA write and the flush
  EXPECT_GE(s.srv().counters().io_errors, 1u);
}

// ---- nbdcopy and qemu-io

TEST(nbd_server, nbdcopy_in_and_out_with_four_connections) {
  if (!have("nbdcopy")) GTEST_SKIP() << "nbdcopy (libnbd-bin) is not installed";
  served s;
  const auto image = pattern(disk_size, 7);
  write_file(s.file("in.img"), image);
  auto r = run(
      {"nbdcopy", "--connections", "4", "--requests", "16", s.file("in.img").string(), s.uri()});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output;
  EXPECT_TRUE(s.backend().bytes() == image);
  r = run({"nbdcopy", "--connections", "4", s.uri(), s.file("out.img").string()});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output;
  EXPECT_TRUE(read_file(s.file("out.img")) == image);
}

TEST(nbd_server, nbdcopy_through_few_ios_waits_for_memory) {
  if (!have("nbdcopy")) GTEST_SKIP() << "nbdcopy (libnbd-bin) is not installed";
  served s({}, /*ios=*/2);  // fewer ios than requests in flight: requests queue for memory
  const auto image = pattern(disk_size, 8);
  write_file(s.file("in.img"), image);
  auto r = run({"nbdcopy", "--connections", "4", s.file("in.img").string(), s.uri()});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output;
  r = run({"nbdcopy", "--connections", "4", s.uri(), s.file("out.img").string()});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output;
  EXPECT_TRUE(read_file(s.file("out.img")) == image);
  s.stop();
  EXPECT_EQ(s.backend().free_ios(), 2u);
}

TEST(nbd_server, qemu_io_writes_with_fua_zeroes_and_discards) {
  if (!have("qemu-io")) GTEST_SKIP() << "qemu-io (qemu-utils) is not installed";
  served s;
  auto r = run({"qemu-io", "-f",
                "raw",     s.uri(),
                "-c",      "write -P 0xab -f 0 64k",
                "-c",      "read -P 0xab 0 64k",
                "-c",      "write -P 0xcd 64k 1M",
                "-c",      "write -z 128k 64k",
                "-c",      "read -P 0 128k 64k",
                "-c",      "read -P 0xcd 192k 64k",
                "-c",      "discard 512k 64k",
                "-c",      "flush",
                "-c",      "read -P 0xab 4k 4k"});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output;
  EXPECT_EQ(r.output.find("failed"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("error"), std::string::npos) << r.output;
  s.stop();
  const auto& b = s.backend().bytes();
  EXPECT_EQ(b[0], 0xab);
  EXPECT_EQ(b[65535], 0xab);
  EXPECT_EQ(b[128 * 1024], 0);
  EXPECT_EQ(b[192 * 1024], 0xcd);
  EXPECT_EQ(b[64 * 1024 + (1 << 20) - 1], 0xcd);
  EXPECT_GE(s.backend().flushes, 2u);
}

// ---- raw clients

TEST(nbd_server, unknown_option_is_unsupported_and_go_still_works) {
  served s;
  raw_client c(s.socket_path());
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.start());
  ASSERT_TRUE(c.option(4242, {1, 2, 3}));
  auto r = c.reply();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->option, 4242u);
  EXPECT_EQ(r->type, reply_type::err_unsup);
  // STARTTLS and EXTENDED_HEADERS are options we do not offer either.
  ASSERT_TRUE(c.option(static_cast<uint32_t>(option::extended_headers), {}));
  r = c.reply();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->type, reply_type::err_unsup);
  // An option longer than the cap: read past and refused.
  std::vector<uint8_t> big(max_option_length + 1, 0x55);
  ASSERT_TRUE(c.option(static_cast<uint32_t>(option::go), big));
  r = c.reply();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->type, reply_type::err_too_big);
  // A GO whose lengths do not add up.
  ASSERT_TRUE(c.option(static_cast<uint32_t>(option::go), {0, 0, 0, 9}));
  r = c.reply();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->type, reply_type::err_invalid);
  ASSERT_TRUE(c.go());
  // Simple replies (no structured replies asked for): an unknown command is EINVAL, a read works.
  ASSERT_TRUE(c.request(static_cast<command>(77), 1, 0, 4096));
  auto rep = c.simple_reply();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->first, static_cast<uint32_t>(error_code::einval));
  EXPECT_EQ(rep->second, 1u);
  ASSERT_TRUE(c.request(command::read, 2, 0, 4096, command_flag::no_hole));  // bad flag
  rep = c.simple_reply();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->first, static_cast<uint32_t>(error_code::einval));
  s.backend().bytes()[4096] = 0x5a;
  ASSERT_TRUE(c.request(command::read, 3, 4096, 4096));
  rep = c.simple_reply();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->first, 0u);
  EXPECT_EQ(rep->second, 3u);
  auto data = c.recv(4096);
  ASSERT_EQ(data.size(), 4096u);
  EXPECT_EQ(data[0], 0x5a);
  // A refused WRITE still has its payload read: the next request is understood.
  ASSERT_TRUE(c.request(command::write, 4, disk_size - 1000, 4096));  // past the end
  ASSERT_TRUE(c.send(std::vector<uint8_t>(4096, 0x77)));
  rep = c.simple_reply();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->first, static_cast<uint32_t>(error_code::enospc));
  ASSERT_TRUE(c.request(command::flush, 5, 0, 0));
  rep = c.simple_reply();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->first, 0u);
  EXPECT_EQ(rep->second, 5u);
  ASSERT_TRUE(c.request(command::disc, 6, 0, 0));
  EXPECT_TRUE(c.closed_by_peer());
}

TEST(nbd_server, export_name_option_with_and_without_zeroes) {
  served s({.export_name = "x"});
  for (bool no_zeroes : {true, false}) {
    raw_client c(s.socket_path());
    ASSERT_TRUE(c.start(client_flag::fixed_newstyle | (no_zeroes ? client_flag::no_zeroes : 0)));
    ASSERT_TRUE(c.option(static_cast<uint32_t>(option::export_name), {'x'}));
    auto r = c.recv(10 + (no_zeroes ? 0 : export_name_zeroes));
    ASSERT_FALSE(r.empty());
    EXPECT_EQ(load_be64(r.data()), disk_size);
    EXPECT_TRUE(load_be16(r.data() + 8) & transmission_flag::has_flags);
  }
  raw_client wrong(s.socket_path());
  ASSERT_TRUE(wrong.start());
  ASSERT_TRUE(wrong.option(static_cast<uint32_t>(option::export_name), {'y'}));
  EXPECT_TRUE(wrong.closed_by_peer());
}

TEST(nbd_server, hostile_input_closes_that_connection_only_and_leaks_nothing) {
  served s({.max_connections = 8});
  const size_t fds_at_start = open_fds();
  {
    // Garbage instead of client flags.
    raw_client c(s.socket_path());
    ASSERT_TRUE(c.start(0xdeadbeef));
    EXPECT_TRUE(c.closed_by_peer());
  }
  {
    // Not fixed newstyle.
    raw_client c(s.socket_path());
    ASSERT_TRUE(c.start(0));
    EXPECT_TRUE(c.closed_by_peer());
  }
  {
    // A bad option magic.
    raw_client c(s.socket_path());
    ASSERT_TRUE(c.start());
    ASSERT_TRUE(c.send(std::vector<uint8_t>(64, 0xff)));
    EXPECT_TRUE(c.closed_by_peer());
  }
  {
    // An option longer than the cap, sent whole: read past, refused, and the handshake goes on.
    raw_client c(s.socket_path());
    ASSERT_TRUE(c.start());
    EXPECT_EQ(c.ask(option::go, std::vector<uint8_t>(100000, 0)), reply_type::err_too_big);
    EXPECT_TRUE(c.go());
  }
  {
    // A WRITE longer than the largest accepted, sent whole: refused EINVAL after its payload is
    // read past, and the connection goes on serving.
    raw_client c(s.socket_path());
    ASSERT_TRUE(c.start());
    ASSERT_TRUE(c.go());
    ASSERT_TRUE(c.request(command::write, 7, 0, max_io + block));
    ASSERT_TRUE(c.send(std::vector<uint8_t>(max_io + block, 0x33)));
    auto rep = c.simple_reply();
    ASSERT_TRUE(rep);
    EXPECT_EQ(rep->first, static_cast<uint32_t>(error_code::einval));
    EXPECT_EQ(rep->second, 7u);
    ASSERT_TRUE(c.request(command::read, 8, 0, block));
    rep = c.simple_reply();
    ASSERT_TRUE(rep);
    EXPECT_EQ(rep->first, 0u);
    EXPECT_EQ(c.recv(block).size(), block);
  }
  {
    // A huge option length, then the client goes away in the middle of it.
    raw_client c(s.socket_path());
    ASSERT_TRUE(c.start());
    uint8_t h[16];
    store_be64(h, ihaveopt);
    store_be32(h + 8, static_cast<uint32_t>(option::go));
    store_be32(h + 12, 0xffffffff);
    ASSERT_TRUE(c.send(h, 16));
    ASSERT_TRUE(c.send(std::vector<uint8_t>(100000, 0)));
  }
  {
    // A bad request magic after GO.
    raw_client c(s.socket_path());
    ASSERT_TRUE(c.start());
    ASSERT_TRUE(c.go());
    ASSERT_TRUE(c.send(std::vector<uint8_t>(28, 0x11)));
    EXPECT_TRUE(c.closed_by_peer());
  }
  {
    // A WRITE of 4 GiB - 1 (refused, its payload read past) abandoned half way, and a write
    // whose payload never comes.
    raw_client c(s.socket_path());
    ASSERT_TRUE(c.start());
    ASSERT_TRUE(c.go());
    ASSERT_TRUE(c.request(command::write, 1, 0, 0xffffffff));
    ASSERT_TRUE(c.send(std::vector<uint8_t>(1 << 20, 0)));
  }
  {
    // Many reads, never read back, then the client vanishes in the middle of a write.
    raw_client c(s.socket_path());
    ASSERT_TRUE(c.start());
    ASSERT_TRUE(c.go());
    for (uint64_t i = 0; i < 200; ++i) ASSERT_TRUE(c.request(command::read, i, 0, max_io));
    ASSERT_TRUE(c.request(command::write, 1000, 0, 65536));
  }
  {
    // A flood: more connections than allowed. The extra ones are closed at once.
    std::vector<std::unique_ptr<raw_client>> flood;
    for (int i = 0; i < 40; ++i) flood.push_back(std::make_unique<raw_client>(s.socket_path()));
    size_t greeted = 0, closed = 0;
    for (auto& c : flood) {
      auto g = c->recv(server_greeting_size);
      if (g.size() == server_greeting_size)
        ++greeted;
      else
        ++closed;
    }
    EXPECT_LE(greeted, 8u);
    EXPECT_GE(closed, 32u);
  }
  // Every descriptor the server opened is closed again (the flood's included: until then they
  // count against the cap), and it still serves.
  EXPECT_TRUE(fds_return_to(fds_at_start))
      << open_fds() << " fds open, " << fds_at_start << " at the start";
  {
    raw_client c(s.socket_path());
    ASSERT_TRUE(c.start());
    ASSERT_TRUE(c.go());
    ASSERT_TRUE(c.request(command::read, 9, 0, 4096));
    auto rep = c.simple_reply();
    ASSERT_TRUE(rep);
    EXPECT_EQ(rep->first, 0u);
  }
  EXPECT_TRUE(fds_return_to(fds_at_start))
      << open_fds() << " fds open, " << fds_at_start << " at the start";
  EXPECT_GE(s.srv().counters().refused, 32u);
  s.stop();
  EXPECT_EQ(s.backend().free_ios(), 32u);
}

TEST(nbd_server, a_client_that_does_not_read_replies_holds_up_no_one_else) {
  served s({.max_in_flight = 8});
  raw_client stuck(s.socket_path());
  ASSERT_TRUE(stuck.start());
  ASSERT_TRUE(stuck.go());
  // Far more read data than the socket buffers hold, never read.
  for (uint64_t i = 0; i < 64; ++i) ASSERT_TRUE(stuck.request(command::read, i, 0, max_io));
  // Another connection is served meanwhile.
  raw_client other(s.socket_path());
  ASSERT_TRUE(other.start());
  ASSERT_TRUE(other.go());
  for (uint64_t i = 0; i < 16; ++i) {
    ASSERT_TRUE(other.request(command::read, i, 4096 * i, 4096));
    auto rep = other.simple_reply();
    ASSERT_TRUE(rep);
    EXPECT_EQ(rep->first, 0u);
    EXPECT_EQ(other.recv(4096).size(), 4096u);
  }
}

// IO memory that comes back as a read reply finishes sending (not as an io completes) still
// lets the request that waited for it go on.
TEST(nbd_server, memory_freed_by_a_sent_reply_wakes_the_request_waiting_for_it) {
  served s({}, 1);  // one io of max_io bytes for everybody
  raw_client big(s.socket_path());
  ASSERT_TRUE(big.start());
  ASSERT_TRUE(big.go());
  // Its reply is larger than the socket buffers: the io stays held until the client reads.
  ASSERT_TRUE(big.request(command::read, 1, 0, max_io));
  raw_client small(s.socket_path());
  ASSERT_TRUE(small.start());
  ASSERT_TRUE(small.go());
  ASSERT_TRUE(small.request(command::read, 2, 0, block));  // waits for the io
  std::this_thread::sleep_for(100ms);
  auto rep = big.simple_reply();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->first, 0u);
  EXPECT_EQ(big.recv(max_io).size(), max_io);
  auto waited = small.simple_reply();  // within the client's 5 s receive timeout
  ASSERT_TRUE(waited);
  EXPECT_EQ(waited->first, 0u);
  EXPECT_EQ(waited->second, 2u);
  EXPECT_EQ(small.recv(block).size(), block);
}

// A burst of requests already read from the socket is served to the end, though no new
// readiness event comes for it.
TEST(nbd_server, a_long_pipelined_burst_is_answered_in_full) {
  served s;
  raw_client c(s.socket_path());
  ASSERT_TRUE(c.start());
  ASSERT_TRUE(c.go());
  constexpr uint64_t burst = 1000;
  std::vector<uint8_t> all;
  for (uint64_t i = 0; i < burst; ++i) {
    uint8_t h[28];
    store_be32(h, request_magic);
    store_be16(h + 4, 0);
    store_be16(h + 6, static_cast<uint16_t>(command::cache));
    store_be64(h + 8, i);
    store_be64(h + 16, 0);
    store_be32(h + 24, block);
    all.insert(all.end(), h, h + sizeof h);
  }
  ASSERT_TRUE(c.send(all));
  for (uint64_t i = 0; i < burst; ++i) {
    auto rep = c.simple_reply();
    ASSERT_TRUE(rep) << "reply " << i << " of " << burst << " missing";
    EXPECT_EQ(rep->first, 0u);
  }
}

// FUA is accepted on every command once SEND_FUA is advertised; DF is offered only with
// structured replies; a write past the end is ENOSPC.
TEST(nbd_server, fua_anywhere_and_enospc_past_the_end) {
  served s;
  raw_client c(s.socket_path());
  ASSERT_TRUE(c.start());
  ASSERT_TRUE(c.go());
  ASSERT_TRUE(c.request(command::flush, 1, 0, 0, command_flag::fua));
  auto flush = c.simple_reply();
  ASSERT_TRUE(flush);
  EXPECT_EQ(flush->first, 0u);
  ASSERT_TRUE(c.request(command::write, 2, disk_size, block));
  ASSERT_TRUE(c.send(std::vector<uint8_t>(block, 7)));
  auto past = c.simple_reply();
  ASSERT_TRUE(past);
  EXPECT_EQ(past->first, static_cast<uint32_t>(error_code::enospc));
}

TEST(nbd_server, a_handshake_that_stalls_is_closed) {
  served s({.max_connections = 1, .handshake_timeout = 200ms});
  raw_client idle(s.socket_path());
  ASSERT_EQ(idle.recv(server_greeting_size).size(), server_greeting_size);
  EXPECT_TRUE(idle.closed_by_peer());  // within the client's 5 s receive timeout
  // Its slot is free again.
  raw_client next(s.socket_path());
  ASSERT_TRUE(next.start());
  EXPECT_TRUE(next.go());
}

// A stop with a reply half sent and a request waiting for memory: the reply goes out whole, the
// waiting request is answered ESHUTDOWN, then both connections close.
TEST(nbd_server, stop_finishes_what_is_in_flight) {
  served s({}, 1);  // one io for everybody: the second client's request waits for the first's
  const auto bytes = pattern(max_io, 5);
  std::copy(bytes.begin(), bytes.end(), s.backend().bytes().begin());
  raw_client big(s.socket_path());
  ASSERT_TRUE(big.start());
  ASSERT_TRUE(big.go());
  ASSERT_TRUE(big.request(command::read, 1, 0, max_io));  // larger than the socket buffers
  raw_client small(s.socket_path());
  ASSERT_TRUE(small.start());
  ASSERT_TRUE(small.go());
  ASSERT_TRUE(small.request(command::read, 2, 0, block));
  std::this_thread::sleep_for(100ms);  // the first reply is stuck in the socket, the second waits
  std::thread stopping([&] { s.stop(); });
  std::this_thread::sleep_for(100ms);
  auto rep = big.simple_reply();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->first, 0u);
  EXPECT_EQ(rep->second, 1u);
  EXPECT_TRUE(big.recv(max_io) == bytes);
  rep = small.simple_reply();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->first, static_cast<uint32_t>(error_code::eshutdown));
  EXPECT_EQ(rep->second, 2u);
  EXPECT_TRUE(big.closed_by_peer());
  EXPECT_TRUE(small.closed_by_peer());
  stopping.join();
  EXPECT_EQ(s.backend().free_ios(), 1u);
}

// ---- TLS: STARTTLS with pre-shared keys, as nbdkit's --tls and --tls-psk

// A key file with one "identity:hexkey" line, in its own folder, removed at the end.
class key_file {
 public:
  key_file(const std::string& identity, const std::string& hex)
      : dir_(fs::temp_directory_path() / zc::test::unique_name("psk")) {
    fs::create_directories(dir_);
    std::ofstream(path()) << identity << ":" << hex << "\n";
    keys_ = std::make_shared<const storage::psk_file>(storage::load_psk_file(path().string()));
  }
  ~key_file() { fs::remove_all(dir_); }
  fs::path path() const { return dir_ / "keys.psk"; }
  std::shared_ptr<const storage::psk_file> keys() const { return keys_; }

 private:
  fs::path dir_;
  std::shared_ptr<const storage::psk_file> keys_;
};

const std::string alice_key = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const std::string other_key = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

server_options tls_options(tls_mode mode, const key_file& keys) {
  server_options o;
  o.tls = mode;
  o.tls_keys = keys.keys();
  return o;
}

// An option as a client sends it: header and data.
std::vector<uint8_t> option_bytes(option o, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> h(16);
  store_be64(h.data(), ihaveopt);
  store_be32(h.data() + 8, static_cast<uint32_t>(o));
  store_be32(h.data() + 12, static_cast<uint32_t>(data.size()));
  h.insert(h.end(), data.begin(), data.end());
  return h;
}

// libnbd's TLS URI: the identity is the user, the key file a query parameter.
std::string tls_uri(const served& s, const key_file& keys) {
  return "nbds+unix://alice@/?socket=" + s.socket_path() + "&tls-psk-file=" + keys.path().string();
}

TEST(nbd_server_tls, required_tls_carries_every_byte_with_the_key) {
  for (const char* c : {"nbdinfo", "nbdcopy"})
    if (!have(c)) GTEST_SKIP() << c << " (libnbd-bin) is not installed";
  key_file keys("alice", alice_key);
  served s(tls_options(tls_mode::require, keys));
  auto info = run({"nbdinfo", "--json", tls_uri(s, keys)});
  ASSERT_EQ(info.code, std::optional<int>(0)) << info.output;
  EXPECT_EQ(nlohmann::json::parse(info.output)["exports"][0]["export-size"].get<uint64_t>(),
            disk_size);
  // More than one TLS record per request (16 KiB each) and many requests in flight.
  const auto bytes = pattern(4u << 20, 71);
  write_file(s.file("in.img"), bytes);
  auto in = run({"nbdcopy", "--connections", "2", s.file("in.img").string(), tls_uri(s, keys)});
  ASSERT_EQ(in.code, std::optional<int>(0)) << in.output;
  auto out = run({"nbdcopy", tls_uri(s, keys), s.file("out.img").string()});
  ASSERT_EQ(out.code, std::optional<int>(0)) << out.output;
  const auto back = read_file(s.file("out.img"));
  ASSERT_EQ(back.size(), disk_size);
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), back.begin()));
  s.stop();
  EXPECT_GE(s.srv().counters().tls_sessions, 4u);
  EXPECT_EQ(s.srv().counters().tls_failures, 0u);
}

TEST(nbd_server_tls, required_tls_refuses_a_plain_client_before_any_option) {
  key_file keys("alice", alice_key);
  served s(tls_options(tls_mode::require, keys));
  if (have("nbdinfo")) {
    auto r = run({"nbdinfo", "--size", s.uri()});
    EXPECT_NE(r.code, std::optional<int>(0)) << r.output;
  }
  raw_client c(s.socket_path());
  ASSERT_TRUE(c.start());
  for (auto opt : {option::go, option::list, option::structured_reply, option::info}) {
    const std::vector<uint8_t> data = opt == option::go || opt == option::info
                                          ? std::vector<uint8_t>{0, 0, 0, 0, 0, 0}
                                          : std::vector<uint8_t>{};
    EXPECT_EQ(c.ask(opt, data), reply_type::err_tls_reqd) << static_cast<uint32_t>(opt);
  }
  // EXPORT_NAME cannot be answered with an error: the connection closes.
  ASSERT_TRUE(c.option(static_cast<uint32_t>(option::export_name), {}));
  EXPECT_TRUE(c.closed_by_peer());
}

TEST(nbd_server_tls, a_wrong_key_ends_the_handshake_and_nothing_else) {
  if (!have("nbdinfo")) GTEST_SKIP() << "nbdinfo (libnbd-bin) is not installed";
  key_file keys("alice", alice_key);
  key_file wrong("alice", other_key);
  served s(tls_options(tls_mode::require, keys));
  auto bad = run({"nbdinfo", "--size", tls_uri(s, wrong)});
  EXPECT_NE(bad.code, std::optional<int>(0)) << bad.output;
  auto good = run({"nbdinfo", "--size", tls_uri(s, keys)});
  ASSERT_EQ(good.code, std::optional<int>(0)) << good.output;
  EXPECT_EQ(good.output, std::to_string(disk_size) + "\n");
  s.stop();
  EXPECT_EQ(s.srv().counters().tls_failures, 1u);
  EXPECT_EQ(s.srv().counters().tls_sessions, 1u);
}

TEST(nbd_server_tls, tls_on_serves_plain_and_tls_clients) {
  if (!have("nbdinfo")) GTEST_SKIP() << "nbdinfo (libnbd-bin) is not installed";
  key_file keys("alice", alice_key);
  served s(tls_options(tls_mode::on, keys));
  for (const std::string& uri : {s.uri(), tls_uri(s, keys)}) {
    auto r = run({"nbdinfo", "--size", uri});
    ASSERT_EQ(r.code, std::optional<int>(0)) << uri << "\n" << r.output;
    EXPECT_EQ(r.output, std::to_string(disk_size) + "\n");
  }
  s.stop();
  EXPECT_EQ(s.srv().counters().tls_sessions, 1u);
}

TEST(nbd_server_tls, starttls_without_tls_is_refused_by_policy_and_the_session_goes_on) {
  served off;  // NOTLS
  raw_client c(off.socket_path());
  ASSERT_TRUE(c.start());
  EXPECT_EQ(c.ask(option::starttls), reply_type::err_policy);
  EXPECT_TRUE(c.go());
}

TEST(nbd_server_tls, starttls_with_data_is_invalid) {
  key_file keys("alice", alice_key);
  served s(tls_options(tls_mode::on, keys));
  raw_client c(s.socket_path());
  ASSERT_TRUE(c.start());
  EXPECT_EQ(c.ask(option::starttls, {1, 2, 3}), reply_type::err_invalid);
  EXPECT_TRUE(c.go());  // plain, as --tls on allows
}

TEST(nbd_server_tls, a_client_silent_after_the_ack_is_closed_at_the_handshake_deadline) {
  key_file keys("alice", alice_key);
  auto options = tls_options(tls_mode::on, keys);
  options.handshake_timeout = 300ms;
  served s(options);
  raw_client c(s.socket_path());
  ASSERT_TRUE(c.start());
  EXPECT_EQ(c.ask(option::starttls), reply_type::ack);
  EXPECT_TRUE(c.closed_by_peer());
  s.stop();
  EXPECT_EQ(s.srv().counters().tls_failures, 1u);
}

TEST(nbd_server_tls, plain_bytes_instead_of_a_client_hello_close_the_connection) {
  key_file keys("alice", alice_key);
  served s(tls_options(tls_mode::on, keys));
  raw_client c(s.socket_path());
  ASSERT_TRUE(c.start());
  EXPECT_EQ(c.ask(option::starttls), reply_type::ack);
  ASSERT_TRUE(c.option(static_cast<uint32_t>(option::go), {0, 0, 0, 0, 0, 0}));
  EXPECT_TRUE(c.closed_by_peer());
  s.stop();
  EXPECT_EQ(s.srv().counters().tls_failures, 1u);
  EXPECT_EQ(s.srv().counters().tls_sessions, 0u);
}

// Plain bytes sent right behind STARTTLS, before its answer: they must never be taken as if they
// had come through TLS (the STARTTLS injection); the connection closes after the ACK.
TEST(nbd_server_tls, plain_bytes_pipelined_behind_starttls_close_the_connection) {
  key_file keys("alice", alice_key);
  served s(tls_options(tls_mode::on, keys));
  raw_client c(s.socket_path());
  ASSERT_TRUE(c.start());
  auto both = option_bytes(option::starttls, {});
  const auto go = option_bytes(option::go, {0, 0, 0, 0, 0, 0});
  both.insert(both.end(), go.begin(), go.end());
  ASSERT_TRUE(c.send(both));
  auto r = c.reply();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->type, reply_type::ack);
  EXPECT_TRUE(c.closed_by_peer());
}

TEST(nbd_server_tls, an_oversized_option_before_required_tls_gets_tls_reqd) {
  key_file keys("alice", alice_key);
  served s(tls_options(tls_mode::require, keys));
  raw_client c(s.socket_path());
  ASSERT_TRUE(c.start());
  EXPECT_EQ(c.ask(option::list, std::vector<uint8_t>(max_option_length + 1, 0)),
            reply_type::err_tls_reqd);
}

// ---- TLS from inside the test: a client on storage::tls_session, for what libnbd never sends

// NBD in plain text, then through TLS once upgrade() has run. Non-blocking; every wait bounded.
class tls_client {
 public:
  explicit tls_client(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    (void)::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  }
  ~tls_client() {
    tls_.reset();
    ::close(fd_);
  }
  int fd() const { return fd_; }

  // Greeting, client flags, STARTTLS and its ACK in plain text, then the handshake.
  bool start_tls(std::shared_ptr<const storage::psk_file> keys,
                 const char* priority = storage::tls_psk_priority) {
    auto greeting = plain_recv(server_greeting_size);
    if (greeting.size() != server_greeting_size) return false;
    std::vector<uint8_t> flags(4);
    store_be32(flags.data(), client_flag::fixed_newstyle | client_flag::no_zeroes);
    return plain_send(flags) && negotiate_tls(std::move(keys), priority);
  }
  // After the client flags: STARTTLS, its ACK, the handshake.
  bool negotiate_tls(std::shared_ptr<const storage::psk_file> keys,
                     const char* priority = storage::tls_psk_priority) {
    if (!plain_send(option_bytes(option::starttls, {}))) return false;
    if (reply_type_of([&](size_t n) { return plain_recv(n); }) != reply_type::ack) return false;
    tls_ = std::make_unique<storage::tls_session>(storage::tls_session::role::client,
                                                  std::move(keys), fd_, priority);
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    for (;;) {
      const auto step = tls_->handshake();
      if (step == storage::tls_session::step::done) return true;
      if (step == storage::tls_session::step::failed) return false;
      if (std::chrono::steady_clock::now() > deadline) return false;
      wait(tls_->wants_write() ? POLLOUT : POLLIN);
    }
  }
  bool plain_send(const std::vector<uint8_t>& bytes) {
    size_t done = 0;
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (done < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n > 0) {
        done += static_cast<size_t>(n);
      } else if (n < 0 && errno == EAGAIN && std::chrono::steady_clock::now() < deadline) {
        wait(POLLOUT);
      } else {
        return false;
      }
    }
    return true;
  }
  std::vector<uint8_t> plain_recv(size_t size) {
    std::vector<uint8_t> out(size);
    size_t got = 0;
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (got < size) {
      const ssize_t n = ::recv(fd_, out.data() + got, size - got, 0);
      if (n > 0) {
        got += static_cast<size_t>(n);
      } else if (n < 0 && errno == EAGAIN && std::chrono::steady_clock::now() < deadline) {
        wait(POLLIN);
      } else {
        return {};
      }
    }
    return out;
  }
  // One call of tls_session::send per 16 KiB at most: each call is one TLS record.
  bool send(const std::vector<uint8_t>& bytes) {
    using state = storage::tls_session::io_result::state;
    size_t done = 0;
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (done < bytes.size()) {
      const auto r = tls_->send(bytes.data() + done, bytes.size() - done);
      if (r.what == state::ok) {
        done += r.bytes;
      } else if (r.what == state::again && std::chrono::steady_clock::now() < deadline) {
        wait(POLLOUT);
      } else {
        return false;
      }
    }
    return true;
  }
  std::vector<uint8_t> recv(size_t size) {
    using state = storage::tls_session::io_result::state;
    std::vector<uint8_t> out(size);
    size_t got = 0;
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (got < size) {
      const auto r = tls_->recv(out.data() + got, size - got);
      if (r.what == state::ok) {
        got += r.bytes;
      } else if (r.what == state::again && std::chrono::steady_clock::now() < deadline) {
        wait(POLLIN);
      } else {
        return {};
      }
    }
    return out;
  }
  // An option reply's type (its data read past); 0 when none came.
  template <typename Receive>
  static uint32_t reply_type_of(Receive&& receive) {
    auto h = receive(option_reply_header_size);
    if (h.size() != option_reply_header_size || load_be64(h.data()) != option_reply_magic) return 0;
    const uint32_t length = load_be32(h.data() + 16);
    if (length != 0 && receive(length).size() != length) return 0;
    return load_be32(h.data() + 12);
  }
  uint32_t reply_type() {
    return reply_type_of([&](size_t n) { return recv(n); });
  }
  bool go() {
    if (!send(option_bytes(option::go, {0, 0, 0, 0, 0, 0}))) return false;
    for (;;) {
      const uint32_t type = reply_type();
      if (type == reply_type::ack) return true;
      if (type != reply_type::info) return false;
    }
  }

 private:
  void wait(short events) {
    pollfd p{fd_, events, 0};
    (void)::poll(&p, 1, 100);
  }
  int fd_ = -1;
  std::unique_ptr<storage::tls_session> tls_;
};

std::vector<uint8_t> request_bytes(command c, uint64_t cookie, uint64_t offset, uint32_t length) {
  std::vector<uint8_t> h(request_header_size);
  store_be32(h.data(), request_magic);
  store_be16(h.data() + 4, 0);
  store_be16(h.data() + 6, static_cast<uint16_t>(c));
  store_be64(h.data() + 8, cookie);
  store_be64(h.data() + 16, offset);
  store_be32(h.data() + 24, length);
  return h;
}

// A record that ends one WRITE's payload and carries the next request: the server fills 4 KiB
// segments one by one, and what GnuTLS still holds after each must be read on without a
// readiness event (none comes: the socket is empty).
TEST(nbd_server_tls, bytes_tls_holds_after_a_segment_is_full_are_served) {
  key_file keys("alice", alice_key);
  served s(tls_options(tls_mode::require, keys), 8, false, 4096);
  tls_client c(s.socket_path());
  ASSERT_TRUE(c.start_tls(keys.keys()));
  ASSERT_TRUE(c.go());
  ASSERT_TRUE(c.send(request_bytes(command::write, 1, 0, 3 * block)));  // a record of its own
  std::this_thread::sleep_for(100ms);  // the server has read it and waits for the payload
  auto record = pattern(3 * block, 5);
  const auto payload = record;
  const auto flush = request_bytes(command::flush, 2, 0, 0);
  record.insert(record.end(), flush.begin(), flush.end());
  ASSERT_TRUE(c.send(record));  // one record: three segments' worth and a FLUSH
  std::vector<uint64_t> cookies;
  for (int i = 0; i < 2; ++i) {
    auto r = c.recv(simple_reply_size);
    ASSERT_EQ(r.size(), simple_reply_size) << "stalled with decrypted bytes left in GnuTLS";
    EXPECT_EQ(load_be32(r.data() + 4), 0u);
    cookies.push_back(load_be64(r.data() + 8));
  }
  EXPECT_EQ(cookies, (std::vector<uint64_t>{1, 2}));
  s.stop();
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), s.backend().bytes().begin()));
}

// What was negotiated in plain text is forgotten by STARTTLS: a man in the middle could have
// added it (nbdkit's CVE-2021-3716). Structured replies asked for before TLS are not used after.
TEST(nbd_server_tls, options_negotiated_before_starttls_do_not_hold_inside_tls) {
  key_file keys("alice", alice_key);
  served s(tls_options(tls_mode::on, keys));
  tls_client c(s.socket_path());
  ASSERT_EQ(c.plain_recv(server_greeting_size).size(), server_greeting_size);
  std::vector<uint8_t> flags(4);
  store_be32(flags.data(), client_flag::fixed_newstyle | client_flag::no_zeroes);
  ASSERT_TRUE(c.plain_send(flags));
  ASSERT_TRUE(c.plain_send(option_bytes(option::structured_reply, {})));
  ASSERT_EQ(tls_client::reply_type_of([&](size_t n) { return c.plain_recv(n); }), reply_type::ack);
  ASSERT_TRUE(c.negotiate_tls(keys.keys()));
  ASSERT_TRUE(c.go());
  ASSERT_TRUE(c.send(request_bytes(command::read, 7, 0, block)));
  auto r = c.recv(simple_reply_size);
  ASSERT_EQ(r.size(), simple_reply_size);
  EXPECT_EQ(load_be32(r.data()), simple_reply_magic) << "a structured reply inside TLS";
}

TEST(nbd_server_tls, starttls_inside_tls_is_invalid_and_the_session_goes_on) {
  key_file keys("alice", alice_key);
  served s(tls_options(tls_mode::require, keys));
  tls_client c(s.socket_path());
  ASSERT_TRUE(c.start_tls(keys.keys()));
  ASSERT_TRUE(c.send(option_bytes(option::starttls, {})));
  EXPECT_EQ(c.reply_type(), reply_type::err_invalid);
  ASSERT_TRUE(c.send(option_bytes(option::list, {})));
  EXPECT_EQ(c.reply_type(), reply_type::server);
  EXPECT_EQ(c.reply_type(), reply_type::ack);
  EXPECT_TRUE(c.go());
}

// proto.md: implementations MUST support TLS 1.2.
TEST(nbd_server_tls, a_tls_1_2_client_is_served) {
  key_file keys("alice", alice_key);
  served s(tls_options(tls_mode::require, keys));
  tls_client c(s.socket_path());
  ASSERT_TRUE(
      c.start_tls(keys.keys(), "NORMAL:-VERS-ALL:+VERS-TLS1.2:-KX-ALL:+ECDHE-PSK:+DHE-PSK:+PSK"));
  EXPECT_TRUE(c.go());
}

// Replies larger than the socket takes, to a reader with a small buffer: GnuTLS answers EAGAIN
// in the middle and the same bytes are offered again; every byte arrives as it was stored.
TEST(nbd_server_tls, large_replies_to_a_slow_reader_arrive_intact) {
  key_file keys("alice", alice_key);
  served s(tls_options(tls_mode::require, keys));
  const auto bytes = pattern(8 * max_io, 99);
  std::copy(bytes.begin(), bytes.end(), s.backend().bytes().begin());
  tls_client c(s.socket_path());
  const int small = 4096;
  ::setsockopt(c.fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  ASSERT_TRUE(c.start_tls(keys.keys()));
  ASSERT_TRUE(c.go());
  for (uint64_t i = 0; i < 8; ++i)
    ASSERT_TRUE(c.send(request_bytes(command::read, i, i * max_io, max_io)));
  std::this_thread::sleep_for(200ms);
  for (int i = 0; i < 8; ++i) {
    auto h = c.recv(simple_reply_size);
    ASSERT_EQ(h.size(), simple_reply_size);
    ASSERT_EQ(load_be32(h.data() + 4), 0u);
    const uint64_t cookie = load_be64(h.data() + 8);
    ASSERT_LT(cookie, 8u);
    auto data = c.recv(max_io);
    ASSERT_EQ(data.size(), max_io);
    EXPECT_TRUE(std::equal(data.begin(), data.end(), bytes.begin() + cookie * max_io)) << cookie;
  }
}

// ---- conformance details

// LIST/SET_META_CONTEXT data: the export name, then the queries.
std::vector<uint8_t> meta_context_data(const std::string& name,
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

// proto.md: a SET_META_CONTEXT replaces the selection, even one that fails; LIST's context ids
// are reserved (0).
TEST(nbd_server, a_failed_set_meta_context_leaves_no_context_and_list_ids_are_zero) {
  served s;
  raw_client c(s.socket_path());
  ASSERT_TRUE(c.start());
  EXPECT_EQ(c.ask(option::structured_reply), reply_type::ack);
  ASSERT_TRUE(c.option(static_cast<uint32_t>(option::list_meta_context),
                       meta_context_data("", {"base:allocation"})));
  auto listed = c.reply();
  ASSERT_TRUE(listed);
  ASSERT_EQ(listed->type, reply_type::meta_context);
  ASSERT_GE(listed->data.size(), 4u);
  EXPECT_EQ(load_be32(listed->data.data()), 0u);
  EXPECT_EQ(c.reply()->type, reply_type::ack);
  ASSERT_TRUE(c.option(static_cast<uint32_t>(option::set_meta_context),
                       meta_context_data("", {"base:allocation"})));
  auto chosen = c.reply();
  ASSERT_TRUE(chosen);
  ASSERT_EQ(chosen->type, reply_type::meta_context);
  EXPECT_NE(load_be32(chosen->data.data()), 0u);
  EXPECT_EQ(c.reply()->type, reply_type::ack);
  // Then a SET that fails (no such export): the selection is gone with it.
  EXPECT_EQ(c.ask(option::set_meta_context, meta_context_data("nope", {"base:allocation"})),
            reply_type::err_unknown);
  ASSERT_TRUE(c.go());
  ASSERT_TRUE(c.request(command::block_status, 3, 0, block));
  // An error chunk (structured replies are on): 4 magic, 2 flags, 2 type, 8 cookie, 4 length,
  // then the error.
  auto chunk = c.recv(structured_reply_header_size + 4);
  ASSERT_EQ(chunk.size(), structured_reply_header_size + 4);
  EXPECT_EQ(load_be64(chunk.data() + 8), 3u);
  EXPECT_EQ(load_be32(chunk.data() + structured_reply_header_size),
            static_cast<uint32_t>(error_code::einval));
}

TEST(nbd_server, storage_with_a_block_nbd_cannot_announce_is_refused) {
  test::memory_backend odd(disk_size, 3000, 30000, 4);
  EXPECT_THROW(server(odd, {}), status_error);
  test::memory_backend huge(disk_size, 128 * 1024, 1 << 20, 4);
  EXPECT_THROW(server(huge, {}), status_error);
  test::memory_backend fine(disk_size, 512, 1 << 20, 4);
  EXPECT_NO_THROW(server(fine, {}));
}

// ---- below the block: read-modify-write

TEST(nbd_server_rmw, an_unaligned_read_returns_exactly_its_bytes) {
  served s;
  const auto bytes = pattern(4 * block, 17);
  std::copy(bytes.begin(), bytes.end(), s.backend().bytes().begin());
  raw_client c(s.socket_path());
  ASSERT_TRUE(c.start());
  ASSERT_TRUE(c.go());
  ASSERT_TRUE(c.request(command::read, 1, 100, 5000));  // across a block boundary
  auto rep = c.simple_reply();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->first, 0u);
  auto data = c.recv(5000);
  ASSERT_EQ(data.size(), 5000u);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), bytes.begin() + 100));
  // And the request right behind it is read as a request, not as part of anything.
  ASSERT_TRUE(c.request(command::read, 2, 3 * block + 7, 9));
  rep = c.simple_reply();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->second, 2u);
  data = c.recv(9);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), bytes.begin() + 3 * block + 7));
}

// Two connections write different sectors of the same blocks, pipelined: each write reads its
// blocks, puts its bytes in and writes them back, so without the edge-block lock one would undo
// the other.
TEST(nbd_server_rmw, unaligned_writes_to_one_block_from_two_connections_all_land) {
  served s;
  raw_client a(s.socket_path());
  raw_client b(s.socket_path());
  ASSERT_TRUE(open_all({&a, &b}));
  constexpr int rounds = 40;
  for (int i = 0; i < rounds; ++i) {
    const uint64_t at = uint64_t(i % 4) * block;
    ASSERT_TRUE(a.request(command::write, i, at + 512, 512));
    ASSERT_TRUE(a.send(std::vector<uint8_t>(512, static_cast<uint8_t>(i))));
    ASSERT_TRUE(b.request(command::write, i, at + 2048, 1024));
    ASSERT_TRUE(b.send(std::vector<uint8_t>(1024, static_cast<uint8_t>(0x80 + i))));
  }
  for (raw_client* c : {&a, &b}) ASSERT_NO_FATAL_FAILURE(expect_successes(*c, rounds));
  s.stop();
  const auto& disk = s.backend().bytes();
  for (int blk = 0; blk < 4; ++blk) {
    const int last = rounds - 4 + blk;  // the last round that wrote this block
    const uint64_t at = uint64_t(blk) * block;
    for (uint64_t i = 0; i < block; ++i) {
      uint8_t want = 0;
      if (i >= 512 && i < 1024) want = static_cast<uint8_t>(last);
      if (i >= 2048 && i < 3072) want = static_cast<uint8_t>(0x80 + last);
      ASSERT_EQ(disk[at + i], want) << "block " << blk << " byte " << i;
    }
  }
}

// An aligned write of a whole block and an unaligned write into it, from two connections at once:
// whichever lands last, every byte the aligned write alone covers is its own. A read-modify-write
// that read the block before the aligned write landed and wrote it back after would bring the
// block's old bytes back over an acknowledged write.
TEST(nbd_server_rmw, an_aligned_write_beside_an_unaligned_one_is_never_undone) {
  served s;
  raw_client a(s.socket_path());
  raw_client b(s.socket_path());
  ASSERT_TRUE(open_all({&a, &b}));
  constexpr int rounds = 64;
  for (int i = 0; i < rounds; ++i) {
    const uint64_t at = uint64_t(i) * block;
    ASSERT_TRUE(b.request(command::write, i, at + 100, 200));
    ASSERT_TRUE(b.send(std::vector<uint8_t>(200, 0xB0)));
    ASSERT_TRUE(a.request(command::write, i, at, block));
    ASSERT_TRUE(a.send(std::vector<uint8_t>(block, 0xA0)));
  }
  for (raw_client* c : {&a, &b}) ASSERT_NO_FATAL_FAILURE(expect_successes(*c, rounds));
  s.stop();
  const auto& disk = s.backend().bytes();
  for (int i = 0; i < rounds; ++i) {
    const uint64_t at = uint64_t(i) * block;
    for (uint64_t j = 0; j < block; ++j) {
      if (j >= 100 && j < 300) {
        ASSERT_TRUE(disk[at + j] == 0xA0 || disk[at + j] == 0xB0) << "block " << i << " byte " << j;
      } else {
        ASSERT_EQ(disk[at + j], 0xA0)
            << "block " << i << " byte " << j << ": the aligned write was undone";
      }
    }
  }
}

// Writes that wait for a held block keep their memory meanwhile; the read-modify-write holding
// the block took its own memory first, so it finishes and lets them go even when they hold the
// rest of it (two ios in all here).
TEST(nbd_server_rmw, writes_waiting_for_a_held_block_with_all_the_memory_still_finish) {
  served s({}, 2);
  raw_client b(s.socket_path());
  raw_client a(s.socket_path());
  ASSERT_TRUE(open_all({&b, &a}));
  ASSERT_TRUE(b.request(command::write, 1, 100, 200));  // holds block 0 and one io; payload later
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(a.request(command::write, 2, 0, block));  // the other io, then waits for block 0
  ASSERT_TRUE(a.send(std::vector<uint8_t>(block, 0xA1)));
  ASSERT_TRUE(a.request(command::write, 3, 0, block));  // waits for memory
  ASSERT_TRUE(a.send(std::vector<uint8_t>(block, 0xA2)));
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(b.send(std::vector<uint8_t>(200, 0xB0)));
  auto rep = b.simple_reply();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->first, 0u);
  for (int i = 0; i < 2; ++i) {
    rep = a.simple_reply();
    ASSERT_TRUE(rep);
    EXPECT_EQ(rep->first, 0u);
  }
  s.stop();
  // Both of a's writes came after b's: block 0 is one of them, whole.
  const auto& disk = s.backend().bytes();
  const uint8_t first = disk[0];
  ASSERT_TRUE(first == 0xA1 || first == 0xA2) << int(first);
  for (uint64_t j = 0; j < block; ++j) ASSERT_EQ(disk[j], first) << "byte " << j;
  EXPECT_EQ(s.backend().free_ios(), 2u);
}

TEST(nbd_server_rmw, an_unaligned_write_whose_read_fails_gets_eio_and_the_connection_goes_on) {
  served s;
  s.backend().fail_at(2 * block);
  raw_client c(s.socket_path());
  ASSERT_TRUE(c.start());
  ASSERT_TRUE(c.go());
  ASSERT_TRUE(c.request(command::write, 1, 2 * block + 10, 100));
  ASSERT_TRUE(c.send(std::vector<uint8_t>(100, 0x42)));  // read past: it must not be a request
  auto rep = c.simple_reply();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->first, static_cast<uint32_t>(error_code::eio));
  EXPECT_EQ(rep->second, 1u);
  s.backend().fail_at(std::nullopt);
  // The block is not left locked: the same write now goes through.
  ASSERT_TRUE(c.request(command::write, 2, 2 * block + 10, 100));
  ASSERT_TRUE(c.send(std::vector<uint8_t>(100, 0x42)));
  rep = c.simple_reply();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->first, 0u);
  EXPECT_EQ(rep->second, 2u);
  s.stop();
  EXPECT_EQ(s.backend().bytes()[2 * block + 10], 0x42);
  EXPECT_EQ(s.backend().free_ios(), 32u);
}

// A client that holds a block (its unaligned write's payload never comes) stalls only the writes
// to that block, not unaligned writes elsewhere.
TEST(nbd_server_rmw, a_held_block_holds_up_only_the_writes_to_it) {
  served s;
  raw_client holder(s.socket_path());
  raw_client same(s.socket_path());
  raw_client elsewhere(s.socket_path());
  ASSERT_TRUE(open_all({&holder, &same, &elsewhere}));
  ASSERT_TRUE(holder.request(command::write, 1, 100, 200));  // and no payload
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(same.request(command::write, 2, 1000, 200));
  ASSERT_TRUE(same.send(std::vector<uint8_t>(200, 0x22)));
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(elsewhere.request(command::write, 3, 5 * block + 100, 200));
  ASSERT_TRUE(elsewhere.send(std::vector<uint8_t>(200, 0x33)));
  auto rep = elsewhere.simple_reply();  // well within the holder's 30 s request timeout
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->first, 0u);
  // The holder goes; the write that waited for its block goes through.
  holder.close();
  rep = same.simple_reply();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->first, 0u);
  s.stop();
  EXPECT_EQ(s.backend().bytes()[1000], 0x22);
  EXPECT_EQ(s.backend().bytes()[5 * block + 100], 0x33);
}

// A connection that goes away in the middle of unaligned writes leaves no block locked and no
// memory held.
TEST(nbd_server_rmw, a_client_gone_mid_write_leaves_no_lock_and_no_memory_behind) {
  served s;
  {
    raw_client c(s.socket_path());
    ASSERT_TRUE(c.start());
    ASSERT_TRUE(c.go());
    for (int i = 0; i < 8; ++i) ASSERT_TRUE(c.request(command::write, i, 100, 200));
    // The first write's 200-byte payload is what follows it (the next headers), then the second
    // write waits for a payload that never comes.
  }
  raw_client next(s.socket_path());
  ASSERT_TRUE(next.start());
  ASSERT_TRUE(next.go());
  ASSERT_TRUE(next.request(command::write, 9, 100, 200));
  ASSERT_TRUE(next.send(std::vector<uint8_t>(200, 0x11)));
  auto rep = next.simple_reply();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->first, 0u);
  s.stop();
  EXPECT_EQ(s.backend().free_ios(), 32u);
  EXPECT_EQ(s.backend().bytes()[100], 0x11);
}

// An unaligned WRITE_ZEROES of any length: its partial edge blocks read-modify-written, the
// whole blocks between zeroed as usual; only its bytes change, FUA flushes.
TEST(nbd_server_rmw, an_unaligned_write_zeroes_of_any_length_zeroes_exactly_its_range) {
  served s;
  const auto bytes = pattern(8 * max_io, 5);
  std::copy(bytes.begin(), bytes.end(), s.backend().bytes().begin());
  raw_client c(s.socket_path());
  ASSERT_TRUE(c.start());
  ASSERT_TRUE(c.go());
  const uint64_t small_at = 100, small_len = 5000;             // two partial blocks
  const uint64_t big_at = max_io + 512, big_len = 4 * max_io;  // larger than any io
  ASSERT_TRUE(c.request(command::write_zeroes, 1, small_at, small_len, command_flag::fua));
  ASSERT_TRUE(c.request(command::write_zeroes, 2, big_at, big_len));
  for (int i = 0; i < 2; ++i) {
    auto rep = c.simple_reply();
    ASSERT_TRUE(rep);
    EXPECT_EQ(rep->first, 0u) << "request " << rep->second;
  }
  // Nothing stays locked: a write in the first block goes through.
  ASSERT_TRUE(c.request(command::write, 3, 6000, 10, command_flag::fua));
  ASSERT_TRUE(c.send(std::vector<uint8_t>(10, 0xEE)));
  auto rep = c.simple_reply();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->first, 0u);
  s.stop();
  const auto& d = s.backend().bytes();
  for (size_t i = 0; i < bytes.size(); ++i) {
    uint8_t want = bytes[i];
    if ((i >= small_at && i < small_at + small_len) || (i >= big_at && i < big_at + big_len))
      want = 0;
    if (i >= 6000 && i < 6010) want = 0xEE;
    ASSERT_EQ(d[i], want) << "byte " << i;
  }
  EXPECT_EQ(s.backend().flushes, 2u);
  EXPECT_EQ(s.backend().free_ios(), 32u);
}

// Over a backend cut into 4 KiB segments, an unaligned write and read spanning several of them.
TEST(nbd_server_rmw, unaligned_requests_across_segments_are_exact) {
  served s({}, 32, false, 4096);
  const auto bytes = pattern(4 * block, 3);
  std::copy(bytes.begin(), bytes.end(), s.backend().bytes().begin());
  raw_client c(s.socket_path());
  ASSERT_TRUE(c.start());
  ASSERT_TRUE(c.go());
  const auto payload = pattern(9000, 77);
  ASSERT_TRUE(c.request(command::write, 1, 1000, 9000));
  ASSERT_TRUE(c.send(payload));
  ASSERT_TRUE(c.request(command::read, 2, 999, 9002));
  auto rep = c.simple_reply();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->first, 0u);
  rep = c.simple_reply();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->second, 2u);
  auto data = c.recv(9002);
  ASSERT_EQ(data.size(), 9002u);
  EXPECT_EQ(data[0], bytes[999]);
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), data.begin() + 1));
  EXPECT_EQ(data[9001], bytes[10000]);
  s.stop();
  const auto& d = s.backend().bytes();
  for (size_t i = 0; i < 4 * block; ++i)
    ASSERT_EQ(d[i], (i >= 1000 && i < 10000) ? payload[i - 1000] : bytes[i]) << "byte " << i;
}

// A write waiting for two edge blocks is not overtaken by a later one for one of them.
TEST(nbd_server_rmw, a_write_waiting_for_two_blocks_is_not_overtaken) {
  served s;
  raw_client h0(s.socket_path()), h2(s.socket_path()), w(s.socket_path()), x(s.socket_path());
  ASSERT_TRUE(open_all({&h0, &h2, &w, &x}));
  ASSERT_TRUE(h0.request(command::write, 1, 100, 200));              // holds block 0
  ASSERT_TRUE(h2.request(command::write, 2, 2 * block + 100, 200));  // holds block 2
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(w.request(command::write, 3, 200, 2 * block));  // edges 0 and 2: waits
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(x.request(command::write, 4, 2 * block + 3000, 100));  // behind w; no payload ever
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(h2.send(std::vector<uint8_t>(200, 2)));  // block 2 let go: w's, not x's
  ASSERT_TRUE(h2.simple_reply());
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(h0.send(std::vector<uint8_t>(200, 1)));  // block 0 let go
  ASSERT_TRUE(h0.simple_reply());
  ASSERT_TRUE(w.send(std::vector<uint8_t>(2 * block, 3)));
  auto rep = w.simple_reply();  // within 5 s; x never sends and holds nothing
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->first, 0u);
}

// A covering read that fails, then the client goes while its payload is read past: the closed
// connection is not kept for ever (no IO of it is with the backend any more).
TEST(nbd_server_rmw, a_failed_covering_read_then_a_close_leaves_nothing_behind) {
  served s;
  s.backend().fail_at(2 * block);
  {
    raw_client c(s.socket_path());
    ASSERT_TRUE(c.start());
    ASSERT_TRUE(c.go());
    ASSERT_TRUE(c.request(command::write, 1, 2 * block + 10, 100));
    ASSERT_TRUE(c.send(std::vector<uint8_t>(10, 0x42)));  // part of the payload, then gone
    std::this_thread::sleep_for(100ms);
  }
  std::this_thread::sleep_for(100ms);
  s.stop();
  EXPECT_EQ(s.srv().tracked_connections(), 0u);
  EXPECT_EQ(s.backend().free_ios(), 32u);
}

// ---- bounds: no client keeps memory, slots or the server for ever

constexpr auto short_bound = 300ms;

TEST(nbd_server_bounds, a_write_whose_payload_stops_is_closed_and_frees_its_memory) {
  served s({.request_timeout = short_bound});
  raw_client c(s.socket_path());
  ASSERT_TRUE(c.start());
  ASSERT_TRUE(c.go());
  ASSERT_TRUE(c.request(command::write, 1, 0, max_io));
  ASSERT_TRUE(c.send(std::vector<uint8_t>(1000, 0x5A)));  // and then nothing more
  EXPECT_TRUE(c.closed_by_peer());  // by the deadline: the counter below says which
  // Someone else is served, with every io back in the pool.
  raw_client other(s.socket_path());
  ASSERT_TRUE(other.start());
  ASSERT_TRUE(other.go());
  ASSERT_TRUE(other.request(command::read, 2, 0, block));
  auto rep = other.simple_reply();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->first, 0u);
  EXPECT_EQ(other.recv(block).size(), block);
  s.stop();
  EXPECT_EQ(s.backend().free_ios(), 32u);
  EXPECT_EQ(s.srv().counters().timed_out, 1u);
}

TEST(nbd_server_bounds, a_refused_write_whose_payload_stops_is_closed_too) {
  served s({.request_timeout = short_bound});
  raw_client c(s.socket_path());
  ASSERT_TRUE(c.start());
  ASSERT_TRUE(c.go());
  ASSERT_TRUE(c.request(command::write, 1, disk_size, block));  // past the end: refused
  EXPECT_TRUE(c.closed_by_peer());
  s.stop();
  EXPECT_EQ(s.srv().counters().timed_out, 1u);
}

TEST(nbd_server_bounds, a_client_that_leaves_its_replies_unread_is_closed) {
  served s({.max_in_flight = 8, .request_timeout = short_bound});
  raw_client stuck(s.socket_path());
  ASSERT_TRUE(stuck.start());
  ASSERT_TRUE(stuck.go());
  // Far more read data than the socket buffers hold, not read for longer than the bound.
  for (uint64_t i = 0; i < 8; ++i) ASSERT_TRUE(stuck.request(command::read, i, 0, max_io));
  std::this_thread::sleep_for(short_bound * 4);
  // What the kernel held is read, then the end of the stream: the server gave up on it.
  EXPECT_TRUE(stuck.closed_by_peer());
  s.stop();
  EXPECT_EQ(s.srv().counters().timed_out, 1u);
  EXPECT_EQ(s.backend().free_ios(), 32u);
}

// A connection closed for a deadline lets go of what others wait for: its block and its memory.
TEST(nbd_server_bounds, a_deadline_close_wakes_the_writes_and_reads_waiting_for_it) {
  served s({.request_timeout = short_bound}, 2);  // two ios
  raw_client holder(s.socket_path());
  raw_client same_block(s.socket_path());
  raw_client reader(s.socket_path());
  ASSERT_TRUE(open_all({&holder, &same_block, &reader}));
  ASSERT_TRUE(holder.request(command::write, 1, 100, 200));  // block 0 and one io; no payload
  ASSERT_TRUE(holder.request(command::read, 2, 8 * block, max_io));  // the other io, unread...
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(same_block.request(command::write, 3, 1000, 200));  // waits for block 0
  ASSERT_TRUE(same_block.send(std::vector<uint8_t>(200, 0x22)));
  ASSERT_TRUE(reader.request(command::read, 4, 0, block));  // waits for memory
  // Within the raw client's 5 s receive timeout: without the wake-up they would sleep on.
  auto rep = same_block.simple_reply();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->first, 0u);
  rep = reader.simple_reply();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->first, 0u);
  EXPECT_TRUE(holder.closed_by_peer());
}

// Replies drained at a trickle: each must go out whole within the bound once at the front.
TEST(nbd_server_bounds, a_trickle_reader_is_closed_too) {
  served s({.max_in_flight = 8, .request_timeout = short_bound});
  raw_client c(s.socket_path());
  ASSERT_TRUE(c.start());
  ASSERT_TRUE(c.go());
  for (uint64_t i = 0; i < 8; ++i) ASSERT_TRUE(c.request(command::read, i, 0, max_io));
  const auto began = std::chrono::steady_clock::now();
  bool closed = false;
  while (std::chrono::steady_clock::now() - began < 5s) {
    auto v = c.recv(256 * 1024);
    if (v.empty()) {
      closed = true;
      break;
    }
    std::this_thread::sleep_for(250ms);
  }
  EXPECT_TRUE(closed) << "still served after 5 s with a bound of 300 ms";
  s.stop();
  EXPECT_EQ(s.srv().counters().timed_out, 1u);
}

TEST(nbd_server_bounds, idle_timeout_closes_a_connection_with_nothing_in_flight) {
  // A bound ten times the pause between requests, so a slow machine does not close it early.
  constexpr auto idle_bound = 1s;
  served s({.idle_timeout = idle_bound});
  raw_client c(s.socket_path());
  ASSERT_TRUE(c.start());
  ASSERT_TRUE(c.go());
  // Busy for longer than the bound in all: each request resets the clock.
  for (int i = 0; i < 12; ++i) {
    if (i != 0) std::this_thread::sleep_for(idle_bound / 10);
    ASSERT_TRUE(c.request(command::read, i, 0, block));
    auto rep = c.simple_reply();
    ASSERT_TRUE(rep) << "closed while busy, request " << i;
    EXPECT_EQ(c.recv(block).size(), block);
  }
  EXPECT_TRUE(c.closed_by_peer());
  s.stop();
  EXPECT_EQ(s.srv().counters().timed_out, 1u);
}

TEST(nbd_server_bounds, a_half_closed_client_still_gets_its_replies) {
  served s;
  // Before any request: the server thread touches the bytes only to serve one.
  const auto expected = pattern(4 * block, 9);
  std::copy(expected.begin(), expected.end(), s.backend().bytes().begin());
  raw_client c(s.socket_path());
  ASSERT_TRUE(c.start());
  ASSERT_TRUE(c.go());
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(c.request(command::read, i, i * block, block));
  ASSERT_TRUE(c.shutdown_write());
  std::vector<bool> seen(4, false);
  for (int i = 0; i < 4; ++i) {
    auto rep = c.simple_reply();
    ASSERT_TRUE(rep) << "reply " << i << " lost after the half-close";
    EXPECT_EQ(rep->first, 0u);
    ASSERT_LT(rep->second, 4u);
    seen[rep->second] = true;
    const auto data = c.recv(block);
    ASSERT_EQ(data.size(), block);
    EXPECT_TRUE(std::equal(data.begin(), data.end(), expected.begin() + rep->second * block));
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), true), 4);
  EXPECT_TRUE(c.closed_by_peer());
}

// A stop answers what a handshaking client asks with ERR_SHUTDOWN (proto.md), then closes.
TEST(nbd_server_bounds, a_stop_answers_a_handshaking_client_err_shutdown) {
  served s;
  raw_client c(s.socket_path());
  ASSERT_TRUE(c.start());
  // More options than the socket holds answers to, none read: the server stops reading them
  // once its replies back up, and the rest wait in its input.
  constexpr int flood = 8000;
  std::vector<uint8_t> options;
  for (int i = 0; i < flood; ++i) {
    uint8_t h[16];
    store_be64(h, ihaveopt);
    store_be32(h + 8, static_cast<uint32_t>(option::list));
    store_be32(h + 12, 0);
    options.insert(options.end(), h, h + 16);
  }
  ASSERT_TRUE(c.send(options));
  std::this_thread::sleep_for(200ms);
  std::thread stopping([&] { s.stop(); });
  std::this_thread::sleep_for(100ms);
  bool shutdown_seen = false;
  for (int i = 0; i < flood && !shutdown_seen; ++i) {
    auto r = c.reply();
    if (!r) break;
    shutdown_seen = r->type == reply_type::err_shutdown;
  }
  EXPECT_TRUE(shutdown_seen);
  EXPECT_TRUE(c.closed_by_peer());
  stopping.join();
}

// ---- shares of IO memory and backend slots

// A client whose first reply sits unread in its socket: every later reply queues behind it, so
// each request it sends holds its io until the client reads.
void hold_ios(raw_client& c, uint64_t small_reads) {
  ASSERT_TRUE(c.request(command::read, 0, 0, max_io));  // more than the socket buffers hold
  for (uint64_t i = 1; i <= small_reads; ++i)
    ASSERT_TRUE(c.request(command::read, i, (i % 64) * block, block));
}

// Reads what hold_ios asked for: every reply a success with its data.
void release_ios(raw_client& c, uint64_t small_reads) {
  for (uint64_t i = 0; i <= small_reads; ++i) {
    auto rep = c.simple_reply();
    ASSERT_TRUE(rep) << "reply " << i;
    EXPECT_EQ(rep->first, 0u);
    const uint32_t length = rep->second == 0 ? max_io : block;
    EXPECT_EQ(c.recv(length).size(), length) << "reply " << i;
  }
}

// Alone, a connection takes at most half the ios (a newcomer finds the other half), though it
// asks for four times as many and nothing else is connected.
TEST(nbd_server_share, one_connection_holds_at_most_half_the_ios) {
  served s({}, 16);
  raw_client c(s.socket_path());
  ASSERT_TRUE(open_all({&c}));
  hold_ios(c, 63);
  std::this_thread::sleep_for(200ms);  // the server has read all 64 and served what it may
  release_ios(c, 63);                  // all 64 are answered in the end
  s.stop();
  EXPECT_EQ(s.backend().peak_ios(), 8u);
  EXPECT_EQ(s.backend().free_ios(), 16u);
}

// A hostile client holds its share and reads nothing, without a deadline to close it; a real
// client copies the whole export out meanwhile, byte for byte.
TEST(nbd_server_share, a_client_holding_its_share_leaves_the_rest_to_a_real_one) {
  if (!have("nbdcopy")) GTEST_SKIP() << "nbdcopy (libnbd-bin) is not installed";
  served s({.request_timeout = 0ms}, 16, false, 0, 0, false,
           [](test::memory_backend& b) { b.set_allocated(0, disk_size / block); });
  const auto image = pattern(disk_size, 11);
  std::copy(image.begin(), image.end(), s.backend().bytes().begin());
  raw_client hostile(s.socket_path());
  ASSERT_TRUE(open_all({&hostile}));
  hold_ios(hostile, 63);
  std::this_thread::sleep_for(200ms);
  auto r = run({"nbdcopy", "--connections", "2", s.uri(), s.file("out.img").string()});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output;
  EXPECT_TRUE(read_file(s.file("out.img")) == image);
  release_ios(hostile, 63);
}

// Memory for two 1 MiB reads and a half: two clients hold 1 MiB each (replies unread); a third
// asks for 1 MiB and waits; a fourth's 4 KiB read is served at once, not behind the third's.
// Once the first client reads, the third is served too.
TEST(nbd_server_share, a_request_waiting_for_memory_holds_up_no_other_connection) {
  served s({}, 8, false, 0, 2 * max_io + max_io / 2);
  raw_client a(s.socket_path()), b(s.socket_path()), big(s.socket_path()), small(s.socket_path());
  ASSERT_TRUE(open_all({&a, &b, &big, &small}));
  ASSERT_TRUE(a.request(command::read, 1, 0, max_io));
  ASSERT_TRUE(b.request(command::read, 2, 0, max_io));
  std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(big.request(command::read, 3, 0, max_io));
  std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(small.request(command::read, 4, block, block));
  auto rep = small.simple_reply();  // within the client's 5 s receive timeout
  ASSERT_TRUE(rep) << "a 4 KiB read waited behind another connection's 1 MiB one";
  EXPECT_EQ(rep->first, 0u);
  EXPECT_EQ(small.recv(block).size(), block);
  rep = a.simple_reply();
  ASSERT_TRUE(rep);
  EXPECT_EQ(a.recv(max_io).size(), max_io);
  rep = big.simple_reply();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->first, 0u);
  EXPECT_EQ(rep->second, 3u);
  EXPECT_EQ(big.recv(max_io).size(), max_io);
  rep = b.simple_reply();
  ASSERT_TRUE(rep);
  EXPECT_EQ(b.recv(max_io).size(), max_io);
}

// A 1 MiB read among a stream of small ones that always leaves less than 1 MiB free: the ios
// complete one at a time (the test lets each go), and each time the stream's next request could
// take the memory that came back. The large one reserves it after a few such passes and is served
// while the stream goes on.
TEST(nbd_server_share, a_large_request_is_not_starved_by_a_stream_of_small_ones) {
  constexpr uint32_t piece = 64 * 1024;
  served s({}, 32, false, 0, max_io + piece, /*hold=*/true);
  raw_client stream(s.socket_path()), big(s.socket_path());
  ASSERT_TRUE(open_all({&stream, &big}));
  // 16 asked at all times; its share, half the memory, is 8 of them.
  constexpr uint64_t depth = 16;
  for (uint64_t i = 0; i < depth; ++i) ASSERT_TRUE(stream.request(command::read, i, 0, piece));
  std::atomic<bool> stream_ok{true};
  std::thread streaming([&] {
    for (uint64_t next = depth;; ++next) {
      auto rep = stream.simple_reply();
      if (!rep || rep->first != 0 || stream.recv(piece).size() != piece) break;
      if (!stream.request(command::read, next, 0, piece)) break;
    }
    stream_ok = false;
  });
  std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(big.request(command::read, 7, 0, max_io));
  auto answer = std::async(std::launch::async, [&] { return big.simple_reply(); });
  // One io at a time, until the large read is answered (bounded).
  for (int i = 0; i < 2000; ++i) {
    s.backend().let_go(1);
    if (answer.wait_for(2ms) == std::future_status::ready) break;
  }
  auto rep = answer.get();
  ASSERT_TRUE(rep) << "the 1 MiB read starved";
  EXPECT_EQ(rep->first, 0u);
  EXPECT_EQ(big.recv(max_io).size(), max_io);
  EXPECT_TRUE(stream_ok.load()) << "the stream stopped";
  stream.shutdown_write();  // its requests in flight are answered, its next one fails
  s.backend().stop_holding();
  streaming.join();
}

// WRITE_ZEROES holds ios like a WRITE (within the share), and the backend zeroes them, not the
// server's thread.
TEST(nbd_server_share, write_zeroes_counts_against_the_share_and_is_zeroed_by_the_backend) {
  // Storage that cannot zero by itself: the zeroes are written as data, through IO memory.
  served s({}, 16, false, 0, 0, false, [](test::memory_backend& b) { b.without_sparse(); });
  const auto image = pattern(disk_size, 13);
  std::copy(image.begin(), image.end(), s.backend().bytes().begin());
  raw_client c(s.socket_path());
  ASSERT_TRUE(open_all({&c}));
  for (uint64_t i = 0; i < 16; ++i)
    ASSERT_TRUE(c.request(command::write_zeroes, i, i * max_io, max_io));
  expect_successes(c, 16);
  s.stop();
  EXPECT_LE(s.backend().peak_ios(), 8u);
  EXPECT_EQ(s.backend().zeroes, 16u);
  EXPECT_TRUE(std::all_of(s.backend().bytes().begin(), s.backend().bytes().end(),
                          [](uint8_t b) { return b == 0; }));
}

// ---- sparse: TRIM, WRITE_ZEROES and BLOCK_STATUS through the storage's own operations

zc::test::nbd_extents map_of(const served& s) {
  auto r = run({"nbdinfo", "--map", s.uri()});
  EXPECT_EQ(r.code, std::optional<int>(0)) << r.output;
  return zc::test::parse_nbdinfo_map(r.output);
}

TEST(nbd_server_sparse, nbdinfo_map_shows_exactly_the_allocated_blocks) {
  if (!have("nbdinfo")) GTEST_SKIP() << "nbdinfo (libnbd-bin) is not installed";
  served s({}, 32, false, 0, 0, false, [](test::memory_backend& b) {
    b.set_allocated(4, 4);
    b.set_allocated(100, 2);
  });
  const zc::test::nbd_extents expected = {{0, 4 * block, 3},
                                          {4 * block, 4 * block, 0},
                                          {8 * block, 92 * block, 3},
                                          {100 * block, 2 * block, 0},
                                          {102 * block, disk_size - 102 * block, 3}};
  EXPECT_EQ(map_of(s), expected);
  s.stop();
  EXPECT_GE(s.backend().maps, 1u);
}

// Offsets inside blocks, REQ_ONE, and a request longer than one bitmap covers.
TEST(nbd_server_sparse, block_status_at_any_offset_and_with_req_one) {
  if (!have("nbdsh")) GTEST_SKIP() << "nbdsh (python3-libnbd) is not installed";
  served s({}, 32, false, 0, 0, false, [](test::memory_backend& b) { b.set_allocated(1, 1); });
  const std::string script = R"(
seen = []
def cb(meta, off, entries, err):
    seen.append((off, list(entries)))
h.block_status(3 * 4096, 2048, cb)
h.block_status(2048, 6144, cb, nbd.CMD_FLAG_REQ_ONE)
print(seen)
)";
  auto r = run({"nbdsh", "--base-allocation", "-u", s.uri(), "-c", script});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output;
  // From 2048: the rest of block 0 a hole, block 1 data, blocks 2 and 3 a hole to the request's
  // end; from 6144 with REQ_ONE: one extent, the rest of block 1.
  EXPECT_NE(r.output.find("(2048, [2048, 3, 4096, 0, 6144, 3])"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(6144, [2048, 0])"), std::string::npos) << r.output;
}

TEST(nbd_server_sparse, trim_drops_the_whole_blocks_inside_its_range) {
  served s;
  const auto image = pattern(16 * block, 21);
  raw_client c(s.socket_path());
  ASSERT_TRUE(open_all({&c}));
  ASSERT_TRUE(c.request(command::write, 1, 0, 16 * block));
  ASSERT_TRUE(c.send(image));
  expect_successes(c, 1);
  ASSERT_TRUE(c.request(command::trim, 2, 512, 3 * block));  // blocks 1 and 2 whole
  expect_successes(c, 1);
  s.stop();
  const auto& bytes = s.backend().bytes();
  for (uint64_t i = 0; i < 16 * block; ++i) {
    const bool dropped = i >= block && i < 3 * block;
    ASSERT_EQ(bytes[i], dropped ? 0 : image[i]) << "byte " << i;
  }
  EXPECT_EQ(s.backend().discards, 1u);
}

TEST(nbd_server_sparse, write_zeroes_moves_no_data_unless_no_hole_or_unknown) {
  auto check = [](bool sparse, uint16_t flags, bool by_range) {
    served s({}, 32, false, 0, 0, false, [sparse](test::memory_backend& b) {
      if (!sparse) b.without_sparse();
    });
    std::fill(s.backend().bytes().begin(), s.backend().bytes().end(), uint8_t{0x5A});
    raw_client c(s.socket_path());
    ASSERT_TRUE(open_all({&c}));
    ASSERT_TRUE(c.request(command::write_zeroes, 1, block, 4 * max_io, flags));
    expect_successes(c, 1);
    ASSERT_TRUE(c.request(command::write_zeroes, 2, 8 * max_io, 2 * block, flags));
    expect_successes(c, 1);
    s.stop();
    const auto& bytes = s.backend().bytes();
    EXPECT_EQ(bytes[block - 1], 0x5A);
    EXPECT_TRUE(std::all_of(bytes.begin() + block, bytes.begin() + block + 4 * max_io,
                            [](uint8_t b) { return b == 0; }));
    EXPECT_EQ(bytes[block + 4 * max_io], 0x5A);
    EXPECT_EQ(s.backend().zeroings != 0, by_range) << sparse << " " << flags;
    EXPECT_EQ(s.backend().zeroes != 0, !by_range) << sparse << " " << flags;
  };
  check(true, 0, true);
  check(true, command_flag::no_hole, false);
  check(false, 0, false);
}

TEST(nbd_server_sparse, fast_zero_fails_at_once_where_zeroes_would_be_written) {
  served s({}, 32, false, 0, 0, false, [](test::memory_backend& b) { b.without_sparse(); });
  raw_client c(s.socket_path());
  ASSERT_TRUE(open_all({&c}));
  for (uint64_t i = 0; i < 2; ++i) {  // learnt from the storage, then known
    ASSERT_TRUE(c.request(command::write_zeroes, i, 0, max_io, command_flag::fast_zero));
    auto rep = c.simple_reply();
    ASSERT_TRUE(rep);
    EXPECT_EQ(rep->first, static_cast<uint32_t>(error_code::enotsup)) << i;
  }
  ASSERT_TRUE(c.request(command::write_zeroes, 3, 0, max_io));  // without it: written as data
  expect_successes(c, 1);
  s.stop();
  EXPECT_GE(s.backend().zeroes, 1u);
}

TEST(nbd_server_sparse, fast_zero_with_no_hole_is_refused) {
  served s;
  raw_client c(s.socket_path());
  ASSERT_TRUE(open_all({&c}));
  ASSERT_TRUE(c.request(command::write_zeroes, 1, 0, max_io,
                        command_flag::fast_zero | command_flag::no_hole));
  auto rep = c.simple_reply();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->first, static_cast<uint32_t>(error_code::enotsup));
}

// nbdcopy out of a mostly empty export reads only what is allocated.
TEST(nbd_server_sparse, nbdcopy_reads_only_the_allocated_blocks) {
  if (!have("nbdcopy")) GTEST_SKIP() << "nbdcopy (libnbd-bin) is not installed";
  served s({}, 32, false, 0, 0, false, [](test::memory_backend& b) { b.set_allocated(256, 256); });
  const auto data = pattern(256 * block, 23);
  std::copy(data.begin(), data.end(), s.backend().bytes().begin() + 256 * block);
  auto r = run({"nbdcopy", s.uri(), s.file("out.img").string()});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output;
  const auto out = read_file(s.file("out.img"));
  ASSERT_EQ(out.size(), disk_size);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), out.begin() + 256 * block));
  EXPECT_TRUE(
      std::all_of(out.begin(), out.begin() + 256 * block, [](uint8_t b) { return b == 0; }));
  s.stop();
  EXPECT_LE(s.backend().bytes_read, 2 * 256 * block);  // 1 MiB allocated of a 16 MiB export
}

}  // namespace
}  // namespace zc::nbd
