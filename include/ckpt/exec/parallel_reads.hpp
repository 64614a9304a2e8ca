// ckpt/exec/parallel_reads.hpp — the reads of one restore, run on several threads.
//
// A restore first walks the target, sizing every array and queueing "read entry e
// into this memory"; then the queue runs, biggest leaves first, on up to one thread
// per core. Each thread reads and verifies whole leaves, so reading (a kernel copy)
// and checksumming (xxh3) of different leaves overlap instead of adding up. Small
// leaves travel in groups, in file order: a thread takes a few hundred at a time, and
// the reader fetches neighbouring ones with one call (IndexReader::read_group).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <span>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <ckpt/detail/compile_mode.hpp>
#include <ckpt/detail/sort_runs.hpp>
#include <ckpt/exec/progress_tracker.hpp>
#include <ckpt/exec/worker_threads.hpp>
#include <ckpt/index.hpp>

namespace ckpt::exec {

class ReadQueue final : public DeferredReads {
 public:
  void push(const Index& index, const IndexEntry& e, std::span<std::byte> dst, bool verify) override {
    bytes_ += dst.size();
    ++leaves_;
    // A small leaf stored whole goes to its index's list of small reads, which run()
    // cuts into groups: 32 bytes a leaf until then, where a job each was 80 bytes more,
    // fresh memory that 20,000 leaves paid for (a few milliseconds on this VM).
    if (dst.size() <= group_leaf_bytes && dst.size() == e.length && e.boxes.empty() && e.chunk_xxh3.empty()) {
      if (small_.empty() || small_.back().index != &index) {
        auto it = std::find_if(small_.begin(), small_.end(), [&](const SmallReads& s) { return s.index == &index; });
        if (it == small_.end()) {
          small_.push_back({&index, {}});
          small_.back().reads.reserve(std::exchange(reserve_, 0));
        } else {
          std::rotate(it, it + 1, small_.end());  // the latest index last: the next push finds it at once
        }
      }
      small_.back().reads.push_back({&e, dst, verify});
      return;
    }
    // A large leaf whose format checksums chunks is read as parts, on several threads;
    // the last part counts the leaf as done.
    if (dst.size() == e.length && e.chunk_bytes && dst.size() >= 2 * min_part_bytes && index.reads_parts(e)) {
      const std::size_t part = part_size(dst.size(), e.chunk_bytes);
      for (std::size_t at = 0; at < dst.size(); at += part) {
        const std::size_t n = std::min(part, dst.size() - at);
        jobs_.push_back({&index, &e, dst.subspan(at, n), at, {}, verify, true, at + n == dst.size()});
      }
      return;
    }
    jobs_.push_back({&index, &e, dst, 0, {}, verify, false, true});
  }
  // Parts of one leaf read by one job: the leaf split evenly over the threads, each
  // part a whole number of checksum chunks between these bounds. Parts are long
  // because the kernel's readahead follows each thread's run of reads: a cold restore
  // of one large leaf on two threads came closer to a plain read() the longer its parts.
  // The upper bound keeps progress reports and cancellation within a part's time.
  static constexpr std::uint64_t min_part_bytes = std::uint64_t{8} << 20;
  static constexpr std::uint64_t max_part_bytes = std::uint64_t{256} << 20;
  static constexpr unsigned max_threads = 8;  // reader threads, at most
  static std::size_t part_size(std::size_t leaf_bytes, std::uint64_t chunk_bytes) {
    const std::uint64_t threads = std::clamp(std::thread::hardware_concurrency(), 1u, max_threads);
    const std::uint64_t even = std::clamp<std::uint64_t>(leaf_bytes / threads, min_part_bytes, max_part_bytes);
    return static_cast<std::size_t>(std::max<std::uint64_t>(even / chunk_bytes, 1) * chunk_bytes);
  }

  // Leaves up to this size (stored whole) are read in groups of up to group_leaves
  // leaves or group_bytes bytes: 20,000 leaves of 4 KiB then cost ~80 jobs, not 20,000.
  static constexpr std::size_t group_leaf_bytes = std::size_t{64} << 10;
  static constexpr std::size_t group_leaves = 256;
  static constexpr std::size_t group_bytes = std::size_t{2} << 20;
  // Leaves of a group lie in one file with at most this many bytes between one's end
  // and the next one's start: padding, or a leaf this restore skips no larger than a
  // small one, not a weight matrix.
  static constexpr std::uint64_t group_gap_bytes = std::uint64_t{64} << 10;
  static bool neighbours(const IndexEntry& a, const IndexEntry& b) {
    return a.file == b.file && b.offset >= a.offset + a.length && b.offset - (a.offset + a.length) <= group_gap_bytes;
  }

  // Room for n small reads (a restore knows its index's leaf count): 20,000 pushes then
  // grow nothing, where each doubling copied every queued read to fresh pages.
  void reserve(std::size_t n) { reserve_ = n; }
  // Runs every queued read; rethrows the first failure after all threads stop.
  void run();
  // Whether the last run() read its files as one sequential stream, verifying behind it
  // on a second thread, because they were mostly not in the page cache (see run()).
  bool streamed() const noexcept { return streamed_; }
  // Below this fraction of their pages cached, a restore's files are read as one stream.
  static constexpr double stream_below_cached = 0.5;
  // Reports the reads' progress to fn; the checkpoint names a cancellation.
  void set_progress(ProgressFn fn, std::string checkpoint) {
    progress_fn_ = std::move(fn);
    progress_checkpoint_ = std::move(checkpoint);
  }

 private:
  struct Job {
    const Index* index;
    const IndexEntry* entry;  // null for a group
    std::span<std::byte> dst;
    std::uint64_t offset;  // into the leaf, when part
    // A group of small whole leaves (then entry is null and dst empty), read together
    // (IndexReader::read_group).
    std::span<const LeafRead> group;
    bool verify;
    bool part;
    bool last;  // the leaf's last (or only) job
    std::size_t bytes() const {
      std::size_t n = dst.size();
      for (const LeafRead& r : group) n += r.dst.size();
      return n;
    }
    std::size_t leaves_done() const { return group.empty() ? (last ? 1 : 0) : group.size(); }
  };
  // The small reads of one index, in the order they were pushed until run() sorts them.
  using SmallReadList = std::vector<LeafRead, detail::HugePageAllocator<LeafRead>>;
  struct SmallReads {
    const Index* index;
    SmallReadList reads;  // 20,000: 640 KB, fresh
  };
  static void in_file_order(SmallReadList& reads);
  void group_small_leaves();
  // The jobs read as one stream (in file order) while a second thread verifies behind.
  std::exception_ptr read_as_stream(ProgressTracker* progress);
  void cut_for_stream();
  // The pieces the stream reads a long leaf in (see cut_for_stream): 64 MiB, the size
  // of a plain read() of a cold file, then 4 MiB for the stream's last 64 MiB.
  static constexpr std::size_t stream_piece_bytes = std::size_t{64} << 20;
  static constexpr std::size_t stream_tail_bytes = std::size_t{64} << 20;
  static constexpr std::size_t stream_tail_piece_bytes = std::size_t{4} << 20;
  std::vector<Job> jobs_;
  std::vector<SmallReads> small_;
  std::size_t reserve_ = 0;
  bool streamed_ = false;
  std::size_t bytes_ = 0;
  std::size_t leaves_ = 0;
  ProgressFn progress_fn_;
  std::string progress_checkpoint_;
};

#if CKPT_DEFINE_API
CKPT_API void ReadQueue::run() {
  // Readers that read in batches (object stores) take all of their index's reads at once.
  const Index* first = !jobs_.empty() ? jobs_[0].index : !small_.empty() ? small_[0].index : nullptr;
  if (first && first->reads_in_batches() && (small_.empty() || (small_.size() == 1 && small_[0].index == first)) &&
      std::all_of(jobs_.begin(), jobs_.end(), [&](const Job& j) { return j.index == first; })) {
    std::vector<LeafRead> batch;
    batch.reserve(jobs_.size() + (small_.empty() ? 0 : small_[0].reads.size()));
    for (const Job& j : jobs_) batch.push_back({j.entry, j.dst, j.verify});
    if (!small_.empty()) batch.insert(batch.end(), small_[0].reads.begin(), small_[0].reads.end());
    if (first->read_batch(batch)) {
      jobs_.clear();
      small_.clear();
      bytes_ = 0;
      leaves_ = 0;
      return;
    }
  }
  // Biggest first; the parts of a leaf keep their order (sequential in the file). The
  // groups of small leaves come after them.
  detail::stable_sort_runs(jobs_.begin(), jobs_.end(), [](const Job& a, const Job& b) { return a.dst.size() > b.dst.size(); });
  group_small_leaves();
  // Threads pay off only for sizeable restores.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const unsigned threads = bytes_ < (std::size_t{16} << 20) ? 1u : std::min({cores, max_threads, static_cast<unsigned>(jobs_.size())});
  std::atomic<std::size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  std::optional<ProgressTracker> progress;
  if (progress_fn_) progress.emplace(progress_fn_, bytes_, leaves_, progress_checkpoint_);
  // Files mostly not in the page cache are read as one sequential stream, verified on a
  // second thread behind it, instead of by several threads each reading a part: two
  // threads reading parts of an uncached checkpoint took about twice one stream's time.
  // Only for readers whose checksums are xxh3 (verified from memory here), and leaves
  // stored whole (a boxed leaf's read verifies its boxes as it goes).
  const Index* only = jobs_.empty() ? nullptr : jobs_[0].index;
  streamed_ = threads > 1 && only && only->reader()->has_xxh3() &&
              std::all_of(jobs_.begin(), jobs_.end(),
                          [&](const Job& j) { return j.index == only && (!j.group.empty() || j.entry->boxes.empty()); }) &&
              only->reader()->cached_fraction() < stream_below_cached;
  auto worker = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < jobs_.size();) {
      const Job& j = jobs_[i];
      try {
        if (!j.group.empty()) j.index->read_group(j.group);
        else if (j.part) j.index->read_part(*j.entry, j.offset, j.dst, j.verify);
        else j.index->read(*j.entry, j.dst, j.verify);
        if (progress) progress->add(j.bytes(), j.leaves_done());
      } catch (...) {
        const std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        next = jobs_.size();  // stop handing out work
      }
    }
  };
  if (streamed_) {
    error = read_as_stream(progress ? &*progress : nullptr);
  } else if (threads <= 1) {
    worker();
  } else {
    WorkerThreads pool;
    for (unsigned t = 1; t < threads; ++t) pool.start(worker);
    worker();
  }
  jobs_.clear();
  small_.clear();
  bytes_ = 0;
  leaves_ = 0;
  if (error) std::rethrow_exception(error);
  if (progress) progress->finish();
}

CKPT_API std::exception_ptr ReadQueue::read_as_stream(ProgressTracker* progress) {
  // In file order: each data file front to back, what the kernel's readahead follows.
  const auto where = [&](const Job& j) {
    const IndexEntry& e = j.group.empty() ? *j.entry : *j.group.front().entry;
    return std::tuple(std::string_view(e.file), e.offset + j.offset);
  };
  detail::stable_sort_runs(jobs_.begin(), jobs_.end(), [&](const Job& a, const Job& b) { return where(a) < where(b); });
  cut_for_stream();
  const Index& index = *jobs_[0].index;
  // Jobs read so far, which the verifier waits on; `stopped` once the reader gave up
  // (a failed read, or the verifier's stop) with jobs left unread.
  std::atomic<std::size_t> read{0};
  const std::size_t stopped = jobs_.size() + 1;
  std::atomic<bool> stop{false};  // set when a leaf fails verification (or progress cancels)
  // The next job to verify, claimed by the verifier and, once it has read everything,
  // by the reader too: on two cores the verifier fell behind the reader of a cold
  // checkpoint, which then waited alone for it after its last read.
  std::atomic<std::size_t> claim{0};
  std::exception_ptr read_error, verify_error;
  std::size_t verify_error_job = jobs_.size();
  std::mutex verify_error_mutex;
  // Verifies job i (read already): the checks the reader would have made while reading,
  // made on the bytes in memory, with the same errors naming the leaf.
  const auto verify = [&](std::size_t i) {
    try {
      const Job& j = jobs_[i];
      if (!j.group.empty()) {
        for (const LeafRead& r : j.group)
          if (r.verify) LeafVerifier(index.checkpoint(), *r.entry).update(r.dst);
      } else if (j.verify) {
        LeafVerifier(index.checkpoint(), *j.entry, j.offset).update(j.dst);
      }
      if (progress) progress->add(j.bytes(), j.leaves_done());
      return true;
    } catch (...) {
      const std::lock_guard lock(verify_error_mutex);
      if (i < verify_error_job) verify_error = std::current_exception(), verify_error_job = i;  // the first in file order
      stop.store(true, std::memory_order_release);
      return false;
    }
  };
  {
    WorkerThreads verifier;
    verifier.start([&] {
      for (std::size_t i; !stop.load(std::memory_order_acquire) && (i = claim.fetch_add(1)) < jobs_.size();) {
        std::size_t n = read.load(std::memory_order_acquire);
        while (n <= i) {
          read.wait(n, std::memory_order_acquire);
          n = read.load(std::memory_order_acquire);
        }
        if (n == stopped || !verify(i)) return;
      }
    });
    std::vector<PieceRead> run;
    // A part of a leaf, a whole leaf stored in one piece, or a group of small whole
    // leaves: bytes read as they lie.
    const auto joins_run = [](const Job& j) {
      return !j.group.empty() || j.part || (j.entry->boxes.empty() && j.dst.size() == j.entry->length);
    };
    std::size_t left = 0;  // bytes of the jobs from i on
    for (const Job& j : jobs_) left += j.bytes();
    std::size_t i = 0;
    try {
      while (i < jobs_.size() && !stop.load(std::memory_order_acquire)) {
        const Job& j = jobs_[i];
        std::size_t k = i + 1;
        if (!joins_run(j)) {
          index.read(*j.entry, j.dst, false);
        } else {
          // Neighbouring pieces (cut_for_stream's) read together, up to a piece's size,
          // and not into the stream's tail, whose pieces go to the verifier one by one.
          // A group's small leaves join the run where they lie, a model's biases and
          // norms between its weight matrices: read on their own, each group broke the
          // stream's run into three requests.
          run.clear();
          std::size_t bytes = 0;
          const std::size_t most = left > stream_tail_bytes ? std::min(stream_piece_bytes, left - stream_tail_bytes)
                                                            : stream_tail_piece_bytes;
          for (k = i; k < jobs_.size() && joins_run(jobs_[k]) && (k == i || bytes + jobs_[k].bytes() <= most); ++k) {
            for (const LeafRead& r : jobs_[k].group) run.push_back({r.entry, 0, r.dst});
            if (jobs_[k].group.empty()) run.push_back({jobs_[k].entry, jobs_[k].offset, jobs_[k].dst});
            bytes += jobs_[k].bytes();
          }
          index.read_in_file_order(run);
        }
        for (; i < k; ++i) left -= jobs_[i].bytes();
        read.store(i, std::memory_order_release);
        read.notify_one();
      }
    } catch (...) {
      read_error = std::current_exception();
    }
    if (i < jobs_.size()) {  // gave up early: the verifier must not wait for the rest
      read.store(stopped, std::memory_order_release);
      read.notify_one();
    } else {  // everything read: verify what the verifier has not claimed yet, beside it
      for (std::size_t k; !stop.load(std::memory_order_acquire) && (k = claim.fetch_add(1)) < jobs_.size();)
        if (!verify(k)) break;
    }
  }
  // A bad leaf the verifier found comes before the reader's failure, which the reader
  // met further on (or which the verifier's stop caused).
  return verify_error ? verify_error : read_error;
}

// The stream's long reads cut into pieces that the verifier takes one by one: it then
// hashes a piece while the reader reads the next, where a whole part (half of a 376 MB
// leaf) left it hashing 188 MB after the last byte arrived, a sixth of a cold restore.
// The last stream_tail_bytes are cut finer, since the hash of the last piece is what
// the restore waits for after reading.
CKPT_API void ReadQueue::cut_for_stream() {
  std::size_t left = 0;
  for (const Job& j : jobs_) left += j.bytes();
  std::vector<Job> pieces;
  pieces.reserve(jobs_.size() + left / stream_piece_bytes + stream_tail_bytes / stream_tail_piece_bytes + 2);
  for (const Job& j : jobs_) {
    const IndexEntry* e = j.entry;
    const bool cuttable = j.group.empty() && e->chunk_bytes && (j.part || j.dst.size() == e->length) &&
                          j.dst.size() > stream_tail_piece_bytes && j.index->reads_parts(*e);
    if (!cuttable) {
      pieces.push_back(j);
      left -= j.bytes();
      continue;
    }
    for (std::size_t at = 0; at < j.dst.size();) {
      const std::size_t want = left > stream_tail_bytes ? stream_piece_bytes : stream_tail_piece_bytes;
      const std::size_t n = std::min<std::size_t>(std::max<std::size_t>(want / e->chunk_bytes, 1) * e->chunk_bytes,
                                                  j.dst.size() - at);
      pieces.push_back({j.index, e, j.dst.subspan(at, n), j.offset + at, {}, j.verify, true, j.last && at + n == j.dst.size()});
      at += n;
      left -= n;
    }
  }
  jobs_ = std::move(pieces);
}

// Sorts small reads by file, then offset. A list pushed in path order is in that order
// already when its checkpoint has one data file; with several, the writer spread
// leaves of one size over them by turns, so the list alternates between files, each
// file's reads in offset order. Those are put in their files' buckets (stable, a
// counting sort): a merge sort of 20,000 reads by (file name, offset) was a twentieth
// of restoring them from two files.
CKPT_API void ReadQueue::in_file_order(SmallReadList& reads) {
  const auto before = [](const LeafRead& a, const LeafRead& b) {
    return std::tuple(std::string_view(a.entry->file), a.entry->offset) <
           std::tuple(std::string_view(b.entry->file), b.entry->offset);
  };
  if (std::is_sorted(reads.begin(), reads.end(), before)) return;
  std::vector<std::string_view> files;  // the distinct data files, a handful
  std::vector<std::uint16_t> bucket(reads.size());
  std::size_t last = 0;
  for (std::size_t i = 0; i < reads.size(); ++i) {
    const std::string_view f = reads[i].entry->file;
    if (last < files.size() && files[last] == f) {
      bucket[i] = static_cast<std::uint16_t>(last);
      continue;
    }
    last = static_cast<std::size_t>(std::find(files.begin(), files.end(), f) - files.begin());
    if (last == files.size()) {
      if (files.size() == std::numeric_limits<std::uint16_t>::max()) {  // not a writer's spread: sort
        std::stable_sort(reads.begin(), reads.end(), before);
        return;
      }
      files.push_back(f);
    }
    bucket[i] = static_cast<std::uint16_t>(last);
  }
  // Each file's first place in the sorted list: files by name, then the counts.
  std::vector<std::size_t> order(files.size()), start(files.size() + 1, 0);
  for (std::size_t k = 0; k < files.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return files[a] < files[b]; });
  std::vector<std::size_t> rank(files.size());
  for (std::size_t k = 0; k < order.size(); ++k) rank[order[k]] = k;
  for (const std::uint16_t b : bucket) ++start[rank[b] + 1];
  for (std::size_t k = 1; k < start.size(); ++k) start[k] += start[k - 1];
  SmallReadList sorted(reads.size());
  std::vector<std::size_t> next(start.begin(), start.end() - 1);
  for (std::size_t i = 0; i < reads.size(); ++i) sorted[next[rank[bucket[i]]]++] = reads[i];
  reads.swap(sorted);
  // Within a file, offsets ascend when the list came in the writer's order; else sort.
  for (std::size_t k = 0; k + 1 < start.size(); ++k) {
    const auto first = reads.begin() + static_cast<std::ptrdiff_t>(start[k]);
    const auto end = reads.begin() + static_cast<std::ptrdiff_t>(start[k + 1]);
    if (!std::is_sorted(first, end, before)) std::stable_sort(first, end, before);
  }
}

// Each index's small whole leaves, in file order, cut into groups that read_group reads
// together; a group of one is a job of its own.
CKPT_API void ReadQueue::group_small_leaves() {
  for (SmallReads& s : small_) {
    // File order makes neighbours neighbours in a group, which the reader then fetches
    // with one read; a list of leaves is pushed in this order already (one run: no sort).
    // A group holds neighbours only: small leaves with large ones between them (a
    // model's biases and norms between its weight matrices) were one group spanning
    // the whole file, which a cold restore's stream read at the first one's place,
    // a hundred scattered reads from disk before its sequential pass (bench_restore's
    // GPT-2 layout, cold and warm, is measurably slower that way).
    auto& reads = s.reads;
    in_file_order(reads);
    for (std::size_t i = 0; i < reads.size();) {
      std::size_t k = i;
      std::size_t bytes = 0;
      while (k < reads.size() && k - i < group_leaves && bytes < group_bytes &&
             (k == i || neighbours(*reads[k - 1].entry, *reads[k].entry)))
        bytes += reads[k++].dst.size();
      if (k - i == 1) jobs_.push_back({s.index, reads[i].entry, reads[i].dst, 0, {}, reads[i].verify, false, true});
      else jobs_.push_back({s.index, nullptr, {}, 0, std::span<const LeafRead>(reads).subspan(i, k - i), false, false, true});
      i = k;
    }
  }
}
#endif

}  // namespace ckpt::exec
