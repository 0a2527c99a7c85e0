#include "core/sync_event.hpp"

namespace zc::core {

sync_event::sync_event(uint64_t initial)
    : map_(memory_map::allocate(sizeof(uint64_t), access::local_read_write | rdma_all)),
      counter_(reinterpret_cast<uint64_t*>(map_->data())) {
  *counter_ = initial;
}

}  // namespace zc::core
