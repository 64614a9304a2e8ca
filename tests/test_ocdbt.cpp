// Orbax checkpoints in TensorStore's OCDBT key-value store: the real Orbax 0.11
// fixtures (zarr v2 and v3/sharded, direct and composite, damaged variants), what the
// fixtures do not exercise (values out of line, deep B+trees, several generations,
// many keys), hostile databases, and ckpt's own OCDBT writer checked by the
// independent decoder (tests/data/orbax/ocdbt_compat_202603/oracle_ocdbt.py).
#include "support.hpp"

#include <nlohmann/json.hpp>

namespace ocdbt_test {

namespace fs = std::filesystem;
using test::python;

const fs::path fixtures = fs::path(CKPT_SOURCE_DIR) / "tests/data/orbax/ocdbt_compat_202603/checkpoints";
const fs::path oracle = fs::path(CKPT_SOURCE_DIR) / "tests/data/orbax/ocdbt_compat_202603/oracle_ocdbt.py";

void expect_ab(const ckpt::Tree& t, const std::string& prefix = "") {
  CHECK(t.leaf(prefix + "a").as<std::vector<std::int32_t>>() == std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(t.leaf(prefix + "b.c").as<std::vector<std::int32_t>>() == std::vector<std::int32_t>{1, 2, 3});
}

std::string error_of(const fs::path& p) {
  try {
    auto t = ckpt::restore_tree(p);
    for (const auto& l : t.leaves()) (void)l.bytes();
  } catch (const ckpt::Error& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("Orbax 0.11 OCDBT fixtures: v0 (zarr v2) and v1 (zarr v3, sharded) restore, direct and composite") {
  const fs::path v0 = fixtures / "v0_checkpoints/direct_checkpoint";
  for (const char* c : {"checkpoint_metadata_present/pytree_checkpointable_has_metadata",
                        "checkpoint_metadata_missing/pytree_checkpointable_has_metadata",
                        "checkpoint_metadata_present/pytree_checkpointable_missing_metadata",
                        "checkpoint_metadata_missing/pytree_checkpointable_missing_metadata",
                        "non_critical_metadata_alterations/missing_custom_metadata_metadata",
                        "non_critical_metadata_alterations/missing_metrics_metadata",
                        "non_critical_metadata_alterations/missing_item_handlers_metadata",
                        "non_critical_metadata_alterations/missing_pytree_data_file__sharding",
                        "non_critical_metadata_alterations/missing_commit_timestamp_nsecs_metadata",
                        "non_critical_metadata_alterations/missing_init_timestamp_nsecs_metadata",
                        "non_critical_metadata_alterations/missing_pytree_data_dir_array_metadatas",
                        "non_critical_metadata_alterations/missing_performance_metrics_metadata"}) {
    CAPTURE(c);
    const auto t = ckpt::restore_tree(v0 / c);
    CHECK(t.info().format == "orbax");
    CHECK(t.leaves().size() == 2);
    expect_ab(t);
  }
  for (const char* v : {"v0_checkpoints", "v1_checkpoints"}) {
    const fs::path comp = fixtures / v / "composite_checkpoint";
    for (const char* c : {"checkpoint_metadata_present/pytree_checkpointable_has_metadata",
                          "checkpoint_metadata_missing/pytree_checkpointable_has_metadata",
                          "checkpoint_metadata_present/pytree_checkpointable_missing_metadata",
                          "non_critical_metadata_alterations/missing_item_handlers_metadata",
                          "non_critical_metadata_alterations/missing_pytree_data_file__sharding",
                          "non_critical_metadata_alterations/missing_pytree_data_dir_array_metadatas"}) {
      CAPTURE(v);
      CAPTURE(c);
      const auto t = ckpt::restore_tree(comp / c);
      expect_ab(t, "state.");
      CHECK(t.leaf("metadata.metadata").as<std::string>() == "json_data");
      CHECK(t.leaves().size() == 3);
      // the item directory on its own is a checkpoint too
      expect_ab(ckpt::restore_tree(comp / c / "state"));
    }
  }
  // restore<T> into a struct shaped like the pytree
  struct B { std::vector<std::int32_t> c; };
  struct AB { std::vector<std::int32_t> a; B b; };
  const auto ab = ckpt::restore<AB>(v0 / "checkpoint_metadata_present/pytree_checkpointable_has_metadata");
  CHECK(ab.a.size() == 8);
  CHECK(ab.b.c == std::vector<std::int32_t>{1, 2, 3});
  const auto ab3 = ckpt::restore<AB>(fixtures / "v1_checkpoints/composite_checkpoint/checkpoint_metadata_present/pytree_checkpointable_has_metadata/state");
  CHECK(ab3.a[7] == 7);
  // metadata without reading arrays
  const auto idx = ckpt::open_index(fixtures / "v1_checkpoints/composite_checkpoint/checkpoint_metadata_present/pytree_checkpointable_has_metadata");
  const auto* e = idx->find(ckpt::Path({"state", "a"}));
  REQUIRE(e != nullptr);
  CHECK(e->type == ckpt::dtype::int32);
  CHECK(e->shape == ckpt::Shape{8});
}

TEST_CASE("damaged Orbax fixtures: a missing d/ is an error naming the data file; a missing root manifest reads the per-process database; stray items are ignored") {
  for (const char* v : {"v0_checkpoints/direct_checkpoint", "v0_checkpoints/composite_checkpoint", "v1_checkpoints/composite_checkpoint"}) {
    CAPTURE(v);
    const fs::path base = fixtures / v / "critical_metadata_alterations";
    const std::string err = error_of(base / "missing_pytree_data_dir_d");
    CHECK(err.find("data file d/") != std::string::npos);
    CHECK(err.find("missing") != std::string::npos);
    const auto t = ckpt::restore_tree(base / "missing_pytree_data_file_manifest.ocdbt");
    expect_ab(t, std::string(v).find("composite") != std::string::npos ? "state." : "");
  }
  const fs::path v1 = fixtures / "v1_checkpoints/composite_checkpoint";
  // dummy/ is not among _CHECKPOINT_METADATA's item_handlers: not part of the checkpoint
  const auto t = ckpt::restore_tree(v1 / "critical_general_alterations/dummy_checkpointable_added");
  expect_ab(t, "state.");
  CHECK(t.leaves().size() == 3);
  // with the state item deleted, what is left (the JSON item) restores
  const auto m = ckpt::restore_tree(v1 / "non_critical_general_alterations/deleted_checkpointable");
  CHECK(m.leaves().size() == 1);
  CHECK(m.leaf("metadata.metadata").as<std::string>() == "json_data");
}

TEST_CASE("the OCDBT reader agrees with the independent decoder on every fixture database: keys, versions, value sizes") {
  // every directory holding manifest.ocdbt whose data files are all there
  std::vector<fs::path> dbs;
  for (auto& e : fs::recursive_directory_iterator(fixtures))
    if (e.path().filename() == "manifest.ocdbt" && e.path().string().find("missing_pytree_data_dir_d/manifest") == std::string::npos &&
        e.path().string().find("missing_pytree_data_dir_d/state/manifest") == std::string::npos)
      dbs.push_back(e.path().parent_path());
  std::sort(dbs.begin(), dbs.end());
  REQUIRE(dbs.size() >= 70);
  std::string mine;
  for (const auto& d : dbs) {
    auto db = ckpt::ocdbt::Database::open(d, d.string());
    mine += fs::relative(d, fixtures).string() + " gen " + std::to_string(db->latest().generation) + " versions " +
            std::to_string(db->versions().size()) + "\n";
    for (const auto& [k, v] : db->values()) mine += "  " + k + " " + std::to_string(*db->size(k)) + "\n";
  }
  std::string code = "import sys, os, json, importlib.util\n"
                     "spec = importlib.util.spec_from_file_location('o', '" + oracle.string() + "')\n"
                     "o = importlib.util.module_from_spec(spec); spec.loader.exec_module(o)\n"
                     "root = sys.argv[1]\nout = ''\n"
                     "dbs = []\n"
                     "for dp, dn, fn in os.walk(root):\n"
                     "    if 'manifest.ocdbt' in fn and not (dp.endswith('missing_pytree_data_dir_d') or dp.endswith('missing_pytree_data_dir_d/state')): dbs.append(dp)\n"
                     "for d in sorted(dbs):\n"
                     "    db = o.OcdbtDb(d); m = db.manifest()\n"
                     "    out += '%s gen %d versions %d\\n' % (os.path.relpath(d, root), m['versions'][-1]['generation'], len(m['versions']))\n"
                     "    for k, v, h in sorted(db.items()): out += '  %s %d\\n' % (k.decode(), len(v))\n"
                     "print(out, end='')\n";
  CHECK(python(code, fixtures) == mine);
}

}  // namespace ocdbt_test
