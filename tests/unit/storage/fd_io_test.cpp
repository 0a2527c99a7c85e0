#include "storage/internal/fd_io.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <vector>

#include "core/status.hpp"

namespace zc::storage::internal {
namespace {

// A stand-in for write(2): takes at most `accept` bytes per call, then nothing; after
// give_up_after calls it fails with EIO, so that a loop that does not stop on its own still ends.
struct fake_write {
  static inline size_t accept = 0;
  static inline int calls = 0;
  static inline int give_up_after = 1000;
  static inline std::vector<uint8_t> written;
  static void reset(size_t bytes_per_call) {
    accept = bytes_per_call;
    calls = 0;
    written.clear();
  }
  static ssize_t call(int, const void* data, size_t length) {
    if (++calls > give_up_after) {
      errno = EIO;
      return -1;
    }
    const size_t n = std::min(accept, length);
    accept = 0;
    const auto* p = static_cast<const uint8_t*>(data);
    written.insert(written.end(), p, p + n);
    return static_cast<ssize_t>(n);
  }
};

TEST(fd_io, a_write_that_takes_no_byte_is_an_error_not_a_retry) {
  const std::vector<uint8_t> data(10, 7);
  fake_write::reset(4);  // 4 bytes, then 0 forever
  try {
    write_fully(-1, data, "out.sbc", &fake_write::call);
    FAIL() << "a 0-byte write was taken as progress";
  } catch (const status_error& e) {
    EXPECT_EQ(e.code(), status::io_failed);
    EXPECT_NE(std::string(e.what()).find("out.sbc"), std::string::npos) << e.what();
  }
  EXPECT_EQ(fake_write::calls, 2) << "the 0-byte write was retried";
  EXPECT_EQ(fake_write::written.size(), 4u);
}

TEST(fd_io, partial_writes_are_continued) {
  const std::vector<uint8_t> data = {1, 2, 3, 4, 5, 6, 7};
  struct three_at_a_time {
    static ssize_t call(int, const void* p, size_t n) {
      const size_t take = std::min<size_t>(3, n);
      fake_write::written.insert(fake_write::written.end(), static_cast<const uint8_t*>(p),
                                 static_cast<const uint8_t*>(p) + take);
      return static_cast<ssize_t>(take);
    }
  };
  fake_write::reset(0);
  write_fully(-1, data, "out", &three_at_a_time::call);
  EXPECT_EQ(fake_write::written, data);
}

TEST(fd_io, a_write_error_is_io_failed) {
  const std::vector<uint8_t> data(3, 1);
  fake_write::reset(0);
  fake_write::give_up_after = 0;
  EXPECT_THROW(write_fully(-1, data, "out", &fake_write::call), status_error);
  fake_write::give_up_after = 1000;
}

}  // namespace
}  // namespace zc::storage::internal
