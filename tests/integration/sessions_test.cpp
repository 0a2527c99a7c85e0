// Services that stay up (issue 18): --keep-serving on the zero-copy service and the target, and
// keep-alive on every control connection, with the real programs on 127.0.0.1 (pipeline.hpp).
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "integration/pipeline.hpp"

namespace zc::test {
namespace {

using namespace std::chrono_literals;

// What a long-running process holds, read from /proc.
struct footprint {
  size_t fds = 0;
  uint64_t rss_kib = 0;
  uint64_t threads = 0;
};

footprint footprint_of(pid_t pid) {
  footprint f;
  const std::string dir = "/proc/" + std::to_string(pid);
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir + "/fd")) ++f.fds;
  std::ifstream status(dir + "/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") status >> f.rss_kib;
    if (key == "Threads:") status >> f.threads;
  }
  return f;
}

// A daemon between sessions still lets the last one go (a closed client's descriptors, the next
// session's target connection being dialled) for a moment after it logged the end: its footprint
// read until it is no larger than `bound`, for a few seconds at most. A leak never gets there.
footprint settled_footprint_of(pid_t pid, const footprint& bound) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  footprint f = footprint_of(pid);
  while ((f.fds > bound.fds || f.threads > bound.threads) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
    f = footprint_of(pid);
  }
  return f;
}

std::string ended(uint64_t session) {
  return "session " + std::to_string(session) + " ended";
}

// One short validity run through `p`'s long-running service; the initiator must succeed.
void run_one_session(pipeline& p, uint64_t session) {
  p.start_initiator("read_write_data_validity_test", 64, {"--transaction-count", "8"});
  ASSERT_EQ(p.initiator->wait(run_timeout), std::optional<int>(0)) << p.all_output();
  ASSERT_TRUE(p.service->wait_for_output(ended(session), start_timeout)) << p.all_output();
  ASSERT_TRUE(p.target->wait_for_output(ended(session), start_timeout)) << p.all_output();
}

pipeline_options keep_serving(std::vector<std::string> service_extra = {},
                              std::vector<std::string> target_extra = {}) {
  pipeline_options o;
  o.service_flags = {"--keep-serving"};
  o.target_flags = {"--keep-serving"};
  for (auto& f : service_extra) o.service_flags.push_back(f);
  for (auto& f : target_extra) o.target_flags.push_back(f);
  return o;
}

// Fifty sessions back to back through one service and one target: each one validates its data,
// each ends with its own stats block, and neither daemon holds more descriptors or threads, or
// noticeably more memory, after the last than after the warm-up. SIGINT then ends both with 0.
TEST(sessions, fifty_sessions_back_to_back_leave_nothing_behind) {
  pipeline p(keep_serving());
  ASSERT_TRUE(p.start_target() && p.start_service()) << p.all_output();
  constexpr uint64_t warm_up = 5, total = 50;
  footprint service_start, target_start;
  for (uint64_t n = 1; n <= total; ++n) {
    run_one_session(p, n);
    if (HasFatalFailure()) return;
    if (n == warm_up) {
      service_start = footprint_of(p.service->pid());
      target_start = footprint_of(p.target->pid());
    }
  }
  const footprint service_end = settled_footprint_of(p.service->pid(), service_start);
  const footprint target_end = settled_footprint_of(p.target->pid(), target_start);
  EXPECT_LE(service_end.fds, service_start.fds) << p.all_output();
  EXPECT_LE(target_end.fds, target_start.fds) << p.all_output();
  EXPECT_LE(service_end.threads, service_start.threads);
  EXPECT_LE(target_end.threads, target_start.threads);
#if !defined(__SANITIZE_ADDRESS__)
  // 45 sessions: a leak of 50 KiB a session would show. (Under AddressSanitizer freed memory sits
  // in its quarantine, so RSS grows by design; LeakSanitizer checks the daemons' leaks there.)
  constexpr uint64_t slack_kib = 2048;
  EXPECT_LE(service_end.rss_kib, service_start.rss_kib + slack_kib)
      << service_start.rss_kib << " KiB after the warm-up";
  EXPECT_LE(target_end.rss_kib, target_start.rss_kib + slack_kib)
      << target_start.rss_kib << " KiB after the warm-up";
#endif
  // One stats block per session, on both sides.
  size_t blocks = 0;
  const std::string out = p.service->output();
  for (size_t at = out.find("| Core: "); at != std::string::npos; at = out.find("| Core: ", at + 1))
    ++blocks;
  EXPECT_EQ(blocks, total);
  p.service->signal(SIGINT);
  p.target->signal(SIGINT);
  EXPECT_EQ(p.service->wait(start_timeout), std::optional<int>(0)) << p.all_output();
  EXPECT_EQ(p.target->wait(start_timeout), std::optional<int>(0)) << p.all_output();
}

// An initiator killed with -9 ends only its own session: both daemons take the next one.
TEST(sessions, a_killed_initiator_ends_only_its_session) {
  pipeline p(keep_serving());
  ASSERT_TRUE(p.start_target() && p.start_service()) << p.all_output();
  p.start_initiator("read_write_data_validity_test", 1'000'000'000);
  ASSERT_TRUE(p.initiator->wait_for_output("running read_write_data_validity_test", start_timeout))
      << p.all_output();
  p.initiator->signal(SIGKILL);
  ASSERT_TRUE(p.service->wait_for_output(ended(1), start_timeout)) << p.all_output();
  EXPECT_TRUE(p.service->running());
  run_one_session(p, 2);
}

// A client that stops answering (SIGSTOP: its comch connection stays up) is found by keep-alive:
// its session ends within the timeout and the service takes the next client.
TEST(sessions, a_frozen_initiator_is_found_by_keep_alive_and_the_next_one_is_served) {
  pipeline p(keep_serving({"--keep-alive-timeout", "2"}));
  ASSERT_TRUE(p.start_target() && p.start_service()) << p.all_output();
  p.start_initiator("read_write_data_validity_test", 1'000'000'000);
  ASSERT_TRUE(p.initiator->wait_for_output("running read_write_data_validity_test", start_timeout))
      << p.all_output();
  p.initiator->signal(SIGSTOP);
  ASSERT_TRUE(p.initiator->wait_stopped(start_timeout));
  const auto bound = 2s + std::chrono::seconds(control_timeout_s) + exit_margin;
  EXPECT_TRUE(p.service->wait_for_output("the client sent nothing, not even a keep-alive", bound))
      << p.all_output();
  EXPECT_TRUE(p.service->wait_for_output(ended(1), start_timeout)) << p.all_output();
  p.initiator->signal(SIGKILL);
  (void)p.initiator->wait(start_timeout);
  run_one_session(p, 2);
}

// A service that stops answering is found by the target's keep-alive: the target ends that
// session and serves the next service.
TEST(sessions, a_frozen_service_is_found_by_the_target_which_serves_the_next_one) {
  pipeline p(keep_serving({}, {"--keep-alive-timeout", "2"}));
  ASSERT_TRUE(p.start_target() && p.start_service()) << p.all_output();
  ASSERT_TRUE(p.target->wait_for_output("service connected", start_timeout)) << p.all_output();
  p.service->signal(SIGSTOP);
  ASSERT_TRUE(p.service->wait_stopped(start_timeout));
  EXPECT_TRUE(p.target->wait_for_output("the service sent nothing, not even a keep-alive",
                                        2s + exit_margin))
      << p.all_output();
  ASSERT_TRUE(p.target->wait_for_output(ended(1), start_timeout)) << p.all_output();

  pipeline second;
  second.use_target_port(p.port());
  ASSERT_TRUE(second.start_service()) << second.all_output() << p.all_output();
  second.start_initiator("read_write_data_validity_test", 64);
  EXPECT_EQ(second.initiator->wait(run_timeout), std::optional<int>(0)) << second.all_output();
  EXPECT_EQ(second.service->wait(start_timeout), std::optional<int>(0)) << second.all_output();
  EXPECT_TRUE(p.target->wait_for_output(ended(2), start_timeout)) << p.all_output();
  EXPECT_TRUE(p.target->running());
  p.service->signal(SIGKILL);
}

std::string target_session_started(uint64_t session) {
  return ": session " + std::to_string(session) + "\n";
}

// A run of `operations` validated reads and writes through `p`'s long-running service.
void validate_through(pipeline& p, uint64_t operations) {
  p.start_initiator("read_write_data_validity_test", operations, {"--transaction-count", "8"});
  ASSERT_EQ(p.initiator->wait(run_timeout), std::optional<int>(0)) << p.all_output();
}

// --max-sessions 2: two services hold a session on one target at the same time (each dials its
// target when it starts), each one's clients run validated IO through it, and a service killed
// with -9 ends only its own session on the target.
TEST(sessions, two_services_share_one_target_and_a_killed_one_ends_only_its_session) {
  pipeline a(keep_serving({}, {"--max-sessions", "2"}));
  ASSERT_TRUE(a.start_target() && a.start_service()) << a.all_output();
  pipeline b(keep_serving());
  b.use_target_port(a.port());
  ASSERT_TRUE(b.start_service()) << b.all_output() << a.all_output();
  ASSERT_TRUE(a.target->wait_for_output(target_session_started(2), start_timeout))
      << a.all_output();
  EXPECT_NE(a.target->output().find("max_sessions: 2"), std::string::npos) << a.all_output();

  // Each service's session ends with its client and the service dials the target again for the
  // next one; the other service's session stays up meanwhile, and no one is refused.
  validate_through(a, 200);
  validate_through(b, 200);
  validate_through(a, 200);
  EXPECT_EQ(a.target->output().find("refused service"), std::string::npos) << a.all_output();

  b.service->signal(SIGKILL);
  ASSERT_TRUE(b.service->wait(start_timeout).has_value());
  ASSERT_TRUE(a.target->wait_for_output("control connection lost", start_timeout))
      << a.all_output();
  validate_through(a, 200);
  a.service->signal(SIGINT);
  a.target->signal(SIGINT);
  EXPECT_EQ(a.service->wait(start_timeout), std::optional<int>(0)) << a.all_output();
  EXPECT_EQ(a.target->wait(start_timeout), std::optional<int>(0)) << a.all_output();
}

// A service beyond the target's --max-sessions gets a clear error, never silence, and the
// session the target serves goes on.
TEST(sessions, a_service_beyond_the_targets_max_sessions_is_refused_with_a_clear_status) {
  pipeline a(keep_serving());
  ASSERT_TRUE(a.start_target() && a.start_service()) << a.all_output();
  ASSERT_TRUE(a.target->wait_for_output(target_session_started(1), start_timeout))
      << a.all_output();
  pipeline b;  // the reference's one session: it ends when its target refuses it
  b.use_target_port(a.port());
  ASSERT_TRUE(b.start_service(false)) << b.all_output();
  const auto code = b.service->wait(start_timeout);
  ASSERT_TRUE(code.has_value()) << b.all_output() << a.all_output();
  EXPECT_NE(*code, 0) << b.all_output();
  EXPECT_NE(b.service->output().find("its limit (--max-sessions 1)"), std::string::npos)
      << b.all_output() << a.all_output();
  EXPECT_TRUE(a.target->wait_for_output("refused service 127.0.0.1:", start_timeout))
      << a.all_output();
  validate_through(a, 200);
}

TEST(sessions, max_sessions_above_one_needs_keep_serving) {
  subprocess s({binary("zcstore_target_rdma"), "--cpu", "0", "--listen-port", "0", "--block-size",
                "4096", "--block-count", "4", "--max-sessions", "2"});
  EXPECT_EQ(s.wait(start_timeout), std::optional<int>(2)) << s.output();
  EXPECT_NE(s.output().find("--max-sessions above 1 needs --keep-serving"), std::string::npos)
      << s.output();
  const std::vector<std::vector<std::string>> services = {
      {binary("zcstore_comch_to_rdma_zero_copy"), "--storage-server", "127.0.0.1:1"},
      {binary("zcstore_comch_to_rdma_gga_offload"), "--data-1-storage", "127.0.0.1:1",
       "--data-2-storage", "127.0.0.1:1", "--data-p-storage", "127.0.0.1:1"}};
  for (std::vector<std::string> argv : services) {
    for (const char* a : {"--cpu", "0", "--max-sessions", "2"}) argv.push_back(a);
    subprocess service(argv);
    EXPECT_EQ(service.wait(start_timeout), std::optional<int>(2)) << service.output();
    EXPECT_NE(service.output().find("--max-sessions above 1 needs --keep-serving"),
              std::string::npos)
        << service.output();
  }
}

std::unique_ptr<subprocess> start_reader(pipeline& p, const std::string& content,
                                         uint64_t operations) {
  return p.make_initiator("read_only_data_validity_test", operations,
                          {"--storage-plain-content", content, "--transaction-count", "8"});
}

// --max-sessions 2 on the zero-copy service (and its target): two initiators are served at the
// same time, each in its own session with its own target connection and workers, each one's reads
// checked byte for byte against the storage's content; a third beyond the limit is answered with
// a clear status, never silence; an initiator killed with -9 ends only its own session and frees
// its place for the next one.
TEST(sessions, the_service_serves_two_initiators_at_once_and_refuses_a_third_clearly) {
  const std::string content =
      temp_file("content", content_bytes(uint64_t(block_size) * block_count, 11));
  pipeline_options o = keep_serving({"--max-sessions", "2"}, {"--max-sessions", "2"});
  o.content = content;
  pipeline p(o);
  ASSERT_TRUE(p.start_target() && p.start_service()) << p.all_output();
  EXPECT_NE(p.service->output().find("max_sessions: 2"), std::string::npos) << p.all_output();
  // Both sessions' target connections are up before the clients come.
  ASSERT_TRUE(p.target->wait_for_output(target_session_started(2), start_timeout))
      << p.all_output();

  auto first = start_reader(p, content, 1'000'000'000);
  ASSERT_TRUE(first->wait_for_output("running read_only_data_validity_test", start_timeout))
      << first->output() << p.all_output();
  auto second = start_reader(p, content, 1'000'000'000);
  ASSERT_TRUE(second->wait_for_output("running read_only_data_validity_test", start_timeout))
      << second->output() << p.all_output();

  auto third = start_reader(p, content, 100);
  const auto refused = third->wait(start_timeout);
  ASSERT_TRUE(refused.has_value()) << third->output() << p.all_output();
  EXPECT_NE(*refused, 0) << third->output();
  EXPECT_NE(third->output().find("its limit (--max-sessions 2)"), std::string::npos)
      << third->output() << p.all_output();
  EXPECT_TRUE(first->running() && second->running()) << first->output() << second->output();

  first->signal(SIGKILL);
  ASSERT_TRUE(first->wait(start_timeout).has_value());
  ASSERT_TRUE(p.service->wait_for_output(" ended (failed", start_timeout)) << p.all_output();
  // The freed place takes the next client, validated, while the second still runs.
  auto next = start_reader(p, content, 2000);
  EXPECT_EQ(next->wait(run_timeout), std::optional<int>(0)) << next->output() << p.all_output();
  EXPECT_TRUE(second->running()) << second->output();
  EXPECT_EQ(second->output().find("Test failed"), std::string::npos) << second->output();

  second->signal(SIGKILL);
  (void)second->wait(start_timeout);
  p.service->signal(SIGINT);
  p.target->signal(SIGINT);
  EXPECT_TRUE(p.service->wait(start_timeout).has_value()) << p.all_output();
  EXPECT_TRUE(p.target->wait(start_timeout).has_value()) << p.all_output();
  std::filesystem::remove(content);
}

// --reconnect-timeout: a target killed with -9 in the middle of a validated read/write run and
// started again on the same backing file and port is dialled again; the IOs it had, and those the
// host sent while it was away, are held and relayed again, so the run ends with every IO
// answered successfully and every block read back as written.
TEST(sessions, a_restarted_target_is_reconnected_and_no_io_is_lost) {
  const auto file = std::filesystem::temp_directory_path() / unique_name("reconnect-disk");
  pipeline p({.backing_file = file.string(),
              .service_flags = {"--reconnect-timeout", "30"},
              .initiator_control_timeout_s = 30});
  ASSERT_TRUE(p.start_target() && p.start_service()) << p.all_output();
  EXPECT_NE(p.service->output().find("reconnect_timeout: 30"), std::string::npos) << p.all_output();
  p.start_initiator("read_write_data_validity_test", 400'000, {"--transaction-count", "16"});
  ASSERT_TRUE(p.initiator->wait_for_output("running read_write_data_validity_test", start_timeout))
      << p.all_output();
  std::this_thread::sleep_for(300ms);  // IOs in flight at the target when it dies
  p.target->signal(SIGKILL);
  ASSERT_TRUE(p.target->wait(start_timeout).has_value());
  ASSERT_TRUE(p.service->wait_for_output("holding the host's IOs", start_timeout))
      << p.all_output();
  ASSERT_TRUE(p.start_target()) << p.all_output();
  ASSERT_TRUE(p.service->wait_for_output("reconnected to the target", start_timeout))
      << p.all_output();
  EXPECT_EQ(p.initiator->wait(run_timeout), std::optional<int>(0)) << p.all_output();
  EXPECT_EQ(p.initiator->output().find("Test failed"), std::string::npos) << p.all_output();
  EXPECT_EQ(p.service->wait(start_timeout), std::optional<int>(0)) << p.all_output();
  std::filesystem::remove(file);
}

// The same, with the target killed again and again under load, over shared memory, with 8 KiB IOs.
// A target killed while it sends a READ's data leaves a rendezvous UCX never ends (the fence
// would never drain: the service ends its process), or a slot of the service's shared-memory FIFO
// it never filled (nothing more from any target arrives: every relayed IO times out, for ever).
// The fence destroys the stopped contexts with their UCX worker (io_path::release_transport), and
// the reconnect builds them on a new one. Whether a kill lands in such a window is chance, so the
// test kills often enough that one very likely does (without the release: 3 runs of 3 failed).
TEST(sessions, a_target_killed_again_and_again_under_load_is_reconnected_each_time) {
  constexpr int kills = 6;
  const auto file = std::filesystem::temp_directory_path() / unique_name("rekill-disk");
  pipeline p({.backing_file = file.string(),
              .service_flags = {"--reconnect-timeout", "30"},
              .initiator_control_timeout_s = 30});
  ASSERT_TRUE(p.start_target() && p.start_service()) << p.all_output();
  // Runs until interrupted: a run limit would end it early on a fast build or late on a slow one.
  p.start_initiator("read_write_data_validity_test", 1'000'000'000,
                    {"--transaction-count", "64", "--blocks-per-io", "2"});
  ASSERT_TRUE(p.initiator->wait_for_output("running read_write_data_validity_test", start_timeout))
      << p.all_output();
  for (int k = 1; k <= kills; ++k) {
    std::this_thread::sleep_for(150ms);  // IOs flowing both ways when it dies
    ASSERT_TRUE(p.initiator->running()) << "kill " << k << "\n" << p.all_output();
    p.target->signal(SIGKILL);
    ASSERT_TRUE(p.target->wait(start_timeout).has_value());
    ASSERT_TRUE(p.service->wait_for_output("holding the host's IOs", start_timeout, k))
        << "kill " << k << "\n"
        << p.all_output();
    ASSERT_TRUE(p.start_target()) << p.all_output();
    ASSERT_TRUE(p.service->wait_for_output("reconnected to the target", start_timeout, k))
        << "kill " << k << "\n"
        << p.all_output();
    ASSERT_TRUE(p.target->wait_for_output("data path started", start_timeout)) << p.all_output();
  }
  // Served again: past the IO deadline, the IOs relayed after the last reconnect were answered,
  // not timed out (a stuck FIFO shows as "left an IO unanswered" and another loss).
  std::this_thread::sleep_for(std::chrono::seconds(control_timeout_s) + 1s);
  EXPECT_EQ(p.service->output().find("left an IO unanswered"), std::string::npos) << p.all_output();
  ASSERT_TRUE(p.initiator->running()) << p.all_output();
  p.initiator->signal(SIGINT);  // drains the run: every IO answered, every read validated
  EXPECT_EQ(p.initiator->wait(run_timeout), std::optional<int>(130)) << p.all_output();
  EXPECT_EQ(p.initiator->output().find("Test failed"), std::string::npos) << p.all_output();
  EXPECT_EQ(p.initiator->output().find("IO error"), std::string::npos) << p.all_output();
  EXPECT_EQ(p.service->wait(start_timeout), std::optional<int>(0)) << p.all_output();
  std::filesystem::remove(file);
}

// While it reconnects, the service keeps answering its client: a target that is frozen (SIGSTOP:
// its socket accepts, nothing answers) holds each reconnect attempt for the control timeout, and
// the host, whose keep-alive timeout is shorter than that, must not lose the service meanwhile.
// Resumed, the target (--keep-serving) ends its old session and the service rejoins it.
TEST(sessions, a_reconnecting_service_keeps_answering_its_client) {
  pipeline p({.target_flags = {"--keep-serving"},
              .service_flags = {"--reconnect-timeout", "30", "--keep-alive-timeout", "2"},
              .initiator_control_timeout_s = 30});
  ASSERT_TRUE(p.start_target() && p.start_service()) << p.all_output();
  p.start_initiator("read_write_data_validity_test", 50'000,
                    {"--transaction-count", "8", "--keep-alive-timeout", "2"});
  ASSERT_TRUE(p.initiator->wait_for_output("running read_write_data_validity_test", start_timeout))
      << p.all_output();
  p.target->signal(SIGSTOP);
  ASSERT_TRUE(p.target->wait_stopped(start_timeout));
  ASSERT_TRUE(p.service->wait_for_output("holding the host's IOs", start_timeout))
      << p.all_output();
  // Longer than the host's keep-alive timeout, and than one attempt's control timeout.
  std::this_thread::sleep_for(std::chrono::seconds(control_timeout_s + 2));
  EXPECT_TRUE(p.initiator->running()) << p.all_output();
  p.target->signal(SIGCONT);
  ASSERT_TRUE(p.service->wait_for_output("reconnected to the target", start_timeout))
      << p.all_output();
  EXPECT_EQ(p.initiator->wait(run_timeout), std::optional<int>(0)) << p.all_output();
  EXPECT_EQ(p.initiator->output().find("lost the service"), std::string::npos) << p.all_output();
}

// Past --reconnect-timeout the held IOs fail with a clear status and the session ends: the host
// is answered, never left waiting.
TEST(sessions, a_target_that_stays_away_past_the_reconnect_timeout_ends_the_session) {
  pipeline p({.service_flags = {"--reconnect-timeout", "2"}, .initiator_control_timeout_s = 30});
  ASSERT_TRUE(p.start_target() && p.start_service()) << p.all_output();
  p.start_initiator("read_write_data_validity_test", 1'000'000'000, {"--transaction-count", "8"});
  ASSERT_TRUE(p.initiator->wait_for_output("running read_write_data_validity_test", start_timeout))
      << p.all_output();
  p.target->signal(SIGKILL);
  const auto code = p.initiator->wait(2s + std::chrono::seconds(control_timeout_s) + exit_margin);
  ASSERT_TRUE(code.has_value()) << p.all_output();
  EXPECT_NE(*code, 0) << p.all_output();
  EXPECT_NE(p.service->output().find("the target did not come back within --reconnect-timeout 2 s"),
            std::string::npos)
      << p.all_output();
  EXPECT_EQ(p.service->wait(start_timeout), std::optional<int>(1)) << p.all_output();
}

// A target that takes every reconnect but whose data path hangs (--drop-ios-after: its IOs are
// left unanswered, its control connection lives on) does not hold the host's IOs for ever: each
// loss that follows a reconnect before any IO was answered goes on with the --reconnect-timeout
// of the first loss, and when that has passed the session ends and the host is answered.
TEST(sessions, a_target_that_comes_back_but_serves_nothing_ends_the_session_in_bounded_time) {
  constexpr int reconnect_s = 4;
  pipeline p({.target_flags = {"--keep-serving", "--drop-ios-after", "300"},
              .service_flags = {"--reconnect-timeout", std::to_string(reconnect_s)},
              .initiator_control_timeout_s = 60});
  ASSERT_TRUE(p.start_target() && p.start_service()) << p.all_output();
  p.start_initiator("read_write_data_validity_test", 1'000'000'000, {"--transaction-count", "8"});
  // First loss after one control timeout; reconnects, each lost again a control timeout later,
  // until the first loss's reconnect timeout has passed: one more control timeout at most.
  const auto bound =
      std::chrono::seconds(2 * control_timeout_s + reconnect_s + control_timeout_s) + start_timeout;
  const auto code = p.initiator->wait(bound);
  ASSERT_TRUE(code.has_value()) << "the host's IOs are still held\n" << p.all_output();
  EXPECT_NE(*code, 0) << p.all_output();
  EXPECT_TRUE(p.service->wait_for_output("reconnected to the target", start_timeout))
      << p.all_output();
  EXPECT_NE(p.service->output().find("lost again"), std::string::npos) << p.all_output();
  EXPECT_NE(p.service->output().find("came back but answered no IO"), std::string::npos)
      << p.all_output();
  EXPECT_EQ(p.service->wait(start_timeout), std::optional<int>(1)) << p.all_output();
}

// A target that stops answering is found by the service's keep-alive while it waits for a client.
TEST(sessions, a_frozen_target_is_found_by_the_services_keep_alive) {
  pipeline p({.service_flags = {"--keep-alive-timeout", "2"}});
  ASSERT_TRUE(p.start_target() && p.start_service()) << p.all_output();
  p.target->signal(SIGSTOP);
  ASSERT_TRUE(p.target->wait_stopped(start_timeout));
  const auto code = p.service->wait(2s + exit_margin);
  p.target->signal(SIGCONT);
  ASSERT_TRUE(code.has_value()) << p.all_output();
  EXPECT_EQ(*code, 1) << p.all_output();
  EXPECT_NE(p.service->output().find("not even a keep-alive answer"), std::string::npos)
      << p.all_output();
}

// Without keep-alive, the same silence goes unnoticed (the reference's behaviour, for peers that
// know no keep-alive): the service is still waiting after the timeout would have passed.
TEST(sessions, keep_alive_timeout_zero_turns_it_off) {
  pipeline p({.service_flags = {"--keep-alive-timeout", "0"}});
  ASSERT_TRUE(p.start_target() && p.start_service()) << p.all_output();
  p.target->signal(SIGSTOP);
  ASSERT_TRUE(p.target->wait_stopped(start_timeout));
  EXPECT_FALSE(p.service->wait(4s).has_value()) << p.all_output();
  p.target->signal(SIGCONT);
}

TEST(sessions, a_keep_alive_timeout_below_two_seconds_is_refused) {
  for (const char* program : {"zcstore_comch_to_rdma_zero_copy", "zcstore_target_rdma"}) {
    std::vector<std::string> argv{binary(program), "--cpu", "0", "--keep-alive-timeout", "1"};
    if (std::string(program) == "zcstore_target_rdma") {
      for (const char* a : {"--listen-port", "0", "--block-size", "4096", "--block-count", "4"})
        argv.push_back(a);
    } else {
      argv.push_back("--storage-server");
      argv.push_back("127.0.0.1:1");
    }
    subprocess s(argv);
    EXPECT_EQ(s.wait(start_timeout), std::optional<int>(2)) << s.output();
    EXPECT_NE(s.output().find("must be 0 (off) or at least 2"), std::string::npos) << s.output();
  }
}

}  // namespace
}  // namespace zc::test
