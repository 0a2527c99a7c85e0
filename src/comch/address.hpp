// Where a comch channel lives. On the hardware a server is created on a DPU device plus the
// representor of one host PCIe function, and a client created on that host function dials the
// server by name. Here the host function is a label: the server's representor, and the client's
// device. Both sides derive the same Unix socket file, in this user's private socket directory
// (internal/socket_dir.hpp), from (host function, channel name); the server's own device is not
// part of it (a client cannot know it, and on the hardware the representor already pins the host
// function). A server without a representor (empty or "auto") serves the "auto" host function,
// which a client tries after its own device's name, so that `-d auto` everywhere just works.
// Thread rules: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace zc::comch {

// The host function label a server created on (device, representor) serves.
std::string server_host_function(std::string_view representor);
// The socket paths in `directory` a client on `device` tries for channel `name`, most specific
// first.
std::vector<std::string> client_socket_paths(std::string_view directory, std::string_view device,
                                             std::string_view name);
// The socket file name of channel `name` on `host_function`, at most `max_length` bytes:
// "<host function>@<name>" with every byte outside [A-Za-z0-9._-] written as %XX (so a name is
// always one file name, and distinct pairs stay distinct), or "#" and 32 hex digits of a hash of
// both when that does not fit. Throws status_error(bad_config) when not even the hash fits.
std::string socket_file_name(std::string_view host_function, std::string_view name,
                             size_t max_length);
// `directory`/socket_file_name(...), short enough for sun_path.
// Example: socket_path("/run/user/1000/zcstore-comch", "auto", "doca_storage_comch")
//          == "/run/user/1000/zcstore-comch/auto@doca_storage_comch".
std::string socket_path(std::string_view directory, std::string_view host_function,
                        std::string_view name);

}  // namespace zc::comch
