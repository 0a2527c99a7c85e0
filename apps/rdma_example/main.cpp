// zcstore_rdma_example: two processes meet through descriptor files (as the DOCA RDMA samples
// do) and exercise the rdma layer: the requester writes into the responder's exported memory,
// reads it back, and sends it a message. Both print what happened.
//
//   zcstore_rdma_example responder --dir /tmp/x &
//   zcstore_rdma_example requester --dir /tmp/x
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "core/buffer.hpp"
#include "core/cli.hpp"
#include "core/log.hpp"
#include "core/memory_map.hpp"
#include "core/thread.hpp"
#include "rdma/context.hpp"

namespace {

using namespace zc;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr size_t region_size = 4096;
constexpr auto wait_limit = 20s;

void write_file(const fs::path& path, const std::vector<uint8_t>& bytes) {
  fs::path tmp = path;
  tmp += ".tmp";
  std::ofstream(tmp, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  fs::rename(tmp, path);
}

std::vector<uint8_t> wait_for_file(const fs::path& path) {
  auto deadline = std::chrono::steady_clock::now() + wait_limit;
  while (!fs::exists(path)) {
    if (std::chrono::steady_clock::now() > deadline || core::stop_requested())
      throw status_error(status::time_out, "timed out waiting for " + path.string());
    std::this_thread::sleep_for(10ms);
  }
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs the engine until `done` or the wait limit; throws on timeout.
template <typename Done>
void run(core::progress_engine& engine, Done done, const char* what) {
  if (!engine.run_until(done, std::chrono::duration_cast<std::chrono::milliseconds>(wait_limit)))
    throw status_error(status::time_out, std::string("timed out waiting for ") + what);
}

int responder(core::progress_engine& engine, const core::device& device, const fs::path& dir) {
  std::vector<uint8_t> memory(region_size, 0);
  std::vector<uint8_t> inbox(256, 0);
  auto exported = core::memory_map::wrap(memory.data(), memory.size(),
                                         core::access::local_read_write | core::rdma_all);
  auto inbox_map =
      core::memory_map::wrap(inbox.data(), inbox.size(), core::access::local_read_write);
  core::buffer_inventory inventory(4);
  rdma::context ctx(engine, device);
  bool received = false;
  status result = status::success;
  ctx.configure<rdma::receive_task>(
      1, [&](rdma::receive_task&) { received = true; },
      [&](rdma::receive_task& t) {
        received = true;
        result = t.result();
      });
  ctx.start();
  write_file(dir / "responder.conn", ctx.export_connection());
  write_file(dir / "responder.mem", exported->export_rdma());
  std::printf(
      "responder: exported %zu bytes of memory and its connection; waiting for the requester\n",
      region_size);
  ctx.connect(wait_for_file(dir / "requester.conn"));
  rdma::receive_task* recv = nullptr;
  core::buffer* buf = nullptr;
  throw_if_failed(inventory.get_by_addr(*inbox_map, inbox.data(), inbox.size(), buf), "inbox");
  throw_if_failed(ctx.allocate(core::make_user_data(0), recv), "allocate receive");
  recv->set_dst(*buf);
  throw_if_failed(ctx.submit(*recv), "post receive");
  std::printf("responder: connected, receive posted\n");
  run(
      engine, [&] { return received; }, "the requester's message");
  throw_if_failed(result, "receive failed");
  std::printf("responder: received %zu-byte message: \"%.*s\"\n", recv->received_length(),
              static_cast<int>(recv->received_length()), reinterpret_cast<char*>(inbox.data()));
  std::printf("responder: my memory now starts with: \"%s\"\n",
              reinterpret_cast<char*>(memory.data()));
  run(
      engine, [&] { return ctx.state() != core::context_state::running; },
      "the requester to leave");
  std::printf("responder: requester disconnected; done\n");
  recv->free();
  return 0;
}

int requester(core::progress_engine& engine, const core::device& device, const fs::path& dir) {
  std::vector<uint8_t> memory(region_size, 0);
  auto local = core::memory_map::wrap(memory.data(), memory.size(), core::access::local_read_write);
  core::buffer_inventory inventory(8);
  rdma::context ctx(engine, device);
  int completed = 0;
  status result = status::success;
  auto ok_cb = [&](auto&) { ++completed; };
  auto err_cb = [&](auto& t) {
    ++completed;
    result = t.result();
  };
  ctx.configure<rdma::write_task>(1, ok_cb, err_cb);
  ctx.configure<rdma::read_task>(1, ok_cb, err_cb);
  ctx.configure<rdma::send_task>(1, ok_cb, err_cb);
  ctx.start();
  auto responder_conn = wait_for_file(dir / "responder.conn");
  auto remote = core::memory_map::import_rdma(wait_for_file(dir / "responder.mem"));
  write_file(dir / "requester.conn", ctx.export_connection());
  ctx.connect(responder_conn);
  std::printf("requester: connected to the responder (device %s)\n", device.spec().c_str());

  const std::string text = "zero copies were harmed in the making of this message";
  std::memcpy(memory.data(), text.c_str(), text.size() + 1);
  core::buffer *src = nullptr, *dst = nullptr, *back = nullptr;
  throw_if_failed(inventory.get_by_data(*local, memory.data(), text.size() + 1, src), "source");
  // A write appends after the destination's data section: start with an empty one.
  throw_if_failed(inventory.get_by_addr(*remote, remote->data(), text.size() + 1, dst),
                  "destination");
  rdma::write_task* write = nullptr;
  throw_if_failed(ctx.allocate(core::make_user_data(0), write), "allocate write");
  write->set(*src, *dst);
  auto t0 = std::chrono::steady_clock::now();
  throw_if_failed(ctx.submit(*write), "submit write");
  run(
      engine, [&] { return completed == 1; }, "the write");
  throw_if_failed(result, "write failed");
  auto t1 = std::chrono::steady_clock::now();
  std::printf("requester: wrote %zu bytes into the responder's memory (%.1f us, acknowledged)\n",
              text.size() + 1, std::chrono::duration<double, std::micro>(t1 - t0).count());

  throw_if_failed(inventory.get_by_addr(*local, memory.data() + 2048, 2048, back), "read back");
  rdma::read_task* read = nullptr;
  throw_if_failed(ctx.allocate(core::make_user_data(0), read), "allocate read");
  read->set(*dst, *back);
  throw_if_failed(ctx.submit(*read), "submit read");
  run(
      engine, [&] { return completed == 2; }, "the read");
  throw_if_failed(result, "read failed");
  bool same = std::memcmp(memory.data() + 2048, text.c_str(), text.size() + 1) == 0;
  std::printf("requester: read %zu bytes back: %s\n", back->data_length(),
              same ? "identical to what was written" : "DIFFERENT from what was written");

  const std::string hello = "hello from the requester";
  std::memcpy(memory.data() + 1024, hello.data(), hello.size());
  core::buffer* msg = nullptr;
  throw_if_failed(inventory.get_by_data(*local, memory.data() + 1024, hello.size(), msg),
                  "message");
  rdma::send_task* send = nullptr;
  throw_if_failed(ctx.allocate(core::make_user_data(0), send), "allocate send");
  send->set_src(*msg);
  throw_if_failed(ctx.submit(*send), "submit send");
  run(
      engine, [&] { return completed == 3; }, "the send");
  throw_if_failed(result, "send failed");
  std::printf("requester: message delivered into the responder's posted receive\n");
  write->free();
  read->free();
  send->free();
  ctx.stop();
  return same ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  core::cli cli("zcstore_rdma_example", "Two-process example of the zcstore rdma layer");
  std::string role;
  std::string dir;
  std::string device = "auto";
  cli.app()
      .add_option("role", role, "responder | requester")
      ->required()
      ->check(CLI::IsMember({"responder", "requester"}));
  cli.app()
      .add_option("--dir", dir, "Folder where the two sides leave their descriptors")
      ->required();
  cli.app()
      .add_option("-d,--device", device, "auto | tcp | sm | interface | RDMA device")
      ->capture_default_str();
  if (auto code = cli.parse(argc, argv)) return *code;
  core::install_stop_signal_handlers();
  try {
    core::progress_engine engine(cli.polling());
    auto dev = core::device::open(device);
    return role == "responder" ? responder(engine, dev, dir) : requester(engine, dev, dir);
  } catch (const status_error& e) {
    std::fprintf(stderr, "%s: %s (%s)\n", role.c_str(), e.what(), status_name(e.code()).data());
    return 1;
  }
}
