// ckpt/io/http.hpp — an HTTP client over libcurl for the object stores (S3, and any
// other that speaks HTTP): a pool of connections kept alive, one request retried with
// backoff, bodies sent from and received into the caller's memory. Opt-in, as the
// stores that use it: a program that includes it links libcurl.
//
// It knows HTTP, not a service: what a store adds to a request (a signature, a token,
// its own headers) and how it reads an error document are the HttpService a store
// hands to the client. Requests are retried with exponential backoff and jitter on
// connection failures, timeouts, 5xx, 408 and 429; any other status is a ckpt::Error at
// once, naming the request's subject, the method, the URL, the status and what the
// service read from the error document.
#pragma once

#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <thread>
#include <vector>

#include <ckpt/error.hpp>

namespace ckpt::io {

struct HttpOptions {
  // Requests in flight at once: the connections kept open.
  unsigned connections = 8;
  // Attempts after the first on connection failures, timeouts, 5xx, 408 and 429,
  // waiting retry_delay, then twice that, ... (with jitter) in between.
  int max_retries = 5;
  std::chrono::milliseconds retry_delay{100};
  // No retry starts after this long since a request's first attempt (0: no limit but
  // max_retries), so that a service down for good fails a save in bounded time.
  std::chrono::milliseconds retry_budget{0};
  std::chrono::milliseconds connect_timeout{10'000};
  // A request that moves no byte for this long has timed out (whole seconds, at least 1).
  std::chrono::milliseconds stall_timeout{30'000};
  // A limit on each whole request; 0: none.
  std::chrono::milliseconds request_timeout{0};
  // Per-connection upload speed limit in bytes/s (0: none).
  std::uint64_t max_send_speed = 0;
  bool verify_tls = true;
};

// Bytes [offset, offset + dst.size()) of a resource go to dst.
struct HttpPiece {
  std::uint64_t offset;
  std::span<std::byte> dst;
};
// A ranged GET of [begin, end) scattered into pieces (sorted by offset; the bytes
// between them dropped).
struct HttpScatter {
  std::uint64_t begin = 0, end = 0;
  std::vector<HttpPiece> pieces;
};

struct HttpRequest {
  const char* method = "GET";  // GET, HEAD, PUT, POST, DELETE
  std::string url;
  std::string subject;  // what an Error names (the object's URL in the store)
  std::vector<std::string> headers;
  std::span<const std::span<const std::byte>> body{};  // PUT / POST: their concatenation
  std::uint64_t body_size = 0;
  std::string content_type{};  // POST
  // GET: the body goes straight into `into`, or scattered by `scatter` (to_dst);
  // otherwise it is collected in HttpResponse::body, up to max_body bytes.
  std::span<std::byte> into{};
  bool to_dst = false;
  const HttpScatter* scatter = nullptr;
  std::uint64_t max_body = std::uint64_t{16} << 20;
};

struct HttpResponse {
  long status = 0;
  std::string body;  // collected body, or the start of the error document
  std::string etag;
  std::uint64_t received = 0;  // bytes of body; HEAD: the Content-Length
  bool overflow = false;
  // The response's headers, names in lower case (of the final response: a 100 or a
  // redirect's are dropped).
  std::vector<std::pair<std::string, std::string>> headers;
  std::string header(std::string_view name) const {
    for (const auto& [k, v] : headers)
      if (k == name) return v;
    return {};
  }
};

// What a service adds to the transport. Every member may be empty.
struct HttpService {
  std::string name = "HTTP";  // "S3": how messages name the service
  // Adds to a request about to be sent: options on the handle (curl's SigV4), headers.
  std::function<void(CURL*, std::vector<std::string>& headers)> authorize;
  // What an error document says ("NoSuchBucket: ..."), for the message.
  std::function<std::string(const HttpResponse&)> describe_error;
  // A 2xx response that is a failure after all (non-empty: what it says).
  std::function<std::string(const HttpRequest&, const HttpResponse&)> error_in_success;
  // Advice to add to the message of a final status (403: which credentials to check).
  std::function<std::string(long status)> hint;
  // On a 401: whether the credentials were renewed (a token revoked or expired early),
  // so that the request is worth sending once more. Asked once per request.
  std::function<bool()> renew_credentials;
};

namespace detail::http {

inline void global_init() {
  static const bool done = [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw Error("libcurl cannot be initialised");
    return true;
  }();
  (void)done;
}

// The concatenation of pieces, seekable: what a PUT body reads from.
struct Body {
  std::span<const std::span<const std::byte>> pieces;
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

struct Transfer {
  const HttpRequest* req;
  HttpResponse* res;
  CURL* curl;
  Body body;
  long status = 0;        // known from the first body byte on
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
  if (const HttpScatter* r = t.req->scatter) {  // copy what falls in a piece, drop the gaps
    const std::uint64_t begin = r->begin + t.res->received, end = begin + len;
    for (std::size_t& i = t.piece; i < r->pieces.size(); ++i) {
      const HttpPiece& p = r->pieces[i];
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
  if (line.starts_with("HTTP/")) t.res->headers.clear();  // a new response (after a 100)
  if (const auto colon = line.find(':'); colon != std::string_view::npos && colon > 0) {
    std::string name(line.substr(0, colon));
    for (char& ch : name) ch = static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
    auto v = line.substr(colon + 1);
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' ')) v.remove_suffix(1);
    t.res->headers.emplace_back(std::move(name), std::string(v));
  }
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

}  // namespace detail::http

// A ranged GET of one object: its key and the range scattered into the caller's memory.
struct KeyedScatter {
  const std::string* key = nullptr;
  HttpScatter scatter;
};

// Many reads of objects (each with .key, .offset and .dst) as few ranged GETs to run in
// parallel: ranges within 64 KiB of each other are fetched as one (the gap's bytes
// dropped), and the whole is cut into about `connections` GETs of at least part_size
// (and at most max(part_size, 256 MiB), which bounds what one retry fetches again).
// Requests cost object stores far more than bytes do: s3rver serves 4 MiB ranges at a
// third of the rate of whole objects.
template <class Segment>
std::vector<KeyedScatter> plan_ranged_reads(std::span<const Segment> segments, unsigned connections,
                                            std::uint64_t part_size) {
  std::uint64_t total = 0;
  std::vector<const Segment*> sorted;
  for (const auto& seg : segments) {
    if (seg.dst.empty()) continue;
    sorted.push_back(&seg);
    total += seg.dst.size();
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const Segment* a, const Segment* b) { return a->key != b->key ? a->key < b->key : a->offset < b->offset; });
  const std::uint64_t part = std::max<std::uint64_t>(part_size, 1), conns = std::max(1u, connections);
  const std::uint64_t target =
      std::clamp<std::uint64_t>((total + conns - 1) / conns, part, std::max<std::uint64_t>(part, std::uint64_t{256} << 20));
  constexpr std::uint64_t max_gap = std::uint64_t{64} << 10;
  std::vector<KeyedScatter> ranges;
  KeyedScatter cur;
  auto close = [&] {
    if (!cur.scatter.pieces.empty()) ranges.push_back(std::move(cur));
    cur = KeyedScatter{};
  };
  for (const Segment* seg : sorted) {
    if (cur.key && *cur.key != seg->key) close();
    std::uint64_t off = seg->offset;
    std::span<std::byte> dst = seg->dst;
    while (!dst.empty()) {
      if (!cur.scatter.pieces.empty() &&
          (off < cur.scatter.end || off > cur.scatter.end + max_gap || off >= cur.scatter.begin + target))
        close();
      if (cur.scatter.pieces.empty()) {
        cur.key = &seg->key;
        cur.scatter.begin = cur.scatter.end = off;
      }
      const auto take = static_cast<std::size_t>(std::min<std::uint64_t>(dst.size(), cur.scatter.begin + target - off));
      cur.scatter.pieces.push_back({off, dst.first(take)});
      cur.scatter.end = off + take;
      off += take;
      dst = dst.subspan(take);
    }
  }
  close();
  return ranges;
}

// RFC 3986 percent-encoding; keep_slash for the path of a URL.
inline std::string url_encode(std::string_view s, bool keep_slash) {
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

class HttpClient {
 public:
  HttpClient(const HttpOptions& options, HttpService service) : opt_(options), service_(std::move(service)) {
    opt_.connections = std::max(1u, opt_.connections);
    detail::http::global_init();
  }
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;
  ~HttpClient() {
    for (CURL* c : idle_) curl_easy_cleanup(c);
  }

  const HttpOptions& options() const noexcept { return opt_; }

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

  // One request, retried; a status in `ok_also` (404 for HEAD) is returned, not thrown.
  HttpResponse perform(const HttpRequest& r, std::initializer_list<long> ok_also = {}) const {
    std::string last;
    std::mt19937 rng(std::random_device{}());
    const std::string what = service_.name + " " + r.method + " " + r.url;
    const auto started = std::chrono::steady_clock::now();
    bool renewed = false;
    for (int attempt = 0;; ++attempt) {
      HttpResponse res;
      CURLcode rc = CURLE_OK;
      char errbuf[CURL_ERROR_SIZE] = {};
      CURL* c = acquire();
      try {
        rc = run(c, r, res, errbuf);
      } catch (...) {
        release(c);
        throw;
      }
      release(c);
      if (rc == CURLE_OK) {
        if (res.status >= 200 && res.status < 300) {
          const std::string err = service_.error_in_success ? service_.error_in_success(r, res) : std::string();
          if (err.empty()) return res;
          last = "HTTP " + std::to_string(res.status) + " with an error: " + err;
          if (attempt >= opt_.max_retries) throw Error(r.subject, "", what + " failed: " + last + attempts(attempt));
        } else if (std::find(ok_also.begin(), ok_also.end(), res.status) != ok_also.end()) {
          return res;
        } else if (res.status == 401 && !renewed && service_.renew_credentials && service_.renew_credentials()) {
          renewed = true;  // sent again at once with the new credentials
          continue;
        } else {
          std::string msg = "HTTP " + std::to_string(res.status);
          const std::string detail = service_.describe_error ? service_.describe_error(res) : std::string();
          if (!detail.empty()) msg += " " + detail;
          if (!detail::http::retryable(res.status) || attempt >= opt_.max_retries) {
            if (service_.hint) msg += service_.hint(res.status);
            throw Error(r.subject, "", what + " failed: " + msg + attempts(attempt));
          }
          last = msg;
        }
      } else {
        if (res.overflow) {
          if (r.to_dst) throw CorruptCheckpointError(r.subject, "", service_.name + " returned more bytes than were asked for");
          throw CorruptCheckpointError(r.subject, "",
                                       "object is larger than the " + std::to_string(r.max_body) + " bytes allowed");
        }
        std::string msg = std::string(curl_easy_strerror(rc)) + (errbuf[0] ? std::string(" (") + errbuf + ")" : "");
        if (!detail::http::retryable(rc) || attempt >= opt_.max_retries)
          throw Error(r.subject, "", what + " failed: " + msg + attempts(attempt));
        last = msg;
      }
      const auto base = opt_.retry_delay * (1 << std::min(attempt, 10));
      std::uniform_int_distribution<long long> jitter(0, base.count() / 2);
      const auto wait = base + std::chrono::milliseconds(jitter(rng));
      if (opt_.retry_budget.count() > 0 && std::chrono::steady_clock::now() + wait - started > opt_.retry_budget)
        throw Error(r.subject, "", what + " failed: " + last + attempts(attempt) + ", retried for as long as allowed (" +
                                       std::to_string(opt_.retry_budget.count()) + " ms)");
      std::this_thread::sleep_for(wait);
    }
  }

 private:
  // --- handles: one per connection, kept for keep-alive ---
  CURL* acquire() const {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !idle_.empty() || live_ < opt_.connections; });
    if (!idle_.empty()) {
      CURL* c = idle_.back();
      idle_.pop_back();
      return c;
    }
    CURL* c = curl_easy_init();
    if (!c) throw Error(service_.name, "", "libcurl cannot create a handle");
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

  static std::string attempts(int attempt) {
    return attempt == 0 ? std::string() : " (after " + std::to_string(attempt + 1) + " attempts)";
  }

  CURLcode run(CURL* c, const HttpRequest& r, HttpResponse& res, char* errbuf) const {
    curl_easy_reset(c);
    detail::http::Transfer t{&r, &res, c, detail::http::Body{r.body}};
    curl_easy_setopt(c, CURLOPT_URL, r.url.c_str());
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
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &detail::http::on_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, &detail::http::on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);

    std::vector<std::string> extra;
    if (service_.authorize) service_.authorize(c, extra);
    curl_slist* headers = nullptr;
    struct Free {
      curl_slist*& h;
      ~Free() { curl_slist_free_all(h); }
    } free_headers{headers};
    headers = curl_slist_append(headers, "Expect:");  // no 100-continue round trip
    for (const auto& h : extra) headers = curl_slist_append(headers, h.c_str());
    for (const auto& h : r.headers) headers = curl_slist_append(headers, h.c_str());

    const std::string_view m = r.method;
    if (m == "PUT") {
      curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(r.body_size));
    } else if (m == "POST") {
      curl_easy_setopt(c, CURLOPT_POST, 1L);
      curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body_size));
      if (!r.content_type.empty()) headers = curl_slist_append(headers, ("Content-Type: " + r.content_type).c_str());
    } else if (m == "HEAD") {
      curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    } else if (m == "DELETE") {
      curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "DELETE");
    }
    if (m == "PUT" || m == "POST") {
      curl_easy_setopt(c, CURLOPT_READFUNCTION, &detail::http::on_read);
      curl_easy_setopt(c, CURLOPT_READDATA, &t);
      curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, &detail::http::on_seek);
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

  HttpOptions opt_;
  HttpService service_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable std::vector<CURL*> idle_;
  mutable unsigned live_ = 0;
};

}  // namespace ckpt::io
