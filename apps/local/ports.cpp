#include "ports.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <stdexcept>
#include <string>

namespace zc::local {

std::optional<uint16_t> parse_listening_port(std::string_view line) {
  const size_t at = line.find(listening_line_text);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = line.substr(at + listening_line_text.size());
  size_t digits = 0;
  while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
  // "65536", "0" and "123abc" are not ports; trailing text after a space is fine.
  if (digits == 0 || digits > 5 ||
      (digits < rest.size() && rest[digits] != ' ' && rest[digits] != '\r' && rest[digits] != '\n'))
    return std::nullopt;
  unsigned value = 0;
  std::from_chars(rest.data(), rest.data() + digits, value);
  if (value == 0 || value > 65535) return std::nullopt;
  return static_cast<uint16_t>(value);
}

uint16_t free_tcp_port() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t length = sizeof(addr);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0;
  const int saved = errno;
  ::close(fd);
  if (!ok)
    throw std::runtime_error(std::string("cannot find a free port: ") + std::strerror(saved));
  return ntohs(addr.sin_port);
}

}  // namespace zc::local
