// doca_mmap_export_pci over program memory, as a DOCA program does it: memory from aligned_alloc
// (or malloc), a map started with a PCI permission (which adopts the range into a memfd at the
// same addresses), its export imported by another process with doca_mmap_create_from_export.
// Cross-process cases fork a child before it allocates anything; every wait is bounded.
#include <doca_dev.h>
#include <doca_error.h>
#include <doca_mmap.h>
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
#include <optional>
#include <thread>
#include <vector>

#include "support/child_io.hpp"
#include "unit/doca/two_engines.hpp"

namespace {

using namespace std::chrono_literals;
using zc::doca::testing::open_device;

constexpr auto bound = 10s;

size_t page_size() {
  return static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

void fill(uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed + i * 13 + i / 509);
}

bool has_pattern(const uint8_t* p, size_t n, uint8_t seed) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != static_cast<uint8_t>(seed + i * 13 + i / 509)) return false;
  return true;
}

// The child IO of tests/support/child_io.hpp, bounded by `bound`.
using zc::test::write_all;
std::optional<int> reap(pid_t pid) {
  return zc::test::reap(pid, bound);
}
bool read_exactly(int fd, void* out, size_t n) {
  return zc::test::read_exactly(fd, out, n, bound);
}
bool send_blob(int fd, const void* blob, size_t len) {
  return zc::test::send_blob(fd, {static_cast<const uint8_t*>(blob), len});
}
std::optional<std::vector<uint8_t>> receive_blob(int fd) {
  return zc::test::receive_blob(fd, 1 << 20, bound);
}

doca_error_t start_mmap(doca_mmap* m, void* addr, size_t len, uint32_t access) {
  if (doca_mmap_set_memrange(m, addr, len) != DOCA_SUCCESS ||
      doca_mmap_set_permissions(m, access) != DOCA_SUCCESS)
    return DOCA_ERROR_UNEXPECTED;
  return doca_mmap_start(m);
}

constexpr uint32_t pci_rw = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_PCI_READ_WRITE;

// Process A (the child): aligned_alloc, a pattern, a map started for PCI, its export sent to B.
// Exit 0 when A saw B's pattern through its original pointer, and kept it after the destroy.
int exporter(int to_parent, int to_child, size_t n) {
  auto* memory = static_cast<uint8_t*>(std::aligned_alloc(page_size(), n));
  if (memory == nullptr) return 10;
  fill(memory, n, 1);
  doca_dev* dev = open_device("sm");
  doca_mmap* m = nullptr;
  if (dev == nullptr || doca_mmap_create(&m) != DOCA_SUCCESS) return 11;
  if (start_mmap(m, memory, n, pci_rw) != DOCA_SUCCESS) return 12;
  void* addr = nullptr;
  size_t len = 0;
  if (doca_mmap_get_memrange(m, &addr, &len) != DOCA_SUCCESS || addr != memory || len != n)
    return 13;
  if (!has_pattern(memory, n, 1)) return 14;  // the contents before adoption
  const void* blob = nullptr;
  size_t blob_len = 0;
  if (doca_mmap_export_pci(m, dev, &blob, &blob_len) != DOCA_SUCCESS || blob_len == 0) return 15;
  uint8_t done = 0;
  if (!send_blob(to_parent, blob, blob_len) || !read_exactly(to_child, &done, 1)) return 16;
  if (!has_pattern(memory, n, 2)) return 17;  // B's bytes, through A's own pointer
  if (doca_mmap_destroy(m) != DOCA_SUCCESS) return 18;
  if (!has_pattern(memory, n, 2)) return 19;  // kept once the map is gone
  fill(memory, n, 3);                         // and still A's writable memory
  if (!has_pattern(memory, n, 3)) return 20;
  std::free(memory);
  doca_dev_close(dev);
  return 0;
}

// A child that ended early must fail the test, not kill it with SIGPIPE on the next write.
struct ignore_sigpipe {
  ignore_sigpipe() { previous = signal(SIGPIPE, SIG_IGN); }
  ~ignore_sigpipe() { signal(SIGPIPE, previous); }
  sighandler_t previous;
};

TEST(doca_mmap_pci, aligned_alloc_memory_is_shared_with_another_process_byte_for_byte) {
  const size_t n = 5 * page_size();
  ignore_sigpipe guard;
  const auto child = zc::test::fork_piped(
      [n](int to_parent, int from_parent) { return exporter(to_parent, from_parent, n); });
  ASSERT_GE(child.pid, 0);
  auto blob = receive_blob(child.from_child);
  if (blob.has_value()) {
    // Process B: the blob through DOCA's API only.
    doca_dev* dev = open_device("sm");
    ASSERT_NE(dev, nullptr);
    doca_mmap* imported = nullptr;
    doca_data user{.u64 = 7};
    ASSERT_EQ(doca_mmap_create_from_export(&user, blob->data(), blob->size(), dev, &imported),
              DOCA_SUCCESS);
    void* addr = nullptr;
    size_t len = 0;
    ASSERT_EQ(doca_mmap_get_memrange(imported, &addr, &len), DOCA_SUCCESS);
    ASSERT_EQ(len, n);
    auto* bytes = static_cast<uint8_t*>(addr);
    EXPECT_TRUE(has_pattern(bytes, n, 1)) << "B does not see A's pattern";
    fill(bytes, n, 2);
    doca_data got{};
    EXPECT_EQ(doca_mmap_get_user_data(imported, &got), DOCA_SUCCESS);
    EXPECT_EQ(got.u64, 7u);
    // An imported map cannot be exported for PCI again.
    const void* again = nullptr;
    size_t again_len = 0;
    EXPECT_EQ(doca_mmap_export_pci(imported, dev, &again, &again_len), DOCA_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(doca_mmap_destroy(imported), DOCA_SUCCESS);
    EXPECT_EQ(doca_dev_close(dev), DOCA_SUCCESS);
  }
  const uint8_t done = 1;
  write_all(child.to_child, &done, 1);
  auto st = reap(child.pid);
  close(child.from_child);
  close(child.to_child);
  ASSERT_TRUE(blob.has_value()) << "no export from A";
  ASSERT_TRUE(st.has_value()) << "A did not end";
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << "A failed at step " << WEXITSTATUS(*st);
}

TEST(doca_mmap_pci, unaligned_malloc_range_is_refused_and_left_as_it_was) {
  const size_t page = page_size();
  auto* memory = static_cast<uint8_t*>(std::malloc(3 * page));
  ASSERT_NE(memory, nullptr);
  fill(memory, 3 * page, 5);
  doca_dev* dev = open_device("sm");
  ASSERT_NE(dev, nullptr);
  // An address inside a page, then a page-aligned address with a length that ends inside one.
  uint8_t* aligned = memory + (page - reinterpret_cast<uintptr_t>(memory) % page) % page;
  const std::pair<uint8_t*, size_t> ranges[] = {{aligned + 16, page}, {aligned, page + 100}};
  for (auto [addr, len] : ranges) {
    doca_mmap* m = nullptr;
    ASSERT_EQ(doca_mmap_create(&m), DOCA_SUCCESS);
    EXPECT_EQ(start_mmap(m, addr, len, pci_rw), DOCA_ERROR_INVALID_VALUE);
    const void* blob = nullptr;
    size_t blob_len = 0;
    EXPECT_EQ(doca_mmap_export_pci(m, dev, &blob, &blob_len), DOCA_ERROR_BAD_STATE);
    EXPECT_EQ(doca_mmap_destroy(m), DOCA_SUCCESS);
    EXPECT_TRUE(has_pattern(memory, 3 * page, 5));
  }
  // Without a PCI permission the same range is wrapped as before, and cannot be PCI-exported.
  doca_mmap* m = nullptr;
  ASSERT_EQ(doca_mmap_create(&m), DOCA_SUCCESS);
  ASSERT_EQ(start_mmap(m, memory + 1, 5000, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE), DOCA_SUCCESS);
  const void* blob = nullptr;
  size_t blob_len = 0;
  EXPECT_EQ(doca_mmap_export_pci(m, dev, &blob, &blob_len), DOCA_ERROR_NOT_PERMITTED);
  EXPECT_EQ(doca_mmap_destroy(m), DOCA_SUCCESS);
  EXPECT_TRUE(has_pattern(memory, 3 * page, 5));
  std::free(memory);
  EXPECT_EQ(doca_dev_close(dev), DOCA_SUCCESS);
}

TEST(doca_mmap_pci, read_only_memory_is_not_permitted) {
  const size_t page = page_size();
  void* ro = mmap(nullptr, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(ro, MAP_FAILED);
  doca_mmap* m = nullptr;
  ASSERT_EQ(doca_mmap_create(&m), DOCA_SUCCESS);
  EXPECT_EQ(start_mmap(m, ro, page, pci_rw), DOCA_ERROR_NOT_PERMITTED);
  EXPECT_EQ(doca_mmap_destroy(m), DOCA_SUCCESS);
  munmap(ro, page);
}

TEST(doca_mmap_pci, stop_keeps_the_memory_and_a_restart_shares_it_again) {
  const size_t n = 2 * page_size();
  auto* memory = static_cast<uint8_t*>(std::aligned_alloc(page_size(), n));
  ASSERT_NE(memory, nullptr);
  fill(memory, n, 8);
  doca_dev* dev = open_device("sm");
  ASSERT_NE(dev, nullptr);
  doca_mmap* m = nullptr;
  ASSERT_EQ(doca_mmap_create(&m), DOCA_SUCCESS);
  ASSERT_EQ(
      start_mmap(m, memory, n, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_PCI_READ_ONLY),
      DOCA_SUCCESS);
  const void* blob = nullptr;
  size_t blob_len = 0;
  ASSERT_EQ(doca_mmap_export_pci(m, dev, &blob, &blob_len), DOCA_SUCCESS);
  doca_mmap* imported = nullptr;
  ASSERT_EQ(doca_mmap_create_from_export(nullptr, blob, blob_len, dev, &imported), DOCA_SUCCESS);
  void* addr = nullptr;
  size_t len = 0;
  ASSERT_EQ(doca_mmap_get_memrange(imported, &addr, &len), DOCA_SUCCESS);
  auto* view = static_cast<uint8_t*>(addr);
  EXPECT_TRUE(has_pattern(view, n, 8));
  memory[0] = 0x42;  // the program writes its own pointer; the importer sees it
  EXPECT_EQ(view[0], 0x42);

  ASSERT_EQ(doca_mmap_stop(m), DOCA_SUCCESS);
  EXPECT_EQ(memory[0], 0x42);
  memory[0] = static_cast<uint8_t>(8);
  EXPECT_TRUE(has_pattern(memory, n, 8));
  memory[1] = 0x99;  // no longer shared: the old import keeps only its own pages
  EXPECT_NE(view[1], 0x99);
  memory[1] = static_cast<uint8_t>(8 + 13);

  ASSERT_EQ(doca_mmap_start(m), DOCA_SUCCESS);
  ASSERT_EQ(doca_mmap_export_pci(m, dev, &blob, &blob_len), DOCA_SUCCESS);
  doca_mmap* again = nullptr;
  ASSERT_EQ(doca_mmap_create_from_export(nullptr, blob, blob_len, dev, &again), DOCA_SUCCESS);
  ASSERT_EQ(doca_mmap_get_memrange(again, &addr, &len), DOCA_SUCCESS);
  EXPECT_TRUE(has_pattern(static_cast<uint8_t*>(addr), n, 8));
  EXPECT_EQ(doca_mmap_destroy(again), DOCA_SUCCESS);
  EXPECT_EQ(doca_mmap_destroy(imported), DOCA_SUCCESS);
  EXPECT_EQ(doca_mmap_destroy(m), DOCA_SUCCESS);
  EXPECT_TRUE(has_pattern(memory, n, 8));
  std::free(memory);
  EXPECT_EQ(doca_dev_close(dev), DOCA_SUCCESS);
}

}  // namespace
