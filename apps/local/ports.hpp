// Ports for a pipeline on one machine. Thread rules: free functions, safe from any thread.
//
// Prefer letting the target bind port 0 and reading the port it logs:
//   auto line = sup.wait_for_line(target, listening_line_text, 20s);
//   auto port = line ? parse_listening_port(*line) : std::nullopt;
// free_tcp_port() is for programs that cannot do that.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace zc::local {

// What zcstore_target_rdma logs once its control socket is bound: "listening on port N".
inline constexpr std::string_view listening_line_text = "listening on port ";

// The N of the first "listening on port N" in `line` (log prefixes before it are fine); nullopt
// when the text is absent or N is not a port in 1..65535.
std::optional<uint16_t> parse_listening_port(std::string_view line);

// A TCP port on 127.0.0.1 that was free a moment ago: bind port 0, read it back, close. Racy by
// nature: another process may take the port before the child binds it (the kernel hands out
// ephemeral ports in sequence, so this is rare but possible on a busy machine). A child that
// fails to bind then exits with an error: retry, or use --listen-port 0 and the log line.
// Throws std::runtime_error if no socket can be bound.
uint16_t free_tcp_port();

}  // namespace zc::local
