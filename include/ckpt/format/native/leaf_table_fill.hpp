// ckpt/format/native/leaf_table_fill.hpp — the restore that fills a typed target from a
// LeafTable (restore/table_fill.hpp's interface), and table_fill(), which makes one.
//
// The walk asks the table for leaves by path; the table's own leaves are queued and
// read by a second thread while the walk goes on, in groups of neighbours; the side
// index's leaves go through a ReadQueue as in any restore.
#pragma once

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <ckpt/exec/parallel_reads.hpp>
#include <ckpt/exec/worker_threads.hpp>
#include <ckpt/format/native/leaf_table.hpp>
#include <ckpt/format/registry.hpp>
#include <ckpt/restore/table_fill.hpp>

namespace ckpt::detail::native {

// A restore's fill from a LeafTable (restore/table_fill.hpp). The side index's leaves
// go through IndexLeafSource and a ReadQueue, as in any restore. The table's own leaves
// are served by TableSource, and each read_into_deferred appends the leaf to a queue
// that a second thread starts reading while the walk goes on, in groups of neighbours
// (LeafTable::read_runs); finish() reads what is left on both threads. Walking 20,000
// leaves took a millisecond, an eighth of restoring them, which the reads now overlap.
// The walk never touches a destination after queueing it (the contract of
// read_into_deferred), so reading it early is reading it late.
class NativeTableFill final : public detail::TableFill {
 public:
  NativeTableFill(std::unique_ptr<LeafTable> table, ReadSettings settings, bool allow_missing, bool partial, Path start)
      : TableFill(allow_missing, partial, table->size()),
        table_(std::move(table)),
        side_(table_->side()),
        settings_(settings),
        start_(std::move(start)),
        // Each leaf is queued at most once (a target's paths are unique): the queue is
        // never reallocated under the reader's feet.
        queue_(std::make_unique_for_overwrite<std::uint32_t[]>(table_->size())),
        source_(*this) {
    settings_.queue = &side_reads_;
  }
  ~NativeTableFill() override { stop_reading(); }

  const std::string& checkpoint() const override { return table_->checkpoint(); }
  Leaf find(const Path& p) const override { return table_->find(p); }
  bool has_subtree(const Path& p) const override { return table_->has_subtree(p); }
  Leaf empty_node(const Path& p) const override {
    const std::uint32_t i = table_->find(p);
    return i != LeafTable::none && table_->leaf(i).type == dtype::none ? i : no_leaf;
  }
  void for_each_child(const Path& p, detail::FunctionRef<bool(std::string_view)> fn) const override {
    table_->for_each_child(p, [&](std::string_view seg) { return fn(seg); });
  }
  bool list_leaves(const Path& p, std::vector<Leaf>& out) const override { return table_->list_leaves(p, out); }
  const LeafSource& source(Leaf l) override {
    const TableLeaf& t = table_->leaf(l);
    if (t.entry != TableLeaf::no_entry) {
      side_source_.emplace(side_, side_->entries()[t.entry], settings_);
      return *side_source_;
    }
    const auto d = table_->shape(l);
    shape_.assign(d.begin(), d.end());  // one vector, its capacity reused leaf after leaf
    source_.at = l;
    return source_;
  }
  std::string path_of(Leaf l) const override { return table_->path_str(l); }
  bool lies_under(Leaf l, const Path& p) const override {
    return detail::path_starts_with(table_->segments(l), p.segments());
  }
  Path start() const override { return start_; }
  void finish() override;

  // The reader thread starts once this much is queued: smaller restores read on one
  // thread, as ReadQueue reads those under 16 MiB (a thread costs more than it saves).
  static constexpr std::size_t early_read_bytes = std::size_t{1} << 20;

 private:
  class TableSource final : public LeafSource {
   public:
    explicit TableSource(NativeTableFill& fill) : fill_(fill) {}
    dtype type() const override { return leaf().type; }
    const Shape& shape() const override { return fill_.shape_; }
    std::uint64_t byte_length() const override { return leaf().length; }
    void read_into(std::span<std::byte> dst) const override {
      check_size(dst);
      fill_.table_->read(at, dst, fill_.settings_.verify_checksums);
    }
    void read_into_deferred(std::span<std::byte> dst) const override {
      check_size(dst);
      fill_.defer(at, dst);
    }
    const std::string& checkpoint() const override { return fill_.checkpoint(); }
    std::string path() const override { return fill_.table_->path_str(at); }
    bool check_dynamic_shapes() const override { return fill_.settings_.check_dynamic_shapes; }
    std::optional<ckpt::dtype> requested_dtype() const override { return fill_.settings_.requested_dtype; }
    // What an Index serves: a lazy leaf's source kept past the restore, a Sharded leaf's box.
    std::shared_ptr<const LeafSource> retain() const override { throw detail::NeedsIndex{}; }
    void read_box(const Shape&, const Shape&, std::span<std::byte>) const override { throw detail::NeedsIndex{}; }

    std::uint32_t at = 0;  // the leaf

   private:
    const TableLeaf& leaf() const { return fill_.table_->leaf(at); }
    void check_size(std::span<std::byte> dst) const {
      if (dst.size() != leaf().length)
        throw Error(checkpoint(), path(),
                    "target holds " + std::to_string(dst.size()) + " bytes, checkpoint " + std::to_string(leaf().length));
    }
    NativeTableFill& fill_;
  };

  void defer(std::uint32_t leaf, std::span<std::byte> dst);
  // Takes the next group of queued leaves [from, to): up to ReadQueue's group of small
  // leaves, or one larger leaf. Until the walk is done it waits for a whole group;
  // false once nothing is left (or reading stopped).
  bool claim(std::size_t& from, std::size_t& to);
  // Reads groups until none is left; the first failure stops every reader.
  void read_queued();
  void stop_reading() {
    stop_.store(true, std::memory_order_release);
    signal();
  }
  void signal() {
    signal_.fetch_add(1, std::memory_order_release);
    signal_.notify_all();
  }

  std::unique_ptr<LeafTable> table_;
  std::shared_ptr<const Index> side_;  // IndexLeafSource borrows this pointer
  ReadSettings settings_;
  Path start_;
  exec::ReadQueue side_reads_;
  Shape shape_;
  // The queue: leaf numbers, their destinations in the records (TableLeaf::target).
  // The walk fills it and publishes a count (queued_); readers claim groups from
  // claimed_ on. queued_bytes_ and the rest of the walk's counters are the walk's own.
  std::unique_ptr<std::uint32_t[]> queue_;
  std::size_t walk_queued_ = 0, queued_bytes_ = 0;
  std::atomic<std::size_t> queued_{0}, claimed_{0};
  std::atomic<bool> walk_done_{false}, stop_{false};
  std::atomic<std::uint32_t> signal_{0};  // changed (and waited on) at each of the above
  // The reader thread's answer: are the data files cached enough to read here?
  enum class Verdict : std::uint8_t { unknown, read, stream };
  std::atomic<Verdict> verdict_{Verdict::unknown};
  std::mutex error_mutex_;
  std::exception_ptr error_;
  TableSource source_;
  std::optional<IndexLeafSource> side_source_;
  std::optional<exec::WorkerThreads> reader_;  // last: joined before the rest goes
};

#if CKPT_DEFINE_API
CKPT_API void NativeTableFill::defer(std::uint32_t leaf, std::span<std::byte> dst) {
  TableLeaf& t = table_->target_of(leaf);
  if (table_->in_manifest(leaf) || t.target) return table_->read(leaf, dst, settings_.verify_checksums);  // a copy, or a second time
  t.target = dst.data();
  queue_[walk_queued_++] = leaf;
  queued_bytes_ += dst.size();
  // Published a group at a time (a release the reader pairs with), and woken then.
  if (walk_queued_ % exec::ReadQueue::group_leaves == 0 || dst.size() > exec::ReadQueue::group_leaf_bytes) {
    queued_.store(walk_queued_, std::memory_order_release);
    if (reader_) signal();
  }
  if (!reader_ && queued_bytes_ >= early_read_bytes && std::thread::hardware_concurrency() > 1) {
    // Files mostly not in the page cache are read as one stream, verified behind it:
    // ReadQueue does that, through an Index. The reader thread asks (sampling the page
    // cache is a measurable part of a small-leaf restore, which waited for it here), and reads
    // nothing unless they are cached; the walk goes on meanwhile and stops at the answer.
    reader_.emplace();
    reader_->start([this] {
      const bool stream = table_->reader().cached_fraction() < exec::ReadQueue::stream_below_cached;
      verdict_.store(stream ? Verdict::stream : Verdict::read, std::memory_order_release);
      verdict_.notify_all();
      if (!stream) read_queued();
    });
  }
  if (verdict_.load(std::memory_order_relaxed) == Verdict::stream) throw detail::NeedsIndex{};
}

CKPT_API bool NativeTableFill::claim(std::size_t& from, std::size_t& to) {
  using exec::ReadQueue;
  for (;;) {
    // The signal first: whatever the walk publishes after this load wakes the wait below.
    const std::uint32_t seen = signal_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return false;
    const bool done = walk_done_.load(std::memory_order_acquire);  // before q: then q is final
    const std::size_t q = queued_.load(std::memory_order_acquire);
    std::size_t c = claimed_.load(std::memory_order_relaxed);
    if (c >= q && done) return false;
    // A group: neighbours in the queue, up to group_leaves small leaves or group_bytes;
    // a larger leaf alone. While the walk goes on, only a whole group is taken.
    std::size_t end = c, bytes = 0;
    bool whole = false;
    for (; end < q; ++end) {
      const std::uint64_t n = table_->leaf(queue_[end]).length;
      if (n > ReadQueue::group_leaf_bytes) {
        whole = true;
        if (end == c) ++end;
        break;
      }
      if (end - c == ReadQueue::group_leaves || (bytes + n > ReadQueue::group_bytes && end > c)) {
        whole = true;
        break;
      }
      bytes += n;
    }
    if (end == c || (!whole && !done)) {
      signal_.wait(seen, std::memory_order_acquire);
      continue;
    }
    if (claimed_.compare_exchange_weak(c, end, std::memory_order_relaxed)) {
      from = c;
      to = end;
      return true;
    }
  }
}

CKPT_API void NativeTableFill::read_queued() {
  std::size_t from = 0, to = 0;
  // A copy of the group: the queue itself is only read once published, since another
  // thread may be reading the same entries while it sizes a group of its own.
  std::vector<std::uint32_t> group;
  group.reserve(exec::ReadQueue::group_leaves);
  try {
    while (claim(from, to)) {
      group.assign(queue_.get() + from, queue_.get() + to);
      if (group.size() == 1 && table_->leaf(group[0]).length > exec::ReadQueue::group_leaf_bytes) {
        const TableLeaf& t = table_->leaf(group[0]);
        table_->read(group[0], {t.target, static_cast<std::size_t>(t.length)}, settings_.verify_checksums);
        continue;
      }
      // In file order (a writer with several data files spreads neighbours over them).
      const auto in_file = [&](std::uint32_t a, std::uint32_t b) { return table_->before(a, b); };
      if (!std::is_sorted(group.begin(), group.end(), in_file)) std::sort(group.begin(), group.end(), in_file);
      table_->read_runs(group, settings_.verify_checksums);
    }
  } catch (...) {
    {
      const std::lock_guard lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
    stop_reading();
  }
}

CKPT_API void NativeTableFill::finish() {
  if (!missing.empty()) throw MissingLeafError(checkpoint(), missing);  // the destructor stops the reader
  check_used(start_);
  // A checkpoint with leaves of the side index (a model's weight matrices, with chunk
  // checksums) that is mostly not in the page cache: ReadQueue reads it as one stream
  // in file order, the small leaves between the matrices where they lie. Read apart
  // from that stream, they cost a disk request each (a cold GPT-2 layout restore is
  // measurably slower). Asked here unless the reader thread asked already.
  if (!reader_ && !side_->entries().empty() && walk_queued_ > 0 && std::thread::hardware_concurrency() > 1 &&
      table_->reader().cached_fraction() < exec::ReadQueue::stream_below_cached)
    throw detail::NeedsIndex{};
  if (reader_) {
    // Read nothing here before the reader thread's answer: a checkpoint to stream is
    // read again through an Index.
    verdict_.wait(Verdict::unknown, std::memory_order_acquire);
    if (verdict_.load(std::memory_order_acquire) == Verdict::stream) throw detail::NeedsIndex{};
  }
  queued_.store(walk_queued_, std::memory_order_release);
  walk_done_.store(true, std::memory_order_release);
  signal();
  read_queued();  // beside the reader thread, if it started
  if (reader_) reader_->join();
  if (error_) std::rethrow_exception(error_);
  side_reads_.run();
}
#endif

}  // namespace ckpt::detail::native

namespace ckpt::detail {
#if CKPT_DEFINE_API
CKPT_API std::unique_ptr<TableFill> table_fill(const std::filesystem::path& dir, const RestoreOptions& opts,
                                               bool check_dynamic_shapes) {
  if (opts.transform || opts.progress || opts.max_memory != 0 || storage::find_url_scheme(dir)) return nullptr;
  const FormatEntry* format = detect_format_entry(dir);
  if (!format || format->name != "native") return nullptr;
  auto table = std::make_unique<detail::native::LeafTable>(dir);
  Path start = Path::parse(opts.subtree);
  if (!start.empty() && !table->has_subtree(start)) throw MissingLeafError(table->checkpoint(), {start.str()});
  return std::make_unique<detail::native::NativeTableFill>(
      std::move(table), ReadSettings{check_dynamic_shapes, opts.verify_checksums, opts.restore_dtype}, opts.allow_missing,
      opts.partial, std::move(start));
}
#endif
}  // namespace ckpt::detail
