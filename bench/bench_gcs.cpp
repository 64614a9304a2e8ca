// bench_gcs — ckpt::save and ckpt::restore of a state to a GCS JSON-API server, against
// plain libcurl moving the same bytes in the same run.
//
//   bench_gcs [MiB] [REPS] [CONNECTIONS]        (defaults: 1024, 3, 4)
//
// The server is $STORAGE_EMULATOR_HOST (a bucket named by $CKPT_BENCH_BUCKET, default
// "bkt", requests unauthenticated), or, when that is unset, tests/gcs_server.py started
// here with /usr/bin/python3 on a free port with its data in $TMPDIR (with Debian's
// python3-crcmod it computes the crc32c of every upload in C; without it, in Python,
// which then sets the pace of both sides).
//
// Baseline (bench/object_store_bench.hpp, shared with bench_s3): the same bytes as
// CONNECTIONS single objects, one `uploadType=media` POST then one `alt=media` GET each,
// all at once. ckpt uses the same connection count (GcsOptions::connections) for its
// data objects (resumable uploads past resumable_threshold) and its parallel ranged
// GETs, and sends and checks crc32c. Not a test: it prints medians and ratios
// (docs/benchmarks.md quotes them).
#include <ckpt/ckpt.hpp>

#if defined(CKPT_HAVE_GCS)
#include <ckpt/storage/gcs.hpp>

#include <signal.h>
#include <sys/wait.h>

#include <fstream>

#include "object_store_bench.hpp"

namespace fs = std::filesystem;
namespace bench = object_store_bench;

int main(int argc, char** argv) {
  const std::size_t mib = argc > 1 ? std::stoul(argv[1]) : 1024;
  const int reps = argc > 2 ? std::stoi(argv[2]) : 3;
  const unsigned conns = argc > 3 ? static_cast<unsigned>(std::stoul(argv[3])) : 4;
  const char* bucket_env = std::getenv("CKPT_BENCH_BUCKET");
  const std::string bucket = bucket_env ? bucket_env : "bkt";

  ckpt::GcsOptions opts;
  opts.connections = conns;
  pid_t server = -1;
  fs::path data_dir;
  if (!std::getenv("STORAGE_EMULATOR_HOST")) {
    const fs::path script = fs::path(CKPT_SOURCE_DIR) / "tests" / "gcs_server.py";
    data_dir = fs::temp_directory_path() / ("ckpt-bench-gcs-" + std::to_string(::getpid()));
    fs::create_directories(data_dir);
    const fs::path port_file = data_dir / "port";
    server = ::fork();
    if (server == 0) {
      ::execl("/usr/bin/python3", "python3", script.c_str(), "--data", (data_dir / "objects").c_str(), "--bucket",
              bucket.c_str(), "--port", "0", "--port-file", port_file.c_str(), static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    for (int i = 0; i < 400 && !fs::exists(port_file); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(25));
    std::ifstream in(port_file);
    int port = 0;
    if (!(in >> port)) {
      std::fprintf(stderr, "tests/gcs_server.py did not start\n");
      return 1;
    }
    opts.endpoint = "http://127.0.0.1:" + std::to_string(port);
    opts.anonymous = true;
  }
  ckpt::gcs::configure(opts);
  const ckpt::GcsOptions o = ckpt::gcs::options();

  bench::Store store;
  store.url = "gs://" + bucket;
  store.endpoint = o.endpoint;
  // An unauthenticated upload or GET, as ckpt's to an emulator.
  store.prepare = [&](CURL* h, const std::string& key, bool upload, std::size_t n, curl_slist*& hdr) {
    const std::string name = ckpt::io::url_encode(key, false);
    const std::string url = upload ? o.endpoint + "/upload/storage/v1/b/" + bucket + "/o?uploadType=media&name=" + name
                                   : o.endpoint + "/storage/v1/b/" + bucket + "/o/" + name + "?alt=media";
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());  // curl copies the string
    if (upload) {
      hdr = curl_slist_append(hdr, "Content-Type: application/octet-stream");
      curl_easy_setopt(h, CURLOPT_POST, 1L);
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(n));
    }
  };
  store.remove = [&](const std::string& prefix) {
    auto st = ckpt::storage::gcs_bucket(bucket);
    st->remove(st->list(prefix + "/"));
  };
  const int rc = bench::run(mib, reps, conns, store);
  if (server > 0) {
    ::kill(server, SIGTERM);
    ::waitpid(server, nullptr, 0);
    std::error_code ec;
    fs::remove_all(data_dir, ec);
  }
  return rc;
}

#else
#include <cstdio>
int main() {
  std::puts("bench_gcs: built without libcurl and libcrypto (no ckpt::gcs target); nothing to measure");
  return 0;
}
#endif
