// For the DOCA C-API tests that run two contexts in one process: whether a context is idle, and
// progressing both progress engines until a condition holds (bounded).
#pragma once

#include <doca_ctx.h>
#include <doca_pe.h>

#include <chrono>

namespace zc::doca::testing {

inline bool ctx_idle(doca_ctx* ctx) {
  enum doca_ctx_states state = DOCA_CTX_STATE_RUNNING;
  return doca_ctx_get_state(ctx, &state) == DOCA_SUCCESS && state == DOCA_CTX_STATE_IDLE;
}

// Progresses both engines until done() holds; false when `limit` passed first.
template <typename Done>
bool progress_both_until(doca_pe* a, doca_pe* b, Done done,
                         std::chrono::seconds limit = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    doca_pe_progress(a);
    doca_pe_progress(b);
  }
  return true;
}

}  // namespace zc::doca::testing
