// ckpt/restore/tree.hpp — ckpt::Tree: a checkpoint seen without a C++ target type.
//
// restore_tree() loads every leaf's bytes; metadata() (or restore_tree with
// .lazy = true) gives the same view from the manifest alone and reads a leaf only
// when as<U>() or bytes() asks for it. A Tree can be edited (rename, erase, set):
// RestoreOptions::transform does so before a tree is matched to a target.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <ckpt/index.hpp>
#include <ckpt/restore/fill.hpp>
#include <ckpt/tree/edit.hpp>
#include <ckpt/detail/static_error.hpp>

namespace ckpt {

class Tree {
 public:
  class Leaf {
   public:
    const Path& path() const noexcept { return path_; }
    ckpt::dtype dtype() const noexcept { return type_; }
    const Shape& shape() const noexcept { return shape_; }
    std::uint64_t byte_length() const noexcept { return length_; }
    bool loaded() const noexcept { return bytes_ != nullptr; }

    // The leaf as any leaf type U whose dtype converts and whose rank matches
    // (U = float, std::vector<int>, xt::xarray<double>, std::string, ...).
    template <class U>
    U as() const {
      static_assert(ckpt::leaf<U>, CKPT_STATIC_ERROR("Tree::Leaf::as<U>() needs a leaf type U",
                                                    "Ask for a number, string, vector or xtensor; restore a struct "
                                                    "with ckpt::restore<T>(dir, {.subtree = \"path\"}).",
                                                    CKPT_NAMED_ABOVE));
      U out{};
      Source src(*this);
      leaf_codec<U>::restore(out, src);
      return out;
    }

    // The raw bytes (C order, numpy dtype layout); reads them if not loaded.
    std::vector<std::byte> bytes() const {
      if (bytes_) return *bytes_;
      std::vector<std::byte> v(static_cast<std::size_t>(length_));
      read_into(v, true);
      return v;
    }

   private:
    friend class Tree;
    Leaf() = default;

    void read_into(std::span<std::byte> dst, bool verify) const {
      if (bytes_) {
        if (dst.size() != bytes_->size()) throw Error(checkpoint_name(), path_.str(), "size mismatch reading a leaf");
        std::copy(bytes_->begin(), bytes_->end(), dst.begin());
      } else if (entry_) {
        index_->read(*entry_, dst, verify);
      }
    }
    const std::string& checkpoint_name() const {
      static const std::string none;
      return index_ ? index_->checkpoint() : none;
    }

    class Source final : public LeafSource {
     public:
      explicit Source(const Leaf& l) : l_(l) {}
      ckpt::dtype type() const override { return l_.dtype(); }
      const Shape& shape() const override { return l_.shape(); }
      std::uint64_t byte_length() const override { return l_.byte_length(); }
      void read_into(std::span<std::byte> dst) const override { l_.read_into(dst, true); }
      const std::string& checkpoint() const override { return l_.checkpoint_name(); }
      std::string path() const override { return l_.path().str(); }
      bool check_dynamic_shapes() const override { return false; }

     private:
      const Leaf& l_;
    };

    Path path_;
    ckpt::dtype type_ = ckpt::dtype::none;
    Shape shape_;
    std::uint64_t length_ = 0;
    std::shared_ptr<const Index> index_;  // where unloaded bytes are read from
    const IndexEntry* entry_ = nullptr;
    std::shared_ptr<const std::vector<std::byte>> bytes_;  // null: read on demand
  };

  // The tree of an opened index; with load, reads every leaf now (verifying its
  // checksum unless told not to).
  Tree(std::shared_ptr<const Index> index, bool load, bool verify = true) : index_(std::move(index)) {
    for (const auto& e : index_->entries()) {
      Leaf l;
      l.path_ = e.path;
      l.type_ = e.type;
      l.shape_ = e.shape;
      l.length_ = e.length;
      l.index_ = index_;
      l.entry_ = &e;
      if (load) {
        auto v = std::make_shared<std::vector<std::byte>>(static_cast<std::size_t>(e.length));
        index_->read(e, *v, verify);
        l.bytes_ = std::move(v);
      }
      leaves_.push_back(std::move(l));
    }
  }

  // Dotted paths of every leaf, in the checkpoint's order.
  std::vector<std::string> paths() const {
    std::vector<std::string> v;
    for (const auto& l : leaves_) v.push_back(l.path().str());
    return v;
  }
  bool contains(std::string_view dotted) const { return find(Path::parse(dotted)) != nullptr; }
  const Leaf& leaf(std::string_view dotted) const { return leaf(Path::parse(dotted)); }
  const Leaf& leaf(const Path& p) const {
    const Leaf* l = find(p);
    if (!l) throw MissingLeafError(checkpoint(), {p.str()});
    return *l;
  }
  const std::vector<Leaf>& leaves() const noexcept { return leaves_; }
  std::size_t size() const noexcept { return leaves_.size(); }
  const IndexInfo& info() const noexcept { return index_->info(); }
  const std::string& checkpoint() const noexcept { return index_->checkpoint(); }

  // ---- editing (for RestoreOptions::transform) ----

  // The same edits as Snapshot's (tree/edit.hpp). Renames the leaf or every leaf of the
  // subtree at `from` to lie at `to`; returns how many moved (none: MissingLeafError).
  std::size_t rename(std::string_view from, std::string_view to) {
    const std::size_t n = detail::rename_leaves(leaves_, path_of, checkpoint(), from, to);
    dirty_ = true;
    return n;
  }

  // Removes the leaf or subtree at `path`; returns how many leaves went.
  std::size_t erase(std::string_view path) {
    dirty_ = true;
    return detail::erase_leaves(leaves_, path_of, path);
  }

  // Adds (or replaces) a leaf holding `value`, of any leaf type.
  template <class U>
  void set(std::string_view path, const U& value) {
    static_assert(ckpt::leaf<U>, CKPT_STATIC_ERROR("Tree::set needs a leaf value",
                                                  "Pass a number, string, vector or xtensor; set a struct leaf by leaf.",
                                                  CKPT_NAMED_ABOVE));
    LeafBytes b = leaf_codec<U>::save(value);
    Leaf l;
    l.path_ = Path::parse(path);
    l.type_ = b.type;
    l.shape_ = b.shape;
    l.length_ = b.view.size();
    l.index_ = index_;
    l.bytes_ = std::make_shared<const std::vector<std::byte>>(b.view.begin(), b.view.end());
    detail::set_leaf(leaves_, path_of, std::move(l));
    dirty_ = true;
  }

  // An Index over the tree as it is now, reading each leaf from where it lives
  // (the original files, or bytes in memory).
  std::shared_ptr<const Index> to_index() const {
    if (!dirty_) return index_;
    auto leaves = std::make_shared<std::vector<Leaf>>(leaves_);
    IndexEntries entries;
    entries.reserve(leaves->size());
    for (const auto& l : *leaves) {
      IndexEntry e;
      e.path = l.path_;
      e.type = l.type_;
      e.shape = l.shape_;
      e.length = l.length_;
      entries.push_back(std::move(e));
    }
    return std::make_shared<const Index>(checkpoint(), index_->info(), std::move(entries),
                                         std::make_shared<TreeReader>(leaves), leaves);
  }

 private:
  static Path& path_of(Leaf& l) { return l.path_; }

  const Leaf* find(const Path& p) const {
    if (!dirty_) {  // leaf i is still entry i of the index: use its map
      const IndexEntry* e = index_->find(p);
      return e ? &leaves_[static_cast<std::size_t>(e - index_->entries().data())] : nullptr;
    }
    for (const auto& l : leaves_)
      if (l.path_ == p) return &l;
    return nullptr;
  }

  // Reads entry i of a tree-made Index from leaf i of the tree.
  class TreeReader final : public IndexReader {
   public:
    explicit TreeReader(std::shared_ptr<const std::vector<Leaf>> leaves) : leaves_(std::move(leaves)) {}
    void read(const Index& index, const IndexEntry& e, std::span<std::byte> dst, bool verify) const override {
      (*leaves_)[static_cast<std::size_t>(&e - index.entries().data())].read_into(dst, verify);
    }

   private:
    std::shared_ptr<const std::vector<Leaf>> leaves_;
  };

  std::shared_ptr<const Index> index_;
  std::vector<Leaf> leaves_;
  bool dirty_ = false;
};

}  // namespace ckpt
