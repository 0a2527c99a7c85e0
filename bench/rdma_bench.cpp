// zcstore rdma benchmark (bench/run_rdma.sh): two processes, each with one progress engine and
// one rdma::context, connected through blobs exchanged as files in DIR.
//
//   zc_rdma_bench server DIR DEVICE [--poll busy|event] [--cpu N]
//   zc_rdma_bench client DIR DEVICE [--poll busy|event] [--cpu N] [--seconds S]
//                 [--tests pingpong,msgrate,read_lat,write_lat,read_bw,write_bw,send_lat]
//                 [--sizes 4096,65536] [--qd 32] [--window 64] [--profile 1]
//
// The server exports a 4 MiB region (read/write) and keeps receives posted: a 64-byte message
// starting with 'P' is answered with a 64-byte send (ping-pong), 'S' is only consumed (message
// rate), 'M' is a --profile mark, 'Q' ends the server. The client runs the tests (default: all
// but send_lat) and prints one "result ..." line each:
//   pingpong  64 B send -> receive -> send back; one-way latency = round trip / 2
//   msgrate   64 B sends, `window` outstanding, a send counted when its delivery is acknowledged
//   send_lat  QD1 64 B sends: submit -> completion (the delivery acknowledgement)
//   read_lat / write_lat   QD1: submit, wait for the completion callback, repeat
//   read_bw / write_bw     QD`qd`: each completion resubmits its slot (slot i at offset i * size
//                          on both sides), MB/s = 10^6 bytes per second
// --poll busy spins on progress(); event sleeps in the engine's wait() when progress() missed.
// --profile 1 (diagnosis, both sides) also prints, per test, the share of each side's time spent
// in progress() passes that did work (an idle share means that side waited for the other).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "common.hpp"
#include "core/buffer.hpp"
#include "core/device.hpp"
#include "core/memory_map.hpp"
#include "core/progress_engine.hpp"
#include "core/thread.hpp"
#include "rdma/context.hpp"

namespace {

using namespace zc;
namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

constexpr size_t region_size = 4 << 20;
constexpr size_t message_size = 64;
constexpr size_t receive_slot = 256;  // bytes per posted receive buffer
constexpr uint32_t server_receives = 256;
constexpr size_t max_samples = 4 << 20;

using bench::die;

struct options : bench::pair_options {
  core::poll_mode poll = core::poll_mode::busy;
  bool profile = false;  // measure the share of time spent in progress() passes that did work
};

// A cheap timestamp for --profile (cycles on x86-64).
inline uint64_t ticks() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return static_cast<uint64_t>(clock_type::now().time_since_epoch().count());
#endif
}

// Region memory: page-aligned, owned here, wrapped by a memory map.
struct region {
  uint8_t* data = nullptr;
  explicit region(size_t length) {
    data = static_cast<uint8_t*>(std::aligned_alloc(4096, length));
    if (data == nullptr) die("out of memory");
    for (size_t i = 0; i < length; ++i) data[i] = static_cast<uint8_t>(i % 251);
  }
  ~region() { std::free(data); }
};

// One side: engine + context; pump() is one step of the event loop in the chosen poll mode.
struct side {
  core::progress_engine engine;
  std::unique_ptr<rdma::context> ctx;
  bool event_mode;
  bool profile;
  uint64_t busy_ticks = 0;  // --profile: ticks spent in passes that did work
  uint64_t mark_ticks = 0;
  uint64_t mark_busy = 0;

  side(const options& o)
      : engine(o.poll),
        ctx(std::make_unique<rdma::context>(engine, core::device::open(o.device))),
        event_mode(o.poll != core::poll_mode::busy),
        profile(o.profile) {}

  void pump() {
    bool hit;
    if (profile) {
      const uint64_t t0 = ticks();
      hit = engine.progress();
      if (hit) busy_ticks += ticks() - t0;
    } else {
      hit = engine.progress();
    }
    if (!hit && event_mode) engine.wait(std::chrono::milliseconds(100));
  }
  // --profile: percentage of time since the last mark spent doing work; starts a new interval.
  double busy_since_mark() {
    const uint64_t now = ticks();
    const double pct =
        now == mark_ticks ? 0.0 : 100.0 * double(busy_ticks - mark_busy) / double(now - mark_ticks);
    mark_ticks = now;
    mark_busy = busy_ticks;
    return pct;
  }
  template <typename Done>
  void pump_until(Done&& done, const char* what, std::chrono::seconds timeout) {
    auto deadline = clock_type::now() + timeout;
    uint32_t n = 0;
    while (!done()) {
      pump();
      if ((++n & 1023) == 0 && clock_type::now() > deadline) die(std::string("stuck: ") + what);
      if (ctx->state() != core::context_state::running)
        die(std::string("context left running during ") + what);
    }
  }

  // Connects through DIR: writes <me>.conn, reads <peer>.conn.
  void connect(const fs::path& dir, const std::string& me, const std::string& peer) {
    if (ctx->start() != status::success) die("start failed");
    bench::write_blob(dir / (me + ".conn"), ctx->export_connection());
    ctx->connect(bench::wait_blob(dir / (peer + ".conn"), std::chrono::seconds(30)));
  }
};

// ---------------------------------------------------------------------------------------------

int server(const options& o) {
  const fs::path dir = o.dir;
  region mem(region_size);
  region messages(size_t(server_receives) * receive_slot);
  region pong(message_size);
  std::memset(pong.data, 'p', message_size);
  auto map = core::memory_map::wrap(mem.data, region_size,
                                    core::access::local_read_write | core::rdma_all);
  auto message_map = core::memory_map::wrap(messages.data, size_t(server_receives) * receive_slot,
                                            core::access::local_read_write);
  auto pong_map = core::memory_map::wrap(pong.data, message_size, core::access::local_read_write);
  core::buffer_inventory inventory(server_receives + 1);
  core::buffer* pong_buffer = nullptr;
  if (inventory.get_by_data(*pong_map, pong.data, message_size, pong_buffer) != status::success)
    die("pong buffer");

  side s(o);
  bool quit = false;
  uint64_t send_errors = 0;
  s.ctx->configure<rdma::send_task>(
      64, [](rdma::send_task& t) { t.free(); },
      [&](rdma::send_task& t) {
        ++send_errors;
        t.free();
      });
  s.ctx->configure<rdma::receive_task>(
      server_receives,
      [&](rdma::receive_task& r) {
        const char kind = r.received_length() > 0 ? static_cast<char>(r.dst().data()[0]) : 0;
        r.dst().set_data(r.dst().head(), 0);
        if (kind == 'Q') {
          quit = true;
          r.free();
          return;
        }
        if (kind == 'M') {  // --profile mark: the label of the interval that just ended
          const char* label = reinterpret_cast<const char*>(r.dst().head() + 1);
          std::printf("profile side=server interval=%.*s busy_pct=%.1f\n",
                      static_cast<int>(strnlen(label, message_size - 1)), label,
                      s.busy_since_mark());
          std::fflush(stdout);
        }
        if (kind == 'P') {
          rdma::send_task* t = nullptr;
          if (s.ctx->allocate(core::make_user_data(0), t) == status::success) {
            t->set_src(*pong_buffer);
            if (s.ctx->submit(*t) != status::success) t->free();
          } else {
            ++send_errors;
          }
        }
        if (s.ctx->submit(r) != status::success) r.free();
      },
      [](rdma::receive_task& r) { r.free(); });
  s.connect(dir, "server", "client");
  bench::write_blob(dir / "server.mem", map->export_rdma());
  for (uint32_t i = 0; i < server_receives; ++i) {
    core::buffer* b = nullptr;
    rdma::receive_task* r = nullptr;
    if (inventory.get_by_addr(*message_map, messages.data + size_t(i) * receive_slot, receive_slot,
                              b) != status::success ||
        s.ctx->allocate(core::make_user_data(i), r) != status::success)
      die("server setup");
    r->set_dst(*b);
    if (s.ctx->submit(*r) != status::success) die("cannot post a receive");
  }
  bench::write_blob(dir / "server.ready", {});
  while (!quit && s.ctx->state() == core::context_state::running) s.pump();
  s.ctx->stop();
  s.engine.run_until([&] { return s.ctx->state() == core::context_state::idle; },
                     std::chrono::seconds(2));
  if (send_errors != 0)
    std::fprintf(stderr, "rdma_bench server: %llu send errors\n",
                 static_cast<unsigned long long>(send_errors));
  return 0;
}

// ---------------------------------------------------------------------------------------------

struct client_state {
  const options& o;
  side s;
  region mem{region_size};
  std::unique_ptr<core::memory_map> local;
  std::unique_ptr<core::memory_map> remote;
  core::buffer_inventory inventory{1024};
  std::vector<uint32_t> samples;
  clock_type::duration duration;
  clock_type::duration warmup = std::chrono::milliseconds(200);

  // Completion bookkeeping, set by the callbacks.
  uint64_t completed = 0;
  uint64_t errors = 0;
  uint32_t outstanding = 0;
  bool pong_arrived = false;
  bool keep_going = false;  // throughput tests: completions resubmit

  explicit client_state(const options& opts)
      : o(opts),
        s(opts),
        duration(std::chrono::duration_cast<clock_type::duration>(
            std::chrono::duration<double>(opts.seconds))) {
    samples.reserve(max_samples);
    local = core::memory_map::wrap(mem.data, region_size, core::access::local_read_write);
  }

  void print_latency(const char* test, size_t size) {
    if (samples.empty()) die(std::string(test) + ": no samples");
    const bench::latency_stats l = bench::summarize_ns(samples);
    std::printf(
        "result impl=zc dev=%s mode=%s test=%s size=%zu n=%zu median_us=%.3f p99_us=%.3f "
        "errors=%llu\n",
        o.device.c_str(), bench::poll_name(o.poll), test, size, l.n, l.median_us, l.p99_us,
        static_cast<unsigned long long>(errors));
    std::fflush(stdout);
    mark(std::string(test) + "/" + std::to_string(size));
  }
  void print_rate(const char* test, size_t size, uint64_t ops, double seconds) {
    std::printf(
        "result impl=zc dev=%s mode=%s test=%s size=%zu n=%llu ops_s=%.0f mb_s=%.1f errors=%llu\n",
        o.device.c_str(), bench::poll_name(o.poll), test, size,
        static_cast<unsigned long long>(ops), double(ops) / seconds,
        double(ops) * double(size) / seconds / 1e6, static_cast<unsigned long long>(errors));
    std::fflush(stdout);
    mark(std::string(test) + "/" + std::to_string(size));
  }
  void record(clock_type::time_point t0, clock_type::time_point t1, uint32_t divide = 1) {
    if (samples.size() < max_samples)
      samples.push_back(static_cast<uint32_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count() / divide));
  }

  core::buffer* local_buffer(size_t offset, size_t length, bool full) {
    core::buffer* b = nullptr;
    status st = full ? inventory.get_by_data(*local, mem.data + offset, length, b)
                     : inventory.get_by_addr(*local, mem.data + offset, length, b);
    if (st != status::success) die("local buffer");
    return b;
  }
  // A remote read source (full) or write destination (empty: a write appends after its data).
  core::buffer* remote_buffer(size_t offset, size_t length, bool full = true) {
    core::buffer* b = nullptr;
    status st = full ? inventory.get_by_data(*remote, remote->data() + offset, length, b)
                     : inventory.get_by_addr(*remote, remote->data() + offset, length, b);
    if (st != status::success) die("remote buffer");
    return b;
  }

  // Sends the 64-byte message in `src` (its first byte tells the server what to do).
  void send_message(core::buffer& src) {
    rdma::send_task* t = nullptr;
    const auto deadline = clock_type::now() + std::chrono::seconds(10);
    while (s.ctx->allocate(core::make_user_data(0), t) != status::success) {
      if (clock_type::now() > deadline) die("no send task came back");
      s.pump();
    }
    t->set_src(src);
    if (s.ctx->submit(*t) != status::success) die("send submit");
    ++outstanding;
  }

  // --profile: ends a measured interval on both sides (the server prints its busy share when
  // the mark arrives) and prints the client's.
  void mark(const std::string& label) {
    if (!o.profile) return;
    std::printf("profile side=client interval=%s busy_pct=%.1f\n", label.c_str(),
                s.busy_since_mark());
    core::buffer* m = local_buffer(8192, message_size, true);
    std::memset(m->data(), 0, message_size);
    m->data()[0] = 'M';
    std::memcpy(m->data() + 1, label.data(), std::min(label.size(), message_size - 2));
    send_message(*m);
    s.pump_until([&] { return outstanding == 0; }, "mark", std::chrono::seconds(10));
    m->release();
    s.busy_since_mark();
  }

  void configure() {
    s.ctx->configure<rdma::send_task>(
        256,
        [this](rdma::send_task& t) {
          --outstanding;
          ++completed;
          t.free();
        },
        [this](rdma::send_task& t) {
          --outstanding;
          ++errors;
          t.free();
        });
    s.ctx->configure<rdma::receive_task>(
        4, [this](rdma::receive_task&) { pong_arrived = true; },
        [this](rdma::receive_task&) { ++errors; });
    auto resubmit = [this](auto& t) {
      --outstanding;
      ++completed;
      if (!keep_going) return;
      // Reads and writes append after their destination's data: empty it for the next round.
      t.dst().set_data(t.dst().head(), 0);
      if (s.ctx->submit(t) != status::success) die("resubmit");
      ++outstanding;
    };
    auto failed = [this](auto&) {
      --outstanding;
      ++errors;
    };
    s.ctx->configure<rdma::read_task>(64, resubmit, failed);
    s.ctx->configure<rdma::write_task>(64, resubmit, failed);
  }

  void pingpong() {
    core::buffer* ping = local_buffer(0, message_size, true);
    std::memset(ping->data(), 'P', message_size);
    core::buffer* pong = local_buffer(4096, receive_slot, false);
    rdma::receive_task* r = nullptr;
    if (s.ctx->allocate(core::make_user_data(0), r) != status::success) die("receive task");
    r->set_dst(*pong);
    samples.clear();
    errors = 0;
    const auto record_from = clock_type::now() + warmup;
    const auto end = record_from + duration;
    for (;;) {
      if (clock_type::now() >= end) break;
      pong->set_data(pong->head(), 0);
      pong_arrived = false;
      if (s.ctx->submit(*r) != status::success) die("post receive");
      auto t0 = clock_type::now();
      send_message(*ping);
      s.pump_until([&] { return pong_arrived; }, "pingpong", std::chrono::seconds(10));
      auto t1 = clock_type::now();
      if (t0 >= record_from) record(t0, t1, 2);
    }
    s.pump_until([&] { return outstanding == 0; }, "pingpong drain", std::chrono::seconds(10));
    r->free();
    ping->release();
    pong->release();
    print_latency("pingpong", message_size);
  }

  // QD1 sends: submit -> completion (the peer's delivery acknowledgement).
  void send_lat() {
    core::buffer* msg = local_buffer(0, message_size, true);
    std::memset(msg->data(), 'S', message_size);
    samples.clear();
    errors = 0;
    const auto record_from = clock_type::now() + warmup;
    const auto end = record_from + duration;
    for (;;) {
      auto t0 = clock_type::now();
      if (t0 >= end) break;
      send_message(*msg);
      s.pump_until([&] { return outstanding == 0; }, "send_lat", std::chrono::seconds(10));
      auto t1 = clock_type::now();
      if (t0 >= record_from) record(t0, t1);
    }
    msg->release();
    print_latency("send_lat", message_size);
  }

  void msgrate() {
    core::buffer* msg = local_buffer(0, message_size, true);
    std::memset(msg->data(), 'S', message_size);
    errors = 0;
    completed = 0;
    const auto start = clock_type::now();
    const auto record_from = start + warmup;
    const auto end = record_from + duration;
    uint64_t base = 0;
    auto measured_from = clock_type::time_point{};
    for (uint32_t n = 0;; ++n) {
      while (outstanding < o.window) send_message(*msg);
      s.pump();
      if ((n & 63) != 0) continue;
      auto now = clock_type::now();
      if (now >= end) break;
      if (measured_from == clock_type::time_point{} && now >= record_from) {
        measured_from = now;
        base = completed;
      }
    }
    const auto measured_to = clock_type::now();
    const uint64_t ops = completed - base;
    s.pump_until([&] { return outstanding == 0; }, "msgrate drain", std::chrono::seconds(10));
    msg->release();
    print_rate("msgrate", message_size, ops,
               std::chrono::duration<double>(measured_to - measured_from).count());
  }

  template <typename T>
  void latency(const char* test, size_t size) {
    const bool read = std::is_same_v<T, rdma::read_task>;
    core::buffer* l = local_buffer(0, size, !read);
    core::buffer* r = remote_buffer(0, size, read);
    T* t = nullptr;
    if (s.ctx->allocate(core::make_user_data(0), t) != status::success) die("task");
    if constexpr (std::is_same_v<T, rdma::read_task>) {
      t->set(*r, *l);
    } else {
      t->set(*l, *r);
    }
    samples.clear();
    errors = 0;
    keep_going = false;
    const auto record_from = clock_type::now() + warmup;
    const auto end = record_from + duration;
    for (;;) {
      (read ? l : r)->set_data((read ? l : r)->head(), 0);
      const uint64_t before = completed;
      auto t0 = clock_type::now();
      if (t0 >= end) break;
      if (s.ctx->submit(*t) != status::success) die("submit");
      ++outstanding;
      s.pump_until([&] { return completed != before || errors != 0; }, test,
                   std::chrono::seconds(10));
      auto t1 = clock_type::now();
      if (errors != 0) die(std::string(test) + " failed");
      if (t0 >= record_from) record(t0, t1);
    }
    t->free();
    l->release();
    r->release();
    print_latency(test, size);
  }

  template <typename T>
  void throughput(const char* test, size_t size) {
    const bool read = std::is_same_v<T, rdma::read_task>;
    if (size_t(o.qd) * size > region_size) die("queue does not fit the region");
    std::vector<T*> tasks(o.qd);
    std::vector<core::buffer*> buffers;
    errors = 0;
    keep_going = true;
    for (uint32_t i = 0; i < o.qd; ++i) {
      core::buffer* l = local_buffer(size_t(i) * size, size, !read);
      core::buffer* r = remote_buffer(size_t(i) * size, size, read);
      buffers.push_back(l);
      buffers.push_back(r);
      if (s.ctx->allocate(core::make_user_data(i), tasks[i]) != status::success) die("task");
      if constexpr (std::is_same_v<T, rdma::read_task>) {
        tasks[i]->set(*r, *l);
      } else {
        tasks[i]->set(*l, *r);
      }
    }
    const auto start = clock_type::now();
    for (T* t : tasks) {
      if (s.ctx->submit(*t) != status::success) die("submit");
      ++outstanding;
    }
    const auto record_from = start + warmup;
    const auto end = record_from + duration;
    uint64_t base = 0;
    auto measured_from = clock_type::time_point{};
    for (uint32_t n = 0;; ++n) {
      s.pump();
      if (errors != 0) die(std::string(test) + " failed");
      if ((n & 63) != 0) continue;
      auto now = clock_type::now();
      if (now >= end) break;
      if (measured_from == clock_type::time_point{} && now >= record_from) {
        measured_from = now;
        base = completed;
      }
    }
    const auto measured_to = clock_type::now();
    const uint64_t ops = completed - base;
    keep_going = false;
    s.pump_until([&] { return outstanding == 0; }, "drain", std::chrono::seconds(10));
    for (T* t : tasks) t->free();
    for (auto* b : buffers) b->release();
    print_rate(test, size, ops, std::chrono::duration<double>(measured_to - measured_from).count());
  }

  int run() {
    const fs::path dir = o.dir;
    configure();
    s.connect(dir, "client", "server");
    remote = core::memory_map::import_rdma(
        bench::wait_blob(dir / "server.mem", std::chrono::seconds(30)));
    bench::wait_blob(dir / "server.ready", std::chrono::seconds(30));

    // Sanity: a 64 KiB read returns the server's pattern (i % 251).
    {
      core::buffer* l = local_buffer(0, 65536, false);
      core::buffer* r = remote_buffer(4096, 65536);
      rdma::read_task* t = nullptr;
      if (s.ctx->allocate(core::make_user_data(0), t) != status::success) die("task");
      t->set(*r, *l);
      keep_going = false;
      const uint64_t before = completed;
      if (s.ctx->submit(*t) != status::success) die("submit");
      ++outstanding;
      s.pump_until([&] { return completed != before || errors != 0; }, "sanity read",
                   std::chrono::seconds(10));
      if (errors != 0 || l->data_length() != 65536) die("sanity read failed");
      for (size_t i = 0; i < 65536; ++i)
        if (l->data()[i] != static_cast<uint8_t>((4096 + i) % 251))
          die("read returned wrong bytes");
      t->free();
      l->release();
      r->release();
    }

    mark("setup");
    for (const auto& test : o.tests) {
      if (test == "pingpong") {
        pingpong();
      } else if (test == "send_lat") {
        send_lat();
      } else if (test == "msgrate") {
        msgrate();
      } else if (test == "read_lat") {
        for (size_t size : o.sizes) latency<rdma::read_task>("read_lat", size);
      } else if (test == "write_lat") {
        for (size_t size : o.sizes) latency<rdma::write_task>("write_lat", size);
      } else if (test == "read_bw") {
        for (size_t size : o.sizes) throughput<rdma::read_task>("read_bw", size);
      } else if (test == "write_bw") {
        for (size_t size : o.sizes) throughput<rdma::write_task>("write_bw", size);
      } else {
        die("unknown test " + test);
      }
    }

    // Tell the server to finish, then stop.
    mark("end");
    core::buffer* q = local_buffer(0, message_size, true);
    std::memset(q->data(), 'Q', message_size);
    send_message(*q);
    s.pump_until([&] { return outstanding == 0; }, "quit", std::chrono::seconds(10));
    q->release();
    s.ctx->stop();
    s.engine.run_until([&] { return s.ctx->state() == core::context_state::idle; },
                       std::chrono::seconds(2));
    return 0;
  }
};

}  // namespace

int main(int argc, char** argv) {
  options o;
  o.tests = {"pingpong", "msgrate", "read_lat", "write_lat", "read_bw", "write_bw"};
  bench::parse_pair_options(
      argc, argv,
      "usage: %s server|client DIR DEVICE [--poll busy|event] [--cpu N] [--seconds S] "
      "[--tests a,b] [--sizes A,B] [--qd N] [--window N] [--profile 1]\n",
      o, [&o](const std::string& k, const std::string& v) {
        if (k == "--poll") {
          o.poll = bench::parse_poll(v);
        } else if (k == "--profile") {
          o.profile = v == "1" || v == "yes" || v == "y";
        } else {
          return false;
        }
        return true;
      });
  try {
    if (o.cpu >= 0) core::pin_current_thread(static_cast<uint32_t>(o.cpu));
    if (o.role == "server") return server(o);
    if (o.role == "client") {
      auto c = std::make_unique<client_state>(o);
      return c->run();
    }
  } catch (const std::exception& e) {
    die(e.what());
  }
  die("role must be server or client");
}
