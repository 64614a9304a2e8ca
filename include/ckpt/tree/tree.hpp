// ckpt/tree/tree.hpp — ckpt::Tree: a checkpoint seen without a C++ target type.
//
// restore_tree() loads every leaf's bytes; metadata() gives the same view reading
// nothing but the manifest, and reads a leaf only when as<U>() asks for it.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <ckpt/index.hpp>
#include <ckpt/tree/fill.hpp>

namespace ckpt {

class Tree {
 public:
  class Leaf {
   public:
    const Path& path() const noexcept { return entry_->path; }
    ckpt::dtype dtype() const noexcept { return entry_->type; }
    const Shape& shape() const noexcept { return entry_->shape; }
    std::uint64_t byte_length() const noexcept { return entry_->length; }
    bool loaded() const noexcept { return bytes_ != nullptr; }

    // The leaf as any leaf type U whose dtype and rank match (U = float, std::vector<int>,
    // xt::xarray<double>, std::string, ...).
    template <class U>
    U as() const {
      static_assert(ckpt::leaf<U>, "ckpt: Tree::Leaf::as<U>() needs a leaf type U (a number, string, vector, xtensor...)");
      U out{};
      Source src(*this);
      leaf_codec<U>::restore(out, src);
      return out;
    }

    // The raw bytes (C order, numpy dtype layout); reads them if not loaded.
    std::vector<std::byte> bytes() const {
      if (bytes_) return *bytes_;
      std::vector<std::byte> v(static_cast<std::size_t>(entry_->length));
      index_->read(*entry_, v);
      return v;
    }

   private:
    friend class Tree;
    Leaf(std::shared_ptr<const Index> index, const IndexEntry* entry,
         std::shared_ptr<const std::vector<std::byte>> bytes)
        : index_(std::move(index)), entry_(entry), bytes_(std::move(bytes)) {}

    class Source final : public LeafSource {
     public:
      explicit Source(const Leaf& l) : l_(l) {}
      ckpt::dtype type() const override { return l_.dtype(); }
      const Shape& shape() const override { return l_.shape(); }
      std::uint64_t byte_length() const override { return l_.byte_length(); }
      void read_into(std::span<std::byte> dst) const override {
        if (l_.bytes_) std::copy(l_.bytes_->begin(), l_.bytes_->end(), dst.begin());
        else l_.index_->read(*l_.entry_, dst);
      }
      const std::string& checkpoint() const override { return l_.index_->checkpoint(); }
      std::string path() const override { return l_.path().str(); }
      bool check_dynamic_shapes() const override { return false; }

     private:
      const Leaf& l_;
    };

    std::shared_ptr<const Index> index_;
    const IndexEntry* entry_;
    std::shared_ptr<const std::vector<std::byte>> bytes_;  // null: read on demand
  };

  // Builds the tree of an opened index; with load, reads (and verifies) every leaf now.
  Tree(std::shared_ptr<const Index> index, bool load) : index_(std::move(index)) {
    for (const auto& e : index_->entries()) {
      std::shared_ptr<const std::vector<std::byte>> bytes;
      if (load) {
        auto v = std::make_shared<std::vector<std::byte>>(static_cast<std::size_t>(e.length));
        index_->read(e, *v);
        bytes = std::move(v);
      }
      leaves_.push_back(Leaf(index_, &e, std::move(bytes)));
    }
  }

  // Dotted paths of every leaf, in the checkpoint's order.
  std::vector<std::string> paths() const {
    std::vector<std::string> v;
    for (const auto& l : leaves_) v.push_back(l.path().str());
    return v;
  }
  bool contains(std::string_view dotted) const { return index_->find(Path::parse(dotted)) != nullptr; }
  const Leaf& leaf(std::string_view dotted) const { return leaf(Path::parse(dotted)); }
  const Leaf& leaf(const Path& p) const {
    const IndexEntry* e = index_->find(p);
    if (!e) throw MissingLeafError(index_->checkpoint(), {p.str()});
    return leaves_[static_cast<std::size_t>(e - index_->entries().data())];
  }
  const std::vector<Leaf>& leaves() const noexcept { return leaves_; }
  std::size_t size() const noexcept { return leaves_.size(); }
  const IndexInfo& info() const noexcept { return index_->info(); }
  const std::string& checkpoint() const noexcept { return index_->checkpoint(); }

 private:
  std::shared_ptr<const Index> index_;
  std::vector<Leaf> leaves_;
};

}  // namespace ckpt
