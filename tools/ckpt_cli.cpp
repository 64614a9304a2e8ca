// tools/ckpt_cli.cpp — the `ckpt` command: look into, check, compare and convert
// checkpoints of any format ckpt reads (native, Orbax, t5x, zarr, Flax msgpack).
//
//   ckpt ls ROOT                 steps with time, size, metrics
//   ckpt tree PATH [--json]      leaves with dtype, shape, bytes
//   ckpt show PATH LEAF [--json] [-n N]   min, max, mean, std and the first values
//   ckpt verify PATH             reads everything, checks checksums (exit 1: broken leaves)
//   ckpt diff A B [--json]       added, removed and changed leaves
//   ckpt convert SRC DST --to native|flax|t5x|orbax|zarr
//   ckpt gc DIR [--dry-run]      deletes what killed saves left in DIR (stale .tmp-* directories)
// Every PATH, ROOT, SRC and DST may be an s3://bucket/prefix URL (native checkpoints;
// endpoint and credentials from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...) when the tool
// is built with libcurl (the CMake target ckpt::s3).
// verify, diff and convert draw a progress bar on stderr when it is a terminal
// (--quiet: never). ls --json carries each step's save figures when the manager stored them.
// Bad input: a message on stderr and exit code 2. Names and strings from a checkpoint
// are printed made printable (no terminal control characters, invalid UTF-8 replaced).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <ckpt/formats.hpp>
#include <ckpt/manager.hpp>
#if defined(CKPT_HAVE_S3)
#include <ckpt/storage/s3.hpp>
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

// ---------------------------------------------------------------------------------

struct Row { std::string name; std::int64_t step; std::string format, time; std::uint64_t size; json metrics, save_stats; };

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
  return info;
}

// The committed checkpoints (those with a commit marker) one level under an s3:// root.
std::vector<Row> object_rows(const fs::path& root) {
  const auto loc = ckpt::storage::open_location(root);
  std::vector<Row> rows;
  for (const auto& name : loc.storage->children(loc.prefix)) {
    const auto step = loc.child(name);
    if (name.empty() || name[0] == '.' || !loc.storage->size(step.key(ckpt::storage::commit_marker))) continue;
    Row r{name, ckpt::StepNaming::trailing_step(name).value_or(-1), "native", "", 0, json::object(), nullptr};
    if (!loc.storage->size(step.key(ckpt::detail::native::commit_file))) r.format = "other";  // telling which would download it
    for (const auto& k : loc.storage->list(step.prefix + "/")) r.size += loc.storage->size(k).value_or(0);
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
  else for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code e2;
    if (name.empty() || name[0] == '.' || it->is_symlink(e2)) continue;  // a step is a directory of ROOT, as the manager sees it
    const std::string f = ckpt::detect_format(it->path());
    if (f.empty()) continue;
    Row r{name, ckpt::StepNaming::trailing_step(name).value_or(-1), f, "", disk_size(it->path()), json::object(), nullptr};
    const auto mtime = fs::last_write_time(it->path(), ec);
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
                     {"time", r.time}, {"bytes", r.size}, {"metrics", r.metrics}});
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
  if (n > 0 && !cplx) {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo, sum = 0, sq = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double x = element(b, e->type, i).first;
      lo = std::min(lo, x);
      hi = std::max(hi, x);
      sum += x;
    }
    const double mean = sum / static_cast<double>(n);
    for (std::size_t i = 0; i < n; ++i) {
      const double d = element(b, e->type, i).first - mean;
      sq += d * d;
    }
    std::printf("min %s  max %s  mean %s  std %s\n", fmt(lo).c_str(), fmt(hi).c_str(), fmt(mean).c_str(),
                fmt(std::sqrt(sq / static_cast<double>(n))).c_str());
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

int cmd_diff(const fs::path& a, const fs::path& b, bool as_json) {
  const auto ia = open(a), ib = open(b);
  json added = json::array(), removed = json::array(), changed = json::array();
  std::size_t same = 0;
  Bar bar("diff", total_bytes(*ia));
  for (const auto& e : ia->entries())
    if (!ib->find(e.path)) removed.push_back(e.path.str());
  for (const auto& e : ib->entries())
    if (!ia->find(e.path)) added.push_back(e.path.str());
  for (const auto& ea : ia->entries()) {
    const auto* eb = ib->find(ea.path);
    bar.add(ea.length);
    if (!eb) continue;
    json c = {{"path", ea.path.str()}};
    if (ea.type != eb->type || ea.shape != eb->shape) {
      c["a"] = std::string(ckpt::dtype_name(ea.type)) + ckpt::shape_str(ea.shape);
      c["b"] = std::string(ckpt::dtype_name(eb->type)) + ckpt::shape_str(eb->shape);
      changed.push_back(c);
      continue;
    }
    std::vector<std::byte> va(static_cast<std::size_t>(ea.length)), vb(static_cast<std::size_t>(eb->length));
    ia->read(ea, va);
    ib->read(*eb, vb);
    if (va == vb) { ++same; continue; }
    if (ckpt::is_numeric(ea.type)) {
      double mx = 0;
      for (std::size_t i = 0; i < va.size() / ckpt::dtype_size(ea.type); ++i) {
        auto [r1, i1] = element(va, ea.type, i);
        auto [r2, i2] = element(vb, ea.type, i);
        const double d = std::hypot(r1 - r2, i1 - i2);
        if (std::isnan(d) || d > mx) mx = std::isnan(d) ? std::numeric_limits<double>::infinity() : d;
      }
      c["max_abs_diff"] = std::isfinite(mx) ? json(mx) : json(nullptr);
    }
    changed.push_back(c);
  }
  if (as_json) {
    std::cout << dump(json{{"added", added}, {"removed", removed}, {"changed", changed}, {"unchanged", same}}) << "\n";
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
  for (auto* sub : {ls, tree, show, verify, diff, convert, gc}) sub->fallthrough();  // --quiet after the subcommand too

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
    if (*diff) return cmd_diff(a, b, as_json);
    if (*convert) return cmd_convert(a, b, to, force, max_memory);
    if (*gc) return cmd_gc(a, dry_run);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ckpt: %s\n", printable(e.what(), 4000).c_str());
    return 2;
  }
  return 2;
}
