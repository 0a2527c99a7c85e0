// --tls-psk as a user runs it: a target with a key file serves the zero-copy service holding the
// same file end to end, and gives a stranger (plain TCP, or TLS with a wrong key) nothing; bad key
// files are refused at flag parsing. Every wait is bounded.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "pipeline.hpp"
#include "storage/control_message.hpp"
#include "storage/tls_psk.hpp"
#include "support/raw_client.hpp"
#include "support/subprocess.hpp"

namespace zc::test {
namespace {

// What `psktool -u zcstore -p keys.psk` writes: one identity with a 32-byte key.
const std::string good_key =
    "zcstore:5f0e2c9a4b7d1e3f8a6c2b0d9e7f1a3c5b4d6e8f0a1b2c3d4e5f60718293a4b5\n";
const std::string wrong_key =
    "zcstore:0000000000000000000000000000000000000000000000000000000000000000\n";

// A key file that is removed when the test ends.
class key_file {
 public:
  explicit key_file(const std::string& text)
      : path_(temp_file("zc-tls", std::vector<char>(text.begin(), text.end()))) {}
  ~key_file() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Enough once a whole frame arrived.
bool whole_frame(const std::vector<uint8_t>& got) {
  return storage::decode_frame(got, storage::default_max_body_size).outcome ==
         storage::decode_outcome::message;
}

// The frame a storage client starts with.
std::vector<uint8_t> query_frame() {
  return storage::encode(
      {storage::message_type::query_storage_request, 0, 0, storage::empty_payload{}});
}

// True when `bytes` start with a query_storage_response frame.
bool is_query_response(const std::vector<uint8_t>& bytes) {
  const auto r = storage::decode_frame(bytes, storage::default_max_body_size);
  return r.outcome == storage::decode_outcome::message &&
         r.msg.type == storage::message_type::query_storage_response;
}

pipeline_options with_keys(const key_file& target_keys, const key_file* service_keys) {
  pipeline_options o;
  o.target_flags = {"--tls-psk", target_keys.path()};
  if (service_keys) o.service_flags = {"--tls-psk", service_keys->path()};
  return o;
}

// The check the stranger test relies on: without --tls-psk the very same bytes get an answer.
TEST(tls_psk, without_a_key_file_a_plain_query_is_answered) {
  pipeline p;
  ASSERT_TRUE(p.start_target()) << p.all_output();
  raw_client stranger(p.port());
  ASSERT_TRUE(stranger.connected());
  stranger.send(query_frame());
  const auto [got, closed] = stranger.read(start_timeout, whole_frame);
  EXPECT_TRUE(is_query_response(got)) << p.all_output();
}

TEST(tls_psk, a_stranger_without_the_key_gets_no_answer) {
  key_file keys(good_key);
  pipeline p(with_keys(keys, nullptr));
  ASSERT_TRUE(p.start_target()) << p.all_output();
  {
    raw_client stranger(p.port());
    ASSERT_TRUE(stranger.connected());
    stranger.send(query_frame());
    const auto [got, closed] = stranger.read(start_timeout, whole_frame);
    EXPECT_TRUE(closed) << "the target kept a plain-text client connected";
    EXPECT_FALSE(is_query_response(got)) << "a plain-text client got a query response";
  }
  EXPECT_TRUE(p.target->wait_for_output("TLS handshake with 127.0.0.1:", start_timeout))
      << p.all_output();
  EXPECT_NE(p.target->output().find("failed"), std::string::npos) << p.all_output();
  // The stranger never became a session: the target is still waiting for its client.
  EXPECT_TRUE(p.target->running()) << p.all_output();
}

TEST(tls_psk, the_zero_copy_pipeline_runs_with_the_key) {
  key_file keys(good_key);
  pipeline p(with_keys(keys, &keys));
  ASSERT_TRUE(p.start_all("read_write_data_validity_test", 300)) << p.all_output();
  expect_success(p, 300);
  // Both ran with the key (and a_stranger_without_the_key_gets_no_answer shows that such a target
  // serves nothing but TLS).
  EXPECT_NE(p.target->output().find("\ttls_psk: \"" + keys.path() + "\""), std::string::npos)
      << p.all_output();
  EXPECT_NE(p.service->output().find("connected to storage target 0 (127.0.0.1:" +
                                     std::to_string(p.port()) + ") over TLS"),
            std::string::npos)
      << p.all_output();
  EXPECT_EQ(p.target->output().find("TLS handshake"), std::string::npos) << p.all_output();
}

TEST(tls_psk, a_service_with_a_wrong_key_is_refused_on_both_sides) {
  key_file keys(good_key);
  key_file wrong(wrong_key);
  pipeline p(with_keys(keys, &wrong));
  ASSERT_TRUE(p.start_target()) << p.all_output();
  ASSERT_TRUE(p.start_service(false)) << p.all_output();
  const auto code = p.service->wait(start_timeout);
  ASSERT_TRUE(code.has_value()) << p.all_output();
  EXPECT_NE(*code, 0) << p.all_output();
  const std::string expected = "TLS handshake with 127.0.0.1:" + std::to_string(p.port());
  EXPECT_NE(p.service->output().find(expected + " failed"), std::string::npos) << p.all_output();
  EXPECT_NE(p.service->output().find("wrong key"), std::string::npos) << p.all_output();
  EXPECT_TRUE(p.target->wait_for_output("wrong key", start_timeout)) << p.all_output();
  EXPECT_NE(p.target->output().find("TLS handshake with 127.0.0.1:"), std::string::npos)
      << p.all_output();
  EXPECT_TRUE(p.target->running()) << p.all_output();
}

// A stranger that connects and never starts its handshake holds no session: each client
// handshakes on its own thread, so the service that holds the key is served before the
// stranger's handshake times out, and its run goes through.
TEST(tls_psk, an_idle_stranger_keeps_no_service_out) {
  key_file keys(good_key);
  pipeline_options o = with_keys(keys, &keys);
  o.target_flags.push_back("--keep-serving");
  pipeline p(o);
  ASSERT_TRUE(p.start_target()) << p.all_output();
  raw_client stranger(p.port());
  ASSERT_TRUE(stranger.connected());  // first in the target's backlog
  ASSERT_TRUE(p.start_service()) << p.all_output();
  p.start_initiator("read_write_data_validity_test", 200);
  ASSERT_EQ(p.initiator->wait(run_timeout), std::optional<int>(0)) << p.all_output();
  EXPECT_EQ(p.service->wait(start_timeout), std::optional<int>(0)) << p.all_output();
  ASSERT_TRUE(p.target->wait_for_output("timed out after", start_timeout)) << p.all_output();
  const std::string out = p.target->output();
  const size_t served = out.find("service connected from");
  ASSERT_NE(served, std::string::npos) << out;
  EXPECT_LT(served, out.find("timed out after"))
      << "the service waited for the stranger's handshake to time out";
  p.target->signal(SIGINT);
  EXPECT_EQ(p.target->wait(start_timeout), std::optional<int>(0)) << p.all_output();
}

TEST(tls_psk, a_service_without_tls_gets_nothing_from_a_tls_target) {
  key_file keys(good_key);
  pipeline p(with_keys(keys, nullptr));
  ASSERT_TRUE(p.start_target()) << p.all_output();
  ASSERT_TRUE(p.start_service(false)) << p.all_output();
  const auto code = p.service->wait(start_timeout);
  ASSERT_TRUE(code.has_value()) << p.all_output();
  EXPECT_NE(*code, 0) << p.all_output();
  // The plain service waits for its client before it says anything, so the target drops it at
  // the handshake timeout; a plain service that talks first is dropped at once
  // (a_stranger_without_the_key_gets_no_answer).
  EXPECT_TRUE(p.target->wait_for_output("TLS handshake with 127.0.0.1:", start_timeout))
      << p.all_output();
  EXPECT_NE(p.service->output().find("connection lost"), std::string::npos) << p.all_output();
}

// Each program refuses a bad key file before it starts: one line naming the problem, exit 2.
TEST(tls_psk, bad_key_files_are_refused_at_flag_parsing) {
  key_file bad_hex("zcstore:12zz\n");
  key_file no_colon("zcstore 1234\n");
  key_file empty("");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/nonexistent/keys.psk", "cannot read the key file"},
      {bad_hex.path(), "not hexadecimal"},
      {no_colon.path(), "no ':'"},
      {empty.path(), "no keys"},
  };
  const std::vector<std::vector<std::string>> programs = {
      {binary("zcstore_target_rdma"), "--cpu", "0", "--listen-port", "0", "--block-size", "4096",
       "--block-count", "16"},
      {binary("zcstore_comch_to_rdma_zero_copy"), "--cpu", "0", "--storage-server", "127.0.0.1:1"},
      {binary("zcstore_comch_to_rdma_gga_offload"), "--cpu", "0", "--data-1-storage", "127.0.0.1:1",
       "--data-2-storage", "127.0.0.1:2", "--data-p-storage", "127.0.0.1:3"},
  };
  for (const auto& program : programs) {
    for (const auto& [path, text] : cases) {
      std::vector<std::string> argv = program;
      argv.push_back("--tls-psk");
      argv.push_back(path);
      subprocess run(argv);
      EXPECT_EQ(run.wait(start_timeout), std::optional<int>(2)) << run.output();
      EXPECT_NE(run.output().find("--tls-psk: "), std::string::npos) << run.output();
      EXPECT_NE(run.output().find(text), std::string::npos) << run.output();
    }
  }
}

TEST(tls_psk, a_bad_listen_address_is_refused_at_flag_parsing) {
  for (const std::string address : {"1.2.3", "256.1.1.1", "localhost", "1.2.3.4:5"}) {
    subprocess run({binary("zcstore_target_rdma"), "--cpu", "0", "--listen-port", "0",
                    "--block-size", "4096", "--block-count", "16", "--listen-address", address});
    EXPECT_EQ(run.wait(start_timeout), std::optional<int>(2)) << address << run.output();
    EXPECT_NE(run.output().find("--listen-address: "), std::string::npos) << run.output();
  }
}

TEST(tls_psk, a_target_on_every_address_without_a_key_warns) {
  subprocess plain({binary("zcstore_target_rdma"), "--cpu", "0", "--listen-port", "0",
                    "--block-size", "4096", "--block-count", "16", "--poll-mode", "event"});
  ASSERT_TRUE(plain.wait_for_output("listening on port", start_timeout)) << plain.output();
  EXPECT_TRUE(plain.wait_for_output("without --tls-psk", start_timeout)) << plain.output();
  key_file keys(good_key);
  subprocess keyed({binary("zcstore_target_rdma"), "--cpu", "0", "--listen-port", "0",
                    "--block-size", "4096", "--block-count", "16", "--poll-mode", "event",
                    "--tls-psk", keys.path()});
  ASSERT_TRUE(keyed.wait_for_output("listening on port", start_timeout)) << keyed.output();
  subprocess loopback({binary("zcstore_target_rdma"), "--cpu", "0", "--listen-port", "0",
                       "--block-size", "4096", "--block-count", "16", "--poll-mode", "event",
                       "--listen-address", "127.0.0.1"});
  ASSERT_TRUE(loopback.wait_for_output("listening on port", start_timeout)) << loopback.output();
  // Ctrl-C ends an idle target (exit 0): its whole output is then in.
  for (subprocess* quiet : {&keyed, &loopback}) {
    quiet->signal(SIGINT);
    EXPECT_EQ(quiet->wait(start_timeout), std::optional<int>(0)) << quiet->output();
    EXPECT_EQ(quiet->output().find("without --tls-psk"), std::string::npos) << quiet->output();
  }
}

}  // namespace
}  // namespace zc::test
