#include "target_worker.hpp"

#include "core/log.hpp"
#include "storage/io_message.hpp"

namespace zc::target {

using namespace std::chrono_literals;
using storage::io_message_size;
using storage::io_message_type;
using storage::io_message_view;

namespace {
constexpr auto drain_limit = 5s;
constexpr auto command_limit = 10s;
}  // namespace

struct target_worker::slot {
  uint32_t index = 0;
  core::buffer* message = nullptr;  // the request, then the response (same 64 bytes)
  rdma::receive_task* receive = nullptr;
  rdma::send_task* send = nullptr;
  rdma::read_task* read = nullptr;
  rdma::write_task* write = nullptr;
  core::buffer* local = nullptr;  // storage side of the transfer in progress
  core::buffer* peer = nullptr;   // requester side
};

target_worker::target_worker(uint32_t cpu, core::poll_mode mode, const core::device& device,
                             core::memory_map& storage, core::memory_map& remote,
                             uint32_t transactions)
    : cpu_(cpu),
      storage_(storage),
      remote_(remote),
      transactions_(transactions),
      thread_(mode, cpu) {
  thread_.call([&] {
    messages_.assign(size_t(transactions) * io_message_size, 0);
    messages_map_ =
        core::memory_map::wrap(messages_.data(), messages_.size(), core::access::local_read_write);
    // One message buffer per slot, plus a storage and a requester buffer per transfer.
    inventory_ = std::make_unique<core::buffer_inventory>(transactions * 3);
    control_ = std::make_unique<rdma::context>(thread_.engine(), device);
    data_ = std::make_unique<rdma::context>(thread_.engine(), device);
    // Nothing of this process is exported: the peer may not touch our memory through either.
    control_->set_permissions(core::access::local_read_only);
    data_->set_permissions(core::access::local_read_only);
    slots_.resize(transactions);
    auto slot_of = [this](core::task_base& t) -> slot& { return slots_[t.get_user_data().u64]; };
    control_->configure<rdma::receive_task>(
        transactions, [this, slot_of](rdma::receive_task& t) { on_request(slot_of(t)); },
        [this](rdma::receive_task& t) {
          if (serving_) {
            ZC_LOG_ERROR("worker {}: receive failed: {}", cpu_, status_name(t.result()));
            ++errors_;
          }
        });
    control_->configure<rdma::send_task>(
        transactions, [this, slot_of](rdma::send_task& t) { answered(slot_of(t)); },
        [this, slot_of](rdma::send_task& t) {
          ZC_LOG_ERROR("worker {}: response not delivered: {}", cpu_, status_name(t.result()));
          ++errors_;
          answered(slot_of(t));
        });
    auto transferred = [this, slot_of](auto& t) { on_transfer_done(slot_of(t), t.result()); };
    data_->configure<rdma::read_task>(transactions, transferred, transferred);
    data_->configure<rdma::write_task>(transactions, transferred, transferred);
    for (uint32_t i = 0; i < transactions; ++i) {
      slot& s = slots_[i];
      s.index = i;
      throw_if_failed(
          inventory_->get_by_addr(*messages_map_, messages_.data() + i * io_message_size,
                                  io_message_size, s.message),
          "message buffer");
      auto ud = core::make_user_data(i);
      throw_if_failed(control_->allocate(ud, s.receive), "receive task");
      throw_if_failed(control_->allocate(ud, s.send), "send task");
      throw_if_failed(data_->allocate(ud, s.read), "read task");
      throw_if_failed(data_->allocate(ud, s.write), "write task");
      s.receive->set_dst(*s.message);
      s.send->set_src(*s.message);
    }
    control_->start();
    data_->start();
  });
}

target_worker::~target_worker() {
  try {
    thread_.call([&] {
      serving_ = false;
      slots_.clear();
      control_.reset();
      data_.reset();
      inventory_.reset();
      messages_map_.reset();
    });
  } catch (const std::exception& e) {
    ZC_LOG_ERROR("worker {}: teardown: {}", cpu_, e.what());
  }
}

std::vector<uint8_t> target_worker::connect(storage::rdma_role role,
                                            std::span<const uint8_t> peer_blob) {
  return thread_.call(
      [&] {
        rdma::context& ctx = role == storage::rdma_role::io_control ? *control_ : *data_;
        if (ctx.state() != core::context_state::starting)
          throw status_error(status::already_exist,
                             fmt::format("worker on cpu {} already has its {} connection", cpu_,
                                         storage::to_string(role)));
        auto mine = ctx.export_connection();
        ctx.connect(peer_blob);
        ++connected_roles_;
        return mine;
      },
      command_limit);
}

bool target_worker::ready() {
  return thread_.call([&] {
    return control_->state() == core::context_state::running &&
           data_->state() == core::context_state::running;
  });
}

void target_worker::start_data_path() {
  thread_.call([&] {
    serving_ = true;
    for (auto& s : slots_) post_receive(s);
  });
}

void target_worker::answered(slot& s) {
  --in_flight_;
  post_receive(s);
}

void target_worker::post_receive(slot& s) {
  s.message->set_data(s.message->head(), 0);
  if (!serving_) return;
  if (status r = control_->submit(*s.receive); !ok(r)) {
    ZC_LOG_ERROR("worker {}: cannot post receive: {}", cpu_, status_name(r));
    ++errors_;
  }
}

// A request arrived in slot s: check it against both regions, then move the data.
void target_worker::on_request(slot& s) {
  ++in_flight_;
  if (s.receive->received_length() != io_message_size) {
    ZC_LOG_WARN("worker {}: {}-byte IO message refused", cpu_, s.receive->received_length());
    respond(s, status::invalid_value);
    return;
  }
  io_message_view msg(s.message->head());
  const uint64_t size = msg.io_size();
  const uint64_t storage_offset = msg.storage_offset();
  const uint64_t requester_offset = msg.requester_offset();
  const auto type = msg.type();
  const bool in_storage =
      size != 0 && storage_offset <= storage_.size() && size <= storage_.size() - storage_offset;
  const bool in_requester =
      size != 0 && requester_offset <= remote_.size() && size <= remote_.size() - requester_offset;
  if ((type != io_message_type::read && type != io_message_type::write) || !in_storage ||
      !in_requester) {
    ZC_LOG_WARN("worker {}: IO refused: type {} size {} storage offset {} requester offset {}",
                cpu_, static_cast<uint32_t>(type), size, storage_offset, requester_offset);
    ++errors_;
    respond(s, status::invalid_value);
    return;
  }
  status r = inventory_->get_by_data(storage_, storage_.data() + storage_offset, size, s.local);
  if (ok(r)) r = inventory_->get_by_data(remote_, remote_.data() + requester_offset, size, s.peer);
  if (ok(r)) {
    if (type == io_message_type::read) {
      s.write->set(*s.local, *s.peer);  // storage -> requester
      r = data_->submit(*s.write);
    } else {
      s.local->set_data(s.local->head(), 0);  // the read appends after the data section
      s.read->set(*s.peer, *s.local);         // requester -> storage
      r = data_->submit(*s.read);
    }
  }
  if (!ok(r)) on_transfer_done(s, r);
}

void target_worker::on_transfer_done(slot& s, status result) {
  if (s.local != nullptr) s.local->release();
  if (s.peer != nullptr) s.peer->release();
  s.local = s.peer = nullptr;
  if (ok(result)) {
    ++operations_;
  } else {
    ZC_LOG_ERROR("worker {}: transfer failed: {}", cpu_, status_name(result));
    ++errors_;
    result = status::io_failed;
  }
  respond(s, result);
}

// The response reuses the request's buffer: every field stays, type and result change.
void target_worker::respond(slot& s, status result) {
  io_message_view msg(s.message->head());
  msg.set_type(io_message_type::result);
  msg.set_result(result);
  s.message->set_data(s.message->head(), io_message_size);
  status r = control_->submit(*s.send);
  if (!ok(r)) {
    ZC_LOG_ERROR("worker {}: cannot send response: {}", cpu_, status_name(r));
    ++errors_;
    answered(s);
  }
}

void target_worker::stop() {
  thread_.call([&] { serving_ = false; });
  if (!thread_.wait_until([&] { return in_flight_ == 0; }, drain_limit))
    ZC_LOG_ERROR("worker {}: {} IOs still in flight after {} s", cpu_, in_flight_,
                 drain_limit.count());
  thread_.call([&] {
    control_->stop();
    data_->stop();
  });
  thread_.wait_until(
      [&] {
        return control_->state() == core::context_state::idle &&
               data_->state() == core::context_state::idle;
      },
      drain_limit);
}

worker_stats target_worker::stats() {
  return thread_.call([&] {
    return worker_stats{cpu_, operations_, errors_, thread_.engine().hits(),
                        thread_.engine().misses()};
  });
}

}  // namespace zc::target
