// zc::core::ring<T>: a FIFO queue in one circular array that grows (doubling) and never shrinks,
// so that a queue that keeps about the same length allocates nothing once it has grown: unlike
// std::deque, which allocates and frees a node every few elements as its front and back move.
//
//   core::ring<reply> out;
//   out.push_back(r);  ...  out.front();  out.pop_front();
//   for (reply& r : out) ...               // front to back
//   erase_if(out, [](const reply& r) { return r.done; });
//
// Elements are moved when it grows. Not thread-safe.
#pragma once

#include <cstddef>
#include <iterator>
#include <type_traits>
#include <utility>
#include <vector>

namespace zc::core {

template <typename T>
class ring {
 public:
  template <bool Const>
  class basic_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using owner_type = std::conditional_t<Const, const ring, ring>;
    using reference = std::conditional_t<Const, const T&, T&>;
    using pointer = std::conditional_t<Const, const T*, T*>;

    basic_iterator() = default;
    basic_iterator(owner_type* r, size_t i) : ring_(r), i_(i) {}
    reference operator*() const { return (*ring_)[i_]; }
    pointer operator->() const { return &(*ring_)[i_]; }
    basic_iterator& operator++() {
      ++i_;
      return *this;
    }
    basic_iterator operator++(int) {
      auto old = *this;
      ++i_;
      return old;
    }
    bool operator==(const basic_iterator& o) const { return i_ == o.i_; }

   private:
    owner_type* ring_ = nullptr;
    size_t i_ = 0;
  };
  using iterator = basic_iterator<false>;
  using const_iterator = basic_iterator<true>;

  bool empty() const noexcept { return size_ == 0; }
  size_t size() const noexcept { return size_; }
  size_t capacity() const noexcept { return slots_.size(); }

  // The i-th element from the front.
  T& operator[](size_t i) noexcept { return slots_[(head_ + i) & (slots_.size() - 1)]; }
  const T& operator[](size_t i) const noexcept { return slots_[(head_ + i) & (slots_.size() - 1)]; }
  T& front() noexcept { return slots_[head_]; }
  const T& front() const noexcept { return slots_[head_]; }
  T& back() noexcept { return (*this)[size_ - 1]; }

  void push_back(T v) {
    if (size_ == slots_.size()) grow();
    (*this)[size_++] = std::move(v);
  }
  void pop_front() noexcept {
    slots_[head_] = T();  // lets go of what it holds now, not when the slot is reused
    head_ = (head_ + 1) & (slots_.size() - 1);
    if (--size_ == 0) head_ = 0;
  }
  void clear() noexcept {
    while (!empty()) pop_front();
  }
  // Makes room for n elements in all without growing later.
  void reserve(size_t n) {
    while (slots_.size() < n) grow();
  }

  iterator begin() noexcept { return {this, 0}; }
  iterator end() noexcept { return {this, size_}; }
  const_iterator begin() const noexcept { return {this, 0}; }
  const_iterator end() const noexcept { return {this, size_}; }

  // Removes the elements pred(element) holds for, keeping the others in order. Returns how many.
  template <typename Pred>
  friend size_t erase_if(ring& r, Pred pred) {
    size_t kept = 0;
    for (size_t i = 0; i < r.size_; ++i) {
      if (pred(r[i])) continue;
      if (kept != i) r[kept] = std::move(r[i]);
      ++kept;
    }
    const size_t removed = r.size_ - kept;
    for (size_t i = kept; i < r.size_; ++i) r[i] = T();
    r.size_ = kept;
    if (kept == 0) r.head_ = 0;
    return removed;
  }
  // Removes every element equal to v. Returns how many.
  friend size_t erase(ring& r, const T& v) {
    return erase_if(r, [&v](const T& e) { return e == v; });
  }

 private:
  void grow() {
    std::vector<T> bigger(slots_.empty() ? 8 : 2 * slots_.size());
    for (size_t i = 0; i < size_; ++i) bigger[i] = std::move((*this)[i]);
    slots_.swap(bigger);
    head_ = 0;
  }

  std::vector<T> slots_;  // a power of two in size
  size_t head_ = 0;
  size_t size_ = 0;
};

}  // namespace zc::core
