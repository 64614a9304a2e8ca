// ckpt/storage/s3.hpp — ckpt::s3: checkpoints in an S3-compatible object store, over
// HTTP with libcurl (opt-in: link the CMake target ckpt::s3, or pkg-config ckpt-s3).
//
//   #include <ckpt/storage/s3.hpp>
//   ckpt::save("s3://bucket/runs/a/step_100", state);     // endpoint, keys from AWS_* variables
//   auto s = ckpt::restore<State>("s3://bucket/runs/a/step_100");
//   ckpt::CheckpointManager<State, ckpt::async_save, ckpt::s3> mgr("bucket/runs/a", {.max_to_keep = 3});
//
// This header is S3's storage: SigV4 signing, the bucket and key operations, multipart
// uploads, S3's error documents. The HTTP transport (connections, retries, bodies sent
// from and received into memory) is io/http.hpp, which other HTTP object stores share.
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
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN; without keys, the AWS
// SDKs' chain (storage/s3_credentials.hpp). ckpt::s3::configure(opts)
// sets what every s3:// URL in the process uses. Buckets are addressed path-style
// (endpoint/bucket/key), which S3-compatible servers (MinIO, s3rver, Ceph) and AWS accept.
#pragma once

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <ckpt/error.hpp>
#include <ckpt/io/http.hpp>
#include <ckpt/storage/object_store.hpp>
#include <ckpt/storage/s3_credentials.hpp>
#include <ckpt/storage/storage.hpp>

namespace ckpt {

struct S3Options {
  // "http://127.0.0.1:9000"; empty: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, else
  // https://s3.<region>.amazonaws.com.
  std::string endpoint{};
  // Empty: AWS_REGION, AWS_DEFAULT_REGION, else us-east-1.
  std::string region{};
  // Empty: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN; without those,
  // the AWS SDKs' chain (a profile of the shared files, web identity, the container's
  // or the instance's credentials: storage/s3_credentials.hpp). With no key at all,
  // requests go unsigned (public buckets).
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

// S3 internals: what it adds to requests, the per-process defaults.
namespace detail::s3 {

// The keys of these options (S3Options or AWS_ACCESS_KEY_ID), or the SDKs' chain.
inline std::shared_ptr<AwsCredentials> credentials_for(const S3Options& o) {
  if (o.access_key_id.empty() && o.secret_access_key.empty()) return AwsCredentials::from_environment(o.region);
  return AwsCredentials::fixed({o.access_key_id, o.secret_access_key, o.session_token},
                               "keys from S3Options or AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY");
}

// The SigV4 signature (curl's) with the keys of the moment, the session token, and no
// payload hash: what S3 adds to every request.
inline io::HttpService service(const S3Options& o, std::shared_ptr<AwsCredentials> creds) {
  io::HttpService s;
  s.name = "S3";
  s.authorize = [region = o.region, creds](CURL* c, std::vector<std::string>& headers) {
    const auto keys = creds->keys();
    if (keys) {
      const std::string region_spec = "aws:amz:" + region + ":s3";
      curl_easy_setopt(c, CURLOPT_AWS_SIGV4, region_spec.c_str());  // curl copies the strings
      curl_easy_setopt(c, CURLOPT_USERNAME, keys->access_key_id.c_str());
      curl_easy_setopt(c, CURLOPT_PASSWORD, keys->secret_access_key.c_str());
    }
    headers.push_back("x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (keys && !keys->session_token.empty()) headers.push_back("x-amz-security-token: " + keys->session_token);
  };
  s.renew_credentials = [creds] { return creds->renew(); };
  s.describe_error = [](const io::HttpResponse& r) {
    const std::string code = xml_first(r.body, "Code");
    return code.empty() ? std::string() : code + ": " + xml_first(r.body, "Message");
  };
  // CompleteMultipartUpload can fail with 200 and an error document
  s.error_in_success = [](const io::HttpRequest& req, const io::HttpResponse& r) {
    if (std::string_view(req.method) != "POST" || r.body.find("<Error>") == std::string::npos) return std::string();
    return xml_first(r.body, "Code") + ": " + xml_first(r.body, "Message");
  };
  s.hint = [creds](long status) {
    return status == 403 ? " (credentials: " + creds->describe() +
                               "; check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE or S3Options)"
                         : std::string();
  };
  return s;
}

inline io::HttpOptions http_options(const S3Options& o) {
  io::HttpOptions h;
  h.connections = o.connections;
  h.max_retries = o.max_retries;
  h.retry_delay = o.retry_delay;
  h.connect_timeout = o.connect_timeout;
  h.stall_timeout = o.stall_timeout;
  h.request_timeout = o.request_timeout;
  h.max_send_speed = o.max_send_speed;
  h.verify_tls = o.verify_tls;
  return h;
}

// One S3 request: the key ("" for the bucket) and the query (sorted by name, values
// encoded: SigV4's canonical form) become the URL.
struct Request : io::HttpRequest {
  std::string key;
  std::string query;
};

}  // namespace detail::s3

namespace storage {

class S3Storage final : public Storage {
 public:
  S3Storage(std::string bucket, const S3Options& options)
      : bucket_(std::move(bucket)),
        opt_(options.resolved()),
        creds_(ckpt::detail::s3::credentials_for(opt_)),
        http_(ckpt::detail::s3::http_options(opt_), ckpt::detail::s3::service(opt_, creds_)) {}
  S3Storage(const S3Storage&) = delete;
  S3Storage& operator=(const S3Storage&) = delete;

  const S3Options& options() const noexcept { return opt_; }
  // Where the keys come from ("profile ckpt of /home/u/.aws/credentials", "none"), and
  // how many temporary ones were fetched: never a key.
  std::string credentials() const { return creds_->describe(); }
  int credential_fetches() const { return creds_->fetches(); }
  std::string root_url() const override { return "s3://" + bucket_; }
  unsigned parallelism() const override { return opt_.connections; }

  using Storage::put;
  void put(const std::string& key, std::span<const ConstBytes> pieces) override {
    std::uint64_t total = 0;
    for (const auto& p : pieces) total += p.size();
    if (total <= opt_.multipart_threshold) return put_small(key, pieces, total);
    put_multipart(key, pieces, total);
  }

  // A writer that uploads as the appends come (detail::PartedUpload), so that a
  // format's large object on S3 is never held whole in memory, nor in a local file.
  std::unique_ptr<ObjectWriter> create(const std::string& key) override {
    return std::make_unique<detail::PartedUpload<S3Storage>>(
        *this, key, detail::PartedUpload<S3Storage>::Limits{opt_.multipart_threshold, opt_.part_size, opt_.connections});
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

  // Neighbouring ranges fetched as one, the whole cut into about `connections`
  // ranged GETs, all in parallel (io::plan_ranged_reads).
  void get_many(std::span<const ReadSegment> segments) const override {
    const auto ranges = io::plan_ranged_reads(segments, opt_.connections, opt_.part_size);
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
      if (!token.empty()) q += "continuation-token=" + io::url_encode(token, false) + "&";
      q += "list-type=2";
      if (opt_.list_page_size) q += "&max-keys=" + std::to_string(opt_.list_page_size);
      q += "&prefix=" + io::url_encode(prefix, false);
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
  template <class F>
  void parallel(std::size_t n, F&& f) const {
    http_.parallel(n, std::forward<F>(f));
  }

  // One request, retried by the transport; a status in `ok_also` (404 for HEAD) is
  // returned, not thrown.
  io::HttpResponse perform(ckpt::detail::s3::Request& r, std::initializer_list<long> ok_also = {}) const {
    r.url = opt_.endpoint + "/" + bucket_;
    if (!r.key.empty()) r.url += "/" + io::url_encode(r.key, true);
    if (!r.query.empty()) r.url += "?" + r.query;
    r.subject = r.key.empty() ? root_url() : url(r.key);
    if (std::string_view(r.method) == "POST") r.content_type = "application/xml";
    try {
      return http_.perform(r, ok_also);
    } catch (const ckpt::detail::s3::CredentialsError& e) {
      throw Error(r.subject, "", e.message());
    }
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

  void get_scattered(const io::KeyedScatter& range) const {
    ckpt::detail::s3::Request r;
    r.key = *range.key;
    r.to_dst = true;
    r.scatter = &range.scatter;
    const std::uint64_t begin = range.scatter.begin, end = range.scatter.end;
    r.headers.push_back("Range: bytes=" + std::to_string(begin) + "-" + std::to_string(end - 1));
    const auto res = perform(r, {404, 416});
    if (res.status == 404) throw Error(url(r.key), "", "no such object");
    if (res.status == 416 || res.received != end - begin)
      throw CorruptCheckpointError(url(r.key), "", "object ends before byte " + std::to_string(end) + " (truncated?)");
  }

  void put_multipart(const std::string& key, std::span<const ConstBytes> pieces, std::uint64_t total) {
    Session session = start_upload(key);
    try {
      upload_parts(key, session, pieces, total, true);
      finish_upload(key, session);
    } catch (...) {
      abort_upload(key, session);
      throw;
    }
  }

  // A multipart upload under way, for detail::PartedUpload (the object writer).
  friend class detail::PartedUpload<S3Storage>;
  struct Session {
    std::string upload_id;
    std::vector<std::string> etags;
  };
  Session start_upload(const std::string& key) const { return {start_multipart(key), {}}; }
  void upload_parts(const std::string& key, Session& s, std::span<const ConstBytes> pieces, std::uint64_t n, bool) const {
    upload_parts(key, s.upload_id, pieces, n, s.etags);
  }
  void finish_upload(const std::string& key, Session& s) const { complete_multipart(key, s.upload_id, s.etags); }
  void abort_upload(const std::string& key, const Session& s) const noexcept { abort_multipart(key, s.upload_id); }

  std::string start_multipart(const std::string& key) const {
    ckpt::detail::s3::Request init;
    init.method = "POST";
    init.key = key;
    init.query = "uploads=";
    const std::string upload_id = ckpt::detail::s3::xml_first(perform(init).body, "UploadId");
    if (upload_id.empty()) throw Error(url(key), "", "S3 did not start a multipart upload (no UploadId)");
    return upload_id;
  }

  // Uploads the first `total` bytes of the concatenation of pieces as the next parts
  // (numbered from etags.size() + 1), part_size each (the last one shorter), in
  // parallel; their ETags are appended to etags.
  void upload_parts(const std::string& key, const std::string& upload_id, std::span<const ConstBytes> pieces,
                    std::uint64_t total, std::vector<std::string>& etags) const {
    const std::uint64_t part = opt_.part_size;
    const std::size_t nparts = static_cast<std::size_t>((total + part - 1) / part), first = etags.size();
    etags.resize(first + nparts);
    const std::string id_q = "uploadId=" + io::url_encode(upload_id, false);
    parallel(nparts, [&](std::size_t i) {
      const std::uint64_t begin = i * part, len = std::min<std::uint64_t>(part, total - begin);
      const auto body = detail::slice(pieces, begin, len);
      ckpt::detail::s3::Request r;
      r.method = "PUT";
      r.key = key;
      r.query = "partNumber=" + std::to_string(first + i + 1) + "&" + id_q;
      r.body = body;
      r.body_size = len;
      etags[first + i] = perform(r).etag;
      if (etags[first + i].empty())
        throw Error(url(key), "", "S3 returned no ETag for part " + std::to_string(first + i + 1));
    });
  }

  void complete_multipart(const std::string& key, const std::string& upload_id, const std::vector<std::string>& etags) const {
    std::string xml = "<CompleteMultipartUpload>";
    for (std::size_t i = 0; i < etags.size(); ++i)
      xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + etags[i] + "</ETag></Part>";
    xml += "</CompleteMultipartUpload>";
    const ConstBytes body = std::as_bytes(std::span(xml));
    ckpt::detail::s3::Request done;
    done.method = "POST";
    done.key = key;
    done.query = "uploadId=" + io::url_encode(upload_id, false);
    done.body = std::span<const ConstBytes>(&body, 1);
    done.body_size = xml.size();
    perform(done);
  }

  // Best effort: an upload never completed is no object, but holds storage.
  void abort_multipart(const std::string& key, const std::string& upload_id) const noexcept {
    try {
      ckpt::detail::s3::Request abort;
      abort.method = "DELETE";
      abort.key = key;
      abort.query = "uploadId=" + io::url_encode(upload_id, false);
      perform(abort, {404});
    } catch (...) {
    }
  }

  void put_small(const std::string& key, std::span<const ConstBytes> pieces, std::uint64_t total) const {
    ckpt::detail::s3::Request r;
    r.method = "PUT";
    r.key = key;
    r.body = pieces;
    r.body_size = total;
    perform(r);
  }

  std::string bucket_;
  S3Options opt_;
  std::shared_ptr<ckpt::detail::s3::AwsCredentials> creds_;
  io::HttpClient http_;
};

}  // namespace storage

// The per-process defaults.
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
