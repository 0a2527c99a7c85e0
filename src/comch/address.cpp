#include "comch/address.hpp"

#include <fmt/format.h>

#include <cstdint>

#include "comch/internal/socket_dir.hpp"
#include "comch/internal/unix_socket.hpp"
#include "core/status.hpp"

namespace zc::comch {
namespace {

constexpr std::string_view default_host_function = "auto";
constexpr char hashed_mark = '#';
// "#" and two 64-bit hashes in hex.
constexpr size_t hashed_length = 1 + 32;

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

bool plain_byte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// '/' and NUL cannot be in a file name, and '@' separates the two labels.
void append_escaped(std::string& out, std::string_view label) {
  for (unsigned char c : label) {
    if (plain_byte(c))
      out.push_back(static_cast<char>(c));
    else
      out += fmt::format("%{:02X}", c);
  }
}

}  // namespace

std::string server_host_function(std::string_view representor) {
  return std::string(normalised(representor));
}

std::vector<std::string> client_socket_paths(std::string_view directory, std::string_view device,
                                             std::string_view name) {
  std::vector<std::string> paths{socket_path(directory, normalised(device), name)};
  if (normalised(device) != default_host_function)
    paths.push_back(socket_path(directory, default_host_function, name));
  return paths;
}

std::string socket_file_name(std::string_view host_function, std::string_view name,
                             size_t max_length) {
  if (max_length < hashed_length)
    throw status_error(status::bad_config,
                       fmt::format("a comch socket name needs {} bytes; only {} are left",
                                   hashed_length, max_length));
  std::string plain;
  append_escaped(plain, normalised(host_function));
  plain.push_back('@');
  append_escaped(plain, name);
  if (plain.size() <= max_length) return plain;
  return fmt::format("{}{:016x}{:016x}", hashed_mark,
                     fnv1a(normalised(host_function), name, 0xcbf29ce484222325ull),
                     fnv1a(normalised(host_function), name, 0x84222325cbf29ce4ull));
}

std::string socket_path(std::string_view directory, std::string_view host_function,
                        std::string_view name) {
  // directory + '/' + file name must fit in sun_path.
  if (directory.size() + 1 + hashed_length > internal::max_socket_path)
    throw status_error(status::bad_config,
                       fmt::format("comch socket directory {} is too long ({} bytes): a socket "
                                   "path must fit in {} bytes; name a shorter one in {}",
                                   directory, directory.size(), internal::max_socket_path,
                                   internal::socket_dir_variable));
  return fmt::format(
      "{}/{}", directory,
      socket_file_name(host_function, name, internal::max_socket_path - directory.size() - 1));
}

}  // namespace zc::comch
