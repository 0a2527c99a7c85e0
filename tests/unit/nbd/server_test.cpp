// The NBD server driven by real clients (nbdinfo, an nbdsh script, nbdcopy, qemu-io) and by a
// raw socket for what no polite client sends (unknown options, garbage, huge lengths, a flood of
// connections, a disconnect in the middle of a request).
#include "server_fixture.hpp"

namespace zc::nbd {
namespace {

using namespace test;

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

// Completions come back shuffled: replies go out in whatever order the storage answers.
TEST(nbd_server, nbdcopy_in_and_out_with_four_connections) {
  if (!have("nbdcopy")) GTEST_SKIP() << "nbdcopy (libnbd-bin) is not installed";
  served s({}, 32, false, 0, 0, false, [](test::memory_backend& b) { b.shuffle_completions(3); });
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
    ASSERT_TRUE(open_all({&c}));
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
    ASSERT_TRUE(open_all({&c}));
    ASSERT_TRUE(c.send(std::vector<uint8_t>(28, 0x11)));
    EXPECT_TRUE(c.closed_by_peer());
  }
  {
    // A WRITE of 4 GiB - 1 (refused, its payload read past) abandoned half way, and a write
    // whose payload never comes.
    raw_client c(s.socket_path());
    ASSERT_TRUE(open_all({&c}));
    ASSERT_TRUE(c.request(command::write, 1, 0, 0xffffffff));
    ASSERT_TRUE(c.send(std::vector<uint8_t>(1 << 20, 0)));
  }
  {
    // Many reads, never read back, then the client vanishes in the middle of a write.
    raw_client c(s.socket_path());
    ASSERT_TRUE(open_all({&c}));
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
    ASSERT_TRUE(open_all({&c}));
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
  ASSERT_TRUE(open_all({&stuck}));
  // Far more read data than the socket buffers hold, never read.
  for (uint64_t i = 0; i < 64; ++i) ASSERT_TRUE(stuck.request(command::read, i, 0, max_io));
  // Another connection is served meanwhile.
  raw_client other(s.socket_path());
  ASSERT_TRUE(open_all({&other}));
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
  ASSERT_TRUE(open_all({&big}));
  // Its reply is larger than the socket buffers: the io stays held until the client reads.
  ASSERT_TRUE(big.request(command::read, 1, 0, max_io));
  raw_client small(s.socket_path());
  ASSERT_TRUE(open_all({&small}));
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
  ASSERT_TRUE(open_all({&c}));
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
  ASSERT_TRUE(open_all({&c}));
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
  ASSERT_TRUE(open_all({&big}));
  ASSERT_TRUE(big.request(command::read, 1, 0, max_io));  // larger than the socket buffers
  raw_client small(s.socket_path());
  ASSERT_TRUE(open_all({&small}));
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

}  // namespace
}  // namespace zc::nbd
