#include "storage/io_message.hpp"

#include <cstring>

namespace zc::storage {

static_assert(io_message_offset::storage_offset + sizeof(uint64_t) <= io_message_size);

void io_message_view::clear() noexcept {
  std::memset(p_, 0, io_message_size);
}

}  // namespace zc::storage
