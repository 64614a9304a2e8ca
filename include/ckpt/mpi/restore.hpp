// ckpt/mpi/restore.hpp — restoring on many ranks, onto the saved layout or any other.
//
//   restore_into(comm, dir, state)   each rank's Sharded leaves say, by global_shape,
//                                    offset and local's shape, which box it wants; only
//                                    the stored bytes that intersect it are read
//   restore<T>(comm, dir)            the layout the checkpoint was saved with, when the
//                                    process count matches (else: use restore_into)
//   .load_and_broadcast = true       rank 0 reads the leaves that are not Sharded and
//                                    broadcasts them (Orbax's single_host_load_and_broadcast)
//   restore<New>(comm, dir, m)       the saved layout of an older struct, through a
//                                    migration or a chain (migrate.hpp)
// Each call is collective; when a rank fails every rank throws a ckpt::Error naming it.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ckpt/ckpt.hpp>
#include <ckpt/format/native/manifest.hpp>  // format_name
#include <ckpt/migrate.hpp>
#include <ckpt/mpi/comm.hpp>

namespace ckpt::mpi {

namespace detail {

template <class U>
inline constexpr bool is_sharded = false;
template <class A>
inline constexpr bool is_sharded<Sharded<A>> = true;

// The paths of a value's leaves that are not Sharded (what load_and_broadcast sends).
struct ReplicatedPaths {
  std::vector<Path> paths;
  template <class U>
  void leaf(const Path& p, const U&) {
    if constexpr (!is_sharded<U>) paths.push_back(p);
  }
  void none(const Path&) {}
};

// Whether a value holds any Sharded leaf.
struct CountSharded {
  std::size_t n = 0;
  template <class U>
  void leaf(const Path&, const U&) {
    if constexpr (is_sharded<U>) ++n;
  }
  void none(const Path&) {}
};

// An Index whose entries listed in `table` read from bytes rank 0 broadcast (inline
// entries pointing into the blob); every other entry reads through the checkpoint's own reader.
inline std::shared_ptr<const Index> broadcast_index(const Comm& comm, std::shared_ptr<const Index> index,
                                                    const std::vector<Path>& wanted) {
  Out table;  // (entry, offset, length, checksum) per broadcast entry; rank 0 builds it
  auto blob = std::make_shared<std::vector<std::byte>>();
  Failure failure;
  if (comm.rank() == 0) {
    try {
      std::vector<std::pair<const IndexEntry*, std::uint64_t>> picked;
      std::uint64_t total = 0;
      for (const Path& p : wanted)
        if (const IndexEntry* e = index->find(p); e && e->type != dtype::none) {
          picked.push_back({e, total});
          total += e->length;
        }
      blob->resize(static_cast<std::size_t>(total));
      table.u64(picked.size());
      for (const auto& [e, at] : picked) {
        const std::span<std::byte> dst(blob->data() + at, static_cast<std::size_t>(e->length));
        index->read(*e, dst, true);  // verified here, on the one rank that reads it
        table.u64(static_cast<std::uint64_t>(e - index->entries().data()));
        table.u64(at);
        table.u64(e->length);
        table.u64(io::xxh3(dst));
      }
    } catch (const std::exception& e) {
      failure = Failure::of(e);
    }
  }
  std::vector<std::byte> failed = failure.encode();
  comm.broadcast(failed, 0);
  if (!failed.empty())  // every rank throws rank 0's error, of its kind
    Failure::decode(failed).throw_agreed(index->checkpoint(), "rank 0 of " + std::to_string(comm.size()) + " failed: ");
  comm.broadcast(table.b, 0);
  comm.broadcast(*blob, 0);
  IndexEntries entries = index->entries();
  In in{table.b};
  for (std::uint64_t n = in.u64(), k = 0; k < n; ++k) {
    const auto i = static_cast<std::size_t>(in.u64());
    const auto at = static_cast<std::size_t>(in.u64());
    const auto len = static_cast<std::size_t>(in.u64());
    IndexEntry& e = entries.at(i);
    e.file.clear();
    e.boxes.clear();
    e.offset = 0;
    e.inline_bytes = {blob->data() + at, len};
    e.checksum = in.u64();
  }
  class Reader final : public IndexReader {
   public:
    Reader(std::shared_ptr<const IndexReader> inner, const std::vector<std::byte>& blob)
        : inner_(std::move(inner)), lo_(blob.data()), hi_(blob.data() + blob.size()) {}
    void read(const Index& index, const IndexEntry& e, std::span<std::byte> dst, bool verify) const override {
      if (!e.inline_bytes.empty() && e.inline_bytes.data() >= lo_ && e.inline_bytes.data() < hi_) {
        std::copy(e.inline_bytes.begin(), e.inline_bytes.end(), dst.begin());
        if (verify && io::xxh3(dst) != e.checksum)
          throw CorruptCheckpointError(index.checkpoint(), e.path.str(), "broadcast bytes differ from rank 0's");
        return;
      }
      inner_->read(index, e, dst, verify);
    }
    bool reads_ranges() const override { return inner_->reads_ranges(); }
    bool read_box(const Index& index, const IndexEntry& e, const Shape& origin, const Shape& shape,
                  std::span<std::byte> dst) const override {
      if (!e.inline_bytes.empty() && e.inline_bytes.data() >= lo_ && e.inline_bytes.data() < hi_) return false;
      return inner_->read_box(index, e, origin, shape, dst);
    }
    bool has_xxh3() const override { return inner_->has_xxh3(); }
    void read_range(const Index& index, const IndexEntry& e, std::uint64_t at, std::span<std::byte> dst) const override {
      if (!e.inline_bytes.empty() && e.inline_bytes.data() >= lo_ && e.inline_bytes.data() < hi_) {
        std::copy_n(e.inline_bytes.begin() + static_cast<std::ptrdiff_t>(at), dst.size(), dst.begin());
        return;
      }
      inner_->read_range(index, e, at, dst);
    }

   private:
    std::shared_ptr<const IndexReader> inner_;
    const std::byte *lo_, *hi_;
  };
  auto reader = std::make_shared<Reader>(index->reader(), *blob);
  auto keep = std::make_shared<std::pair<std::shared_ptr<const Index>, std::shared_ptr<std::vector<std::byte>>>>(index, blob);
  return std::make_shared<const Index>(index->checkpoint(), index->info(), std::move(entries), std::move(reader), keep);
}

// Restores `target` from dir on every rank (the collective part of restore_into and restore<T>).
template <class T>
void restore_collective(const Comm& comm, const std::filesystem::path& dir, T& target, const RestoreOptions& opts,
                        bool check_dynamic_shapes, int as_rank) {
  const std::string name = dir.string();
  std::shared_ptr<const Index> index;
  comm.run(name, [&] {
    index = open_index(dir);
    if (as_rank >= 0 && index->info().format != ckpt::detail::native::format_name && comm.size() > 1) {
      CountSharded c;
      Path p;
      walk(target, p, c);
      if (c.n > 0)  // t5x and Orbax keep the global arrays only, not which rank held which box
        throw Error(name, "", "a " + index->info().format +
                                  " checkpoint does not record the boxes each rank saved: ckpt::mpi::restore<T> cannot "
                                  "give them back; use ckpt::mpi::restore_into with Sharded leaves set to this layout");
    } else if (as_rank >= 0) {
      const std::uint64_t saved = std::max<std::uint64_t>(index->info().processes, 1);
      if (saved != static_cast<std::uint64_t>(comm.size()))
        throw Error(name, "", "saved by " + std::to_string(saved) + " processes, restored on " +
                                  std::to_string(comm.size()) +
                                  ": ckpt::mpi::restore<T> restores the saved layout only; use ckpt::mpi::restore_into "
                                  "with Sharded leaves set to this layout");
    }
  });
  if (opts.load_and_broadcast) {
    ReplicatedPaths rp;
    Path p = Path::parse(opts.subtree);
    walk(target, p, rp);
    index = broadcast_index(comm, index, rp.paths);  // collective; rank 0's errors reach every rank
  }
  comm.run(name, [&] {
    const int saved_rank = ckpt::detail::sharded_restore_rank;
    ckpt::detail::sharded_restore_rank = as_rank;
    try {
      ckpt::detail::restore_from_index(index, target, opts, check_dynamic_shapes);
    } catch (...) {
      ckpt::detail::sharded_restore_rank = saved_rank;
      throw;
    }
    ckpt::detail::sharded_restore_rank = saved_rank;
  });
}

}  // namespace detail

// Fills `target` on every rank: each Sharded leaf reads the box its global_shape, offset
// and allocated local ask for; other leaves read whole (see the top of this file).
template <class T>
void restore_into(const Comm& comm, const std::filesystem::path& dir, T& target, const RestoreOptions& opts = {}) {
  detail::restore_collective(comm, dir, target, opts, true, -1);
}

// A new T on every rank, each Sharded leaf holding the box this rank held when it saved;
// the process count must be the saving one's.
template <class T>
T restore(const Comm& comm, const std::filesystem::path& dir, const RestoreOptions& opts = {}) {
  T value{};
  detail::restore_collective(comm, dir, value, opts, false, comm.rank());
  return value;
}

namespace detail {
// The schema the checkpoint at dir records, read on every rank (a failure reaches all).
inline Schema held_schema(const Comm& comm, const std::filesystem::path& dir) {
  Schema held;
  comm.run(dir.string(), [&] { held = open_index(dir)->info().schema; });
  return held;
}
}  // namespace detail

// restore<T> of a checkpoint written by an older version of the struct: holding Old's
// schema (or New's, then no migration is needed). Every rank reads its saved boxes of
// Old and migrates them (a Sharded leaf moves as it is).
template <class New, class Old, class... R>
New restore(const Comm& comm, const std::filesystem::path& dir, const Migration<Old, New, R...>& m,
            const RestoreOptions& opts = {}) {
  RestoreOptions whole = opts;
  whole.subtree.clear();  // a migration moves whole values
  const Schema held = detail::held_schema(comm, dir);
  if (held == schema_of<New>()) return restore<New>(comm, dir, whole);
  const Schema old_schema = schema_of<Old>();
  if (held != old_schema)  // the same on every rank: each read the same manifest
    throw Error(dir.string(), "",
                "the checkpoint does not hold the schema of " + std::string(ckpt::detail::type_name<Old>()) +
                    " (the migration's old type): first difference at " +
                    ckpt::detail::schema_difference(held, old_schema));
  return m.apply(restore<Old>(comm, dir, whole));
}

// The same through a chain: the newest version whose schema the checkpoint holds.
template <class New, class... M>
  requires(sizeof...(M) >= 1)
New restore(const Comm& comm, const std::filesystem::path& dir, const Chain<M...>& c, const RestoreOptions& opts = {}) {
  using C = Chain<M...>;
  static_assert(std::is_same_v<New, typename C::new_type>,
                CKPT_STATIC_ERROR("ckpt::mpi::restore<New>(comm, dir, chain): New must be the chain's newest type",
                                  "Restore into the new type of the chain's last migration, or add the migration to New.",
                                  CKPT_NAMED_ABOVE));
  RestoreOptions whole = opts;
  whole.subtree.clear();
  const Schema held = detail::held_schema(comm, dir);
  std::optional<New> out;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (void)((!out && held == schema_of<typename C::template version<C::count - I>>()
                ? (out.emplace(c.template apply_from<C::count - I>(
                       restore<typename C::template version<C::count - I>>(comm, dir, whole))),
                   true)
                : false) ||
           ...);
  }(std::make_index_sequence<C::count + 1>{});
  if (!out)
    throw Error(dir.string(), "",
                "the checkpoint holds the schema of none of the chain's versions; against the newest, the first "
                "difference is at " +
                    ckpt::detail::schema_difference(held, schema_of<New>()));
  return std::move(*out);
}

}  // namespace ckpt::mpi
