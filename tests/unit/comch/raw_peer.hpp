// A comch peer written by hand, for tests that break the protocol on purpose: the socket framing
// (raw_peer), a consumer faked from its parts (fake_consumer: a queue segment, receive memory and
// doorbells laid out as comch/internal/queue.hpp says), and a peer consumer's queue mapped the
// way a producer maps it (mapped_consumer), which the test can then write anything into.
// Used in-process by the tests and by zc_comch_ring_peer (ring_peer.cpp) across processes.
// Thread rules: one thread.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "comch/connection.hpp"
#include "comch/internal/frame.hpp"
#include "comch/internal/queue.hpp"
#include "comch/internal/shared_segment.hpp"
#include "comch/internal/unix_socket.hpp"
#include "core/memory_map.hpp"
#include "core/progress_engine.hpp"

namespace zc::comch::test {

struct raw_frame {
  internal::frame_header header;
  std::vector<uint8_t> payload;
  std::vector<int> fds;  // owned by the caller
};

class raw_peer {
 public:
  explicit raw_peer(const std::string& socket_path) : fd(internal::connect_unix(socket_path)) {}
  ~raw_peer() {
    internal::close_fd(fd);
    for (int f : pending_fds_) internal::close_fd(f);
  }
  raw_peer(const raw_peer&) = delete;
  raw_peer& operator=(const raw_peer&) = delete;

  // Writes a header declaring `declared_length` bytes and `declared_fds` descriptors, then the
  // payload; `fds` ride with the header's first byte. False if the socket would not take it all.
  bool send_frame(uint16_t type, std::span<const uint8_t> payload, uint32_t declared_length,
                  std::span<const int> fds = {}, uint16_t declared_fds = 0) {
    uint8_t header[internal::frame_header_size];
    internal::encode_header(header, {declared_length, type, declared_fds});
    iovec iov[2] = {{header, sizeof(header)},
                    {const_cast<uint8_t*>(payload.data()), payload.size()}};
    const size_t total = sizeof(header) + payload.size();
    ssize_t n = internal::send_with_fds(fd, iov, payload.empty() ? 1 : 2, fds);
    return n == ssize_t(total);
  }
  bool send(internal::frame_type type, std::span<const uint8_t> payload,
            std::span<const int> fds = {}) {
    return send_frame(uint16_t(type), payload, uint32_t(payload.size()), fds, uint16_t(fds.size()));
  }
  bool hello(uint32_t max_msg_size = default_max_msg_size) {
    return send(internal::frame_type::hello, internal::encode(internal::hello_payload{
                                                 internal::protocol_version, max_msg_size}));
  }
  bool message(std::string_view text) {
    return send(internal::frame_type::message,
                {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  }

  // The next frame from the other side, waiting at most `bound`; nullopt on timeout, end of
  // stream or a frame that does not decode.
  std::optional<raw_frame> read_frame(std::chrono::milliseconds bound) {
    const auto deadline = std::chrono::steady_clock::now() + bound;
    for (;;) {
      if (in_.size() >= internal::frame_header_size) {
        auto h = internal::decode_header(in_.data());
        if (in_.size() - internal::frame_header_size >= h.length) {
          if (pending_fds_.size() < h.fds) return std::nullopt;
          raw_frame f{h,
                      {in_.begin() + internal::frame_header_size,
                       in_.begin() + internal::frame_header_size + h.length},
                      {pending_fds_.begin(), pending_fds_.begin() + h.fds}};
          pending_fds_.erase(pending_fds_.begin(), pending_fds_.begin() + h.fds);
          in_.erase(in_.begin(), in_.begin() + internal::frame_header_size + h.length);
          return f;
        }
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, int(left.count())) != 1) return std::nullopt;
      uint8_t chunk[64 * 1024];
      ssize_t n = internal::receive_with_fds(fd, chunk, sizeof(chunk), pending_fds_);
      if (n <= 0) return std::nullopt;
      in_.insert(in_.end(), chunk, chunk + n);
    }
  }
  // Reads frames until a welcome (true) or anything else / nothing within `bound` (false).
  bool welcomed(std::chrono::milliseconds bound) {
    auto f = read_frame(bound);
    if (!f) return false;
    for (int x : f->fds) internal::close_fd(x);
    return f->header.type == uint16_t(internal::frame_type::welcome);
  }
  // Whether the other side has closed the socket, waiting at most `bound` (frames it sent
  // before closing are read and dropped).
  bool closed_within(std::chrono::milliseconds bound) {
    const auto deadline = std::chrono::steady_clock::now() + bound;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, int(left.count())) != 1) return false;
      uint8_t chunk[4096];
      std::vector<int> fds;
      ssize_t n = internal::receive_with_fds(fd, chunk, sizeof(chunk), fds);
      for (int x : fds) internal::close_fd(x);
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    }
  }

  // In-process: progresses `engine` (which runs the other side) until that side has closed the
  // socket; false after `bound`.
  bool closed_by_server(core::progress_engine& engine, std::chrono::milliseconds bound) {
    const auto deadline = std::chrono::steady_clock::now() + bound;
    while (std::chrono::steady_clock::now() < deadline) {
      engine.progress();
      if (closed_within(std::chrono::milliseconds(10))) return true;
    }
    return false;
  }

  int fd;

 private:
  std::vector<uint8_t> in_;
  std::vector<int> pending_fds_;
};

// A consumer made by hand: queue, receive memory and doorbells, with nothing checking what the
// test writes into them.
class fake_consumer {
 public:
  // Receive memory of `buffer_bytes` of its own...
  fake_consumer(uint32_t id, uint32_t slots, size_t buffer_bytes)
      : fake_consumer(id, slots,
                      core::memory_map::allocate(buffer_bytes, core::access::local_read_write |
                                                                   core::access::pci_read_write)) {}
  // ...or shared with other fake consumers (one import on the other side for all of them).
  fake_consumer(uint32_t id, uint32_t slots, std::shared_ptr<core::memory_map> buffers)
      : id_(id),
        queue_(internal::shared_segment::create(internal::queue_bytes(slots))),
        buffers_(std::move(buffers)),
        data_bell_(internal::make_doorbell()),
        space_bell_(internal::make_doorbell()) {
    auto* h = new (queue_.data()) internal::queue_header{};
    h->magic = internal::queue_magic;
    h->version = internal::queue_version;
    h->slot_count = slots;
    h->consumer_id = id;
    for (uint32_t i = 0; i < slots; ++i)
      new (&internal::queue_slots(h)[i]) internal::queue_slot{}, slot(i).seq.store(i);
  }
  ~fake_consumer() {
    internal::close_fd(data_bell_);
    internal::close_fd(space_bell_);
  }
  fake_consumer(const fake_consumer&) = delete;
  fake_consumer& operator=(const fake_consumer&) = delete;

  uint32_t id() const { return id_; }
  internal::queue_header& header() const {
    return *reinterpret_cast<internal::queue_header*>(queue_.data());
  }
  internal::queue_slot& slot(uint64_t position) const {
    return internal::queue_slots(&header())[position % header().slot_count];
  }
  core::memory_map& buffers() const { return *buffers_; }
  // Offers [offset, offset + capacity) of the receive memory at `position`, checked by nobody.
  void post(uint64_t position, uint64_t offset, uint64_t capacity) {
    internal::queue_slot& s = slot(position);
    s.offset.store(offset);
    s.capacity.store(capacity);
    s.length.store(0);
    s.seq.store(position + 1);
    header().posted.store(position + 1);
  }
  // Sends consumer_new for this consumer (with copies of its descriptors).
  bool announce(raw_peer& peer) { return announce_as(peer, id_, header().slot_count); }
  bool announce_as(raw_peer& peer, uint32_t id, uint32_t slots) {
    const std::vector<uint8_t> blob = buffers_->export_pci();
    const int fds[3] = {fcntl(queue_.fd(), F_DUPFD_CLOEXEC, 0),
                        fcntl(data_bell_, F_DUPFD_CLOEXEC, 0),
                        fcntl(space_bell_, F_DUPFD_CLOEXEC, 0)};
    const bool sent =
        peer.send(internal::frame_type::consumer_new,
                  internal::encode(internal::consumer_new_payload{id, slots, blob}), fds);
    for (int f : fds) internal::close_fd(f);
    return sent;
  }

 private:
  uint32_t id_;
  internal::shared_segment queue_;
  std::shared_ptr<core::memory_map> buffers_;
  int data_bell_;
  int space_bell_;
};

// A peer consumer as a producer sees it: its queue and receive memory mapped from a
// consumer_new frame. The test claims, fills and publishes by hand, and can write any lie.
class mapped_consumer {
 public:
  // Throws status_error when the frame does not describe a consumer that can be mapped.
  explicit mapped_consumer(raw_frame& frame) {
    internal::consumer_new_payload p;
    if (frame.header.type != uint16_t(internal::frame_type::consumer_new) ||
        internal::decode(frame.payload, p) != status::success || frame.fds.size() != 3)
      throw status_error(status::invalid_value, "not a consumer announcement");
    id_ = p.id;
    slots_ = p.slot_count;
    data_bell_ = frame.fds[1];
    internal::close_fd(frame.fds[2]);
    const int queue_fd = frame.fds[0];
    frame.fds.clear();
    queue_ = internal::shared_segment::map(queue_fd, internal::queue_bytes(slots_));
    buffers_ = core::memory_map::import_pci(p.buffers_blob);
  }
  ~mapped_consumer() { internal::close_fd(data_bell_); }
  mapped_consumer(const mapped_consumer&) = delete;
  mapped_consumer& operator=(const mapped_consumer&) = delete;

  uint32_t id() const { return id_; }
  internal::queue_header& header() const {
    return *reinterpret_cast<internal::queue_header*>(queue_.data());
  }
  internal::queue_slot& slot(uint64_t position) const {
    return internal::queue_slots(&header())[position & (slots_ - 1)];
  }
  // Claims the next posted buffer as a producer does; its position, or nullopt if none.
  std::optional<uint64_t> claim() {
    uint64_t head = header().head.load();
    if (head >= header().posted.load() || slot(head).seq.load() != head + 1) return std::nullopt;
    if (!header().head.compare_exchange_strong(head, head + 1)) return std::nullopt;
    return head;
  }
  // Copies `bytes` into the buffer claimed at `position` (within its capacity, or nothing).
  bool fill(uint64_t position, std::span<const uint8_t> bytes) {
    internal::queue_slot& s = slot(position);
    const uint64_t offset = s.offset.load(), capacity = s.capacity.load();
    if (bytes.size() > capacity || offset > buffers_->size() ||
        capacity > buffers_->size() - offset)
      return false;
    if (!bytes.empty()) std::memcpy(buffers_->data() + offset, bytes.data(), bytes.size());
    return true;
  }
  // Says `length` bytes are at `position` (true or not) and wakes the consumer.
  void publish(uint64_t position, uint64_t length) {
    slot(position).length.store(length);
    slot(position).seq.store(position + 2);
    internal::ring(data_bell_);
  }

 private:
  uint32_t id_ = 0;
  uint32_t slots_ = 0;
  internal::shared_segment queue_;
  std::unique_ptr<core::memory_map> buffers_;
  int data_bell_ = -1;
};

}  // namespace zc::comch::test
