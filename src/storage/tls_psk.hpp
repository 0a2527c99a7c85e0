// TLS 1.3 with a pre-shared key for the TCP control channel (`--tls-psk FILE`). The control
// messages carry rdma blobs and export keys, which are secrets: with a key file the channel
// authenticates its peer and encrypts every frame. GnuTLS does all of the cryptography; this file
// only reads the key file and drives a GnuTLS session over a non-blocking socket.
// Control path only. Thread rules: a tls_session belongs to the channel that owns its socket.
//
//   auto keys = zc::storage::load_psk_file("keys.psk");   // throws status_error
//   tcp_client_channel client("10.0.0.2:1234", deadline, std::make_shared<psk_file>(keys));
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

struct gnutls_session_int;  // gnutls_session_t, kept out of every includer

namespace zc::storage {

// How long a TLS handshake may take from the accept (server) or the connect (client). A stranger
// that connects and stays silent holds a target's one control slot for at most this long.
inline constexpr std::chrono::seconds tls_handshake_timeout{5};

// The GnuTLS priority string: TLS 1.3 only, and only the PSK key exchanges (plain, or with an
// ephemeral (EC)DH for forward secrecy); no certificates.
inline constexpr const char* tls_psk_priority =
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:-KX-ALL:+ECDHE-PSK:+DHE-PSK:+PSK";
// The same with TLS 1.2 as well, for protocols whose peers may be older: NBD's proto.md says
// implementations MUST support TLS 1.2 (a 1.3 client still gets 1.3).
inline constexpr const char* tls_psk_priority_with_1_2 =
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-KX-ALL:+ECDHE-PSK:+DHE-PSK:+PSK";

// One line of a key file: "identity:hexkey".
struct psk_entry {
  std::string identity;
  std::vector<uint8_t> key;
};

// A key file as psktool (gnutls-bin) and nbdkit write it: one "identity:hexkey" line per client.
// A client uses the first entry; a server accepts any identity in the file with its own key.
struct psk_file {
  std::string path;
  std::vector<psk_entry> entries;
};

// Longest identity accepted: identities are short names, and the bound keeps a bad file from
// turning into an oversized handshake field.
inline constexpr size_t max_psk_identity_size = 256;
// Longest key accepted, in bytes (psktool's default is 32).
inline constexpr size_t max_psk_key_size = 512;

// Parses a key file's text strictly: every line "identity:hexkey" with a non-empty identity free
// of control characters, an even number of hex digits (at least one byte), no duplicate identity,
// at least one line; the last line may lack its newline. Throws status_error(invalid_value) with
// "<path> line N: ..." otherwise.
psk_file parse_psk_file(std::string_view text, const std::string& path);

// Reads and parses `path`. Throws status_error(invalid_value) for a missing or unreadable file and
// as parse_psk_file does.
psk_file load_psk_file(const std::string& path);

// A program's --tls-psk flag: the keys of `path` into `out` (nothing for an empty path), or false
// after "<program>: --tls-psk: <why>" on stderr (the program then exits core::exit_bad_usage).
bool load_psk_flag(std::string_view program, const std::string& path,
                   std::shared_ptr<const psk_file>& out);

// One TLS connection over a connected, non-blocking socket: the handshake in steps, then the
// record layer. The socket stays the caller's.
class tls_session {
 public:
  enum class role { client, server };
  enum class step { done, again, failed };

  // Throws status_error(initialization) when GnuTLS cannot set the session up. `priority`: a
  // GnuTLS priority string of PSK key exchanges (tls_psk_priority or tls_psk_priority_with_1_2).
  tls_session(role side, std::shared_ptr<const psk_file> keys, int fd,
              const char* priority = tls_psk_priority);
  ~tls_session();
  tls_session(const tls_session&) = delete;
  tls_session& operator=(const tls_session&) = delete;

  // Moves the handshake on; `again` when it waits for the socket (wants_write() says which way).
  // After `failed`, error() says why in one line.
  step handshake();
  bool handshake_done() const noexcept { return done_; }
  // True when the last call that returned GNUTLS_E_AGAIN was waiting to write.
  bool wants_write() const noexcept;
  const std::string& error() const noexcept { return error_; }
  // The identity the client used (server side, after the handshake).
  const std::string& identity() const noexcept { return identity_; }

  // What a record send or receive did. `failed`: error() says why.
  struct io_result {
    enum class state { ok, again, closed, failed };
    state what = state::ok;
    size_t bytes = 0;
  };
  // gnutls_record_send: takes up to one record of `data`. After `again` the next call must offer
  // the same bytes again (at least as many): GnuTLS has already encrypted them.
  io_result send(const uint8_t* data, size_t size);
  // gnutls_record_recv: `closed` when the peer ended the connection (close_notify or EOF).
  io_result recv(uint8_t* data, size_t size);
  // Decrypted bytes GnuTLS holds that recv() would return without reading the socket.
  size_t pending() const noexcept;
  // Best effort close_notify; never blocks.
  void bye() noexcept;

  // The text of a GnuTLS error code, with the alert's name for an alert.
  std::string describe(int code) const;
  // What a failed handshake most likely means, for the operator: " (wrong key?)", ...
  std::string handshake_hint(int code) const;

  // Key lookup for the server (GnuTLS calls it during the handshake).
  int find_key(const char* identity, void* key_datum) noexcept;

 private:
  // Priority, credentials and the key lookup. Throws status_error(initialization).
  void configure(role side, gnutls_session_int* session, const char* priority);

  gnutls_session_int* session_ = nullptr;
  struct credentials;
  std::unique_ptr<credentials> creds_;
  std::shared_ptr<const psk_file> keys_;
  std::string error_;
  std::string identity_;
  std::string unknown_identity_;
  size_t send_in_flight_ = 0;  // bytes of a send that returned GNUTLS_E_AGAIN
  bool done_ = false;
};

}  // namespace zc::storage
