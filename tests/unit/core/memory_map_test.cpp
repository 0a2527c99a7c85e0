// Memory maps: local (wrapped or allocated), PCI export/import (the same pages in two mappings,
// possibly two processes) and RDMA export/import (a description checked by the export table).
// Cross-process cases fork a child; every wait on a child or a pipe is bounded.
#include "core/memory_map.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/blob.hpp"
#include "core/bytes.hpp"
#include "core/export_table.hpp"
#include "support/child_io.hpp"

namespace zc::core {
namespace {

using namespace std::chrono_literals;

constexpr auto child_timeout = 10s;
constexpr size_t map_size = 8192;

// PCI export payload layout (memory_map.cpp): u32 pid, u32 fd, 32-byte token, u64 length,
// u32 access.
constexpr size_t pci_fd_offset = 4;
constexpr size_t pci_token_offset = 8;
constexpr size_t pci_length_offset = 40;
constexpr size_t pci_access_offset = 48;
// RDMA export payload layout: u64 owner token, u64 export id, u64 key, u64 base, u64 length,
// u32 access.
constexpr size_t rdma_id_offset = 8;
constexpr size_t rdma_key_offset = 16;
constexpr size_t rdma_base_offset = 24;
constexpr size_t rdma_length_offset = 32;
constexpr size_t rdma_payload_size = 44;

template <typename F>
status thrown_status(F&& f) {
  try {
    f();
  } catch (const status_error& e) {
    return e.code();
  }
  return status::success;
}

std::vector<uint8_t> payload_of(const std::vector<uint8_t>& blob, blob_kind kind) {
  std::span<const uint8_t> payload;
  EXPECT_EQ(parse_blob(blob, kind, payload), status::success);
  return {payload.begin(), payload.end()};
}

// The child IO of tests/support/child_io.hpp, bounded by child_timeout.
using zc::test::write_all;
std::optional<int> reap(pid_t pid) {
  return zc::test::reap(pid, child_timeout);
}
bool read_exactly(int fd, void* out, size_t n) {
  return zc::test::read_exactly(fd, out, n, child_timeout);
}
bool send_blob(int fd, const std::vector<uint8_t>& blob) {
  return zc::test::send_blob(fd, blob);
}
std::optional<std::vector<uint8_t>> receive_blob(int fd) {
  return zc::test::receive_blob(fd, blob_header_size + blob_max_payload, child_timeout);
}

// ---- local maps --------------------------------------------------------------------------------

TEST(memory_map, wrap_describes_the_callers_memory) {
  std::vector<uint8_t> memory(100);
  auto map = memory_map::wrap(memory.data(), memory.size(), access::local_read_write);
  EXPECT_EQ(map->data(), memory.data());
  EXPECT_EQ(map->size(), 100u);
  EXPECT_EQ(map->permissions(), access::local_read_write);
  EXPECT_FALSE(map->is_remote());
  EXPECT_FALSE(map->rdma_exported());
}

TEST(memory_map, empty_range_is_refused) {
  uint8_t byte = 0;
  EXPECT_EQ(thrown_status([&] { memory_map::wrap(nullptr, 8, access::local_read_write); }),
            status::invalid_value);
  EXPECT_EQ(thrown_status([&] { memory_map::wrap(&byte, 0, access::local_read_write); }),
            status::invalid_value);
  EXPECT_EQ(thrown_status([&] { memory_map::allocate(0, access::local_read_write); }),
            status::invalid_value);
}

TEST(memory_map, allocate_gives_zeroed_page_aligned_writable_memory) {
  auto map = memory_map::allocate(5000, access::local_read_write);
  ASSERT_NE(map->data(), nullptr);
  EXPECT_EQ(map->size(), 5000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(map->data()) % static_cast<uintptr_t>(getpagesize()), 0u);
  for (size_t i = 0; i < map->size(); ++i) ASSERT_EQ(map->data()[i], 0) << i;
  std::memset(map->data(), 0xAB, map->size());
  EXPECT_EQ(map->data()[4999], 0xAB);
}

TEST(memory_map, contains_checks_the_whole_range) {
  std::vector<uint8_t> memory(64);
  auto map = memory_map::wrap(memory.data(), memory.size(), access::local_read_write);
  uint8_t* base = memory.data();
  EXPECT_TRUE(map->contains(base, 64));
  EXPECT_TRUE(map->contains(base + 10, 54));
  EXPECT_TRUE(map->contains(base + 63, 1));
  EXPECT_TRUE(map->contains(base + 64, 0));
  EXPECT_FALSE(map->contains(base + 10, 55));
  EXPECT_FALSE(map->contains(base + 64, 1));
  EXPECT_FALSE(map->contains(base + 65, 0));
  EXPECT_FALSE(map->contains(base - 1, 1));
  EXPECT_FALSE(map->contains(base + 1, std::numeric_limits<size_t>::max()));
  EXPECT_FALSE(map->contains(nullptr, 1));
}

TEST(memory_map, access_flags_combine) {
  const access rw = access::rdma_read | access::rdma_write;
  EXPECT_TRUE(has(rw, access::rdma_read));
  EXPECT_TRUE(has(rw, access::rdma_write));
  EXPECT_FALSE(has(rw, access::rdma_atomic));
  EXPECT_FALSE(has(rw, access::rdma_read | access::rdma_atomic));
  EXPECT_TRUE(has(rdma_all, rw));
  EXPECT_TRUE(has(access::local_read_only, access::local_read_only));
  // DOCA's doca_access_flag numbers.
  EXPECT_EQ(static_cast<uint32_t>(access::local_read_write), 1u);
  EXPECT_EQ(static_cast<uint32_t>(access::rdma_read), 2u);
  EXPECT_EQ(static_cast<uint32_t>(access::rdma_write), 4u);
  EXPECT_EQ(static_cast<uint32_t>(access::rdma_atomic), 8u);
  EXPECT_EQ(static_cast<uint32_t>(access::pci_read_only), 16u);
  EXPECT_EQ(static_cast<uint32_t>(access::pci_read_write), 32u);
}

// ---- RDMA export -------------------------------------------------------------------------------

TEST(memory_map, rdma_export_and_import_round_trip) {
  std::vector<uint8_t> memory(4096);
  const access perms = access::local_read_write | access::rdma_read | access::rdma_write;
  auto map = memory_map::wrap(memory.data(), memory.size(), perms);
  const auto blob = map->export_rdma();
  EXPECT_TRUE(map->rdma_exported());

  auto remote = memory_map::import_rdma(blob);
  EXPECT_TRUE(remote->is_remote());
  EXPECT_EQ(remote->remote().owner_token, process_token());
  EXPECT_NE(remote->remote().export_id, 0u);
  EXPECT_NE(remote->remote().key, 0u);
  EXPECT_EQ(payload_of(blob, blob_kind::rdma_memory).size(), rdma_payload_size);
  EXPECT_EQ(remote->remote().base, reinterpret_cast<uintptr_t>(memory.data()));
  EXPECT_EQ(remote->remote().length, memory.size());
  EXPECT_EQ(remote->remote().permissions, perms);
  EXPECT_EQ(remote->data(), memory.data());
  EXPECT_EQ(remote->size(), memory.size());
  EXPECT_EQ(remote->permissions(), perms);
  EXPECT_FALSE(remote->rdma_exported());
}

TEST(memory_map, rdma_export_names_a_live_export_table_entry) {
  std::vector<uint8_t> memory(256);
  auto map = memory_map::wrap(memory.data(), memory.size(), access::rdma_write);
  auto remote = memory_map::import_rdma(map->export_rdma());
  const remote_region& r = remote->remote();
  export_table::claim claim;
  ASSERT_EQ(export_table::acquire(r.export_id, r.key, 16, 32, access::rdma_write, claim),
            status::success);
  EXPECT_EQ(claim.data(), memory.data() + 16);
}

TEST(memory_map, exporting_twice_gives_the_same_export) {
  std::vector<uint8_t> memory(64);
  auto map = memory_map::wrap(memory.data(), memory.size(), access::rdma_read);
  auto first = memory_map::import_rdma(map->export_rdma());
  auto second = memory_map::import_rdma(map->export_rdma());
  EXPECT_EQ(first->remote().export_id, second->remote().export_id);
  EXPECT_EQ(first->remote().key, second->remote().key);
}

TEST(memory_map, each_rdma_export_has_its_own_key) {
  std::vector<uint8_t> memory(128);
  auto one = memory_map::wrap(memory.data(), 64, access::rdma_read);
  auto two = memory_map::wrap(memory.data() + 64, 64, access::rdma_read);
  auto a = memory_map::import_rdma(one->export_rdma());
  auto b = memory_map::import_rdma(two->export_rdma());
  EXPECT_NE(a->remote().key, b->remote().key);
  EXPECT_NE(a->remote().export_id, b->remote().export_id);
  // One export's key does not open the other.
  export_table::claim claim;
  EXPECT_EQ(
      export_table::acquire(b->remote().export_id, a->remote().key, 0, 8, access::rdma_read, claim),
      status::not_permitted);
  EXPECT_EQ(
      export_table::acquire(b->remote().export_id, b->remote().key, 0, 8, access::rdma_read, claim),
      status::success);
}

TEST(memory_map, rdma_blob_with_a_tampered_key_gets_no_access) {
  std::vector<uint8_t> memory(64);
  auto map = memory_map::wrap(memory.data(), memory.size(), access::rdma_read);
  auto payload = payload_of(map->export_rdma(), blob_kind::rdma_memory);
  // Re-framed with a correct checksum: the frame is fine, the key is not.
  payload[rdma_key_offset + 7] ^= 0x01;
  auto forged = memory_map::import_rdma(frame_blob(blob_kind::rdma_memory, payload));
  const remote_region& r = forged->remote();
  export_table::claim claim;
  EXPECT_EQ(export_table::acquire(r.export_id, r.key, 0, 8, access::rdma_read, claim),
            status::not_permitted);
  EXPECT_FALSE(claim);
}

// What a holder of one export blob could try: keep its key, name another export's id (ids are
// small and predictable). Before keys, the process-wide token in every blob let this through.
TEST(memory_map, rdma_blob_naming_another_export_gets_no_access) {
  std::vector<uint8_t> a(64), b(64);
  auto given = memory_map::wrap(a.data(), a.size(), access::rdma_read);
  auto other = memory_map::wrap(b.data(), b.size(), access::rdma_read);
  auto payload = payload_of(given->export_rdma(), blob_kind::rdma_memory);
  const uint64_t other_id = memory_map::import_rdma(other->export_rdma())->remote().export_id;
  store_be64(payload.data() + rdma_id_offset, other_id);
  store_be64(payload.data() + rdma_base_offset, reinterpret_cast<uintptr_t>(b.data()));
  auto forged = memory_map::import_rdma(frame_blob(blob_kind::rdma_memory, payload));
  const remote_region& r = forged->remote();
  export_table::claim claim;
  EXPECT_EQ(export_table::acquire(r.export_id, r.key, 0, 8, access::rdma_read, claim),
            status::not_permitted);
}

TEST(memory_map, rdma_export_without_rdma_access_is_not_permitted) {
  std::vector<uint8_t> memory(64);
  for (access perms : {access::local_read_only, access::local_read_write,
                       access::pci_read_write | access::local_read_write}) {
    auto map = memory_map::wrap(memory.data(), memory.size(), perms);
    EXPECT_EQ(thrown_status([&] { map->export_rdma(); }), status::not_permitted);
    EXPECT_FALSE(map->rdma_exported());
  }
}

TEST(memory_map, any_single_rdma_access_allows_an_rdma_export) {
  std::vector<uint8_t> memory(64);
  for (access perms : {access::rdma_read, access::rdma_write, access::rdma_atomic}) {
    auto map = memory_map::wrap(memory.data(), memory.size(), perms);
    EXPECT_NO_THROW(map->export_rdma());
  }
}

TEST(memory_map, remote_map_cannot_be_exported_again) {
  std::vector<uint8_t> memory(64);
  auto map = memory_map::wrap(memory.data(), memory.size(), rdma_all);
  auto remote = memory_map::import_rdma(map->export_rdma());
  EXPECT_EQ(thrown_status([&] { remote->export_rdma(); }), status::not_supported);
  EXPECT_EQ(thrown_status([&] { remote->export_pci(); }), status::not_permitted);
}

TEST(memory_map, withdrawn_export_is_not_found) {
  std::vector<uint8_t> memory(64);
  auto map = memory_map::wrap(memory.data(), memory.size(), access::rdma_read);
  auto remote = memory_map::import_rdma(map->export_rdma());
  map->withdraw_rdma_export();
  EXPECT_FALSE(map->rdma_exported());
  const remote_region& r = remote->remote();
  export_table::claim claim;
  EXPECT_EQ(export_table::acquire(r.export_id, r.key, 0, 8, access::rdma_read, claim),
            status::not_found);
  // A new export of the same map is a new entry with a new key; the old id stays dead.
  auto again = memory_map::import_rdma(map->export_rdma());
  EXPECT_NE(again->remote().export_id, r.export_id);
  EXPECT_NE(again->remote().key, r.key);
  EXPECT_EQ(export_table::acquire(r.export_id, r.key, 0, 8, access::rdma_read, claim),
            status::not_found);
  EXPECT_EQ(export_table::acquire(r.export_id, again->remote().key, 0, 8, access::rdma_read, claim),
            status::not_found);
}

TEST(memory_map, destroyed_map_is_no_longer_exported) {
  std::vector<uint8_t> memory(64);
  auto map = memory_map::wrap(memory.data(), memory.size(), access::rdma_read);
  auto remote = memory_map::import_rdma(map->export_rdma());
  map.reset();
  const remote_region& r = remote->remote();
  export_table::claim claim;
  EXPECT_EQ(export_table::acquire(r.export_id, r.key, 0, 8, access::rdma_read, claim),
            status::not_found);
}

// ---- RDMA export lifetime: withdraw at once, free when drained ---------------------------------

// Whether the page holding p is mapped in this process.
bool mapped(const void* p) {
  const uintptr_t page = static_cast<uintptr_t>(getpagesize());
  void* start = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) / page * page);
  return msync(start, page, MS_ASYNC) == 0;
}

TEST(memory_map, destroyed_map_stays_mapped_until_the_last_claim_is_released) {
  auto map = memory_map::allocate(4096, access::local_read_write | access::rdma_write);
  auto remote = memory_map::import_rdma(map->export_rdma());
  const remote_region& r = remote->remote();
  export_table::claim claim;
  ASSERT_EQ(export_table::acquire(r.export_id, r.key, 0, 64, access::rdma_write, claim),
            status::success);
  uint8_t* p = claim.data();

  const auto start = std::chrono::steady_clock::now();
  map.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s) << "destruction waited for the claim";
  export_table::claim late;
  EXPECT_EQ(export_table::acquire(r.export_id, r.key, 0, 64, access::rdma_write, late),
            status::not_found);
  ASSERT_TRUE(mapped(p)) << "memory unmapped under a live claim";
  p[0] = 0x5A;  // the transfer in progress finishes on valid memory
  EXPECT_EQ(p[0], 0x5A);

  claim.reset();  // the last claim: the memory goes now
  EXPECT_FALSE(mapped(p));
}

TEST(memory_map, destroyed_map_without_claims_is_unmapped_at_once) {
  auto map = memory_map::allocate(4096, access::local_read_write | access::rdma_write);
  map->export_rdma();
  const uint8_t* p = map->data();
  map.reset();
  EXPECT_FALSE(mapped(p));
}

TEST(memory_map, withdrawn_export_still_claimed_keeps_memory_after_the_map_is_gone) {
  auto map = memory_map::allocate(4096, access::local_read_write | access::rdma_read);
  auto first = memory_map::import_rdma(map->export_rdma());
  export_table::claim claim;
  ASSERT_EQ(export_table::acquire(first->remote().export_id, first->remote().key, 0, 8,
                                  access::rdma_read, claim),
            status::success);
  const auto start = std::chrono::steady_clock::now();
  map->withdraw_rdma_export();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  auto second = memory_map::import_rdma(map->export_rdma());  // a new export meanwhile
  EXPECT_NE(second->remote().export_id, first->remote().export_id);
  const uint8_t* p = claim.data();
  map.reset();
  EXPECT_TRUE(mapped(p)) << "the first export's claim lost its memory";
  claim.reset();
  EXPECT_FALSE(mapped(p));
}

TEST(memory_map, wrapped_map_destroyed_with_a_live_claim_logs_an_error) {
  std::vector<uint8_t> memory(64);
  auto map = memory_map::wrap(memory.data(), memory.size(), access::rdma_read);
  auto remote = memory_map::import_rdma(map->export_rdma());
  export_table::claim claim;
  ASSERT_EQ(export_table::acquire(remote->remote().export_id, remote->remote().key, 0, 8,
                                  access::rdma_read, claim),
            status::success);
  testing::internal::CaptureStdout();
  map.reset();
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("error"), std::string::npos) << out;
  EXPECT_NE(out.find("stop the rdma contexts"), std::string::npos) << out;
  claim.reset();
}

TEST(memory_map, wrapped_map_destroyed_without_claims_logs_nothing) {
  std::vector<uint8_t> memory(64);
  auto map = memory_map::wrap(memory.data(), memory.size(), access::rdma_read);
  auto remote = memory_map::import_rdma(map->export_rdma());
  {
    export_table::claim claim;
    ASSERT_EQ(export_table::acquire(remote->remote().export_id, remote->remote().key, 0, 8,
                                    access::rdma_read, claim),
              status::success);
  }
  testing::internal::CaptureStdout();
  map.reset();
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "");
}

TEST(memory_map, malformed_rdma_blob_is_refused) {
  std::vector<uint8_t> memory(64);
  auto map = memory_map::wrap(memory.data(), memory.size(), rdma_all);
  const auto blob = map->export_rdma();
  const auto payload = payload_of(blob, blob_kind::rdma_memory);

  auto import_with = [](std::vector<uint8_t> p) {
    return thrown_status([&] { memory_map::import_rdma(frame_blob(blob_kind::rdma_memory, p)); });
  };
  auto zero_id = payload;
  store_be64(zero_id.data() + rdma_id_offset, 0);
  EXPECT_EQ(import_with(zero_id), status::invalid_value);
  auto zero_key = payload;
  store_be64(zero_key.data() + rdma_key_offset, 0);
  EXPECT_EQ(import_with(zero_key), status::invalid_value);
  auto zero_length = payload;
  store_be64(zero_length.data() + rdma_length_offset, 0);
  EXPECT_EQ(import_with(zero_length), status::invalid_value);
  auto wraps = payload;
  store_be64(wraps.data() + rdma_base_offset, std::numeric_limits<uint64_t>::max() - 8);
  EXPECT_EQ(import_with(wraps), status::invalid_value);
  auto longer = payload;
  longer.push_back(0);
  EXPECT_EQ(import_with(longer), status::invalid_value);
  auto shorter = payload;
  shorter.pop_back();
  EXPECT_EQ(import_with(shorter), status::invalid_value);

  auto truncated = blob;
  truncated.resize(blob.size() - 1);
  EXPECT_EQ(thrown_status([&] { memory_map::import_rdma(truncated); }), status::invalid_value);
  EXPECT_EQ(thrown_status([&] { memory_map::import_rdma({}); }), status::invalid_value);
}

TEST(memory_map, blob_of_the_wrong_kind_is_refused) {
  auto local = memory_map::allocate(
      4096, access::local_read_write | access::pci_read_write | access::rdma_read);
  EXPECT_EQ(thrown_status([&] { memory_map::import_rdma(local->export_pci()); }),
            status::invalid_value);
  EXPECT_EQ(thrown_status([&] { memory_map::import_pci(local->export_rdma()); }),
            status::invalid_value);
}

// ---- PCI export --------------------------------------------------------------------------------

TEST(memory_map, pci_export_and_import_map_the_same_pages) {
  auto exporter = memory_map::allocate(map_size, access::local_read_write | access::pci_read_write);
  auto importer = memory_map::import_pci(exporter->export_pci());
  ASSERT_NE(importer->data(), exporter->data());
  EXPECT_EQ(importer->size(), map_size);
  EXPECT_EQ(importer->permissions(), access::local_read_write | access::pci_read_write);
  EXPECT_FALSE(importer->is_remote());

  std::memcpy(exporter->data() + 100, "from exporter", 14);
  EXPECT_STREQ(reinterpret_cast<const char*>(importer->data() + 100), "from exporter");
  std::memcpy(importer->data() + map_size - 14, "from importer", 14);
  EXPECT_STREQ(reinterpret_cast<const char*>(exporter->data() + map_size - 14), "from importer");
}

TEST(memory_map, pci_import_outlives_the_exporting_map) {
  auto exporter = memory_map::allocate(map_size, access::local_read_write | access::pci_read_write);
  exporter->data()[0] = 0x42;
  auto importer = memory_map::import_pci(exporter->export_pci());
  exporter.reset();
  EXPECT_EQ(importer->data()[0], 0x42);
}

TEST(memory_map, read_only_pci_export_is_imported_read_only) {
  auto exporter = memory_map::allocate(map_size, access::local_read_write | access::pci_read_only);
  exporter->data()[7] = 0x77;
  auto importer = memory_map::import_pci(exporter->export_pci());
  // The exporter may write its own memory; the importer's mapping may not.
  EXPECT_EQ(importer->permissions(), access::pci_read_only);
  EXPECT_FALSE(has(importer->permissions(), access::pci_read_write));
  EXPECT_EQ(importer->data()[7], 0x77);
  exporter->data()[8] = 0x88;
  EXPECT_EQ(importer->data()[8], 0x88);

  // The mapping itself is read-only: a child that writes through it dies of SIGSEGV.
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    signal(SIGSEGV, SIG_DFL);  // not a sanitizer's handler: die of the signal itself
    *reinterpret_cast<volatile uint8_t*>(importer->data()) = 1;
    _exit(0);
  }
  auto st = reap(child);
  ASSERT_TRUE(st.has_value()) << "child did not end";
  EXPECT_TRUE(WIFSIGNALED(*st) && WTERMSIG(*st) == SIGSEGV) << "wait status " << *st;
  EXPECT_EQ(exporter->data()[0], 0);
}

TEST(memory_map, read_only_pci_import_keeps_no_write_right_to_pass_on) {
  auto exporter =
      memory_map::allocate(map_size, access::local_read_write | access::pci_read_only | rdma_all);
  auto importer = memory_map::import_pci(exporter->export_pci());
  EXPECT_EQ(importer->permissions(), access::pci_read_only | access::rdma_read);
  for (access write :
       {access::local_read_write, access::rdma_write, access::rdma_atomic, access::pci_read_write})
    EXPECT_FALSE(has(importer->permissions(), write)) << static_cast<uint32_t>(write);

  // Re-exported for RDMA, the read-only mapping serves reads and refuses writes and atomics:
  // a remote write would otherwise land on a read-only page and kill this process.
  auto remote = memory_map::import_rdma(importer->export_rdma());
  EXPECT_FALSE(has(remote->permissions(), access::rdma_write));
  EXPECT_FALSE(has(remote->permissions(), access::rdma_atomic));
  const remote_region& r = remote->remote();
  export_table::claim claim;
  EXPECT_EQ(export_table::acquire(r.export_id, r.key, 0, 8, access::rdma_write, claim),
            status::not_permitted);
  EXPECT_EQ(export_table::acquire(r.export_id, r.key, 0, 8, access::rdma_atomic, claim),
            status::not_permitted);
  EXPECT_FALSE(claim);
  ASSERT_EQ(export_table::acquire(r.export_id, r.key, 0, 8, access::rdma_read, claim),
            status::success);
  EXPECT_EQ(claim.data(), importer->data());
}

TEST(memory_map, pci_export_seals_cannot_be_changed_by_an_importer) {
  auto exporter = memory_map::allocate(4096, access::local_read_write | access::pci_read_write);
  const auto payload = payload_of(exporter->export_pci(), blob_kind::pci_memory);
  // What a same-user importer can open: the exporter's memfd, writable, through /proc.
  const std::string path =
      "/proc/self/fd/" + std::to_string(load_be32(payload.data() + pci_fd_offset));
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const int seals = fcntl(fd, F_GET_SEALS);
  EXPECT_NE(seals & F_SEAL_SEAL, 0);
  EXPECT_NE(seals & F_SEAL_SHRINK, 0);
  EXPECT_NE(seals & F_SEAL_GROW, 0);
  // Adding F_SEAL_FUTURE_WRITE would lock every later importer out of writing.
  EXPECT_NE(fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE), 0);
  EXPECT_EQ(errno, EPERM);
  close(fd);
  auto importer = memory_map::import_pci(exporter->export_pci());
  importer->data()[0] = 1;
  EXPECT_EQ(exporter->data()[0], 1);
}

TEST(memory_map, pci_export_without_pci_access_is_not_permitted) {
  auto map = memory_map::allocate(4096, access::local_read_write | access::rdma_read);
  EXPECT_EQ(thrown_status([&] { map->export_pci(); }), status::not_permitted);
}

TEST(memory_map, pci_export_of_wrapped_memory_is_not_supported) {
  std::vector<uint8_t> memory(4096);
  auto map = memory_map::wrap(memory.data(), memory.size(),
                              access::local_read_write | access::pci_read_write);
  EXPECT_EQ(thrown_status([&] { map->export_pci(); }), status::not_supported);
}

TEST(memory_map, tampered_token_in_a_pci_blob_is_not_permitted) {
  auto exporter = memory_map::allocate(4096, access::local_read_write | access::pci_read_write);
  auto payload = payload_of(exporter->export_pci(), blob_kind::pci_memory);
  // Re-framed with a correct checksum: the frame is fine, the claim it makes is not.
  payload[pci_token_offset] = payload[pci_token_offset] == 'a' ? 'b' : 'a';
  EXPECT_EQ(
      thrown_status([&] { memory_map::import_pci(frame_blob(blob_kind::pci_memory, payload)); }),
      status::not_permitted);
}

TEST(memory_map, pci_blob_naming_another_descriptor_is_not_permitted) {
  auto exporter = memory_map::allocate(4096, access::local_read_write | access::pci_read_write);
  auto other = memory_map::allocate(4096, access::local_read_write | access::pci_read_write);
  auto payload = payload_of(exporter->export_pci(), blob_kind::pci_memory);
  const auto other_payload = payload_of(other->export_pci(), blob_kind::pci_memory);
  // Same process, another live memfd (and then stderr): the token does not match its name.
  for (uint32_t fd : {load_be32(other_payload.data() + pci_fd_offset), 2u}) {
    store_be32(payload.data() + pci_fd_offset, fd);
    EXPECT_EQ(
        thrown_status([&] { memory_map::import_pci(frame_blob(blob_kind::pci_memory, payload)); }),
        status::not_permitted)
        << "fd " << fd;
  }
}

TEST(memory_map, pci_blob_claiming_more_than_was_exported_is_refused) {
  auto exporter = memory_map::allocate(4096, access::local_read_write | access::pci_read_write);
  auto payload = payload_of(exporter->export_pci(), blob_kind::pci_memory);
  store_be64(payload.data() + pci_length_offset, uint64_t{1} << 40);
  EXPECT_EQ(
      thrown_status([&] { memory_map::import_pci(frame_blob(blob_kind::pci_memory, payload)); }),
      status::invalid_value);
  store_be64(payload.data() + pci_length_offset, 0);
  EXPECT_EQ(
      thrown_status([&] { memory_map::import_pci(frame_blob(blob_kind::pci_memory, payload)); }),
      status::invalid_value);
}

TEST(memory_map, malformed_pci_blob_is_refused) {
  auto exporter = memory_map::allocate(4096, access::local_read_write | access::pci_read_write);
  auto blob = exporter->export_pci();
  const auto payload = payload_of(blob, blob_kind::pci_memory);
  for (size_t n = 0; n < blob.size(); ++n) {
    std::vector<uint8_t> cut(blob.begin(), blob.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_EQ(thrown_status([&] { memory_map::import_pci(cut); }), status::invalid_value) << n;
  }
  auto longer = payload;
  longer.push_back(0);
  EXPECT_EQ(
      thrown_status([&] { memory_map::import_pci(frame_blob(blob_kind::pci_memory, longer)); }),
      status::invalid_value);
  blob[blob_header_size + pci_access_offset] ^= 1;  // checksum no longer matches
  EXPECT_EQ(thrown_status([&] { memory_map::import_pci(blob); }), status::invalid_value);
}

TEST(memory_map, pci_import_from_another_process_shares_its_pages) {
  const auto child = zc::test::fork_piped([](int to_parent, int from_parent) {
    auto map = memory_map::allocate(map_size, access::local_read_write | access::pci_read_write);
    std::memset(map->data(), 0xA5, map_size);
    uint8_t go = 0;
    if (!send_blob(to_parent, map->export_pci()) || !read_exactly(from_parent, &go, 1)) return 1;
    return map->data()[0] == 0x5A && map->data()[map_size - 1] == 0xA5 ? 0 : 2;
  });
  ASSERT_GE(child.pid, 0);
  auto blob = receive_blob(child.from_child);
  ASSERT_TRUE(blob.has_value());
  {
    auto importer = memory_map::import_pci(*blob);
    EXPECT_EQ(importer->data()[0], 0xA5);
    EXPECT_EQ(importer->data()[map_size - 1], 0xA5);
    importer->data()[0] = 0x5A;
  }
  const uint8_t go = 1;
  EXPECT_TRUE(write_all(child.to_child, &go, 1));
  auto st = reap(child.pid);
  close(child.from_child);
  close(child.to_child);
  ASSERT_TRUE(st.has_value()) << "child did not end";
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0)
      << "child saw the parent's write: exit " << WEXITSTATUS(*st);
}

TEST(memory_map, pci_blob_of_an_exited_process_is_not_found) {
  const auto child = zc::test::fork_piped([](int to_parent, int) {
    auto map = memory_map::allocate(4096, access::local_read_write | access::pci_read_write);
    return send_blob(to_parent, map->export_pci()) ? 0 : 2;
  });
  ASSERT_GE(child.pid, 0);
  auto blob = receive_blob(child.from_child);
  close(child.from_child);
  close(child.to_child);
  auto st = reap(child.pid);
  ASSERT_TRUE(st.has_value());
  ASSERT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0);
  ASSERT_TRUE(blob.has_value());
  EXPECT_EQ(thrown_status([&] { memory_map::import_pci(*blob); }), status::not_found);
}

TEST(memory_map, read_only_pci_export_cannot_be_upgraded_by_editing_the_blob) {
  auto map = memory_map::allocate(4096, access::local_read_write | access::pci_read_only);
  auto blob = map->export_pci();
  std::span<const uint8_t> payload;
  ASSERT_EQ(parse_blob(blob, blob_kind::pci_memory, payload), status::success);
  // The last u32 of the payload is the access flags: claim read-write.
  std::vector<uint8_t> forged(payload.begin(), payload.end());
  store_be32(forged.data() + forged.size() - 4,
             static_cast<uint32_t>(access::local_read_write | access::pci_read_write));
  try {
    memory_map::import_pci(frame_blob(blob_kind::pci_memory, forged));
    FAIL() << "a read-only export was mapped writable";
  } catch (const status_error& e) {
    EXPECT_EQ(e.code(), status::not_permitted);
  }
  // The honest blob still imports, read-only, and the exporter can still write its own mapping.
  auto imported = memory_map::import_pci(blob);
  map->data()[0] = 42;
  EXPECT_EQ(imported->data()[0], 42);
}

// ---- adopted memory (memory_map::adopt) --------------------------------------------------------

size_t page_size() {
  return static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

void fill(uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed + i * 7 + i / 251);
}

bool has_pattern(const uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != static_cast<uint8_t>(seed + i * 7 + i / 251)) return false;
  return true;
}

// The name of the file mapped at p ("" for anonymous memory), from /proc/self/map_files.
std::string mapped_file(const void* p, size_t n) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  char link[128], target[256] = {};
  snprintf(link, sizeof(link), "/proc/self/map_files/%lx-%lx", static_cast<unsigned long>(a),
           static_cast<unsigned long>(a + n));
  const ssize_t len = readlink(link, target, sizeof(target) - 1);
  return len < 0 ? std::string() : std::string(target, static_cast<size_t>(len));
}

struct aligned_memory {
  explicit aligned_memory(size_t n)
      : size(n), data(static_cast<uint8_t*>(std::aligned_alloc(page_size(), n))) {}
  ~aligned_memory() { std::free(data); }
  size_t size;
  uint8_t* data;
};

TEST(memory_map, adopt_keeps_the_addresses_and_contents_and_makes_them_pci_shareable) {
  const size_t n = 4 * page_size();
  aligned_memory memory(n);
  ASSERT_NE(memory.data, nullptr);
  fill(memory.data, n, 3);
  auto map = memory_map::adopt(memory.data, n, access::local_read_write | access::pci_read_write);
  EXPECT_EQ(map->data(), memory.data);
  EXPECT_EQ(map->size(), n);
  EXPECT_TRUE(has_pattern(memory.data, n, 3)) << "contents before adoption are lost";
  EXPECT_NE(mapped_file(memory.data, n).find("zcstore-"), std::string::npos)
      << "the range is not the memfd's mapping";
  auto importer = memory_map::import_pci(map->export_pci());
  ASSERT_EQ(importer->size(), n);
  EXPECT_TRUE(has_pattern(importer->data(), n, 3));
  importer->data()[n - 1] = 0xEE;  // the importer's write reaches the original pointer
  EXPECT_EQ(memory.data[n - 1], 0xEE);
  memory.data[0] = 0xDD;
  EXPECT_EQ(importer->data()[0], 0xDD);
}

TEST(memory_map, destroyed_adopted_map_gives_the_memory_back_private_with_its_contents) {
  const size_t n = 2 * page_size();
  aligned_memory memory(n);
  fill(memory.data, n, 9);
  auto map = memory_map::adopt(memory.data, n, access::local_read_write | access::pci_read_write);
  auto importer = memory_map::import_pci(map->export_pci());
  memory.data[5] = 0x11;
  map.reset();
  EXPECT_EQ(mapped_file(memory.data, n), "") << "the range still maps the memfd";
  EXPECT_EQ(memory.data[5], 0x11);
  memory.data[5] = static_cast<uint8_t>(9 + 5 * 7);
  EXPECT_TRUE(has_pattern(memory.data, n, 9));
  // The importer keeps the memfd's pages only: no longer the program's.
  importer->data()[0] = static_cast<uint8_t>(memory.data[0] + 1);
  EXPECT_TRUE(has_pattern(memory.data, n, 9));
}

TEST(memory_map, adopt_refuses_an_unaligned_range_and_leaves_it_alone) {
  const size_t page = page_size();
  aligned_memory memory(3 * page);
  fill(memory.data, 3 * page, 1);
  const auto rw = access::local_read_write | access::pci_read_write;
  EXPECT_EQ(thrown_status([&] { memory_map::adopt(memory.data + 1, page, rw); }),
            status::invalid_value);
  EXPECT_EQ(thrown_status([&] { memory_map::adopt(memory.data, page + 100, rw); }),
            status::invalid_value);
  EXPECT_EQ(thrown_status([&] { memory_map::adopt(nullptr, page, rw); }), status::invalid_value);
  EXPECT_EQ(thrown_status([&] { memory_map::adopt(memory.data, 0, rw); }), status::invalid_value);
  EXPECT_EQ(mapped_file(memory.data, page), "");
  EXPECT_TRUE(has_pattern(memory.data, 3 * page, 1));
}

TEST(memory_map, adopt_refuses_read_only_shared_and_unmapped_memory) {
  const size_t page = page_size();
  const auto rw = access::local_read_write | access::pci_read_write;
  void* ro = mmap(nullptr, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(ro, MAP_FAILED);
  EXPECT_EQ(thrown_status([&] { memory_map::adopt(ro, page, rw); }), status::not_permitted);
  munmap(ro, page);

  auto* shared = static_cast<uint8_t*>(
      mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(shared, MAP_FAILED);
  shared[0] = 7;
  EXPECT_EQ(thrown_status([&] { memory_map::adopt(shared, page, rw); }), status::not_permitted);
  EXPECT_EQ(shared[0], 7);
  munmap(shared, page);

  // Three pages with a hole in the middle.
  auto* holed = static_cast<uint8_t*>(
      mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(holed, MAP_FAILED);
  holed[0] = 5;
  ASSERT_EQ(munmap(holed + page, page), 0);
  EXPECT_EQ(thrown_status([&] { memory_map::adopt(holed, 3 * page, rw); }), status::invalid_value);
  EXPECT_EQ(holed[0], 5);
  munmap(holed, page);
  munmap(holed + 2 * page, page);
}

TEST(memory_map, adopting_more_than_memory_can_hold_is_refused_untouched) {
  // Reserved address space only (no memory behind it until touched).
  const size_t huge = size_t{1} << 40;
  auto* p = static_cast<uint8_t*>(mmap(nullptr, huge, PROT_READ | PROT_WRITE,
                                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
  if (p == MAP_FAILED) GTEST_SKIP() << "cannot reserve 1 TiB of address space here";
  p[0] = 42;
  EXPECT_EQ(thrown_status([&] {
              memory_map::adopt(p, huge, access::local_read_write | access::pci_read_write);
            }),
            status::no_memory);
  EXPECT_EQ(p[0], 42);
  EXPECT_EQ(mapped_file(p, huge), "");
  munmap(p, huge);
}

TEST(memory_map, read_only_pci_adoption_is_imported_read_only) {
  const size_t n = page_size();
  aligned_memory memory(n);
  fill(memory.data, n, 4);
  auto map = memory_map::adopt(memory.data, n, access::local_read_write | access::pci_read_only);
  auto importer = memory_map::import_pci(map->export_pci());
  EXPECT_FALSE(has(importer->permissions(), access::pci_read_write));
  EXPECT_TRUE(has_pattern(importer->data(), n, 4));
  memory.data[0] = 0x77;  // the program still writes its own memory
  EXPECT_EQ(importer->data()[0], 0x77);
}

TEST(memory_map, blob_kind_can_be_read_before_parsing) {
  auto pci = memory_map::allocate(4096, access::local_read_write | access::pci_read_write);
  EXPECT_EQ(peek_blob_kind(pci->export_pci()), static_cast<uint16_t>(blob_kind::pci_memory));
  std::vector<uint8_t> memory(64);
  auto rdma = memory_map::wrap(memory.data(), memory.size(), access::rdma_read);
  EXPECT_EQ(peek_blob_kind(rdma->export_rdma()), static_cast<uint16_t>(blob_kind::rdma_memory));
  EXPECT_EQ(peek_blob_kind(memory), 0);
  EXPECT_EQ(peek_blob_kind({}), 0);
}

TEST(memory_map, adopted_memory_is_imported_by_another_process) {
  // The child adopts memory it allocated after the fork, so the parent shares nothing with it
  // but what the import maps.
  const size_t n = 3 * page_size();
  const auto child = zc::test::fork_piped([n](int to_parent, int from_parent) {
    auto* memory = static_cast<uint8_t*>(std::aligned_alloc(page_size(), n));
    fill(memory, n, 21);
    auto map = memory_map::adopt(memory, n, access::local_read_write | access::pci_read_write);
    uint8_t go = 0;
    int code = 1;
    if (send_blob(to_parent, map->export_pci()) && read_exactly(from_parent, &go, 1))
      code = has_pattern(memory, n, 22) ? 0 : 2;  // the parent's bytes, by the original pointer
    map.reset();
    if (code == 0 && !has_pattern(memory, n, 22)) code = 4;  // kept after the map is gone
    std::free(memory);
    return code;
  });
  ASSERT_GE(child.pid, 0);
  auto blob = receive_blob(child.from_child);
  ASSERT_TRUE(blob.has_value());
  {
    auto importer = memory_map::import_pci(*blob);
    ASSERT_EQ(importer->size(), n);
    EXPECT_TRUE(has_pattern(importer->data(), n, 21));
    fill(importer->data(), n, 22);
  }
  const uint8_t go = 1;
  EXPECT_TRUE(write_all(child.to_child, &go, 1));
  auto st = reap(child.pid);
  close(child.from_child);
  close(child.to_child);
  ASSERT_TRUE(st.has_value()) << "child did not end";
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0)
      << "child did not see the parent's bytes: exit " << WEXITSTATUS(*st);
}

}  // namespace
}  // namespace zc::core
