// The other process of the cross-process comch tests (built as zc_comch_channel_peer).
//   client --name N [--stream] [--as-uid U]   connect, start a consumer and a producer, echo
//   server --name N [--stream] [--as-uid U]   listen, same on each connection
//   pci-export --size S --access rw|ro --pattern P [--linger-ms T]   print the blob, linger, exit
//   pci-import --blob HEX [--expect P] [--write P]                    map it, check, write
// Echo: control messages go back as they came; fast-path messages received by our consumer go
// back through our producer to the first consumer the other side announced. --stream also sends
// "stream <n>" fast-path messages to that consumer as fast as it posts buffers.
// Lines printed (flushed) tell the test where we are: READY, LISTENING, REFUSED <status>,
// CLIENT_LEFT_RUNNING <status>, BLOB <hex>, IMPORTED.
#include <grp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comch/client.hpp"
#include "comch/consumer.hpp"
#include "comch/producer.hpp"
#include "comch/server.hpp"
#include "core/buffer.hpp"
#include "core/memory_map.hpp"
#include "core/progress_engine.hpp"
#include "core/thread.hpp"

namespace {

using namespace zc;
using core::context_state;

constexpr uint32_t slots = 32;
constexpr size_t slot_size = 256;

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

std::map<std::string, std::string> parse(int argc, char** argv, int first) {
  std::map<std::string, std::string> opts;
  for (int i = first; i < argc; ++i) {
    std::string key = argv[i];
    if (key.rfind("--", 0) != 0) continue;
    if (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) {
      opts[key] = argv[++i];
    } else {
      opts[key] = "1";
    }
  }
  return opts;
}

void drop_privileges(const std::string& uid_text) {
  uid_t uid = static_cast<uid_t>(std::stoul(uid_text));
  if (setgroups(0, nullptr) != 0 || setgid(uid) != 0 || setuid(uid) != 0 || geteuid() != uid) {
    say("SETUID_FAILED " + std::string(std::strerror(errno)));
    std::exit(4);
  }
}

// The fast path of one connection: a consumer that echoes into a producer, plus the stream.
class fast_path {
 public:
  fast_path(core::progress_engine& pe, comch::connection& conn, bool stream)
      : stream_(stream),
        rx_mem_(core::memory_map::allocate(
            slots * slot_size, core::access::local_read_write | core::access::pci_read_write)),
        tx_mem_(core::memory_map::allocate(slots * slot_size, core::access::local_read_write)),
        inventory_(2 * slots),
        rx_(pe, conn,
            {.buffers = rx_mem_.get(),
             .post_recv_tasks = slots,
             .on_recv = [this](comch::consumer_post_recv_task& t) { echo_.push_back(&t); }}),
        tx_(pe, conn,
            {.send_tasks = slots,
             .on_send_done = [this](comch::producer_send_task& t) { sent(t); },
             .on_send_error = [this](comch::producer_send_task& t) { sent(t); }}) {
    rx_.start();
    tx_.start();
    for (uint32_t i = 0; i < slots; ++i) {
      core::buffer* b = nullptr;
      inventory_.get_by_addr(*rx_mem_, rx_mem_->data() + i * slot_size, slot_size, b);
      rx_.submit(*rx_.allocate_post_recv(*b));
      core::buffer* s = nullptr;
      inventory_.get_by_addr(*tx_mem_, tx_mem_->data() + i * slot_size, slot_size, s);
      free_tx_.push_back(s);
    }
  }
  uint32_t consumer_id() const { return rx_.id(); }
  void set_target(uint32_t id) {
    if (target_ == 0) target_ = id;
  }
  // Sends what can be sent now; returns true if anything moved.
  bool pump() {
    if (target_ == 0 || tx_.state() != context_state::running) return false;
    bool moved = false;
    while (!echo_.empty()) {
      comch::consumer_post_recv_task* r = echo_.front();
      auto* t = tx_.allocate_send(r->buf(), target_);
      if (t == nullptr) break;
      t->set_user_data(core::make_user_data(r));
      if (tx_.submit(*t) != status::success) {
        t->free();
        break;
      }
      echo_.pop_front();
      moved = true;
    }
    while (stream_ && !free_tx_.empty()) {
      core::buffer* b = free_tx_.back();
      std::string text = "stream " + std::to_string(streamed_);
      std::memcpy(b->head(), text.data(), text.size());
      b->set_data(b->head(), text.size());
      auto* t = tx_.allocate_send(*b, target_);
      if (t == nullptr) break;
      t->set_user_data(core::make_user_data(static_cast<void*>(nullptr)));
      if (tx_.submit(*t) != status::success) {
        t->free();
        break;
      }
      free_tx_.pop_back();
      ++streamed_;
      moved = true;
    }
    return moved;
  }
  bool idle() const {
    return rx_.state() == context_state::idle && tx_.state() == context_state::idle;
  }
  void stop() {
    rx_.stop();
    tx_.stop();
  }

 private:
  void sent(comch::producer_send_task& t) {
    auto* r = static_cast<comch::consumer_post_recv_task*>(t.get_user_data().ptr);
    if (r != nullptr) {  // an echo: re-post the receive buffer
      r->buf().set_data(r->buf().head(), 0);
      if (rx_.state() == context_state::running) rx_.submit(*r);
    } else {
      free_tx_.push_back(&t.buf());
    }
    t.free();
  }

  bool stream_;
  std::unique_ptr<core::memory_map> rx_mem_, tx_mem_;
  core::buffer_inventory inventory_;
  comch::consumer rx_;
  comch::producer tx_;
  std::deque<comch::consumer_post_recv_task*> echo_;
  std::vector<core::buffer*> free_tx_;
  uint32_t target_ = 0;
  uint64_t streamed_ = 0;
};

// Echoes control messages: each in-flight echo owns a copy of its bytes.
template <typename Owner>
void echo_control(Owner& owner, comch::send_task* t, std::span<const uint8_t> m) {
  if (t == nullptr) return;
  auto* copy = new std::vector<uint8_t>(m.begin(), m.end());
  t->set_message(*copy);
  t->set_user_data(core::make_user_data(copy));
  if (owner.submit(*t) != status::success) {
    delete copy;
    t->free();
  }
}
void control_sent(comch::send_task& t) {
  delete static_cast<std::vector<uint8_t>*>(t.get_user_data().ptr);
  t.free();
}

int run_client(const std::map<std::string, std::string>& opts) {
  core::progress_engine pe(core::poll_mode::adaptive);
  std::optional<fast_path> fp;
  std::vector<uint32_t> announced;
  comch::client* self = nullptr;
  comch::client cli(pe, {.name = opts.at("--name"),
                         .on_send_done = control_sent,
                         .on_send_error = control_sent,
                         .events = {.on_message =
                                        [&](comch::connection&, std::span<const uint8_t> m) {
                                          echo_control(*self, self->allocate_send(m), m);
                                        },
                                    .on_consumer_new =
                                        [&](comch::connection&, uint32_t id) {
                                          announced.push_back(id);
                                          if (fp) fp->set_target(id);
                                        }},
                         .connect_timeout = std::chrono::seconds(20)});
  self = &cli;
  try {
    cli.start();
    if (!pe.run_until([&] { return cli.state() != context_state::starting; },
                      std::chrono::seconds(30)) ||
        cli.state() != context_state::running) {
      say("REFUSED " + std::string(status_name(cli.last_error())));
      return 3;
    }
  } catch (const status_error& e) {
    say("REFUSED " + std::string(status_name(e.code())));
    return 3;
  }
  fp.emplace(pe, *cli.get_connection(), opts.count("--stream") != 0);
  for (uint32_t id : announced) fp->set_target(id);
  say("READY consumer=" + std::to_string(fp->consumer_id()));
  while (cli.state() == context_state::running) {
    bool moved = fp->pump();
    if (!pe.progress() && !moved) pe.wait(std::chrono::milliseconds(100));
  }
  say("CLIENT_LEFT_RUNNING " + std::string(status_name(cli.last_error())));
  fp->stop();
  pe.run_until([&] { return fp->idle() && cli.state() == context_state::idle; },
               std::chrono::seconds(10));
  return 0;
}

int run_server(const std::map<std::string, std::string>& opts) {
  core::install_stop_signal_handlers();
  core::progress_engine pe(core::poll_mode::adaptive);
  std::map<comch::connection*, std::unique_ptr<fast_path>> paths;
  std::vector<std::unique_ptr<fast_path>> retired;  // of closed connections, stopping
  const bool stream = opts.count("--stream") != 0;
  comch::server* self = nullptr;
  comch::server srv(pe,
                    {.name = opts.at("--name"),
                     .on_send_done = control_sent,
                     .on_send_error = control_sent,
                     .events = {.on_message =
                                    [&](comch::connection& c, std::span<const uint8_t> m) {
                                      echo_control(*self, self->allocate_send(c, m), m);
                                    },
                                .on_consumer_new =
                                    [&](comch::connection& c, uint32_t id) {
                                      if (paths.count(&c)) paths[&c]->set_target(id);
                                    }},
                     .on_connect =
                         [&](comch::connection& c) {
                           paths[&c] = std::make_unique<fast_path>(pe, c, stream);
                           say("CONNECTED consumer=" + std::to_string(paths[&c]->consumer_id()));
                         },
                     .on_disconnect =
                         [&](comch::connection& c) {
                           auto it = paths.find(&c);
                           if (it == paths.end()) return;
                           it->second->stop();
                           retired.push_back(std::move(it->second));
                           paths.erase(it);
                         }});
  self = &srv;
  try {
    srv.start();
  } catch (const status_error& e) {
    say("REFUSED " + std::string(status_name(e.code())));
    return 3;
  }
  say("LISTENING");
  while (!core::stop_requested()) {
    bool moved = false;
    for (auto& [c, p] : paths) moved |= p->pump();
    if (!pe.progress() && !moved) pe.wait(std::chrono::milliseconds(100));
  }
  for (auto& [c, p] : paths) p->stop();
  srv.stop();
  pe.run_until([&] { return srv.state() == context_state::idle; }, std::chrono::seconds(10));
  return 0;
}

std::string to_hex(const std::vector<uint8_t>& bytes) {
  std::string out;
  char two[3];
  for (uint8_t b : bytes) {
    std::snprintf(two, sizeof(two), "%02x", b);
    out += two;
  }
  return out;
}

std::vector<uint8_t> from_hex(const std::string& hex) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<uint8_t>(std::stoul(hex.substr(i, 2), nullptr, 16)));
  return out;
}

int run_pci_export(const std::map<std::string, std::string>& opts) {
  const auto access =
      opts.at("--access") == "ro" ? core::access::pci_read_only : core::access::pci_read_write;
  auto map = core::memory_map::allocate(std::stoul(opts.at("--size")),
                                        core::access::local_read_write | access);
  std::memset(map->data(), std::stoi(opts.at("--pattern"), nullptr, 0), map->size());
  say("BLOB " + to_hex(map->export_pci()));
  const auto linger = opts.count("--linger-ms") ? std::stoul(opts.at("--linger-ms")) : 30'000ul;
  std::this_thread::sleep_for(std::chrono::milliseconds(linger));
  return 0;
}

int run_pci_import(const std::map<std::string, std::string>& opts) {
  try {
    auto map = core::memory_map::import_pci(from_hex(opts.at("--blob")));
    if (opts.count("--expect")) {
      const int expect = std::stoi(opts.at("--expect"), nullptr, 0);
      for (size_t i = 0; i < map->size(); ++i)
        if (map->data()[i] != expect) {
          say("MISMATCH at " + std::to_string(i));
          return 5;
        }
    }
    if (opts.count("--write"))
      std::memset(map->data(), std::stoi(opts.at("--write"), nullptr, 0), map->size());
    say("IMPORTED");
    return 0;
  } catch (const status_error& e) {
    say("IMPORT_FAILED " + std::string(status_name(e.code())) + " " + e.what());
    return 6;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s client|server|pci-export|pci-import [options]\n", argv[0]);
    return 2;
  }
  std::string mode = argv[1];
  auto opts = parse(argc, argv, 2);
  if (opts.count("--as-uid")) drop_privileges(opts.at("--as-uid"));
  try {
    if (mode == "client") return run_client(opts);
    if (mode == "server") return run_server(opts);
    if (mode == "pci-export") return run_pci_export(opts);
    if (mode == "pci-import") return run_pci_import(opts);
  } catch (const std::exception& e) {
    say(std::string("ERROR ") + e.what());
    return 1;
  }
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
