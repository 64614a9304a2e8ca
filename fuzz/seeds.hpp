// fuzz/seeds.hpp — writes the seed corpora of the fuzz targets, made by ckpt itself
// (and, for the readers of formats ckpt does not write, from tests/data):
// `fuzz_readers` run as `make_seeds OUT` fills OUT/<target>/ with the files each target reads,
// taken from checkpoints ckpt saves of fuzz_common.hpp's states (plus a few shapes
// ckpt's writers do not produce: a 2-d zarr array, Flax's chunked arrays, t5x's
// PLACEHOLDER:// strings).
#pragma once

#include <cstring>

#include "fuzz_common.hpp"
#include "targets/ocdbt.hpp"
#include "targets/tf.hpp"

// The library includes only the parts of msgpack-cxx it uses; seeds pack containers.
#include <msgpack.hpp>

namespace fuzz::seeds {

inline int count = 0;
inline void seed(const fs::path& out, const std::string& target, const std::string& bytes) {
  fs::create_directories(out / target);
  fuzz::write_file(out / target / ("seed-" + std::to_string(count++)), bytes);
}

inline std::string with_nul(const std::string& a, const std::string& b) { return a + std::string(1, '\0') + b; }

// msgpack helpers for hand-made seeds
using Pk = msgpack::packer<msgpack::sbuffer>;
inline void str(Pk& pk, std::string_view s) {
  pk.pack_str(static_cast<std::uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<std::uint32_t>(s.size()));
}
inline std::string ndarray_ext(const std::vector<std::int64_t>& shape, std::string_view dtype, std::string_view bytes) {
  msgpack::sbuffer b;
  Pk pk(b);
  pk.pack_array(3);
  pk.pack(shape);
  str(pk, dtype);
  pk.pack_bin(static_cast<std::uint32_t>(bytes.size()));
  pk.pack_bin_body(bytes.data(), static_cast<std::uint32_t>(bytes.size()));
  return {b.data(), b.size()};
}
// One seed per file of a FileSet target: the selector byte(s), then the file.
inline void file_set_seeds(const fs::path& out, const std::string& target, const FileSet& set, std::string extra = {}) {
  for (std::size_t i = 0; i < set.size(); ++i)
    seed(out, target, std::string(1, static_cast<char>(i)) + extra + set.original(i));
}

inline int make_seeds(const fs::path& out) {
  const fs::path work = fuzz::scratch() / "seeds";
  fs::create_directories(work);
  try {
    // native: manifests of several states and layouts
    for (int v = 0; v < 4; ++v)
      for (unsigned files : {1u, 2u}) {
        const fs::path d = work / ("native-" + std::to_string(v) + "-" + std::to_string(files));
        ckpt::save(d, fuzz::mixed_state(v), {.inline_threshold = v == 3 ? 1u << 20 : 4096u, .data_files = files});
        seed(out, "native", fuzz::read_text(d / "manifest"));
      }
    seed(out, "native", fuzz::read_text(work / "native-0-1" / "commit"));

    // flax: whole files
    for (int v = 0; v < 3; ++v) {
      const fs::path f = work / ("flax-" + std::to_string(v) + ".msgpack");
      ckpt::save<ckpt::flax>(f, fuzz::mixed_state(v));
      seed(out, "flax", fuzz::read_text(f));
    }
    ckpt::save<ckpt::flax>(work / "flax-arrays.msgpack", fuzz::arrays_state());
    seed(out, "flax", fuzz::read_text(work / "flax-arrays.msgpack"));
    {  // Flax's chunked array, complex scalar and plain msgpack leaves
      msgpack::sbuffer b;
      Pk pk(b);
      pk.pack_map(4);
      str(pk, "big");
      pk.pack_map(3);
      str(pk, ckpt::detail::interop::chunked_key);
      pk.pack_true();
      str(pk, "shape");
      pk.pack_map(1);
      str(pk, "0");
      pk.pack(4);
      str(pk, "chunks");
      pk.pack_map(2);
      const float f4[2] = {1, 2};
      const std::string part(reinterpret_cast<const char*>(f4), sizeof f4);
      for (const char* k : {"0", "1"}) {
        str(pk, k);
        const std::string e = ndarray_ext({2}, "float32", part);
        pk.pack_ext(e.size(), 1);
        pk.pack_ext_body(e.data(), static_cast<std::uint32_t>(e.size()));
      }
      str(pk, "z");
      msgpack::sbuffer zb;
      Pk zpk(zb);
      zpk.pack_array(2);
      zpk.pack(1.5);
      zpk.pack(-2.0);
      pk.pack_ext(zb.size(), 2);
      pk.pack_ext_body(zb.data(), static_cast<std::uint32_t>(zb.size()));
      str(pk, "n");
      pk.pack_nil();
      str(pk, "list");
      pk.pack_array(2);
      pk.pack(1);
      str(pk, "two");
      seed(out, "flax", {b.data(), b.size()});
    }

    // t5x: the `checkpoint` file of the state the target lays its arrays out for
    ckpt::save<ckpt::t5x>(work / "t5x", fuzz::arrays_state());
    seed(out, "t5x", fuzz::read_text(work / "t5x" / "checkpoint"));
    {  // Orbax's older layout: PLACEHOLDER:// strings for the arrays
      msgpack::sbuffer b;
      Pk pk(b);
      pk.pack_map(2);
      str(pk, "version");
      pk.pack(3);
      str(pk, "optimizer");
      pk.pack_map(3);
      str(pk, "a");
      str(pk, "PLACEHOLDER://a");
      str(pk, "c");
      str(pk, "PLACEHOLDER://c");
      str(pk, "step");
      pk.pack(42);
      seed(out, "t5x", {b.data(), b.size()});
    }

    // zarr: .zarray, NUL, chunk 0 of arrays in every codec
    auto zarr_seeds = [&]<class Z>(Z, const std::string& name) {
      const fs::path d = work / name;
      ckpt::save<Z>(d, fuzz::numeric_state());
      for (const char* a : {"a", "b/0", "c"}) seed(out, "zarr", with_nul(fuzz::read_text(d / a / ".zarray"), fuzz::read_text(d / a / "0")));
    };
    zarr_seeds(ckpt::basic_zarr_v2<ckpt::io::codec::none>{}, "zarr-none");
    zarr_seeds(ckpt::basic_zarr_v2<ckpt::io::codec::gzip>{}, "zarr-gzip");
    zarr_seeds(ckpt::basic_zarr_v2<ckpt::io::codec::zlib>{}, "zarr-zlib");
    zarr_seeds(ckpt::basic_zarr_v2<ckpt::io::codec::zstd>{}, "zarr-zstd");
    {  // 2-d, Fortran order, big-endian, a fill value; rank 0
      const std::int32_t v[6] = {0x01000000, 0x02000000, 0x03000000, 0x04000000, 0x05000000, 0x06000000};
      seed(out, "zarr", with_nul(R"({"zarr_format": 2, "shape": [2, 3], "chunks": [2, 3], "dtype": ">i4", "compressor": null, "fill_value": 7, "order": "F", "filters": null, "dimension_separator": "."})",
                                 std::string(reinterpret_cast<const char*>(v), sizeof v)));
      const double x = 2.5;
      seed(out, "zarr", with_nul(R"({"zarr_format": 2, "shape": [], "chunks": [], "dtype": "<f8", "compressor": null, "fill_value": "NaN", "order": "C", "filters": []})",
                                 std::string(reinterpret_cast<const char*>(&x), sizeof x)));
      seed(out, "zarr", with_nul(R"({"zarr_format": 2, "shape": [3, 2], "chunks": [2, 2], "dtype": "<c8", "compressor": null, "fill_value": [1.0, -1.0], "order": "C", "filters": null, "dimension_separator": "/"})",
                                 std::string(32, '\1')));
      // what fuzzing this reader found: chunks of 64 GiB for a 10-element array (now refused)
      seed(out, "zarr", with_nul(R"({"zarr_format": 2, "shape": [10], "chunks": [17179869184], "dtype": "<f4", "compressor": {"id": "zstd", "level": 1}, "fill_value": 0, "order": "C", "filters": null})",
                                 std::string("\x28\xb5\x2f\xfd") + std::string(4096, 'x')));
    }

    // Orbax: _METADATA, NUL, _strings.json of the state the target lays its arrays out for
    ckpt::save<ckpt::orbax_without_ocdbt>(work / "orbax", fuzz::arrays_state());
    seed(out, "orbax", with_nul(fuzz::read_text(work / "orbax" / "default" / "_METADATA"),
                                fuzz::read_text(work / "orbax" / "default" / "_strings.json")));

    // step metadata: what managers write, with metrics, custom metadata and items; and Orbax's
    {
      ckpt::CheckpointManager<fuzz::Arrays> mgr(work / "root");
      mgr.save(1, fuzz::arrays_state(), {{"loss", 0.25}, {"eval/acc", 0.75}},
               {.items = {{"cfg", ckpt::json_item({{"lr", 0.1}})}, {"pos", ckpt::tree_item(fuzz::arrays_state())}},
                .custom_metadata = {{"note", "seed"}, {"nested", {{"a", {1, 2, {{"b", nullptr}}}}}}}});
      mgr.save(2, fuzz::arrays_state());
      seed(out, "step_metadata", fuzz::read_text(work / "root" / "1" / "_CHECKPOINT_METADATA"));
      seed(out, "step_metadata", fuzz::read_text(work / "root" / "2" / "_CHECKPOINT_METADATA"));
      seed(out, "step_metadata", fuzz::read_text(work / "orbax" / "_CHECKPOINT_METADATA"));
      // what fuzzing this reader found: a timestamp out of int64's range (now refused)
      seed(out, "step_metadata", R"({"format": "native", "init_timestamp_nsecs": 1796017208208519511319, "items": {}, "metrics": {}, "step": 2})");
    }

    // OCDBT and TensorFlow: each file of the checkpoints the targets overwrite
    file_set_seeds(out, "ocdbt", fuzz::targets::ocdbt::written(), std::string(1, '\0'));
    file_set_seeds(out, "ocdbt", fuzz::targets::ocdbt::from_orbax(), std::string(1, '\1'));
    file_set_seeds(out, "tf", fuzz::targets::tf::bundle());

    // safetensors: files ckpt writes, and those of the safetensors project's tests
    ckpt::save<ckpt::safetensors>(work / "st.safetensors", fuzz::numeric_state());
    seed(out, "safetensors", fuzz::read_text(work / "st.safetensors"));
    for (const char* f : {"b.safetensors", "d.safetensors", "e.safetensors", "i.safetensors"})
      seed(out, "safetensors", fuzz::read_text(fixture(std::string("safetensors/") + f)));

    // PyTorch: torch.save's own files whole (byte 0), and their pickles alone (byte 1)
    for (const char* f : {"net_state_dict.pt", "checkpoint.pt", "dtypes.pt", "views.pt", "hostile_system.pt"}) {
      const std::string file = fuzz::read_text(fixture(std::string("pytorch/") + f));
      seed(out, "pytorch", std::string(1, '\0') + file);
      const ckpt::detail::pytorch::zip::Archive z(
          [&](std::uint64_t at, std::span<std::byte> dst) {
            if (!dst.empty()) std::memcpy(dst.data(), file.data() + at, dst.size());
          },
          file.size(), f, f);
      for (const auto& e : z.entries())
        if (e.name.ends_with("/data.pkl")) {
          const auto pkl = z.read(e, 1 << 20);
          seed(out, "pytorch", std::string(1, '\1') + std::string(reinterpret_cast<const char*>(pkl.data()), pkl.size()));
        }
    }
    // ckpt's own writing of a state
    ckpt::save<ckpt::pytorch>(work / "st.pt", fuzz::numeric_state());
    seed(out, "pytorch", std::string(1, '\0') + fuzz::read_text(work / "st.pt"));

    // zarr v3: zarr.json, NUL, chunk 0
    {
      const float f4[6] = {1, 2, 3, 4, 5, 6};
      const std::string raw(reinterpret_cast<const char*>(f4), sizeof f4);
      seed(out, "zarr3", with_nul(R"({"zarr_format": 3, "node_type": "array", "shape": [6], "data_type": "float32", "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [6]}}, "chunk_key_encoding": {"name": "v2", "configuration": {"separator": "."}}, "fill_value": 0.0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]})", raw));
      seed(out, "zarr3", with_nul(R"({"zarr_format": 3, "node_type": "array", "shape": [2, 3], "data_type": "int32", "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}}, "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}}, "fill_value": 7, "codecs": [{"name": "transpose", "configuration": {"order": [1, 0]}}, {"name": "bytes", "configuration": {"endian": "big"}}]})", std::string(24, '\2')));
      seed(out, "zarr3", with_nul(R"({"zarr_format": 3, "node_type": "array", "shape": [6], "data_type": "float32", "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [6]}}, "chunk_key_encoding": {"name": "v2", "configuration": {"separator": "."}}, "fill_value": "NaN", "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1, "checksum": false}}]})", std::string("\x28\xb5\x2f\xfd") + raw));
    }

    // what fuzzing this reader found: a chunk_grid name that is an object made
    // nlohmann's value() throw a type_error past the reader (now refused as corrupt)
    seed(out, "zarr3", with_nul(R"({"zarr_format": 3, "node_type": "array", "shape": [2, 3], "data_type": "int16", "chunk_grid": {"name": {"x": 1}, "configuration": {"chunk_shape": [2, 3]}}, "fill_value": 7, "codecs": [{"name": "bytes", "configuration": {"endian": "big"}}]})", std::string(12, '\1')));

    // TensorBoard: an event file with a scalar series
    {
      ckpt::tensorboard::EventFileWriter w(work / "tb");
      for (int step = 1; step <= 3; ++step) w.add_scalar("loss", 1.0f / static_cast<float>(step), step * 100);
      w.flush();
      seed(out, "tensorboard", fuzz::read_text(w.path()));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_seeds: %s\n", e.what());
    return 1;
  }
  std::printf("make_seeds: %d seeds in %s\n", count, out.c_str());
  return 0;
}

}  // namespace fuzz::seeds
