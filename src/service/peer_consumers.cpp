#include "service/peer_consumers.hpp"

#include <iterator>

namespace zc::service {

void peer_consumers::apply(const storage::consumer_event& event) {
  if (event.what == storage::consumer_event::kind::created)
    live_.insert(event.id);
  else
    live_.erase(event.id);
}

std::optional<uint32_t> peer_consumers::for_worker(size_t worker) const {
  if (worker >= live_.size()) return std::nullopt;
  return *std::next(live_.begin(), static_cast<std::ptrdiff_t>(worker));
}

}  // namespace zc::service
