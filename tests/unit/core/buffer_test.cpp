// Buffers are windows on a memory map, handed out by a fixed-size inventory; every range they are
// given must lie inside the map, and the data section inside the buffer.
#include "core/buffer.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <set>
#include <vector>

namespace zc::core {
namespace {

constexpr size_t map_bytes = 1024;
constexpr size_t max_size = std::numeric_limits<size_t>::max();

class buffer_test : public testing::Test {
 protected:
  std::vector<uint8_t> memory = std::vector<uint8_t>(map_bytes);
  std::unique_ptr<memory_map> map =
      memory_map::wrap(memory.data(), memory.size(), access::local_read_write);
  uint8_t* base = memory.data();
  buffer_inventory inventory{4};
};

TEST_F(buffer_test, get_by_addr_gives_an_empty_data_section_at_the_address) {
  buffer* b = nullptr;
  ASSERT_EQ(inventory.get_by_addr(*map, base + 100, 200, b), status::success);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->head(), base + 100);
  EXPECT_EQ(b->capacity(), 200u);
  EXPECT_EQ(b->data(), base + 100);
  EXPECT_EQ(b->data_length(), 0u);
  EXPECT_EQ(&b->map(), map.get());
  EXPECT_EQ(b->map_offset(), 100u);
  EXPECT_EQ(inventory.available(), 3u);
}

TEST_F(buffer_test, get_by_data_gives_a_full_data_section) {
  buffer* b = nullptr;
  ASSERT_EQ(inventory.get_by_data(*map, base + 8, 16, b), status::success);
  EXPECT_EQ(b->data(), base + 8);
  EXPECT_EQ(b->data_length(), 16u);
  EXPECT_EQ(b->capacity(), 16u);
}

TEST_F(buffer_test, whole_map_is_a_valid_range) {
  buffer* b = nullptr;
  EXPECT_EQ(inventory.get_by_addr(*map, base, map_bytes, b), status::success);
}

TEST_F(buffer_test, range_outside_the_map_is_refused) {
  struct range {
    uint8_t* addr;
    size_t length;
  };
  const range bad[] = {
      {base - 1, 1},              // starts before
      {base + map_bytes - 8, 9},  // runs past the end
      {base + map_bytes, 1},      // starts at the end
      {base + map_bytes + 1, 0},  // starts past the end
      {base + 1, max_size},       // length wraps
      {nullptr, 1},
  };
  for (const auto& r : bad) {
    buffer* b = reinterpret_cast<buffer*>(1);
    EXPECT_EQ(inventory.get_by_addr(*map, r.addr, r.length, b), status::invalid_value);
    EXPECT_EQ(b, nullptr);
    b = reinterpret_cast<buffer*>(1);
    EXPECT_EQ(inventory.get_by_data(*map, r.addr, r.length, b), status::invalid_value);
    EXPECT_EQ(b, nullptr);
  }
  EXPECT_EQ(inventory.available(), 4u);
}

TEST_F(buffer_test, exhausted_inventory_is_no_memory) {
  std::set<buffer*> taken;
  for (int i = 0; i < 4; ++i) {
    buffer* b = nullptr;
    ASSERT_EQ(inventory.get_by_addr(*map, base + i * 8, 8, b), status::success);
    EXPECT_TRUE(taken.insert(b).second);
  }
  EXPECT_EQ(inventory.available(), 0u);
  EXPECT_EQ(inventory.capacity(), 4u);
  buffer* b = reinterpret_cast<buffer*>(1);
  EXPECT_EQ(inventory.get_by_addr(*map, base, 8, b), status::no_memory);
  EXPECT_EQ(b, nullptr);
}

TEST_F(buffer_test, empty_inventory_has_nothing_to_give) {
  buffer_inventory none(0);
  buffer* b = nullptr;
  EXPECT_EQ(none.get_by_addr(*map, base, 8, b), status::no_memory);
  EXPECT_EQ(none.capacity(), 0u);
}

TEST_F(buffer_test, released_buffer_is_reused) {
  buffer* a = nullptr;
  buffer* b = nullptr;
  ASSERT_EQ(inventory.get_by_addr(*map, base, 8, a), status::success);
  ASSERT_EQ(inventory.get_by_addr(*map, base + 8, 8, b), status::success);
  EXPECT_EQ(inventory.available(), 2u);
  a->release();
  EXPECT_EQ(inventory.available(), 3u);
  buffer* again = nullptr;
  ASSERT_EQ(inventory.get_by_data(*map, base + 64, 32, again), status::success);
  EXPECT_EQ(again, a);
  // A reused descriptor describes only its new range.
  EXPECT_EQ(again->head(), base + 64);
  EXPECT_EQ(again->data_length(), 32u);
  EXPECT_EQ(again->capacity(), 32u);
}

TEST_F(buffer_test, releasing_twice_does_not_duplicate_a_descriptor) {
  buffer* a = nullptr;
  ASSERT_EQ(inventory.get_by_addr(*map, base, 8, a), status::success);
  a->release();
  a->release();
  EXPECT_EQ(inventory.available(), 4u);
  std::set<buffer*> taken;
  for (int i = 0; i < 4; ++i) {
    buffer* b = nullptr;
    ASSERT_EQ(inventory.get_by_addr(*map, base, 8, b), status::success);
    EXPECT_TRUE(taken.insert(b).second) << "descriptor handed out twice";
  }
  buffer* extra = nullptr;
  EXPECT_EQ(inventory.get_by_addr(*map, base, 8, extra), status::no_memory);
}

TEST_F(buffer_test, set_data_inside_the_buffer_is_accepted) {
  buffer* b = nullptr;
  ASSERT_EQ(inventory.get_by_addr(*map, base + 100, 100, b), status::success);
  EXPECT_EQ(b->set_data(base + 110, 20), status::success);
  EXPECT_EQ(b->data(), base + 110);
  EXPECT_EQ(b->data_length(), 20u);
  EXPECT_EQ(b->map_offset(), 110u);
  EXPECT_EQ(b->set_data(base + 100, 100), status::success);
  EXPECT_EQ(b->set_data(base + 200, 0), status::success);
  EXPECT_EQ(b->set_data(base + 199, 1), status::success);
  EXPECT_EQ(b->head(), base + 100);
  EXPECT_EQ(b->capacity(), 100u);
}

TEST_F(buffer_test, set_data_outside_the_buffer_is_refused_and_changes_nothing) {
  buffer* b = nullptr;
  ASSERT_EQ(inventory.get_by_addr(*map, base + 100, 100, b), status::success);
  ASSERT_EQ(b->set_data(base + 120, 10), status::success);
  struct range {
    uint8_t* data;
    size_t length;
  };
  const range bad[] = {
      {base + 99, 1},     // before head (still inside the map)
      {base + 100, 101},  // longer than the buffer
      {base + 150, 51},   // runs past the end
      {base + 200, 1},    // starts at the end
      {base + 201, 0},    // starts past the end
      {base + 101, max_size},
  };
  for (const auto& r : bad) {
    EXPECT_EQ(b->set_data(r.data, r.length), status::invalid_value);
    EXPECT_EQ(b->data(), base + 120);
    EXPECT_EQ(b->data_length(), 10u);
  }
}

TEST_F(buffer_test, reset_moves_the_window_inside_the_same_map_without_the_inventory) {
  buffer* b = nullptr;
  ASSERT_EQ(inventory.get_by_data(*map, base + 8, 16, b), status::success);
  ASSERT_EQ(b->reset(base + 512, 256), status::success);
  EXPECT_EQ(b->head(), base + 512);
  EXPECT_EQ(b->capacity(), 256u);
  EXPECT_EQ(b->data(), base + 512);
  EXPECT_EQ(b->data_length(), 0u);
  EXPECT_EQ(&b->map(), map.get());
  EXPECT_EQ(b->map_offset(), 512u);
  EXPECT_EQ(inventory.available(), 3u) << "a reset neither takes nor returns a descriptor";
  EXPECT_EQ(b->reset(base, map_bytes), status::success);
  EXPECT_EQ(b->reset(base + map_bytes, 0), status::success);
}

TEST_F(buffer_test, reset_outside_the_map_is_refused_and_changes_nothing) {
  buffer* b = nullptr;
  ASSERT_EQ(inventory.get_by_data(*map, base + 100, 20, b), status::success);
  struct range {
    uint8_t* head;
    size_t capacity;
  };
  const range bad[] = {
      {base - 1, 1},              // starts before
      {base + map_bytes - 8, 9},  // runs past the end
      {base + map_bytes, 1},      // starts at the end
      {base + map_bytes + 1, 0},  // starts past the end
      {base + 1, max_size},       // length wraps
      {nullptr, 1},
  };
  for (const auto& r : bad) {
    EXPECT_EQ(b->reset(r.head, r.capacity), status::invalid_value);
    EXPECT_EQ(b->head(), base + 100);
    EXPECT_EQ(b->capacity(), 20u);
    EXPECT_EQ(b->data(), base + 100);
    EXPECT_EQ(b->data_length(), 20u);
  }
}

TEST_F(buffer_test, buffer_over_a_remote_map_uses_the_exporters_addresses) {
  auto exported = memory_map::wrap(memory.data(), memory.size(), access::rdma_read);
  auto remote = memory_map::import_rdma(exported->export_rdma());
  buffer* b = nullptr;
  ASSERT_EQ(inventory.get_by_data(*remote, remote->data() + 256, 64, b), status::success);
  EXPECT_EQ(b->map_offset(), 256u);
  EXPECT_EQ(&b->map(), remote.get());
  buffer* outside = nullptr;
  EXPECT_EQ(inventory.get_by_data(*remote, remote->data() + map_bytes, 1, outside),
            status::invalid_value);
}

}  // namespace
}  // namespace zc::core
