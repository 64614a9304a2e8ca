// ckpt/storage/gcs.hpp — ckpt::gcs: checkpoints in Google Cloud Storage, gs://bucket/prefix,
// over GCS's JSON API with libcurl (opt-in: link the CMake target ckpt::gcs, or
// pkg-config ckpt-gcs), as TensorStore's gcs driver, which Orbax and t5x write through.
//
//   #include <ckpt/storage/gcs.hpp>
//   ckpt::save("gs://bucket/runs/a/step_100", state);
//   auto s = ckpt::restore<State>("gs://bucket/runs/a/step_100");
//   ckpt::CheckpointManager<State, ckpt::async_save, ckpt::gcs> mgr("bucket/runs/a", {.max_to_keep = 3});
//
// This header is GCS's storage: the JSON API's object operations, its uploads and its
// error documents. The HTTP transport (connections, retries with backoff and jitter on
// 408, 429, 5xx and dropped connections, bounded in count and time) is io/http.hpp,
// shared with S3; the commit marker and the streamed upload of a large object in parts
// are storage/object_store.hpp's, shared too; the credentials are
// storage/gcs_credentials.hpp.
//
//   reads    ranged GETs (alt=media), split into about `connections` ranges run in
//            parallel; a download of a whole object is checked against the crc32c GCS
//            reports (x-goog-hash);
//   writes   objects up to resumable_threshold are one multipart upload (metadata with
//            the crc32c, then the bytes); larger ones a resumable upload in chunks of
//            chunk_size, the crc32c sent with the last (x-goog-hash); GCS refuses an
//            upload whose bytes do not match it;
//   commit   the marker is uploaded with ifGenerationMatch=0: it never replaces one;
//   list     by prefix, following nextPageToken; delete: one request per object.
//
// Settings come from GcsOptions, then the environment: STORAGE_EMULATOR_HOST (an
// emulator: "host:port" or a URL; requests go unauthenticated, as Google's clients send
// them there), else TENSORSTORE_GCS_HTTP_URL, else https://storage.googleapis.com;
// CKPT_GCS_USER_PROJECT for requester-pays buckets (userProject). ckpt::gcs::configure(opts)
// sets what every gs:// URL in the process uses.
#pragma once

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <ckpt/error.hpp>
#include <ckpt/io/crc32c.hpp>
#include <ckpt/io/http.hpp>
#include <ckpt/storage/gcs_credentials.hpp>
#include <ckpt/storage/object_store.hpp>
#include <ckpt/storage/storage.hpp>

namespace ckpt {

struct GcsOptions {
  // "http://127.0.0.1:4443"; empty: STORAGE_EMULATOR_HOST, TENSORSTORE_GCS_HTTP_URL,
  // else https://storage.googleapis.com.
  std::string endpoint{};
  // The project billed for a requester-pays bucket; empty: CKPT_GCS_USER_PROJECT, else none.
  std::string user_project{};
  // No credentials at all (a public bucket), whatever the environment holds.
  bool anonymous = false;
  // Requests in flight at once per bucket: ranged GETs, uploads, DELETEs.
  unsigned connections = 8;
  // Size of a ranged GET (at least; a whole restore is cut into about `connections`).
  std::size_t part_size = std::size_t{16} << 20;
  // Objects larger than this go up as resumable uploads, in chunks of chunk_size (a
  // multiple of 256 KiB, as GCS requires).
  std::size_t resumable_threshold = std::size_t{64} << 20;
  std::size_t chunk_size = std::size_t{16} << 20;
  // Attempts after the first on connection failures, timeouts, 408, 429 and 5xx,
  // waiting retry_delay, then twice that, ... (with jitter), for at most retry_budget.
  int max_retries = 6;
  std::chrono::milliseconds retry_delay{100};
  std::chrono::milliseconds retry_budget{120'000};
  std::chrono::milliseconds connect_timeout{10'000};
  // A request that moves no byte for this long has timed out (whole seconds, at least 1).
  std::chrono::milliseconds stall_timeout{30'000};
  // A limit on each whole request; 0: none.
  std::chrono::milliseconds request_timeout{0};
  // List page size (0: the server's, 1000 on GCS).
  unsigned list_page_size = 0;
  // Per-connection upload speed limit in bytes/s (0: none); for tests that need a slow save.
  std::uint64_t max_send_speed = 0;
  bool verify_tls = true;

  GcsOptions resolved() const {
    GcsOptions o = *this;
    const auto env = ckpt::detail::gcs::env;
    if (o.endpoint.empty()) {
      o.endpoint = env("STORAGE_EMULATOR_HOST");
      if (!o.endpoint.empty() && o.endpoint.find("://") == std::string::npos) o.endpoint = "http://" + o.endpoint;
    }
    if (o.endpoint.empty()) o.endpoint = env("TENSORSTORE_GCS_HTTP_URL");
    if (o.endpoint.empty()) o.endpoint = "https://storage.googleapis.com";
    while (!o.endpoint.empty() && o.endpoint.back() == '/') o.endpoint.pop_back();
    if (o.user_project.empty()) o.user_project = env("CKPT_GCS_USER_PROJECT");
    o.connections = std::max(1u, o.connections);
    o.part_size = std::max<std::size_t>(o.part_size, 1);
    constexpr std::size_t quantum = std::size_t{256} << 10;
    o.chunk_size = std::max(quantum, o.chunk_size / quantum * quantum);
    return o;
  }
};

namespace detail::gcs {

inline io::HttpService service(std::shared_ptr<Credentials> creds) {
  io::HttpService s;
  s.name = "GCS";
  if (creds) {
    s.authorize = [creds](CURL*, std::vector<std::string>& headers) {
      if (auto h = creds->authorization()) headers.push_back(std::move(*h));
    };
    s.renew_credentials = [creds] { return creds->renew(); };
  }
  s.describe_error = [](const io::HttpResponse& r) {
    const auto j = nlohmann::json::parse(r.body, nullptr, false);
    if (j.is_object() && j.contains("error") && j["error"].is_object()) {
      const auto& e = j["error"];
      std::string out;
      if (e.contains("errors") && e["errors"].is_array() && !e["errors"].empty() && e["errors"][0].is_object())
        out = e["errors"][0].value("reason", std::string());
      const std::string msg = e.value("message", std::string());
      return out.empty() ? msg : out + ": " + msg;
    }
    return std::string();
  };
  s.hint = [creds](long status) {
    if (status != 401 && status != 403) return std::string();
    return " (credentials: " + (creds ? creds->describe() : std::string("anonymous")) +
           "; check GOOGLE_APPLICATION_CREDENTIALS, gcloud auth application-default login, or the bucket's "
           "permissions)";
  };
  return s;
}

inline io::HttpOptions http_options(const GcsOptions& o) {
  io::HttpOptions h;
  h.connections = o.connections;
  h.max_retries = o.max_retries;
  h.retry_delay = o.retry_delay;
  h.retry_budget = o.retry_budget;
  h.connect_timeout = o.connect_timeout;
  h.stall_timeout = o.stall_timeout;
  h.request_timeout = o.request_timeout;
  h.max_send_speed = o.max_send_speed;
  h.verify_tls = o.verify_tls;
  return h;
}

// The crc32c of x-goog-hash ("crc32c=<base64 of 4 big-endian bytes>,md5=...", one header
// or several), if the response has one.
inline std::optional<std::uint32_t> reported_crc32c(const io::HttpResponse& r) {
  for (const auto& [name, value] : r.headers) {
    if (name != "x-goog-hash") continue;
    for (std::size_t at = 0; at < value.size();) {
      const auto end = std::min(value.find(',', at), value.size());
      std::string_view item = std::string_view(value).substr(at, end - at);
      while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
      if (item.starts_with("crc32c=")) {
        const std::string b64(item.substr(7));
        std::uint64_t v = 0;
        int bits = 0, n = 0;
        for (char ch : b64) {
          int d = ch >= 'A' && ch <= 'Z' ? ch - 'A' : ch >= 'a' && ch <= 'z' ? ch - 'a' + 26 : ch >= '0' && ch <= '9' ? ch - '0' + 52
                  : ch == '+' ? 62 : ch == '/' ? 63 : -1;
          if (d < 0) break;
          v = (v << 6) | static_cast<std::uint64_t>(d);
          bits += 6;
          ++n;
        }
        if (n != 6) return std::nullopt;  // 4 bytes: 6 digits and "=="
        return static_cast<std::uint32_t>(v >> (bits - 32));
      }
      at = end + 1;
    }
  }
  return std::nullopt;
}

inline std::string crc32c_base64(std::uint32_t crc) {
  const char b[4] = {static_cast<char>(crc >> 24), static_cast<char>(crc >> 16), static_cast<char>(crc >> 8),
                     static_cast<char>(crc)};
  return base64(std::string_view(b, 4), false);
}

}  // namespace detail::gcs

namespace storage {

class GcsStorage final : public Storage {
 public:
  GcsStorage(std::string bucket, const GcsOptions& options)
      : bucket_(std::move(bucket)),
        opt_(options.resolved()),
        creds_(opt_.anonymous ? nullptr : ckpt::detail::gcs::Credentials::from_environment()),
        http_(ckpt::detail::gcs::http_options(opt_), ckpt::detail::gcs::service(creds_)) {}
  GcsStorage(const GcsStorage&) = delete;
  GcsStorage& operator=(const GcsStorage&) = delete;

  const GcsOptions& options() const noexcept { return opt_; }
  // Where tokens come from ("anonymous", "service account a@b from FILE", ...).
  std::string credentials() const { return creds_ ? creds_->describe() : std::string("anonymous"); }
  int tokens_fetched() const { return creds_ ? creds_->tokens_fetched() : 0; }
  std::string root_url() const override { return "gs://" + bucket_; }
  unsigned parallelism() const override { return opt_.connections; }

  using Storage::put;
  void put(const std::string& key, std::span<const ConstBytes> pieces) override { upload(key, pieces, false); }
  bool put_if_absent(const std::string& key, std::span<const ConstBytes> pieces) override {
    return upload(key, pieces, true);
  }

  // A writer that uploads as the appends come (detail::PartedUpload: a resumable upload
  // once the object passes resumable_threshold), never holding a large object whole.
  std::unique_ptr<ObjectWriter> create(const std::string& key) override {
    return std::make_unique<detail::PartedUpload<GcsStorage>>(
        *this, key, detail::PartedUpload<GcsStorage>::Limits{opt_.resumable_threshold, opt_.chunk_size, opt_.connections});
  }

  void get(const std::string& key, std::uint64_t offset, std::span<std::byte> dst) const override {
    const ReadSegment seg{key, offset, dst};
    get_many(std::span<const ReadSegment>(&seg, 1));
  }

  void get_many(std::span<const ReadSegment> segments) const override {
    const auto ranges = io::plan_ranged_reads(segments, opt_.connections, opt_.part_size);
    http_.parallel(ranges.size(), [&](std::size_t i) { get_scattered(ranges[i]); });
  }

  std::optional<std::uint64_t> size(const std::string& key) const override {
    Request r;
    r.url = object_url(key) + "?fields=size";
    r.subject = url(key);
    const auto res = perform(r, {404});
    if (res.status == 404) return std::nullopt;
    const auto j = nlohmann::json::parse(res.body, nullptr, false);
    return parse_size(j, key);
  }

  std::optional<std::vector<std::byte>> read_all(const std::string& key, std::uint64_t max_bytes) const override {
    Request r;
    r.url = object_url(key) + "?alt=media";
    r.subject = url(key);
    r.max_body = max_bytes;
    const auto res = perform(r, {404});
    if (res.status == 404) return std::nullopt;
    const auto* p = reinterpret_cast<const std::byte*>(res.body.data());
    std::vector<std::byte> out(p, p + res.body.size());
    check_crc(res, io::crc32c(out), key);
    return out;
  }

  std::vector<std::string> list(const std::string& prefix) const override {
    std::vector<std::string> keys;
    for (auto& o : list_sizes(prefix)) keys.push_back(std::move(o.key));
    return keys;
  }

  std::vector<Listed> list_sizes(const std::string& prefix) const override {
    std::vector<Listed> objects;
    std::string token;
    for (;;) {
      Request r;
      r.url = bucket_url() + "/o?fields=" + io::url_encode("items(name,size),nextPageToken", false) +
              "&prefix=" + io::url_encode(prefix, false);
      if (opt_.list_page_size) r.url += "&maxResults=" + std::to_string(opt_.list_page_size);
      if (!token.empty()) r.url += "&pageToken=" + io::url_encode(token, false);
      r.subject = url(prefix);
      const auto res = perform(r);
      const auto j = nlohmann::json::parse(res.body, nullptr, false);
      if (!j.is_object()) throw Error(url(prefix), "", "GCS list: the response is not a JSON object");
      if (j.contains("items")) {
        if (!j["items"].is_array()) throw Error(url(prefix), "", "GCS list: items is not an array");
        for (const auto& item : j["items"]) {
          if (!item.is_object() || !item.contains("name") || !item["name"].is_string())
            throw Error(url(prefix), "", "GCS list: an entry without a name");
          Listed o;
          o.key = item["name"].get<std::string>();
          o.size = parse_size(item, o.key);
          objects.push_back(std::move(o));
        }
      }
      if (!j.contains("nextPageToken")) break;
      if (!j["nextPageToken"].is_string() || j["nextPageToken"].get<std::string>().empty())
        throw Error(url(prefix), "", "GCS list: an empty nextPageToken");
      token = j["nextPageToken"].get<std::string>();
    }
    std::sort(objects.begin(), objects.end(), [](const Listed& a, const Listed& b) { return a.key < b.key; });
    return objects;
  }

  void remove(const std::vector<std::string>& keys) override {
    http_.parallel(keys.size(), [&](std::size_t i) {
      Request r;
      r.method = "DELETE";
      r.url = object_url(keys[i]);
      r.subject = url(keys[i]);
      perform(r, {404});
    });
  }

 private:
  using Request = io::HttpRequest;

  std::string bucket_url() const { return opt_.endpoint + "/storage/v1/b/" + io::url_encode(bucket_, false); }
  std::string object_url(const std::string& key) const { return bucket_url() + "/o/" + io::url_encode(key, false); }
  std::string upload_url(const char* type, const std::string& key, bool if_absent) const {
    return opt_.endpoint + "/upload/storage/v1/b/" + io::url_encode(bucket_, false) + "/o?uploadType=" + type +
           "&name=" + io::url_encode(key, false) + (if_absent ? "&ifGenerationMatch=0" : "");
  }

  // One request, retried by the transport; userProject added; a credentials failure an
  // Error naming the object.
  io::HttpResponse perform(Request& r, std::initializer_list<long> ok_also = {}) const {
    if (!opt_.user_project.empty() && r.url.starts_with(opt_.endpoint))
      r.url += std::string(r.url.find('?') == std::string::npos ? "?" : "&") + "userProject=" +
               io::url_encode(opt_.user_project, false);
    try {
      return http_.perform(r, ok_also);
    } catch (const ckpt::detail::gcs::CredentialsError& e) {
      throw Error(r.subject, "", e.message());
    }
  }

  std::uint64_t parse_size(const nlohmann::json& j, const std::string& key) const {
    if (j.is_object() && j.contains("size") && j["size"].is_string()) {
      const std::string s = j["size"].get<std::string>();
      std::uint64_t v = 0;
      const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      if (ec == std::errc() && end == s.data() + s.size() && !s.empty()) return v;
    }
    throw Error(url(key), "", "GCS returned no object size");
  }

  void check_crc(const io::HttpResponse& res, std::uint32_t have, const std::string& key) const {
    const auto want = ckpt::detail::gcs::reported_crc32c(res);
    if (want && *want != have)
      throw CorruptCheckpointError(url(key), "", "the downloaded bytes' crc32c " + ckpt::detail::gcs::crc32c_base64(have) +
                                                     " is not GCS's " + ckpt::detail::gcs::crc32c_base64(*want));
  }

  void get_scattered(const io::KeyedScatter& range) const {
    const std::string& key = *range.key;
    Request r;
    r.url = object_url(key) + "?alt=media";
    r.subject = url(key);
    r.to_dst = true;
    r.scatter = &range.scatter;
    const std::uint64_t begin = range.scatter.begin, end = range.scatter.end;
    r.headers.push_back("Range: bytes=" + std::to_string(begin) + "-" + std::to_string(end - 1));
    const auto res = perform(r, {404, 416});
    if (res.status == 404) throw Error(url(key), "", "no such object");
    if (res.status == 416 || res.received != end - begin)
      throw CorruptCheckpointError(url(key), "", "object ends before byte " + std::to_string(end) + " (truncated?)");
    // The whole object, received without gaps: GCS's crc32c (of the whole object) applies.
    const std::string cr = res.header("content-range");
    const bool whole = res.status == 200 || (begin == 0 && cr.ends_with("/" + std::to_string(end)));
    if (!whole) return;
    std::uint32_t crc = 0;
    std::uint64_t at = begin;
    for (const auto& p : range.scatter.pieces) {
      if (p.offset != at) return;
      crc = io::crc32c_extend(crc, p.dst);
      at += p.dst.size();
    }
    check_crc(res, crc, key);
  }

  // One object whole: a multipart upload (its metadata, with the crc32c, then its
  // bytes) up to resumable_threshold, else a resumable upload. if_absent: only where no
  // object is (false when there was one).
  bool upload(const std::string& key, std::span<const ConstBytes> pieces, bool if_absent) const {
    std::uint64_t total = 0;
    std::uint32_t crc = 0;
    for (const auto& p : pieces) {
      total += p.size();
      crc = io::crc32c_extend(crc, p);
    }
    if (total > opt_.resumable_threshold) {
      Session s = start_session(key, if_absent);
      try {
        upload_parts(key, s, pieces, total, true);
        finish_upload(key, s);
      } catch (...) {
        abort_upload(key, s);
        throw;
      }
      return !s.precondition_failed;
    }
    std::string boundary = "ckpt-";
    {
      std::mt19937_64 rng(std::random_device{}());
      for (int i = 0; i < 2; ++i) boundary += std::to_string(rng());
    }
    const nlohmann::json meta = {{"name", key}, {"crc32c", ckpt::detail::gcs::crc32c_base64(crc)}};
    const std::string head = "--" + boundary + "\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n" + meta.dump() +
                             "\r\n--" + boundary + "\r\nContent-Type: application/octet-stream\r\n\r\n";
    const std::string tail = "\r\n--" + boundary + "--\r\n";
    std::vector<ConstBytes> body;
    body.push_back(std::as_bytes(std::span(head)));
    body.insert(body.end(), pieces.begin(), pieces.end());
    body.push_back(std::as_bytes(std::span(tail)));
    Request r;
    r.method = "POST";
    r.url = upload_url("multipart", key, if_absent);
    r.subject = url(key);
    r.content_type = "multipart/related; boundary=" + boundary;
    r.body = body;
    r.body_size = head.size() + total + tail.size();
    return perform(r, {412}).status != 412;
  }

  // A resumable upload under way (and for detail::PartedUpload, the object writer).
  friend class detail::PartedUpload<GcsStorage>;
  struct Session {
    std::string uri;
    std::uint64_t offset = 0;  // bytes GCS holds
    std::uint32_t crc = 0;     // of those bytes
    bool done = false, precondition_failed = false;
  };

  Session start_session(const std::string& key, bool if_absent) const {
    const std::string meta = nlohmann::json({{"name", key}}).dump();
    const ConstBytes body = std::as_bytes(std::span(meta));
    Request r;
    r.method = "POST";
    r.url = upload_url("resumable", key, if_absent);
    r.subject = url(key);
    r.content_type = "application/json; charset=UTF-8";
    r.body = std::span<const ConstBytes>(&body, 1);
    r.body_size = meta.size();
    r.headers.push_back("X-Upload-Content-Type: application/octet-stream");
    const auto res = perform(r, {412});
    Session s;
    if (res.status == 412) {
      s.done = s.precondition_failed = true;
      return s;
    }
    s.uri = res.header("location");
    if (s.uri.empty()) throw Error(url(key), "", "GCS started no resumable upload (no Location)");
    return s;
  }

  // The Storage's own writes.
  void put_small(const std::string& key, std::span<const ConstBytes> pieces, std::uint64_t) const {
    upload(key, pieces, false);
  }
  Session start_upload(const std::string& key) const { return start_session(key, false); }

  // The first n bytes of pieces as the next chunks, one after the other (GCS takes a
  // session's bytes in order); `last`: they end the object, whose crc32c goes with the
  // last chunk. GCS may keep fewer bytes than a chunk held (its Range answer says how
  // many): the rest is sent again.
  void upload_parts(const std::string& key, Session& s, std::span<const ConstBytes> pieces, std::uint64_t n,
                    bool last) const {
    if (s.done) return;
    const std::uint64_t base = s.offset;
    std::uint32_t crc = s.crc;
    for (const auto& p : detail::slice(pieces, 0, n)) crc = io::crc32c_extend(crc, p);
    const std::uint64_t end = base + n;
    while (s.offset < end) {
      const std::uint64_t len = std::min<std::uint64_t>(opt_.chunk_size, end - s.offset);
      const bool final = last && s.offset + len == end;
      const auto body = detail::slice(pieces, s.offset - base, len);
      Request r;
      r.method = "PUT";
      r.url = s.uri;
      r.subject = url(key);
      r.body = body;
      r.body_size = len;
      r.headers.push_back("Content-Range: bytes " + std::to_string(s.offset) + "-" + std::to_string(s.offset + len - 1) +
                          "/" + (final ? std::to_string(end) : std::string("*")));
      if (final) r.headers.push_back("x-goog-hash: crc32c=" + ckpt::detail::gcs::crc32c_base64(crc));
      const auto res = perform(r, {308, 412});
      if (res.status == 412) {
        s.done = s.precondition_failed = true;
        return;
      }
      if (res.status != 308) {  // the object is complete
        s.offset = end;
        s.done = true;
        break;
      }
      const std::uint64_t held = persisted(res);
      if (held <= s.offset && len > 0)
        throw Error(url(key), "", "GCS kept none of a resumable upload's chunk at byte " + std::to_string(s.offset));
      s.offset = std::min(held, end);
    }
    if (last && !s.done) throw Error(url(key), "", "GCS did not complete the resumable upload");
    s.crc = crc;
  }

  // Bytes GCS holds of a session, from a 308's "Range: bytes=0-N".
  static std::uint64_t persisted(const io::HttpResponse& res) {
    const std::string range = res.header("range");
    const auto dash = range.rfind('-');
    if (dash == std::string::npos) return 0;
    std::uint64_t last = 0;
    const auto [p, ec] = std::from_chars(range.data() + dash + 1, range.data() + range.size(), last);
    (void)p;
    return ec == std::errc() ? last + 1 : 0;
  }

  // An object that ended on a chunk boundary: "bytes */total" with its crc32c finishes it.
  void finish_upload(const std::string& key, Session& s) const {
    if (s.done) return;
    Request r;
    r.method = "PUT";
    r.url = s.uri;
    r.subject = url(key);
    r.headers.push_back("Content-Range: bytes */" + std::to_string(s.offset));
    r.headers.push_back("x-goog-hash: crc32c=" + ckpt::detail::gcs::crc32c_base64(s.crc));
    const auto res = perform(r, {308, 412});
    if (res.status == 308) throw Error(url(key), "", "GCS did not complete the resumable upload");
    s.done = true;
    s.precondition_failed = res.status == 412;
  }

  // Best effort: a session never completed is no object, and GCS drops it after a week.
  void abort_upload(const std::string&, const Session& s) const noexcept {
    if (s.uri.empty() || s.done) return;
    try {
      Request r;
      r.method = "DELETE";
      r.url = s.uri;
      r.subject = s.uri;
      http_.perform(r, {404, 410, 499});
    } catch (...) {
    }
  }

  std::string bucket_;
  GcsOptions opt_;
  std::shared_ptr<ckpt::detail::gcs::Credentials> creds_;
  io::HttpClient http_;
};

}  // namespace storage

// The per-process defaults.
namespace detail::gcs {
struct Defaults {
  std::mutex mu;
  GcsOptions options;
  std::map<std::string, std::shared_ptr<storage::GcsStorage>> buckets;
};
inline Defaults& defaults() {
  static Defaults d;
  return d;
}
}  // namespace detail::gcs

namespace storage {

// The storage of gs://bucket with the process's options (ckpt::gcs::configure), one per bucket.
inline std::shared_ptr<GcsStorage> gcs_bucket(const std::string& bucket) {
  auto& d = ckpt::detail::gcs::defaults();
  std::lock_guard lock(d.mu);
  auto& slot = d.buckets[bucket];
  if (!slot) slot = std::make_shared<GcsStorage>(bucket, d.options);
  return slot;
}

inline Location open_gs_url(const std::string& url) {
  const ParsedUrl u = parse_url(url);
  return Location{gcs_bucket(u.bucket), u.prefix, url};
}

inline const bool gs_registered = register_url_scheme(object_scheme("gs", &open_gs_url));

}  // namespace storage

// The storage policy: CheckpointManager<State, ckpt::async_save, ckpt::gcs> takes
// "bucket/run" as gs://bucket/run.
struct gcs {
  static constexpr std::string_view storage_scheme = "gs";
  // What every gs:// URL in this process uses from now on (fields left empty: the
  // environment, read again, credentials too).
  static void configure(const GcsOptions& options) {
    auto& d = ckpt::detail::gcs::defaults();
    std::lock_guard lock(d.mu);
    d.options = options;
    d.buckets.clear();  // storages in use keep their options until released
  }
  static GcsOptions options() {
    auto& d = ckpt::detail::gcs::defaults();
    std::lock_guard lock(d.mu);
    return d.options.resolved();
  }
};

}  // namespace ckpt
