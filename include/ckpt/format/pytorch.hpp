// ckpt/format/pytorch.hpp — ckpt::pytorch: the files of torch.save (.pt, .pth, pytorch_model.bin), both ways.
//
// A torch.save file (PyTorch 1.6 and later) is a zip of stored entries (format/pytorch/zip.hpp):
//   archive/data.pkl      a pickle of the saved object (format/pytorch/pickle.hpp)
//   archive/data/<key>    the bytes of each storage the pickle names
//   archive/version       "3", archive/byteorder "little"
// (older PyTorch names the directory after the file: model/data.pkl; any one name is read).
// The pickle is read as data, never executed: only what torch.load(weights_only=True)
// accepts, anything else refused naming the global it found.
//
// Tree paths: a dict is a node, its string keys split at '.' as state_dict names are
// (format/interop/flat_names.hpp: "layers.0.weight" is layers/0/weight, as safetensors
// names are), its integer keys (an optimizer's state) in decimal; a list or tuple is a
// node with children 0, 1...; a tensor is a leaf with its own values, a view (storage
// offset, size, stride) read as the values it shows; a Python int, float, bool, str or
// None is a scalar leaf of int64, float64, bool, string or none; a dtype (torch.float32)
// is a string leaf. Empty dicts and lists hold no leaves and are not in the tree.
//
// Writing (save<pytorch>, `ckpt convert --to pytorch`) makes what PyTorch's own code
// loads: a tree whose leaves are all tensors is one state_dict (an OrderedDict of dotted
// names, as nn.Module.state_dict() makes, which load_state_dict accepts); otherwise the
// root is a dict of its children, and below it a subtree of tensors is a state_dict, a
// node with a child `param_groups` an optimizer's state_dict ({"state": {0: {...}},
// "param_groups": [{"lr": 0.001, "params": [0, 1]}]}), a node whose children are 0..n-1
// a list, and a scalar int64, float64 or bool leaf a Python number (so
// {"model", "optimizer", "epoch"} comes back as it was saved). Leaves whose bytes are
// the same memory (same address and length, same dtype: tied weights) share one
// storage, as torch.save writes them.
//
// Hugging Face's sharded pytorch_model.bin.index.json ({"weight_map": {name: file}}) is
// read as one checkpoint, like safetensors' index. The legacy format of PyTorch before
// 1.6 (a bare pickle, torch.save(..., _use_new_zipfile_serialization=False)) is
// recognised and refused: load it in Python and save it again.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include <ckpt/detail/compile_mode.hpp>
#include <ckpt/detail/static_error.hpp>
#include <ckpt/exec/progress_tracker.hpp>
#include <ckpt/format/pytorch/reader.hpp>
#include <ckpt/format/pytorch/sharded_index.hpp>
#include <ckpt/format/pytorch/writer.hpp>
#include <ckpt/format/registry.hpp>
#include <ckpt/io/file.hpp>
#include <ckpt/io/kvstore.hpp>
#include <ckpt/io/staging_dir.hpp>
#include <ckpt/options.hpp>
#include <ckpt/snapshot.hpp>

namespace ckpt {

struct pytorch {
  static constexpr const char* name = "pytorch";

  // A checkpoint directory or prefix: its pytorch_model.bin.
  static void write_to(const Snapshot& s, const storage::Location& loc, const SaveOptions& o) {
    exec::ProgressTracker progress(o.progress, s.total_bytes(), s.leaves.size(), loc.url);
    detail::pytorch::write_file(*loc.storage->create(loc.key(detail::pytorch::single_file)), s, loc.url, &progress);
    progress.finish();
  }

  // save<pytorch>(path, state): a path ending in .pt, .pth, .bin or .ckpt is the file
  // itself (renamed into place whole); any other is a directory holding pytorch_model.bin.
  static void save_file(const std::filesystem::path& path, const Snapshot& s, const SaveOptions& o) {
    if (detail::pytorch::is_file_name(path)) {
      exec::ProgressTracker progress(o.progress, s.total_bytes(), s.leaves.size(), path.string());
      io::publish_file(path, o.force, [&](const std::filesystem::path& tmp) {
        detail::pytorch::write_file(*storage::file_writer(tmp), s, path.string(), &progress);
      });
      progress.finish();
      return;
    }
    std::error_code ec;
    if (!o.force && std::filesystem::exists(path, ec))
      throw Error(path.string(), "", "a checkpoint already exists here (pass .force = true to overwrite)");
    io::StagingDir staging(path);
    write_to(s, storage::directory_location(staging.path(), storage::Publish::in_place), o);
    staging.commit(o.force);
  }

  static bool detect_in(const io::KvStore& kv) {
    namespace dp = detail::pytorch;
    if (kv.contains(dp::index_file)) return true;
    const auto size = kv.size(dp::single_file);
    if (!size) return false;
    try {
      return dp::looks_like([&](std::uint64_t at, std::span<std::byte> dst) { kv.read(dp::single_file, at, dst); }, *size,
                            dp::single_file);
    } catch (const Error&) {
      return false;
    }
  }
  static std::shared_ptr<const Index> open_in(std::shared_ptr<const io::KvStore> kv, const std::string& checkpoint) {
    namespace dp = detail::pytorch;
    if (const auto raw = kv->get(dp::index_file, dp::max_index_json_bytes))
      return dp::open_sharded_with(*raw, dp::index_file, checkpoint, [&](const std::string& f) -> std::optional<dp::Source> {
        if (!kv->contains(f)) return std::nullopt;
        return dp::object_source(kv, f, checkpoint);
      });
    return dp::open_single(dp::object_source(kv, dp::single_file, checkpoint), checkpoint);
  }

  // A torch.save file, a *.bin.index.json, or a directory holding pytorch_model.bin or its index.
  static bool detect(const std::filesystem::path& p) {
    namespace dp = detail::pytorch;
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec))
      return std::filesystem::is_regular_file(p / dp::index_file, ec) || dp::looks_like_file(p / dp::single_file);
    if (dp::is_index_json(p)) return std::filesystem::is_regular_file(p, ec);
    return dp::looks_like_file(p);
  }
  static bool is_committed(const std::filesystem::path& p) { return detect(p); }

  static std::shared_ptr<const Index> open(const std::filesystem::path& p) {
    namespace dp = detail::pytorch;
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) {
      if (std::filesystem::is_regular_file(p / dp::index_file, ec)) return dp::open_sharded(p / dp::index_file, p.string());
      return dp::open_single(dp::local_source(p / dp::single_file), p.string());
    }
    if (dp::is_index_json(p)) return dp::open_sharded(p, p.string());
    return dp::open_single(dp::local_source(p), p.string());
  }
};
static_assert(format_policy<pytorch>, CKPT_INTERNAL_CHECK("pytorch must meet format_policy"));

// After safetensors (5): a Hugging Face directory holding both is read as safetensors,
// as transformers prefers it.
#if CKPT_DEFINE_API  // else the library registers it (format/registry.hpp)
inline const bool pytorch_registered = register_format<pytorch>(6);
#endif
}  // namespace ckpt
