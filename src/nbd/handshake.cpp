// The NBD server: the handshake (options, the export, meta contexts, STARTTLS and the TLS
// handshake) up to transmission.
#include "core/log.hpp"
#include "nbd/server_internal.hpp"

namespace zc::nbd {

using namespace server_detail;

uint16_t server::transmission_flags(const connection& c) const noexcept {
  using namespace transmission_flag;
  uint16_t f = has_flags | send_flush | send_fua | send_trim | send_write_zeroes | send_cache |
               send_fast_zero | can_multi_conn;
  // DF only means something with structured replies, and proto.md wants it clear without them.
  if (c.structured) f |= send_df;
  if (read_only_) f |= read_only;
  return f;
}

// The option in c.opt, its data buffered whole. False when it closed c.
bool server::handle_option(connection& c) {
  const std::span<const uint8_t> data(c.data(), c.opt.length);
  const uint32_t opt = c.opt.option;
  reply r;
  auto error = [&](uint32_t type, std::string_view text) {
    append_option_reply(r.extra, opt, type, text);
  };
  bool enter_transmission = false;
  bool start_tls = false;
  // FORCEDTLS: nothing but STARTTLS and ABORT before the upgrade.
  const bool tls_required = options_.tls == tls_mode::require && !c.tls_up() &&
                            opt != static_cast<uint32_t>(option::starttls) &&
                            opt != static_cast<uint32_t>(option::abort);
  if (stopping()) {
    // The server is going away: ABORT is acknowledged, anything else refused, and the
    // connection closes once the answer is out. EXPORT_NAME has no error reply.
    if (opt == static_cast<uint32_t>(option::export_name)) {
      close_connection(c);
      return false;
    }
    if (opt == static_cast<uint32_t>(option::abort))
      append_option_reply(r.extra, opt, reply_type::ack, std::string_view());
    else
      error(reply_type::err_shutdown, "the server is shutting down");
    r.close_after = true;
    c.disc = true;
    c.consume(c.opt.length);
    queue_reply(c, std::move(r));
    c.at = connection::phase::option_header;
    return true;
  }
  if (tls_required && opt == static_cast<uint32_t>(option::export_name)) {
    // EXPORT_NAME has no error reply: the connection closes (proto.md).
    ZC_LOG_WARN("nbd: a client asked for the export without TLS, which is required: closed");
    close_connection(c);
    return false;
  }
  if (tls_required) {
    error(reply_type::err_tls_reqd, "TLS is required: send NBD_OPT_STARTTLS first");
  } else {
    switch (static_cast<option>(opt)) {
      case option::starttls:
        if (options_.tls == tls_mode::off) {
          error(reply_type::err_policy, "TLS is not enabled on this server");
        } else if (c.tls != nullptr) {
          error(reply_type::err_invalid, "TLS is already negotiated");
        } else if (!data.empty()) {
          error(reply_type::err_invalid, "NBD_OPT_STARTTLS takes no data");
        } else {
          append_option_reply(r.extra, opt, reply_type::ack, std::string_view());
          r.start_tls = true;
          start_tls = true;
        }
        break;
      case option::export_name: {
        const std::string_view name(reinterpret_cast<const char*>(data.data()), data.size());
        if (name != options_.export_name) {
          // No error can be sent for EXPORT_NAME: the connection closes (proto.md).
          ZC_LOG_WARN("nbd: a client asked for unknown export '{}'", printable(name));
          c.consume(c.opt.length);
          close_connection(c);
          return false;
        }
        append_export_name_reply(r.extra, storage_.size(), transmission_flags(c), c.no_zeroes);
        enter_transmission = true;
        break;
      }
      case option::abort:
        append_option_reply(r.extra, opt, reply_type::ack, std::string_view());
        r.close_after = true;
        c.disc = true;
        break;
      case option::list:
        if (!data.empty()) {
          error(reply_type::err_invalid, "NBD_OPT_LIST takes no data");
          break;
        }
        append_server_reply(r.extra, opt, options_.export_name);
        append_option_reply(r.extra, opt, reply_type::ack, std::string_view());
        break;
      case option::info:
      case option::go: {
        auto go = decode_go(data);
        if (!go) {
          error(reply_type::err_invalid, "malformed request");
          break;
        }
        if (go->name != options_.export_name) {
          error(reply_type::err_unknown, "no such export");
          break;
        }
        append_info_export(r.extra, opt, storage_.size(), transmission_flags(c));
        // Always sent. The minimum is 1: an unaligned request is served by read-modify-write of
        // the blocks around it; the preferred size is the storage's block or more.
        append_info_block_size(r.extra, opt, 1, options_.preferred_block_size, announced_max_);
        append_option_reply(r.extra, opt, reply_type::ack, std::string_view());
        enter_transmission = static_cast<option>(opt) == option::go;
        break;
      }
      case option::structured_reply:
        if (!data.empty()) {
          error(reply_type::err_invalid, "NBD_OPT_STRUCTURED_REPLY takes no data");
          break;
        }
        c.structured = true;
        append_option_reply(r.extra, opt, reply_type::ack, std::string_view());
        break;
      case option::list_meta_context:
      case option::set_meta_context: {
        const bool set = static_cast<option>(opt) == option::set_meta_context;
        // A SET replaces the selection whatever its outcome: one that fails leaves none.
        if (set) c.meta_context = false;
        auto m = decode_meta_context(data);
        if (!m) {
          error(reply_type::err_invalid, "malformed request");
          break;
        }
        if (set && !c.structured) {
          error(reply_type::err_invalid, "structured replies first");
          break;
        }
        if (m->name != options_.export_name) {
          error(reply_type::err_unknown, "no such export");
          break;
        }
        bool matched = false;
        if (!set && m->query_count == 0) matched = true;  // list them all
        for (uint32_t i = 0; i < m->query_count && !matched; ++i) {
          const std::string_view q = m->query(i);
          if (q == base_allocation || (!set && q == "base:")) matched = true;
        }
        // LIST's replies carry id 0 (proto.md: reserved); SET's the id BLOCK_STATUS will use.
        if (matched)
          append_meta_context_reply(r.extra, opt, set ? base_allocation_id : 0, base_allocation);
        if (set) c.meta_context = matched;
        append_option_reply(r.extra, opt, reply_type::ack, std::string_view());
        break;
      }
      default:
        error(reply_type::err_unsup, "unsupported option");
        break;
    }
  }
  c.consume(c.opt.length);
  queue_reply(c, std::move(r));
  if (enter_transmission) {
    c.transmission = true;
    c.at = connection::phase::request_header;
  } else if (start_tls) {
    c.at = connection::phase::tls;
  } else {
    c.at = connection::phase::option_header;
  }
  return true;
}

void server::begin_tls(connection& c) {
  // The client must wait for the ACK before it starts TLS: plain bytes after STARTTLS are not
  // the protocol (and would otherwise be taken as TLS's).
  if (c.buffered() != 0) {
    ZC_LOG_WARN("nbd: a client sent data after NBD_OPT_STARTTLS before its answer: closed");
    ++counters_.tls_failures;
    close_connection(c);
    return;
  }
  // What was negotiated in plain text does not hold inside TLS: a man in the middle may have
  // added it (nbdkit's CVE-2021-3716). The client negotiates again over TLS.
  c.structured = false;
  c.meta_context = false;
  try {
    c.tls = std::make_unique<storage::tls_session>(storage::tls_session::role::server,
                                                   options_.tls_keys, c.fd.get(),
                                                   storage::tls_psk_priority_with_1_2);
  } catch (const std::exception& e) {
    ZC_LOG_ERROR("nbd: TLS session: {}", e.what());
    ++counters_.tls_failures;
    close_connection(c);
    return;
  }
  continue_tls(c);
}

void server::continue_tls(connection& c) {
  switch (c.tls->handshake()) {
    case storage::tls_session::step::again:
      update_interest(c);
      return;
    case storage::tls_session::step::failed:
      ZC_LOG_WARN("nbd: TLS handshake failed: {}: closed", c.tls->error());
      ++counters_.tls_failures;
      close_connection(c);
      return;
    case storage::tls_session::step::done:
      break;
  }
  ++counters_.tls_sessions;
  ZC_LOG_DEBUG("nbd: TLS session with '{}'", c.tls->identity());
  // Option haggling starts again, encrypted; the client may have sent its next option already.
  c.at = connection::phase::option_header;
  update_interest(c);
  if (c.tls_pending()) on_readable(c);
}

}  // namespace zc::nbd
