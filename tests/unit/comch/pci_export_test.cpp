// PCI export of memory maps (core::memory_map::export_pci/import_pci), which the comch fast path
// rides on: another process maps the same pages (zero copy), access flags hold, and stale,
// tampered or foreign blobs are refused with a clear status.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "comch_test_support.hpp"
#include "core/blob.hpp"
#include "core/bytes.hpp"

namespace zc::comch::test {
namespace {

using zc::test::subprocess;

std::string hex(const std::vector<uint8_t>& bytes) {
  std::string out;
  char two[3];
  for (uint8_t b : bytes) {
    std::snprintf(two, sizeof(two), "%02x", b);
    out += two;
  }
  return out;
}

std::vector<uint8_t> unhex(const std::string& text) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < text.size(); i += 2)
    out.push_back(uint8_t(std::stoul(text.substr(i, 2), nullptr, 16)));
  return out;
}

// The blob a pci-export peer printed.
std::vector<uint8_t> blob_of(const subprocess& peer) {
  std::string out = peer.output();
  auto at = out.find("BLOB ");
  if (at == std::string::npos) return {};
  auto end = out.find('\n', at);
  return unhex(out.substr(at + 5, end - at - 5));
}

status import_status(std::span<const uint8_t> blob) {
  try {
    core::memory_map::import_pci(blob);
  } catch (const status_error& e) {
    return e.code();
  }
  return status::success;
}

// The PCI blob's payload is u32 pid, u32 fd, 32-char token, u64 length, u32 access (core).
std::vector<uint8_t> rewrite_payload(std::span<const uint8_t> blob,
                                     const std::function<void(std::vector<uint8_t>&)>& edit) {
  std::span<const uint8_t> payload;
  EXPECT_EQ(core::parse_blob(blob, core::blob_kind::pci_memory, payload), status::success);
  std::vector<uint8_t> copy(payload.begin(), payload.end());
  edit(copy);
  return core::frame_blob(core::blob_kind::pci_memory, copy);
}

// The permissions column ("rw-s") of the mapping that holds `p`, from /proc/self/maps.
std::string mapping_permissions(const void* p) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  auto addr = reinterpret_cast<uintptr_t>(p);
  while (std::getline(maps, line)) {
    uintptr_t lo = 0, hi = 0;
    char perms[5] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %4s", &lo, &hi, perms) == 3 && addr >= lo && addr < hi)
      return perms;
  }
  return "";
}

TEST(comch_pci_export, another_process_maps_the_same_pages) {
  auto map = core::memory_map::allocate(
      3 * 4096 + 100, core::access::local_read_write | core::access::pci_read_write);
  std::memset(map->data(), 0x11, map->size());
  subprocess peer({peer_path(), "pci-import", "--blob", hex(map->export_pci()), "--expect", "0x11",
                   "--write", "0x22"});
  ASSERT_EQ(peer.wait(wait_limit), std::optional<int>(0)) << peer.output();
  EXPECT_NE(peer.output().find("IMPORTED"), std::string::npos);
  // No copy anywhere: what the peer wrote is in our memory.
  for (size_t i = 0; i < map->size(); ++i) ASSERT_EQ(map->data()[i], 0x22) << "byte " << i;
}

TEST(comch_pci_export, importing_from_a_live_exporter_shares_its_memory) {
  subprocess peer(
      {peer_path(), "pci-export", "--size", "8192", "--access", "rw", "--pattern", "0x5a"});
  ASSERT_TRUE(peer.wait_for_output("BLOB", wait_limit)) << peer.output();
  auto map = core::memory_map::import_pci(blob_of(peer));
  ASSERT_EQ(map->size(), 8192u);
  EXPECT_TRUE(has(map->permissions(), core::access::pci_read_write));
  EXPECT_EQ(map->data()[0], 0x5a);
  EXPECT_EQ(map->data()[8191], 0x5a);
  EXPECT_EQ(mapping_permissions(map->data()), "rw-s");
}

TEST(comch_pci_export, exporter_that_exited_gives_not_found) {
  subprocess peer({peer_path(), "pci-export", "--size", "4096", "--access", "rw", "--pattern", "1",
                   "--linger-ms", "0"});
  ASSERT_EQ(peer.wait(wait_limit), std::optional<int>(0)) << peer.output();
  auto blob = blob_of(peer);
  ASSERT_FALSE(blob.empty()) << peer.output();
  EXPECT_EQ(import_status(blob), status::not_found);
}

TEST(comch_pci_export, tampered_token_is_not_permitted) {
  subprocess peer(
      {peer_path(), "pci-export", "--size", "4096", "--access", "rw", "--pattern", "1"});
  ASSERT_TRUE(peer.wait_for_output("BLOB", wait_limit)) << peer.output();
  // A re-framed blob (valid checksum) whose token no longer names the exporter's memory.
  auto forged = rewrite_payload(blob_of(peer), [](std::vector<uint8_t>& p) { p[8] ^= 0x01; });
  EXPECT_EQ(import_status(forged), status::not_permitted);
  // A blob changed in transit fails its checksum.
  auto corrupted = blob_of(peer);
  corrupted.back() ^= 0xFF;
  EXPECT_EQ(import_status(corrupted), status::invalid_value);
}

TEST(comch_pci_export, blob_naming_a_file_that_is_not_an_export_is_not_permitted) {
  auto map = core::memory_map::allocate(4096, core::access::pci_read_write);
  int other = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(other, 0);
  auto foreign = rewrite_payload(map->export_pci(), [&](std::vector<uint8_t>& p) {
    store_be32(p.data() + 4, uint32_t(other));  // our pid, but an fd that is no zcstore memfd
  });
  EXPECT_EQ(import_status(foreign), status::not_permitted);
  close(other);
}

TEST(comch_pci_export, read_only_export_is_mapped_read_only) {
  subprocess peer(
      {peer_path(), "pci-export", "--size", "4096", "--access", "ro", "--pattern", "0x33"});
  ASSERT_TRUE(peer.wait_for_output("BLOB", wait_limit)) << peer.output();
  auto map = core::memory_map::import_pci(blob_of(peer));
  EXPECT_TRUE(has(map->permissions(), core::access::pci_read_only));
  EXPECT_FALSE(has(map->permissions(), core::access::pci_read_write));
  EXPECT_EQ(map->data()[100], 0x33);
  EXPECT_EQ(mapping_permissions(map->data()), "r--s");
}

TEST(comch_pci_export, memory_without_pci_access_cannot_be_exported) {
  auto local = core::memory_map::allocate(4096, core::access::local_read_write);
  try {
    local->export_pci();
    FAIL() << "exported memory without PCI access";
  } catch (const status_error& e) {
    EXPECT_EQ(e.code(), status::not_permitted);
  }
  std::vector<uint8_t> plain(4096);
  auto wrapped = core::memory_map::wrap(plain.data(), plain.size(), core::access::pci_read_write);
  try {
    wrapped->export_pci();
    FAIL() << "exported memory that is not memfd-backed";
  } catch (const status_error& e) {
    EXPECT_EQ(e.code(), status::not_supported);
  }
}

}  // namespace
}  // namespace zc::comch::test
