// The comch consumers a peer has announced on one connection, and which of them belongs to which
// worker. The pairing rule (both sides obey it): each side creates its per-worker consumers one
// after another in worker index order, each started (its id assigned) before the next is created;
// ids are allocated ascending per connection, so worker i's consumer has the i-th smallest id
// among that side's live consumers. The peer pairs its worker i with the i-th smallest id among
// the consumers the other side announced (created and not expired). The reference paired by the
// arrival order of the events instead (REFERENCE_SPEC §8.2), which nothing guarantees.
// A plain value: no thread rules beyond those of any value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "storage/comch_control_channel.hpp"

namespace zc::storage {

class peer_consumers {
 public:
  // created: the id joins the live set; expired: it leaves it. A repeated or unknown event
  // changes nothing.
  void apply(const consumer_event& event);

  // Live ids, smallest first: ids()[i] is worker i's peer consumer.
  std::vector<uint32_t> ids() const { return {live_.begin(), live_.end()}; }
  size_t size() const noexcept { return live_.size(); }
  bool empty() const noexcept { return live_.empty(); }
  // At least `workers` consumers are live: every worker has its peer.
  bool ready(size_t workers) const noexcept { return live_.size() >= workers; }
  // The i-th smallest live id; nullopt when fewer than i + 1 are live.
  std::optional<uint32_t> for_worker(size_t worker) const;

 private:
  std::set<uint32_t> live_;
};

}  // namespace zc::storage
