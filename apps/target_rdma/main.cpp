// zcstore_target_rdma: a memory-backed block store serving IO over the rdma layer.
#include <cstdio>
#include <optional>

#include "core/cli.hpp"
#include "core/log.hpp"
#include "core/memory_map.hpp"
#include "core/thread.hpp"
#include "storage/sbc_file.hpp"
#include "storage/tcp_control_channel.hpp"
#include "target_config.hpp"
#include "target_session.hpp"

int main(int argc, char** argv) {
  using namespace zc;
  core::print_banner(target::program_name, ZC_VERSION_STRING);
  target::target_config config;
  if (auto code = target::parse_config(argc, argv, config)) return *code;
  return core::run_guarded(target::program_name, [&] {
    // The content decides the geometry: a .sbc file carries its own, a raw file must match.
    std::optional<storage::binary_content_file> content;
    if (!config.binary_content.empty()) {
      content.emplace(config.binary_content, config.block_size, config.block_count);
      config.block_size = content->block_size();
      config.block_count = content->block_count();
    }
    target::print_config(config);
    core::install_stop_signal_handlers();
    const uint64_t capacity = uint64_t(config.block_size) * config.block_count;
    // Zero-filled when there is no content (the reference left it undefined). The content is read
    // straight into the storage: a staging copy would need twice its size in memory.
    auto storage = core::memory_map::allocate(capacity, core::access::local_read_write);
    if (content) content->read_into({storage->data(), capacity});
    content.reset();
    ZC_LOG_INFO("storage: {} blocks of {} bytes ({} bytes)", config.block_count, config.block_size,
                capacity);

    // With --listen-port 0 the kernel picks the port: this line is how a launcher learns it.
    storage::tcp_server_channel channel(config.listen_port);
    ZC_LOG_INFO("listening on port {}", channel.port());
    target::target_service service(config, *storage, config.block_size);
    return service.run(channel);
  });
}
