// Channel names for a pipeline on one machine: the comch server's socket file is named from the
// channel name, so two launchers (or a launcher and a test run) must never share one.
// Thread rules: safe from any thread.
#pragma once

#include <string>
#include <string_view>

namespace zc::local {

// "<prefix>-<pid>-<counter>-<8 hex random digits>": the pid and counter make it unique within
// this machine's live processes, the random part across pid reuse (a crashed launcher's service
// may still hold its name). Example: unique_channel_name("zc_local") == "zc_local-4711-0-9f3a01c2".
std::string unique_channel_name(std::string_view prefix);

}  // namespace zc::local
