// What bench_s3 and bench_gcs share: the state saved (16 float32 layers), the plain
// libcurl baseline, and the measured run.
//
// Baseline: the same bytes as CONNECTIONS single objects (one upload each, then one GET
// each), all in flight at once on CONNECTIONS threads with one curl handle each,
// authenticated as ckpt's requests are: the transport's limit at that connection count.
// ckpt uses the same connection count for its uploads and its parallel ranged GETs,
// and also hashes every leaf (xxh3) on save and verifies it on restore. Each repetition
// runs both, alternating which goes first, so that neither always meets a warmer server.
#pragma once

#include <curl/curl.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <ckpt/ckpt.hpp>

namespace object_store_bench {

using Clock = std::chrono::steady_clock;

struct Layer {
  std::vector<float> w;
};
struct BenchState {
  std::int64_t step = 0;
  std::vector<Layer> layers;
};

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

inline int free_port() {
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
inline bool port_open(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// What a store adds to one plain request for object `key`: the URL, the method and
// the authentication (curl options on h, headers appended to hdr).
using Prepare = std::function<void(CURL* h, const std::string& key, bool upload, std::size_t n, curl_slist*& hdr)>;

struct Cursor {
  const char* data;
  std::size_t n, at;
};
inline size_t read_cb(char* out, size_t size, size_t count, void* user) {
  auto& c = *static_cast<Cursor*>(user);
  const std::size_t k = std::min(size * count, c.n - c.at);
  std::memcpy(out, c.data + c.at, k);
  c.at += k;
  return k;
}
inline size_t discard_cb(char*, size_t size, size_t count, void*) { return size * count; }
inline size_t write_cb(char* in, size_t size, size_t count, void* user) {
  auto& c = *static_cast<Cursor*>(user);
  const std::size_t k = size * count;
  if (c.at + k > c.n) return 0;
  std::memcpy(const_cast<char*>(c.data) + c.at, in, k);
  c.at += k;
  return k;
}

// One plain upload or GET of [data, data + n) as object `key`.
inline void plain(CURL* h, const Prepare& prepare, const std::string& key, char* data, std::size_t n, bool upload) {
  curl_easy_reset(h);
  Cursor c{data, n, 0};
  curl_slist* hdr = curl_slist_append(nullptr, "Expect:");
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  prepare(h, key, upload, n, hdr);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
  if (upload) {
    curl_easy_setopt(h, CURLOPT_READFUNCTION, &read_cb);
    curl_easy_setopt(h, CURLOPT_READDATA, &c);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &discard_cb);  // the object's metadata, if any
  } else {
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &write_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &c);
  }
  const CURLcode rc = curl_easy_perform(h);
  long status = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(hdr);
  if (rc != CURLE_OK || status >= 300 || (!upload && c.at != n)) {
    std::fprintf(stderr, "plain %s %s failed: %s, HTTP %ld\n", upload ? "upload" : "GET", key.c_str(),
                 curl_easy_strerror(rc), status);
    std::exit(1);
  }
}

// The baseline: `conns` objects of n / conns bytes each, all at once.
inline double plain_all(std::vector<CURL*>& handles, const Prepare& prepare, const std::string& prefix,
                        std::vector<char>& bytes, bool upload) {
  const std::size_t conns = handles.size(), chunk = (bytes.size() + conns - 1) / conns;
  const auto t0 = Clock::now();
  {
    std::vector<std::jthread> threads;
    for (std::size_t i = 0; i < conns; ++i)
      threads.emplace_back([&, i] {
        const std::size_t b = i * chunk, n = std::min(chunk, bytes.size() - b);
        plain(handles[i], prepare, prefix + "/obj-" + std::to_string(i), bytes.data() + b, n, upload);
      });
  }
  return seconds_since(t0);
}

struct Store {
  std::string url;       // "s3://bkt", "gs://bkt": ckpt's checkpoints go under it
  std::string endpoint;  // for the summary line
  Prepare prepare;
  std::function<void(const std::string& prefix)> remove;  // everything under prefix + "/"
};

// Saves and restores a state of `mib` MiB `reps` times against the baseline; prints each
// repetition, then the medians and ratios. Returns the exit status.
inline int run(std::size_t mib, int reps, unsigned conns, const Store& store) {
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
    const std::string url = store.url + "/" + prefix + "/ckpt";
    auto with_ckpt = [&] {
      auto t0 = Clock::now();
      ckpt::save(url, state);
      save_s.push_back(seconds_since(t0));
      t0 = Clock::now();
      ckpt::restore_into(url, back);
      restore_s.push_back(seconds_since(t0));
    };
    auto with_plain = [&] {
      put_s.push_back(plain_all(handles, store.prepare, prefix + "/plain", bytes, true));
      get_s.push_back(plain_all(handles, store.prepare, prefix + "/plain", bytes, false));
    };
    if (r % 2) with_ckpt(), with_plain();
    else with_plain(), with_ckpt();
    if (back.layers[layers - 1].w != state.layers[layers - 1].w) {
      std::fprintf(stderr, "restored bytes differ\n");
      return 1;
    }
    store.remove(prefix);
    std::printf("rep %d: plain upload %.2f s, ckpt save %.2f s, plain GET %.2f s, ckpt restore %.2f s\n", r,
                put_s.back(), save_s.back(), get_s.back(), restore_s.back());
    std::fflush(stdout);
  }
  for (auto& h : handles) curl_easy_cleanup(h);

  const double mb = static_cast<double>(bytes.size()) / 1e6;
  const double put = median(put_s), get = median(get_s), save = median(save_s), restore = median(restore_s);
  std::printf("\n%zu MiB, %u connections, %d reps, %s; medians:\n", mib, conns, reps, store.endpoint.c_str());
  std::printf("  upload:   plain libcurl %.2f s (%.0f MB/s), ckpt::save %.2f s (%.0f MB/s): %.2fx the baseline\n", put,
              mb / put, save, mb / save, put / save);
  std::printf("  download: plain libcurl %.2f s (%.0f MB/s), ckpt::restore_into %.2f s (%.0f MB/s): %.2fx the baseline\n",
              get, mb / get, restore, mb / restore, get / restore);
  return 0;
}

}  // namespace object_store_bench
