// target_flusher on its own: every request is answered with its token and the sync's result, on
// the flusher's thread, and requests still queued when it is destroyed are answered first.
#include "target/flusher.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

namespace zc::target {
namespace {

using namespace std::chrono_literals;

// Answers as the flusher gives them, from its thread.
struct answers {
  std::mutex mutex;
  std::vector<uint32_t> tokens;
  std::vector<status> results;
  std::thread::id thread;

  target_flusher::done_function done() {
    return [this](std::vector<uint32_t> batch, status result) {
      std::lock_guard lock(mutex);
      thread = std::this_thread::get_id();
      for (uint32_t t : batch) {
        tokens.push_back(t);
        results.push_back(result);
      }
    };
  }
  size_t count() {
    std::lock_guard lock(mutex);
    return tokens.size();
  }
};

class backing_file {
 public:
  backing_file() {
    std::string templ = (std::filesystem::temp_directory_path() / "zc-flusher-XXXXXX").string();
    if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = templ;
  }
  ~backing_file() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::unique_ptr<target_storage> open() {
    storage_options config;
    config.backing_file = (dir_ / "store").string();
    config.block_size = 4096;
    config.block_count = 8;
    return target_storage::open(config);
  }

 private:
  std::filesystem::path dir_;
};

TEST(target_flusher, every_request_is_answered_with_its_token_on_the_flusher_thread) {
  backing_file file;
  auto storage = file.open();
  ASSERT_TRUE(storage->durable());
  answers got;
  {
    target_flusher flusher(*storage, got.done());
    for (uint32_t t = 0; t < 100; ++t) {
      std::memset(storage->map().data(), static_cast<int>(t), 4096);
      flusher.request(t);
    }
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (got.count() < 100 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(1ms);
    ASSERT_EQ(got.count(), 100u);
  }
  // In order: a batch is answered after the one before it.
  for (uint32_t t = 0; t < 100; ++t) EXPECT_EQ(got.tokens[t], t);
  EXPECT_TRUE(std::all_of(got.results.begin(), got.results.end(),
                          [](status s) { return s == status::success; }));
  EXPECT_NE(got.thread, std::this_thread::get_id());
}

TEST(target_flusher, requests_queued_at_destruction_are_answered_first) {
  backing_file file;
  auto storage = file.open();
  answers got;
  {
    target_flusher flusher(*storage, got.done());
    for (uint32_t t = 0; t < 10; ++t) flusher.request(t);
  }
  EXPECT_EQ(got.count(), 10u);
}

// Deallocations and maps run on the flusher's thread, each answered with its own token and
// result: a memory target's range is zeroed and leaves the map, the blocks around it stay.
TEST(target_flusher, deallocations_and_maps_are_done_and_answered_one_by_one) {
  auto storage = target_storage::in_memory(8 * 4096, 4096);
  ASSERT_EQ(storage->prepare_write(0, 8 * 4096), status::success);
  std::memset(storage->map().data(), 0x5A, 8 * 4096);
  std::array<uint8_t, 2> bitmap{0xEE, 0xEE};
  answers got;
  {
    target_flusher flusher(*storage, got.done());
    flusher.request_deallocate(7, 2 * 4096, 3 * 4096);
    flusher.request_allocation_map(8, 0, bitmap);
  }
  ASSERT_EQ(got.count(), 2u);
  EXPECT_EQ(got.tokens, (std::vector<uint32_t>{7, 8}));
  EXPECT_EQ(got.results, (std::vector<status>{status::success, status::success}));
  const uint8_t* p = storage->map().data();
  EXPECT_TRUE(std::all_of(p, p + 2 * 4096, [](uint8_t b) { return b == 0x5A; }));
  EXPECT_TRUE(std::all_of(p + 2 * 4096, p + 5 * 4096, [](uint8_t b) { return b == 0; }));
  EXPECT_TRUE(std::all_of(p + 5 * 4096, p + 8 * 4096, [](uint8_t b) { return b == 0x5A; }));
  // Blocks 0, 1, 5, 6, 7; blocks 8 to 15 do not exist.
  EXPECT_EQ(bitmap, (std::array<uint8_t, 2>{0xE3, 0x00}));
}

TEST(target_storage, memory_flush_succeeds_at_once) {
  auto storage = target_storage::in_memory(4096);
  EXPECT_FALSE(storage->durable());
  EXPECT_EQ(storage->flush(), status::success);
}

}  // namespace
}  // namespace zc::target
