// zcstore_nbd in front of the real zero-copy pipeline (zcstore_target_rdma and
// zcstore_comch_to_rdma_zero_copy), driven by real NBD clients: nbdcopy in and out with four
// connections, qemu-img convert and compare, fio's nbd engine with crc32c verification, socket
// activation by nbdinfo; SIGTERM ends it with exit 0 and the pipeline behind it ends its session;
// a lost service ends it with exit 1; an ext4 file system made, written and read back through
// nbdfuse and a loop device. Every wait is bounded; a missing client skips its test.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "pipeline.hpp"
#include "support/nbdinfo_map.hpp"

namespace zc::test {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t nbd_blocks = 4096;  // 16 MiB
constexpr uint64_t nbd_disk = uint64_t(nbd_blocks) * block_size;
constexpr auto client_limit = 60s;

bool have(const std::string& program) {
  return ::access(("/usr/bin/" + program).c_str(), X_OK) == 0;
}

struct client_result {
  std::optional<int> code;
  std::string output;
};

// Debian's clients, with Debian's python first on PATH (nbdsh).
client_result run_client(std::vector<std::string> argv) {
  argv[0] = "/usr/bin/" + argv[0];
  subprocess p(std::move(argv), {{"PATH", "/usr/bin:/bin:/usr/sbin:/sbin"}});
  auto code = p.wait(client_limit);
  return {code, p.output()};
}

void write_all(const fs::path& path, const std::vector<char>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<char> read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::vector<std::string> nbd_argv(const pipeline& p, std::vector<std::string> extra,
                                  int control_timeout = control_timeout_s, uint32_t workers = 1) {
  std::vector<std::string> argv{binary("zcstore_nbd"),
                                "-d",
                                "auto",
                                "--poll-mode",
                                "event",
                                "--command-channel-name",
                                p.channel(),
                                "--control-timeout",
                                std::to_string(control_timeout)};
  for (auto& f : cpu_flags(workers)) argv.push_back(f);
  for (auto& e : extra) argv.push_back(std::move(e));
  return argv;
}

class nbd_pipeline : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / unique_name("nbd-it");
    fs::create_directories(dir_);
    socket_ = (dir_ / "sock").string();
  }
  void TearDown() override {
    nbd.reset();  // ended first: it unlinks its socket on the way out
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Target and service, then zcstore_nbd on the Unix socket.
  bool start(pipeline& p, std::vector<std::string> extra = {},
             int control_timeout = control_timeout_s, uint32_t workers = 1) {
    if (!p.start_target() || !p.start_service()) return false;
    std::vector<std::string> flags{"--socket", socket_};
    for (auto& f : extra) flags.push_back(f);
    nbd = std::make_unique<subprocess>(nbd_argv(p, flags, control_timeout, workers));
    return nbd->wait_for_output("serving NBD on " + socket_, start_timeout);
  }
  std::string uri() const { return "nbd+unix:///?socket=" + socket_; }
  // nbdcopy writes `image` in over `in_connections` and reads it back over `out_connections`:
  // every byte comes back.
  void copy_in_and_out(const pipeline& p, const std::vector<char>& image, int in_connections,
                       int out_connections) {
    const auto in = dir_ / "in.img";
    write_all(in, image);
    auto r = run_client(
        {"nbdcopy", "--connections", std::to_string(in_connections), in.string(), uri()});
    ASSERT_EQ(r.code, std::optional<int>(0)) << r.output << output(p);
    r = run_client({"nbdcopy", "--connections", std::to_string(out_connections), uri(),
                    (dir_ / "out.img").string()});
    ASSERT_EQ(r.code, std::optional<int>(0)) << r.output << output(p);
    EXPECT_TRUE(read_all(dir_ / "out.img") == image) << "nbdcopy read back other bytes";
  }
  std::string output(const pipeline& p) const {
    return p.all_output() + "--- nbd\n" + (nbd ? nbd->output() : std::string());
  }

  fs::path dir_;
  std::string socket_;
  std::unique_ptr<subprocess> nbd;
};

TEST_F(nbd_pipeline, clients_copy_convert_and_verify_through_the_zero_copy_pipeline) {
  for (const char* c : {"nbdcopy", "qemu-img", "fio"})
    if (!have(c)) GTEST_SKIP() << c << " is not installed";
  pipeline p({.block_count = nbd_blocks});
  ASSERT_TRUE(start(p)) << output(p);

  ASSERT_NO_FATAL_FAILURE(copy_in_and_out(p, content_bytes(nbd_disk, 11), 4, 4));

  // qemu-img writes a second image over it and finds every byte there.
  const auto second = content_bytes(nbd_disk, 12);
  const auto in2 = dir_ / "in2.img";
  write_all(in2, second);
  auto r = run_client({"qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", in2.string(), uri()});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output << output(p);
  r = run_client({"qemu-img", "compare", "-f", "raw", "-F", "raw", in2.string(), uri()});
  EXPECT_EQ(r.code, std::optional<int>(0)) << r.output << output(p);

  // fio writes with crc32c headers at queue depth 16, then reads and checks them.
  r = run_client({"fio", "--name=verify", "--ioengine=nbd", "--uri=" + uri(), "--rw=randwrite",
                  "--bs=4k", "--size=4m", "--iodepth=16", "--verify=crc32c", "--do_verify=1",
                  "--verify_fatal=1", "--output-format=json"});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output << output(p);
  const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  EXPECT_EQ(j.at("jobs").at(0).at("error").get<int>(), 0) << r.output;
  EXPECT_GT(j.at("jobs").at(0).at("read").at("io_bytes").get<uint64_t>(), 0u) << r.output;

  // SIGTERM: the export finishes, stops and shuts the session down; the pipeline ends too.
  nbd->signal(SIGTERM);
  EXPECT_EQ(nbd->wait(start_timeout), std::optional<int>(0)) << output(p);
  EXPECT_EQ(p.service->wait(start_timeout), std::optional<int>(0)) << output(p);
  EXPECT_EQ(p.target->wait(start_timeout), std::optional<int>(0)) << output(p);
  EXPECT_NE(nbd->output().find("0 IO errors"), std::string::npos) << nbd->output();
  EXPECT_FALSE(fs::exists(socket_));
}

// Two IO workers, each running its own connections to completion: nbdcopy's four connections
// are spread over both, and every byte comes back whichever worker wrote it and whichever reads.
TEST_F(nbd_pipeline, two_workers_share_the_connections_and_every_byte_comes_back) {
  if (!have("nbdcopy")) GTEST_SKIP() << "nbdcopy is not installed";
  pipeline p({.workers = 2, .block_count = nbd_blocks});
  ASSERT_TRUE(start(p, {}, control_timeout_s, 2)) << output(p);
  ASSERT_NO_FATAL_FAILURE(copy_in_and_out(p, content_bytes(nbd_disk, 21), 4, 3));
  nbd->signal(SIGTERM);
  EXPECT_EQ(nbd->wait(start_timeout), std::optional<int>(0)) << output(p);
  // In turn: with more than one connection in all, each worker served some.
  const std::string out = nbd->output();
  const std::string said = "connections per worker thread: ";
  const auto at = out.find(said);
  ASSERT_NE(at, std::string::npos) << out;
  unsigned first = 0, second = 0;
  ASSERT_EQ(std::sscanf(out.c_str() + at + said.size(), "%u, %u", &first, &second), 2) << out;
  EXPECT_GE(first, 1u) << out;
  EXPECT_GE(second, 1u) << out;
  EXPECT_NE(nbd->output().find("0 IO errors"), std::string::npos) << nbd->output();
}

TEST_F(nbd_pipeline, nbdinfo_starts_it_by_socket_activation) {
  if (!have("nbdinfo")) GTEST_SKIP() << "nbdinfo is not installed";
  pipeline p({.block_count = nbd_blocks});
  ASSERT_TRUE(p.start_target() && p.start_service()) << p.all_output();
  std::vector<std::string> argv{"nbdinfo", "--json", "--", "["};
  for (auto& a : nbd_argv(p, {})) argv.push_back(a);
  argv.push_back("]");
  auto r = run_client(argv);
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output << p.all_output();
  // zcstore_nbd's own lines share the output file: the JSON starts at nbdinfo's first key.
  const auto at = r.output.find("{\n\"protocol\"");
  ASSERT_NE(at, std::string::npos) << r.output;
  const auto end = r.output.find("\n}\n", at);
  ASSERT_NE(end, std::string::npos) << r.output;
  const auto j = nlohmann::json::parse(r.output.substr(at, end + 3 - at));
  const auto& e = j.at("exports").at(0);
  EXPECT_EQ(e.at("export-size").get<uint64_t>(), nbd_disk) << r.output;
  // Any byte range is served (read-modify-write below the block); whole blocks preferred.
  EXPECT_EQ(e.at("block_size_minimum").get<uint32_t>(), 1u) << r.output;
  EXPECT_EQ(e.at("block_size_preferred").get<uint32_t>(), block_size) << r.output;
  EXPECT_TRUE(e.at("can_flush").get<bool>()) << r.output;
  // nbdinfo ended the export with SIGTERM: the session was shut down in order.
  EXPECT_EQ(p.service->wait(start_timeout), std::optional<int>(0)) << p.all_output();
  EXPECT_EQ(p.target->wait(start_timeout), std::optional<int>(0)) << p.all_output();
}

TEST_F(nbd_pipeline, a_lost_service_ends_the_export_with_status_1) {
  pipeline p({.block_count = nbd_blocks});
  ASSERT_TRUE(start(p)) << output(p);
  p.service->signal(SIGKILL);
  EXPECT_EQ(nbd->wait(start_timeout), std::optional<int>(1)) << output(p);
  EXPECT_NE(nbd->output().find("lost the service"), std::string::npos) << nbd->output();
}

// A service that stops answering (SIGSTOP: its connections stay up): the requests waiting for it
// fail with EIO once the IO deadline passes (twice the control timeout), and the export ends
// with status 1 rather than serving on with a worker that gave up.
TEST_F(nbd_pipeline, a_silent_service_fails_the_requests_and_ends_the_export) {
  if (!have("nbdcopy")) GTEST_SKIP() << "nbdcopy is not installed";
  pipeline p({.block_count = nbd_blocks});
  ASSERT_TRUE(start(p)) << output(p);
  p.service->signal(SIGSTOP);
  auto r = run_client({"nbdcopy", uri(), (dir_ / "out.img").string()});
  p.service->signal(SIGCONT);
  EXPECT_TRUE(r.code.has_value() && *r.code != 0) << r.output << output(p);
  EXPECT_EQ(nbd->wait(start_timeout), std::optional<int>(1)) << output(p);
  EXPECT_NE(nbd->output().find("gave up on the service"), std::string::npos) << nbd->output();
}

// An idle export whose service stops answering: no request waits for it, but keep-alive finds it
// and the export ends with status 1 instead of holding its clients for ever.
TEST_F(nbd_pipeline, an_idle_export_finds_a_frozen_service_by_keep_alive) {
  pipeline p({.block_count = nbd_blocks});
  ASSERT_TRUE(start(p, {"--keep-alive-timeout", "2"})) << output(p);
  p.service->signal(SIGSTOP);
  ASSERT_TRUE(p.service->wait_stopped(start_timeout));
  const auto code = nbd->wait(2s + std::chrono::seconds(control_timeout_s) + exit_margin);
  p.service->signal(SIGCONT);
  EXPECT_EQ(code, std::optional<int>(1)) << output(p);
  EXPECT_NE(nbd->output().find("answered no keep-alive"), std::string::npos) << nbd->output();
}

// Reconnect seen from a real client (--reconnect-timeout): fio writes with crc32c headers and
// reads them back while the target is killed with -9 and started again on the same backing file
// and port; the service holds the IOs, dials the target again and relays them, and fio finishes
// without an error, every block verified. zcstore_nbd's own IO deadline (twice its
// --control-timeout) covers the time the target is away.
TEST_F(nbd_pipeline, fio_verifies_every_block_across_a_target_restart) {
  if (!have("fio")) GTEST_SKIP() << "fio is not installed";
  pipeline p({.block_count = nbd_blocks,
              .backing_file = (dir_ / "disk.img").string(),
              .service_flags = {"--reconnect-timeout", "30"}});
  ASSERT_TRUE(start(p, {}, 30)) << output(p);
  subprocess fio({"/usr/bin/fio", "--name=verify", "--ioengine=nbd", "--uri=" + uri(),
                  "--rw=randwrite", "--bs=4k", "--size=16m", "--loops=4", "--iodepth=16",
                  "--verify=crc32c", "--do_verify=1", "--verify_fatal=1", "--output-format=json"},
                 {{"PATH", "/usr/bin:/bin:/usr/sbin:/sbin"}});
  std::this_thread::sleep_for(500ms);  // fio is writing
  ASSERT_TRUE(fio.running()) << fio.output() << output(p);
  p.target->signal(SIGKILL);
  ASSERT_TRUE(p.target->wait(start_timeout).has_value());
  ASSERT_TRUE(p.service->wait_for_output("holding the host's IOs", start_timeout)) << output(p);
  ASSERT_TRUE(p.start_target()) << output(p);
  ASSERT_TRUE(p.service->wait_for_output("reconnected to the target", start_timeout)) << output(p);
  const auto code = fio.wait(client_limit);
  ASSERT_EQ(code, std::optional<int>(0)) << fio.output() << output(p);
  const std::string out = fio.output();
  const auto j = nlohmann::json::parse(out.substr(out.find('{')));
  EXPECT_EQ(j.at("jobs").at(0).at("error").get<int>(), 0) << out;
  EXPECT_GT(j.at("jobs").at(0).at("read").at("io_bytes").get<uint64_t>(), 0u) << out;
  nbd->signal(SIGTERM);
  EXPECT_EQ(nbd->wait(start_timeout), std::optional<int>(0)) << output(p);
}

// Fencing seen from a real client: the target stalls (SIGSTOP) past the control timeout while
// qemu-io writes, the write fails (EIO) rather than hang, the target resumes (SIGCONT) with what
// it had queued, and no acknowledged byte changes: a fresh pipeline over the same backing file
// reads back every block as it was acknowledged, except the blocks of the failed write, each of
// which holds its old or its new bytes, whole.
TEST_F(nbd_pipeline, a_stalled_target_changes_no_acknowledged_byte) {
  for (const char* c : {"qemu-img", "qemu-io", "nbdcopy"})
    if (!have(c)) GTEST_SKIP() << c << " is not installed";
  constexpr uint32_t blocks = 1024;  // 4 MiB
  constexpr uint64_t disk = uint64_t(blocks) * block_size;
  constexpr uint64_t failed_at = 64 * 1024, failed_length = 64 * 1024;
  const pipeline_options options{.block_count = blocks,
                                 .backing_file = (dir_ / "disk.img").string()};
  const auto image = content_bytes(disk, 31);
  const auto in = dir_ / "in.img";
  write_all(in, image);
  {
    pipeline p(options);
    ASSERT_TRUE(start(p)) << output(p);
    auto acked =
        run_client({"qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", in.string(), uri()});
    ASSERT_EQ(acked.code, std::optional<int>(0)) << acked.output << output(p);
    p.target->signal(SIGSTOP);
    ASSERT_TRUE(p.target->wait_stopped(start_timeout));
    auto failed = run_client({"qemu-io", "-f", "raw", uri(), "-c",
                              fmt::format("write -P 0x77 {} {}", failed_at, failed_length)});
    p.target->signal(SIGCONT);
    EXPECT_TRUE(failed.code.has_value()) << "qemu-io hung\n" << output(p);
    EXPECT_NE(failed.output.find("error"), std::string::npos) << failed.output << output(p);
    // The session ends: the service fenced and answered, then the export ends.
    EXPECT_TRUE(nbd->wait(start_timeout).has_value()) << output(p);
    EXPECT_TRUE(p.service->wait(start_timeout).has_value()) << output(p);
    EXPECT_NE(p.service->output().find("fencing"), std::string::npos) << output(p);
    // The resumed target serves what it had queued, hears the service is gone, and ends.
    if (!p.target->wait(start_timeout).has_value()) p.target->signal(SIGKILL);
    ASSERT_TRUE(p.target->wait(start_timeout).has_value());
  }
  pipeline again(options);
  ASSERT_TRUE(start(again)) << output(again);
  auto out = run_client({"nbdcopy", uri(), (dir_ / "out.img").string()});
  ASSERT_EQ(out.code, std::optional<int>(0)) << out.output << output(again);
  const auto back = read_all(dir_ / "out.img");
  ASSERT_EQ(back.size(), image.size());
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint64_t at = b * block_size;
    const bool same = std::memcmp(back.data() + at, image.data() + at, block_size) == 0;
    if (at >= failed_at && at < failed_at + failed_length) {
      const bool all_new = std::all_of(back.begin() + at, back.begin() + at + block_size,
                                       [](char c) { return c == 0x77; });
      EXPECT_TRUE(same || all_new) << "block " << b << " of the failed write is torn";
    } else {
      ASSERT_TRUE(same) << "acknowledged block " << b << " changed";
    }
  }
}

// Through the real pipeline, two connections at once: one writes whole blocks, the other a few
// hundred bytes inside each of them, every request in flight together. Whichever lands last, the
// bytes only the whole-block write covers are its own: a read-modify-write that read a block
// before the whole-block write landed and wrote it back after would bring the old bytes back over
// an acknowledged write.
constexpr const char* aligned_beside_unaligned_script = R"PY(
import nbd
BLOCK, N = 4096, 256
h1, h2 = nbd.NBD(), nbd.NBD()
for h in (h1, h2):
    h.connect_uri(URI)
whole, part = b'\xa0' * BLOCK, b'\xb0' * 200
# A different, non-zero pattern underneath first, so old bytes are visible.
for i in range(N):
    h1.pwrite(b'\x11' * BLOCK, i * BLOCK)
bufs = []
for i in range(N):
    b2 = nbd.Buffer.from_bytearray(bytearray(part))
    b1 = nbd.Buffer.from_bytearray(bytearray(whole))
    bufs += [b1, b2]
    h2.aio_pwrite(b2, i * BLOCK + 100)
    h1.aio_pwrite(b1, i * BLOCK)
while h1.aio_in_flight() or h2.aio_in_flight():
    h1.poll(10)
    h2.poll(10)
for i in range(N):
    got = h1.pread(BLOCK, i * BLOCK)
    outside = got[:100] + got[300:]
    assert outside == b'\xa0' * (BLOCK - 200), 'block %d: the whole-block write was undone' % i
    assert set(got[100:300]) <= {0xa0, 0xb0}, 'block %d: foreign bytes' % i
print('all blocks ok')
)PY";

TEST_F(nbd_pipeline, a_whole_block_write_beside_a_sector_write_is_never_undone) {
  if (!have("nbdsh")) GTEST_SKIP() << "nbdsh is not installed";
  pipeline p({.block_count = nbd_blocks});
  ASSERT_TRUE(start(p)) << output(p);
  const auto script = dir_ / "interleave.py";
  std::ofstream(script) << "URI = '" << uri() << "'\n" << aligned_beside_unaligned_script;
  auto r = run_client({"nbdsh", "-n", "-c", "exec(open('" + script.string() + "').read())"});
  EXPECT_EQ(r.code, std::optional<int>(0)) << r.output << output(p);
  EXPECT_NE(r.output.find("all blocks ok"), std::string::npos) << r.output;
}

TEST_F(nbd_pipeline, bad_flags_are_one_line_and_status_2) {
  subprocess none({binary("zcstore_nbd"), "--cpu", "0"});
  EXPECT_EQ(none.wait(start_timeout), std::optional<int>(2)) << none.output();
  EXPECT_NE(none.output().find("nowhere to serve"), std::string::npos) << none.output();
  subprocess listen({binary("zcstore_nbd"), "--cpu", "0", "--listen", "1.2.3:80"});
  EXPECT_EQ(listen.wait(start_timeout), std::optional<int>(2)) << listen.output();
  subprocess zero(
      {binary("zcstore_nbd"), "--cpu", "0", "--socket", "/tmp/x", "--transaction-count", "0"});
  EXPECT_EQ(zero.wait(start_timeout), std::optional<int>(2)) << zero.output();
  subprocess tls_without_keys(
      {binary("zcstore_nbd"), "--cpu", "0", "--socket", "/tmp/x", "--tls", "require"});
  EXPECT_EQ(tls_without_keys.wait(start_timeout), std::optional<int>(2))
      << tls_without_keys.output();
  EXPECT_NE(tls_without_keys.output().find("--tls require needs --tls-psk FILE"), std::string::npos)
      << tls_without_keys.output();
  subprocess tls_mode({binary("zcstore_nbd"), "--cpu", "0", "--socket", "/tmp/x", "--tls", "yes"});
  EXPECT_EQ(tls_mode.wait(start_timeout), std::optional<int>(2)) << tls_mode.output();
  subprocess missing_keys(
      {binary("zcstore_nbd"), "--cpu", "0", "--socket", "/tmp/x", "--tls-psk", "/nonexistent.psk"});
  EXPECT_EQ(missing_keys.wait(start_timeout), std::optional<int>(2)) << missing_keys.output();
  EXPECT_NE(missing_keys.output().find("--tls-psk"), std::string::npos) << missing_keys.output();
}

// --max-connections reaches the server: one connection at most, so a second client is refused
// while a first holds its slot, and served once it has gone.
TEST_F(nbd_pipeline, max_connections_1_refuses_a_second_client_until_the_first_has_gone) {
  if (!have("nbdinfo")) GTEST_SKIP() << "nbdinfo is not installed";
  pipeline p({.block_count = nbd_blocks});
  ASSERT_TRUE(start(p, {"--max-connections", "1"})) << output(p);
  {
    // A client that takes the one slot: connected, the greeting read, nothing more said.
    const int holder = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(holder, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, socket_.c_str(), sizeof addr.sun_path - 1);
    ASSERT_EQ(::connect(holder, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    timeval tv{5, 0};
    ::setsockopt(holder, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char greeting[18];
    size_t got = 0;
    while (got < sizeof greeting) {
      const ssize_t n = ::recv(holder, greeting + got, sizeof greeting - got, 0);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    EXPECT_EQ(got, sizeof greeting);
    auto refused = run_client({"nbdinfo", "--size", uri()});
    EXPECT_NE(refused.code, std::optional<int>(0)) << refused.output;
    ::close(holder);
  }
  // Its slot comes back once the server has seen it close.
  std::optional<int> code;
  std::string said;
  for (int attempt = 0; attempt < 50 && code != std::optional<int>(0); ++attempt) {
    auto r = run_client({"nbdinfo", "--size", uri()});
    code = r.code;
    said = r.output;
    if (code != std::optional<int>(0)) std::this_thread::sleep_for(100ms);
  }
  ASSERT_EQ(code, std::optional<int>(0)) << said << output(p);
  EXPECT_EQ(said, std::to_string(nbd_disk) + "\n");
}

// A client that sends a WRITE's header and part of its payload, then nothing: zcstore_nbd closes
// it at --request-timeout and frees what it held, and serves others meanwhile and after.
constexpr const char* stalled_writer_script = R"PY(
import socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(20)
s.connect(SOCK)
def take(n):
    b = b''
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            sys.exit('closed early')
        b += c
    return b
take(18)                                         # greeting
s.sendall(struct.pack('>I', 3))                  # fixed newstyle, no zeroes
s.sendall(struct.pack('>QII', 0x49484156454F5054, 7, 6) + b'\0' * 6)  # NBD_OPT_GO, export ""
while True:                                      # replies up to the ACK
    magic, opt, kind, length = struct.unpack('>QIII', take(20))
    take(length)
    if kind == 1:
        break
    if kind & 0x80000000:
        sys.exit('GO refused')
s.sendall(struct.pack('>IHHQQI', 0x25609513, 0, 1, 7, 0, 4096) + b'x' * 100)  # WRITE, 100 of 4096
print('stalled', flush=True)
try:
    print('closed' if s.recv(1) == b'' else 'data')
except socket.timeout:
    print('still open')
)PY";

TEST_F(nbd_pipeline, a_write_whose_payload_stops_is_closed_at_the_request_timeout) {
  for (const char* c : {"python3", "nbdinfo"})
    if (!have(c)) GTEST_SKIP() << c << " is not installed";
  pipeline p({.block_count = nbd_blocks});
  ASSERT_TRUE(start(p, {"--request-timeout", "2"})) << output(p);
  const auto script = dir_ / "stall.py";
  std::ofstream(script) << "SOCK = '" << socket_ << "'\n" << stalled_writer_script;
  subprocess stalled({"/usr/bin/python3", script.string()});
  ASSERT_TRUE(stalled.wait_for_output("stalled", start_timeout)) << stalled.output();
  // Served while the stalled one holds its memory.
  auto r = run_client({"nbdinfo", "--size", uri()});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output << output(p);
  EXPECT_EQ(stalled.wait(30s), std::optional<int>(0)) << stalled.output();
  EXPECT_NE(stalled.output().find("closed"), std::string::npos) << stalled.output();
  EXPECT_TRUE(nbd->wait_for_output("did not send a WRITE's payload within 2000 ms", 10s))
      << nbd->output();
}

// --tls-psk alone means TLS is required: a client with the key copies an image in and out through
// the zero-copy pipeline, a plain client gets nothing.
TEST_F(nbd_pipeline, tls_psk_export_serves_the_key_holder_only) {
  if (!have("nbdcopy")) GTEST_SKIP() << "nbdcopy is not installed";
  const auto keys = dir_ / "keys.psk";
  std::ofstream(keys) << "alice:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n";
  pipeline p({.block_count = nbd_blocks});
  ASSERT_TRUE(start(p, {"--tls-psk", keys.string()})) << output(p);
  const std::string tls_uri =
      "nbds+unix://alice@/?socket=" + socket_ + "&tls-psk-file=" + keys.string();
  const auto image = content_bytes(nbd_disk, 31);
  const auto in = dir_ / "in.img";
  std::ofstream(in, std::ios::binary)
      .write(image.data(), static_cast<std::streamsize>(image.size()));
  auto r = run_client({"nbdcopy", "--connections", "2", in.string(), tls_uri});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output << output(p);
  r = run_client({"nbdcopy", tls_uri, (dir_ / "out.img").string()});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output << output(p);
  EXPECT_TRUE(read_all(dir_ / "out.img") == image) << "read back other bytes over TLS";
  r = run_client({"nbdcopy", uri(), (dir_ / "plain.img").string()});
  EXPECT_NE(r.code, std::optional<int>(0)) << r.output;
  nbd->signal(SIGTERM);
  ASSERT_EQ(nbd->wait(start_timeout), std::optional<int>(0)) << output(p);
  EXPECT_NE(nbd->output().find("TLS required (pre-shared keys of"), std::string::npos);
  // nbdcopy opens as many connections as it likes; none failed, the plain one never started TLS.
  EXPECT_NE(nbd->output().find(" sessions, 0 failed handshakes"), std::string::npos)
      << nbd->output();
  EXPECT_EQ(nbd->output().find("TLS: 0 sessions"), std::string::npos) << nbd->output();
}

// ---- zcstore_local --nbd

// zcstore_local with zcstore_nbd at the front, until SIGINT.
class local_nbd {
 public:
  local_nbd(const std::string& pipeline, const std::string& socket, std::vector<std::string> extra)
      : socket_(socket) {
    std::vector<std::string> argv{binary("zcstore_local"),
                                  pipeline,
                                  "--nbd",
                                  socket,
                                  "--poll-mode",
                                  "event",
                                  "--control-timeout",
                                  std::to_string(control_timeout_s)};
    for (auto& e : extra) argv.push_back(std::move(e));
    process = std::make_unique<subprocess>(
        argv, std::map<std::string, std::string>{{"UCX_MM_ERROR_HANDLING", "y"},
                                                 {"UCX_KEEPALIVE_INTERVAL", "1s"},
                                                 {"UCX_WARN_UNUSED_ENV_VARS", "n"}});
  }
  bool ready() { return process->wait_for_output("serving NBD on " + socket_, 60s); }
  // Ctrl-C: zcstore_nbd ends the session in order, then everything behind it ends.
  std::optional<int> interrupt() {
    process->signal(SIGINT);
    return process->wait(40s);
  }
  std::unique_ptr<subprocess> process;

 private:
  std::string socket_;
};

TEST_F(nbd_pipeline, local_zero_copy_keeps_every_byte_across_a_restart_over_backing_dir) {
  for (const char* c : {"nbdcopy", "qemu-img"})
    if (!have(c)) GTEST_SKIP() << c << " is not installed";
  const auto backing = dir_ / "new" / "disk";  // made by zcstore_local, parents included
  const std::vector<std::string> extra{"--backing-dir", backing.string(), "--target-size",
                                       std::to_string(nbd_disk)};
  const auto image = content_bytes(nbd_disk, 21);
  const auto in = dir_ / "in.img";
  write_all(in, image);
  {
    local_nbd first("zero-copy", socket_, extra);
    ASSERT_TRUE(first.ready()) << first.process->output();
    EXPECT_NE(first.process->output().find("made the folder " + backing.string()),
              std::string::npos)
        << first.process->output();
    auto r =
        run_client({"qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", in.string(), uri()});
    ASSERT_EQ(r.code, std::optional<int>(0)) << r.output << first.process->output();
    EXPECT_EQ(first.interrupt(), std::optional<int>(128 + SIGINT)) << first.process->output();
  }
  EXPECT_TRUE(fs::exists(backing / "target-0.img"));
  local_nbd second("zero-copy", socket_, extra);
  ASSERT_TRUE(second.ready()) << second.process->output();
  auto r = run_client({"nbdcopy", uri(), (dir_ / "out.img").string()});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output << second.process->output();
  EXPECT_TRUE(read_all(dir_ / "out.img") == image) << "the restarted disk holds other bytes";
  EXPECT_EQ(second.interrupt(), std::optional<int>(128 + SIGINT)) << second.process->output();
}

// The pids of the `name` processes zcstore_local reported starting, in order.
std::vector<pid_t> started_pids(const std::string& output, const std::string& name) {
  std::vector<pid_t> pids;
  const std::string mark = "started " + name + " (pid ";
  for (auto at = output.find(mark); at != std::string::npos; at = output.find(mark, at + 1))
    pids.push_back(static_cast<pid_t>(std::stol(output.substr(at + mark.size()))));
  return pids;
}

// zcstore_local --nbd serves until it is stopped: a zcstore_nbd that dies is started again in
// its place while the target and service keep serving (--keep-serving), and what was written
// through the first is read back through the second.
TEST_F(nbd_pipeline, local_zero_copy_starts_a_killed_nbd_again_and_keeps_every_byte) {
  if (!have("nbdcopy")) GTEST_SKIP() << "nbdcopy is not installed";
  local_nbd local("zero-copy", socket_, {"--target-size", std::to_string(nbd_disk)});
  ASSERT_TRUE(local.ready()) << local.process->output();
  const auto image = content_bytes(nbd_disk, 23);
  const auto in = dir_ / "in.img";
  std::ofstream(in, std::ios::binary)
      .write(image.data(), static_cast<std::streamsize>(image.size()));
  auto r = run_client({"nbdcopy", in.string(), uri()});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output << local.process->output();

  const auto first = started_pids(local.process->output(), "nbd");
  ASSERT_EQ(first.size(), 1u) << local.process->output();
  ASSERT_EQ(::kill(first[0], SIGKILL), 0);
  ASSERT_TRUE(local.process->wait_for_output("nbd ended (killed by signal 9", 20s))
      << local.process->output();
  ASSERT_TRUE(local.process->wait_for_output("starting it again", 20s)) << local.process->output();
  // The second zcstore_nbd is up once it logs that it serves.
  std::vector<pid_t> now;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while ((now = started_pids(local.process->output(), "nbd")).size() < 2) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << local.process->output();
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(local.process->wait_for_output(
      "[" + std::to_string(now[1]) + "][app][info] serving NBD on", 30s))
      << local.process->output();

  r = run_client({"nbdcopy", uri(), (dir_ / "out.img").string()});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output << local.process->output();
  EXPECT_TRUE(read_all(dir_ / "out.img") == image) << "the second zcstore_nbd reads other bytes";
  // The servers kept serving: one target and one service process all along, the service's
  // first session ended by the kill.
  EXPECT_EQ(started_pids(local.process->output(), "target").size(), 1u);
  EXPECT_EQ(started_pids(local.process->output(), "service").size(), 1u);
  EXPECT_NE(local.process->output().find("session 1 ended (failed"), std::string::npos)
      << local.process->output();
  EXPECT_EQ(local.interrupt(), std::optional<int>(128 + SIGINT)) << local.process->output();
}

// A zcstore_nbd that refuses its command line is not started again and again: zcstore_local
// stops everything and exits 2 with it.
TEST_F(nbd_pipeline, local_nbd_with_a_bad_flag_ends_the_launcher_with_exit_2) {
  local_nbd local("zero-copy", socket_, {"--", "--no-such-flag"});
  EXPECT_EQ(local.process->wait(40s), std::optional<int>(2)) << local.process->output();
  EXPECT_NE(local.process->output().find("nbd refused its command line (exit code 2)"),
            std::string::npos)
      << local.process->output();
  EXPECT_EQ(local.process->output().find("starting it again"), std::string::npos);
}

TEST_F(nbd_pipeline, local_gga_serves_any_data_over_nbd) {
  if (!have("nbdcopy")) GTEST_SKIP() << "nbdcopy is not installed";
  local_nbd gga("gga", socket_, {});
  ASSERT_TRUE(gga.ready()) << gga.process->output();
  // Text compresses well, as gga needs; 16 MiB is the generated disk's size.
  std::string text;
  for (uint64_t i = 0; text.size() < nbd_disk; ++i)
    text += "block " + std::to_string(i * 7919 % 10007) + " of the nbd over gga test\n";
  text.resize(nbd_disk);
  const auto in = dir_ / "in.txt";
  {
    std::ofstream f(in, std::ios::binary);
    f << text;
  }
  // Blocks that do not compress are stored raw (image format v2) and read back byte for byte.
  auto r = run_client({"nbdsh", "-u", uri(), "-c",
                       "import os\n"
                       "data = os.urandom(65536)\n"
                       "h.pwrite(data, 8192)\n"
                       "print('same' if h.pread(65536, 8192) == data else 'differs')\n"
                       "h.zero(16384, 12288)\n"
                       "back = h.pread(65536, 8192)\n"
                       "print('zeroes-ok' if back == data[:4096] + bytes(16384) + data[20480:]"
                       " else 'zeroes-wrong')\n"
                       "h.trim(65536, 8192)\n"
                       "print('trim-zeros' if h.pread(65536, 8192) == bytes(65536) else "
                       "'trim-kept')\n"
                       "h.trim(1 << 20, 4 << 20)\n"
                       "print('hole-zeros' if h.pread(1 << 20, 4 << 20) == bytes(1 << 20) else "
                       "'hole-data')\n"});
  EXPECT_EQ(r.code, std::optional<int>(0)) << r.output << gga.process->output();
  EXPECT_NE(r.output.find("same"), std::string::npos) << r.output;
  // gga serves the sparse IO types (image format v2): the zeroed and trimmed blocks are blank on
  // the three targets and read as zeros.
  EXPECT_NE(r.output.find("zeroes-ok"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("trim-zeros"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("hole-zeros"), std::string::npos) << r.output;
  // The map (the union of the targets' maps): the generated disk is allocated everywhere but in
  // the 1 MiB trimmed, give or take a block at its ends (their entries share a target block with
  // the slots beside them).
  r = run_client({"nbdinfo", "--map", uri()});
  EXPECT_EQ(r.code, std::optional<int>(0)) << r.output << gga.process->output();
  const nbd_extents map = parse_nbdinfo_map(r.output);
  auto type_at = [&](uint64_t offset) {
    for (const auto& e : map)
      if (offset >= e[0] && offset - e[0] < e[1]) return int64_t(e[2]);
    return int64_t(-1);
  };
  constexpr uint64_t mib = 1u << 20, block = 8192;
  for (uint64_t at : {uint64_t(0), 4 * mib - block, 5 * mib, nbd_disk - 1})
    EXPECT_EQ(type_at(at), 0) << "at " << at << "\n" << r.output;
  for (uint64_t at = 4 * mib + block; at < 5 * mib - block; at += block)
    EXPECT_EQ(type_at(at), 3) << "at " << at << "\n" << r.output;
  r = run_client({"nbdcopy", "--connections", "2", in.string(), uri()});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output << gga.process->output();
  r = run_client({"nbdcopy", uri(), (dir_ / "out.txt").string()});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output << gga.process->output();
  const auto back = read_all(dir_ / "out.txt");
  EXPECT_TRUE(std::string(back.begin(), back.end()) == text) << "gga returned other bytes";
  EXPECT_EQ(gga.interrupt(), std::optional<int>(128 + SIGINT)) << gga.process->output();
}

// ---- sparse requests through the zero-copy pipeline

// "nbdinfo --map" of the export; its output in *text.
nbd_extents nbd_map(const std::string& uri, std::string* text) {
  auto r = run_client({"nbdinfo", "--map", uri});
  *text = r.output;
  return r.code == std::optional<int>(0) ? parse_nbdinfo_map(r.output) : nbd_extents{};
}

constexpr uint64_t mib = 1u << 20;

// A 256 MiB memory target with 4 MiB written: the map shows exactly that; WRITE_ZEROES and TRIM
// reach the target (no data written) and the map follows; nbdcopy copies the export byte for byte.
TEST_F(nbd_pipeline, sparse_requests_reach_a_memory_target_and_the_map_shows_them) {
  for (const char* c : {"nbdsh", "nbdinfo", "nbdcopy"})
    if (!have(c)) GTEST_SKIP() << c << " is not installed";
  pipeline p({.block_count = 65536});
  ASSERT_TRUE(start(p)) << output(p);
  const uint64_t disk = 256 * mib;
  auto r = run_client({"nbdsh", "-u", uri(), "-c",
                       "import os\n"
                       "data = os.urandom(4 << 20)\n"
                       "h.pwrite(data, 64 << 20)\n"
                       "open('" +
                           (dir_ / "data.bin").string() + "', 'wb').write(data)\n"});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output << output(p);
  std::string text;
  using extents = nbd_extents;
  EXPECT_EQ(nbd_map(uri(), &text),
            (extents{{0, 64 * mib, 3}, {64 * mib, 4 * mib, 0}, {68 * mib, disk - 68 * mib, 3}}))
      << text << output(p);

  r = run_client({"nbdsh", "-u", uri(), "-c",
                  "h.zero(1 << 20, 65 << 20)\n"
                  "h.trim(1 << 20, 67 << 20)\n"
                  "print('zeros' if h.pread(1 << 20, 65 << 20) == bytes(1 << 20) else 'data')\n"});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output << output(p);
  EXPECT_NE(r.output.find("zeros"), std::string::npos) << r.output;
  EXPECT_EQ(nbd_map(uri(), &text), (extents{{0, 64 * mib, 3},
                                            {64 * mib, mib, 0},
                                            {65 * mib, mib, 3},
                                            {66 * mib, mib, 0},
                                            {67 * mib, disk - 67 * mib, 3}}))
      << text << output(p);

  r = run_client({"nbdcopy", uri(), (dir_ / "out.img").string()});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output << output(p);
  const auto out = read_all(dir_ / "out.img");
  const auto data = read_all(dir_ / "data.bin");
  ASSERT_EQ(out.size(), disk);
  ASSERT_EQ(data.size(), 4 * mib);
  auto zeros = [&](uint64_t from, uint64_t to) {
    return std::all_of(out.begin() + from, out.begin() + to, [](char b) { return b == 0; });
  };
  EXPECT_TRUE(zeros(0, 64 * mib));
  EXPECT_TRUE(std::equal(data.begin(), data.begin() + mib, out.begin() + 64 * mib));
  EXPECT_TRUE(zeros(65 * mib, 66 * mib));
  EXPECT_TRUE(std::equal(data.begin() + 2 * mib, data.begin() + 3 * mib, out.begin() + 66 * mib));
  EXPECT_TRUE(zeros(67 * mib, disk));

  // What crossed the wire: the 4 MiB written, the 2 MiB still allocated that nbdcopy read and the
  // 1 MiB the test read back, not the 256 MiB of the export; one discard and one zeroing.
  nbd->signal(SIGTERM);
  ASSERT_EQ(nbd->wait(start_timeout), std::optional<int>(0)) << output(p);
  ASSERT_EQ(p.target->wait(start_timeout), std::optional<int>(0)) << output(p);
  const std::string& log = p.target->output();
  const auto at = log.find("target core");
  ASSERT_NE(at, std::string::npos) << log;
  uint64_t core = 0, reads = 0, read_bytes = 0, writes = 0, written = 0, discards = 0, zeroes = 0;
  ASSERT_EQ(std::sscanf(log.c_str() + at,
                        "target core %lu: reads %lu (%lu bytes), writes %lu (%lu bytes), discards "
                        "%lu, write zeroes %lu",
                        &core, &reads, &read_bytes, &writes, &written, &discards, &zeroes),
            7)
      << log;
  EXPECT_EQ(written, 4 * mib) << log;
  EXPECT_LE(read_bytes, 4 * mib) << log;
  EXPECT_EQ(discards, 1u) << log;
  EXPECT_EQ(zeroes, 1u) << log;
}

// TRIM on a --backing-file target punches a hole in the file: its blocks are freed (SEEK_HOLE
// finds the hole, the file takes less space) and the range reads back as zeros.
TEST_F(nbd_pipeline, trim_punches_a_hole_in_a_backing_file) {
  for (const char* c : {"nbdsh", "nbdinfo"})
    if (!have(c)) GTEST_SKIP() << c << " is not installed";
  const auto file = dir_ / "disk.img";
  pipeline p({.block_count = 16384, .backing_file = file.string()});
  ASSERT_TRUE(start(p)) << output(p);
  auto r = run_client({"nbdsh", "-u", uri(), "-c",
                       "import os\n"
                       "h.pwrite(os.urandom(8 << 20), 0)\n"
                       "h.flush()\n"});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output << output(p);
  struct stat before {};
  ASSERT_EQ(::stat(file.c_str(), &before), 0);
  r = run_client({"nbdsh", "-u", uri(), "-c",
                  "h.trim(4 << 20, 2 << 20)\n"
                  "h.flush()\n"
                  "print('zeros' if h.pread(4 << 20, 2 << 20) == bytes(4 << 20) else 'data')\n"});
  ASSERT_EQ(r.code, std::optional<int>(0)) << r.output << output(p);
  EXPECT_NE(r.output.find("zeros"), std::string::npos) << r.output;
  struct stat after {};
  ASSERT_EQ(::stat(file.c_str(), &after), 0);
  EXPECT_LE(after.st_blocks, before.st_blocks - int64_t(4 * mib / 512)) << before.st_blocks;
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(::lseek(fd, off_t(2 * mib), SEEK_HOLE), off_t(2 * mib));
  EXPECT_EQ(::lseek(fd, off_t(2 * mib), SEEK_DATA), off_t(6 * mib));
  ::close(fd);
  std::string text;
  const auto map = nbd_map(uri(), &text);
  const std::array<uint64_t, 3> hole{2 * mib, 4 * mib, 3};
  EXPECT_NE(std::find(map.begin(), map.end(), hole), map.end()) << text << output(p);
}

// ---- a real file system on the export: nbdfuse + loop device + ext4

// Runs a system tool (absolute path), bounded.
client_result run_tool(const std::string& path, std::vector<std::string> args) {
  args.insert(args.begin(), path);
  subprocess p(std::move(args), {{"PATH", "/usr/bin:/bin:/usr/sbin:/sbin"}});
  auto code = p.wait(client_limit);
  return {code, p.output()};
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Undoes whatever was set up, in reverse order, whether the test passed or not.
struct fs_stack {
  std::vector<std::function<void()>> undo;
  ~fs_stack() {
    for (auto it = undo.rbegin(); it != undo.rend(); ++it) (*it)();
  }
};

// Why this machine cannot loop-mount an ext4 image (a container without loop devices or mount
// rights), or empty when it can: probed on a plain file, so that a failure later is the export's.
std::string loop_mount_unavailable(const fs::path& dir) {
  if (::geteuid() != 0) return "needs root (losetup, mount)";
  for (const char* dev : {"/dev/fuse", "/dev/loop-control"})
    if (::access(dev, R_OK | W_OK) != 0) return std::string(dev) + " is not usable";
  for (const char* tool : {"/usr/bin/nbdfuse", "/usr/sbin/losetup", "/usr/sbin/mkfs.ext4",
                           "/usr/bin/mount", "/usr/bin/umount", "/usr/sbin/e2fsck"})
    if (::access(tool, X_OK) != 0) return std::string(tool) + " is not installed";
  const auto image = dir / "probe.img";
  { std::ofstream create(image); }
  fs::resize_file(image, 8u << 20);
  auto loop = run_tool("/usr/sbin/losetup", {"-f", "--show", image.string()});
  if (loop.code != std::optional<int>(0)) return "losetup: " + trimmed(loop.output);
  const std::string dev = trimmed(loop.output);
  fs_stack stack;
  stack.undo.push_back([dev] { (void)run_tool("/usr/sbin/losetup", {"-d", dev}); });
  auto mk = run_tool("/usr/sbin/mkfs.ext4", {"-q", "-F", dev});
  if (mk.code != std::optional<int>(0)) return "mkfs.ext4 on a loop device: " + trimmed(mk.output);
  fs::create_directories(dir / "probe");
  auto mnt = run_tool("/usr/bin/mount", {dev, (dir / "probe").string()});
  if (mnt.code != std::optional<int>(0)) return "mount of a loop device: " + trimmed(mnt.output);
  (void)run_tool("/usr/bin/umount", {(dir / "probe").string()});
  return {};
}

// nbdfuse shows the export on `socket` as a file; a loop device over it carries an ext4 file
// system that is made, mounted, written, checked with e2fsck and, through a fresh nbdfuse and
// loop device (no cache of the first), mounted again to read every byte back.
void ext4_round_trip(const fs::path& dir, const std::string& socket,
                     const std::function<std::string()>& output) {
  const auto fuse_dir = dir / "fuse";
  const auto mount_dir = dir / "mnt";
  fs::create_directories(fuse_dir);
  fs::create_directories(mount_dir);
  const auto content = content_bytes(3u << 20, 21);

  // nbdfuse + losetup, undone by `stack`; returns the loop device.
  auto attach = [&](fs_stack& stack) -> std::string {
    auto fuse = std::make_shared<subprocess>(
        std::vector<std::string>{"/usr/bin/nbdfuse", fuse_dir.string(), "--unix", socket});
    stack.undo.push_back([fuse, fuse_dir] {
      (void)run_tool("/usr/bin/umount", {fuse_dir.string()});
      (void)fuse->wait(5s);
    });
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!fs::exists(fuse_dir / "nbd") && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(20ms);
    if (!fs::exists(fuse_dir / "nbd")) {
      ADD_FAILURE() << "nbdfuse did not show the export: " << fuse->output() << output();
      return {};
    }
    // 512-byte sectors, the loop device's default: what is not a whole 4096-byte block of the
    // pipeline is served by read-modify-write.
    auto loop = run_tool("/usr/sbin/losetup", {"-f", "--show", (fuse_dir / "nbd").string()});
    if (loop.code != std::optional<int>(0)) {
      ADD_FAILURE() << "losetup: " << loop.output;
      return {};
    }
    const std::string dev = trimmed(loop.output);
    stack.undo.push_back([dev] { (void)run_tool("/usr/sbin/losetup", {"-d", dev}); });
    return dev;
  };

  {
    fs_stack stack;
    const std::string dev = attach(stack);
    ASSERT_FALSE(dev.empty());
    auto r = run_tool("/usr/sbin/mkfs.ext4", {"-q", "-F", dev});
    ASSERT_EQ(r.code, std::optional<int>(0)) << r.output << output();
    r = run_tool("/usr/bin/mount", {dev, mount_dir.string()});
    ASSERT_EQ(r.code, std::optional<int>(0)) << r.output << output();
    stack.undo.push_back([mount_dir] { (void)run_tool("/usr/bin/umount", {mount_dir.string()}); });
    write_all(mount_dir / "file.bin", content);
    r = run_tool("/usr/bin/umount", {mount_dir.string()});
    ASSERT_EQ(r.code, std::optional<int>(0)) << r.output << output();
    r = run_tool("/usr/sbin/e2fsck", {"-f", "-n", dev});
    EXPECT_EQ(r.code, std::optional<int>(0)) << "e2fsck: " << r.output;
  }
  {
    fs_stack stack;
    const std::string dev = attach(stack);
    ASSERT_FALSE(dev.empty());
    auto r = run_tool("/usr/bin/mount", {"-o", "ro", dev, mount_dir.string()});
    ASSERT_EQ(r.code, std::optional<int>(0)) << r.output << output();
    stack.undo.push_back([mount_dir] { (void)run_tool("/usr/bin/umount", {mount_dir.string()}); });
    EXPECT_TRUE(read_all(mount_dir / "file.bin") == content) << "the file read back differs";
  }
}

// The zero-copy pipeline's export carries an ext4 file system (ext4_round_trip).
TEST_F(nbd_pipeline, an_ext4_file_system_lives_on_the_export_through_nbdfuse_and_a_loop_device) {
  if (const std::string why = loop_mount_unavailable(dir_); !why.empty())
    GTEST_SKIP() << "this machine cannot loop-mount a file system: " << why;
  pipeline p({.block_count = nbd_blocks});
  ASSERT_TRUE(start(p)) << output(p);
  ext4_round_trip(dir_, socket_, [&] { return output(p); });
}

// The same over the gga pipeline: the file's random bytes are stored raw (image format v2), the
// file system's own blocks mostly compressed, every read verified.
TEST_F(nbd_pipeline, an_ext4_file_system_lives_on_the_gga_export) {
  if (const std::string why = loop_mount_unavailable(dir_); !why.empty())
    GTEST_SKIP() << "this machine cannot loop-mount a file system: " << why;
  local_nbd gga("gga", socket_, {});
  ASSERT_TRUE(gga.ready()) << gga.process->output();
  ext4_round_trip(dir_, socket_, [&] { return gga.process->output(); });
  EXPECT_EQ(gga.interrupt(), std::optional<int>(128 + SIGINT)) << gga.process->output();
  EXPECT_NE(gga.process->output().find("| Unrecoverable reads: 0"), std::string::npos)
      << gga.process->output();
}

}  // namespace
}  // namespace zc::test
