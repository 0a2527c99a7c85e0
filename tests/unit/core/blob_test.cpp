// The blob frame is the only thing between a peer's bytes and UCX, which crashes on malformed
// input: every kind of damage must come back as a status, never as a crash or an over-read.
#include "core/blob.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "core/bytes.hpp"

namespace zc::core {
namespace {

constexpr size_t version_offset = 4;
constexpr size_t kind_offset = 6;
constexpr size_t length_offset = 8;
constexpr size_t checksum_offset = 12;

std::vector<uint8_t> sample_payload() {
  std::vector<uint8_t> p(37);
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<uint8_t>(i * 7 + 1);
  return p;
}

status parse(const std::vector<uint8_t>& blob, blob_kind kind = blob_kind::rdma_memory) {
  std::span<const uint8_t> payload;
  return parse_blob(blob, kind, payload);
}

TEST(blob, round_trip_returns_the_payload) {
  const auto payload = sample_payload();
  const auto blob = frame_blob(blob_kind::rdma_memory, payload);
  ASSERT_EQ(blob.size(), blob_header_size + payload.size());
  std::span<const uint8_t> out;
  ASSERT_EQ(parse_blob(blob, blob_kind::rdma_memory, out), status::success);
  EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.end()), payload);
  // The payload is a view into the blob, not a copy.
  EXPECT_EQ(out.data(), blob.data() + blob_header_size);
}

TEST(blob, header_is_magic_version_kind_length_checksum_big_endian) {
  const auto payload = sample_payload();
  const auto blob = frame_blob(blob_kind::pci_memory, payload);
  EXPECT_EQ(std::vector<uint8_t>(blob.begin(), blob.begin() + 4),
            (std::vector<uint8_t>{'Z', 'C', 'B', 'L'}));
  EXPECT_EQ(load_be32(blob.data()), blob_magic);
  EXPECT_EQ(load_be16(blob.data() + version_offset), blob_version);
  EXPECT_EQ(load_be16(blob.data() + kind_offset), static_cast<uint16_t>(blob_kind::pci_memory));
  EXPECT_EQ(load_be32(blob.data() + length_offset), payload.size());
}

TEST(blob, empty_payload_round_trips) {
  const auto blob = frame_blob(blob_kind::rdma_connection, {});
  ASSERT_EQ(blob.size(), blob_header_size);
  std::span<const uint8_t> out;
  EXPECT_EQ(parse_blob(blob, blob_kind::rdma_connection, out), status::success);
  EXPECT_TRUE(out.empty());
}

TEST(blob, largest_allowed_payload_round_trips) {
  const std::vector<uint8_t> payload(blob_max_payload, 0x5A);
  EXPECT_EQ(parse(frame_blob(blob_kind::rdma_memory, payload)), status::success);
}

TEST(blob, payload_over_the_limit_is_refused) {
  const std::vector<uint8_t> payload(blob_max_payload + 1, 0x5A);
  EXPECT_EQ(parse(frame_blob(blob_kind::rdma_memory, payload)), status::invalid_value);
}

TEST(blob, truncated_at_every_length_is_refused) {
  const auto blob = frame_blob(blob_kind::rdma_memory, sample_payload());
  for (size_t n = 0; n < blob.size(); ++n) {
    // A heap copy of exactly n bytes, so that AddressSanitizer sees any read past the end.
    const std::vector<uint8_t> cut(blob.begin(), blob.begin() + static_cast<std::ptrdiff_t>(n));
    std::span<const uint8_t> out;
    EXPECT_EQ(parse_blob(cut, blob_kind::rdma_memory, out), status::invalid_value)
        << "cut to " << n << " bytes";
    EXPECT_TRUE(out.empty());
  }
}

TEST(blob, wrong_magic_is_refused) {
  auto blob = frame_blob(blob_kind::rdma_memory, sample_payload());
  for (size_t i = 0; i < 4; ++i) {
    auto bad = blob;
    bad[i] ^= 0x01;
    EXPECT_EQ(parse(bad), status::invalid_value) << "magic byte " << i;
  }
}

TEST(blob, wrong_version_is_unsupported_version) {
  auto blob = frame_blob(blob_kind::rdma_memory, sample_payload());
  for (uint16_t version : {uint16_t{0}, uint16_t{blob_version + 1}, uint16_t{0xFFFF}}) {
    auto bad = blob;
    store_be16(bad.data() + version_offset, version);
    EXPECT_EQ(parse(bad), status::unsupported_version) << "version " << version;
  }
}

TEST(blob, wrong_kind_is_refused) {
  const auto blob = frame_blob(blob_kind::pci_memory, sample_payload());
  EXPECT_EQ(parse(blob, blob_kind::rdma_memory), status::invalid_value);
  EXPECT_EQ(parse(blob, blob_kind::rdma_connection), status::invalid_value);
  auto bad = blob;
  store_be16(bad.data() + kind_offset, 0x7777);
  EXPECT_EQ(parse(bad, blob_kind::pci_memory), status::invalid_value);
}

TEST(blob, declared_length_that_differs_from_the_carried_bytes_is_refused) {
  const auto blob = frame_blob(blob_kind::rdma_memory, sample_payload());
  const uint32_t real = load_be32(blob.data() + length_offset);
  for (uint32_t declared : {real - 1, real + 1, 0u, 0xFFFFFFFFu}) {
    auto bad = blob;
    store_be32(bad.data() + length_offset, declared);
    EXPECT_EQ(parse(bad), status::invalid_value) << "declared " << declared;
  }
}

TEST(blob, trailing_bytes_after_the_payload_are_refused) {
  auto blob = frame_blob(blob_kind::rdma_memory, sample_payload());
  blob.push_back(0);
  EXPECT_EQ(parse(blob), status::invalid_value);
}

TEST(blob, flipped_payload_byte_is_a_checksum_error) {
  const auto blob = frame_blob(blob_kind::rdma_memory, sample_payload());
  for (size_t i = blob_header_size; i < blob.size(); ++i) {
    auto bad = blob;
    bad[i] ^= 0x10;
    std::span<const uint8_t> out;
    EXPECT_EQ(parse_blob(bad, blob_kind::rdma_memory, out), status::invalid_value) << "byte " << i;
    EXPECT_TRUE(out.empty());
  }
}

TEST(blob, flipped_checksum_byte_is_refused) {
  const auto blob = frame_blob(blob_kind::rdma_memory, sample_payload());
  for (size_t i = checksum_offset; i < blob_header_size; ++i) {
    auto bad = blob;
    bad[i] ^= 0x80;
    EXPECT_EQ(parse(bad), status::invalid_value) << "byte " << i;
  }
}

TEST(blob, every_single_bit_flip_is_refused) {
  const auto blob = frame_blob(blob_kind::rdma_memory, sample_payload());
  for (size_t i = 0; i < blob.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      auto bad = blob;
      bad[i] ^= static_cast<uint8_t>(1u << bit);
      EXPECT_NE(parse(bad), status::success) << "byte " << i << " bit " << bit;
    }
  }
}

TEST(blob, random_garbage_never_parses_and_never_crashes) {
  std::mt19937 rng(20240601);
  for (int round = 0; round < 2000; ++round) {
    std::vector<uint8_t> junk(rng() % 96);
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    // Half the rounds start with a valid magic and version so the later checks get exercised.
    if (round % 2 == 0 && junk.size() >= 8) {
      store_be32(junk.data(), blob_magic);
      store_be16(junk.data() + version_offset, blob_version);
      store_be16(junk.data() + kind_offset, static_cast<uint16_t>(blob_kind::rdma_memory));
    }
    EXPECT_NE(parse(junk), status::success) << "round " << round;
  }
}

}  // namespace
}  // namespace zc::core
