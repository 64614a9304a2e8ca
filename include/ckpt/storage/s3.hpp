// ckpt/storage/s3.hpp — ckpt::s3: checkpoints in an S3-compatible object store, over
// HTTP with libcurl (opt-in: link the CMake target ckpt::s3, or pkg-config ckpt-s3).
//
//   #include <ckpt/storage/s3.hpp>
//   ckpt::save("s3://bucket/runs/a/step_100", state);     // endpoint, keys from AWS_* variables
//   auto s = ckpt::restore<State>("s3://bucket/runs/a/step_100");
//   ckpt::CheckpointManager<State, ckpt::async_save, ckpt::s3> mgr("bucket/runs/a", {.max_to_keep = 3});
//
// Signing is curl's own AWS SigV4 (CURLOPT_AWS_SIGV4), never a hand-written signer.
// Objects up to multipart_threshold are one PUT; larger ones a multipart upload whose
// parts go up in parallel, straight from the leaves' memory. Reads are ranged GETs in
// parallel, straight into the restore's target. LIST follows continuation tokens;
// DELETE is one request per object, in parallel. Every request is retried with
// exponential backoff on connection failures, timeouts, 5xx and 429; anything else
// (403: wrong credentials, 404 bucket) is a ckpt::Error at once, naming the object, the
// HTTP status and S3's error code and message.
//
// Settings come from S3Options, then the environment for what it leaves empty:
// AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, AWS_REGION or AWS_DEFAULT_REGION,
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN. ckpt::s3::configure(opts)
// sets what every s3:// URL in the process uses. Buckets are addressed path-style
// (endpoint/bucket/key), which S3-compatible servers (MinIO, s3rver, Ceph) and AWS accept.
#pragma once

#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/storage/object_store.hpp>
#include <ckpt/storage/storage.hpp>

namespace ckpt {

struct S3Options {
  // "http://127.0.0.1:9000"; empty: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else
  // https://s3.<region>.amazonaws.com.
  std::string endpoint{};
  // Empty: AWS_REGION, AWS_DEFAULT_REGION, else us-east-1.
  std::string region{};
  // Empty: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN. With no key at
  // all, requests go unsigned (public buckets).
  std::string access_key_id{}, secret_access_key{}, session_token{};
  // Requests in flight at once per bucket: multipart parts, ranged GETs, DELETEs.
  unsigned connections = 8;
  // Size of a multipart part and of a ranged GET (S3 wants parts >= 5 MiB).
  std::size_t part_size = std::size_t{16} << 20;
  // Objects larger than this are uploaded in parts, part_size each, `connections` at a
  // time. A save spreads its data over `connections` objects, so a state up to
  // connections x multipart_threshold (4 GiB by default) goes up as single PUTs.
  std::size_t multipart_threshold = std::size_t{512} << 20;
  // Attempts after the first on connection failures, timeouts, 5xx and 429, waiting
  // retry_delay, then twice that, ... (with jitter) in between.
  int max_retries = 5;
  std::chrono::milliseconds retry_delay{100};
  std::chrono::milliseconds connect_timeout{10'000};
  // A request that moves no byte for this long has timed out (whole seconds, at least 1).
  std::chrono::milliseconds stall_timeout{30'000};
  // A limit on each whole request; 0: none (large parts take as long as they take).
  std::chrono::milliseconds request_timeout{0};
  // LIST page size (0: the server's, 1000 on S3).
  unsigned list_page_size = 0;
  // Per-connection upload speed limit in bytes/s (0: none); for tests that need a slow save.
  std::uint64_t max_send_speed = 0;
  bool verify_tls = true;

  // These options with what they leave empty filled from the environment.
  S3Options resolved() const {
    S3Options o = *this;
    const auto env = [](const char* name) -> std::string {
      const char* v = std::getenv(name);
      return v ? std::string(v) : std::string();
    };
    if (o.region.empty()) o.region = env("AWS_REGION");
    if (o.region.empty()) o.region = env("AWS_DEFAULT_REGION");
    if (o.region.empty()) o.region = "us-east-1";
    if (o.endpoint.empty()) o.endpoint = env("AWS_ENDPOINT_URL_S3");
    if (o.endpoint.empty()) o.endpoint = env("AWS_ENDPOINT_URL");
    if (o.endpoint.empty()) o.endpoint = "https://s3." + o.region + ".amazonaws.com";
    while (!o.endpoint.empty() && o.endpoint.back() == '/') o.endpoint.pop_back();
    if (o.access_key_id.empty() && o.secret_access_key.empty()) {
      o.access_key_id = env("AWS_ACCESS_KEY_ID");
      o.secret_access_key = env("AWS_SECRET_ACCESS_KEY");
      if (o.session_token.empty()) o.session_token = env("AWS_SESSION_TOKEN");
    }
    o.connections = std::max(1u, o.connections);
    o.part_size = std::max<std::size_t>(o.part_size, 1);
    return o;
  }
};

namespace storage {

}  // namespace storage

// S3 internals: libcurl plumbing, SigV4 helpers, XML bits, the per-process defaults.
namespace detail::s3 {

inline void global_init() {
  static const bool done = [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw Error("libcurl cannot be initialised");
    return true;
  }();
  (void)done;
}

// RFC 3986 percent-encoding, as SigV4 wants it; keep_slash for object keys.
inline std::string encode(std::string_view s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
        c == '_' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

inline std::string xml_unescape(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    const auto end = s.find(';', i);
    if (end == std::string_view::npos) {
      out += s.substr(i);
      break;
    }
    const auto ent = s.substr(i + 1, end - i - 1);
    if (ent == "amp") out += '&';
    else if (ent == "lt") out += '<';
    else if (ent == "gt") out += '>';
    else if (ent == "quot") out += '"';
    else if (ent == "apos") out += '\'';
    else if (!ent.empty() && ent[0] == '#') {
      const long code = ent.size() > 1 && (ent[1] == 'x' || ent[1] == 'X')
                            ? std::strtol(std::string(ent.substr(2)).c_str(), nullptr, 16)
                            : std::strtol(std::string(ent.substr(1)).c_str(), nullptr, 10);
      if (code > 0 && code < 128) out += static_cast<char>(code);
    } else {
      out += s.substr(i, end - i + 1);
    }
    i = end;
  }
  return out;
}

// Every <tag>value</tag> in document order (values unescaped, unless `raw`: an element
// whose own elements are read next).
inline std::vector<std::string> xml_all(std::string_view xml, std::string_view tag, bool raw = false) {
  std::vector<std::string> out;
  const std::string open = "<" + std::string(tag) + ">", close = "</" + std::string(tag) + ">";
  for (std::size_t at = 0;;) {
    const auto b = xml.find(open, at);
    if (b == std::string_view::npos) break;
    const auto e = xml.find(close, b + open.size());
    if (e == std::string_view::npos) break;
    const auto inner = xml.substr(b + open.size(), e - b - open.size());
    out.push_back(raw ? std::string(inner) : xml_unescape(inner));
    at = e + close.size();
  }
  return out;
}
inline std::string xml_first(std::string_view xml, std::string_view tag) {
  auto all = xml_all(xml, tag);
  return all.empty() ? std::string() : all.front();
}

// The concatenation of pieces, seekable: what a PUT body reads from.
struct Body {
  std::span<const storage::ConstBytes> pieces;
  std::size_t piece = 0, at = 0;
  void seek(std::uint64_t offset) {
    piece = 0;
    at = 0;
    while (piece < pieces.size() && offset >= pieces[piece].size()) offset -= pieces[piece++].size();
    at = static_cast<std::size_t>(offset);
  }
  std::size_t read(char* out, std::size_t n) {
    std::size_t done = 0;
    while (done < n && piece < pieces.size()) {
      const auto& p = pieces[piece];
      const std::size_t k = std::min(n - done, p.size() - at);
      if (k) std::memcpy(out + done, p.data() + at, k);
      done += k;
      at += k;
      if (at == p.size()) {
        ++piece;
        at = 0;
      }
    }
    return done;
  }
};

// Bytes [offset, offset + dst.size()) of an object go to dst.
struct Piece {
  std::uint64_t offset;
  std::span<std::byte> dst;
};
// One ranged GET [begin, end) of *key scattered into pieces (sorted; the gaps dropped).
struct Range {
  const std::string* key = nullptr;
  std::uint64_t begin = 0, end = 0;
  std::vector<Piece> pieces;
};

struct Request {
  const char* method = "GET";
  std::string key;    // "" for the bucket itself
  std::string query;  // sorted by name, values encoded (SigV4's canonical form)
  std::vector<std::string> headers;
  std::span<const storage::ConstBytes> body{};  // PUT / POST body
  std::uint64_t body_size = 0;
  std::span<std::byte> into{};  // GET: the bytes go straight here
  bool to_dst = false;
  const Range* scatter = nullptr;  // GET: or to these pieces
  std::uint64_t max_body = std::uint64_t{16} << 20;  // otherwise collected, up to this
};

struct Response {
  long status = 0;
  std::string body;  // collected body, or the error document
  std::string etag;
  std::uint64_t received = 0;
  bool overflow = false;
};

struct Transfer {
  const Request* req;
  Response* res;
  CURL* curl;
  Body body;
  long status = 0;  // known from the first body byte on
  std::size_t piece = 0;  // scatter: the first piece not yet filled
};

inline size_t on_write(char* data, size_t size, size_t n, void* user) {
  auto& t = *static_cast<Transfer*>(user);
  const std::size_t len = size * n;
  if (t.status == 0) curl_easy_getinfo(t.curl, CURLINFO_RESPONSE_CODE, &t.status);
  const long code = t.status;
  if (code >= 300 || !t.req->to_dst) {
    const std::uint64_t cap = code >= 300 ? (std::uint64_t{64} << 10) : t.req->max_body;
    if (t.res->body.size() + len > cap) {
      if (code >= 300) return len;  // the start of an error document is enough
      t.res->overflow = true;
      return 0;
    }
    t.res->body.append(data, len);
    t.res->received += len;
    return len;
  }
  const std::uint64_t room = t.req->scatter ? t.req->scatter->end - t.req->scatter->begin : t.req->into.size();
  if (t.res->received + len > room) {
    t.res->overflow = true;
    return 0;
  }
  if (const Range* r = t.req->scatter) {  // copy what falls in a piece, drop the gaps
    const std::uint64_t begin = r->begin + t.res->received, end = begin + len;
    for (std::size_t& i = t.piece; i < r->pieces.size(); ++i) {
      const Piece& p = r->pieces[i];
      const std::uint64_t pend = p.offset + p.dst.size();
      if (p.offset >= end) break;
      const std::uint64_t b = std::max(begin, p.offset), e = std::min(end, pend);
      if (e > b) std::memcpy(p.dst.data() + (b - p.offset), data + (b - begin), static_cast<std::size_t>(e - b));
      if (pend > end) break;  // the piece goes on in the next call
    }
    t.res->received += len;
    return len;
  }
  std::memcpy(t.req->into.data() + t.res->received, data, len);
  t.res->received += len;
  return len;
}

inline size_t on_read(char* out, size_t size, size_t n, void* user) {
  return static_cast<Transfer*>(user)->body.read(out, size * n);
}

inline int on_seek(void* user, curl_off_t offset, int origin) {
  if (origin != SEEK_SET || offset < 0) return CURL_SEEKFUNC_CANTSEEK;
  static_cast<Transfer*>(user)->body.seek(static_cast<std::uint64_t>(offset));
  return CURL_SEEKFUNC_OK;
}

inline size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto& t = *static_cast<Transfer*>(user);
  const std::size_t len = size * n;
  std::string_view line(data, len);
  if (line.size() > 5 && (line.substr(0, 5) == "ETag:" || line.substr(0, 5) == "etag:" || line.substr(0, 5) == "Etag:")) {
    auto v = line.substr(5);
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' ')) v.remove_suffix(1);
    t.res->etag = std::string(v);
  }
  return len;
}

inline bool retryable(CURLcode c) {
  switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}
inline bool retryable(long status) { return status == 429 || status == 408 || status >= 500; }

}  // namespace detail::s3

namespace storage {

class S3Storage final : public Storage {
 public:
  S3Storage(std::string bucket, const S3Options& options) : bucket_(std::move(bucket)), opt_(options.resolved()) {
    ckpt::detail::s3::global_init();
  }
  S3Storage(const S3Storage&) = delete;
  S3Storage& operator=(const S3Storage&) = delete;
  ~S3Storage() override {
    for (CURL* c : idle_) curl_easy_cleanup(c);
  }

  const S3Options& options() const noexcept { return opt_; }
  std::string root_url() const override { return "s3://" + bucket_; }
  unsigned parallelism() const override { return opt_.connections; }

  using Storage::put;
  void put(const std::string& key, std::span<const ConstBytes> pieces) override {
    std::uint64_t total = 0;
    for (const auto& p : pieces) total += p.size();
    if (total <= opt_.multipart_threshold) {
      ckpt::detail::s3::Request r;
      r.method = "PUT";
      r.key = key;
      r.body = pieces;
      r.body_size = total;
      perform(r);
      return;
    }
    put_multipart(key, pieces, total);
  }

  void get(const std::string& key, std::uint64_t offset, std::span<std::byte> dst) const override {
    if (dst.empty()) return;
    // One leaf (a lazy read): ranges of part_size in parallel. A whole restore goes
    // through get_many instead.
    const std::size_t part = opt_.part_size;
    const std::size_t nparts = (dst.size() + part - 1) / part;
    parallel(nparts, [&](std::size_t i) {
      const std::size_t begin = i * part, len = std::min(part, dst.size() - begin);
      get_range(key, offset + begin, dst.subspan(begin, len));
    });
  }

  // Ranges within max_gap of each other are fetched as one (the gap's bytes dropped),
  // and the whole is cut into about `connections` ranged GETs of at least part_size
  // (and at most max(part_size, 256 MiB), which bounds what one retry fetches again),
  // all in parallel. Requests cost S3-compatible servers far more than bytes do:
  // s3rver serves 4 MiB ranges at a third of the rate of whole objects.
  void get_many(std::span<const ReadSegment> segments) const override {
    std::uint64_t total = 0;
    std::map<std::string, std::vector<const ReadSegment*>> by_key;
    for (const auto& seg : segments) {
      if (seg.dst.empty()) continue;
      by_key[seg.key].push_back(&seg);
      total += seg.dst.size();
    }
    const std::uint64_t part = opt_.part_size;
    const std::uint64_t target = std::clamp<std::uint64_t>((total + opt_.connections - 1) / opt_.connections, part,
                                                           std::max<std::uint64_t>(part, std::uint64_t{256} << 20));
    constexpr std::uint64_t max_gap = std::uint64_t{64} << 10;
    std::vector<ckpt::detail::s3::Range> ranges;
    for (auto& [key, segs] : by_key) {
      std::sort(segs.begin(), segs.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
      ckpt::detail::s3::Range cur;
      auto close = [&] {
        if (!cur.pieces.empty()) ranges.push_back(std::move(cur));
        cur = ckpt::detail::s3::Range{};
      };
      for (const ReadSegment* seg : segs) {
        std::uint64_t off = seg->offset;
        std::span<std::byte> dst = seg->dst;
        while (!dst.empty()) {
          if (!cur.pieces.empty() && (off < cur.end || off > cur.end + max_gap || off >= cur.begin + target)) close();
          if (cur.pieces.empty()) {
            cur.key = &key;
            cur.begin = cur.end = off;
          }
          const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(dst.size(), cur.begin + target - off));
          cur.pieces.push_back({off, dst.first(take)});
          cur.end = off + take;
          off += take;
          dst = dst.subspan(take);
        }
      }
      close();
    }
    parallel(ranges.size(), [&](std::size_t i) { get_scattered(ranges[i]); });
  }

  std::optional<std::uint64_t> size(const std::string& key) const override {
    ckpt::detail::s3::Request r;
    r.method = "HEAD";
    r.key = key;
    const auto res = perform(r, {404});
    if (res.status == 404) return std::nullopt;
    return res.received;
  }

  std::optional<std::vector<std::byte>> read_all(const std::string& key, std::uint64_t max_bytes) const override {
    ckpt::detail::s3::Request r;
    r.key = key;
    r.max_body = max_bytes;
    const auto res = perform(r, {404});
    if (res.status == 404) return std::nullopt;
    const auto* p = reinterpret_cast<const std::byte*>(res.body.data());
    return std::vector<std::byte>(p, p + res.body.size());
  }

  std::vector<std::string> list(const std::string& prefix) const override {
    std::vector<std::string> keys;
    for (auto& o : list_sizes(prefix)) keys.push_back(std::move(o.key));
    return keys;
  }

  // ListObjectsV2: each <Contents> holds its <Key> and <Size>.
  std::vector<Listed> list_sizes(const std::string& prefix) const override {
    std::vector<Listed> objects;
    std::string token;
    for (int page = 0;; ++page) {
      ckpt::detail::s3::Request r;
      r.key = "";
      std::string q;
      if (!token.empty()) q += "continuation-token=" + ckpt::detail::s3::encode(token, false) + "&";
      q += "list-type=2";
      if (opt_.list_page_size) q += "&max-keys=" + std::to_string(opt_.list_page_size);
      q += "&prefix=" + ckpt::detail::s3::encode(prefix, false);
      r.query = q;
      const auto res = perform(r);
      for (const auto& c : ckpt::detail::s3::xml_all(res.body, "Contents", true)) {
        Listed o;
        o.key = ckpt::detail::s3::xml_first(c, "Key");
        const std::string size = ckpt::detail::s3::xml_first(c, "Size");
        const auto [end, ec] = std::from_chars(size.data(), size.data() + size.size(), o.size);
        if (o.key.empty() || ec != std::errc() || end != size.data() + size.size())
          throw Error(url(prefix), "", "S3 LIST: an entry without a key or a size");
        objects.push_back(std::move(o));
      }
      if (ckpt::detail::s3::xml_first(res.body, "IsTruncated") != "true") break;
      token = ckpt::detail::s3::xml_first(res.body, "NextContinuationToken");
      if (token.empty()) throw Error(url(prefix), "", "S3 LIST: a truncated page without a continuation token");
    }
    std::sort(objects.begin(), objects.end(), [](const Listed& a, const Listed& b) { return a.key < b.key; });
    return objects;
  }

  void remove(const std::vector<std::string>& keys) override {
    parallel(keys.size(), [&](std::size_t i) {
      ckpt::detail::s3::Request r;
      r.method = "DELETE";
      r.key = keys[i];
      perform(r, {404});
    });
  }

 private:
  // --- handles: one per connection, kept for keep-alive --------------------------
  CURL* acquire() const {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !idle_.empty() || live_ < opt_.connections; });
    if (!idle_.empty()) {
      CURL* c = idle_.back();
      idle_.pop_back();
      return c;
    }
    CURL* c = curl_easy_init();
    if (!c) throw Error(root_url(), "", "libcurl cannot create a handle");
    ++live_;
    return c;
  }
  void release(CURL* c) const {
    {
      std::lock_guard lock(mu_);
      idle_.push_back(c);
    }
    cv_.notify_one();
  }

  // Runs f(0..n-1) on up to `connections` threads; rethrows the first failure.
  template <class F>
  void parallel(std::size_t n, F&& f) const {
    if (n == 0) return;
    if (n == 1) return f(0);
    std::atomic<std::size_t> next{0};
    std::exception_ptr error;
    std::mutex error_mu;
    auto worker = [&] {
      for (std::size_t i; (i = next.fetch_add(1)) < n;) {
        try {
          f(i);
        } catch (...) {
          std::lock_guard lock(error_mu);
          if (!error) error = std::current_exception();
          next = n;
        }
      }
    };
    {
      std::vector<std::jthread> pool;
      const std::size_t threads = std::min<std::size_t>(n, opt_.connections);
      for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
      worker();
    }
    if (error) std::rethrow_exception(error);
  }

  std::string object_url(const ckpt::detail::s3::Request& r) const {
    std::string u = opt_.endpoint + "/" + bucket_;
    if (!r.key.empty()) u += "/" + ckpt::detail::s3::encode(r.key, true);
    if (!r.query.empty()) u += "?" + r.query;
    return u;
  }

  // One request, retried; a status in `ok_also` (404 for HEAD) is returned, not thrown.
  ckpt::detail::s3::Response perform(const ckpt::detail::s3::Request& r, std::initializer_list<long> ok_also = {}) const {
    const std::string url = object_url(r);
    std::string last;
    std::mt19937 rng(std::random_device{}());
    for (int attempt = 0;; ++attempt) {
      ckpt::detail::s3::Response res;
      CURLcode rc = CURLE_OK;
      char errbuf[CURL_ERROR_SIZE] = {};
      CURL* c = acquire();
      try {
        rc = run(c, r, url, res, errbuf);
      } catch (...) {
        release(c);
        throw;
      }
      release(c);
      const std::string what = std::string(r.method) + " " + url;
      if (rc == CURLE_OK) {
        if (res.status >= 200 && res.status < 300) {
          // CompleteMultipartUpload can fail with 200 and an error document
          if (r.query.starts_with("uploadId=") && res.body.find("<Error>") != std::string::npos)
            last = "HTTP 200 with an error: " + ckpt::detail::s3::xml_first(res.body, "Code") + ": " +
                   ckpt::detail::s3::xml_first(res.body, "Message");
          else
            return res;
        } else if (std::find(ok_also.begin(), ok_also.end(), res.status) != ok_also.end()) {
          return res;
        } else {
          std::string msg = "HTTP " + std::to_string(res.status);
          const std::string code = ckpt::detail::s3::xml_first(res.body, "Code");
          if (!code.empty()) msg += " " + code + ": " + ckpt::detail::s3::xml_first(res.body, "Message");
          if (!ckpt::detail::s3::retryable(res.status) || attempt >= opt_.max_retries) {
            if (res.status == 403) msg += " (check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or S3Options)";
            throw Error(url_for(r), "", "S3 " + what + " failed: " + msg + attempts(attempt));
          }
          last = msg;
        }
      } else {
        if (res.overflow) {
          if (r.to_dst)
            throw CorruptCheckpointError(url_for(r), "", "S3 returned more bytes than were asked for");
          throw CorruptCheckpointError(url_for(r), "", "object is larger than the " + std::to_string(r.max_body) +
                                                           " bytes allowed");
        }
        std::string msg = std::string(curl_easy_strerror(rc)) + (errbuf[0] ? std::string(" (") + errbuf + ")" : "");
        if (!ckpt::detail::s3::retryable(rc) || attempt >= opt_.max_retries)
          throw Error(url_for(r), "", "S3 " + what + " failed: " + msg + attempts(attempt));
        last = msg;
      }
      const auto base = opt_.retry_delay * (1 << std::min(attempt, 10));
      std::uniform_int_distribution<long long> jitter(0, base.count() / 2);
      std::this_thread::sleep_for(base + std::chrono::milliseconds(jitter(rng)));
    }
  }

  static std::string attempts(int attempt) {
    return attempt == 0 ? std::string() : " (after " + std::to_string(attempt + 1) + " attempts)";
  }
  std::string url_for(const ckpt::detail::s3::Request& r) const { return r.key.empty() ? root_url() : url(r.key); }

  CURLcode run(CURL* c, const ckpt::detail::s3::Request& r, const std::string& url, ckpt::detail::s3::Response& res,
               char* errbuf) const {
    curl_easy_reset(c);
    ckpt::detail::s3::Transfer t{&r, &res, c, ckpt::detail::s3::Body{r.body}};
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 512L << 10);  // fewer, larger write callbacks
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(opt_.connect_timeout.count()));
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME,
                     static_cast<long>(std::max<long long>(1, (opt_.stall_timeout.count() + 999) / 1000)));
    if (opt_.request_timeout.count() > 0)
      curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(opt_.request_timeout.count()));
    if (opt_.max_send_speed)
      curl_easy_setopt(c, CURLOPT_MAX_SEND_SPEED_LARGE, static_cast<curl_off_t>(opt_.max_send_speed));
    if (!opt_.verify_tls) {
      curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
      curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &ckpt::detail::s3::on_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, &ckpt::detail::s3::on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
    const std::string region_spec = "aws:amz:" + opt_.region + ":s3";
    if (!opt_.access_key_id.empty()) {
      curl_easy_setopt(c, CURLOPT_AWS_SIGV4, region_spec.c_str());
      curl_easy_setopt(c, CURLOPT_USERNAME, opt_.access_key_id.c_str());
      curl_easy_setopt(c, CURLOPT_PASSWORD, opt_.secret_access_key.c_str());
    }
    curl_slist* headers = nullptr;
    struct Free {
      curl_slist*& h;
      ~Free() { curl_slist_free_all(h); }
    } free_headers{headers};
    headers = curl_slist_append(headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    headers = curl_slist_append(headers, "Expect:");  // no 100-continue round trip
    if (!opt_.session_token.empty())
      headers = curl_slist_append(headers, ("x-amz-security-token: " + opt_.session_token).c_str());
    for (const auto& h : r.headers) headers = curl_slist_append(headers, h.c_str());

    const std::string_view m = r.method;
    if (m == "PUT") {
      curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(r.body_size));
    } else if (m == "POST") {
      curl_easy_setopt(c, CURLOPT_POST, 1L);
      curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body_size));
      headers = curl_slist_append(headers, "Content-Type: application/xml");
    } else if (m == "HEAD") {
      curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    } else if (m == "DELETE") {
      curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "DELETE");
    }
    if (m == "PUT" || m == "POST") {
      curl_easy_setopt(c, CURLOPT_READFUNCTION, &ckpt::detail::s3::on_read);
      curl_easy_setopt(c, CURLOPT_READDATA, &t);
      curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, &ckpt::detail::s3::on_seek);
      curl_easy_setopt(c, CURLOPT_SEEKDATA, &t);
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    const CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &res.status);
    if (m == "HEAD" && rc == CURLE_OK) {
      curl_off_t len = -1;
      curl_easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len);
      res.received = len < 0 ? 0 : static_cast<std::uint64_t>(len);
    }
    return rc;
  }

  void get_range(const std::string& key, std::uint64_t offset, std::span<std::byte> dst) const {
    ckpt::detail::s3::Request r;
    r.key = key;
    r.into = dst;
    r.to_dst = true;
    r.headers.push_back("Range: bytes=" + std::to_string(offset) + "-" + std::to_string(offset + dst.size() - 1));
    const auto res = perform(r, {404, 416});
    if (res.status == 404) throw Error(url(key), "", "no such object");
    if (res.status == 416 || res.received != dst.size())
      throw CorruptCheckpointError(url(key), "", "object ends before byte " + std::to_string(offset + dst.size()) +
                                                     " (truncated?)");
  }

  void get_scattered(const ckpt::detail::s3::Range& range) const {
    ckpt::detail::s3::Request r;
    r.key = *range.key;
    r.to_dst = true;
    r.scatter = &range;
    r.headers.push_back("Range: bytes=" + std::to_string(range.begin) + "-" + std::to_string(range.end - 1));
    const auto res = perform(r, {404, 416});
    if (res.status == 404) throw Error(url(r.key), "", "no such object");
    if (res.status == 416 || res.received != range.end - range.begin)
      throw CorruptCheckpointError(url(r.key), "", "object ends before byte " + std::to_string(range.end) + " (truncated?)");
  }

  void put_multipart(const std::string& key, std::span<const ConstBytes> pieces, std::uint64_t total) {
    ckpt::detail::s3::Request init;
    init.method = "POST";
    init.key = key;
    init.query = "uploads=";
    const std::string upload_id = ckpt::detail::s3::xml_first(perform(init).body, "UploadId");
    if (upload_id.empty()) throw Error(url(key), "", "S3 did not start a multipart upload (no UploadId)");
    const std::string id_q = "uploadId=" + ckpt::detail::s3::encode(upload_id, false);

    // The pieces of [begin, begin + len) of the concatenation.
    std::vector<std::uint64_t> starts;
    std::uint64_t at = 0;
    for (const auto& p : pieces) {
      starts.push_back(at);
      at += p.size();
    }
    auto slice = [&](std::uint64_t begin, std::uint64_t len) {
      std::vector<ConstBytes> out;
      auto i = static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end(), begin) - starts.begin()) - 1;
      for (std::uint64_t end = begin + len; i < pieces.size() && starts[i] < end; ++i) {
        const std::uint64_t b = std::max(begin, starts[i]), e = std::min(end, starts[i] + pieces[i].size());
        if (e > b) out.push_back(pieces[i].subspan(static_cast<std::size_t>(b - starts[i]), static_cast<std::size_t>(e - b)));
      }
      return out;
    };
    const std::uint64_t part = opt_.part_size;
    const std::size_t nparts = static_cast<std::size_t>((total + part - 1) / part);
    std::vector<std::string> etags(nparts);
    try {
      parallel(nparts, [&](std::size_t i) {
        const std::uint64_t begin = i * part, len = std::min<std::uint64_t>(part, total - begin);
        const auto body = slice(begin, len);
        ckpt::detail::s3::Request r;
        r.method = "PUT";
        r.key = key;
        r.query = "partNumber=" + std::to_string(i + 1) + "&" + id_q;
        r.body = body;
        r.body_size = len;
        etags[i] = perform(r).etag;
        if (etags[i].empty()) throw Error(url(key), "", "S3 returned no ETag for part " + std::to_string(i + 1));
      });
      std::string xml = "<CompleteMultipartUpload>";
      for (std::size_t i = 0; i < nparts; ++i)
        xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + etags[i] + "</ETag></Part>";
      xml += "</CompleteMultipartUpload>";
      const ConstBytes body = std::as_bytes(std::span(xml));
      ckpt::detail::s3::Request done;
      done.method = "POST";
      done.key = key;
      done.query = id_q;
      done.body = std::span<const ConstBytes>(&body, 1);
      done.body_size = xml.size();
      perform(done);
    } catch (...) {
      try {  // best effort: an upload never completed is no object, but holds storage
        ckpt::detail::s3::Request abort;
        abort.method = "DELETE";
        abort.key = key;
        abort.query = id_q;
        perform(abort, {404});
      } catch (...) {
      }
      throw;
    }
  }

  std::string bucket_;
  S3Options opt_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable std::vector<CURL*> idle_;
  mutable unsigned live_ = 0;
};

}  // namespace storage

// S3 internals: libcurl plumbing, SigV4 helpers, XML bits, the per-process defaults.
namespace detail::s3 {
struct Defaults {
  std::mutex mu;
  S3Options options;
  std::map<std::string, std::shared_ptr<storage::S3Storage>> buckets;
};
inline Defaults& defaults() {
  static Defaults d;
  return d;
}
}  // namespace detail::s3

namespace storage {

// The storage of s3://bucket with the process's options (ckpt::s3::configure), one per bucket.
inline std::shared_ptr<S3Storage> s3_bucket(const std::string& bucket) {
  auto& d = ckpt::detail::s3::defaults();
  std::lock_guard lock(d.mu);
  auto& slot = d.buckets[bucket];
  if (!slot) slot = std::make_shared<S3Storage>(bucket, d.options);
  return slot;
}

inline Location open_s3_url(const std::string& url) {
  const ParsedUrl u = parse_url(url);
  return Location{s3_bucket(u.bucket), u.prefix, url};
}

inline const bool s3_registered = register_url_scheme(object_scheme("s3", &open_s3_url));

}  // namespace storage

// The storage policy: CheckpointManager<State, ckpt::async_save, ckpt::s3> takes "bucket/run"
// as s3://bucket/run.
struct s3 {
  static constexpr std::string_view storage_scheme = "s3";
  // What every s3:// URL in this process uses from now on (fields left empty: the environment).
  static void configure(const S3Options& options) {
    auto& d = ckpt::detail::s3::defaults();
    std::lock_guard lock(d.mu);
    d.options = options;
    d.buckets.clear();  // storages in use keep their options until released
  }
  static S3Options options() {
    auto& d = ckpt::detail::s3::defaults();
    std::lock_guard lock(d.mu);
    return d.options.resolved();
  }
};

}  // namespace ckpt
