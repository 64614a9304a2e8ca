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
// Baseline: the same bytes as CONNECTIONS single objects (one PUT each, then one GET
// each), all in flight at once on CONNECTIONS threads with one curl handle each, signed
// the same way (CURLOPT_AWS_SIGV4): the transport's limit at that connection count. ckpt
// uses the same connection count (S3Options::connections) for its multipart upload and
// its parallel ranged GETs, and also hashes every leaf (xxh3) on save and verifies it
// on restore. Not a test: it prints medians and ratios (docs/storage.md quotes them).
#include <ckpt/ckpt.hpp>

#if defined(CKPT_HAVE_S3)
#include <ckpt/storage/s3.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Layer {
  std::vector<float> w;
};
struct BenchState {
  std::int64_t step = 0;
  std::vector<Layer> layers;
};

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}
bool port_open(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// One plain PUT or GET of [data, data + n) as object `key`, signed as ckpt signs.
struct Cursor {
  const char* data;
  std::size_t n, at;
};
size_t read_cb(char* out, size_t size, size_t count, void* user) {
  auto& c = *static_cast<Cursor*>(user);
  const std::size_t k = std::min(size * count, c.n - c.at);
  std::memcpy(out, c.data + c.at, k);
  c.at += k;
  return k;
}
size_t write_cb(char* in, size_t size, size_t count, void* user) {
  auto& c = *static_cast<Cursor*>(user);
  const std::size_t k = size * count;
  if (c.at + k > c.n) return 0;
  std::memcpy(const_cast<char*>(c.data) + c.at, in, k);
  c.at += k;
  return k;
}
void plain(CURL* h, const ckpt::S3Options& o, const std::string& bucket, const std::string& key, char* data,
           std::size_t n, bool upload) {
  curl_easy_reset(h);
  const std::string url = o.endpoint + "/" + bucket + "/" + key;
  const std::string sig = "aws:amz:" + o.region + ":s3";
  Cursor c{data, n, 0};
  curl_slist* hdr = curl_slist_append(nullptr, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
  hdr = curl_slist_append(hdr, "Expect:");
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sig.c_str());
  curl_easy_setopt(h, CURLOPT_USERNAME, o.access_key_id.c_str());
  curl_easy_setopt(h, CURLOPT_PASSWORD, o.secret_access_key.c_str());
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
  if (upload) {
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(n));
    curl_easy_setopt(h, CURLOPT_READFUNCTION, &read_cb);
    curl_easy_setopt(h, CURLOPT_READDATA, &c);
  } else {
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &write_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &c);
  }
  const CURLcode rc = curl_easy_perform(h);
  long status = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(hdr);
  if (rc != CURLE_OK || status >= 300 || (!upload && c.at != n)) {
    std::fprintf(stderr, "plain %s %s failed: %s, HTTP %ld\n", upload ? "PUT" : "GET", key.c_str(),
                 curl_easy_strerror(rc), status);
    std::exit(1);
  }
}

// The baseline: `conns` objects of n / conns bytes each, all at once.
double plain_all(std::vector<CURL*>& handles, const ckpt::S3Options& o, const std::string& bucket,
                 const std::string& prefix, std::vector<char>& bytes, bool upload) {
  const std::size_t conns = handles.size(), chunk = (bytes.size() + conns - 1) / conns;
  const auto t0 = Clock::now();
  {
    std::vector<std::jthread> threads;
    for (std::size_t i = 0; i < conns; ++i)
      threads.emplace_back([&, i] {
        const std::size_t b = i * chunk, n = std::min(chunk, bytes.size() - b);
        plain(handles[i], o, bucket, prefix + "/obj-" + std::to_string(i), bytes.data() + b, n, upload);
      });
  }
  return seconds_since(t0);
}

}  // namespace

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
    const int port = free_port();
    server = ::fork();
    if (server == 0) {
      const std::string p = std::to_string(port);
      ::execlp("node", "node", "--openssl-legacy-provider", script.c_str(), "-d", data_dir.c_str(), "-a", "127.0.0.1",
               "-p", p.c_str(), "--configure-bucket", bucket.c_str(), "--silent", static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    for (int i = 0; i < 200 && !port_open(port); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    opts.endpoint = "http://127.0.0.1:" + std::to_string(port);
    opts.access_key_id = opts.secret_access_key = "S3RVER";
  }
  ckpt::s3::configure(opts);
  const ckpt::S3Options o = ckpt::s3::options();

  // 16 layers of float32, mib MiB in all, filled with something other than zeros.
  BenchState state;
  const std::size_t layers = 16, per = mib * (std::size_t{1} << 20) / layers / sizeof(float);
  state.layers.resize(layers);
  for (std::size_t l = 0; l < layers; ++l) {
    state.layers[l].w.resize(per);
    for (std::size_t i = 0; i < per; ++i) state.layers[l].w[i] = static_cast<float>((i * 2654435761u + l) % 10007);
  }
  std::vector<char> bytes(layers * per * sizeof(float));
  for (std::size_t l = 0; l < layers; ++l)
    std::memcpy(bytes.data() + l * per * sizeof(float), state.layers[l].w.data(), per * sizeof(float));
  BenchState back = state;  // restore_into target, already allocated (as a resumed trainer's)

  std::vector<CURL*> handles(conns);
  for (auto& h : handles) h = curl_easy_init();
  std::vector<double> put_s, get_s, save_s, restore_s;
  for (int r = 0; r < reps; ++r) {
    const std::string prefix = "bench/rep-" + std::to_string(r);
    const std::string url = "s3://" + bucket + "/" + prefix + "/ckpt";
    auto with_ckpt = [&] {
      auto t0 = Clock::now();
      ckpt::save(url, state);
      save_s.push_back(seconds_since(t0));
      t0 = Clock::now();
      ckpt::restore_into(url, back);
      restore_s.push_back(seconds_since(t0));
    };
    auto with_plain = [&] {
      put_s.push_back(plain_all(handles, o, bucket, prefix + "/plain", bytes, true));
      get_s.push_back(plain_all(handles, o, bucket, prefix + "/plain", bytes, false));
    };
    // Alternating which goes first, so that neither always meets a warmer server.
    if (r % 2) with_ckpt(), with_plain();
    else with_plain(), with_ckpt();
    if (back.layers[layers - 1].w != state.layers[layers - 1].w) {
      std::fprintf(stderr, "restored bytes differ\n");
      return 1;
    }
    auto store = ckpt::storage::s3_bucket(bucket);
    store->remove(store->list(prefix + "/"));
    std::printf("rep %d: plain PUT %.2f s, ckpt save %.2f s, plain GET %.2f s, ckpt restore %.2f s\n", r, put_s.back(),
                save_s.back(), get_s.back(), restore_s.back());
    std::fflush(stdout);
  }
  for (auto& h : handles) curl_easy_cleanup(h);

  const double mb = static_cast<double>(bytes.size()) / 1e6;
  const double put = median(put_s), get = median(get_s), save = median(save_s), restore = median(restore_s);
  std::printf("\n%zu MiB, %u connections, %d reps, %s; medians:\n", mib, conns, reps, o.endpoint.c_str());
  std::printf("  upload:   plain libcurl %.2f s (%.0f MB/s), ckpt::save %.2f s (%.0f MB/s): %.2fx the baseline\n", put,
              mb / put, save, mb / save, put / save);
  std::printf("  download: plain libcurl %.2f s (%.0f MB/s), ckpt::restore_into %.2f s (%.0f MB/s): %.2fx the baseline\n",
              get, mb / get, restore, mb / restore, get / restore);
  if (server > 0) {
    ::kill(server, SIGTERM);
    ::waitpid(server, nullptr, 0);
    std::error_code ec;
    fs::remove_all(data_dir, ec);
  }
  return 0;
}

#else
#include <cstdio>
int main() {
  std::puts("bench_s3: built without libcurl (no ckpt::s3 target); nothing to measure");
  return 0;
}
#endif
