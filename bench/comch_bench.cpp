// comch fast path between two processes: producer->consumer message rate and one-way latency of
// 64-byte messages, in busy and event poll modes, beside a bare shared-memory SPSC ring measured in
// the same run. The parent measures; a child (this program again, --role child) produces for the
// rate runs and echoes for the latency runs. Parent and child are pinned to two cpus.
//
//   zc_comch_bench [--messages N] [--pings N] [--event-pings N] [--repeat R] [--cpus A,B]
//                  [--only LIST]
//
// Rate: the child sends N messages as fast as the consumer takes them; the parent counts from the
// first to the last arrival. Latency: the parent sends one message, the child writes its send time
// into it and sends it back; one-way = arrival time - the child's send time (both read the same
// CLOCK_MONOTONIC), and RTT/2 is shown beside it.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "comch/client.hpp"
#include "comch/consumer.hpp"
#include "comch/internal/unix_socket.hpp"
#include "comch/producer.hpp"
#include "comch/server.hpp"
#include "common.hpp"
#include "core/buffer.hpp"
#include "core/log.hpp"
#include "core/memory_map.hpp"
#include "core/progress_engine.hpp"
#include "core/thread.hpp"

namespace {

using namespace zc;
using bench::die;
using core::context_state;
using clock_type = std::chrono::steady_clock;

constexpr size_t message_size = 64;
constexpr uint32_t queue_depth = 256;  // posted buffers / ring slots
constexpr uint8_t stop_marker = 0xFF;
constexpr auto setup_timeout = std::chrono::seconds(20);
constexpr auto run_timeout = std::chrono::seconds(120);

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now().time_since_epoch())
          .count());
}

// Message layout: u8 kind (0 data, 0xFF stop), u64 sequence or send time at 8, u64 echo time at 16.
void put_u64(uint8_t* m, size_t at, uint64_t v) {
  std::memcpy(m + at, &v, sizeof(v));
}
uint64_t get_u64(const uint8_t* m, size_t at) {
  uint64_t v;
  std::memcpy(&v, m + at, sizeof(v));
  return v;
}

struct options {
  uint64_t messages = 2'000'000;
  uint64_t pings = 100'000;
  uint64_t event_pings = 5'000;
  int repeat = 7;  // interleaved rounds; the table shows medians
  int cpu_parent = 0;
  int cpu_child = 1;
  std::vector<std::string> only;
  // child side
  std::string role = "parent";
  std::string phase;
  std::string channel;
  int ring_fd = -1, bell_to_parent = -1, bell_to_child = -1;
};

struct result {
  std::string path, mode;
  double rate_mps = 0;
  double one_way_p50_us = 0, one_way_p99_us = 0, half_rtt_p50_us = 0;
};

// Each figure is the median of the runs' figures (a shared VM makes single runs noisy).
result median_of(const std::vector<result>& runs) {
  auto median = [&](double result::*field) {
    std::vector<double> v;
    for (const auto& r : runs) v.push_back(r.*field);
    return bench::median(std::move(v));
  };
  result m = runs.front();
  m.rate_mps = median(&result::rate_mps);
  m.one_way_p50_us = median(&result::one_way_p50_us);
  m.one_way_p99_us = median(&result::one_way_p99_us);
  m.half_rtt_p50_us = median(&result::half_rtt_p50_us);
  return m;
}

// ---------------------------------------------------------------------------------------------
// The baseline: a bare SPSC ring of 64-byte slots in shared memory (Lamport, with cached
// indices), optionally with an eventfd doorbell for a sleeping consumer.

struct alignas(64) ring_header {
  std::atomic<uint64_t> tail;              // producer
  alignas(64) std::atomic<uint64_t> head;  // consumer
  alignas(64) std::atomic<uint32_t> consumer_sleeping;
};
struct ring {
  ring_header h;
  alignas(64) uint8_t slots[queue_depth][message_size];
};
struct ring_pair {
  ring to_parent;
  ring to_child;
};

class ring_producer {
 public:
  ring_producer(ring& r, int bell, bool event) : r_(r), bell_(bell), event_(event) {}
  bool push(const uint8_t* m) {
    if (tail_ - cached_head_ == queue_depth) {
      cached_head_ = r_.h.head.load(std::memory_order_acquire);
      if (tail_ - cached_head_ == queue_depth) return false;
    }
    std::memcpy(r_.slots[tail_ % queue_depth], m, message_size);
    r_.h.tail.store(++tail_, std::memory_order_release);
    if (event_) {
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (r_.h.consumer_sleeping.load(std::memory_order_relaxed) != 0 &&
          r_.h.consumer_sleeping.exchange(0) != 0)
        comch::internal::ring(bell_);
    }
    return true;
  }
  void push_blocking(const uint8_t* m) {
    while (!push(m)) sched_yield();  // full: the consumer is draining, give it the cpu
  }

 private:
  ring& r_;
  int bell_;
  bool event_;
  uint64_t tail_ = 0, cached_head_ = 0;
};

class ring_consumer {
 public:
  ring_consumer(ring& r, int bell, bool event) : r_(r), bell_(bell), event_(event) {}
  bool pop(uint8_t* out) {
    if (head_ == cached_tail_) {
      cached_tail_ = r_.h.tail.load(std::memory_order_acquire);
      if (head_ == cached_tail_) return false;
    }
    std::memcpy(out, r_.slots[head_ % queue_depth], message_size);
    r_.h.head.store(++head_, std::memory_order_release);
    return true;
  }
  void pop_blocking(uint8_t* out) {
    while (!pop(out)) {
      if (!event_) continue;
      r_.h.consumer_sleeping.store(1, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (r_.h.tail.load(std::memory_order_acquire) == head_) {
        pollfd p{bell_, POLLIN, 0};
        ::poll(&p, 1, 1000);
        comch::internal::drain(bell_);
      }
      r_.h.consumer_sleeping.store(0, std::memory_order_relaxed);
    }
  }

 private:
  ring& r_;
  int bell_;
  bool event_;
  uint64_t head_ = 0, cached_tail_ = 0;
};

void ring_child(const options& o) {
  auto* pair = static_cast<ring_pair*>(
      mmap(nullptr, sizeof(ring_pair), PROT_READ | PROT_WRITE, MAP_SHARED, o.ring_fd, 0));
  if (pair == MAP_FAILED) die("child: mmap of the ring failed");
  const bool event = o.phase == "ring-event";
  ring_producer out(pair->to_parent, o.bell_to_parent, event);
  ring_consumer in(pair->to_child, o.bell_to_child, event);
  uint8_t m[message_size] = {};
  for (uint64_t i = 0; i < o.messages; ++i) {
    put_u64(m, 8, i);
    out.push_blocking(m);
  }
  for (;;) {  // echo until the stop marker
    in.pop_blocking(m);
    if (m[0] == stop_marker) break;
    put_u64(m, 16, now_ns());
    out.push_blocking(m);
  }
}

// ---------------------------------------------------------------------------------------------
// comch: a server (parent) and a client (child), each with a consumer and a producer on a worker
// engine in the measured poll mode; the control engines only set things up.

struct fast_path_end {
  fast_path_end(core::progress_engine& worker, comch::connection& conn,
                std::function<void(comch::consumer_post_recv_task&)> on_recv)
      : rx_mem(core::memory_map::allocate(
            queue_depth * message_size,
            core::access::local_read_write | core::access::pci_read_write)),
        tx_mem(
            core::memory_map::allocate(queue_depth * message_size, core::access::local_read_write)),
        inventory(2 * queue_depth),
        rx(worker, conn,
           {.buffers = rx_mem.get(),
            .post_recv_tasks = queue_depth,
            .on_recv = std::move(on_recv)}),
        tx(worker, conn,
           {.send_tasks = queue_depth,
            .on_send_done = [this](comch::producer_send_task& t) { sent(t); },
            .on_send_error = [](comch::producer_send_task&) { die("producer send failed"); }}) {
    rx.start();
    tx.start();
    for (uint32_t i = 0; i < queue_depth; ++i) {
      core::buffer* b = nullptr;
      inventory.get_by_addr(*rx_mem, rx_mem->data() + i * message_size, message_size, b);
      if (rx.submit(*rx.allocate_post_recv(*b)) != status::success) die("post receive failed");
      core::buffer* s = nullptr;
      inventory.get_by_addr(*tx_mem, tx_mem->data() + i * message_size, message_size, s);
      s->set_data(s->head(), message_size);
      free_tx.push_back(s);
    }
  }
  // A send buffer to fill, or nullptr while all are in flight.
  core::buffer* take() {
    if (free_tx.empty()) return nullptr;
    core::buffer* b = free_tx.back();
    free_tx.pop_back();
    return b;
  }
  // Sends `b` (a send buffer, or a received one when `repost` is set) to `consumer_id`; waits
  // on `worker` while the consumer has no free buffer.
  void send(core::progress_engine& worker, core::buffer& b, uint32_t consumer_id,
            comch::consumer_post_recv_task* repost = nullptr) {
    comch::producer_send_task* t = nullptr;
    while ((t = tx.allocate_send(b, consumer_id)) == nullptr) step(worker);
    t->set_user_data(core::make_user_data(repost));
    status s;
    while ((s = tx.submit(*t)) == status::again) step(worker);
    if (s != status::success) die("producer submit: " + std::string(status_name(s)));
  }
  void repost(comch::consumer_post_recv_task& r) {
    r.buf().set_data(r.buf().head(), 0);
    if (rx.state() == context_state::running && rx.submit(r) != status::success)
      die("re-post failed");
  }
  static void step(core::progress_engine& worker) {
    if (!worker.progress()) worker.wait(std::chrono::milliseconds(100));
  }
  void sent(comch::producer_send_task& t) {
    if (auto* r = static_cast<comch::consumer_post_recv_task*>(t.get_user_data().ptr)) {
      repost(*r);
    } else {
      free_tx.push_back(&t.buf());
    }
    t.free();
  }
  void stop(core::progress_engine& worker) {
    rx.stop();
    tx.stop();
    worker.run_until(
        [&] { return rx.state() == context_state::idle && tx.state() == context_state::idle; },
        setup_timeout);
  }

  std::unique_ptr<core::memory_map> rx_mem, tx_mem;
  core::buffer_inventory inventory;
  comch::consumer rx;
  comch::producer tx;
  std::vector<core::buffer*> free_tx;
};

core::poll_mode mode_of(const std::string& phase) {
  return phase.ends_with("busy") ? core::poll_mode::busy : core::poll_mode::event;
}

void comch_child(const options& o) {
  core::progress_engine control(core::poll_mode::event), worker(mode_of(o.phase));
  bool go = false;
  uint32_t parent_consumer = 0;
  comch::client cli(
      control,
      {.name = o.channel,
       .events = {
           .on_message = [&](comch::connection&, std::span<const uint8_t>) { go = true; },
           .on_consumer_new = [&](comch::connection&, uint32_t id) { parent_consumer = id; }},
       .connect_timeout = setup_timeout});
  cli.start();
  if (!control.run_until([&] { return cli.state() == context_state::running; }, setup_timeout))
    die("child: no connection");
  std::deque<comch::consumer_post_recv_task*> received;
  bool stop = false;
  fast_path_end end(worker, *cli.get_connection(), [&](comch::consumer_post_recv_task& t) {
    if (t.buf().data()[0] == stop_marker) {
      stop = true;
    } else {
      received.push_back(&t);
    }
  });
  // The parent says go once it has seen our consumer (so our announcement went out).
  if (!control.run_until([&] { return go && parent_consumer != 0; }, setup_timeout))
    die("child: parent not ready");

  for (uint64_t i = 0; i < o.messages; ++i) {
    core::buffer* b;
    while ((b = end.take()) == nullptr) fast_path_end::step(worker);
    put_u64(b->data(), 8, i);
    end.send(worker, *b, parent_consumer);
  }
  while (!stop) {  // echo
    if (received.empty()) {
      fast_path_end::step(worker);
      continue;
    }
    comch::consumer_post_recv_task* r = received.front();
    received.pop_front();
    put_u64(r->buf().data(), 16, now_ns());
    end.send(worker, r->buf(), parent_consumer, r);
  }
  end.stop(worker);
  cli.stop();
  control.run_until([&] { return cli.state() == context_state::idle; }, setup_timeout);
}

// ---------------------------------------------------------------------------------------------
// Parent side.

pid_t spawn_child(const options& o, const std::string& phase,
                  const std::vector<std::string>& extra) {
  std::vector<std::string> args = {
      "/proc/self/exe",
      "--role",
      "child",
      "--phase",
      phase,
      "--messages",
      std::to_string(o.messages),
      "--cpus",
      std::to_string(o.cpu_parent) + "," + std::to_string(o.cpu_child)};
  args.insert(args.end(), extra.begin(), extra.end());
  pid_t pid = fork();
  if (pid < 0) die("fork failed");
  if (pid == 0) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  return pid;
}

void reap(pid_t pid) {
  int st = 0;
  for (int i = 0; i < 2000; ++i) {
    if (waitpid(pid, &st, WNOHANG) == pid) {
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) die("child failed");
      return;
    }
    usleep(5000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  die("child did not exit");
}

result ring_parent(const options& o, const std::string& phase) {
  const bool event = phase == "ring-event";
  int fd = memfd_create("zc-comch-bench-ring", 0);  // inherited by the child
  if (fd < 0 || ftruncate(fd, sizeof(ring_pair)) != 0) die("memfd");
  auto* pair = static_cast<ring_pair*>(
      mmap(nullptr, sizeof(ring_pair), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  if (pair == MAP_FAILED) die("mmap");
  new (pair) ring_pair{};
  int to_parent = eventfd(0, EFD_NONBLOCK), to_child = eventfd(0, EFD_NONBLOCK);
  pid_t child =
      spawn_child(o, phase,
                  {"--ring-fd", std::to_string(fd), "--bell-to-parent", std::to_string(to_parent),
                   "--bell-to-child", std::to_string(to_child)});
  ring_consumer in(pair->to_parent, to_parent, event);
  ring_producer out(pair->to_child, to_child, event);
  uint8_t m[message_size] = {};

  uint64_t first = 0, last = 0;
  for (uint64_t i = 0; i < o.messages; ++i) {
    in.pop_blocking(m);
    if (get_u64(m, 8) != i) die("ring: out of order");
    // Only the first and last arrivals are timed: a clock read per message would cost more
    // than the message (kvm-clock in these VMs).
    if (i == 0) first = now_ns();
  }
  last = now_ns();
  result r{"bare SPSC ring" + std::string(event ? " + eventfd" : ""), event ? "event" : "busy"};
  r.rate_mps = static_cast<double>(o.messages - 1) / (static_cast<double>(last - first) / 1e3);

  const uint64_t pings = event ? o.event_pings : o.pings;
  std::vector<uint64_t> one_way, rtt;
  one_way.reserve(pings);
  rtt.reserve(pings);
  for (uint64_t i = 0; i < pings; ++i) {
    std::memset(m, 0, sizeof(m));
    const uint64_t t0 = now_ns();
    put_u64(m, 8, t0);
    out.push_blocking(m);
    in.pop_blocking(m);
    const uint64_t t2 = now_ns();
    one_way.push_back(t2 - get_u64(m, 16));
    rtt.push_back((t2 - t0) / 2);
  }
  m[0] = stop_marker;
  out.push_blocking(m);
  reap(child);
  const bench::latency_stats one_way_stats = bench::summarize_ns(one_way);
  r.one_way_p50_us = one_way_stats.median_us;
  r.one_way_p99_us = one_way_stats.p99_us;
  r.half_rtt_p50_us = bench::summarize_ns(rtt).median_us;
  munmap(pair, sizeof(ring_pair));
  close(fd);
  close(to_parent);
  close(to_child);
  return r;
}

result comch_parent(const options& o, const std::string& phase) {
  const std::string channel = "zc-comch-bench-" + std::to_string(getpid()) + "-" + phase;
  core::progress_engine control(core::poll_mode::event), worker(mode_of(phase));
  comch::connection* conn = nullptr;
  uint32_t child_consumer = 0;
  comch::server srv(
      control,
      {.name = channel,
       .on_send_done = [](comch::send_task& t) { t.free(); },
       .events = {.on_consumer_new = [&](comch::connection&, uint32_t id) { child_consumer = id; }},
       .on_connect = [&](comch::connection& c) { conn = &c; }});
  srv.start();
  pid_t child = spawn_child(o, phase, {"--channel", channel});
  if (!control.run_until([&] { return conn != nullptr; }, setup_timeout)) die("no child");

  uint64_t received = 0, first = 0, last = 0;
  bool out_of_order = false;
  std::optional<uint64_t> echo_sent_at;
  uint64_t echo_arrival = 0;
  fast_path_end* self = nullptr;
  fast_path_end end(worker, *conn, [&](comch::consumer_post_recv_task& t) {
    if (received < o.messages) {
      if (get_u64(t.buf().data(), 8) != received) out_of_order = true;
      // First and last arrivals only, as for the ring.
      if (received == 0) first = now_ns();
      if (received == o.messages - 1) last = now_ns();
      ++received;
    } else {
      echo_arrival = now_ns();
      echo_sent_at = get_u64(t.buf().data(), 16);
    }
    self->repost(t);
  });
  self = &end;
  if (!control.run_until([&] { return child_consumer != 0; }, setup_timeout)) die("no consumer");
  static const uint8_t go[] = {'g', 'o'};
  srv.submit(*srv.allocate_send(*conn, go));

  if (!worker.run_until([&] { return received == o.messages; }, run_timeout))
    die("rate run stalled");
  if (out_of_order) die("comch: out of order");
  result r{"comch producer -> consumer", phase.ends_with("busy") ? "busy" : "event"};
  r.rate_mps = static_cast<double>(o.messages - 1) / (static_cast<double>(last - first) / 1e3);

  const uint64_t pings = phase.ends_with("busy") ? o.pings : o.event_pings;
  std::vector<uint64_t> one_way, rtt;
  one_way.reserve(pings);
  rtt.reserve(pings);
  for (uint64_t i = 0; i < pings; ++i) {
    core::buffer* b;
    while ((b = end.take()) == nullptr) fast_path_end::step(worker);
    std::memset(b->data(), 0, message_size);
    echo_sent_at.reset();
    const uint64_t t0 = now_ns();
    end.send(worker, *b, child_consumer);
    if (!worker.run_until([&] { return echo_sent_at.has_value(); }, run_timeout))
      die("latency run stalled");
    one_way.push_back(echo_arrival - *echo_sent_at);
    rtt.push_back((echo_arrival - t0) / 2);
  }
  core::buffer* b;
  while ((b = end.take()) == nullptr) fast_path_end::step(worker);
  b->data()[0] = stop_marker;
  end.send(worker, *b, child_consumer);
  worker.run_until([] { return false; }, std::chrono::milliseconds(1));  // complete the send
  reap(child);
  end.stop(worker);
  srv.stop();
  control.run_until([&] { return srv.state() == context_state::idle; }, setup_timeout);
  const bench::latency_stats one_way_stats = bench::summarize_ns(one_way);
  r.one_way_p50_us = one_way_stats.median_us;
  r.one_way_p99_us = one_way_stats.p99_us;
  r.half_rtt_p50_us = bench::summarize_ns(rtt).median_us;
  return r;
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "comch_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--messages") {
      o.messages = std::stoull(next());
    } else if (a == "--pings") {
      o.pings = std::stoull(next());
    } else if (a == "--event-pings") {
      o.event_pings = std::stoull(next());
    } else if (a == "--repeat") {
      o.repeat = std::stoi(next());
    } else if (a == "--cpus") {
      std::string v = next();
      auto comma = v.find(',');
      if (comma == std::string::npos) {
        std::fprintf(stderr, "comch_bench: --cpus wants A,B\n");
        std::exit(2);
      }
      o.cpu_parent = std::stoi(v.substr(0, comma));
      o.cpu_child = std::stoi(v.substr(comma + 1));
    } else if (a == "--only") {
      std::string v = next();
      for (size_t at = 0; at <= v.size();) {
        size_t end = v.find(',', at);
        if (end == std::string::npos) end = v.size();
        o.only.push_back(v.substr(at, end - at));
        at = end + 1;
      }
    } else if (a == "--role") {
      o.role = next();
    } else if (a == "--phase") {
      o.phase = next();
    } else if (a == "--channel") {
      o.channel = next();
    } else if (a == "--ring-fd") {
      o.ring_fd = std::stoi(next());
    } else if (a == "--bell-to-parent") {
      o.bell_to_parent = std::stoi(next());
    } else if (a == "--bell-to-child") {
      o.bell_to_child = std::stoi(next());
    } else if (a == "-h" || a == "--help") {
      std::printf(
          "usage: zc_comch_bench [--messages N] [--pings N] [--event-pings N] [--repeat R]\n"
          "                      [--cpus A,B] [--only "
          "ring-busy,ring-event,comch-busy,comch-event]\n");
      std::exit(0);
    } else {
      std::fprintf(stderr, "comch_bench: unknown flag %s\n", a.c_str());
      std::exit(2);
    }
  }
  if (o.messages < 2 || o.pings == 0 || o.event_pings == 0 || o.repeat < 1) {
    std::fprintf(stderr,
                 "comch_bench: --messages must be at least 2, pings and repeat at least 1\n");
    std::exit(2);
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  options o = parse(argc, argv);
  zc::log::set_level(zc::log::source::sdk, zc::log::level::error);
  try {
    if (o.role == "child") {
      core::pin_current_thread(static_cast<uint32_t>(o.cpu_child));
      if (o.phase.starts_with("ring")) {
        ring_child(o);
      } else {
        comch_child(o);
      }
      return 0;
    }
    core::pin_current_thread(static_cast<uint32_t>(o.cpu_parent));
    const std::vector<std::string> phases = {"ring-busy", "ring-event", "comch-busy",
                                             "comch-event"};
    // Phases interleave within each round: the two vCPUs of these VMs move between host cores
    // (cross-core latency changes threefold from minute to minute), so only figures taken close
    // together compare.
    std::map<std::string, std::vector<result>> runs;
    std::vector<double> busy_ratio;
    for (int i = 0; i < o.repeat; ++i) {
      for (const auto& phase : phases) {
        if (!o.only.empty() && std::find(o.only.begin(), o.only.end(), phase) == o.only.end())
          continue;
        runs[phase].push_back(phase.starts_with("ring") ? ring_parent(o, phase)
                                                        : comch_parent(o, phase));
      }
      if (runs.count("ring-busy") && runs.count("comch-busy"))
        busy_ratio.push_back(runs["comch-busy"].back().rate_mps /
                             runs["ring-busy"].back().rate_mps);
    }
    std::map<std::string, result> results;
    for (auto& [phase, r] : runs) results[phase] = median_of(r);
    std::printf(
        "%zu-byte messages; rate: %llu messages; latency: %llu pings busy, %llu event; "
        "parent on cpu %d, child on cpu %d; median of %d interleaved rounds\n\n",
        message_size, static_cast<unsigned long long>(o.messages),
        static_cast<unsigned long long>(o.pings), static_cast<unsigned long long>(o.event_pings),
        o.cpu_parent, o.cpu_child, o.repeat);
    std::printf(
        "| path | poll mode | rate (M msg/s) | one-way p50 (us) | one-way p99 (us) | RTT/2 p50 "
        "(us) |\n");
    std::printf("|---|---|---|---|---|---|\n");
    for (const auto& phase : phases) {
      auto it = results.find(phase);
      if (it == results.end()) continue;
      const result& r = it->second;
      std::printf("| %s | %s | %.2f | %.2f | %.2f | %.2f |\n", r.path.c_str(), r.mode.c_str(),
                  r.rate_mps, r.one_way_p50_us, r.one_way_p99_us, r.half_rtt_p50_us);
    }
    if (!busy_ratio.empty()) {
      std::sort(busy_ratio.begin(), busy_ratio.end());
      std::printf(
          "\ncomch busy rate / bare ring busy rate, per round: median %.0f%% (min %.0f%%, "
          "max %.0f%%)\n",
          100.0 * bench::median(busy_ratio), 100.0 * busy_ratio.front(), 100.0 * busy_ratio.back());
    }
    return 0;
  } catch (const std::exception& e) {
    die(e.what());
  }
}
