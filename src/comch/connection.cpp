#include "comch/connection.hpp"

#include <fmt/format.h>
#include <sys/epoll.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "comch/internal/frame.hpp"
#include "comch/internal/link.hpp"
#include "comch/internal/unix_socket.hpp"
#include "core/log.hpp"

namespace zc::comch {
namespace {

using internal::frame_type;

// The receive buffer grows with what the peer has earned. Until the handshake is done it holds
// one internal frame: a peer that never says hello (or is refused) costs no more. Then it has room
// for many small messages per read, and for one largest frame once one is announced.
constexpr size_t handshake_buffer = internal::frame_header_size + internal::max_internal_payload;
constexpr size_t read_slack = 64 * 1024;
// Descriptors come with the first byte of the frame that declares them, and the kernel hands over
// one sendmsg's worth per read: a frame still arriving and the next one. More than that pending
// is a peer passing descriptors no frame accounts for.
constexpr size_t max_pending_fds = 2 * internal::max_frame_fds;
// Frames gathered into one sendmsg.
constexpr size_t max_iov = 32;

void close_all(std::vector<int>& fds) {
  for (int fd : fds) internal::close_fd(fd);
  fds.clear();
}

}  // namespace

size_t connection::outgoing::total() const noexcept {
  return task != nullptr ? internal::frame_header_size + task->message_.size() : frame.size();
}

connection::connection(internal::connection_owner& owner, core::context& context, int fd,
                       bool client_side, uint64_t id, const internal::peer_credentials& peer,
                       uint32_t max_msg_size, uint32_t recv_queue_size, int mailbox)
    : owner_(owner),
      context_(context),
      fd_(fd),
      client_side_(client_side),
      id_(id),
      peer_pid_(peer.pid),
      peer_uid_(peer.uid),
      max_msg_size_(max_msg_size),
      peer_max_msg_size_(max_msg_size),
      recv_queue_size_(recv_queue_size),
      link_(std::make_shared<internal::link>(mailbox)),
      handshake_deadline_(std::chrono::steady_clock::now() + handshake_timeout),
      in_(handshake_buffer) {}

connection::~connection() {
  // Owners close connections (with their events) before destroying them; this is the backstop.
  if (phase_ != phase::closed) {
    close_socket();
    link_->close();
    for (auto& o : out_) close_all(o.fds);
  }
  close_all(in_fds_);
}

void connection::close_socket() noexcept {
  if (fd_ < 0) return;
  if (poll_set_ >= 0) epoll_ctl(poll_set_, EPOLL_CTL_DEL, fd_, nullptr);
  internal::close_fd(fd_);
  fd_ = -1;
}

bool connection::reserve_receive_buffer() noexcept {
  size_t want = handshake_buffer;
  if (phase_ == phase::established) {
    want += read_slack;
    // A frame being received; decode_frame has checked its length against our limit.
    if (in_end_ - in_begin_ >= internal::frame_header_size)
      want = std::max(want, internal::frame_header_size + read_slack +
                                internal::decode_header(in_.data() + in_begin_).length);
  }
  if (in_.size() >= want) return true;
  try {
    in_.resize(want);
  } catch (const std::bad_alloc&) {
    ZC_SDK_LOG_ERROR("comch connection {}: no memory for a {}-byte receive buffer", id_, want);
    close(status::no_memory);
    return false;
  }
  return true;
}

uint32_t connection::message_limit() const noexcept {
  // A user message before the handshake is a protocol error whatever its size.
  return phase_ == phase::established ? max_msg_size_ : 0;
}

bool connection::has_backlog() const noexcept {
  if (phase_ == phase::closed) return false;
  return internal::decode_frame({in_.data() + in_begin_, in_end_ - in_begin_}, message_limit())
             .outcome != internal::frame_outcome::need_more;
}

size_t connection::receive() {
  size_t handled = 0;
  uint32_t budget = recv_queue_size_;
  while (phase_ != phase::closed) {
    // Complete frames first: the callbacks see the bytes in place.
    while (phase_ != phase::closed) {
      const auto f =
          internal::decode_frame({in_.data() + in_begin_, in_end_ - in_begin_}, message_limit());
      if (f.outcome == internal::frame_outcome::need_more) break;
      if (f.outcome == internal::frame_outcome::error) {
        protocol_error(fmt::format("{}: type {}, {} bytes, {} descriptors", f.error_text,
                                   f.header.type, f.header.length, f.header.fds));
        return handled + 1;
      }
      const bool user = f.header.type == static_cast<uint16_t>(frame_type::message);
      if (user && budget == 0) return handled;
      if (in_fds_.size() < f.header.fds) {
        protocol_error("frame announced descriptors that did not come with it");
        return handled + 1;
      }
      std::vector<int> fds(in_fds_.begin(), in_fds_.begin() + f.header.fds);
      in_fds_.erase(in_fds_.begin(), in_fds_.begin() + f.header.fds);
      in_begin_ += f.consumed;
      if (user) --budget;
      ++handled;
      handle_frame(f.header.type, f.payload, fds);
      close_all(fds);
    }
    if (phase_ == phase::closed) break;
    if (in_begin_ == in_end_) {
      if (!in_fds_.empty()) {
        protocol_error("descriptors that no frame declares");
        return handled + 1;
      }
      in_begin_ = in_end_ = 0;
    } else if (in_begin_ != 0) {
      std::memmove(in_.data(), in_.data() + in_begin_, in_end_ - in_begin_);
      in_end_ -= in_begin_;
      in_begin_ = 0;
    }
    if (!reserve_receive_buffer()) return handled + 1;
    ssize_t n =
        internal::receive_with_fds(fd_, in_.data() + in_end_, in_.size() - in_end_, in_fds_);
    if (in_fds_.size() > max_pending_fds) {
      protocol_error(fmt::format("{} descriptors pending", in_fds_.size()));
      return handled + 1;
    }
    if (n > 0) {
      in_end_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0 && errno == EPROTO) {
      protocol_error("descriptors were dropped by the kernel");
    } else {
      ZC_SDK_LOG_DEBUG("comch connection {}: peer pid {} closed ({})", id_, peer_pid_,
                       n == 0 ? "end of stream" : std::strerror(errno));
      close(status::connection_reset);
    }
    ++handled;
    break;
  }
  return handled;
}

void connection::handle_frame(uint16_t type, std::span<const uint8_t> payload,
                              std::vector<int>& fds) {
  switch (static_cast<frame_type>(type)) {
    case frame_type::hello: {
      internal::hello_payload hello;
      if (client_side_ || phase_ != phase::handshake || !ok(internal::decode(payload, hello)))
        break;
      if (hello.version != internal::protocol_version) {
        refuse(status::unsupported_version, fmt::format("protocol version {} (server speaks {})",
                                                        hello.version, internal::protocol_version));
        return;
      }
      peer_max_msg_size_ = hello.max_msg_size;
      queue_frame(
          {frame_type::welcome,
           internal::encode(internal::hello_payload{internal::protocol_version, max_msg_size_}),
           {}});
      if (phase_ == phase::closed) return;
      phase_ = phase::established;
      owner_.connection_established(*this);
      return;
    }
    case frame_type::welcome: {
      internal::hello_payload welcome;
      if (!client_side_ || phase_ != phase::handshake || !ok(internal::decode(payload, welcome)) ||
          welcome.version != internal::protocol_version)
        break;
      peer_max_msg_size_ = welcome.max_msg_size;
      if (max_msg_size_ != welcome.max_msg_size)
        ZC_SDK_LOG_INFO("comch: max message size {} here, {} at the server; sends use the smaller",
                        max_msg_size_, welcome.max_msg_size);
      phase_ = phase::established;
      owner_.connection_established(*this);
      return;
    }
    case frame_type::refused: {
      if (!client_side_ || phase_ != phase::handshake) break;
      internal::refused_payload refused;
      // A garbled refusal is still a refusal.
      const bool readable = ok(internal::decode(payload, refused));
      refusal_ = readable ? status_from_wire(refused.code) : status::not_permitted;
      if (refusal_ == status::success) refusal_ = status::not_permitted;
      ZC_SDK_LOG_ERROR("comch: server refused the connection: {} ({})",
                       readable ? refused.reason : "no reason given", status_name(refusal_));
      close(refusal_);
      return;
    }
    case frame_type::message:
      if (phase_ != phase::established) break;
      owner_.message_received(*this, payload);
      return;
    case frame_type::consumer_new:
      if (phase_ != phase::established) break;
      handle_consumer_new(payload, fds);
      return;
    case frame_type::consumer_expired: {
      internal::consumer_expired_payload expired;
      if (phase_ != phase::established || !ok(internal::decode(payload, expired))) break;
      if (link_->expire_remote(expired.id)) owner_.consumer_event(*this, expired.id, false);
      return;
    }
  }
  protocol_error(
      fmt::format("unexpected or malformed frame of type {} ({} bytes)", type, payload.size()));
}

void connection::handle_consumer_new(std::span<const uint8_t> payload, std::vector<int>& fds) {
  internal::consumer_new_payload announced;
  if (!ok(internal::decode(payload, announced))) {
    protocol_error("malformed consumer announcement");
    return;
  }
  const uint32_t id = announced.id;
  // Refused before anything is mapped; their descriptors are closed by receive().
  if (link_->find(id) != nullptr) {
    ZC_SDK_LOG_ERROR(
        "comch connection {} (peer pid {}): protocol error: consumer {} announced "
        "again; the first one stays",
        id_, peer_pid_, id);
    return;
  }
  if (link_->remote_count() >= max_peer_consumers) {
    ZC_SDK_LOG_ERROR("comch connection {}: refusing consumer {} of pid {}: it already has {}", id_,
                     id, peer_pid_, max_peer_consumers);
    return;
  }
  std::shared_ptr<internal::remote_consumer> rc;
  try {
    auto buffers = link_->import_buffers(announced.buffers_blob);
    const int queue = fds[0], data_bell = fds[1], space_bell = fds[2];
    fds.clear();  // attach() owns them from here, whether it succeeds or throws
    rc = internal::remote_consumer::attach(id, announced.slot_count, queue, std::move(buffers),
                                           data_bell, space_bell);
  } catch (const std::exception& e) {
    // A consumer we cannot reach is the peer's bug (or a stale export), not a reason to drop the
    // channel: producers sending to it get not_found.
    ZC_SDK_LOG_ERROR("comch connection {}: ignoring consumer {} of pid {}: {}", id_, id, peer_pid_,
                     e.what());
    return;
  }
  link_->add_remote(std::move(rc));
  owner_.consumer_event(*this, id, true);
}

void connection::protocol_error(const std::string& what) {
  ZC_SDK_LOG_ERROR("comch connection {} (peer pid {}): protocol error: {}; dropping it", id_,
                   peer_pid_, what);
  close(status::unexpected);
}

void connection::queue_message(send_task& task) {
  outgoing o;
  o.task = &task;
  internal::encode_header(o.header, {static_cast<uint32_t>(task.message_.size()),
                                     static_cast<uint16_t>(frame_type::message), 0});
  const bool idle = out_.empty();
  out_.push_back(std::move(o));
  if (idle) flush();
}

void connection::queue_frame(internal::outbox_frame&& frame) {
  if (phase_ == phase::closed) {
    close_all(frame.fds);
    return;
  }
  outgoing o;
  o.frame =
      internal::make_frame(frame.type, frame.payload, static_cast<uint16_t>(frame.fds.size()));
  o.fds = std::move(frame.fds);
  frame.fds.clear();
  const bool idle = out_.empty();
  out_.push_back(std::move(o));
  if (idle) flush();
}

void connection::drain_outbox() {
  if (phase_ != phase::established) return;
  for (auto& f : link_->take_outbox()) queue_frame(std::move(f));
}

void connection::send_hello() {
  queue_frame({frame_type::hello,
               internal::encode(internal::hello_payload{internal::protocol_version, max_msg_size_}),
               {}});
}

void connection::refuse(status why, std::string_view reason) {
  ZC_SDK_LOG_WARN("comch: refused peer pid {} uid {}: {}", peer_pid_, peer_uid_, reason);
  queue_frame({frame_type::refused,
               internal::encode(internal::refused_payload{static_cast<uint32_t>(why), reason}),
               {}});
  close(why);
}

size_t connection::flush() {
  size_t completed = 0;
  while (!out_.empty() && phase_ != phase::closed && !broken_) {
    iovec iov[max_iov];
    size_t count = 0;
    std::span<const int> fds;
    for (auto it = out_.begin(); it != out_.end() && count + 2 <= max_iov; ++it) {
      if (!it->fds.empty()) {
        // Descriptors ride on the first byte of a sendmsg: their frame must start it.
        if (it != out_.begin()) break;
        fds = it->fds;
      }
      size_t skip = it->sent;
      auto add = [&](const uint8_t* p, size_t n) {
        if (skip >= n) {
          skip -= n;
          return;
        }
        iov[count++] = iovec{const_cast<uint8_t*>(p + skip), n - skip};
        skip = 0;
      };
      if (it->task != nullptr) {
        add(it->header, internal::frame_header_size);
        if (!it->task->message_.empty()) add(it->task->message_.data(), it->task->message_.size());
      } else {
        add(it->frame.data(), it->frame.size());
      }
    }
    ssize_t n = internal::send_with_fds(fd_, iov, count, fds);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      // Closing here would run the owner's events inside the caller's submit(); the owner closes
      // broken connections in its next poll instead.
      ZC_SDK_LOG_DEBUG("comch connection {}: send failed: {}", id_, std::strerror(errno));
      broken_ = true;
      break;
    }
    size_t written = static_cast<size_t>(n);
    if (written > 0) close_all(out_.front().fds);  // passed to the peer
    while (written > 0 && !out_.empty()) {
      outgoing& o = out_.front();
      size_t left = o.total() - o.sent;
      if (written < left) {
        o.sent += written;
        written = 0;
        break;
      }
      written -= left;
      send_task* task = o.task;
      out_.pop_front();
      ++completed;
      if (task != nullptr) owner_.send_finished(*task, status::success);
    }
  }
  return completed;
}

void connection::close(status why) {
  if (phase_ == phase::closed) return;
  const bool was_established = phase_ == phase::established;
  phase_ = phase::closed;
  close_socket();
  close_all(in_fds_);
  auto pending = std::move(out_);
  out_.clear();
  for (auto& o : pending) {
    close_all(o.fds);
    if (o.task != nullptr) owner_.send_finished(*o.task, why);
  }
  std::vector<uint32_t> expired = link_->close();
  if (was_established)
    for (uint32_t id : expired) owner_.consumer_event(*this, id, false);
  owner_.connection_closed(*this, why, was_established);
}

}  // namespace zc::comch
