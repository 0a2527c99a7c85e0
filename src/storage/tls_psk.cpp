#include "storage/tls_psk.hpp"

#include <gnutls/gnutls.h>

#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "core/status.hpp"

namespace zc::storage {
namespace {

std::optional<uint8_t> hex_digit(char c) {
  if (c >= '0' && c <= '9') return static_cast<uint8_t>(c - '0');
  if (c >= 'a' && c <= 'f') return static_cast<uint8_t>(c - 'a' + 10);
  if (c >= 'A' && c <= 'F') return static_cast<uint8_t>(c - 'A' + 10);
  return std::nullopt;
}

[[noreturn]] void bad_line(const std::string& path, size_t line, std::string_view why) {
  throw status_error(status::invalid_value, fmt::format("{} line {}: {}", path, line, why));
}

psk_entry parse_line(std::string_view text, const std::string& path, size_t line) {
  const size_t colon = text.find(':');
  if (colon == std::string_view::npos)
    bad_line(path, line, "expected identity:hexkey (no ':' found)");
  psk_entry entry;
  entry.identity = std::string(text.substr(0, colon));
  const std::string_view hex = text.substr(colon + 1);
  if (entry.identity.empty()) bad_line(path, line, "empty identity");
  if (entry.identity.size() > max_psk_identity_size)
    bad_line(path, line, fmt::format("identity longer than {} bytes", max_psk_identity_size));
  for (char c : entry.identity)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      bad_line(path, line, "control character in the identity");
  if (hex.empty()) bad_line(path, line, "empty key");
  for (char c : hex)
    if (!hex_digit(c)) bad_line(path, line, "key is not hexadecimal");
  if (hex.size() % 2 != 0) bad_line(path, line, "key has an odd number of hex digits");
  if (hex.size() / 2 > max_psk_key_size)
    bad_line(path, line, fmt::format("key longer than {} bytes", max_psk_key_size));
  entry.key.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2)
    entry.key.push_back(static_cast<uint8_t>(*hex_digit(hex[i]) << 4 | *hex_digit(hex[i + 1])));
  return entry;
}

}  // namespace

psk_file parse_psk_file(std::string_view text, const std::string& path) {
  psk_file out;
  out.path = path;
  size_t line = 0;
  while (!text.empty()) {
    ++line;
    const size_t end = text.find('\n');
    const std::string_view one = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    psk_entry entry = parse_line(one, path, line);
    for (const auto& e : out.entries)
      if (e.identity == entry.identity)
        bad_line(path, line, fmt::format("identity '{}' appears twice", entry.identity));
    out.entries.push_back(std::move(entry));
  }
  if (out.entries.empty())
    throw status_error(status::invalid_value,
                       fmt::format("{}: no keys (expected lines identity:hexkey)", path));
  return out;
}

psk_file load_psk_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw status_error(status::invalid_value,
                       fmt::format("cannot read the key file {}: {}", path, std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad())
    throw status_error(status::invalid_value, fmt::format("cannot read the key file {}", path));
  return parse_psk_file(text.str(), path);
}

bool load_psk_flag(std::string_view program, const std::string& path,
                   std::shared_ptr<const psk_file>& out) {
  if (path.empty()) return true;
  try {
    out = std::make_shared<const psk_file>(load_psk_file(path));
    return true;
  } catch (const status_error& e) {
    std::cerr << program << ": --tls-psk: " << e.what() << "\n";
    return false;
  }
}

// ---- tls_session ---------------------------------------------------------------------------

// The GnuTLS credentials of one side; freed with the session.
struct tls_session::credentials {
  gnutls_psk_client_credentials_t client = nullptr;
  gnutls_psk_server_credentials_t server = nullptr;
  ~credentials() {
    if (client) gnutls_psk_free_client_credentials(client);
    if (server) gnutls_psk_free_server_credentials(server);
  }
};

namespace {

int server_key_callback(gnutls_session_t session, const char* identity, gnutls_datum_t* key) {
  auto* self = static_cast<tls_session*>(gnutls_session_get_ptr(session));
  return self ? self->find_key(identity, key) : -1;
}

// Non-fatal GnuTLS results (a warning alert, ...) each consume input; a peer that sends nothing
// else is failed rather than served forever.
constexpr int max_non_fatal_in_a_row = 64;

void check(int rc, const char* what) {
  if (rc < 0)
    throw status_error(status::initialization,
                       fmt::format("TLS setup failed ({}): {}", what, gnutls_strerror(rc)));
}

}  // namespace

tls_session::tls_session(role side, std::shared_ptr<const psk_file> keys, int fd,
                         const char* priority)
    : creds_(std::make_unique<credentials>()), keys_(std::move(keys)) {
  if (!keys_ || keys_->entries.empty())
    throw status_error(status::initialization, "TLS setup failed: no pre-shared key");
  // GNUTLS_NO_SIGNAL: a peer that went away is an error code, never a SIGPIPE. GNUTLS_NO_TICKETS:
  // every connection authenticates with the key; no resumption tickets to keep or leak.
  const unsigned flags = (side == role::server ? GNUTLS_SERVER : GNUTLS_CLIENT) | GNUTLS_NONBLOCK |
                         GNUTLS_NO_SIGNAL | GNUTLS_NO_TICKETS;
  gnutls_session_t session = nullptr;
  check(gnutls_init(&session, flags), "init");
  session_ = session;
  try {
    configure(side, session, priority);
  } catch (...) {
    gnutls_deinit(session);  // the destructor does not run for a constructor that throws
    throw;
  }
  gnutls_transport_set_int(session, fd);
}

void tls_session::configure(role side, gnutls_session_int* session, const char* priority) {
  gnutls_session_set_ptr(session, this);
  const char* where = nullptr;
  if (int rc = gnutls_priority_set_direct(session, priority, &where); rc < 0) check(rc, "priority");
  if (side == role::client) {
    check(gnutls_psk_allocate_client_credentials(&creds_->client), "client credentials");
    const psk_entry& first = keys_->entries.front();
    const gnutls_datum_t key{const_cast<unsigned char*>(first.key.data()),
                             static_cast<unsigned>(first.key.size())};
    check(gnutls_psk_set_client_credentials(creds_->client, first.identity.c_str(), &key,
                                            GNUTLS_PSK_KEY_RAW),
          "client key");
    check(gnutls_credentials_set(session, GNUTLS_CRD_PSK, creds_->client), "credentials");
  } else {
    check(gnutls_psk_allocate_server_credentials(&creds_->server), "server credentials");
    gnutls_psk_set_server_credentials_function(creds_->server, server_key_callback);
    check(gnutls_credentials_set(session, GNUTLS_CRD_PSK, creds_->server), "credentials");
  }
}

tls_session::~tls_session() {
  if (session_) gnutls_deinit(session_);
}

int tls_session::find_key(const char* identity, void* key_datum) noexcept {
  auto* key = static_cast<gnutls_datum_t*>(key_datum);
  for (const auto& e : keys_->entries) {
    if (e.identity != identity) continue;
    key->data = static_cast<unsigned char*>(gnutls_malloc(e.key.size()));
    if (!key->data) return -1;
    std::memcpy(key->data, e.key.data(), e.key.size());
    key->size = static_cast<unsigned>(e.key.size());
    identity_ = e.identity;
    return 0;
  }
  try {
    // The peer chose these bytes: printable ASCII only, and not too many, for the log line.
    constexpr size_t shown = 64;
    unknown_identity_.clear();
    for (const char* c = identity; *c != '\0' && unknown_identity_.size() < shown; ++c)
      unknown_identity_ += *c >= 0x20 && *c < 0x7f ? *c : '?';
    if (unknown_identity_.empty()) unknown_identity_ = "?";
  } catch (...) {
  }
  return -1;
}

std::string tls_session::describe(int code) const {
  std::string text = gnutls_strerror(code);
  if (code == GNUTLS_E_FATAL_ALERT_RECEIVED || code == GNUTLS_E_WARNING_ALERT_RECEIVED)
    text += fmt::format(" ({})", gnutls_alert_get_name(gnutls_alert_get(session_)));
  return text;
}

std::string tls_session::handshake_hint(int code) const {
  if (!unknown_identity_.empty())
    return fmt::format(" (unknown PSK identity '{}')", unknown_identity_);
  if (code == GNUTLS_E_FATAL_ALERT_RECEIVED) {
    switch (gnutls_alert_get(session_)) {
      case GNUTLS_A_UNKNOWN_PSK_IDENTITY:
        return " (the peer does not know this identity)";
      case GNUTLS_A_ILLEGAL_PARAMETER:
      case GNUTLS_A_DECRYPT_ERROR:
      case GNUTLS_A_BAD_RECORD_MAC:
        return " (wrong key?)";
      default:
        return "";
    }
  }
  switch (code) {
    // A PSK binder that does not verify.
    case GNUTLS_E_RECEIVED_ILLEGAL_PARAMETER:
    case GNUTLS_E_DECRYPTION_FAILED:
      return " (wrong key?)";
    case GNUTLS_E_PREMATURE_TERMINATION:
    case GNUTLS_E_UNEXPECTED_PACKET:
    case GNUTLS_E_UNEXPECTED_PACKET_LENGTH:
    case GNUTLS_E_UNSUPPORTED_VERSION_PACKET:
      return " (the peer does not speak TLS: --tls-psk on one side only?)";
    default:
      return "";
  }
}

tls_session::step tls_session::handshake() {
  if (done_) return step::done;
  int non_fatal = 0;
  for (;;) {
    const int rc = gnutls_handshake(session_);
    if (rc == GNUTLS_E_SUCCESS) {
      done_ = true;
      return step::done;
    }
    if (rc == GNUTLS_E_AGAIN) return step::again;
    if (rc == GNUTLS_E_INTERRUPTED ||
        (!gnutls_error_is_fatal(rc) && ++non_fatal < max_non_fatal_in_a_row))
      continue;
    error_ = describe(rc) + handshake_hint(rc);
    // Tell the peer why (best effort, never blocks): a client with a wrong key then reads "fatal
    // alert" instead of a bare close.
    if (rc != GNUTLS_E_FATAL_ALERT_RECEIVED && rc != GNUTLS_E_PREMATURE_TERMINATION)
      (void)gnutls_alert_send_appropriate(session_, rc);
    return step::failed;
  }
}

bool tls_session::wants_write() const noexcept {
  return gnutls_record_get_direction(session_) == 1;
}

tls_session::io_result tls_session::send(const uint8_t* data, size_t size) {
  using state = io_result::state;
  // GnuTLS's rule for a send that returned AGAIN: call again with the same parameters.
  if (send_in_flight_ != 0) size = send_in_flight_;
  for (;;) {
    const ssize_t n = gnutls_record_send(session_, data, size);
    if (n >= 0) {
      send_in_flight_ = 0;
      return {state::ok, static_cast<size_t>(n)};
    }
    if (n == GNUTLS_E_INTERRUPTED) continue;
    if (n == GNUTLS_E_AGAIN) {
      send_in_flight_ = size;
      return {state::again, 0};
    }
    send_in_flight_ = 0;
    error_ = describe(static_cast<int>(n));
    return {state::failed, 0};
  }
}

tls_session::io_result tls_session::recv(uint8_t* data, size_t size) {
  using state = io_result::state;
  int non_fatal = 0;
  for (;;) {
    const ssize_t n = gnutls_record_recv(session_, data, size);
    if (n > 0) return {state::ok, static_cast<size_t>(n)};
    // 0: close_notify. A bare EOF is what a plain close (or a crash) looks like: the same end.
    if (n == 0 || n == GNUTLS_E_PREMATURE_TERMINATION) return {state::closed, 0};
    if (n == GNUTLS_E_AGAIN) return {state::again, 0};
    // Interrupted, or a warning alert / post-handshake message GnuTLS has dealt with.
    if (n == GNUTLS_E_INTERRUPTED ||
        (!gnutls_error_is_fatal(static_cast<int>(n)) && ++non_fatal < max_non_fatal_in_a_row))
      continue;
    error_ = describe(static_cast<int>(n));
    return {state::failed, 0};
  }
}

size_t tls_session::pending() const noexcept {
  return gnutls_record_check_pending(session_);
}

void tls_session::bye() noexcept {
  // Not in the middle of a record: close_notify would follow half a record.
  if (done_ && send_in_flight_ == 0) (void)gnutls_bye(session_, GNUTLS_SHUT_WR);
}

}  // namespace zc::storage
