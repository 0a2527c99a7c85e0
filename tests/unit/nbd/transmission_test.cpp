// The NBD server's transmission: requests below the storage's block (read-modify-write and its
// block locks), and the sparse requests (TRIM, WRITE_ZEROES, BLOCK_STATUS) through the storage's
// own operations and their fallbacks.
#include "server_fixture.hpp"

namespace zc::nbd {
namespace {

using namespace test;

// ---- below the block: read-modify-write

TEST(nbd_server_rmw, an_unaligned_read_returns_exactly_its_bytes) {
  served s;
  const auto bytes = pattern(4 * block, 17);
  std::copy(bytes.begin(), bytes.end(), s.backend().bytes().begin());
  raw_client c(s.socket_path());
  ASSERT_TRUE(open_all({&c}));
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
// The backend completes what it has in a shuffled order: the block locks, not the completion order,
// decide which write lands last.
TEST(nbd_server_rmw, unaligned_writes_to_one_block_from_two_connections_all_land) {
  served s({}, 32, false, 0, 0, false, [](test::memory_backend& b) { b.shuffle_completions(7); });
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
  ASSERT_TRUE(open_all({&c}));
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
    ASSERT_TRUE(open_all({&c}));
    for (int i = 0; i < 8; ++i) ASSERT_TRUE(c.request(command::write, i, 100, 200));
    // The first write's 200-byte payload is what follows it (the next headers), then the second
    // write waits for a payload that never comes.
  }
  raw_client next(s.socket_path());
  ASSERT_TRUE(open_all({&next}));
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
  ASSERT_TRUE(open_all({&c}));
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
  ASSERT_TRUE(open_all({&c}));
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
    ASSERT_TRUE(open_all({&c}));
    ASSERT_TRUE(c.request(command::write, 1, 2 * block + 10, 100));
    ASSERT_TRUE(c.send(std::vector<uint8_t>(10, 0x42)));  // part of the payload, then gone
    std::this_thread::sleep_for(100ms);
  }
  std::this_thread::sleep_for(100ms);
  s.stop();
  EXPECT_EQ(s.srv().tracked_connections(), 0u);
  EXPECT_EQ(s.backend().free_ios(), 32u);
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

// A TRIM and a WRITE_ZEROES over a block a write is landing in wait for it: never is a hole
// punched (or a range zeroed) under a write in flight, and the write that follows them waits too.
TEST(nbd_server_sparse, a_discard_or_zeroing_never_goes_beside_a_write_to_its_blocks) {
  served s({}, 32, false, 0, 0, /*hold=*/true);
  raw_client c(s.socket_path());
  ASSERT_TRUE(open_all({&c}));
  ASSERT_TRUE(c.request(command::write, 1, 0, 2 * block));
  ASSERT_TRUE(c.send(pattern(2 * block, 5)));
  ASSERT_TRUE(c.request(command::trim, 2, 0, block));
  ASSERT_TRUE(c.request(command::write_zeroes, 3, block, block));
  ASSERT_TRUE(c.request(command::write, 4, block, block));
  ASSERT_TRUE(c.send(pattern(block, 6)));
  std::this_thread::sleep_for(200ms);  // all four read by the server
  EXPECT_EQ(s.backend().held(), 1u) << "a discard or zeroing went out beside the write";
  ASSERT_EQ(s.backend().let_go(1), 1u);  // the write lands: the discard and zeroing go
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(s.backend().held(), 2u) << "the last write went beside the zeroing";
  s.backend().stop_holding();
  expect_successes(c, 4);
  s.stop();
  const auto& bytes = s.backend().bytes();
  const auto last = pattern(block, 6);
  EXPECT_TRUE(std::all_of(bytes.begin(), bytes.begin() + block, [](uint8_t b) { return b == 0; }));
  EXPECT_TRUE(std::equal(last.begin(), last.end(), bytes.begin() + block));
}

}  // namespace
}  // namespace zc::nbd
