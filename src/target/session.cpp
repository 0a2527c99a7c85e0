#include "target/session.hpp"

#include <fmt/format.h>

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/log.hpp"
#include "core/thread.hpp"
#include "storage/stats.hpp"

namespace zc::target {

using storage::message;
using storage::message_type;
using namespace std::chrono_literals;

namespace {

constexpr auto poll_slice = 1s;  // how often a waiting target looks at Ctrl-C
// How long a client has for its TLS handshake (the handshake's own bound, and a margin).
constexpr auto handshake_bound = storage::tls_handshake_timeout + 1s;
// How long a client that finds every slot taken waits for one (a session ending as it arrives),
// and then has to send the request that gets the refusal.
constexpr auto slot_wait = 2s;
constexpr auto refusal_wait = 2s;
// Clients without a slot (in their TLS handshake, waiting for a slot, or being refused) at once;
// more wait in the listen backlog until one of these is done.
constexpr size_t max_slotless = 64;
// How long the listener rests after an accept failed (out of descriptors, say).
constexpr std::chrono::milliseconds accept_backoff{100};

message_type expected_request(int stage) {
  constexpr message_type order[] = {
      message_type::query_storage_request,          message_type::init_storage_request,
      message_type::create_rdma_connection_request, message_type::start_storage_request,
      message_type::stop_storage_request,           message_type::shutdown_request,
  };
  return order[stage];
}

}  // namespace

target_session::target_session(const service_options& config, const core::device& device,
                               target_storage& storage, uint32_t block_size, uint64_t number)
    : config_(config),
      device_(device),
      storage_(storage),
      block_size_(block_size),
      number_(number) {}

target_session::~target_session() {
  teardown();
}

target_session::outcome target_session::serve(storage::control_channel& channel) {
  try {
    return run(channel);
  } catch (const std::exception& e) {
    // Its workers' stats and errors stay for the session's end.
    ZC_LOG_ERROR("session {}: {}: ending the session", number_, e.what());
    channel.close();
    teardown();
    return outcome::ended;
  }
}

target_session::outcome target_session::run(storage::control_channel& channel) {
  storage::keep_alive alive(config_.keep_alive_timeout);
  while (stage_ != stage::done) {
    auto received = storage::wait_for(channel, poll_slice);
    const auto now = std::chrono::steady_clock::now();
    if (received.code == status::time_out) {
      // Polled empty just now: the silence is real.
      if (!alive.expired(now)) continue;
      ZC_LOG_ERROR(
          "session {}: the service sent nothing, not even a keep-alive, for more than {} s: "
          "ending the session",
          number_, alive.timeout().count() / 1000);
      channel.close();
      teardown();
      return outcome::ended;
    }
    if (received.code == status::shutdown) {
      ZC_LOG_INFO("session {}: stop requested: ending the session", number_);
      teardown();
      return outcome::stopped;
    }
    if (received.failed()) {
      ZC_LOG_ERROR("session {}: control connection lost ({}): ending the session", number_,
                   received.text.empty() ? status_name(received.code) : received.text);
      channel.close();
      teardown();
      return outcome::ended;
    }
    alive.heard(now);
    const message& request = *received.msg;
    ZC_LOG_DEBUG("session {}: received {} id {}", number_, storage::to_string(request.type),
                 request.message_id);
    message reply = request.type == message_type::keep_alive_request
                        ? storage::make_response(request, message_type::keep_alive_response)
                        : handle(request);
    if (status s = channel.send(reply); !ok(s)) {
      ZC_LOG_ERROR("session {}: cannot answer the service: {}", number_, channel.last_error());
      channel.close();
      teardown();
      return outcome::ended;
    }
  }
  // Let the last response go out before the program ends or the next service comes.
  [[maybe_unused]] auto last = storage::wait_for(channel, 100ms);
  channel.close();
  return outcome::shutdown;
}

message target_session::handle(const message& request) {
  if (request.type == message_type::shutdown_request) {
    teardown();
    stage_ = stage::done;
    return storage::make_response(request, message_type::shutdown_response);
  }
  const message_type expected = expected_request(static_cast<int>(stage_));
  if (request.type != expected) {
    return storage::make_unexpected_response(request, expected);
  }
  try {
    switch (stage_) {
      case stage::query:
        return on_query(request);
      case stage::init:
        return on_init(request);
      case stage::connect:
        return on_create_connection(request);
      case stage::start:
        return on_start(request);
      case stage::running:
        return on_stop(request);
      default:
        break;
    }
    throw status_error(status::bad_state, "no request is expected now");
  } catch (const status_error& e) {
    ZC_LOG_ERROR("session {}: {} failed: {}", number_, storage::to_string(request.type), e.what());
    return storage::make_error_response(request, e.code(), e.what());
  }
}

message target_session::on_query(const message& request) {
  stage_ = stage::init;
  return storage::make_response(
      request, message_type::query_storage_response,
      storage::query_storage_response_payload{storage_.map().size(), block_size_});
}

message target_session::on_init(const message& request) {
  const auto& init = std::get<storage::init_storage_request_payload>(request.payload);
  if (init.core_count == 0 || init.core_count > config_.cpus.size())
    throw status_error(status::invalid_value,
                       fmt::format("Requested storage to use {} cores but only {} are configured",
                                   init.core_count, config_.cpus.size()));
  if (init.transaction_count == 0 || init.transaction_count > max_transactions)
    throw status_error(status::invalid_value,
                       fmt::format("transaction count {} is outside 1..{}", init.transaction_count,
                                   max_transactions));
  remote_ = core::memory_map::import_rdma(init.mmap_export);
  try {
    for (uint32_t i = 0; i < init.core_count; ++i)
      workers_.push_back(std::make_unique<target_worker>(
          config_.cpus[i], config_.poll_mode, device_, storage_, *remote_, init.transaction_count));
  } catch (const status_error& e) {
    teardown();
    throw status_error(e.code(), std::string("Failed to create worker objects: ") + e.what());
  }
  ZC_LOG_INFO(
      "session {}: init: {} workers with {} transactions each, requester region of {} bytes",
      number_, init.core_count, init.transaction_count, remote_->size());
  stage_ = stage::connect;
  return storage::make_response(request, message_type::init_storage_response);
}

message target_session::on_create_connection(const message& request) {
  const auto& conn = std::get<storage::rdma_connection_payload>(request.payload);
  if (conn.context_idx >= workers_.size())
    throw status_error(status::invalid_value,
                       fmt::format("Unable to create RDMA connection for invalid context idx {}",
                                   conn.context_idx));
  auto mine = workers_[conn.context_idx]->connect(conn.role, conn.connection_details);
  bool all = true;
  for (auto& w : workers_) all &= w->connected();
  if (all) stage_ = stage::start;
  return storage::make_response(
      request, message_type::create_rdma_connection_response,
      storage::rdma_connection_payload{conn.context_idx, conn.role, std::move(mine)});
}

message target_session::on_start(const message& request) {
  for (auto& w : workers_)
    if (!w->ready())
      throw status_error(status::bad_state,
                         "Failed to query connections state: not all "
                         "RDMA connections are running");
  for (auto& w : workers_) w->start_data_path();
  stage_ = stage::running;
  ZC_LOG_INFO("session {}: data path started on {} workers", number_, workers_.size());
  return storage::make_response(request, message_type::start_storage_response);
}

message target_session::on_stop(const message& request) {
  stop_workers();
  stage_ = stage::stopped;
  return storage::make_response(request, message_type::stop_storage_response);
}

// Once per set of workers: their stats and errors are kept for the session's end.
void target_session::stop_workers() {
  if (workers_.empty() || workers_stopped_) return;
  workers_stopped_ = true;
  stats_.clear();
  for (auto& w : workers_) {
    w->stop();
    stats_.push_back(w->stats());
    const worker_stats& s = stats_.back();
    data_path_errors_ += s.errors;
    if (s.errors != 0)
      ZC_LOG_ERROR("session {}: worker on cpu {}: {} operations, {} errors ({} messages refused)",
                   number_, s.cpu, s.operations, s.errors, s.refused_messages);
  }
}

void target_session::teardown() {
  stop_workers();
  workers_.clear();
  workers_stopped_ = false;
  remote_.reset();
}

// ---- target_service ----------------------------------------------------------------------------

target_service::target_service(const service_options& config, target_storage& storage,
                               uint32_t block_size)
    : config_(config),
      device_(core::device::open(config.device)),
      storage_(storage),
      block_size_(block_size),
      ended_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      free_slots_(config.max_sessions) {
  if (!ended_)
    throw status_error(status::operating_system,
                       fmt::format("Failed to create an eventfd: {}", std::strerror(errno)));
}

target_service::~target_service() {
  // Only after an exception out of run(): every session ends as on Ctrl-C before its thread,
  // which uses this object, is joined.
  if (connections_.empty()) return;
  core::request_stop();
  for (connection& c : connections_) c.thread.join();
}

int target_service::run(storage::tcp_listener& listener) {
  auto listen_again = std::chrono::steady_clock::now();
  while (!exit_ && !core::stop_requested()) {
    // While as many clients as it takes are without a slot, or after an accept failed (out of
    // descriptors), new ones wait in the listen backlog: never closed unanswered.
    const bool listening =
        slotless() < max_slotless && std::chrono::steady_clock::now() >= listen_again;
    pollfd fds[3];
    nfds_t count = 0;
    fds[count++] = {ended_.get(), POLLIN, 0};
    if (core::stop_signal_fd() >= 0) fds[count++] = {core::stop_signal_fd(), POLLIN, 0};
    if (listening) fds[count++] = {listener.wait_fd(), POLLIN, 0};
    const auto slice = listening ? std::chrono::milliseconds(poll_slice) : accept_backoff;
    if (::poll(fds, count, static_cast<int>(slice.count())) < 0 && errno != EINTR)
      throw status_error(status::operating_system,
                         fmt::format("poll failed: {}", std::strerror(errno)));
    reap(false);
    if (exit_ || !listening) continue;
    try {
      while (slotless() < max_slotless) {
        auto client = listener.accept();
        if (!client) break;
        admit(std::move(client));
      }
    } catch (const status_error& e) {
      // One client's failure (a descriptor limit, a TLS session that could not be made) is
      // that client's: the others go on, and the listener rests a moment.
      ZC_LOG_ERROR("control server: {}", e.what());
      listen_again = std::chrono::steady_clock::now() + accept_backoff;
    }
  }
  // Ctrl-C ends every session (each sees the stop). A shutdown that ends the program ends the
  // clients still in their handshake, waiting for a slot or being refused the same way.
  if (exit_) core::request_stop();
  reap(true);
  if (!config_.keep_serving || sessions_ended_ == 0) print_stats(last_stats_);
  if (data_path_errors_ != 0) {
    ZC_LOG_ERROR("the data path had {} errors", data_path_errors_);
    return 1;
  }
  return 0;
}

size_t target_service::slotless() {
  std::lock_guard lock(slots_mutex_);
  return slotless_;
}

void target_service::admit(std::unique_ptr<storage::tcp_accepted_channel> channel) {
  {
    std::lock_guard lock(slots_mutex_);
    ++slotless_;
  }
  connection& c = connections_.emplace_back();
  c.channel = std::move(channel);
  c.peer = c.channel->peer();
  try {
    c.thread = std::thread([this, &c] {
      attend(c);
      c.channel.reset();
      c.done.store(true, std::memory_order_release);
      const uint64_t one = 1;
      [[maybe_unused]] auto n = ::write(ended_.get(), &one, sizeof(one));
    });
  } catch (const std::system_error& e) {
    connections_.pop_back();
    {
      std::lock_guard lock(slots_mutex_);
      --slotless_;
    }
    throw status_error(status::no_memory, fmt::format("no thread for a client: {}", e.what()));
  }
}

// A client holds a slot only once it is authenticated: one that never finishes its handshake
// keeps no service out.
void target_service::attend(connection& c) {
  bool has_slot = false;
  try {
    c.channel->complete_handshake(std::chrono::steady_clock::now() + handshake_bound);
    has_slot = take_slot(slot_wait);
    if (!has_slot && !core::stop_requested()) refuse(c);
  } catch (const status_error& e) {
    // Never a session: a client without the key, or a stop in the middle.
    if (e.code() != status::shutdown) ZC_LOG_WARN("control server: {}", e.what());
  } catch (const std::exception& e) {
    ZC_LOG_WARN("control server: client {}: {}", c.peer, e.what());
  }
  {
    std::lock_guard lock(slots_mutex_);
    --slotless_;
  }
  if (!has_slot) return;
  serve(c);
  // The session's descriptors are gone before the next one can take the slot.
  c.channel.reset();
  {
    std::lock_guard lock(slots_mutex_);
    // A shutdown that ends the program gives its slot to no one.
    if (c.outcome == target_session::outcome::shutdown && !config_.keep_serving) closing_ = true;
    ++free_slots_;
  }
  slot_freed_.notify_all();
}

bool target_service::take_slot(std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  std::unique_lock lock(slots_mutex_);
  // Short slices: a stop request does not notify the condition.
  while (free_slots_ == 0 || closing_) {
    const auto now = std::chrono::steady_clock::now();
    if (closing_ || core::stop_requested() || now >= deadline) return false;
    slot_freed_.wait_until(lock, std::min(deadline, now + 100ms));
  }
  --free_slots_;
  return true;
}

// On the connection's own thread, with a slot.
void target_service::serve(connection& c) {
  if (const std::string id = c.channel->tls_identity(); !id.empty())
    ZC_LOG_INFO("control server: TLS session with {} established (identity '{}')", c.peer, id);
  c.number = sessions_connected_.fetch_add(1) + 1;
  ZC_LOG_INFO("service connected from {}: session {}", c.peer, c.number);
  try {
    target_session session(config_, device_, storage_, block_size_, c.number);
    c.outcome = session.serve(*c.channel);
    c.stats = session.stats();
    c.errors = session.data_path_errors();
  } catch (const std::exception& e) {  // the session could not be made
    ZC_LOG_ERROR("session {}: {}: ending the session", c.number, e.what());
    c.outcome = target_session::outcome::ended;
  }
}

// On the connection's own thread, without a slot: the client's first request gets an in_use
// error that says why.
void target_service::refuse(connection& c) {
  const std::string why = fmt::format(
      "the target serves {} sessions, its limit (--max-sessions {}): try again once one ends",
      config_.max_sessions, config_.max_sessions);
  ZC_LOG_WARN("refused service {}: {}", c.peer, why);
  auto first = storage::wait_for(*c.channel, refusal_wait);
  if (!first.msg) return;
  if (ok(c.channel->send(storage::make_error_response(*first.msg, status::in_use, why)))) {
    // Until the client closes, or long enough for the answer to leave.
    [[maybe_unused]] auto flushed = storage::wait_for(*c.channel, 100ms);
  }
  c.channel->close();
}

void target_service::reap(bool wait_all) {
  // Drained before the scan: a thread that ends during it wakes the next poll.
  uint64_t drained = 0;
  [[maybe_unused]] auto n = ::read(ended_.get(), &drained, sizeof(drained));
  for (auto it = connections_.begin(); it != connections_.end();) {
    connection& c = *it;
    if (!wait_all && !c.done.load(std::memory_order_acquire)) {
      ++it;
      continue;
    }
    c.thread.join();
    if (c.number != 0) {
      data_path_errors_ += c.errors;
      if (!c.stats.empty()) last_stats_ = c.stats;
      if (c.outcome == target_session::outcome::shutdown && !config_.keep_serving) exit_ = true;
      if (config_.keep_serving) {
        // Each session's own block, printed as it ends.
        ++sessions_ended_;
        print_stats(c.stats);
        ZC_LOG_INFO("session {} ended{}", c.number,
                    exit_ || core::stop_requested() ? "" : "; waiting for the next service");
      }
    }
    it = connections_.erase(it);
  }
}

void target_service::print_stats(const std::vector<worker_stats>& stats) {
  std::vector<storage::core_stats> blocks;
  for (const auto& w : stats)
    blocks.push_back({w.cpu, w.operations, std::nullopt, w.pe_hits, w.pe_misses});
  // No session got as far as its workers (Ctrl-C while idle): one empty block per core, so the
  // output always has the reference's per-core blocks.
  if (stats.empty())
    for (uint32_t cpu : config_.cpus) blocks.push_back({cpu, 0, std::nullopt, 0, 0});
  // zcstore's figures, one line per core, before the reference's blocks: those stay as they
  // were, at the very end of the output, where scripts written for the reference look.
  for (const auto& w : stats)
    std::fputs(fmt::format("target core {}: reads {} ({} bytes), writes {} ({} bytes), discards "
                           "{}, write zeroes {}, allocation maps {}\n",
                           w.cpu, w.reads, w.read_bytes, w.writes, w.written_bytes, w.discards,
                           w.write_zeroes, w.allocation_maps)
                   .c_str(),
               stdout);
  std::fputs(storage::format_core_stats(blocks).c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace zc::target
