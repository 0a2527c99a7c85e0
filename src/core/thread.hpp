// Process and thread helpers for the programs: pinning a thread to a core (--cpu) and turning
// SIGINT/SIGTERM into a flag that event loops see and that wakes progress engines.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "core/status.hpp"

namespace zc::core {

// Pins the calling thread to `cpu` and checks that it took. Throws status_error on failure.
void pin_current_thread(uint32_t cpu);

// Installs SIGINT/SIGTERM handlers (async-signal-safe: they set a flag and write an eventfd).
// A second signal restores the default action, so a stuck program still dies on Ctrl-C twice.
void install_stop_signal_handlers();
bool stop_requested() noexcept;
// An eventfd that becomes readable when a stop is requested (for epoll sets), or -1.
int stop_signal_fd() noexcept;
// For tests and for programs that decide to stop on their own.
void request_stop() noexcept;
// Sleeps until `deadline`, waking early when a stop is requested (never spins). Returns false
// when a stop was requested.
bool sleep_unless_stopped(std::chrono::steady_clock::time_point deadline) noexcept;

}  // namespace zc::core
