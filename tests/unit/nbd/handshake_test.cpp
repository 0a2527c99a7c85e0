// The NBD server's handshake: TLS (STARTTLS with pre-shared keys, driven by libnbd and by a TLS
// client inside the test), meta contexts, and the storage geometry it refuses to announce.
#include "server_fixture.hpp"

namespace zc::nbd {
namespace {

using namespace test;

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
  // In one write: the server may fail the handshake on the first bytes it reads and close, and a
  // second write would then find the socket gone.
  ASSERT_TRUE(c.send(option_bytes(option::go, {0, 0, 0, 0, 0, 0})));
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

}  // namespace
}  // namespace zc::nbd
