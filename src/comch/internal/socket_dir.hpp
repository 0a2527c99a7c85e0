// Where comch sockets live, and how a server claims and gives back its socket file. An abstract
// Unix socket name carries no permissions, so any local user could bind a channel's name first
// (the real server could not start) or serve an impostor. Socket files in a directory that only
// this user can write close both: nobody else can create, remove or replace a name there, and
// nobody else can even reach one (the kernel checks search permission on the directory).
// Thread rules: any thread; socket_directory() reads the environment.
#pragma once

#include <sys/types.h>

#include <string>

namespace zc::comch::internal {

// Names the socket directory instead of the default (tests, several deployments side by side).
inline constexpr const char* socket_dir_variable = "ZC_COMCH_DIR";

// The directory this process's comch servers listen in and its clients dial into, checked (and
// created, mode 0700, when missing) by ensure_private_directory:
//   $ZC_COMCH_DIR                      when set (it must be an absolute path);
//   $XDG_RUNTIME_DIR/zcstore-comch     when XDG_RUNTIME_DIR is an absolute path to a directory
//                                      owned by our effective uid;
//   /tmp/zcstore-comch-<euid>          otherwise.
// A server and its clients must run as the same user with the same environment to meet.
// Throws as ensure_private_directory, or status_error(bad_config) for a relative ZC_COMCH_DIR.
std::string socket_directory();

// Creates `path` with mode 0700 when missing, then refuses it unless it is a real directory (not
// a symlink) owned by our effective uid with no group or other permission bits: throws
// status_error(not_permitted) whose message names the path and the reason, or
// status_error(operating_system) when it cannot be created or examined.
void ensure_private_directory(const std::string& path);

// Which socket file a server created: a later server of the same name replaces a stale file, and
// the first one must then leave the new one alone.
struct socket_file_id {
  dev_t device = 0;
  ino_t inode = 0;
};

// A non-blocking socket listening on `path`, a file in the private `directory`. A socket file
// already there is removed first when nothing listens on it (a server that died or was stopped
// without being destroyed); when something does, fails with EADDRINUSE. Other failures: -1 with
// errno (EEXIST: `path` exists and is not a socket; ETIMEDOUT: another server of ours kept the
// directory locked for directory_lock_timeout). Servers of this user claim and remove names under
// a lock on the directory, so two of them never both take one name.
int listen_in_directory(const std::string& directory, const std::string& path, int backlog,
                        socket_file_id& created) noexcept;

// Unlinks `path` if it is still the socket file `created` (under the directory lock); a file of
// the same name made since by another server stays.
void remove_socket_file(const std::string& directory, const std::string& path,
                        const socket_file_id& created) noexcept;

}  // namespace zc::comch::internal
