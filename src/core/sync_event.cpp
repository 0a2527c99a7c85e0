#include "core/sync_event.hpp"

namespace zc::core {

sync_event::sync_event(uint64_t initial)
    : counter_(std::make_unique<uint64_t>(initial)),
      map_(memory_map::wrap(counter_.get(), sizeof(uint64_t),
                            access::local_read_write | rdma_all)) {}

}  // namespace zc::core
