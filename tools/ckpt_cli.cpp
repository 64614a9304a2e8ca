// tools/ckpt_cli.cpp — the `ckpt` command: look into, check, compare and convert
// checkpoints of any format ckpt reads (native, Orbax, t5x, zarr, Flax msgpack).
//
//   ckpt ls ROOT                 steps with time, size, metrics
//   ckpt tree PATH [--json]      leaves with dtype, shape, bytes
//   ckpt show PATH LEAF [--json] [-n N]   min, max, mean, std and the first values
//   ckpt verify PATH             reads everything, checks checksums (exit 1: broken leaves)
//   ckpt du PATH [--depth N] [--json]   bytes and elements per subtree, largest first (a root: per step)
//   ckpt stats PATH [--json] [--max-memory B]   NaN/Inf counts, min, max, mean, std, L2 per leaf and subtree
//   ckpt diff A B [--rel] [--json]   added, removed and changed leaves; --rel: how far each leaf moved
//   ckpt report PATH -o FILE [--tensorboard DIR]   one HTML page: bytes, statistics, metrics, norms, changes (report.hpp)
//   ckpt convert SRC DST --to native|flax|t5x|orbax|zarr
//   ckpt gc DIR [--dry-run]      deletes what killed saves left in DIR (stale .tmp-* directories)
// Every PATH, ROOT, SRC and DST may be an s3://bucket/prefix URL (endpoint and
// credentials from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...) when the tool is built with
// libcurl (the CMake target ckpt::s3), or a gs://bucket/prefix URL (Google's credential
// chain; STORAGE_EMULATOR_HOST) when built with ckpt::gcs.
// verify, stats, diff and convert draw a progress bar on stderr when it is a terminal
// (--quiet: never). ls --json carries each step's save figures when the manager stored them.
// Bad input: a message on stderr and exit code 2. Names and strings from a checkpoint
// are printed made printable (no terminal control characters, invalid UTF-8 replaced).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <ckpt/all.hpp>  // every format, the manager, convert, leaf statistics
#if defined(CKPT_HAVE_S3)
#include <ckpt/storage/s3.hpp>
#endif
#if defined(CKPT_HAVE_GCS)
#include <ckpt/storage/gcs.hpp>
#endif

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <limits>

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct BadInput : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// JSON output: strings from a checkpoint need not be UTF-8; those bytes become U+FFFD.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// A name or string from a checkpoint for the terminal: control characters and invalid
// UTF-8 as \xNN, long ones cut.
std::string printable(std::string_view s, std::size_t max = 200) { return ckpt::detail::safe_text(s, max); }

// Element i of a numeric leaf as (re, im); im is 0 for real dtypes.
std::pair<double, double> element(const std::vector<std::byte>& b, ckpt::dtype d, std::size_t i) {
  return ckpt::visit_element_type(d, [&](auto tag) -> std::pair<double, double> {
    using E = typename decltype(tag)::type;
    if constexpr (std::is_void_v<E>) {
      return {0, 0};
    } else if constexpr (std::is_same_v<E, bool>) {  // any byte but 0 is true; a bool read from 2 would be UB
      return {std::to_integer<int>(b[i]) != 0, 0};
    } else {
      E v;
      std::memcpy(&v, b.data() + i * sizeof(E), sizeof(E));
      if constexpr (requires { v.imag(); }) return {v.real(), v.imag()};
      else if constexpr (std::is_same_v<E, ckpt::float16> || std::is_same_v<E, ckpt::bfloat16>) return {static_cast<float>(v), 0};
      else return {static_cast<double>(v), 0};
    }
  });
}

// Element i as JSON, exactly (integers stay integers; NaN and infinities become null).
json element_json(const std::vector<std::byte>& b, ckpt::dtype d, std::size_t i) {
  auto num = [](double x) -> json { return std::isfinite(x) ? json(x) : json(nullptr); };
  return ckpt::visit_element_type(d, [&](auto tag) -> json {
    using E = typename decltype(tag)::type;
    if constexpr (std::is_void_v<E>) {
      return nullptr;
    } else if constexpr (std::is_same_v<E, bool>) {
      return std::to_integer<int>(b[i]) != 0;
    } else if constexpr (std::is_integral_v<E>) {
      E v;
      std::memcpy(&v, b.data() + i * sizeof(E), sizeof(E));
      return v;
    } else if (ckpt::is_complex(d)) {
      auto [re, im] = element(b, d, i);
      return json::array({num(re), num(im)});
    } else {
      return num(element(b, d, i).first);
    }
  });
}

std::string fmt(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

std::string human_bytes(std::uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double x = static_cast<double>(n);
  int u = 0;
  while (x >= 1024 && u < 4) { x /= 1024; ++u; }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", x, units[u]);
  return buf;
}

std::uint64_t disk_size(const fs::path& p) {
  std::error_code ec;
  if (fs::is_regular_file(p, ec)) return fs::file_size(p, ec);
  std::uint64_t n = 0;
  for (fs::recursive_directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    if (it->is_regular_file(e2)) n += it->file_size(e2);
  }
  return n;
}

std::shared_ptr<const ckpt::Index> open(const fs::path& p) { return ckpt::open_index(p); }

// A progress bar on stderr, only when stderr is a terminal and --quiet was not given;
// redrawn at most every 100 ms, erased when done.
bool quiet = false;
class Bar {
 public:
  Bar(std::string what, std::uint64_t total) : what_(std::move(what)), total_(total), on_(!quiet && ::isatty(2) == 1) {}
  Bar(const Bar&) = delete;
  Bar& operator=(const Bar&) = delete;
  ~Bar() {
    if (on_ && drawn_) std::fprintf(stderr, "\r\033[K");
  }
  void set(std::uint64_t done) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    if (drawn_ && now - last_ < std::chrono::milliseconds(100) && done < total_) return;
    last_ = now;
    drawn_ = true;
    const double f = total_ ? static_cast<double>(std::min(done, total_)) / static_cast<double>(total_) : 1.0;
    const int width = 30, fill = static_cast<int>(f * width);
    std::fprintf(stderr, "\r%s [%s%s] %3.0f%% %s / %s\033[K", what_.c_str(), std::string(static_cast<std::size_t>(fill), '#').c_str(),
                 std::string(static_cast<std::size_t>(width - fill), '.').c_str(), f * 100, human_bytes(done).c_str(),
                 human_bytes(total_).c_str());
  }
  void add(std::uint64_t n) { set(done_ += n); }
  void set_total(std::uint64_t total) { total_ = total; }

 private:
  std::string what_;
  std::uint64_t total_, done_ = 0;
  bool on_, drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
};

std::uint64_t total_bytes(const ckpt::Index& index) {
  std::uint64_t n = 0;
  for (const auto& e : index.entries()) n += e.length;
  return n;
}

// A leaf's bytes front to back, a piece at a time, verified as they pass (the leaf's
// checksum, native checkpoints), so that a leaf of any size is read through one buffer:
// ranges where the format reads them (ckpt::convert's stream), rows of the global array
// for a leaf stored as boxes (Sharded, saved by several processes); a format that reads
// only whole leaves holds the leaf, which must then fit `whole_limit` (0: no limit).
class LeafPieces {
 public:
  LeafPieces(const std::shared_ptr<const ckpt::Index>& index, const ckpt::IndexEntry& e, std::size_t piece,
             std::uint64_t whole_limit)
      : index_(*index), e_(e) {
    const std::size_t z = std::max<std::size_t>(ckpt::dtype_size(e.type), 1);
    piece = std::max(piece / z * z, z);
    if (!e.boxes.empty() && !e.shape.empty()) {
      row_bytes_ = static_cast<std::uint64_t>(std::max<std::int64_t>(ckpt::element_count(std::span(e.shape).subspan(1)), 0)) * z;
      rows_ = std::max<std::uint64_t>(1, row_bytes_ ? piece / row_bytes_ : 1);
      if (whole_limit && rows_ * row_bytes_ > 2 * whole_limit)
        throw ckpt::Error(index->checkpoint(), e.path.str(),
                          "one row of this leaf (" + std::to_string(row_bytes_) + " bytes) does not fit the memory budget");
      buf_.resize(static_cast<std::size_t>(std::min<std::uint64_t>(rows_ * row_bytes_, e.length)));
      return;
    }
    if (!index->reads_pieces(e) && whole_limit && e.length > whole_limit)
      throw ckpt::Error(index->checkpoint(), e.path.str(),
                        "the " + index->info().format + " reader reads this leaf whole (" + std::to_string(e.length) +
                            " bytes), more than the memory budget allows (" + std::to_string(whole_limit) +
                            " bytes; raise --max-memory)");
    stream_ = std::make_unique<ckpt::detail::IndexLeafStream>(index, e);
    buf_.resize(static_cast<std::size_t>(std::min<std::uint64_t>(piece, e.length)));
  }
  // The next piece (whole elements), valid until the next call; empty at the end.
  std::span<const std::byte> next() {
    if (at_ >= e_.length) return {};
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(buf_.size(), e_.length - at_));
    const auto dst = std::span(buf_).first(n);
    if (stream_) {
      stream_->read(at_, dst);
    } else {
      ckpt::Shape origin(e_.shape.size(), 0), shape = e_.shape;
      origin[0] = static_cast<std::int64_t>(at_ / row_bytes_);
      shape[0] = static_cast<std::int64_t>(n / row_bytes_);
      index_.read_box(e_, origin, shape, dst, true);
    }
    at_ += n;
    return dst;
  }

 private:
  const ckpt::Index& index_;
  const ckpt::IndexEntry& e_;
  std::unique_ptr<ckpt::detail::IndexLeafStream> stream_;
  std::uint64_t row_bytes_ = 0, rows_ = 0, at_ = 0;
  std::vector<std::byte> buf_;
};

// The piece a streaming command reads at a time: 16 MiB, or a quarter of --max-memory
// (at least 64 KiB, a multiple of every element size).
std::size_t piece_bytes(std::uint64_t max_memory, unsigned share) {
  constexpr std::uint64_t unit = 64 << 10, most = std::uint64_t{16} << 20;
  if (max_memory == 0) return static_cast<std::size_t>(most);
  return static_cast<std::size_t>(std::clamp<std::uint64_t>(max_memory / share / unit * unit, unit, most));
}

json num_or_null(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

// A checkpoint rather than a directory of them: a format recognises it (an object-store
// URL: it carries a commit marker).
bool is_checkpoint(const fs::path& p) {
  if (ckpt::storage::is_url(p)) return ckpt::storage::is_committed(ckpt::storage::open_location(p));
  return !ckpt::detect_format(p).empty();
}

// The steps of a manager's root, as `ckpt ls` lists them: (name, path), by step number.
std::vector<std::pair<std::string, fs::path>> steps_of(const fs::path& root) {
  std::vector<std::pair<std::string, fs::path>> out;
  if (ckpt::storage::is_url(root)) {
    const auto loc = ckpt::storage::open_location(root);
    for (const auto& name : loc.storage->children(loc.prefix))
      if (!name.empty() && name[0] != '.' && ckpt::storage::is_committed(loc.child(name)))
        out.emplace_back(name, fs::path(root.string() + "/" + name));
  } else {
    std::error_code ec;
    for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      std::error_code e2;
      // a step is a directory of ROOT, as the manager sees it
      if (name.empty() || name[0] == '.' || it->is_symlink(e2) || ckpt::detect_format(it->path()).empty()) continue;
      out.emplace_back(name, it->path());
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return std::pair(ckpt::StepNaming::trailing_step(a.first).value_or(-1), a.first) <
           std::pair(ckpt::StepNaming::trailing_step(b.first).value_or(-1), b.first);
  });
  return out;
}

// What a checkpoint's files take on disk (object store: its objects), compressed or not.
std::uint64_t stored_size(const fs::path& p) {
  if (!ckpt::storage::is_url(p)) return disk_size(p);
  const auto loc = ckpt::storage::open_location(p);
  std::uint64_t n = 0;
  for (const auto& k : loc.storage->list(loc.prefix.empty() ? "" : loc.prefix + "/")) n += loc.storage->size(k).value_or(0);
  return n;
}

// The leaf's bytes as stored: a boxed leaf's boxes (replicas counted), else its length.
std::uint64_t leaf_bytes(const ckpt::IndexEntry& e) {
  if (e.boxes.empty()) return e.length;
  std::uint64_t n = 0;
  for (const auto& b : e.boxes) n += b.bytes.length;
  return n;
}

std::uint64_t leaf_elements(const ckpt::IndexEntry& e) {
  if (e.type == ckpt::dtype::none) return 0;
  if (e.type == ckpt::dtype::string) return 1;
  return static_cast<std::uint64_t>(std::max<std::int64_t>(ckpt::element_count(e.shape), 0));
}

ckpt::Path child_path(const ckpt::Path& p, const std::string& seg) {
  auto s = p.segments();
  s.push_back(seg);
  return ckpt::Path(std::move(s));
}

// du: the subtree at p as {name, path, bytes, elements, leaves, dtypes, children}, its
// children largest first; below `depth` levels the children are summed, not listed.
json du_node(const ckpt::Index& index, const ckpt::Path& p, int depth) {
  json n = {{"name", p.segments().empty() ? std::string() : p.segments().back()}, {"path", p.str()}};
  if (const ckpt::IndexEntry* e = index.find(p)) {
    n["bytes"] = leaf_bytes(*e);
    n["elements"] = leaf_elements(*e);
    n["leaves"] = 1;
    n["dtypes"] = json{{std::string(ckpt::dtype_name(e->type)), leaf_bytes(*e)}};
    n["dtype"] = std::string(ckpt::dtype_name(e->type));
    n["shape"] = e->shape;
    return n;
  }
  std::uint64_t bytes = 0, elements = 0, leaves = 0;
  json dtypes = json::object(), children = json::array();
  index.for_each_child(p, [&](const std::string& seg) {
    json c = du_node(index, child_path(p, seg), depth - 1);
    bytes += c["bytes"].get<std::uint64_t>();
    elements += c["elements"].get<std::uint64_t>();
    leaves += c["leaves"].get<std::uint64_t>();
    for (const auto& [k, v] : c["dtypes"].items()) dtypes[k] = dtypes.value(k, std::uint64_t{0}) + v.get<std::uint64_t>();
    children.push_back(std::move(c));
    return true;
  });
  std::stable_sort(children.begin(), children.end(),
                   [](const json& a, const json& b) { return a["bytes"].get<std::uint64_t>() > b["bytes"].get<std::uint64_t>(); });
  n["bytes"] = bytes;
  n["elements"] = elements;
  n["leaves"] = leaves;
  n["dtypes"] = dtypes;
  if (depth > 0) n["children"] = std::move(children);
  return n;
}

// The dtypes of a du node, most bytes first: "float32,int64".
std::string dtype_list(const json& dtypes) {
  std::vector<std::pair<std::uint64_t, std::string>> v;
  for (const auto& [k, b] : dtypes.items()) v.emplace_back(b.get<std::uint64_t>(), k);
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string s;
  for (const auto& [b, k] : v) s += (s.empty() ? "" : ",") + k;
  return s;
}

void print_du(const json& n, int indent) {
  std::string name = std::string(static_cast<std::size_t>(2 * indent), ' ') +
                     printable(n["path"].get<std::string>().empty() ? "." : n["path"].get<std::string>());
  if (n.contains("shape")) name += ckpt::shape_str(n["shape"].get<ckpt::Shape>());
  std::printf("%10s %14llu  %-50s %s\n", human_bytes(n["bytes"].get<std::uint64_t>()).c_str(),
              static_cast<unsigned long long>(n["elements"].get<std::uint64_t>()), name.c_str(),
              dtype_list(n["dtypes"]).c_str());
  if (n.contains("children"))
    for (const auto& c : n["children"]) print_du(c, indent + 1);
}

json du_checkpoint(const fs::path& p, int depth) {
  const auto index = open(p);
  json n = du_node(*index, ckpt::Path(), depth);
  n["format"] = index->info().format;
  n["on_disk"] = stored_size(p);
  return n;
}

// A manager's root: a directory (or URL prefix) that is no checkpoint itself but holds steps.
bool is_root(const fs::path& p) {
  std::error_code ec;
  return !is_checkpoint(p) && (ckpt::storage::is_url(p) || fs::is_directory(p, ec)) && !steps_of(p).empty();
}

int cmd_du(const fs::path& p, int depth, bool as_json) {
  if (depth < 0) depth = std::numeric_limits<int>::max();
  if (!is_root(p)) {
    const json n = du_checkpoint(p, depth);
    if (as_json) {
      std::cout << dump(n) << "\n";
      return 0;
    }
    print_du(n, 0);
    std::printf("%llu leaves, %s of data, %s on disk (%s format)\n",
                static_cast<unsigned long long>(n["leaves"].get<std::uint64_t>()),
                human_bytes(n["bytes"].get<std::uint64_t>()).c_str(), human_bytes(n["on_disk"].get<std::uint64_t>()).c_str(),
                n["format"].get<std::string>().c_str());
    return 0;
  }
  json steps = json::array();
  std::uint64_t bytes = 0, on_disk = 0;
  for (const auto& [name, path] : steps_of(p)) {
    json n = du_checkpoint(path, depth);
    const auto step = ckpt::StepNaming::trailing_step(name);
    n["name"] = name;
    n["step"] = step ? json(*step) : json(nullptr);
    n["path"] = "";
    bytes += n["bytes"].get<std::uint64_t>();
    on_disk += n["on_disk"].get<std::uint64_t>();
    steps.push_back(std::move(n));
  }
  if (as_json) {
    std::cout << dump(json{{"root", p.string()}, {"bytes", bytes}, {"on_disk", on_disk}, {"steps", steps}}) << "\n";
    return 0;
  }
  for (const auto& s : steps) {
    std::printf("step %s (%s format, %s on disk)\n", printable(s["name"].get<std::string>()).c_str(),
                s["format"].get<std::string>().c_str(), human_bytes(s["on_disk"].get<std::uint64_t>()).c_str());
    print_du(s, 1);
  }
  std::printf("%zu steps, %s of data, %s on disk\n", steps.size(), human_bytes(bytes).c_str(), human_bytes(on_disk).c_str());
  return 0;
}

// ---------------------------------------------------------------------------------

json stats_json(const ckpt::ValueStats& s) {
  return {{"elements", s.elements()}, {"nan", s.nan()},         {"inf", s.inf()},
          {"min", num_or_null(s.min())}, {"max", num_or_null(s.max())}, {"mean", num_or_null(s.mean())},
          {"std", num_or_null(s.stddev())}, {"l2", num_or_null(s.l2())}};
}

struct StatsWalk {
  const ckpt::Index& index;
  const std::vector<ckpt::ValueStats>& leaf;  // by entry number
  json leaves = json::array(), subtrees = json::array();

  // The statistics of the subtree at p; appends its rows in path order (a subtree before its leaves).
  ckpt::ValueStats walk(const ckpt::Path& p) {
    if (const ckpt::IndexEntry* e = index.find(p)) {
      const ckpt::ValueStats& s = leaf[static_cast<std::size_t>(e - index.entries().data())];
      json row = {{"path", p.str()}, {"dtype", std::string(ckpt::dtype_name(e->type))}, {"shape", e->shape}};
      if (ckpt::stats_supported(e->type)) row.update(stats_json(s));
      else row["skipped"] = "no values to sum (" + std::string(ckpt::dtype_name(e->type)) + ")";
      leaves.push_back(std::move(row));
      return s;
    }
    const std::size_t at = subtrees.size();
    subtrees.push_back(nullptr);
    ckpt::ValueStats sum;
    std::uint64_t n = 0;
    index.for_each_child(p, [&](const std::string& seg) {
      const std::size_t before = leaves.size();
      sum.merge(walk(child_path(p, seg)));
      n += leaves.size() - before;
      return true;
    });
    json row = {{"path", p.str()}, {"leaves", n}};
    row.update(stats_json(sum));
    subtrees[at] = std::move(row);
    return sum;
  }
};

std::string cell(const json& x) { return x.is_null() ? "-" : fmt(x.get<double>()); }

// The statistics of every leaf and subtree of a checkpoint, in one pass over its values
// (half of max_memory for the buffer, half for a leaf its format reads whole).
struct StatsTable {
  json leaves, subtrees;  // rows in path order, as StatsWalk makes them
  ckpt::ValueStats total;
};
StatsTable stats_table(const std::shared_ptr<const ckpt::Index>& index, std::uint64_t max_memory, Bar& bar) {
  const std::size_t piece = piece_bytes(max_memory, 2);
  std::vector<ckpt::ValueStats> leaf(index->entries().size());
  for (std::size_t i = 0; i < leaf.size(); ++i) {
    const ckpt::IndexEntry& e = index->entries()[i];
    if (!ckpt::stats_supported(e.type)) {
      bar.add(e.length);
      continue;
    }
    LeafPieces pieces(index, e, piece, max_memory ? std::max<std::uint64_t>(max_memory / 2, 1) : 0);
    for (auto b = pieces.next(); !b.empty(); b = pieces.next()) {
      leaf[i].add(e.type, b);
      bar.add(b.size());
    }
  }
  StatsWalk w{*index, leaf};
  const ckpt::ValueStats total = w.walk(ckpt::Path());
  return {std::move(w.leaves), std::move(w.subtrees), total};
}

int cmd_stats(const fs::path& p, bool as_json, std::uint64_t max_memory) {
  if (is_root(p)) {
    const auto steps = steps_of(p);
    throw BadInput(p.string() + ": a directory of " + std::to_string(steps.size()) +
                   " step checkpoints, not one; give one of them (" + printable(steps.back().second.string()) + ")");
  }
  const auto index = open(p);
  StatsTable w;
  {
    Bar bar("stats", total_bytes(*index));
    w = stats_table(index, max_memory, bar);
  }
  const ckpt::ValueStats& total = w.total;
  std::vector<std::string> bad;
  for (const auto& l : w.leaves)
    if (l.value("nan", 0) + l.value("inf", 0) > 0) bad.push_back(l["path"].get<std::string>());
  if (as_json) {
    std::cout << dump(json{{"format", index->info().format}, {"leaves", w.leaves}, {"subtrees", w.subtrees}}) << "\n";
  } else {
    std::printf("%-40s %-10s %-14s %12s %8s %8s %12s %12s %12s %12s %12s\n", "PATH", "DTYPE", "SHAPE", "ELEMENTS", "NAN", "INF",
                "MIN", "MAX", "MEAN", "STD", "L2");
    std::size_t s = 0, l = 0;
    // Rows in path order: each subtree's row before its leaves' (both lists are in that order).
    auto row = [&](const json& r, bool subtree) {
      const std::string path = r["path"].get<std::string>().empty() ? "." : r["path"].get<std::string>();
      if (r.contains("skipped")) {
        std::printf("%-40s %-10s %-14s (%s)\n", printable(path).c_str(), r["dtype"].get<std::string>().c_str(),
                    ckpt::shape_str(r["shape"].get<ckpt::Shape>()).c_str(), r["skipped"].get<std::string>().c_str());
        return;
      }
      std::printf("%-40s %-10s %-14s %12llu %8llu %8llu %12s %12s %12s %12s %12s\n", printable(path).c_str(),
                  subtree ? "" : r["dtype"].get<std::string>().c_str(),
                  subtree ? ("(" + std::to_string(r["leaves"].get<std::uint64_t>()) + " leaves)").c_str()
                          : ckpt::shape_str(r["shape"].get<ckpt::Shape>()).c_str(),
                  static_cast<unsigned long long>(r["elements"].get<std::uint64_t>()),
                  static_cast<unsigned long long>(r["nan"].get<std::uint64_t>()),
                  static_cast<unsigned long long>(r["inf"].get<std::uint64_t>()), cell(r["min"]).c_str(), cell(r["max"]).c_str(),
                  cell(r["mean"]).c_str(), cell(r["std"]).c_str(), cell(r["l2"]).c_str());
    };
    // Interleave: a subtree's path is a prefix of the leaves that follow it.
    auto under = [](const std::string& leaf, const std::string& sub) {
      return sub.empty() || (leaf.size() > sub.size() && leaf.compare(0, sub.size(), sub) == 0 && leaf[sub.size()] == '.');
    };
    while (s < w.subtrees.size() || l < w.leaves.size()) {
      if (s < w.subtrees.size() && (l == w.leaves.size() || under(w.leaves[l]["path"].get<std::string>(),
                                                                  w.subtrees[s]["path"].get<std::string>())))
        row(w.subtrees[s++], true);
      else
        row(w.leaves[l++], false);
    }
    std::printf("%zu leaves, %llu elements, %llu NaN, %llu Inf\n", w.leaves.size(),
                static_cast<unsigned long long>(total.elements()), static_cast<unsigned long long>(total.nan()),
                static_cast<unsigned long long>(total.inf()));
    if (!bad.empty()) {
      std::string list;
      for (const auto& b : bad) list += (list.empty() ? "" : ", ") + printable(b);
      std::fprintf(stderr, "%s: %zu leaves hold NaN or Inf: %s\n", p.c_str(), bad.size(), list.c_str());
    }
  }
  return bad.empty() ? 0 : 1;
}

// ---------------------------------------------------------------------------------

struct Row { std::string name; std::int64_t step; std::string format, time; std::uint64_t size; json metrics, save_stats; bool finite; };

std::string format_time(std::time_t t) {
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return buf;
}

// A step's metrics and save figures, read as the manager reads them (as Orbax does:
// _CHECKPOINT_METADATA's metrics, else the step's Orbax metrics item; a malformed
// metrics item is an error naming the step).
ckpt::detail::manager::StepInfo add_step_info(Row& r, const ckpt::storage::Location& step) {
  auto info = ckpt::detail::manager::load_step_info(step, r.name);
  for (const auto& [k, v] : info.metrics) r.metrics[k] = v;
  r.save_stats = info.save_stats;
  r.finite = info.finite;  // false: the manager's guard_non_finite found NaN or infinities
  return info;
}

// The committed checkpoints (those with a commit marker) one level under an s3:// or gs:// root.
std::vector<Row> object_rows(const fs::path& root) {
  const auto loc = ckpt::storage::open_location(root);
  std::vector<Row> rows;
  for (const auto& name : loc.storage->children(loc.prefix)) {
    const auto step = loc.child(name);
    if (name.empty() || name[0] == '.' || !loc.storage->size(step.key(ckpt::storage::commit_marker))) continue;
    Row r{name, ckpt::StepNaming::trailing_step(name).value_or(-1), "native", "", 0, json::object(), nullptr, true};
    if (!loc.storage->size(step.key(ckpt::detail::native::commit_file))) r.format = "other";  // telling which would download it
    for (const auto& o : loc.storage->list_sizes(step.prefix + "/")) r.size += o.size;  // one listing, not a request per object
    const auto info = add_step_info(r, step);
    if (info.time != std::chrono::system_clock::time_point{})  // from _CHECKPOINT_METADATA: an object has no time
      r.time = format_time(std::chrono::system_clock::to_time_t(info.time));
    rows.push_back(std::move(r));
  }
  return rows;
}

int cmd_ls(const fs::path& root, bool as_json) {
  std::error_code ec;
  const bool url = ckpt::storage::is_url(root);
  if (!url && !fs::is_directory(root, ec)) throw BadInput(root.string() + ": not a directory");
  std::vector<Row> rows;
  const auto dir = url ? ckpt::storage::Location{} : ckpt::storage::directory_location(root);
  if (url) rows = object_rows(root);
  else for (const auto& [name, path] : steps_of(root)) {
    Row r{name, ckpt::StepNaming::trailing_step(name).value_or(-1), ckpt::detect_format(path), "", disk_size(path),
          json::object(), nullptr, true};
    const auto mtime = fs::last_write_time(path, ec);
    const auto sys = std::chrono::time_point_cast<std::chrono::seconds>(
        mtime - fs::file_time_type::clock::now() + std::chrono::system_clock::now());
    const std::time_t t = std::chrono::system_clock::to_time_t(sys);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
    r.time = buf;
    add_step_info(r, dir.child(name));
    rows.push_back(std::move(r));
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return std::tie(a.step, a.name) < std::tie(b.step, b.name);
  });
  if (as_json) {
    json out = json::array();
    for (const auto& r : rows)
      out.push_back({{"name", r.name}, {"step", r.step >= 0 ? json(r.step) : json(nullptr)}, {"format", r.format},
                     {"time", r.time}, {"bytes", r.size}, {"metrics", r.metrics}, {"finite", r.finite}});
    for (std::size_t i = 0; i < rows.size(); ++i)  // the manager's save figures (issue 11), when stored
      if (!rows[i].save_stats.is_null()) {
        out[i]["save_seconds"] = rows[i].save_stats.value("write_seconds", 0.0);
        out[i]["save_stats"] = rows[i].save_stats;
      }
    std::cout << dump(json{{"steps", out}}) << "\n";
    return 0;
  }
  for (const auto& r : rows) {
    std::string m;
    for (const auto& [k, v] : r.metrics.items()) m += (m.empty() ? "" : "  ") + printable(k) + "=" + dump(v);
    if (!r.finite) {  // first: what a person looking for the step to restore after a divergence must see
      const auto count = [&](const char* key) { return r.save_stats.is_object() ? r.save_stats.value(key, json(0)) : json(0); };
      m = "NON-FINITE(" + dump(count("non_finite_values")) + " values, " + dump(count("non_finite_metrics")) +
          " metrics)" + (m.empty() ? "" : "  ") + m;
    }
    std::printf("%-20s %-7s %s %10s  %s\n", printable(r.name).c_str(), r.format.c_str(), r.time.c_str(),
                human_bytes(r.size).c_str(), m.c_str());
  }
  return 0;
}

int cmd_tree(const fs::path& p, bool as_json) {
  const auto index = open(p);
  if (as_json) {
    json leaves = json::array();
    for (const auto& e : index->entries())
      leaves.push_back({{"path", e.path.str()}, {"dtype", std::string(ckpt::dtype_name(e.type))}, {"shape", e.shape},
                        {"bytes", e.length}});
    std::cout << dump(json{{"format", index->info().format}, {"leaves", leaves}}) << "\n";
    return 0;
  }
  std::uint64_t total = 0;
  for (const auto& e : index->entries()) {
    std::printf("%-50s %-10s %-16s %12llu\n", printable(e.path.str()).c_str(), std::string(ckpt::dtype_name(e.type)).c_str(),
                ckpt::shape_str(e.shape).c_str(), static_cast<unsigned long long>(e.length));
    total += e.length;
  }
  std::printf("%zu leaves, %s (%s format)\n", index->entries().size(), human_bytes(total).c_str(),
              index->info().format.c_str());
  return 0;
}

int cmd_show(const fs::path& p, const std::string& leaf, bool as_json, std::size_t first) {
  const auto index = open(p);
  const ckpt::IndexEntry* e = index->find(ckpt::Path::parse(leaf));
  if (!e) throw BadInput(p.string() + ": no leaf " + printable(leaf));
  std::vector<std::byte> b(static_cast<std::size_t>(e->length));
  index->read(*e, b);
  if (as_json) {
    json values = json::array();
    if (e->type == ckpt::dtype::string) values.push_back(std::string(reinterpret_cast<const char*>(b.data()), b.size()));
    else if (ckpt::is_numeric(e->type))
      for (std::size_t i = 0; i < b.size() / ckpt::dtype_size(e->type); ++i) values.push_back(element_json(b, e->type, i));
    std::cout << dump(json{{"path", e->path.str()}, {"dtype", std::string(ckpt::dtype_name(e->type))}, {"shape", e->shape},
                           {"values", values}})
              << "\n";
    return 0;
  }
  std::printf("%s: %s %s, %llu bytes\n", printable(e->path.str()).c_str(), std::string(ckpt::dtype_name(e->type)).c_str(),
              ckpt::shape_str(e->shape).c_str(), static_cast<unsigned long long>(e->length));
  if (e->type == ckpt::dtype::string) {
    std::printf("%s\n", dump(json(std::string(reinterpret_cast<const char*>(b.data()), b.size()))).c_str());
    return 0;
  }
  if (!ckpt::is_numeric(e->type)) return 0;
  const std::size_t n = b.size() / ckpt::dtype_size(e->type);
  const bool cplx = e->type == ckpt::dtype::complex64 || e->type == ckpt::dtype::complex128;
  if (n > 0 && !cplx && ckpt::stats_supported(e->type)) {  // the figures `ckpt stats` prints, of the finite values
    ckpt::ValueStats st;
    st.add(e->type, b);
    std::printf("min %s  max %s  mean %s  std %s", fmt(st.min()).c_str(), fmt(st.max()).c_str(), fmt(st.mean()).c_str(),
                fmt(st.stddev()).c_str());
    if (st.nan() + st.inf()) std::printf("  (%llu NaN, %llu Inf)", static_cast<unsigned long long>(st.nan()),
                                         static_cast<unsigned long long>(st.inf()));
    std::printf("\n");
  }
  std::string vals = "[";
  for (std::size_t i = 0; i < std::min(n, first); ++i) {
    auto [re, im] = element(b, e->type, i);
    vals += (i ? ", " : "") + (cplx ? fmt(re) + (im < 0 ? "" : "+") + fmt(im) + "j" : fmt(re));
  }
  std::printf("%s%s]\n", vals.c_str(), n > first ? ", ..." : "");
  return 0;
}

int cmd_verify(const fs::path& p) {
  const auto index = open(p);
  std::vector<std::string> broken;
  std::uint64_t total = 0;
  Bar bar("verify", total_bytes(*index));
  for (const auto& e : index->entries()) {
    bar.add(e.length);
    try {
      std::vector<std::byte> b(static_cast<std::size_t>(e.length));
      index->read(e, b, true);
      if (!e.boxes.empty()) index->check_box_checksums(e);  // what reads of parts of a box trust
      total += e.length;
    } catch (const ckpt::Error& err) {
      broken.push_back(printable(e.path.str()));
      std::fprintf(stderr, "%s\n", err.what());
    }
  }
  if (!broken.empty()) {
    std::string list;
    for (const auto& b : broken) list += (list.empty() ? "" : ", ") + b;
    std::fprintf(stderr, "%s: %zu broken leaves: %s\n", p.c_str(), broken.size(), list.c_str());
    return 1;
  }
  std::printf("%s: %zu leaves, %s, all intact%s\n", p.c_str(), index->entries().size(), human_bytes(total).c_str(),
              index->info().format == "ckpt-native" ? " (checksums match)" : " (decoded; this format has no checksums)");
  return 0;
}

// How far a numeric leaf moved from a to b, both read a piece at a time in step:
// ||a-b|| / ||a|| and max |a-b| (complex: of |a-b|), NaN and Inf in a-b counted apart.
struct Moved {
  bool same = true;
  ckpt::ValueStats a, d;
};
Moved compare_leaf(const std::shared_ptr<const ckpt::Index>& ia, const ckpt::IndexEntry& ea,
                   const std::shared_ptr<const ckpt::Index>& ib, const ckpt::IndexEntry& eb, std::uint64_t max_memory, Bar& bar) {
  Moved m;
  const std::size_t piece = piece_bytes(max_memory, 4);
  const std::uint64_t whole = max_memory ? std::max<std::uint64_t>(max_memory / 4, 1) : 0;  // 0: no limit
  LeafPieces pa(ia, ea, piece, whole), pb(ib, eb, piece, whole);
  const bool numeric = ckpt::stats_supported(ea.type);
  const std::size_t z = std::max<std::size_t>(ckpt::dtype_size(ea.type), 1);
  std::span<const std::byte> sa, sb;
  constexpr std::size_t block = ckpt::ValueStats::block;
  std::vector<double> ar(block), ai(block), br(block), bi(block), mag(block), diff(block);
  for (;;) {
    if (sa.empty()) sa = pa.next();
    if (sb.empty()) sb = pb.next();
    if (sa.empty() || sb.empty()) break;
    const std::size_t n = std::min(sa.size(), sb.size()) / z * z;
    if (std::memcmp(sa.data(), sb.data(), n) != 0) m.same = false;
    for (std::size_t at = 0; numeric && at < n; at += block * z) {
      const std::size_t len = std::min(block * z, n - at);
      const std::size_t k = ckpt::decode_values(ea.type, sa.subspan(at, len), ar.data(), ai.data());
      ckpt::decode_values(ea.type, sb.subspan(at, len), br.data(), bi.data());
      for (std::size_t i = 0; i < k; ++i) {
        mag[i] = std::hypot(ar[i], ai[i]);
        diff[i] = std::hypot(ar[i] - br[i], ai[i] - bi[i]);
      }
      m.a.add_values(std::span<const double>(mag.data(), k));
      m.d.add_values(std::span<const double>(diff.data(), k));
    }
    bar.add(n);
    sa = sa.subspan(n);
    sb = sb.subspan(n);
  }
  return m;
}

// The figures of a moved leaf: rel_l2 = ||a-b|| / ||a|| (null when a-b holds NaN or Inf,
// or ||a|| is 0 and a-b is not), max_abs_diff, l2_diff, l2_a, and the NaN/Inf count of a-b.
json moved_json(const std::string& path, const Moved& m) {
  const bool finite = m.d.nan() + m.d.inf() == 0;
  const double l2d = m.d.l2(), l2a = m.a.l2();
  json rel = nullptr;
  if (finite && l2a > 0) rel = l2d / l2a;
  else if (finite && l2d == 0) rel = 0.0;
  return {{"path", path},
          {"rel_l2", rel},
          {"max_abs_diff", finite ? num_or_null(m.d.max()) : json(nullptr)},
          {"l2_diff", finite ? num_or_null(l2d) : json(nullptr)},
          {"l2_a", num_or_null(l2a)},
          {"nonfinite_diff", m.d.nan() + m.d.inf()}};
}

// What differs from checkpoint a to b: {added, removed, changed, unchanged (a count),
// moved (how far each numeric leaf both hold moved, most moved first)}.
json diff_json(const std::shared_ptr<const ckpt::Index>& ia, const std::shared_ptr<const ckpt::Index>& ib,
               std::uint64_t max_memory, Bar& bar) {
  json added = json::array(), removed = json::array(), changed = json::array(), moved = json::array();
  std::size_t same = 0;
  for (const auto& e : ia->entries())
    if (!ib->find(e.path)) removed.push_back(e.path.str());
  for (const auto& e : ib->entries())
    if (!ia->find(e.path)) added.push_back(e.path.str());
  for (const auto& ea : ia->entries()) {
    const auto* eb = ib->find(ea.path);
    if (!eb) {
      bar.add(ea.length);
      continue;
    }
    json c = {{"path", ea.path.str()}};
    if (ea.type != eb->type || ea.shape != eb->shape) {
      bar.add(ea.length);
      c["a"] = std::string(ckpt::dtype_name(ea.type)) + ckpt::shape_str(ea.shape);
      c["b"] = std::string(ckpt::dtype_name(eb->type)) + ckpt::shape_str(eb->shape);
      changed.push_back(c);
      continue;
    }
    if (ea.length != eb->length) {  // strings of other lengths
      bar.add(ea.length);
      changed.push_back(c);
      continue;
    }
    const Moved m = compare_leaf(ia, ea, ib, *eb, max_memory, bar);
    const bool numeric = ckpt::stats_supported(ea.type);
    if (numeric) moved.push_back(moved_json(ea.path.str(), m));
    if (m.same) {
      ++same;
      continue;
    }
    if (numeric) {
      const json& f = moved.back();
      for (const char* k : {"max_abs_diff", "rel_l2", "l2_diff", "l2_a", "nonfinite_diff"}) c[k] = f[k];
    }
    changed.push_back(c);
  }
  // Most moved first: a leaf whose difference is not finite before every other.
  const auto key = [](const json& x) {
    return x["nonfinite_diff"].get<std::uint64_t>() > 0 ? std::numeric_limits<double>::infinity()
           : x["rel_l2"].is_null()                     ? std::numeric_limits<double>::max()
                                                        : x["rel_l2"].get<double>();
  };
  std::stable_sort(moved.begin(), moved.end(), [&](const json& x, const json& y) { return key(x) > key(y); });
  return {{"added", added}, {"removed", removed}, {"changed", changed}, {"unchanged", same}, {"moved", moved}};
}

int cmd_diff(const fs::path& a, const fs::path& b, bool as_json, bool rel, std::uint64_t max_memory) {
  const auto ia = open(a), ib = open(b);
  json out;
  {
    Bar bar("diff", total_bytes(*ia));
    out = diff_json(ia, ib, max_memory, bar);
  }
  const json &added = out["added"], &removed = out["removed"], &changed = out["changed"], &moved = out["moved"];
  const std::size_t same = out["unchanged"].get<std::size_t>();
  if (as_json) {
    if (!rel) out.erase("moved");
    std::cout << dump(out) << "\n";
  } else if (rel) {
    std::printf("%-50s %12s %12s %12s %12s\n", "PATH", "REL_L2", "MAX|A-B|", "|A-B|", "|A|");
    for (const auto& x : moved)
      std::printf("%-50s %12s %12s %12s %12s\n", printable(x["path"].get<std::string>()).c_str(),
                  x["nonfinite_diff"].get<std::uint64_t>() ? "nan/inf" : cell(x["rel_l2"]).c_str(),
                  x["nonfinite_diff"].get<std::uint64_t>() ? "nan/inf" : cell(x["max_abs_diff"]).c_str(),
                  cell(x["l2_diff"]).c_str(), cell(x["l2_a"]).c_str());
    for (const auto& x : added) std::printf("+ %s\n", printable(x.get<std::string>()).c_str());
    for (const auto& x : removed) std::printf("- %s\n", printable(x.get<std::string>()).c_str());
    for (const auto& x : changed)  // what the table above does not show: a new dtype or shape, a string
      if (x.contains("a"))
        std::printf("~ %s  %s -> %s\n", printable(x["path"].get<std::string>()).c_str(), x["a"].get<std::string>().c_str(),
                    x["b"].get<std::string>().c_str());
      else if (!x.contains("rel_l2"))
        std::printf("~ %s  differs\n", printable(x["path"].get<std::string>()).c_str());
    std::printf("%zu added, %zu removed, %zu changed, %zu unchanged\n", added.size(), removed.size(), changed.size(), same);
  } else {
    for (const auto& x : added) std::printf("+ %s\n", printable(x.get<std::string>()).c_str());
    for (const auto& x : removed) std::printf("- %s\n", printable(x.get<std::string>()).c_str());
    for (const auto& x : changed) {
      std::string what = x.contains("a") ? x["a"].get<std::string>() + " -> " + x["b"].get<std::string>()
                         : x.contains("max_abs_diff") ? "max |a-b| = " + (x["max_abs_diff"].is_null() ? std::string("inf/nan") : fmt(x["max_abs_diff"].get<double>()))
                                                      : "differs";
      std::printf("~ %s  %s\n", printable(x["path"].get<std::string>()).c_str(), what.c_str());
    }
    std::printf("%zu added, %zu removed, %zu changed, %zu unchanged\n", added.size(), removed.size(), changed.size(), same);
  }
  return (added.empty() && removed.empty() && changed.empty()) ? 0 : 1;
}

// Streamed (ckpt::convert): each leaf is read piece by piece as it is written, so that
// memory stays within max_memory (0: the library's default buffers).
int cmd_convert(const fs::path& src, const fs::path& dst, const std::string& to, bool force, std::uint64_t max_memory) {
  const ckpt::FormatEntry* format = ckpt::find_format(to);  // CLI11 checked it is a registered, writable one
  Bar bar("convert", 0);
  const ckpt::SaveOptions o{.force = force,
                            .progress =
                                [&](const ckpt::Progress& p) {
                                  bar.set_total(p.bytes_total);
                                  bar.set(p.bytes_done);
                                  return true;
                                },
                            .max_memory = max_memory};
  const ckpt::ConvertResult r = ckpt::convert(src, dst, *format, o);
  std::printf("%s (%s) -> %s (%s): %zu leaves\n", src.c_str(), r.from.c_str(), dst.c_str(), to.c_str(), r.leaves);
  return 0;
}

int cmd_gc(const fs::path& dir, bool dry_run) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw BadInput(dir.string() + ": not a directory");
  const ckpt::io::StaleStaging r = ckpt::gc(dir, dry_run);
  for (const auto& p : r.removed) std::printf("%s %s\n", dry_run ? "would remove" : "removed", printable(p.string()).c_str());
  for (const auto& p : r.live) std::printf("in use     %s (a save is writing it)\n", printable(p.string()).c_str());
  for (const auto& p : r.kept) std::printf("kept       %s (an old checkpoint moved aside, or not lockable here)\n", printable(p.string()).c_str());
  std::printf("%s: %zu stale staging directories %s, %s\n", dir.c_str(), r.removed.size(),
              dry_run ? "found" : "removed", human_bytes(r.bytes).c_str());
  return 0;
}

}  // namespace

#include "report.hpp"  // ckpt report: gathers the figures of the commands above into one page

int main(int argc, char** argv) {
  // The formats are the library's registered ones: what it reads, the tool reads.
  std::vector<std::string> readable, writable;
  for (const auto& f : ckpt::registered_formats()) {
    readable.emplace_back(f.name);
    if (f.write_to || f.save_file) writable.emplace_back(f.name);
  }
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  CLI::App app{"ckpt: look into, check, compare and convert checkpoints (" + join(readable) + ")"};
  app.require_subcommand(1);
  std::string a, b, leaf, to;
  bool as_json = false, force = false;
  std::uint64_t max_memory = 0;
  std::size_t first = 10;

  auto* ls = app.add_subcommand("ls", "steps under ROOT with time, size and metrics");
  ls->add_option("ROOT", a, "directory of step checkpoints")->required();
  ls->add_flag("--json", as_json, "machine-readable output");
  auto* tree = app.add_subcommand("tree", "leaves with dtype, shape and bytes");
  tree->add_option("PATH", a, "a checkpoint")->required();
  tree->add_flag("--json", as_json, "machine-readable output");
  auto* show = app.add_subcommand("show", "a leaf: min, max, mean, std and its first values");
  show->add_option("PATH", a, "a checkpoint")->required();
  show->add_option("LEAF", leaf, "dotted path of the leaf")->required();
  show->add_flag("--json", as_json, "all values, flat in C order");
  show->add_option("-n,--first", first, "how many values to print");
  auto* verify = app.add_subcommand("verify", "read every leaf and check checksums; exit 1 naming broken leaves");
  verify->add_option("PATH", a, "a checkpoint")->required();
  auto* diff = app.add_subcommand("diff", "added, removed and changed leaves (exit 1 when they differ)");
  diff->add_option("A", a, "a checkpoint")->required();
  diff->add_option("B", b, "another checkpoint")->required();
  diff->add_flag("--json", as_json, "machine-readable output");
  bool rel = false;
  diff->add_flag("--rel", rel, "how far each numeric leaf moved: ||a-b||/||a|| and max |a-b|, most moved first");
  int depth = -1;
  auto* du = app.add_subcommand("du", "bytes and elements per subtree, largest first, with dtypes (a root: per step)");
  du->add_option("PATH", a, "a checkpoint, or a directory of step checkpoints")->required();
  du->add_option("-d,--depth", depth, "list subtrees this many levels deep (default: all, down to the leaves)")
      ->check(CLI::NonNegativeNumber);
  du->add_flag("--json", as_json, "machine-readable output");
  auto* stats = app.add_subcommand("stats", "per leaf and subtree: elements, NaN, Inf, min, max, mean, std, L2 (exit 1: NaN or Inf)");
  stats->add_option("PATH", a, "a checkpoint")->required();
  stats->add_flag("--json", as_json, "machine-readable output");
  std::string output, tensorboard;
  auto* report = app.add_subcommand("report", "one self-contained HTML page: bytes per subtree, leaf statistics; a root: metrics, norms and changes per step");
  report->add_option("PATH", a, "a checkpoint, or a directory of step checkpoints")->required();
  report->add_option("-o,--output", output, "the HTML file to write")->required();
  report->add_option("--tensorboard", tensorboard, "a directory of TensorBoard event files, or of runs holding them: their scalars too");
  for (auto* sub : {stats, diff, report})
    sub->add_option("--max-memory", max_memory, "memory the leaves may be read through, e.g. 64M (default: 16 MiB pieces)")
        ->transform(CLI::AsSizeValue(false));
  auto* convert = app.add_subcommand("convert", "any readable format into any writable one");
  convert->add_option("SRC", a, "a checkpoint")->required();
  convert->add_option("DST", b, "where to write")->required();
  convert->add_option("--to", to, join(writable))->required()->check(CLI::IsMember(writable));
  convert->add_flag("--force", force, "overwrite DST");
  convert->add_option("--max-memory", max_memory,
                      "memory the conversion may use beyond its metadata, e.g. 128M or 2G (default: 16 MiB buffers)")
      ->transform(CLI::AsSizeValue(false));
  bool dry_run = false;
  auto* gc = app.add_subcommand("gc", "delete what killed saves left in DIR: .tmp-* directories no save is writing");
  gc->add_option("DIR", a, "a directory checkpoints are saved in")->required();
  gc->add_flag("--dry-run", dry_run, "only list them");
  app.add_flag("-q,--quiet", quiet, "no progress bar (there is none either when stderr is not a terminal)");
  for (auto* sub : {ls, tree, show, verify, diff, du, stats, report, convert, gc}) sub->fallthrough();  // --quiet after the subcommand too

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  try {
    if (*ls) return cmd_ls(a, as_json);
    if (*tree) return cmd_tree(a, as_json);
    if (*show) return cmd_show(a, leaf, as_json, first);
    if (*verify) return cmd_verify(a);
    if (*diff) return cmd_diff(a, b, as_json, rel, max_memory);
    if (*du) return cmd_du(a, depth, as_json);
    if (*stats) return cmd_stats(a, as_json, max_memory);
    if (*report) return cmd_report(a, output, tensorboard, max_memory);
    if (*convert) return cmd_convert(a, b, to, force, max_memory);
    if (*gc) return cmd_gc(a, dry_run);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ckpt: %s\n", printable(e.what(), 4000).c_str());
    return 2;
  }
  return 2;
}
