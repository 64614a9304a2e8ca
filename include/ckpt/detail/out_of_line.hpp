// ckpt/detail/out_of_line.hpp — fields that most records leave empty, kept behind one pointer.
//
// An IndexEntry or a SnapshotLeaf exists once per leaf, and a checkpoint of 20,000
// small leaves holds 20,000 of each; their size is memory every save and restore
// touches. Boxes, chunk checksums and a Sharded leaf's place are there for a few leaves
// only: held out of line they take 8 bytes where a std::vector took 24 and a
// std::optional<LeafBox> 56. (On a VM each fresh 4 KiB page costs a slow fault, and 48
// bytes less per entry is about 1 MB less of them for 20,000 leaves.)
//
// Both copy deeply, like the std::vector / std::optional they stand in for, and offer
// the part of their interface ckpt uses.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace ckpt::detail {

// A std::vector<T> held through a pointer: null while empty.
template <class T>
class OutOfLineVector {
 public:
  OutOfLineVector() = default;
  OutOfLineVector(std::vector<T> v) { *this = std::move(v); }  // NOLINT: stands in for the vector
  OutOfLineVector(const OutOfLineVector& o) : v_(o.v_ ? std::make_unique<std::vector<T>>(*o.v_) : nullptr) {}
  OutOfLineVector(OutOfLineVector&&) noexcept = default;
  OutOfLineVector& operator=(const OutOfLineVector& o) {
    if (this != &o) v_ = o.v_ ? std::make_unique<std::vector<T>>(*o.v_) : nullptr;
    return *this;
  }
  OutOfLineVector& operator=(OutOfLineVector&&) noexcept = default;
  OutOfLineVector& operator=(std::vector<T> v) {
    if (v.empty()) v_.reset();
    else v_ = std::make_unique<std::vector<T>>(std::move(v));
    return *this;
  }

  // The vector itself, for code that takes one (an empty one while there is none).
  const std::vector<T>& vec() const noexcept { return v_ ? *v_ : empty_vector(); }
  operator const std::vector<T>&() const noexcept { return vec(); }  // NOLINT: as above

  bool empty() const noexcept { return !v_ || v_->empty(); }
  std::size_t size() const noexcept { return v_ ? v_->size() : 0; }
  T* data() noexcept { return v_ ? v_->data() : nullptr; }
  const T* data() const noexcept { return v_ ? v_->data() : nullptr; }
  T* begin() noexcept { return data(); }
  T* end() noexcept { return data() + size(); }
  const T* begin() const noexcept { return data(); }
  const T* end() const noexcept { return data() + size(); }
  T& operator[](std::size_t i) noexcept { return (*v_)[i]; }
  const T& operator[](std::size_t i) const noexcept { return (*v_)[i]; }
  const T& at(std::size_t i) const { return vec().at(i); }  // std::out_of_range when i >= size()
  T& front() noexcept { return v_->front(); }
  const T& front() const noexcept { return v_->front(); }
  T& back() noexcept { return v_->back(); }
  const T& back() const noexcept { return v_->back(); }

  void reserve(std::size_t n) { get().reserve(n); }
  void push_back(const T& x) { get().push_back(x); }
  void push_back(T&& x) { get().push_back(std::move(x)); }
  template <class... A>
  T& emplace_back(A&&... a) {
    return get().emplace_back(std::forward<A>(a)...);
  }
  void resize(std::size_t n) { get().resize(n); }
  template <class It>
  void assign(It first, It last) {
    if (first == last) return clear();
    get().assign(first, last);  // (into the vector in place: GCC 12 -O2 misreads a moved temporary's free)
  }
  void clear() noexcept { v_.reset(); }

  friend bool operator==(const OutOfLineVector& a, const OutOfLineVector& b) { return a.vec() == b.vec(); }
  friend bool operator==(const OutOfLineVector& a, const std::vector<T>& b) { return a.vec() == b; }

 private:
  std::vector<T>& get() {
    if (!v_) v_ = std::make_unique<std::vector<T>>();
    return *v_;
  }
  static const std::vector<T>& empty_vector() noexcept {
    static const std::vector<T> none;
    return none;
  }
  std::unique_ptr<std::vector<T>> v_;
};

// A std::optional<T> held through a pointer: null while empty.
template <class T>
class OutOfLine {
 public:
  OutOfLine() = default;
  OutOfLine(std::nullopt_t) {}  // NOLINT: stands in for the optional
  OutOfLine(const std::optional<T>& o) : p_(o ? std::make_unique<T>(*o) : nullptr) {}  // NOLINT: as above
  OutOfLine(T x) : p_(std::make_unique<T>(std::move(x))) {}  // NOLINT: as above
  OutOfLine(const OutOfLine& o) : p_(o.p_ ? std::make_unique<T>(*o.p_) : nullptr) {}
  OutOfLine(OutOfLine&&) noexcept = default;
  OutOfLine& operator=(const OutOfLine& o) {
    if (this != &o) p_ = o.p_ ? std::make_unique<T>(*o.p_) : nullptr;
    return *this;
  }
  OutOfLine& operator=(OutOfLine&&) noexcept = default;
  OutOfLine& operator=(T x) {
    p_ = std::make_unique<T>(std::move(x));
    return *this;
  }
  OutOfLine& operator=(const std::optional<T>& o) {
    p_ = o ? std::make_unique<T>(*o) : nullptr;
    return *this;
  }

  explicit operator bool() const noexcept { return p_ != nullptr; }
  bool has_value() const noexcept { return p_ != nullptr; }
  T& operator*() noexcept { return *p_; }
  const T& operator*() const noexcept { return *p_; }
  T* operator->() noexcept { return p_.get(); }
  const T* operator->() const noexcept { return p_.get(); }
  void reset() noexcept { p_.reset(); }

 private:
  std::unique_ptr<T> p_;
};

}  // namespace ckpt::detail
