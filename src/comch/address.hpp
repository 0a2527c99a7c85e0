// Where a comch channel lives. On the hardware a server is created on a DPU device plus the
// representor of one host PCIe function, and a client created on that host function dials the
// server by name. Here the host function is a label: the server's representor, and the client's
// device. Both sides derive the same abstract Unix socket name from (host function, channel name);
// the server's own device is not part of it (a client cannot know it, and on the hardware the
// representor already pins the host function). A server without a representor (empty or "auto")
// serves the "auto" host function, which a client tries after its own device's name, so that
// `-d auto` everywhere just works.
// Thread rules: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace zc::comch {

// The host function label a server created on (device, representor) serves.
std::string server_host_function(std::string_view representor);
// The socket names a client on `device` tries for channel `name`, most specific first.
std::vector<std::string> client_socket_names(std::string_view device, std::string_view name);
// The abstract socket name (without the leading NUL) of channel `name` on `host_function`.
// Long inputs are hashed so the result always fits in sun_path.
std::string socket_name(std::string_view host_function, std::string_view name);

}  // namespace zc::comch
