#include "channel_name.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <random>

namespace zc::local {

std::string unique_channel_name(std::string_view prefix) {
  static std::atomic<uint64_t> counter{0};
  std::random_device random;
  return fmt::format("{}-{}-{}-{:08x}", prefix, getpid(), counter++, random());
}

}  // namespace zc::local
