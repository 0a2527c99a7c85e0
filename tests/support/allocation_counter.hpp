// Counts heap allocations per thread by replacing the global operator new (malloc/free
// underneath, so sanitizers still see every block). Include in exactly ONE source file of a test
// binary: the replacements are whole-program definitions.
//
//   const uint64_t before = zc::test::allocations_on_this_thread();
//   ... work on this thread ...
//   EXPECT_EQ(zc::test::allocations_on_this_thread(), before);
//
// allocations_in_process() counts every thread's, for threads a test cannot run code on (a
// worker's private engine thread): the process's count minus those of the threads it knows.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

// The replacements below are malloc/free underneath by design; GCC sees free() on a pointer from
// operator new once it inlines them.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace zc::test {

inline thread_local uint64_t allocation_count = 0;
inline std::atomic<uint64_t> process_allocation_count{0};

inline uint64_t allocations_on_this_thread() noexcept {
  return allocation_count;
}

inline uint64_t allocations_in_process() noexcept {
  return process_allocation_count.load(std::memory_order_relaxed);
}

inline void* counted_allocation(std::size_t n) noexcept {
  ++allocation_count;
  process_allocation_count.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n == 0 ? 1 : n);
}

}  // namespace zc::test

void* operator new(std::size_t n) {
  if (void* p = zc::test::counted_allocation(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  if (void* p = zc::test::counted_allocation(n)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return zc::test::counted_allocation(n);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return zc::test::counted_allocation(n);
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
