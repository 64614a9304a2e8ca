// ckpt/storage/gcs_credentials.hpp — Google's credential chain for gs:// URLs: where an
// OAuth access token comes from, in the order TensorStore and Google's client libraries
// look:
//
//   1. GOOGLE_APPLICATION_CREDENTIALS, a JSON key file: a service account (an RS256 JWT
//      signed with its private key by OpenSSL's libcrypto, exchanged at its token_uri),
//      or an authorized user (a refresh token, as `gcloud auth application-default
//      login` writes it);
//   2. gcloud's application_default_credentials.json (under CLOUDSDK_CONFIG, else
//      ~/.config/gcloud), either kind;
//   3. the GCE/TPU metadata server (GCE_METADATA_ROOT, else metadata.google.internal;
//      header Metadata-Flavor: Google), when one answers;
//   4. none: anonymous requests (public buckets).
//
// With STORAGE_EMULATOR_HOST set, requests are anonymous, as Google's clients make them
// to an emulator. A token is fetched when first needed, kept, and fetched again before it
// expires (io/cached_credential.hpp: five minutes before, or halfway for one that lives
// less than ten), by one thread while the others wait for it. No key, token or secret is ever put in an error
// message: errors name the source (the file, the account's e-mail, the token URI).
#pragma once

#include <openssl/evp.h>
#include <openssl/pem.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include <ckpt/error.hpp>
#include <ckpt/io/cached_credential.hpp>
#include <ckpt/io/http.hpp>

namespace ckpt::detail::gcs {

inline std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

inline std::string base64(std::string_view in, bool url) {
  const char* abc = url ? "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
                        : "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const std::uint32_t v = std::uint32_t(std::uint8_t(in[i])) << 16 | std::uint32_t(std::uint8_t(in[i + 1])) << 8 |
                            std::uint8_t(in[i + 2]);
    out += abc[v >> 18];
    out += abc[(v >> 12) & 63];
    out += abc[(v >> 6) & 63];
    out += abc[v & 63];
  }
  if (i < in.size()) {
    std::uint32_t v = std::uint32_t(std::uint8_t(in[i])) << 16;
    if (i + 1 < in.size()) v |= std::uint32_t(std::uint8_t(in[i + 1])) << 8;
    out += abc[v >> 18];
    out += abc[(v >> 12) & 63];
    if (i + 1 < in.size()) out += abc[(v >> 6) & 63];
    if (!url) out += i + 1 < in.size() ? "=" : "==";
  }
  return out;
}

// Thrown by the chain; the storage rethrows it as an Error naming the object.
class CredentialsError : public Error {
 public:
  explicit CredentialsError(const std::string& what) : Error(what) {}
};

// The RS256 signature (RSASSA-PKCS1-v1_5 with SHA-256) of data with a PEM private key.
inline std::string sign_rs256(const std::string& pem, std::string_view data, const std::string& source) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  EVP_PKEY* key = bio ? PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr) : nullptr;
  if (bio) BIO_free(bio);
  if (!key) throw CredentialsError("GCS credentials (" + source + "): private_key is not a PEM private key");
  std::string sig;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  std::size_t len = 0;
  const auto* in = reinterpret_cast<const unsigned char*>(data.data());
  bool ok = ctx && EVP_PKEY_base_id(key) == EVP_PKEY_RSA &&
            EVP_DigestSignInit(ctx, nullptr, EVP_sha256(), nullptr, key) == 1 &&
            EVP_DigestSign(ctx, nullptr, &len, in, data.size()) == 1;
  if (ok) {
    sig.resize(len);
    ok = EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(sig.data()), &len, in, data.size()) == 1;
    sig.resize(len);
  }
  EVP_MD_CTX_free(ctx);
  EVP_PKEY_free(key);
  if (!ok) throw CredentialsError("GCS credentials (" + source + "): cannot sign with the private_key (not RSA?)");
  return sig;
}

class Credentials {
 public:
  // The chain, resolved now (files read, the metadata server probed when it is reached).
  static std::shared_ptr<Credentials> from_environment() {
    auto c = std::make_shared<Credentials>();
    try {
      c->resolve();
    } catch (const CredentialsError& e) {
      c->broken_ = e.message();  // thrown by the first request, which names its object
    }
    return c;
  }

  // What requests carry: "Authorization: Bearer ...", or nothing (anonymous).
  std::optional<std::string> authorization() {
    std::lock_guard lock(mu_);
    if (!broken_.empty()) throw CredentialsError(broken_);
    if (kind_ == Kind::anonymous) return std::nullopt;
    if (kind_ == Kind::metadata && !probed_) {
      probed_ = true;
      if (!metadata_server_answers()) {
        kind_ = Kind::anonymous;
        return std::nullopt;
      }
    }
    return "Authorization: Bearer " + token_.get([&] { return fetch(); });
  }

  // After a 401: the token is fetched again before the next request, unless one was
  // fetched in the last second (by another thread that met the same 401), which the
  // request then retries with. False when there is no token to renew (anonymous).
  bool renew() {
    std::lock_guard lock(mu_);
    if (!broken_.empty() || kind_ == Kind::anonymous) return false;
    return token_.renew();
  }

  // "service account a@b from FILE", "the metadata server at ...", "anonymous".
  std::string describe() const {
    std::lock_guard lock(mu_);
    return kind_ == Kind::anonymous ? std::string("anonymous") : source_;
  }

  // How many tokens this chain fetched (for tests: that one is reused until it expires).
  int tokens_fetched() const { return token_.fetches(); }

 private:
  enum class Kind { anonymous, service_account, authorized_user, metadata };

  void resolve() {
    if (!env("STORAGE_EMULATOR_HOST").empty()) return;  // anonymous
    if (const std::string file = env("GOOGLE_APPLICATION_CREDENTIALS"); !file.empty()) {
      load_file(file, "GOOGLE_APPLICATION_CREDENTIALS=" + file);
      return;
    }
    std::filesystem::path adc;
    if (const std::string dir = env("CLOUDSDK_CONFIG"); !dir.empty()) adc = std::filesystem::path(dir);
    else if (const std::string home = env("HOME"); !home.empty()) adc = std::filesystem::path(home) / ".config" / "gcloud";
    if (!adc.empty()) {
      adc /= "application_default_credentials.json";
      std::error_code ec;
      if (std::filesystem::is_regular_file(adc, ec)) {
        load_file(adc.string(), adc.string());
        return;
      }
    }
    std::string root = env("GCE_METADATA_ROOT");
    if (root.empty()) root = "metadata.google.internal";
    if (root.find("://") == std::string::npos) root = "http://" + root;
    kind_ = Kind::metadata;
    token_uri_ = root + "/computeMetadata/v1/instance/service-accounts/default/token";
    source_ = "the metadata server at " + root;
    metadata_root_ = root;
  }

  void load_file(const std::string& file, const std::string& source) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw CredentialsError("GCS credentials: cannot read " + source);
    std::stringstream text;
    text << in.rdbuf();
    const auto j = nlohmann::json::parse(text.str(), nullptr, false);
    if (!j.is_object()) throw CredentialsError("GCS credentials: " + source + " is not a JSON object");
    auto field = [&](const char* name) {
      const auto it = j.find(name);
      if (it == j.end() || !it->is_string() || it->get<std::string>().empty())
        throw CredentialsError("GCS credentials: " + source + " has no \"" + name + "\"");
      return it->get<std::string>();
    };
    const std::string type = j.value("type", std::string());
    const auto uri = j.find("token_uri");
    token_uri_ = uri != j.end() && uri->is_string() ? uri->get<std::string>() : "https://oauth2.googleapis.com/token";
    if (type == "service_account") {
      kind_ = Kind::service_account;
      client_email_ = field("client_email");
      private_key_ = field("private_key");
      source_ = "service account " + client_email_ + " from " + source;
    } else if (type == "authorized_user") {
      kind_ = Kind::authorized_user;
      client_id_ = field("client_id");
      client_secret_ = field("client_secret");
      refresh_token_ = field("refresh_token");
      source_ = "authorized user from " + source;
    } else {
      throw CredentialsError("GCS credentials: " + source + " is of type \"" + type.substr(0, 40) +
                             "\", not service_account or authorized_user");
    }
  }

  static io::HttpService token_service() {
    io::HttpService s;
    s.name = "GCS credentials";
    s.describe_error = [](const io::HttpResponse& r) {
      const auto j = nlohmann::json::parse(r.body, nullptr, false);
      if (!j.is_object()) return std::string();
      std::string out;
      if (j.contains("error") && j["error"].is_string()) out = j["error"].get<std::string>();
      if (j.contains("error_description") && j["error_description"].is_string())
        out += ": " + j["error_description"].get<std::string>();
      return out;
    };
    return s;
  }

  io::HttpClient& http() {
    if (!http_) {
      io::HttpOptions o;
      o.connections = 1;
      o.max_retries = 3;
      o.retry_delay = std::chrono::milliseconds(100);
      o.connect_timeout = std::chrono::milliseconds(kind_ == Kind::metadata ? 1000 : 10'000);
      o.stall_timeout = std::chrono::milliseconds(10'000);
      o.request_timeout = std::chrono::milliseconds(30'000);
      http_ = std::make_unique<io::HttpClient>(o, token_service());
    }
    return *http_;
  }

  // Whether a metadata server is there: one quick request, no retry, answered with
  // Metadata-Flavor: Google (as Google's clients check).
  bool metadata_server_answers() {
    io::HttpOptions o;
    o.connections = 1;
    o.max_retries = 0;
    o.connect_timeout = std::chrono::milliseconds(1000);
    o.request_timeout = std::chrono::milliseconds(2000);
    io::HttpClient probe(o, io::HttpService{});
    io::HttpRequest r;
    r.url = metadata_root_ + "/";
    r.subject = source_;
    r.headers.push_back("Metadata-Flavor: Google");
    try {
      return probe.perform(r, {403, 404}).header("metadata-flavor") == "Google";
    } catch (const Error&) {
      return false;
    }
  }

  io::CachedCredential<std::string>::Fetched fetch() {
    io::HttpRequest r;
    r.url = token_uri_;
    r.subject = "GCS credentials (" + source_ + ")";
    std::string form;
    const auto now = std::chrono::system_clock::now();
    if (kind_ == Kind::metadata) {
      r.headers.push_back("Metadata-Flavor: Google");
    } else {
      r.method = "POST";
      r.content_type = "application/x-www-form-urlencoded";
      if (kind_ == Kind::service_account) {
        const auto iat = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
        const nlohmann::json header = {{"alg", "RS256"}, {"typ", "JWT"}};
        const nlohmann::json claims = {{"iss", client_email_},
                                       {"scope", "https://www.googleapis.com/auth/devstorage.read_write"},
                                       {"aud", token_uri_},
                                       {"iat", iat},
                                       {"exp", iat + 3600}};
        const std::string unsigned_jwt = base64(header.dump(), true) + "." + base64(claims.dump(), true);
        const std::string jwt = unsigned_jwt + "." + base64(sign_rs256(private_key_, unsigned_jwt, source_), true);
        form = "grant_type=" + io::url_encode("urn:ietf:params:oauth:grant-type:jwt-bearer", false) +
               "&assertion=" + jwt;
      } else {
        form = "grant_type=refresh_token&client_id=" + io::url_encode(client_id_, false) +
               "&client_secret=" + io::url_encode(client_secret_, false) +
               "&refresh_token=" + io::url_encode(refresh_token_, false);
      }
    }
    const std::span<const std::byte> body = std::as_bytes(std::span(form));
    r.body = std::span<const std::span<const std::byte>>(&body, 1);
    r.body_size = form.size();
    io::HttpResponse res;
    try {
      res = http().perform(r);
    } catch (const CredentialsError&) {
      throw;
    } catch (const Error& e) {
      throw CredentialsError(e.message() + " (check GOOGLE_APPLICATION_CREDENTIALS or gcloud's application default "
                                           "credentials)");
    }
    const auto j = nlohmann::json::parse(res.body, nullptr, false);
    if (!j.is_object() || !j.contains("access_token") || !j["access_token"].is_string())
      throw CredentialsError(r.subject + ": the token endpoint " + token_uri_ + " returned no access_token");
    long long life = 3600;
    if (j.contains("expires_in") && j["expires_in"].is_number_integer()) life = j["expires_in"].get<long long>();
    return {j["access_token"].get<std::string>(), std::chrono::seconds(life)};
  }

  mutable std::mutex mu_;
  std::string broken_;
  Kind kind_ = Kind::anonymous;
  std::string source_, token_uri_, metadata_root_;
  std::string client_email_, private_key_, client_id_, client_secret_, refresh_token_;
  io::CachedCredential<std::string> token_;
  bool probed_ = false;
  std::unique_ptr<io::HttpClient> http_;
};

}  // namespace ckpt::detail::gcs
