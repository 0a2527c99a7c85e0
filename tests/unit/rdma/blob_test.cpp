// Connection and memory blobs from a peer are checked before UCX sees them: a malformed one is a
// clear status_error, never a crash (UCX itself crashes on many, see UCX_MEASURED.md §8).
#include <gtest/gtest.h>

#include "core/blob.hpp"
#include "core/bytes.hpp"
#include "rdma/internal/wire.hpp"
#include "rdma_fixture.hpp"

namespace zc::rdma::testing {
namespace {

status connect_status(side& s, const std::vector<uint8_t>& blob) {
  return s.thread.call([&] {
    try {
      s.ctx->connect(blob);
      return status::success;
    } catch (const status_error& e) {
      return e.code();
    }
  });
}

// A connection blob's frame, at this build's protocol version.
std::vector<uint8_t> connection_frame(std::span<const uint8_t> payload) {
  return core::frame_blob(core::blob_kind::rdma_connection, payload, internal::protocol_version);
}

class connection_blob : public ::testing::Test {
 protected:
  void SetUp() override {
    a.create("tcp", core::rdma_all);
    b.create("tcp", core::rdma_all);
    good_ = b.thread.call([&] { return b.ctx->export_connection(); });
  }
  void TearDown() override {
    a.destroy();
    b.destroy();
  }
  side a;
  side b;
  std::vector<uint8_t> good_;
};

TEST_F(connection_blob, every_truncation_is_rejected) {
  for (size_t n = 0; n < good_.size(); ++n) {
    std::vector<uint8_t> cut(good_.begin(), good_.begin() + static_cast<long>(n));
    EXPECT_EQ(connect_status(a, cut), status::invalid_value) << "length " << n;
  }
  EXPECT_EQ(a.thread.call([&] { return a.ctx->state(); }), core::context_state::starting);
}

TEST_F(connection_blob, every_flipped_byte_is_rejected) {
  for (size_t i = 0; i < good_.size(); ++i) {
    auto bad = good_;
    bad[i] ^= 0x40;
    status s = connect_status(a, bad);
    EXPECT_TRUE(s == status::invalid_value || s == status::unsupported_version)
        << "byte " << i << ": " << status_name(s);
  }
}

TEST_F(connection_blob, memory_blob_is_not_a_connection) {
  auto mem = b.thread.call([&] { return b.local->export_rdma(); });
  EXPECT_EQ(connect_status(a, mem), status::invalid_value);
}

TEST_F(connection_blob, well_framed_nonsense_is_rejected) {
  // A valid frame around a payload whose address is too short to be a UCX worker address.
  std::vector<uint8_t> payload;
  byte_writer w(payload);
  w.u64(1);
  w.u32(0);
  w.u32(1);
  w.u64(0);
  w.u32(0);
  w.u64(0);
  w.sized_bytes(std::vector<uint8_t>(4, 0xFF));
  EXPECT_EQ(connect_status(a, connection_frame(payload)), status::invalid_value);
  // And one whose declared address length runs past the end.
  payload.resize(payload.size() - 2);
  EXPECT_EQ(connect_status(a, connection_frame(payload)), status::invalid_value);
}

// The blob's version is the rdma protocol's: peers of two versions refuse each other at connect,
// with an error that says so, instead of timing out on every message.
TEST_F(connection_blob, a_peer_of_another_protocol_version_is_refused_with_a_clear_error) {
  static_assert(internal::protocol_version == 2);
  std::span<const uint8_t> payload;
  ASSERT_EQ(core::parse_blob(good_, core::blob_kind::rdma_connection, payload,
                             internal::protocol_version),
            status::success);
  // The same details as a version-1 peer frames them.
  const auto old = core::frame_blob(core::blob_kind::rdma_connection, payload, 1);
  a.thread.call([&] {
    try {
      a.ctx->connect(old);
      ADD_FAILURE() << "a version-1 peer was taken";
    } catch (const status_error& e) {
      EXPECT_EQ(e.code(), status::unsupported_version);
      const std::string what = e.what();
      EXPECT_NE(what.find("protocol version 1"), std::string::npos) << what;
      EXPECT_NE(what.find("speaks 2"), std::string::npos) << what;
    }
  });
  // A version-1 peer reads our blob as version 1 blobs are read, and refuses it.
  EXPECT_EQ(core::parse_blob(good_, core::blob_kind::rdma_connection, payload, 1),
            status::unsupported_version);
  EXPECT_EQ(good_[4], 0);
  EXPECT_EQ(good_[5], internal::protocol_version);
  // Nothing was connected: the right peer still can be.
  EXPECT_EQ(connect_status(a, good_), status::success);
}

TEST_F(connection_blob, good_blob_still_connects_after_the_bad_ones) {
  std::vector<uint8_t> garbage(300, 0xA5);
  EXPECT_EQ(connect_status(a, garbage), status::invalid_value);
  EXPECT_EQ(connect_status(a, good_), status::success);
  EXPECT_EQ(a.thread.call([&] { return a.ctx->state(); }), core::context_state::running);
  EXPECT_EQ(connect_status(a, good_), status::bad_state) << "second connect must be refused";
}

TEST(memory_blob, malformed_rdma_exports_are_rejected) {
  std::vector<uint8_t> region(4096);
  auto map = core::memory_map::wrap(region.data(), region.size(),
                                    core::access::local_read_write | core::rdma_all);
  auto good = map->export_rdma();
  for (size_t n = 0; n < good.size(); ++n) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<long>(n));
    EXPECT_THROW(core::memory_map::import_rdma(cut), status_error) << "length " << n;
  }
  for (size_t i = 0; i < good.size(); ++i) {
    auto bad = good;
    bad[i] ^= 1;
    EXPECT_THROW(core::memory_map::import_rdma(bad), status_error) << "byte " << i;
  }
  EXPECT_NO_THROW(core::memory_map::import_rdma(good));
}

}  // namespace
}  // namespace zc::rdma::testing
