// Helpers shared by the comch tests: bounded waits, receive memory, the peer program, and socket
// directories of their own.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comch/client.hpp"
#include "comch/connection.hpp"
#include "comch/consumer.hpp"
#include "comch/internal/socket_dir.hpp"
#include "comch/producer.hpp"
#include "comch/server.hpp"
#include "core/buffer.hpp"
#include "core/memory_map.hpp"
#include "core/progress_engine.hpp"
#include "support/subprocess.hpp"

namespace zc::comch::test {

using namespace std::chrono_literals;
using core::context_state;

// Every wait in these tests is bounded by this; none of them measures time.
inline constexpr std::chrono::milliseconds wait_limit = 20s;

inline std::string channel_name() {
  return zc::test::unique_name("comch-test");
}

inline std::string peer_path() {
  return std::string(ZC_BINARY_DIR) + "/tests/zc_comch_channel_peer";
}

inline std::span<const uint8_t> bytes_of(std::string_view s) {  // literals: static storage
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}
inline std::string string_of(std::span<const uint8_t> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// Sets (or unsets, for nullopt) an environment variable for the life of the object.
class scoped_env {
 public:
  scoped_env(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      setenv(name, value->c_str(), 1);
    else
      unsetenv(name);
  }
  ~scoped_env() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A path under /tmp no other test uses (nothing is made there), removed with whatever is in it at
// the end.
struct scratch_path {
  scratch_path() : path("/tmp/" + zc::test::unique_name("zc-comch-dir")) {}
  ~scratch_path() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  scratch_path(const scratch_path&) = delete;
  scratch_path& operator=(const scratch_path&) = delete;
  std::string path;
};

// A scratch path used as this test's comch socket directory (ZC_COMCH_DIR); the first server or
// client to start creates it. Child processes inherit it.
struct private_socket_dir {
  scratch_path dir;
  scoped_env env{internal::socket_dir_variable, dir.path};
};

// Receive (or send) memory cut into equal buffers.
struct buffer_set {
  buffer_set(size_t count, size_t size,
             core::access access = core::access::local_read_write | core::access::pci_read_write)
      : map(core::memory_map::allocate(count * size, access)), inventory(uint32_t(count)) {
    for (size_t i = 0; i < count; ++i) {
      core::buffer* b = nullptr;
      EXPECT_EQ(inventory.get_by_addr(*map, map->data() + i * size, size, b), status::success);
      buffers.push_back(b);
    }
  }
  std::unique_ptr<core::memory_map> map;
  core::buffer_inventory inventory;
  std::vector<core::buffer*> buffers;
};

// Fills buffer `b` with the text `s` (data section at the head).
inline void fill(core::buffer& b, const std::string& s) {
  std::memcpy(b.head(), s.data(), s.size());
  ASSERT_EQ(b.set_data(b.head(), s.size()), status::success);
}
inline std::string text_of(const core::buffer& b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.data_length());
}

}  // namespace zc::comch::test
