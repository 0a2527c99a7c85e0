#include "comch/address.hpp"

#include <fmt/format.h>

#include <cstdint>

#include "comch/internal/unix_socket.hpp"

namespace zc::comch {
namespace {

constexpr std::string_view default_host_function = "auto";

// FNV-1a with two offsets: 128 bits are plenty to tell channel names apart.
uint64_t fnv1a(std::string_view a, std::string_view b, uint64_t offset) {
  uint64_t h = offset;
  auto mix = [&h](std::string_view s) {
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  };
  mix(a);
  h = (h ^ 0xFFu) * 0x100000001b3ull;  // separator no label byte can fake
  mix(b);
  return h;
}

std::string_view normalised(std::string_view label) {
  return label.empty() ? default_host_function : label;
}

}  // namespace

std::string server_host_function(std::string_view representor) {
  return std::string(normalised(representor));
}

std::vector<std::string> client_socket_names(std::string_view device, std::string_view name) {
  std::vector<std::string> names{socket_name(normalised(device), name)};
  if (normalised(device) != default_host_function)
    names.push_back(socket_name(default_host_function, name));
  return names;
}

std::string socket_name(std::string_view host_function, std::string_view name) {
  std::string plain = fmt::format("zcstore.comch/{}/{}", normalised(host_function), name);
  if (plain.size() <= internal::max_abstract_name) return plain;
  return fmt::format("zcstore.comch#{:016x}{:016x}",
                     fnv1a(normalised(host_function), name, 0xcbf29ce484222325ull),
                     fnv1a(normalised(host_function), name, 0x84222325cbf29ce4ull));
}

}  // namespace zc::comch
