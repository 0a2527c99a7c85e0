#include "storage/unique_fd.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

namespace zc::storage {
namespace {

bool is_open(int fd) {
  return ::fcntl(fd, F_GETFD) != -1;
}

TEST(unique_fd, closes_on_destruction) {
  int raw = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(raw, 0);
  { unique_fd fd(raw); }
  EXPECT_FALSE(is_open(raw));
}

TEST(unique_fd, move_assignment_closes_the_overwritten_descriptor) {
  int a = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  int b = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  unique_fd fa(a);
  unique_fd fb(b);
  fa = std::move(fb);
  EXPECT_FALSE(is_open(a));
  EXPECT_TRUE(is_open(b));
  EXPECT_EQ(fa.get(), b);
  EXPECT_FALSE(fb);
}

TEST(unique_fd, reset_and_release) {
  int a = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  unique_fd fd(a);
  fd.reset(fd.get());  // resetting to itself keeps it open
  EXPECT_TRUE(is_open(a));
  const int released = fd.release();
  EXPECT_FALSE(fd);
  EXPECT_TRUE(is_open(released));
  ::close(released);
}

}  // namespace
}  // namespace zc::storage
