// Run to completion: servers polled by progress engines (server_source) over backends that
// complete on the server's own thread, and a group of servers sharing one listener.
#include "nbd/server_source.hpp"

#include "core/engine_thread.hpp"
#include "server_fixture.hpp"

namespace zc::nbd::test {
namespace {

// A server attached to its own engine thread, over a backend that completes on that thread.
class polled {
 public:
  explicit polled(server_options options = {}) : backend_(disk_size, block, max_io, 32) {
    backend_.complete_on_server_thread();
    server_ = std::make_unique<server>(backend_, std::move(options));
    source_ = std::make_unique<server_source>(*server_, thread_.engine());
  }
  ~polled() { stop(); }
  // After the listeners are set.
  void start() {
    thread_.call([this] { thread_.engine().attach(*source_); });
    attached_ = true;
  }
  // Bounded: true when the server drained and was detached.
  bool stop() {
    if (!attached_) return true;
    server_->stop();
    server_source* s = source_.get();
    if (!thread_.wait_until([s] { return s->finished(); }, 20s)) return false;
    thread_.call([this] { thread_.engine().detach(*source_); });
    attached_ = false;
    return true;
  }
  server& srv() { return *server_; }
  memory_backend& backend() { return backend_; }
  server_counters counters() {
    return thread_.call([this] { return server_->counters(); });
  }

 private:
  core::engine_thread thread_{core::poll_mode::event};  // first: outlives what it polls
  memory_backend backend_;
  std::unique_ptr<server> server_;
  std::unique_ptr<server_source> source_;
  bool attached_ = false;
};

class socket_dir {
 public:
  socket_dir() : dir_(fs::temp_directory_path() / zc::test::unique_name("nbd-src")) {
    fs::create_directories(dir_);
  }
  ~socket_dir() { fs::remove_all(dir_); }
  std::string socket() const { return (dir_ / "sock").string(); }
  fs::path file(const std::string& name) const { return dir_ / name; }

 private:
  fs::path dir_;
};

// Writes `bytes` at `offset` on an open connection and reads them back: true when they match.
bool write_and_read_back(raw_client& c, uint64_t offset, const std::vector<uint8_t>& bytes,
                         uint64_t cookie) {
  const auto n = static_cast<uint32_t>(bytes.size());
  if (!c.request(command::write, cookie, offset, n) || !c.send(bytes)) return false;
  auto w = c.simple_reply();
  if (!w || w->first != 0 || w->second != cookie) return false;
  if (!c.request(command::read, cookie + 1, offset, n)) return false;
  auto r = c.simple_reply();
  if (!r || r->first != 0 || r->second != cookie + 1) return false;
  return c.recv(n) == bytes;
}

TEST(nbd_server_source, a_server_polled_by_an_engine_serves_nbdcopy_byte_for_byte) {
  if (!have("nbdcopy")) GTEST_SKIP() << "nbdcopy (libnbd-bin) is not installed";
  socket_dir d;
  polled p;
  p.srv().listen_unix(d.socket());
  p.start();
  const std::string uri = "nbd+unix:///?socket=" + d.socket();
  const auto image = pattern(disk_size, 11);
  write_file(d.file("in.img"), image);
  auto r =
      run({"nbdcopy", "--connections", "4", "--requests", "16", d.file("in.img").string(), uri});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output;
  r = run({"nbdcopy", "--connections", "4", uri, d.file("out.img").string()});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output;
  EXPECT_TRUE(read_file(d.file("out.img")) == image);
  ASSERT_TRUE(p.stop());
  EXPECT_TRUE(p.backend().bytes() == image);
  EXPECT_EQ(p.srv().counters().io_errors, 0u);
}

// The acceptor hands connections to the group's servers in turn (each over its own backend
// here), and max_connections counts them together: a server with room refuses all the same
// once the group is full, and a connection closed on the other server makes room.
TEST(nbd_server_source, a_group_spreads_connections_and_shares_max_connections) {
  socket_dir d;
  polled a({.max_connections = 3});
  polled b({.max_connections = 3});
  a.srv().listen_unix(d.socket());
  a.srv().share_accepts_with({&a.srv(), &b.srv()});
  a.start();
  b.start();
  raw_client c1(d.socket()), c2(d.socket()), c3(d.socket());
  ASSERT_TRUE(open_all({&c1, &c2, &c3}));
  // In turn: c1 and c3 on a, c2 on b; each writes and reads its own bytes.
  EXPECT_TRUE(write_and_read_back(c1, 0, pattern(block, 1), 10));
  EXPECT_TRUE(write_and_read_back(c2, block, pattern(block, 2), 20));
  EXPECT_TRUE(write_and_read_back(c3, 2 * block, pattern(2 * block, 3), 30));
  EXPECT_EQ(a.counters().connections, 2u);
  EXPECT_EQ(b.counters().connections, 1u);
  EXPECT_TRUE(std::equal(a.backend().bytes().begin(), a.backend().bytes().begin() + block,
                         pattern(block, 1).begin()));
  EXPECT_TRUE(std::equal(b.backend().bytes().begin() + block,
                         b.backend().bytes().begin() + 2 * block, pattern(block, 2).begin()));

  // The group is full: a fourth is refused, although b holds one connection of three.
  raw_client c4(d.socket());
  ASSERT_TRUE(c4.connected());
  EXPECT_TRUE(c4.closed_by_peer());
  EXPECT_EQ(a.counters().refused, 1u);

  // c2 leaves b: a new client gets in (bounded: b counts it down on its own thread).
  c2.close();
  bool admitted = false;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!admitted && std::chrono::steady_clock::now() < deadline) {
    raw_client c5(d.socket());
    admitted = c5.start() && c5.go() && write_and_read_back(c5, 0, pattern(block, 5), 50);
    if (!admitted) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(admitted);
  EXPECT_TRUE(a.stop());
  EXPECT_TRUE(b.stop());
}

// stop() reaches a server polled by an engine: its connection is closed once drained, the source
// says finished, and nothing the server held is left open.
TEST(nbd_server_source, stop_drains_and_the_source_finishes) {
  socket_dir d;
  const size_t fds_before = open_fds();
  {
    polled p;
    p.srv().listen_unix(d.socket());
    p.start();
    raw_client c(d.socket());
    ASSERT_TRUE(open_all({&c}));
    EXPECT_TRUE(write_and_read_back(c, 0, pattern(block, 9), 90));
    ASSERT_TRUE(p.stop());
    EXPECT_TRUE(c.closed_by_peer());
  }
  EXPECT_TRUE(fds_return_to(fds_before));
}

}  // namespace
}  // namespace zc::nbd::test
