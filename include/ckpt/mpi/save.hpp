// ckpt/mpi/save.hpp — ckpt::mpi::save: every rank writes its part of one checkpoint.
//
// Called by every rank with its own state. The ranks exchange a description of their
// leaves (paths, dtypes, shapes, boxes, a hash of each replicated leaf) and each works
// out the same plan: which rank writes which bytes where.
//   - Sharded leaves: each distinct box is written once, by the least loaded of the
//     ranks that hold it (replicas are written once);
//   - other leaves must be equal on every rank (checked by hash): small ones go inline
//     in the manifest, large arrays are split by rows over all ranks (t5x: a partition
//     held by several hosts is further sharded across them), the rest go whole to the
//     least loaded rank.
// Rank 0 makes the staging directory; every rank writes and fsyncs its own data file
// data-<rank> in it; the ranks agree on the outcome; rank 0 alone writes the manifest
// and the commit marker and renames the directory into place. If any rank fails, no
// rank sees a checkpoint and every rank throws a ckpt::Error naming the failed rank.
//
// Incremental saves (a manager's ManagerOptions::incremental): each piece a rank writes
// that is longer than one checksum chunk goes to a data file of its own,
// data-<P + k> at offset 0 (k numbering such pieces in plan order, the same on every
// rank; at most incremental::max_own_files, the rest go to the ranks' files). A rank
// whose piece the previous step holds alone in a file, with the same chunk checksums,
// hard-links that file instead of writing it (manager/incremental.hpp: deleting either
// step never breaks the other; each is a whole checkpoint).
//
// save<ckpt::t5x> and save<ckpt::orbax> (OCDBT or not) write zarr arrays of the global
// shapes instead: each rank the chunks of its boxes (mpi/zarr_plan.hpp; with OCDBT into
// its own database, which rank 0 then merges into the root one), rank 0 the metadata
// files, with the same staging directory, agreement and rename.
//
// On an object store (an s3:// or gs:// URL, which every rank opens with its own
// connections) there is no staging directory: rank 0 clears the place (a committed
// checkpoint there is refused without .force), every rank uploads its objects under the
// checkpoint's prefix (data-<rank>; t5x's chunks), and once all agree rank 0 writes the
// manifest and, last, the commit marker (storage/object_store.hpp). Incremental saves
// and Orbax's OCDBT merge need a directory and are refused there.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ckpt/ckpt.hpp>
#include <ckpt/exec/progress_tracker.hpp>
#include <ckpt/exec/worker_threads.hpp>
#include <ckpt/format/native/boxes.hpp>
#include <ckpt/format/native/manifest.hpp>
#include <ckpt/format/native/writer.hpp>
#include <ckpt/io/staging_dir.hpp>
#include <ckpt/format/zarr/write_part.hpp>
#include <ckpt/manager/incremental.hpp>
#include <ckpt/mpi/comm.hpp>
#include <ckpt/mpi/describe.hpp>
#include <ckpt/mpi/zarr_plan.hpp>
#include <ckpt/storage/object_store.hpp>

namespace ckpt::mpi {

namespace detail {

namespace fs = std::filesystem;

// One piece of bytes a rank writes: leaf `leaf`'s bytes [src, src + length), at `offset`
// of its data file; it is entry `entry` (box `box`, or the whole entry when box < 0).
struct Job {
  std::size_t leaf = 0;
  std::uint64_t src = 0, length = 0, offset = 0;
  std::size_t entry = 0;
  int box = -1;
  std::string file{};  // data-<rank>, or a file of its own (incremental saves)
  // Into the plan's entries, once made: the piece's shape, and its box's origin (box >= 0).
  const Shape* shape = nullptr;
  const Shape* origin = nullptr;
};

// Move-only: its jobs point into its entries.
struct Plan {
  Plan() = default;
  Plan(Plan&&) = default;
  Plan& operator=(Plan&&) = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  IndexEntries entries;     // the manifest's, checksums still to fill in
  std::vector<std::vector<Job>> jobs;  // per rank, in file order
};

inline std::string rank_file(int rank) { return ckpt::detail::native::data_file_name(static_cast<std::size_t>(rank)); }

// Replicated arrays at least this large are split by rows over the ranks.
inline constexpr std::uint64_t spread_threshold = std::uint64_t{1} << 20;

// The same plan on every rank, from every rank's description; throws on a description
// that no checkpoint can be made of (the same error on every rank). own_files: the
// layout of incremental saves (above).
inline Plan make_plan(const std::string& dir, const std::vector<std::vector<LeafDesc>>& all,
                      std::size_t inline_threshold, bool own_files = false) {
  check_same_tree(dir, all);
  const int P = static_cast<int>(all.size());
  const auto& first = all[0];
  Plan plan;
  plan.jobs.resize(static_cast<std::size_t>(P));
  std::vector<std::uint64_t> load(static_cast<std::size_t>(P), 0), file_end(load);
  std::size_t own = 0;
  // Rank r writes j; `at` (the leaf or the box) records where.
  auto assign = [&](int r, Job j, IndexEntry& at) {
    const auto rr = static_cast<std::size_t>(r);
    const std::uint64_t aligned =
        (j.length + ckpt::detail::native::alignment - 1) / ckpt::detail::native::alignment * ckpt::detail::native::alignment;
    load[rr] += aligned;
    if (own_files && j.length > ckpt::detail::native::checksum_chunk_bytes && own < ckpt::detail::incremental::max_own_files) {
      j.file = ckpt::detail::native::data_file_name(static_cast<std::size_t>(P) + own++);
      j.offset = 0;
    } else {
      j.file = rank_file(r);
      j.offset = file_end[rr];
      file_end[rr] += aligned;
    }
    at.file = j.file;
    at.offset = j.offset;
    plan.jobs[rr].push_back(std::move(j));
  };
  auto least_loaded = [&](const std::vector<std::uint32_t>& among) {
    std::uint32_t best = among.front();
    for (auto r : among)
      if (load[r] < load[best]) best = r;
    return static_cast<int>(best);
  };
  std::vector<std::uint32_t> everyone(static_cast<std::size_t>(P));
  for (int r = 0; r < P; ++r) everyone[static_cast<std::size_t>(r)] = static_cast<std::uint32_t>(r);

  for (std::size_t i = 0; i < first.size(); ++i) {
    const LeafDesc& d0 = first[i];
    IndexEntry e;
    e.path = Path::parse(d0.path);
    e.type = d0.type;
    const std::size_t entry = i;
    if (!d0.boxed) {
      e.shape = d0.shape;
      e.length = d0.length;
      e.checksum = d0.hash;
      const bool rows = is_numeric(d0.type) && !d0.shape.empty() && d0.shape[0] >= 2 && P > 1;
      if (d0.length < inline_threshold || d0.type == dtype::none) {
        // inline: rank 0 puts its bytes into the manifest
      } else if (rows && d0.length >= spread_threshold) {
        const std::uint64_t nrows = static_cast<std::uint64_t>(d0.shape[0]);
        const std::uint64_t row_bytes = d0.length / nrows;
        const std::uint64_t parts = std::min<std::uint64_t>(static_cast<std::uint64_t>(P), nrows);
        e.checksum = 0;
        for (std::uint64_t k = 0; k < parts; ++k) {
          const std::uint64_t begin = k * (nrows / parts) + std::min(k, nrows % parts);
          const std::uint64_t n = nrows / parts + (k < nrows % parts ? 1 : 0);
          IndexBox b;
          b.origin.assign(d0.shape.size(), 0);
          b.origin[0] = static_cast<std::int64_t>(begin);
          b.bytes.path = e.path;
          b.bytes.type = e.type;
          b.bytes.shape = d0.shape;
          b.bytes.shape[0] = static_cast<std::int64_t>(n);
          b.bytes.length = n * row_bytes;
          b.ranks = everyone;
          e.boxes.push_back(std::move(b));
        }
        for (std::size_t k = 0; k < e.boxes.size(); ++k) {
          IndexBox& b = e.boxes[k];
          assign(least_loaded(everyone),
                 {.leaf = i, .src = static_cast<std::uint64_t>(b.origin[0]) * row_bytes, .length = b.bytes.length, .entry = entry,
                  .box = static_cast<int>(k)},
                 b.bytes);
        }
      } else {
        assign(least_loaded(everyone), {.leaf = i, .length = d0.length, .entry = entry}, e);
      }
    } else {
      e.shape = d0.global;
      e.length = ckpt::detail::box_elements(e.shape) * dtype_size(e.type);
      std::map<std::pair<Shape, Shape>, std::size_t> seen;  // (origin, shape) -> box
      for (int r = 0; r < P; ++r) {
        const LeafDesc& d = all[static_cast<std::size_t>(r)][i];
        if (ckpt::detail::box_elements(d.shape) == 0) continue;
        auto [it, fresh] = seen.emplace(std::make_pair(d.origin, d.shape), e.boxes.size());
        if (fresh) {
          IndexBox b;
          b.origin = d.origin;
          b.bytes.path = e.path;
          b.bytes.type = e.type;
          b.bytes.shape = d.shape;
          b.bytes.length = d.length;
          e.boxes.push_back(std::move(b));
        }
        e.boxes[it->second].ranks.push_back(static_cast<std::uint32_t>(r));
      }
      for (std::size_t k = 0; k < e.boxes.size(); ++k) {  // each box by the least loaded rank holding it
        IndexBox& b = e.boxes[k];
        assign(least_loaded(b.ranks), {.leaf = i, .length = b.bytes.length, .entry = entry, .box = static_cast<int>(k)}, b.bytes);
      }
    }
    plan.entries.push_back(std::move(e));
  }
  // Shapes and origins, now that the entries stay where they are.
  for (auto& jobs : plan.jobs)
    for (Job& j : jobs) {
      IndexEntry& e = plan.entries[j.entry];
      j.shape = j.box < 0 ? &e.shape : &e.boxes[static_cast<std::size_t>(j.box)].bytes.shape;
      j.origin = j.box < 0 ? nullptr : &e.boxes[static_cast<std::size_t>(j.box)].origin;
    }
  return plan;
}

// What a rank wrote: per job, its checksum then its piece checksums (count first),
// and last the NaN and infinite elements it counted (SaveOptions::non_finite); and
// what it linked from the previous step instead (incremental saves).
struct Written {
  std::vector<std::uint64_t> sums;
  std::uint64_t bytes_written = 0, bytes_linked = 0;
  std::size_t pieces_linked = 0;
};

// Writes this rank's jobs: those of data-<rank> into it (an object under `out`: a file
// of the staging directory, or an upload), those with files of their own (incremental
// saves, in the staging directory) into those, or hard-linked from `base` (the previous
// step's directory) where it holds the same piece (incremental::linkable_leaves). progress
// (SaveOptions::progress) hears of this rank's share: its bytes and its jobs (a leaf,
// a box, or a part of a replicated leaf). non_finite counts the NaN and infinities of
// the pieces as they are hashed.
inline Written write_jobs(const storage::Location& out_loc, const fs::path& staging, int rank, const Snapshot& snap,
                          const std::vector<Job>& jobs,
                          const ProgressFn& progress_fn, const std::string& name, const fs::path& base = {},
                          std::atomic<std::uint64_t>* non_finite = nullptr) {
  namespace inc = ckpt::detail::incremental;
  Written out;
  std::uint64_t bytes = 0;
  for (const Job& j : jobs) bytes += j.length;
  exec::ProgressTracker progress(progress_fn, bytes, jobs.size(), name);
  if (jobs.empty()) {
    progress.finish();
    return out;
  }
  Snapshot mine;
  std::vector<std::size_t> in_rank_file;
  for (std::size_t k = 0; k < jobs.size(); ++k) {
    const Job& j = jobs[k];
    const auto& l = snap.leaves[j.leaf];
    mine.leaves.push_back({l.path, LeafBytes::borrow(l.data.type, {}, l.data.view.data() + j.src, j.length)});
    if (j.file == rank_file(rank)) in_rank_file.push_back(k);
  }
  IndexEntries entries(jobs.size());
  // The tile checksums of this rank's boxes (format/native/boxes.hpp). Those in
  // data-<rank> are hashed by a thread of their own while the file is written and
  // fsynced, on a core the writer leaves idle while it waits for the disk.
  std::vector<std::vector<std::uint64_t>> tiles(jobs.size());
  auto hash_tiles = [&](std::size_t k) {
    tiles[k] = ckpt::detail::native::box_tile_checksums(*jobs[k].shape, mine.leaves[k].data.type, mine.leaves[k].data.view);
  };
  exec::BackgroundTask tiling;
  if (!in_rank_file.empty()) {
    tiling.start([&] {
      for (std::size_t k : in_rank_file)
        if (jobs[k].box >= 0) hash_tiles(k);
    });
    const auto file = out_loc.storage->create(out_loc.key(rank_file(rank)));
    ckpt::detail::native::write_data_file(*file, mine, entries, in_rank_file, &progress, std::size_t{16} << 20, non_finite);
    file->close();
    if (!file->writes_at_once())  // an upload: its bytes count once it is stored
      for (std::size_t k : in_rank_file) progress.add(jobs[k].length, 1);
  }
  // Pieces in files of their own: linked when unchanged, else written; fsynced together.
  const auto previous = in_rank_file.size() == jobs.size() ? std::map<std::string, inc::BaseLeaf>{}
                                                           : inc::linkable_leaves(base);
  std::vector<std::pair<io::File, fs::path>> unsynced;
  for (std::size_t k = 0; k < jobs.size(); ++k) {
    const Job& j = jobs[k];
    if (j.file == rank_file(rank)) continue;
    const auto bytes_k = mine.leaves[k].data.view;
    std::vector<std::uint64_t> chunks;
    const fs::path target = staging / j.file;
    const auto it = previous.find(inc::piece_key(snap.leaves[j.leaf].path, j.origin));
    if (it != previous.end() && inc::same_as_base(bytes_k, snap.leaves[j.leaf].data.type, *j.shape, it->second, chunks, non_finite) &&
        ::link((base / it->second.file).c_str(), target.c_str()) == 0) {
      out.bytes_linked += j.length;
      ++out.pieces_linked;
      progress.add(j.length, 1);
      if (j.box >= 0) {  // the same bytes: the previous step's tiles, if it has them, else hashed
        if (const IndexBox* b = it->second.box; b && ckpt::detail::native::has_current_tile_grid(*b)) tiles[k] = b->tiles;
        else hash_tiles(k);
      }
    } else {
      unsynced.emplace_back(
          inc::write_own_file(target, bytes_k, chunks, progress, snap.leaves[j.leaf].data.type, non_finite), target);
      progress.add(0, 1);
      if (j.box >= 0) hash_tiles(k);
    }
    entries[k].checksum = ckpt::detail::native::chunk_list_xxh3(chunks);  // longer than one chunk
    entries[k].chunk_xxh3 = std::move(chunks);
  }
  for (auto& [f, path] : unsynced) f.sync(path);
  tiling.wait();
  for (std::size_t k = 0; k < jobs.size(); ++k) {
    out.sums.push_back(entries[k].checksum);
    // a box's piece checksums are the writer's chunk checksums (1 MiB each): not hashed
    // twice. A whole leaf's are its chunk checksums, which its checksum is the hash of
    // (format version 2) when it is longer than one chunk: the manifest needs them.
    const auto pieces = jobs[k].box < 0 || !entries[k].chunk_xxh3.empty()
                            ? entries[k].chunk_xxh3.vec()
                            : box_piece_checksums(mine.leaves[k].data.view);
    out.sums.push_back(pieces.size());
    out.sums.insert(out.sums.end(), pieces.begin(), pieces.end());
    if (jobs[k].box >= 0) {  // and its tile checksums (empty when it has none)
      out.sums.push_back(tiles[k].size());
      out.sums.insert(out.sums.end(), tiles[k].begin(), tiles[k].end());
    }
  }
  out.bytes_written = bytes - out.bytes_linked;
  progress.finish();
  return out;
}

// Where the ranks write: a staging directory (held by rank 0), or the objects under the
// checkpoint's prefix on an object store, its commit marker held back.
struct Target {
  std::string name;
  std::optional<io::StagingDir> staging;  // rank 0, in a directory
  fs::path tmp;                           // the staging directory (every rank), empty on an object store
  storage::Location place;                // the object store's place (every rank)
  storage::Location writing;              // what the ranks write through
  bool on_objects() const { return tmp.empty(); }
};

using BeforeCommit = std::function<void(const storage::Location& staging)>;

// Checks this rank's boxes and learns every rank's description of its leaves
// (collective; a bad box on any rank fails every rank).
inline std::vector<std::vector<LeafDesc>> describe_all(const Comm& comm, const std::string& name, const Snapshot& snap) {
  comm.run(name, [&] {
    for (const auto& l : snap.leaves)
      if (l.box) ckpt::detail::native::check_leaf_box(name, l);
  });
  const auto descs = comm.allgather(describe(snap));
  std::vector<std::vector<LeafDesc>> all;
  for (const auto& d : descs) all.push_back(parse_description(d));
  return all;
}

// Rank 0 makes the staging directory, and every rank learns its path; or, on an object
// store, every rank opens the place and rank 0 clears it (begin_publish).
inline void make_target(const Comm& comm, const fs::path& dir, const SaveOptions& opts, Target& t) {
  t.name = dir.string();
  if (storage::is_url(dir)) {
    if (storage::url_scheme(dir.native()) == "mem" && comm.size() > 1)
      throw Error(t.name, "", "a mem:// store lives in one process, which the other ranks cannot reach: "
                              "give a directory they all see, or an s3:// or gs:// URL");
    comm.run(t.name, [&] {
      t.place = storage::open_location(dir);
      t.writing = storage::writing_location(t.place);
      if (comm.rank() == 0) storage::begin_publish(t.place, opts.force);
    });
    return;
  }
  std::string path;
  comm.run(t.name, [&] {
    if (comm.rank() != 0) return;
    std::error_code ec;
    if (!opts.force && fs::exists(dir, ec))
      throw Error(t.name, "", "a checkpoint already exists here (pass .force = true to overwrite)");
    t.staging.emplace(dir);
    path = t.staging->path().string();
  });
  t.tmp = comm.broadcast(path, 0);
  t.writing = storage::directory_location(t.tmp, storage::Publish::in_place);
}

// Rank 0, once every object is written: the rename, or the commit marker.
inline void publish(Target& t, bool force) {
  if (t.on_objects()) storage::commit(t.place);
  else t.staging->commit(force);
}

// An incremental save (the layout and links above): the previous step's directory (the
// same on every rank; empty: none), and this rank's figures once it has written.
struct IncrementalSave {
  fs::path base;
  Written written;
};

// The collective save of a snapshot every rank has taken (see the top of this file).
// in_staging runs on every rank once its data file is durable, in the staging directory
// (each rank's failure there fails the save on every rank, as a data file's would);
// before_commit runs on rank 0 only, after the manifest, before the commit.
inline void save_snapshot(const Comm& comm, const fs::path& dir, const Snapshot& snap, const SaveOptions& opts,
                          const BeforeCommit& before_commit = nullptr, const BeforeCommit& in_staging = nullptr,
                          IncrementalSave* incremental = nullptr) {
  const std::string name = dir.string();
  if (incremental && storage::is_url(dir))
    throw Error(name, "", "incremental saves hard-link unchanged data files: they need a directory, not a URL");
  // 1. Check this rank's boxes, describe its leaves, learn everyone's.
  Plan plan = make_plan(name, describe_all(comm, name, snap), opts.inline_threshold,
                        incremental != nullptr);  // the same everywhere

  // 2. Rank 0 makes the staging directory (everyone learns where), or clears the place.
  Target target;
  make_target(comm, dir, opts, target);
  const fs::path& tmp = target.tmp;

  // 3. Every rank writes and fsyncs its files; all agree it went well. With
  // SaveOptions::non_finite, each counts the NaN and infinities of what it writes (rank
  // 0 also of the inline leaves, its bytes in the manifest), sends its count last in its
  // sums, and every rank's counter becomes the sum over the ranks.
  Written written;
  std::atomic<std::uint64_t> counted{0};
  comm.run(name, [&] {
    written = write_jobs(target.writing, tmp, comm.rank(), snap, plan.jobs[static_cast<std::size_t>(comm.rank())], opts.progress, name,
                         incremental ? incremental->base : fs::path(), opts.non_finite ? &counted : nullptr);
    if (opts.non_finite && comm.rank() == 0)
      for (std::size_t i = 0; i < plan.entries.size(); ++i)
        if (plan.entries[i].file.empty() && plan.entries[i].boxes.empty())
          ckpt::detail::native::count_non_finite(&counted, snap.leaves[i].data.type, snap.leaves[i].data.view);
    if (in_staging) in_staging(target.writing);
  });
  if (incremental) incremental->written = written;
  written.sums.push_back(counted.load());
  const auto gathered = comm.allgather(std::as_bytes(std::span(written.sums)));
  if (opts.non_finite) {
    std::uint64_t total = 0;
    for (const auto& g : gathered) {
      std::uint64_t n = 0;
      if (g.size() >= 8) std::memcpy(&n, g.data() + g.size() - 8, 8);
      total += n;
    }
    opts.non_finite->store(total);
  }

  // 4. Rank 0 writes the manifest and the commit marker, and publishes.
  comm.run(name, [&] {
    if (comm.rank() != 0) return;
    for (std::size_t r = 0; r < gathered.size(); ++r) {
      std::vector<std::uint64_t> v(gathered[r].size() / 8);
      std::memcpy(v.data(), gathered[r].data(), v.size() * 8);
      std::size_t at = 0;
      for (const Job& j : plan.jobs[r]) {
        IndexEntry& e = plan.entries[j.entry];
        if (j.box < 0) {
          e.checksum = v[at++];
          const auto n = static_cast<std::size_t>(v[at++]);
          if (n > 0) {  // chunk checksums (format version 2)
            e.chunk_bytes = ckpt::detail::native::checksum_chunk_bytes;
            e.chunk_xxh3.assign(v.begin() + static_cast<std::ptrdiff_t>(at), v.begin() + static_cast<std::ptrdiff_t>(at + n));
          }
          at += n;
        } else {
          IndexBox& b = e.boxes[static_cast<std::size_t>(j.box)];
          b.bytes.checksum = v[at++];
          const auto n = static_cast<std::size_t>(v[at++]);
          b.pieces.assign(v.begin() + static_cast<std::ptrdiff_t>(at), v.begin() + static_cast<std::ptrdiff_t>(at + n));
          at += n;
          const auto t = static_cast<std::size_t>(v[at++]);
          if (!ckpt::detail::native::set_tile_checksums(
                  b, {v.begin() + static_cast<std::ptrdiff_t>(at), v.begin() + static_cast<std::ptrdiff_t>(at + t)}))
            throw Error(name, e.path.str(), "a rank sent tile checksums for another grid");
          at += t;
        }
      }
    }
    for (std::size_t i = 0; i < plan.entries.size(); ++i) {
      IndexEntry& e = plan.entries[i];
      if (e.file.empty() && e.boxes.empty()) e.inline_bytes = snap.leaves[i].data.view;
    }
    IndexInfo info;
    info.type_name = snap.type_name;
    info.schema = snap.schema;
    info.fingerprint = snap.fingerprint;
    info.processes = static_cast<std::uint64_t>(comm.size());
    const storage::Location& w = target.writing;
    const auto manifest = w.storage->create(w.key(ckpt::detail::native::manifest_file));
    const ckpt::detail::native::CommitRecord record = ckpt::detail::native::write_manifest(*manifest, info, plan.entries);
    manifest->close();
    const std::string commit = ckpt::detail::native::encode_commit(record);
    const storage::ConstBytes commit_bytes = std::as_bytes(std::span(commit));
    w.storage->put(w.key(ckpt::detail::native::commit_file), std::span<const storage::ConstBytes>(&commit_bytes, 1));
    if (before_commit) before_commit(w);
    publish(target, opts.force);
  });
}

// The collective save of a zarr-based format (t5x, Orbax): every rank
// writes its chunks (mpi/zarr_plan.hpp) into one staging directory, rank 0 also the
// metadata files; once all agree it went well, rank 0 makes every directory's entries
// durable and renames the directory into place. The hooks as save_snapshot's.
template <class Format>
void save_zarr_parts(const Comm& comm, const fs::path& dir, const Snapshot& snap, const SaveOptions& opts,
                     const BeforeCommit& before_commit = nullptr, const BeforeCommit& in_staging = nullptr) {
  const std::string name = dir.string();
  constexpr bool merges = requires(const fs::path& d) { Format::merge_parts(d, 1); };
  if (merges && storage::is_url(dir))
    throw Error(name, "", std::string(Format::name) + ": the ranks' databases are merged in a directory; save to a "
                          "shared directory, or as native or t5x to a URL");
  const ckpt::detail::zarr::WritePart part = plan_zarr_part(name, describe_all(comm, name, snap), comm.rank(), opts.max_memory);
  Target target;
  make_target(comm, dir, opts, target);
  const fs::path& tmp = target.tmp;
  comm.run(name, [&] {
    if (target.on_objects()) Format::write_part(snap, target.writing, opts, part);
    else io::naming_target(dir, tmp, [&] { Format::write_part(snap, tmp, opts, part); });
    if (in_staging) in_staging(target.writing);
  });
  comm.run(name, [&] {
    if (comm.rank() != 0) return;
    if constexpr (merges) io::naming_target(dir, tmp, [&] { Format::merge_parts(tmp, comm.size()); });  // Orbax's OCDBT merge
    if (before_commit) before_commit(target.writing);
    if (!target.on_objects())
      for (const auto& e : fs::recursive_directory_iterator(tmp))
        if (e.is_directory()) io::sync_dir(e.path());
    publish(target, opts.force);
  });
}

// A format whose ranks can each write part of one checkpoint (format/zarr/write_part.hpp).
template <class F>
concept writes_parts = requires(const Snapshot& s, const fs::path& d, const SaveOptions& o, const ckpt::detail::zarr::WritePart& p) {
  F::write_part(s, d, o, p);
};

}  // namespace detail

// Saves `value` into one checkpoint at dir, collectively: every rank of comm calls it
// with its own state (see the top of this file). Atomic across ranks: the checkpoint
// appears whole after every rank's bytes are durable, or not at all.
template <format_policy Format = native, class T>
void save(const Comm& comm, const std::filesystem::path& dir, const T& value, const SaveOptions& opts = {}) {
  static_assert(std::is_same_v<Format, native> || detail::writes_parts<Format>,
                CKPT_STATIC_ERROR("ckpt::mpi::save writes the native, t5x and Orbax formats; this format cannot "
                                  "be written by several processes (safetensors' single file and Flax's msgpack "
                                  "are not built by ranks)",
                                  "Save with ckpt::native (or ckpt::t5x, ckpt::orbax), then convert on one process "
                                  "if you need another.",
                                  CKPT_NAMED_ABOVE));
  node::require_tree<T>();
  Snapshot snap = take_snapshot(value);
  ckpt::detail::apply_save_options(snap, opts);
  if constexpr (std::is_same_v<Format, native>) detail::save_snapshot(comm, dir, snap, opts);
  else detail::save_zarr_parts<Format>(comm, dir, snap, opts);
}

}  // namespace ckpt::mpi
