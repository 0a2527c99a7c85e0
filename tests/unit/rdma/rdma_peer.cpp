// Peer program for the cross-process rdma tests: `zc_rdma_rdma_peer DEVICE DIR [stop-on-receive]`.
// Exports 1 MiB of memory (guard bytes around it), a sync event, and an rdma context whose posted
// receives echo every message back; writes its blobs to DIR/peer.conn, DIR/peer.mem and
// DIR/peer.event, connects to
// DIR/test.conn, serves until SIGTERM or until the connection ends, then says whether the guard
// bytes are intact. With stop-on-receive, the first message received stops the context at once,
// from its receive callback (before the pass that delivered it has ended).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string_view>
#include <thread>
#include <vector>

#include "core/buffer.hpp"
#include "core/log.hpp"
#include "core/memory_map.hpp"
#include "core/sync_event.hpp"
#include "core/thread.hpp"
#include "rdma/context.hpp"

namespace {

constexpr size_t region_size = 1024 * 1024;
constexpr size_t guard_size = 4096;
constexpr uint32_t receives = 16;

void write_file(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  auto tmp = path;
  tmp += ".tmp";
  std::ofstream(tmp, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  std::filesystem::rename(tmp, path);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace zc;
  if (argc != 3 && !(argc == 4 && std::string_view(argv[3]) == "stop-on-receive")) {
    std::fprintf(stderr, "usage: %s DEVICE DIR [stop-on-receive]\n", argv[0]);
    return 2;
  }
  const bool stop_on_receive = argc == 4;
  const std::filesystem::path dir = argv[2];
  core::install_stop_signal_handlers();
  std::vector<uint8_t> backing(region_size + 2 * guard_size, 0xEE);
  uint8_t* region = backing.data() + guard_size;
  for (size_t i = 0; i < region_size; ++i) region[i] = static_cast<uint8_t>(i % 251);

  core::progress_engine engine(core::poll_mode::event);
  auto map =
      core::memory_map::wrap(region, region_size, core::access::local_read_write | core::rdma_all);
  std::vector<uint8_t> messages(receives * 65536);
  auto message_map =
      core::memory_map::wrap(messages.data(), messages.size(), core::access::local_read_write);
  core::buffer_inventory inventory(receives);
  rdma::context ctx(engine, core::device::open(argv[1]));

  // Echo: a received message goes back as a send of the same buffer; when that send is done the
  // buffer is posted again.
  ctx.configure<rdma::send_task>(
      receives,
      [&](rdma::send_task& t) {
        auto* r = static_cast<rdma::receive_task*>(t.get_user_data().ptr);
        r->dst().set_data(r->dst().head(), 0);
        t.free();
        if (ctx.submit(*r) != status::success) r->free();
      },
      [&](rdma::send_task& t) { t.free(); });
  ctx.configure<rdma::receive_task>(
      receives,
      [&](rdma::receive_task& r) {
        if (stop_on_receive) {
          std::printf("peer: received %zu bytes, stopping\n", r.received_length());
          std::fflush(stdout);
          r.free();
          ctx.stop();
          return;
        }
        rdma::send_task* s = nullptr;
        if (ctx.allocate(core::make_user_data(&r), s) != status::success) return;
        s->set_src(r.dst());
        if (ctx.submit(*s) != status::success) s->free();
      },
      [](rdma::receive_task& r) { r.free(); });
  ctx.start();
  write_file(dir / "peer.conn", ctx.export_connection());
  core::sync_event event(0);
  write_file(dir / "peer.event", event.export_remote());
  write_file(dir / "peer.mem", map->export_rdma());

  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!std::filesystem::exists(dir / "test.conn")) {
    if (std::chrono::steady_clock::now() > deadline || core::stop_requested()) {
      std::printf("peer: no test connection arrived\n");
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::ifstream in(dir / "test.conn", std::ios::binary);
  std::vector<uint8_t> blob((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ctx.connect(blob);
  for (uint32_t i = 0; i < receives; ++i) {
    rdma::receive_task* r = nullptr;
    core::buffer* b = nullptr;
    if (inventory.get_by_addr(*message_map, messages.data() + i * 65536, 65536, b) !=
            status::success ||
        ctx.allocate(core::make_user_data(i), r) != status::success) {
      std::printf("peer: cannot post receive %u\n", i);
      return 1;
    }
    r->set_dst(*b);
    if (ctx.submit(*r) != status::success) {
      std::printf("peer: cannot submit receive %u\n", i);
      return 1;
    }
  }
  std::printf("peer: connected\n");
  std::fflush(stdout);
  while (!core::stop_requested() && ctx.state() == core::context_state::running) {
    if (!engine.progress()) engine.wait(std::chrono::milliseconds(100));
  }
  bool intact = true;
  for (size_t i = 0; i < guard_size; ++i)
    intact &= backing[i] == 0xEE && backing[backing.size() - 1 - i] == 0xEE;
  std::printf("peer: guards %s\n", intact ? "intact" : "damaged");
  ctx.stop();
  engine.run_until([&] { return ctx.state() == core::context_state::idle; },
                   std::chrono::seconds(2));
  return intact ? 0 : 1;
}
