// bench_s3 — ckpt::save and ckpt::restore of a state to an S3 server, against plain
// libcurl moving the same bytes in the same run.
//
//   bench_s3 [MiB] [REPS] [CONNECTIONS]        (defaults: 1024, 3, 4)
//
// The server is $AWS_ENDPOINT_URL (with AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY and a
// bucket named by $CKPT_BENCH_BUCKET, default "bkt"), or, when that is unset, an s3rver
// started here from <source>/.s3rver (tools/install-deps.sh installs it) on a free port
// with its data in $TMPDIR.
//
// Baseline (bench/object_store_bench.hpp, shared with bench_gcs): the same bytes as
// CONNECTIONS single objects, one PUT then one GET each, all at once, signed the same way
// (CURLOPT_AWS_SIGV4). ckpt uses the same connection count (S3Options::connections).
// Not a test: it prints medians and ratios (docs/storage.md quotes them).
#include <ckpt/ckpt.hpp>

#if defined(CKPT_HAVE_S3)
#include <ckpt/storage/s3.hpp>

#include <signal.h>
#include <sys/wait.h>

#include "object_store_bench.hpp"

namespace fs = std::filesystem;
namespace bench = object_store_bench;

int main(int argc, char** argv) {
  const std::size_t mib = argc > 1 ? std::stoul(argv[1]) : 1024;
  const int reps = argc > 2 ? std::stoi(argv[2]) : 3;
  const unsigned conns = argc > 3 ? static_cast<unsigned>(std::stoul(argv[3])) : 4;
  const char* bucket_env = std::getenv("CKPT_BENCH_BUCKET");
  const std::string bucket = bucket_env ? bucket_env : "bkt";

  ckpt::S3Options opts;
  opts.connections = conns;
  pid_t server = -1;
  fs::path data_dir;
  if (!std::getenv("AWS_ENDPOINT_URL")) {
    const fs::path script = fs::path(CKPT_SOURCE_DIR) / ".s3rver/node_modules/s3rver/bin/s3rver.js";
    if (!fs::exists(script)) {
      std::fprintf(stderr, "no AWS_ENDPOINT_URL and no %s (run tools/install-deps.sh)\n", script.c_str());
      return 1;
    }
    data_dir = fs::temp_directory_path() / ("ckpt-bench-s3-" + std::to_string(::getpid()));
    fs::create_directories(data_dir);
    const int port = bench::free_port();
    server = ::fork();
    if (server == 0) {
      const std::string p = std::to_string(port);
      ::execlp("node", "node", "--openssl-legacy-provider", script.c_str(), "-d", data_dir.c_str(), "-a", "127.0.0.1",
               "-p", p.c_str(), "--configure-bucket", bucket.c_str(), "--silent", static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    for (int i = 0; i < 200 && !bench::port_open(port); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    opts.endpoint = "http://127.0.0.1:" + std::to_string(port);
    opts.access_key_id = opts.secret_access_key = "S3RVER";
  }
  ckpt::s3::configure(opts);
  const ckpt::S3Options o = ckpt::s3::options();

  bench::Store store;
  store.url = "s3://" + bucket;
  store.endpoint = o.endpoint;
  // A PUT or GET signed as ckpt signs (CURLOPT_AWS_SIGV4, UNSIGNED-PAYLOAD).
  store.prepare = [&](CURL* h, const std::string& key, bool upload, std::size_t n, curl_slist*& hdr) {
    const std::string url = o.endpoint + "/" + bucket + "/" + key;
    const std::string sig = "aws:amz:" + o.region + ":s3";
    hdr = curl_slist_append(hdr, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());  // curl copies the strings
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sig.c_str());
    curl_easy_setopt(h, CURLOPT_USERNAME, o.access_key_id.c_str());
    curl_easy_setopt(h, CURLOPT_PASSWORD, o.secret_access_key.c_str());
    if (upload) {
      curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(n));
    }
  };
  store.remove = [&](const std::string& prefix) {
    auto st = ckpt::storage::s3_bucket(bucket);
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
  std::puts("bench_s3: built without libcurl (no ckpt::s3 target); nothing to measure");
  return 0;
}
#endif
