#include "service/target_set.hpp"

#include <fmt/format.h>

#include "core/log.hpp"
#include "core/thread.hpp"

namespace zc::service {

using storage::message;
using storage::message_type;

target_set::target_set(const std::vector<std::string>& addresses,
                       std::chrono::milliseconds control_timeout,
                       std::chrono::milliseconds keep_alive_timeout,
                       std::shared_ptr<const storage::psk_file> tls_keys)
    : timeout_(control_timeout),
      keep_alive_timeout_(keep_alive_timeout),
      tls_keys_(tls_keys),
      addresses_(addresses) {
  // The reference's connect loop had no bound: one deadline for every target here.
  const auto deadline = std::chrono::steady_clock::now() + control_timeout;
  for (size_t i = 0; i < addresses_.size(); ++i) {
    try {
      channels_.push_back(
          std::make_unique<storage::tcp_client_channel>(addresses_[i], deadline, tls_keys));
    } catch (const status_error& e) {
      throw status_error(e.code(),
                         fmt::format("cannot connect to storage {}: {}", name(i), e.what()));
    }
    ZC_LOG_INFO("connected to storage {}{}", name(i), tls_keys ? " over TLS" : "");
  }
  forgotten_.assign(channels_.size(), false);
  alive_.assign(channels_.size(), storage::keep_alive(keep_alive_timeout));
}

target_set::~target_set() = default;

void target_set::confirm() {
  for (size_t i = 0; i < channels_.size(); ++i) {
    if (forgotten_[i]) continue;
    auto& channel = *channels_[i];
    if (status s = channel.send(storage::make_keep_alive()); !ok(s)) lost(i, channel.last_error());
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (;;) {
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      storage::receive_result got =
          storage::wait_for(channel, std::max(left, std::chrono::milliseconds(1)));
      if (got.code == status::time_out)
        throw target_lost(i, status::time_out,
                          fmt::format("storage {} did not answer a keep-alive within {} ms",
                                      name(i), timeout_.count()));
      if (got.code == status::shutdown) throw status_error(status::shutdown, "stop requested");
      if (got.failed()) lost(i, got.text.empty() ? std::string(status_name(got.code)) : got.text);
      alive_[i].heard(std::chrono::steady_clock::now());
      if (got.msg->message_id != storage::keep_alive_message_id) continue;
      check_keep_alive_answer(i, *got.msg);
      break;
    }
  }
}

void target_set::redial(size_t target, std::chrono::steady_clock::time_point deadline) {
  if (target >= channels_.size())
    throw status_error(status::invalid_value, fmt::format("no storage target {}", target));
  channels_[target]->close();
  for (;;) {
    // In slices when an idle hook is set, so it runs while the target is away.
    const auto now = std::chrono::steady_clock::now();
    const auto slice_end = idle_ ? std::min(deadline, now + 2 * idle_slice) : deadline;
    try {
      channels_[target] =
          std::make_unique<storage::tcp_client_channel>(addresses_[target], slice_end, tls_keys_);
      break;
    } catch (const status_error& e) {
      if (!idle_ || e.code() != status::time_out || slice_end >= deadline)
        throw status_error(e.code(),
                           fmt::format("cannot connect to storage {}: {}", name(target), e.what()));
    }
    idle_();
  }
  forgotten_[target] = false;
  alive_[target] = storage::keep_alive(keep_alive_timeout_);
  ZC_LOG_INFO("connected to storage {} again{}", name(target), tls_keys_ ? " over TLS" : "");
}

bool target_set::connected(size_t target) const noexcept {
  return target < channels_.size() && channels_[target]->is_connected();
}

std::string target_set::name(size_t target) const {
  return fmt::format("target {} ({})", target,
                     target < addresses_.size() ? addresses_[target] : std::string("?"));
}

void target_set::forget(size_t target) {
  if (target >= channels_.size()) return;
  channels_[target]->close();
  forgotten_[target] = true;
}

void target_set::lost(size_t target, const std::string& why) {
  channels_[target]->close();
  throw target_lost(target, status::connection_reset,
                    fmt::format("storage {} connection lost: {}", name(target), why));
}

void target_set::check_keep_alive_answer(size_t target, const message& answer) {
  if (answer.type != message_type::error_response) return;
  // The first request of a connection the target has no room for is answered with the reason
  // (a keep-alive, when no client came yet).
  const auto* e = std::get_if<storage::error_response_payload>(&answer.payload);
  lost(target, fmt::format("it refused the session: {}", e ? e->message : "no reason given"));
}

uint32_t target_set::send(size_t target, const target_request& what) {
  if (target >= channels_.size())
    throw status_error(status::invalid_value, fmt::format("no storage target {}", target));
  if (!channels_[target]->is_connected()) lost(target, "not connected");
  const uint32_t mid = next_mid_++;
  message msg{what.type, mid, what.correlation_id, what.payload};
  if (status s = channels_[target]->send(msg); !ok(s)) {
    if (s == status::invalid_value || s == status::too_big)
      throw status_error(s, channels_[target]->last_error());
    lost(target, channels_[target]->last_error());
  }
  ZC_LOG_DEBUG("sent {} id {} cid {} to {}", storage::to_string(what.type), mid,
               what.correlation_id, name(target));
  return mid;
}

message target_set::wait_response(size_t target, uint32_t mid, message_type expected,
                                  std::chrono::steady_clock::time_point deadline) {
  auto& channel = *channels_[target];
  uint32_t stale = 0;
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    // Checked on every pass: a target that keeps sending must not hold the wait past its deadline
    // or past Ctrl-C (wait_for hands back a queued message before it looks at either).
    if (now >= deadline)
      throw status_error(
          status::time_out,
          fmt::format("storage {} did not answer {} id {} within {} ms", name(target),
                      storage::to_string(expected), mid, timeout_.count()));
    if (core::stop_requested()) throw status_error(status::shutdown, "stop requested");
    auto left = deadline > now
                    ? std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now)
                    : std::chrono::milliseconds(0);
    if (idle_) left = std::min(left, idle_slice);
    storage::receive_result got = storage::wait_for(channel, left);
    if (got.code == status::time_out && idle_) {
      idle_();
      continue;  // the deadline check above decides
    }
    if (got.code == status::time_out)
      throw status_error(
          status::time_out,
          fmt::format("storage {} did not answer {} id {} within {} ms", name(target),
                      storage::to_string(expected), mid, timeout_.count()));
    if (got.code == status::shutdown) throw status_error(status::shutdown, "stop requested");
    if (got.failed())
      lost(target, got.text.empty() ? std::string(status_name(got.code)) : got.text);
    alive_[target].heard(std::chrono::steady_clock::now());
    message& reply = *got.msg;
    if (reply.message_id == storage::keep_alive_message_id) {
      check_keep_alive_answer(target, reply);
      continue;
    }
    if (reply.message_id != mid) {
      // A late answer to a request that timed out answers nothing waited for now. A few are
      // possible (one per request given up on); a stream of them is a broken peer.
      if (++stale > max_stale_answers)
        lost(target,
             fmt::format("more than {} answers to requests it was not asked", max_stale_answers));
      ::zc::log::print(::zc::log::source::app,
                       stale == 1 ? zc::log::level::warning : zc::log::level::debug,
                       "storage {}: dropped {} id {} while waiting for id {}", name(target),
                       storage::to_string(reply.type), reply.message_id, mid);
      continue;
    }
    if (reply.type == message_type::error_response) {
      if (std::get_if<storage::error_response_payload>(&reply.payload) == nullptr)
        throw status_error(status::unexpected, "error_response without its payload");
      return std::move(reply);
    }
    if (reply.type != expected || !storage::payload_matches(expected, reply.payload))
      throw status_error(status::unexpected,
                         fmt::format("Unexpected {} while expecting a {}",
                                     storage::to_string(reply.type), storage::to_string(expected)));
    return std::move(reply);
  }
}

message target_set::request(size_t target, const target_request& what, message_type expected) {
  const uint32_t mid = send(target, what);
  return wait_response(target, mid, expected, std::chrono::steady_clock::now() + timeout_);
}

std::vector<message> target_set::request_all(const target_request& what, message_type expected) {
  return request_each([&what](size_t) { return what; }, expected);
}

std::vector<message> target_set::request_each(const std::function<target_request(size_t)>& what_for,
                                              message_type expected) {
  std::vector<std::pair<size_t, uint32_t>> mids;
  for (size_t i = 0; i < channels_.size(); ++i)
    if (!forgotten_[i]) mids.emplace_back(i, send(i, what_for(i)));
  // One deadline for the whole fan-out, as the reference's per-batch wait.
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  std::vector<message> replies;
  for (const auto& [target, mid] : mids)
    replies.push_back(wait_response(target, mid, expected, deadline));
  return replies;
}

void target_set::check_connections() {
  for (size_t i = 0; i < channels_.size(); ++i) {
    if (forgotten_[i]) continue;
    auto& channel = *channels_[i];
    if (!channel.is_connected()) lost(i, "not connected");
    const auto now = std::chrono::steady_clock::now();
    for (;;) {
      storage::receive_result got = channel.poll();
      if (got.failed()) lost(i, got.text.empty() ? std::string(status_name(got.code)) : got.text);
      if (!got.msg) break;
      alive_[i].heard(now);
      if (got.msg->message_id == storage::keep_alive_message_id) {
        check_keep_alive_answer(i, *got.msg);
        continue;
      }
      ZC_LOG_WARN("storage {}: dropped unrequested {} id {}", name(i),
                  storage::to_string(got.msg->type), got.msg->message_id);
    }
    // Polled empty just now: silence is real, not a message waiting in the socket.
    if (alive_[i].expired(now))
      lost(i, fmt::format("it sent nothing, not even a keep-alive answer, for more than {} s",
                          alive_[i].timeout().count() / 1000));
    if (alive_[i].send_due(now)) {
      if (status s = channel.send(storage::make_keep_alive()); !ok(s))
        lost(i, channel.last_error());
      alive_[i].sent(now);
    }
  }
}

void target_set::shutdown_all(uint32_t correlation_id) noexcept {
  for (size_t i = 0; i < channels_.size(); ++i) {
    try {
      if (!channels_[i]->is_connected()) continue;
      auto reply =
          request(i, {message_type::shutdown_request, correlation_id, storage::empty_payload{}},
                  message_type::shutdown_response);
      if (reply.type == message_type::error_response)
        ZC_LOG_WARN("storage {} refused shutdown: {}", name(i),
                    std::get<storage::error_response_payload>(reply.payload).message);
    } catch (const std::exception& e) {
      // A stop does not wait for the answer: the target sees the connection close instead.
      if (core::stop_requested())
        ZC_LOG_INFO("storage {}: shutdown not confirmed: {}", name(i), e.what());
      else
        ZC_LOG_WARN("storage {}: shutdown not confirmed: {}", name(i), e.what());
    }
  }
}

std::vector<int> target_set::wait_fds() const {
  std::vector<int> fds;
  for (size_t i = 0; i < channels_.size(); ++i)
    if (!forgotten_[i]) fds.push_back(channels_[i]->wait_fd());
  return fds;
}

message relay(const message& target_response, const message& client_request) {
  message out = target_response;
  out.message_id = client_request.message_id;
  out.correlation_id = client_request.correlation_id;
  return out;
}

}  // namespace zc::service
