// ckpt/retain/tensorboard.hpp — scalar metrics from TensorBoard event files, for keeping
// the best checkpoints as t5x's SaveBestCheckpointer does.
//
// t5x names the metric `{run_name}/{tag_name}` ("train/accuracy") and finds the run's
// event files in the directory `run_name` beside the checkpoint root (the root's
// parent: model_dir/checkpoints and model_dir/train). An event file
// (`events.out.tfevents.*`) is TFRecord-framed Event protos; a scalar is a
// Summary.Value with that tag holding simple_value, or a scalar `tensor` (TF2's
// tf.summary.scalar writes a float tensor). The last value logged for a step wins.
// Files are read whole each time; a damaged file contributes the values before the
// damage (training must not stop because a log is torn).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unistd.h>
#include <utility>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/format/tf/proto.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/io/tfrecord.hpp>
#include <ckpt/leaf/half.hpp>

namespace ckpt::tensorboard {

namespace fs = std::filesystem;

namespace detail {
using ckpt::detail::tf::proto::WireReader;

inline double fixed_double(std::span<const std::byte> b) {
  std::uint64_t v = 0;
  for (std::size_t i = 8; i-- > 0;) v = (v << 8) | static_cast<std::uint8_t>(b[i]);
  double d;
  std::memcpy(&d, &v, 8);
  return d;
}
inline float fixed_float(std::uint32_t v) {
  float f;
  std::memcpy(&f, &v, 4);
  return f;
}

// A TensorProto holding one number (float, double, half, int32, int64), or nothing.
inline std::optional<double> scalar_tensor(std::span<const std::byte> b) {
  WireReader r(b);
  int dtype = 0;
  std::span<const std::byte> content;
  std::vector<double> vals;
  while (!r.done()) {
    std::uint32_t f, w;
    if (!r.tag(f, w)) return std::nullopt;
    std::uint64_t v;
    std::uint32_t u;
    std::span<const std::byte> s;
    if (f == 1 && w == 0) {
      if (!r.varint(v)) return std::nullopt;
      dtype = static_cast<int>(v & 0xff);
    } else if (f == 4 && w == 2) {
      if (!r.bytes(content)) return std::nullopt;
    } else if (f == 6 && w == 5) {  // float_val, unpacked
      if (!r.fixed32(u)) return std::nullopt;
      vals.push_back(fixed_float(u));
    } else if (f == 6 && w == 2) {  // float_val, packed
      if (!r.bytes(s) || s.size() < 4) return std::nullopt;
      WireReader p(s);
      if (!p.fixed32(u)) return std::nullopt;
      vals.push_back(fixed_float(u));
    } else if (f == 7 && (w == 1 || w == 2)) {  // double_val
      if (w == 1) {
        std::uint32_t lo, hi;
        if (!r.fixed32(lo) || !r.fixed32(hi)) return std::nullopt;
        const std::uint64_t bits = (std::uint64_t{hi} << 32) | lo;
        double d;
        std::memcpy(&d, &bits, 8);
        vals.push_back(d);
      } else {
        if (!r.bytes(s) || s.size() < 8) return std::nullopt;
        vals.push_back(fixed_double(s));
      }
    } else if ((f == 8 || f == 11 || f == 5) && (w == 0 || w == 2)) {  // int_val, int64_val, half_val
      if (w == 0) {
        if (!r.varint(v)) return std::nullopt;
      } else {
        if (!r.bytes(s)) return std::nullopt;
        WireReader p(s);
        if (!p.varint(v)) return std::nullopt;
      }
      if (f == 5) vals.push_back(static_cast<float>(float16::from_bits(static_cast<std::uint16_t>(v))));
      else if (f == 8) vals.push_back(static_cast<double>(static_cast<std::int32_t>(v)));
      else vals.push_back(static_cast<double>(static_cast<std::int64_t>(v)));
    } else if (!r.skip(w)) {
      return std::nullopt;
    }
  }
  if (!content.empty()) {
    if (dtype == 1 && content.size() == 4) {
      std::uint32_t u = 0;
      for (std::size_t i = 4; i-- > 0;) u = (u << 8) | static_cast<std::uint8_t>(content[i]);
      return fixed_float(u);
    }
    if (dtype == 2 && content.size() == 8) return fixed_double(content);
    return std::nullopt;
  }
  if (vals.size() == 1) return vals[0];
  return std::nullopt;
}

// The tag and value of one Summary.Value, if it holds a scalar.
inline std::optional<std::pair<std::string_view, double>> scalar_value(std::span<const std::byte> b) {
  WireReader r(b);
  std::string_view tag;
  std::optional<double> value;
  while (!r.done()) {
    std::uint32_t f, w;
    if (!r.tag(f, w)) return std::nullopt;
    std::span<const std::byte> s;
    std::uint32_t u;
    if (f == 1 && w == 2) {
      if (!r.bytes(s)) return std::nullopt;
      tag = std::string_view(reinterpret_cast<const char*>(s.data()), s.size());
    } else if (f == 2 && w == 5) {
      if (!r.fixed32(u)) return std::nullopt;
      value = fixed_float(u);
    } else if (f == 8 && w == 2) {
      if (!r.bytes(s)) return std::nullopt;
      value = scalar_tensor(s);
    } else if (!r.skip(w)) {
      return std::nullopt;
    }
  }
  if (!value) return std::nullopt;
  return std::pair(tag, *value);
}

// Calls f(tag, step, value) for each scalar of an Event (none when it is malformed), in
// the order logged; the tags view `b`.
template <class F>
void for_each_scalar(std::span<const std::byte> b, F&& f) {
  WireReader r(b);
  std::optional<std::int64_t> step;
  std::vector<std::pair<std::string_view, double>> values;
  while (!r.done()) {
    std::uint32_t f_, w;
    if (!r.tag(f_, w)) return;
    std::uint64_t v;
    std::span<const std::byte> s;
    if (f_ == 2 && w == 0) {
      if (!r.varint(v)) return;
      step = static_cast<std::int64_t>(v);
    } else if (f_ == 5 && w == 2) {  // Summary
      if (!r.bytes(s)) return;
      WireReader sr(s);
      while (!sr.done()) {
        std::uint32_t sf, sw;
        std::span<const std::byte> vb;
        if (!sr.tag(sf, sw)) return;
        if (sf == 1 && sw == 2) {
          if (!sr.bytes(vb)) return;
          if (const auto x = scalar_value(vb)) values.push_back(*x);
        } else if (!sr.skip(sw)) {
          return;
        }
      }
    } else if (!r.skip(w)) {
      return;
    }
  }
  for (const auto& [tag, value] : values) f(tag, step.value_or(0), value);
}

// Calls f(record) for each record of the event files of `dir`, in name order (which is
// creation order). strict: a damaged file throws instead of contributing what precedes
// the damage.
template <class F>
void for_each_event(const fs::path& dir, bool strict, F&& f) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().find("tfevents") != std::string::npos && e.is_regular_file(ec)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    try {
      io::for_each_tfrecord(file, f);
    } catch (const Error&) {
      if (strict) throw;
    }
  }
}
}  // namespace detail

// Every (step, value) logged under `tag` in the event files of directory `dir` (read in
// name order, which is creation order). strict: a damaged file throws instead of
// contributing what precedes the damage.
inline std::map<std::int64_t, double> read_scalars(const fs::path& dir, std::string_view tag, bool strict = false) {
  std::map<std::int64_t, double> out;
  detail::for_each_event(dir, strict, [&](std::span<const std::byte> rec) {
    detail::for_each_scalar(rec, [&](std::string_view t, std::int64_t step, double v) {
      if (t == tag) out[step] = v;
    });
  });
  return out;
}

// Every scalar logged in the event files of `dir`, by tag, as read_scalars reads one.
inline std::map<std::string, std::map<std::int64_t, double>, std::less<>> read_all_scalars(const fs::path& dir,
                                                                                            bool strict = false) {
  std::map<std::string, std::map<std::int64_t, double>, std::less<>> out;
  detail::for_each_event(dir, strict, [&](std::span<const std::byte> rec) {
    detail::for_each_scalar(rec, [&](std::string_view t, std::int64_t step, double v) {
      auto it = out.find(t);
      if (it == out.end()) it = out.emplace(std::string(t), std::map<std::int64_t, double>{}).first;
      it->second[step] = v;
    });
  });
  return out;
}

// t5x's convention: "train/accuracy" under checkpoints root R is tag "accuracy" in the
// event files of R/../train. Throws when the name has no '/'.
inline std::map<std::int64_t, double> read_metric(const fs::path& checkpoint_root, std::string_view run_and_tag) {
  const auto slash = run_and_tag.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash + 1 == run_and_tag.size())
    throw Error(checkpoint_root.string(), "",
                "a TensorBoard metric is named {run_name}/{tag_name}, not " + std::string(run_and_tag));
  fs::path root = checkpoint_root;
  if (root.filename().empty()) root = root.parent_path();  // "dir/" -> "dir"
  const fs::path run_dir = fs::absolute(root).parent_path() / std::string(run_and_tag.substr(0, slash));
  return read_scalars(run_dir, run_and_tag.substr(slash + 1));
}

// ---- writing (for C++ training loops, and tests) -------------------------------

namespace detail {
inline void put_varint(std::vector<std::byte>& out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<std::byte>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<std::byte>(v));
}
inline void put_fixed(std::vector<std::byte>& out, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}
inline void put_bytes(std::vector<std::byte>& out, int field, std::span<const std::byte> b) {
  put_varint(out, (static_cast<std::uint64_t>(field) << 3) | 2);
  put_varint(out, b.size());
  out.insert(out.end(), b.begin(), b.end());
}
inline double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace detail

// An Event proto {wall_time, step, summary {value {tag, simple_value}}}.
inline std::vector<std::byte> scalar_event(std::int64_t step, std::string_view tag, float value,
                                           double wall_time = detail::wall_time_now()) {
  std::vector<std::byte> v, summary, event;
  detail::put_bytes(v, 1, std::as_bytes(std::span(tag.data(), tag.size())));
  detail::put_varint(v, (2 << 3) | 5);
  std::uint32_t bits;
  std::memcpy(&bits, &value, 4);
  detail::put_fixed(v, bits, 4);
  detail::put_bytes(summary, 1, v);
  std::uint64_t wt;
  std::memcpy(&wt, &wall_time, 8);
  detail::put_varint(event, (1 << 3) | 1);
  detail::put_fixed(event, wt, 8);
  detail::put_varint(event, 2 << 3);
  detail::put_varint(event, static_cast<std::uint64_t>(step));
  detail::put_bytes(event, 5, summary);
  return event;
}

// Appends scalar events to a new events.out.tfevents.<seconds>.<host> file in dir,
// starting with the file_version record TensorBoard expects.
class EventFileWriter {
 public:
  explicit EventFileWriter(const fs::path& dir) {
    fs::create_directories(dir);
    char host[256] = "localhost";
    ::gethostname(host, sizeof host - 1);
    static std::atomic<int> serial{0};
    path_ = dir / ("events.out.tfevents." + std::to_string(static_cast<long long>(detail::wall_time_now())) + "." +
                   host + "." + std::to_string(::getpid()) + "." + std::to_string(serial++));
    file_ = io::File::create(path_);
    std::vector<std::byte> e;
    const double now = detail::wall_time_now();
    std::uint64_t wt;
    std::memcpy(&wt, &now, 8);
    detail::put_varint(e, (1 << 3) | 1);
    detail::put_fixed(e, wt, 8);
    const std::string version = "brain.Event:2";
    detail::put_bytes(e, 3, std::as_bytes(std::span(version.data(), version.size())));
    append(e);
  }
  void add_scalar(std::string_view tag, float value, std::int64_t step) { append(scalar_event(step, tag, value)); }
  // Appends a raw Event proto.
  void append(std::span<const std::byte> event) { io::write_all(file_, io::frame_tfrecord(event), path_); }
  void flush() { file_.sync(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
  io::File file_;
};

}  // namespace ckpt::tensorboard
