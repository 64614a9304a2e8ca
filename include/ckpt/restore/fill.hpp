// ckpt/restore/fill.hpp — fill a value from an Index (the restore direction of walk).
//
// The target's type drives the traversal: each leaf it has is looked up by path,
// checked and read straight into it. Leaves the target has and the checkpoint lacks
// are collected and reported together; leaves the checkpoint has and the target does
// not use are counted, and named after the walk unless the restore is partial.
// Vectors and maps take their size and keys from the checkpoint.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <ckpt/detail/compile_mode.hpp>
#include <ckpt/detail/function_ref.hpp>
#include <ckpt/error.hpp>
#include <ckpt/index.hpp>
#include <ckpt/tree/node.hpp>
#include <ckpt/tree/path.hpp>
#include <ckpt/tree/path_order.hpp>

namespace ckpt {

// How a fill reads leaves: these come from RestoreOptions.
struct ReadSettings {
  bool check_dynamic_shapes = false;
  bool verify_checksums = true;
  std::optional<dtype> requested_dtype{};
  bool shape_only = false;  // allocate targets without reading (abstract restore)
  DeferredReads* queue = nullptr;  // where deferred reads go (exec::ReadQueue); null: read at once
  std::uint64_t max_memory = 0;    // RestoreOptions::max_memory
};

// One entry of an Index, seen by a leaf codec. It borrows the caller's pointer to the
// Index (which outlives it: a restore's FillContext) rather than copying it, two
// atomic operations per leaf saved; retain() makes one that shares ownership, so that a
// lazy leaf can keep it and read later.
class IndexLeafSource final : public LeafSource {
 public:
  IndexLeafSource(const std::shared_ptr<const Index>& index, const IndexEntry& e, const ReadSettings& settings)
      : index_(index), e_(e), settings_(settings) {}
  // Owning its pointer (retain()).
  IndexLeafSource(std::shared_ptr<const Index>&& index, const IndexEntry& e, const ReadSettings& settings)
      : owned_(std::move(index)), index_(owned_), e_(e), settings_(settings) {}
  IndexLeafSource(const IndexLeafSource&) = delete;
  IndexLeafSource& operator=(const IndexLeafSource&) = delete;
  // Out of line: in separate compilation, the class's vtable and virtual functions are
  // then compiled once, in the library's unit, not in every unit that restores.
  ~IndexLeafSource() override;
  dtype type() const override { return e_.type; }
  const Shape& shape() const override { return e_.shape; }
  std::uint64_t byte_length() const override { return e_.length; }
  void read_into(std::span<std::byte> dst) const override { index_->read(e_, dst, settings_.verify_checksums); }
  void read_into_deferred(std::span<std::byte> dst) const override {
    if (settings_.queue) settings_.queue->push(*index_, e_, dst, settings_.verify_checksums);
    else read_into(dst);
  }
  const std::string& checkpoint() const override { return index_->checkpoint(); }
  std::string path() const override { return e_.path.str(); }
  bool check_dynamic_shapes() const override { return settings_.check_dynamic_shapes; }
  std::optional<dtype> requested_dtype() const override { return settings_.requested_dtype; }
  bool shape_only() const override { return settings_.shape_only; }
  void read_box(const Shape& origin, const Shape& shape, std::span<std::byte> dst) const override {
    index_->read_box(e_, origin, shape, dst, settings_.verify_checksums);
  }
  bool box_held_by(int rank, Shape& origin, Shape& shape) const override;
  std::uint64_t max_memory() const override { return settings_.max_memory; }
  void read_pieces(std::size_t piece,
                   const std::function<void(std::uint64_t, std::span<const std::byte>)>& fn) const override;
  std::shared_ptr<const LeafSource> retain() const override {
    ReadSettings later = settings_;
    later.queue = nullptr;  // a lazy leaf reads when asked, long after this restore
    return std::make_shared<IndexLeafSource>(std::shared_ptr<const Index>(index_), e_, later);
  }

 private:
  std::shared_ptr<const Index> owned_;  // empty when borrowing
  const std::shared_ptr<const Index>& index_;
  const IndexEntry& e_;
  ReadSettings settings_;
};

#if CKPT_DEFINE_API
CKPT_API IndexLeafSource::~IndexLeafSource() = default;
CKPT_API bool IndexLeafSource::box_held_by(int rank, Shape& origin, Shape& shape) const {
  if (e_.boxes.empty()) return false;
  for (const IndexBox& b : e_.boxes)
    for (auto r : b.ranks)
      if (static_cast<int>(r) == rank) {
        origin = b.origin;
        shape = b.bytes.shape;
        return true;
      }
  throw Error(index_->checkpoint(), e_.path.str(),
              "process " + std::to_string(rank) + " held no box of this leaf when it was saved");
}
CKPT_API void IndexLeafSource::read_pieces(
    std::size_t piece, const std::function<void(std::uint64_t, std::span<const std::byte>)>& fn) const {
  if (!index_->reads_pieces(e_)) return LeafSource::read_pieces(piece, fn);  // whole, within max_memory or refused
  std::vector<std::byte> buf(static_cast<std::size_t>(std::min<std::uint64_t>(piece, e_.length)));
  index_->read_pieces(e_, buf, settings_.verify_checksums, fn);
}
#endif

// What a fill asks of the checkpoint it reads: leaves by path, subtrees, a list's or
// a map's items, and a LeafSource for each leaf it restores. An Index answers
// (IndexFill, below); so does the native format's leaf table, which restores many
// leaves without an IndexEntry each (format/native/leaf_table.hpp). Virtual, so that
// fill_from_index is compiled once per target type whoever answers.
class FillContext {
 public:
  using Leaf = std::uint32_t;  // a leaf found by find()
  static constexpr Leaf no_leaf = ~Leaf{0};

  // `leaves`: how many leaves the checkpoint holds, numbered 0..leaves-1 as find() does.
  FillContext(bool allow, bool partial, std::size_t leaves) : allow_missing(allow), partial_(partial) {
    if (!partial_) used_.resize(leaves);
  }
  FillContext(const FillContext&) = delete;
  FillContext& operator=(const FillContext&) = delete;

  virtual const std::string& checkpoint() const = 0;
  virtual Leaf find(const Path& p) const = 0;  // no_leaf when no leaf lies at p
  virtual bool has_subtree(const Path& p) const = 0;
  // The leaf that records an empty node (a default-constructed optional or an empty
  // list) at p, or no_leaf.
  virtual Leaf empty_node(const Path& p) const = 0;
  // Calls fn(segment) for each distinct segment that follows p, in path order (list
  // indices by value, then names); stops when fn returns false.
  virtual void for_each_child(const Path& p, detail::FunctionRef<bool(std::string_view)> fn) const = 0;
  // The source a leaf codec restores leaf l from; valid until the next call.
  virtual const LeafSource& source(Leaf l) = 0;
  // Leaf l's path, and whether it lies at or under p: for naming unused leaves.
  virtual std::string path_of(Leaf l) const = 0;
  virtual bool lies_under(Leaf l, const Path& p) const = 0;
  // The leaves of the list at p when each item is one leaf (item k is out[k]), found in
  // one pass; false when they are not, or the context cannot tell: the fill then looks
  // each item up by its path. Building and finding 20,000 items' paths was a quarter of
  // walking a list of 20,000 vectors.
  virtual bool list_leaves(const Path& p, std::vector<Leaf>& out) const {
    (void)p;
    (void)out;
    return false;
  }

  std::vector<std::string> children(const Path& p) const {
    std::vector<std::string> out;
    for_each_child(p, [&](std::string_view seg) {
      out.emplace_back(seg);
      return true;
    });
    return out;
  }
  void report_missing(const Path& p) {
    if (!allow_missing) missing.push_back(p.str());
  }
  // The source of leaf l, which the target uses (what the fill calls: source() counts nothing).
  const LeafSource& use(Leaf l) {
    mark_used(l);
    return source(l);
  }
  // Whether an empty node lies at p; the target, which is then made empty, uses it.
  bool use_empty_node(const Path& p) {
    const Leaf l = empty_node(p);
    if (l == no_leaf) return false;
    mark_used(l);
    return true;
  }
  // After the walk from `start`: throws UnusedLeafError naming the leaves at or under
  // it that the target did not use, unless the restore is partial. A leaf is marked as
  // used once, and counted: the check of a whole checkpoint compares two numbers, and
  // only a subtree or an error looks at the leaves.
  void check_used(const Path& start) const {
    if (partial_ || used_count_ == used_.size()) return;
    std::vector<std::string> first;
    std::uint64_t count = 0;
    for (Leaf l = 0; l < used_.size(); ++l) {
      if (used_[l] || !lies_under(l, start)) continue;
      if (first.size() < UnusedLeafError::named) first.push_back(path_of(l));
      ++count;
    }
    if (count != 0) throw UnusedLeafError(checkpoint(), std::move(first), count);
  }
  [[noreturn]] void fail(const Path& p, const std::string& what) const { throw Error(checkpoint(), p.str(), what); }

  bool allow_missing = false;
  std::vector<std::string> missing;

 protected:
  ~FillContext() = default;

 private:
  void mark_used(Leaf l) {
    if (partial_ || used_[l]) return;
    used_[l] = true;
    ++used_count_;
  }
  bool partial_ = false;
  std::vector<bool> used_;  // by leaf; empty when partial
  std::size_t used_count_ = 0;
};

// A fill from an Index (any format, a transformed tree, an abstract target's metadata).
class IndexFill final : public FillContext {
 public:
  IndexFill(std::shared_ptr<const Index> idx, ReadSettings s, bool allow, bool partial)
      : FillContext(allow, partial, idx->entries().size()), index_ptr_(std::move(idx)), index_(*index_ptr_), settings_(s) {}
  const std::string& checkpoint() const override { return index_.checkpoint(); }
  Leaf find(const Path& p) const override {
    const IndexEntry* e = index_.find(p);
    return e ? static_cast<Leaf>(e - index_.entries().data()) : no_leaf;
  }
  bool has_subtree(const Path& p) const override { return index_.has_subtree(p); }
  Leaf empty_node(const Path& p) const override {
    const Leaf l = find(p);
    return l != no_leaf && index_.entries()[l].type == dtype::none ? l : no_leaf;
  }
  void for_each_child(const Path& p, detail::FunctionRef<bool(std::string_view)> fn) const override {
    index_.for_each_child(p, [&](const std::string& seg) { return fn(seg); });
  }
  const LeafSource& source(Leaf l) override {
    source_.emplace(index_ptr_, index_.entries()[l], settings_);
    return *source_;
  }
  std::string path_of(Leaf l) const override { return index_.entries()[l].path.str(); }
  bool lies_under(Leaf l, const Path& p) const override {
    return detail::path_starts_with(index_.entries()[l].path.segments(), p.segments());
  }
  bool list_leaves(const Path& p, std::vector<Leaf>& out) const override { return index_.list_leaves(p, out); }

 private:
  std::shared_ptr<const Index> index_ptr_;
  const Index& index_;
  ReadSettings settings_;
  std::optional<IndexLeafSource> source_;
};

namespace detail {
// "0", "1", ... "n-1" exactly, or an error: a vector's size comes from the checkpoint
// and must not be taken from a hostile index like "999999999". The index lists a
// list's items by value (for_each_child), so the k-th must read k; counted without
// copying them, since the copies were a megabyte of fresh memory for 20,000 items.
inline std::size_t list_length(const Path& p, const FillContext& ctx) {
  std::size_t n = 0;
  std::optional<std::string> bad;
  ctx.for_each_child(p, [&](std::string_view c) {
    if (!is_item(c, n)) {
      bad = c;
      return false;
    }
    ++n;
    return true;
  });
  if (bad)
    ctx.fail(p, "list items are not numbered 0.." + std::to_string(ctx.children(p).size() - 1) + " (found \"" + *bad +
                    "\")");
  return n;
}
}  // namespace detail

template <class T>
void fill_from_index(T& value, Path& path, FillContext& ctx) {
  constexpr node::kind k = node::kind_v<T>;
  node::require_node<T>();
  if constexpr (k == node::kind::leaf) {
    if (const FillContext::Leaf l = ctx.find(path); l != FillContext::no_leaf) {
      leaf_codec<T>::restore(value, ctx.use(l));
    } else if (ctx.has_subtree(path)) {
      ctx.fail(path, "an inner node in the checkpoint, a leaf in the target");
    } else {
      ctx.report_missing(path);
    }
  } else if constexpr (k == node::kind::optional) {
    if (ctx.use_empty_node(path)) {
      value.reset();
    } else if (ctx.has_subtree(path)) {
      if (!value) value.emplace();
      fill_from_index(*value, path, ctx);
    } else {
      ctx.report_missing(path);
    }
  } else if constexpr (k == node::kind::tuple) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((path.push(std::to_string(I)), fill_from_index(std::get<I>(value), path, ctx), path.pop()), ...);
    }(std::make_index_sequence<std::tuple_size_v<T>>{});
  } else if constexpr (k == node::kind::sequence) {
    using Item = typename node::sequence_traits<T>::value_type;
    const bool empty_node = ctx.use_empty_node(path);
    // A list of leaves (a model's 20,000 vectors): every item's leaf at once, no path
    // built or looked up per item.
    std::vector<FillContext::Leaf> item_leaves;
    bool items_are_leaves = false;
    if constexpr (node::kind_v<Item> == node::kind::leaf)
      items_are_leaves = !empty_node && ctx.list_leaves(path, item_leaves);
    const std::size_t n = empty_node ? 0 : items_are_leaves ? item_leaves.size() : detail::list_length(path, ctx);
    if (!empty_node && n == 0) {
      if (ctx.find(path) != FillContext::no_leaf) ctx.fail(path, "a leaf in the checkpoint, a list in the target");
      return ctx.report_missing(path);
    }
    if constexpr (node::sequence_traits<T>::resizable) {
      value.resize(n);
    } else if (n != value.size()) {
      throw ShapeMismatchError(ctx.checkpoint(), path.str(),
                               std::to_string(n) + " items in checkpoint, " + std::to_string(value.size()) +
                                   " in target");
    }
    for (std::size_t i = 0; i < n; ++i) {
      if constexpr (node::kind_v<Item> == node::kind::leaf) {
        if (items_are_leaves) {
          leaf_codec<Item>::restore(value[i], ctx.use(item_leaves[i]));
          continue;
        }
      }
      path.push(std::to_string(i));
      fill_from_index(value[i], path, ctx);
      path.pop();
    }
  } else if constexpr (k == node::kind::map) {
    const bool empty_node = ctx.use_empty_node(path);
    const std::vector<std::string> keys = empty_node ? std::vector<std::string>{} : ctx.children(path);
    if (!empty_node && keys.empty()) {
      if (ctx.find(path) != FillContext::no_leaf) ctx.fail(path, "a leaf in the checkpoint, a map in the target");
      return ctx.report_missing(path);
    }
    const std::set<std::string> in_checkpoint(keys.begin(), keys.end());
    for (auto it = value.begin(); it != value.end();)  // the checkpoint's keys are the map's keys
      it = in_checkpoint.count(it->first) ? std::next(it) : value.erase(it);
    for (const auto& key : keys) {
      path.push(key);
      fill_from_index(value[key], path, ctx);
      path.pop();
    }
  } else if constexpr (k == node::kind::listed) {
    if (ctx.use_empty_node(path)) return;  // saved with no child: nothing to fill
    struct Lookup final : ChildLookup {
      Path& path;
      FillContext& ctx;
      Lookup(Path& p, FillContext& c) : path(p), ctx(c) {}
      bool has(const ChildPath& child) const override {
        for (const auto& seg : child) path.push(seg);
        const bool found = ctx.find(path) != FillContext::no_leaf || ctx.has_subtree(path);
        for (std::size_t i = 0; i < child.size(); ++i) path.pop();
        return found;
      }
    } lookup(path, ctx);
    node_children<T>::restore(value, static_cast<const ChildLookup&>(lookup), [&](const ChildPath& child, auto& c) {
      for (const auto& seg : child) path.push(seg);
      fill_from_index(c, path, ctx);
      for (std::size_t i = 0; i < child.size(); ++i) path.pop();
    });
  } else if constexpr (k == node::kind::structure) {
    reflect::for_each_field(value, [&](std::string_view name, auto& field) {
      path.push(std::string(name));
      fill_from_index(field, path, ctx);
      path.pop();
    });
  }
}

}  // namespace ckpt
