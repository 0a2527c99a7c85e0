// doca_comch.h (the control path) over zc::comch::server and zc::comch::client. A DOCA server or
// client keeps its configuration until doca_ctx_start() makes the zcstore object (a changed
// setting while idle makes a new one at the next start). Each zcstore connection is shown to the
// program as a doca_comch_connection, found again through the zcstore connection's user data.
// Messages are copied into storage of their task's pool index, made at start, so a send
// allocates nothing and the program may reuse its buffer at once.
#include <doca_comch.h>
#include <doca_dev.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comch/client.hpp"
#include "comch/connection.hpp"
#include "comch/server.hpp"
#include "objects.hpp"
#include "task_conf.hpp"

struct doca_comch_task_send : doca_task {};
struct doca_comch_event_msg_recv {};
struct doca_comch_event_connection_status_changed {};

// The four counters of doca_comch_counter, in its order.
struct zc_comch_counters {
  uint64_t sent_messages = 0;
  uint64_t sent_bytes = 0;
  uint64_t recv_messages = 0;
  uint64_t recv_bytes = 0;
};

struct doca_comch_connection {
  zc::comch::connection* zc = nullptr;  // null once the connection is gone
  doca_comch_server* server = nullptr;  // exactly one of server and client is set
  doca_comch_client* client = nullptr;
  union doca_data user_data {};
  zc_comch_counters live;      // counted as messages go and come
  zc_comch_counters snapshot;  // as of doca_comch_connection_update_info()
};

namespace zc::doca {
namespace {

// What this facade offers (doca_comch_cap_*). The name bound is ours: any name fits a socket
// file (long ones are hashed, comch/address.hpp).
constexpr uint32_t max_name_len = 120;  // with the terminating NUL
constexpr uint32_t max_recv_queue_size = 8192;
constexpr uint32_t max_send_tasks = 8192;
// A server keeps this many clients; one more is disconnected as soon as it has connected.
constexpr uint32_t max_clients = 512;
// How long a started client keeps dialling a server that is not there yet (a DOCA server and
// client are often started together); then it goes idle (NOT_FOUND in the log).
constexpr std::chrono::milliseconds client_connect_timeout{30000};
// The message memory reserved per send task at start.
constexpr size_t message_reserve = 64 * 1024;

}  // namespace

// What a server and a client share: their settings, the send task type and the message callback.
struct comch_endpoint : doca_ctx {
  doca_dev* dev = nullptr;
  std::string name;
  uint32_t max_msg_size = comch::default_max_msg_size;
  uint32_t recv_queue_size = comch::default_recv_queue_size;
  task_conf<doca_comch_task_send> send;
  std::vector<std::vector<uint8_t>> messages;  // by send task pool index
  doca_comch_event_msg_recv_cb_t on_message = nullptr;
  doca_comch_event_msg_recv msg_event;
  bool rebuild = false;  // a setting changed since the zcstore object was made

  // The program's view of a zcstore connection of this end (null when it has none).
  virtual doca_comch_connection* connection_of(comch::connection& c) noexcept = 0;

  bool idle() noexcept {
    auto* c = zc_context();
    return c == nullptr || c->state() == core::context_state::idle;
  }

  // Settings for the zcstore object: sizes, the send task handlers, the message event.
  template <typename Config>
  void configure(Config& config) {
    config.name = name;
    config.max_msg_size = max_msg_size;
    config.recv_queue_size = recv_queue_size;
    // zcstore needs at least one send task; without a DOCA configuration none is handed out.
    config.send_tasks = send.num_tasks == 0 ? 1 : send.num_tasks;
    send.template apply<comch::send_task>(*this, [&](uint32_t, auto on_success, auto on_error) {
      // A completed send counts before the program's callback, which may free the task.
      config.on_send_done = [this, done = std::move(on_success)](comch::send_task& t) {
        if (auto* c = connection_of(t.target()); c != nullptr) {
          c->live.sent_messages++;
          c->live.sent_bytes += t.message().size();
        }
        done(t);
      };
      config.on_send_error = std::move(on_error);
    });
    // Room for a message of up to message_reserve bytes per task, made now; a larger one (a max
    // message size raised past it) grows its task's buffer once, at its first allocation. Every
    // task at the full limit (8192 x 16 MiB) would be 128 GiB.
    messages.assign(send.num_tasks, {});
    for (auto& m : messages) m.reserve(std::min<size_t>(max_msg_size, message_reserve));
  }

  void deliver(doca_comch_connection* c, std::span<const uint8_t> message) {
    if (c == nullptr) return;
    c->live.recv_messages++;
    c->live.recv_bytes += message.size();
    if (on_message == nullptr) return;
    // DOCA hands the program a writable buffer; it is ours until the callback returns.
    on_message(&msg_event, const_cast<uint8_t*>(message.data()),
               static_cast<uint32_t>(message.size()), c);
  }
};

}  // namespace zc::doca

struct doca_comch_server final : zc::doca::comch_endpoint {
  doca_dev_rep* repr = nullptr;
  std::unique_ptr<zc::comch::server> zc;
  doca_comch_event_connection_status_changed_cb_t on_connect = nullptr;
  doca_comch_event_connection_status_changed_cb_t on_disconnect = nullptr;
  doca_comch_event_connection_status_changed status_event;
  // Every connection the program has seen, until its disconnect event has been delivered.
  std::vector<std::unique_ptr<doca_comch_connection>> connections;
  // Connects (true) and disconnects (false) for doca_pe_progress() to deliver, in order.
  std::deque<std::pair<bool, doca_comch_connection*>> events;

  doca_error_t start() override;
  bool report_event() override;
  bool has_events() const noexcept override { return !events.empty(); }
  zc::core::context* zc_context() noexcept override { return zc.get(); }
  doca_comch_connection* connection_of(zc::comch::connection& c) noexcept override {
    return static_cast<doca_comch_connection*>(c.get_user_data().ptr);
  }

  void connected(zc::comch::connection& c);
  void disconnected(zc::comch::connection& c);
};

struct doca_comch_client final : zc::doca::comch_endpoint {
  std::unique_ptr<zc::comch::client> zc;
  doca_comch_connection connection;

  doca_error_t start() override;
  zc::core::context* zc_context() noexcept override { return zc.get(); }
  doca_comch_connection* connection_of(zc::comch::connection&) noexcept override {
    return &connection;
  }

  // The program's view of the live zcstore connection, or null.
  doca_comch_connection* current() noexcept {
    connection.zc = zc == nullptr ? nullptr : zc->get_connection();
    return connection.zc == nullptr ? nullptr : &connection;
  }

  // Started and not connected yet: dialling the server, or in the handshake with it.
  bool connecting() const noexcept {
    return zc != nullptr && zc->state() == zc::core::context_state::starting;
  }
};

// zcstore reports connects and disconnects from its poll, from stop() and from disconnect():
// they are queued here and delivered from doca_pe_progress() after the engine's pass, so a
// program's callback never runs inside zcstore's poll or inside its own API call, and a
// connection object stays valid until its disconnect callback has returned.
void doca_comch_server::connected(zc::comch::connection& c) {
  const size_t live = static_cast<size_t>(std::count_if(
      connections.begin(), connections.end(), [](const auto& p) { return p->zc != nullptr; }));
  if (live >= zc::doca::max_clients) {
    ZC_SDK_LOG_ERROR("doca_comch_server \"{}\": {} clients already; pid {} disconnected", name,
                     live, c.peer_pid());
    zc->disconnect(c);
    return;
  }
  auto added = std::make_unique<doca_comch_connection>();
  added->zc = &c;
  added->server = this;
  c.set_user_data(zc::core::make_user_data(added.get()));
  connections.push_back(std::move(added));
  events.emplace_back(true, connections.back().get());
  if (pe != nullptr) pe->engine.notify();
}

void doca_comch_server::disconnected(zc::comch::connection& c) {
  auto* gone = static_cast<doca_comch_connection*>(c.get_user_data().ptr);
  if (gone == nullptr) return;  // refused above: the program never saw it
  c.set_user_data(zc::core::make_user_data(0));
  gone->zc = nullptr;
  events.emplace_back(false, gone);
  if (pe != nullptr) pe->engine.notify();
}

bool doca_comch_server::report_event() {
  if (events.empty()) return false;
  auto [connect, connection] = events.front();
  events.pop_front();
  if (connect) {
    if (on_connect != nullptr) on_connect(&status_event, connection, 1);
    return true;
  }
  // The object lives through its callback, which may destroy the server (idle after a stop):
  // nothing of `this` is touched once it was called.
  std::unique_ptr<doca_comch_connection> owned;
  auto it = std::find_if(connections.begin(), connections.end(),
                         [connection](const auto& p) { return p.get() == connection; });
  if (it != connections.end()) {
    owned = std::move(*it);
    connections.erase(it);
  }
  if (on_disconnect != nullptr) on_disconnect(&status_event, connection, 1);
  return true;
}

doca_error_t doca_comch_server::start() {
  if (!idle()) return DOCA_ERROR_BAD_STATE;
  if (zc == nullptr || rebuild) {
    zc.reset();
    zc::comch::server_config config;
    config.device = dev->info.ibdev_name;
    configure(config);
    config.on_connect = [this](zc::comch::connection& c) { connected(c); };
    config.on_disconnect = [this](zc::comch::connection& c) { disconnected(c); };
    config.events.on_message = [this](zc::comch::connection& c, std::span<const uint8_t> m) {
      deliver(connection_of(c), m);
    };
    zc = std::make_unique<zc::comch::server>(pe->engine, std::move(config));
    zc->set_state_changed_callback(
        [this](zc::core::context&, zc::core::context_state previous, zc::core::context_state next) {
          record(previous, next);
        });
    rebuild = false;
  }
  return zc::doca::to_doca(zc->start());
}

doca_error_t doca_comch_client::start() {
  if (!idle()) return DOCA_ERROR_BAD_STATE;
  if (zc == nullptr || rebuild) {
    zc.reset();
    zc::comch::client_config config;
    // The host function a client is on is its device's PCI address; a server made without a
    // representor serves every host function (comch/address.hpp).
    config.device = dev->info.pci_addr;
    configure(config);
    config.connect_timeout = zc::doca::client_connect_timeout;
    config.events.on_message = [this](zc::comch::connection& c, std::span<const uint8_t> m) {
      connection.zc = &c;
      deliver(&connection, m);
    };
    zc = std::make_unique<zc::comch::client>(pe->engine, std::move(config));
    zc->set_state_changed_callback(
        [this](zc::core::context&, zc::core::context_state previous, zc::core::context_state next) {
          record(previous, next);
        });
    rebuild = false;
  }
  connection.user_data = {};
  connection.live = {};
  connection.snapshot = {};
  auto s = zc->start();
  if (!zc::ok(s)) return zc::doca::to_doca(s);
  // As DOCA's client: it connects asynchronously, RUNNING is reported once the server accepted.
  return zc->state() == zc::core::context_state::starting ? DOCA_ERROR_IN_PROGRESS : DOCA_SUCCESS;
}

namespace zc::doca {
namespace {

doca_error_t submit_server_send(doca_task& w) noexcept {
  auto& server = static_cast<doca_comch_server&>(*w.ctx);
  return to_doca(server.zc->submit(static_cast<comch::send_task&>(*w.zc)));
}

doca_error_t submit_client_send(doca_task& w) noexcept {
  auto& client = static_cast<doca_comch_client&>(*w.ctx);
  return to_doca(client.zc->submit(static_cast<comch::send_task&>(*w.zc)));
}

// The checks every send allocation makes before it takes a task. `peer` must be a connection of
// `ep` (checked by the caller).
doca_error_t check_send(comch_endpoint& ep, const doca_comch_connection& peer, uint32_t len,
                        const char* function) {
  if (ep.zc_context() == nullptr || ep.zc_context()->state() != core::context_state::running)
    return DOCA_ERROR_BAD_STATE;
  if (ep.send.num_tasks == 0) {
    ZC_SDK_LOG_ERROR("{}: no send task configured (doca_comch_*_task_send_set_conf)", function);
    return DOCA_ERROR_BAD_STATE;
  }
  if (peer.zc == nullptr || !peer.zc->connected()) return DOCA_ERROR_NOT_CONNECTED;
  if (len > peer.zc->max_send_size()) {
    ZC_SDK_LOG_ERROR(
        "{}: a message of {} bytes is over the connection's limit of {} bytes (the smaller of "
        "both ends' max message size)",
        function, len, peer.zc->max_send_size());
    return DOCA_ERROR_TOO_BIG;
  }
  return DOCA_SUCCESS;
}

// Copies the message into the task's storage and fills in its DOCA task.
doca_error_t finish_send(comch_endpoint& ep, comch::send_task* t, const void* msg, uint32_t len,
                         doca_error_t (*submit)(doca_task&) noexcept, doca_comch_task_send** out) {
  if (t == nullptr) return DOCA_ERROR_NO_MEMORY;  // every send task is in use
  auto& storage = ep.messages[t->pool_index()];
  const auto* bytes = static_cast<const uint8_t*>(msg);
  storage.assign(bytes, bytes + len);  // no allocation up to message_reserve bytes
  t->set_message(storage);
  *out = &ep.send.allocated(ep, *t, zc_doca_task_type::comch_send, doca_data{}, submit);
  return DOCA_SUCCESS;
}

doca_error_t set_send_conf(comch_endpoint& ep, doca_comch_task_send_completion_cb_t on_success,
                           doca_comch_task_send_completion_cb_t on_error, uint32_t num_tasks) {
  if (!task_conf<doca_comch_task_send>::acceptable(on_success, on_error, num_tasks) ||
      num_tasks > max_send_tasks)
    return DOCA_ERROR_INVALID_VALUE;
  if (!ep.idle()) return DOCA_ERROR_BAD_STATE;
  ep.send.store(on_success, on_error, num_tasks);
  ep.rebuild = true;
  return DOCA_SUCCESS;
}

doca_error_t set_max_msg_size(comch_endpoint& ep, uint32_t size) {
  if (size == 0 || size > comch::max_msg_size_limit) return DOCA_ERROR_INVALID_VALUE;
  if (!ep.idle()) return DOCA_ERROR_BAD_STATE;
  ep.max_msg_size = size;
  ep.rebuild = true;
  return DOCA_SUCCESS;
}

doca_error_t set_recv_queue_size(comch_endpoint& ep, uint32_t size) {
  if (size == 0 || size > max_recv_queue_size) return DOCA_ERROR_INVALID_VALUE;
  if (!ep.idle()) return DOCA_ERROR_BAD_STATE;
  ep.recv_queue_size = size;
  ep.rebuild = true;
  return DOCA_SUCCESS;
}

doca_error_t set_msg_recv(comch_endpoint& ep, doca_comch_event_msg_recv_cb_t cb) {
  if (cb == nullptr) return DOCA_ERROR_INVALID_VALUE;
  if (!ep.idle()) return DOCA_ERROR_BAD_STATE;
  ep.on_message = cb;
  return DOCA_SUCCESS;
}

// A name DOCA accepts: 1 to max_name_len - 1 bytes.
bool valid_name(const char* name) noexcept {
  if (name == nullptr) return false;
  const size_t n = strnlen(name, max_name_len);
  return n != 0 && n < max_name_len;
}

doca_error_t cap_value(const doca_devinfo* devinfo, uint32_t* out, uint32_t value) noexcept {
  if (devinfo == nullptr || out == nullptr) return DOCA_ERROR_INVALID_VALUE;
  *out = value;
  return DOCA_SUCCESS;
}

template <typename Endpoint>
doca_error_t destroy(Endpoint* ep) {
  if (ep == nullptr) return DOCA_ERROR_INVALID_VALUE;
  if (!ep->idle()) return DOCA_ERROR_BAD_STATE;
  // A message or send callback: zcstore's poll of this very context is on the stack.
  if (destroyed_inside_progress(*ep, "doca_comch_*_destroy")) return DOCA_ERROR_IN_USE;
  if (ep->pe != nullptr) std::erase(ep->pe->contexts, static_cast<doca_ctx*>(ep));
  delete ep;
  return DOCA_SUCCESS;
}

}  // namespace
}  // namespace zc::doca

using zc::doca::guarded;

extern "C" {

// ---- capabilities

doca_error_t doca_comch_cap_server_is_supported(const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_SUCCESS;
}

doca_error_t doca_comch_cap_client_is_supported(const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_SUCCESS;
}

doca_error_t doca_comch_cap_get_max_name_len(const struct doca_devinfo* devinfo,
                                             uint32_t* max_name_len) {
  return zc::doca::cap_value(devinfo, max_name_len, zc::doca::max_name_len);
}

doca_error_t doca_comch_cap_get_max_msg_size(const struct doca_devinfo* devinfo, uint32_t* size) {
  return zc::doca::cap_value(devinfo, size, zc::comch::max_msg_size_limit);
}

doca_error_t doca_comch_cap_get_max_recv_queue_size(const struct doca_devinfo* devinfo,
                                                    uint32_t* size) {
  return zc::doca::cap_value(devinfo, size, zc::doca::max_recv_queue_size);
}

doca_error_t doca_comch_cap_get_max_clients(const struct doca_devinfo* devinfo,
                                            uint32_t* num_clients) {
  return zc::doca::cap_value(devinfo, num_clients, zc::doca::max_clients);
}

doca_error_t doca_comch_cap_get_max_send_tasks(const struct doca_devinfo* devinfo,
                                               uint32_t* max_send_tasks) {
  return zc::doca::cap_value(devinfo, max_send_tasks, zc::doca::max_send_tasks);
}

// ---- server

doca_error_t doca_comch_server_create(struct doca_dev* dev, struct doca_dev_rep* repr,
                                      const char* name, struct doca_comch_server** comch_server) {
  if (dev == nullptr || comch_server == nullptr || !zc::doca::valid_name(name))
    return DOCA_ERROR_INVALID_VALUE;
  return guarded(__func__, [&] {
    auto s = std::make_unique<doca_comch_server>();
    s->dev = dev;
    s->repr = repr;
    s->name = name;
    *comch_server = s.release();
    return DOCA_SUCCESS;
  });
}

doca_error_t doca_comch_server_destroy(struct doca_comch_server* comch_server) {
  return guarded(__func__, [&] { return zc::doca::destroy(comch_server); });
}

doca_error_t doca_comch_server_set_max_msg_size(struct doca_comch_server* comch_server,
                                                uint32_t size) {
  if (comch_server == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::set_max_msg_size(*comch_server, size);
}

doca_error_t doca_comch_server_get_max_msg_size(const struct doca_comch_server* comch_server,
                                                uint32_t* size) {
  if (comch_server == nullptr || size == nullptr) return DOCA_ERROR_INVALID_VALUE;
  *size = comch_server->max_msg_size;
  return DOCA_SUCCESS;
}

doca_error_t doca_comch_server_set_recv_queue_size(struct doca_comch_server* comch_server,
                                                   uint32_t size) {
  if (comch_server == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::set_recv_queue_size(*comch_server, size);
}

doca_error_t doca_comch_server_get_recv_queue_size(const struct doca_comch_server* comch_server,
                                                   uint32_t* size) {
  if (comch_server == nullptr || size == nullptr) return DOCA_ERROR_INVALID_VALUE;
  *size = comch_server->recv_queue_size;
  return DOCA_SUCCESS;
}

doca_error_t doca_comch_server_get_device(const struct doca_comch_server* comch_server,
                                          struct doca_dev** dev) {
  if (comch_server == nullptr || dev == nullptr) return DOCA_ERROR_INVALID_VALUE;
  *dev = comch_server->dev;
  return DOCA_SUCCESS;
}

doca_error_t doca_comch_server_get_device_repr(const struct doca_comch_server* comch_server,
                                               struct doca_dev_rep** repr) {
  if (comch_server == nullptr || repr == nullptr) return DOCA_ERROR_INVALID_VALUE;
  *repr = comch_server->repr;
  return DOCA_SUCCESS;
}

struct doca_ctx* doca_comch_server_as_ctx(struct doca_comch_server* comch_server) {
  return comch_server;
}

doca_error_t doca_comch_server_disconnect(struct doca_comch_server* comch_server,
                                          struct doca_comch_connection* connection) {
  if (comch_server == nullptr || connection == nullptr || connection->server != comch_server)
    return DOCA_ERROR_INVALID_VALUE;
  if (connection->zc == nullptr) return DOCA_ERROR_NOT_CONNECTED;
  return guarded(__func__, [&] {
    comch_server->zc->disconnect(*connection->zc);
    return DOCA_SUCCESS;
  });
}

doca_error_t doca_comch_server_task_send_set_conf(
    struct doca_comch_server* comch_server, doca_comch_task_send_completion_cb_t task_completion_cb,
    doca_comch_task_send_completion_cb_t task_error_cb, uint32_t num_send_tasks) {
  if (comch_server == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::set_send_conf(*comch_server, task_completion_cb, task_error_cb, num_send_tasks);
}

doca_error_t doca_comch_server_task_send_alloc_init(struct doca_comch_server* comch_server,
                                                    struct doca_comch_connection* peer,
                                                    const void* msg, uint32_t len,
                                                    struct doca_comch_task_send** task) {
  if (comch_server == nullptr || peer == nullptr || msg == nullptr || len == 0 || task == nullptr ||
      peer->server != comch_server)
    return DOCA_ERROR_INVALID_VALUE;
  return guarded(__func__, [&] {
    auto r =
        zc::doca::check_send(*comch_server, *peer, len, "doca_comch_server_task_send_alloc_init");
    if (r != DOCA_SUCCESS) return r;
    return zc::doca::finish_send(*comch_server, comch_server->zc->allocate_send(*peer->zc, {}), msg,
                                 len, &zc::doca::submit_server_send, task);
  });
}

doca_error_t doca_comch_server_event_msg_recv_register(
    struct doca_comch_server* comch_server, doca_comch_event_msg_recv_cb_t recv_event_cb) {
  if (comch_server == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::set_msg_recv(*comch_server, recv_event_cb);
}

doca_error_t doca_comch_server_event_connection_status_changed_register(
    struct doca_comch_server* comch_server,
    doca_comch_event_connection_status_changed_cb_t connect_event_cb,
    doca_comch_event_connection_status_changed_cb_t disconnect_event_cb) {
  if (comch_server == nullptr || connect_event_cb == nullptr || disconnect_event_cb == nullptr)
    return DOCA_ERROR_INVALID_VALUE;
  if (!comch_server->idle()) return DOCA_ERROR_BAD_STATE;
  comch_server->on_connect = connect_event_cb;
  comch_server->on_disconnect = disconnect_event_cb;
  return DOCA_SUCCESS;
}

// ---- client

doca_error_t doca_comch_client_create(struct doca_dev* dev, const char* name,
                                      struct doca_comch_client** comch_client) {
  if (dev == nullptr || comch_client == nullptr || !zc::doca::valid_name(name))
    return DOCA_ERROR_INVALID_VALUE;
  return guarded(__func__, [&] {
    auto c = std::make_unique<doca_comch_client>();
    c->dev = dev;
    c->name = name;
    c->connection.client = c.get();
    *comch_client = c.release();
    return DOCA_SUCCESS;
  });
}

doca_error_t doca_comch_client_destroy(struct doca_comch_client* comch_client) {
  return guarded(__func__, [&] { return zc::doca::destroy(comch_client); });
}

doca_error_t doca_comch_client_set_max_msg_size(struct doca_comch_client* comch_client,
                                                uint32_t size) {
  if (comch_client == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::set_max_msg_size(*comch_client, size);
}

doca_error_t doca_comch_client_get_max_msg_size(const struct doca_comch_client* comch_client,
                                                uint32_t* size) {
  if (comch_client == nullptr || size == nullptr) return DOCA_ERROR_INVALID_VALUE;
  *size = comch_client->max_msg_size;
  return DOCA_SUCCESS;
}

doca_error_t doca_comch_client_set_recv_queue_size(struct doca_comch_client* comch_client,
                                                   uint32_t size) {
  if (comch_client == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::set_recv_queue_size(*comch_client, size);
}

doca_error_t doca_comch_client_get_recv_queue_size(const struct doca_comch_client* comch_client,
                                                   uint32_t* size) {
  if (comch_client == nullptr || size == nullptr) return DOCA_ERROR_INVALID_VALUE;
  *size = comch_client->recv_queue_size;
  return DOCA_SUCCESS;
}

doca_error_t doca_comch_client_get_device(const struct doca_comch_client* comch_client,
                                          struct doca_dev** dev) {
  if (comch_client == nullptr || dev == nullptr) return DOCA_ERROR_INVALID_VALUE;
  *dev = comch_client->dev;
  return DOCA_SUCCESS;
}

struct doca_ctx* doca_comch_client_as_ctx(struct doca_comch_client* comch_client) {
  return comch_client;
}

doca_error_t doca_comch_client_get_connection(const struct doca_comch_client* comch_client,
                                              struct doca_comch_connection** connection) {
  if (comch_client == nullptr || connection == nullptr) return DOCA_ERROR_INVALID_VALUE;
  auto* live = const_cast<doca_comch_client*>(comch_client)->current();
  if (live != nullptr) {
    *connection = live;
    return DOCA_SUCCESS;
  }
  // Started (doca_ctx_start answered IN_PROGRESS) but not connected yet: DOCA documents
  // BAD_STATE for a client not started only; the connection exists once the context is RUNNING.
  if (comch_client->connecting()) return DOCA_ERROR_CONNECTION_INPROGRESS;
  return DOCA_ERROR_BAD_STATE;
}

doca_error_t doca_comch_client_task_send_set_conf(
    struct doca_comch_client* comch_client, doca_comch_task_send_completion_cb_t task_completion_cb,
    doca_comch_task_send_completion_cb_t task_error_cb, uint32_t num_send_tasks) {
  if (comch_client == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::set_send_conf(*comch_client, task_completion_cb, task_error_cb, num_send_tasks);
}

doca_error_t doca_comch_client_task_send_alloc_init(struct doca_comch_client* comch_client,
                                                    struct doca_comch_connection* peer,
                                                    const void* msg, uint32_t len,
                                                    struct doca_comch_task_send** task) {
  if (comch_client == nullptr || peer == nullptr || msg == nullptr || len == 0 || task == nullptr ||
      peer != &comch_client->connection)
    return DOCA_ERROR_INVALID_VALUE;
  return guarded(__func__, [&] {
    comch_client->current();
    auto r =
        zc::doca::check_send(*comch_client, *peer, len, "doca_comch_client_task_send_alloc_init");
    if (r != DOCA_SUCCESS) return r;
    return zc::doca::finish_send(*comch_client, comch_client->zc->allocate_send({}), msg, len,
                                 &zc::doca::submit_client_send, task);
  });
}

doca_error_t doca_comch_client_event_msg_recv_register(
    struct doca_comch_client* comch_client, doca_comch_event_msg_recv_cb_t recv_event_cb) {
  if (comch_client == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::set_msg_recv(*comch_client, recv_event_cb);
}

// ---- tasks and connections

struct doca_task* doca_comch_task_send_as_task(struct doca_comch_task_send* task) {
  return task;
}

doca_error_t doca_comch_connection_set_user_data(struct doca_comch_connection* connection,
                                                 union doca_data user_data) {
  if (connection == nullptr) return DOCA_ERROR_INVALID_VALUE;
  connection->user_data = user_data;
  return DOCA_SUCCESS;
}

union doca_data doca_comch_connection_get_user_data(
    const struct doca_comch_connection* connection) {
  union doca_data none {};
  return connection == nullptr ? none : connection->user_data;
}

struct doca_comch_server* doca_comch_server_get_server_ctx(
    const struct doca_comch_connection* connection) {
  return connection == nullptr ? nullptr : connection->server;
}

struct doca_comch_client* doca_comch_client_get_client_ctx(
    const struct doca_comch_connection* connection) {
  return connection == nullptr ? nullptr : connection->client;
}

doca_error_t doca_comch_connection_update_info(struct doca_comch_connection* comch_connection) {
  if (comch_connection == nullptr) return DOCA_ERROR_INVALID_VALUE;
  // A client's zcstore connection is looked up afresh: a closed one may have been freed.
  if (auto* client = comch_connection->client; client != nullptr) {
    // Started again and not connected yet (the program kept the connection of an earlier run):
    // being set up, not failed.
    if (client->current() == nullptr && client->connecting())
      return DOCA_ERROR_CONNECTION_INPROGRESS;
  }
  if (comch_connection->zc == nullptr || !comch_connection->zc->connected())
    return DOCA_ERROR_CONNECTION_ABORTED;
  comch_connection->snapshot = comch_connection->live;
  return DOCA_SUCCESS;
}

doca_error_t doca_comch_connection_get_counter(const struct doca_comch_connection* comch_connection,
                                               enum doca_comch_counter counter_type,
                                               uint64_t* counter_value) {
  if (comch_connection == nullptr || counter_value == nullptr) return DOCA_ERROR_INVALID_VALUE;
  const zc_comch_counters& c = comch_connection->snapshot;
  switch (counter_type) {
    case DOCA_COMCH_COUNTER_SENT_MESSAGES:
      *counter_value = c.sent_messages;
      return DOCA_SUCCESS;
    case DOCA_COMCH_COUNTER_SENT_BYTES:
      *counter_value = c.sent_bytes;
      return DOCA_SUCCESS;
    case DOCA_COMCH_COUNTER_RECV_MESSAGES:
      *counter_value = c.recv_messages;
      return DOCA_SUCCESS;
    case DOCA_COMCH_COUNTER_RECV_BYTES:
      *counter_value = c.recv_bytes;
      return DOCA_SUCCESS;
  }
  return DOCA_ERROR_INVALID_VALUE;
}

// ---- the fast path's consumer events

doca_error_t doca_comch_server_event_consumer_register(struct doca_comch_server*,
                                                       doca_comch_event_consumer_cb_t,
                                                       doca_comch_event_consumer_cb_t) {
  return ZC_DOCA_NOT_SUPPORTED();
}

doca_error_t doca_comch_client_event_consumer_register(struct doca_comch_client*,
                                                       doca_comch_event_consumer_cb_t,
                                                       doca_comch_event_consumer_cb_t) {
  return ZC_DOCA_NOT_SUPPORTED();
}

}  // extern "C"
