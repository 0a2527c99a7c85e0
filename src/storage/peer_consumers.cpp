#include "storage/peer_consumers.hpp"

#include <iterator>

namespace zc::storage {

void peer_consumers::apply(const consumer_event& event) {
  if (event.what == consumer_event::kind::created)
    live_.insert(event.id);
  else
    live_.erase(event.id);
}

std::optional<uint32_t> peer_consumers::for_worker(size_t worker) const {
  if (worker >= live_.size()) return std::nullopt;
  return *std::next(live_.begin(), static_cast<std::ptrdiff_t>(worker));
}

}  // namespace zc::storage
