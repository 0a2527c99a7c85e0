#include "service/client_session.hpp"

#include <fmt/format.h>

#include "core/log.hpp"
#include "core/thread.hpp"

namespace zc::service {

using storage::message;
using storage::message_type;

void client_link::client_connected() {
  alive_.restart(std::chrono::steady_clock::now());
  connected_ = true;
}

status client_link::pump(std::chrono::milliseconds timeout) {
  storage::receive_result got = storage::wait_for(server_, timeout);
  drain_events();
  if (got.msg) {
    keep(std::move(*got.msg));
    return status::success;
  }
  if (got.code == status::time_out) {
    // Polled empty just now: the silence is real.
    if (connected_ && alive_.expired(std::chrono::steady_clock::now()))
      throw session_lost(status::time_out,
                         fmt::format("the client sent nothing, not even a keep-alive, for more "
                                     "than {} s",
                                     alive_.timeout().count() / 1000));
    return status::time_out;
  }
  if (got.code == status::shutdown) throw session_lost(status::shutdown, "stop requested");
  throw session_lost(got.code, fmt::format("client connection lost: {}",
                                           got.text.empty() ? status_name(got.code) : got.text));
}

void client_link::drain_events() {
  while (auto e = server_.take_consumer_event()) {
    ZC_LOG_DEBUG("client consumer {} {}", e->id,
                 e->what == storage::consumer_event::kind::created ? "created" : "expired");
    consumers_.apply(*e);
  }
}

// A client waits for each answer (REFERENCE_SPEC §2.9): one that keeps sending is broken, and
// must not grow this queue without bound.
void client_link::keep(message&& m) {
  alive_.heard(std::chrono::steady_clock::now());
  if (m.type == message_type::keep_alive_request) {
    // Answered whatever the stage. A client whose answers pile up unread (full) does not read
    // its connection: its session ends rather than hold what every session shares.
    if (status s = server_.send(storage::make_response(m, message_type::keep_alive_response));
        !ok(s))
      throw session_lost(
          s, fmt::format("cannot answer the client's keep-alive: {}", server_.last_error()));
    return;
  }
  if (early_.size() >= max_queued_requests)
    throw session_lost(status::unexpected,
                       fmt::format("the client sent more than {} requests without waiting for "
                                   "the answers",
                                   max_queued_requests));
  early_.push_back(std::move(m));
}

std::optional<message> client_link::take_request() {
  if (early_.empty()) return std::nullopt;
  message m = std::move(early_.front());
  early_.pop_front();
  return m;
}

void client_link::send(const message& msg) {
  if (status s = server_.send(msg); !ok(s))
    throw session_lost(s, fmt::format("cannot answer the client: {}", server_.last_error()));
}

void client_link::flush(std::chrono::milliseconds timeout) noexcept {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (server_.is_connected() && server_.queued_sends() != 0 &&
         std::chrono::steady_clock::now() < deadline) {
    storage::receive_result got = storage::wait_for(server_, poll_slice);
    drain_events();
    if (got.msg) {
      try {
        keep(std::move(*got.msg));
      } catch (const session_lost&) {
        break;
      }
    }
    if (got.failed() && got.code != status::time_out) break;
  }
}

std::vector<uint32_t> await_client_consumers(client_link& client, size_t workers,
                                             const std::function<bool()>& workers_ready,
                                             std::chrono::milliseconds timeout) {
  bool contexts = false;
  const bool ready = client.pump_until(
      [&] {
        if (!client.consumers().ready(workers)) return false;
        contexts = workers_ready();
        return contexts;
      },
      timeout);
  if (!ready)
    throw status_error(status::time_out,
                       fmt::format("not ready within {} ms: {} of {} client consumers, {}",
                                   timeout.count(), client.consumers().size(), workers,
                                   contexts ? "connections running" : "connections not running"));
  if (client.consumers().size() != workers)
    throw status_error(status::bad_state,
                       fmt::format("the client announced {} consumers for {} workers",
                                   client.consumers().size(), workers));
  return client.consumers().ids();
}

namespace {

constexpr message_type stage_request[] = {
    message_type::query_storage_request, message_type::init_storage_request,
    message_type::start_storage_request, message_type::stop_storage_request,
    message_type::shutdown_request,
};
constexpr size_t stage_count = std::size(stage_request);

message handle(request_handler& handler, const message& request, size_t stage) {
  const message_type expected = stage_request[stage];
  // Shutdown is honoured at any stage: a client whose run failed goes straight to it.
  if (request.type != expected && request.type != message_type::shutdown_request) {
    return storage::make_unexpected_response(request, expected);
  }
  try {
    switch (request.type) {
      case message_type::query_storage_request:
        return handler.on_query(request);
      case message_type::init_storage_request:
        return handler.on_init(request);
      case message_type::start_storage_request:
        return handler.on_start(request);
      case message_type::stop_storage_request:
        return handler.on_stop(request);
      default:
        return handler.on_shutdown(request);
    }
  } catch (const session_lost&) {
    throw;
  } catch (const status_error& e) {
    ZC_LOG_ERROR("{} failed: {}", storage::to_string(request.type), e.what());
    return storage::make_error_response(request, e.code(), e.what());
  } catch (const std::exception& e) {
    ZC_LOG_ERROR("{} failed: {}", storage::to_string(request.type), e.what());
    return storage::make_error_response(request, status::unknown, e.what());
  }
}

}  // namespace

void log_session_end(const std::string& why) noexcept {
  if (core::stop_requested())
    ZC_LOG_INFO("ending the session: {}", why);
  else
    ZC_LOG_ERROR("ending the session: {}", why);
}

session_outcome serve_client(client_link& client, request_handler& handler,
                             std::chrono::milliseconds idle_check) {
  auto& server = client.channel();
  // A server idles until a client comes; only a stop request ends the wait. The targets are
  // still watched meanwhile, so a lost one ends the program rather than the first request.
  for (;;) {
    status s = storage::wait_until_connected(server, idle_check);
    if (s == status::success) break;
    if (s == status::shutdown) {
      handler.abort("stop requested before a client connected");
      return session_outcome::never_started;
    }
    if (s != status::time_out) {
      handler.abort(fmt::format("comch server failed: {}", server.last_error()));
      return session_outcome::failed;
    }
    try {
      handler.check_health();
    } catch (const std::exception& e) {
      handler.abort(e.what());
      return session_outcome::failed;
    }
  }
  ZC_LOG_DEBUG("client connected (pid {})",
               server.connection() != nullptr ? server.connection()->peer_pid() : 0);
  client.client_connected();

  size_t stage = 0;
  // The health check (targets' connections, their keep-alives) runs at least every idle_check,
  // however busy the client keeps the loop: a client that sends without pause must not starve it.
  auto next_check = std::chrono::steady_clock::now() + idle_check;
  try {
    while (stage < stage_count) {
      if (const auto now = std::chrono::steady_clock::now(); now >= next_check) {
        handler.check_health();
        next_check = now + idle_check;
      }
      if (auto request = client.take_request()) {
        ZC_LOG_DEBUG("received {} id {} cid {}", storage::to_string(request->type),
                     request->message_id, request->correlation_id);
        const bool shutdown = request->type == message_type::shutdown_request;
        message reply = handle(handler, *request, stage);
        client.send(reply);
        // One message per stage, whatever came (REFERENCE_SPEC §2.9).
        stage = shutdown ? stage_count : stage + 1;
        continue;
      }
      (void)client.pump(idle_check);
    }
  } catch (const std::exception& e) {
    ZC_LOG_ERROR("session failed: {}", e.what());
    handler.abort(e.what());
    server.close();
    return session_outcome::failed;
  }
  client.flush(std::chrono::seconds(1));
  return session_outcome::completed;
}

}  // namespace zc::service
