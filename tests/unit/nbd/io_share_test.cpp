// The NBD server's bookkeeping of connections and IO memory: deadlines and bounds that close a
// connection and free what it held, and the shares of IO memory and backend slots.
#include "server_fixture.hpp"

namespace zc::nbd {
namespace {

using namespace test;

// ---- bounds: no client keeps memory, slots or the server for ever

constexpr auto short_bound = 300ms;

TEST(nbd_server_bounds, a_write_whose_payload_stops_is_closed_and_frees_its_memory) {
  served s({.request_timeout = short_bound});
  raw_client c(s.socket_path());
  ASSERT_TRUE(open_all({&c}));
  ASSERT_TRUE(c.request(command::write, 1, 0, max_io));
  ASSERT_TRUE(c.send(std::vector<uint8_t>(1000, 0x5A)));  // and then nothing more
  EXPECT_TRUE(c.closed_by_peer());  // by the deadline: the counter below says which
  // Someone else is served, with every io back in the pool.
  raw_client other(s.socket_path());
  ASSERT_TRUE(open_all({&other}));
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
  ASSERT_TRUE(open_all({&c}));
  ASSERT_TRUE(c.request(command::write, 1, disk_size, block));  // past the end: refused
  EXPECT_TRUE(c.closed_by_peer());
  s.stop();
  EXPECT_EQ(s.srv().counters().timed_out, 1u);
}

TEST(nbd_server_bounds, a_client_that_leaves_its_replies_unread_is_closed) {
  served s({.max_in_flight = 8, .request_timeout = short_bound});
  raw_client stuck(s.socket_path());
  ASSERT_TRUE(open_all({&stuck}));
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
  ASSERT_TRUE(open_all({&c}));
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
  ASSERT_TRUE(open_all({&c}));
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
  ASSERT_TRUE(open_all({&c}));
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

// A request the backend cannot give memory to however much comes back (its memory in pieces too
// small, around ios some client keeps): its reservation lapses, and a stream of small reads from
// another client goes on being served, not stalled for as long as the large one waits.
TEST(nbd_server_share, a_reservation_that_cannot_be_served_lapses_and_others_go_on) {
  constexpr uint32_t piece = 64 * 1024;
  served s({}, 32, false, 0, 0, false, [](test::memory_backend& b) { b.fragment(piece); });
  raw_client stream(s.socket_path()), big(s.socket_path());
  ASSERT_TRUE(open_all({&stream, &big}));
  ASSERT_TRUE(big.request(command::read, 1, 0, max_io));  // never given memory
  constexpr uint64_t depth = 8, total = 400;  // far more passes than a reservation lasts
  for (uint64_t i = 0; i < depth; ++i) ASSERT_TRUE(stream.request(command::read, i, 0, piece));
  for (uint64_t done = 0; done < total; ++done) {
    auto rep = stream.simple_reply();  // within the client's 5 s receive timeout
    ASSERT_TRUE(rep) << "the stream stalled after " << done << " replies";
    ASSERT_EQ(rep->first, 0u);
    ASSERT_EQ(stream.recv(piece).size(), piece);
    if (done + depth < total) {
      ASSERT_TRUE(stream.request(command::read, done + depth, 0, piece));
    }
  }
  s.stop();  // the large read is answered ESHUTDOWN
  auto rep = big.simple_reply();
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->first, static_cast<uint32_t>(error_code::eshutdown));
}

}  // namespace
}  // namespace zc::nbd
