// ckpt/storage/s3_credentials.hpp — the keys s3:// requests are signed with, found as
// the AWS SDKs find them (the C++ SDK's default chain, in its order):
//
//   1. static keys: S3Options, else AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
//      AWS_SESSION_TOKEN (S3Options::resolved takes them);
//   2. the shared files: the profile AWS_PROFILE (else "default") of
//      AWS_SHARED_CREDENTIALS_FILE (else ~/.aws/credentials), then of AWS_CONFIG_FILE
//      (else ~/.aws/config, sections "[profile NAME]"): its aws_access_key_id,
//      aws_secret_access_key, aws_session_token; or its role_arn with
//      web_identity_token_file (as 3);
//   3. web identity, as on EKS: AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN
//      (AWS_ROLE_SESSION_NAME), exchanged by STS AssumeRoleWithWebIdentity (an unsigned
//      POST to AWS_ENDPOINT_URL_STS, else AWS_ENDPOINT_URL, else
//      https://sts.<region>.amazonaws.com); the token file is read again at each refresh;
//   4. container credentials, as on ECS and EKS Pod Identity:
//      AWS_CONTAINER_CREDENTIALS_FULL_URI, or AWS_CONTAINER_CREDENTIALS_RELATIVE_URI on
//      http://169.254.170.2, with AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE or
//      AWS_CONTAINER_AUTHORIZATION_TOKEN as its Authorization header;
//   5. the EC2 instance metadata service, IMDSv2 (a session token from PUT
//      /latest/api/token, then the instance role's keys), at
//      AWS_EC2_METADATA_SERVICE_ENDPOINT (else http://169.254.169.254); off with
//      AWS_EC2_METADATA_DISABLED=true; when nothing answers within a second, none;
//   6. none: requests go unsigned (public buckets).
//
// Temporary keys (3-5) are kept and fetched again before they expire (five minutes
// before, or halfway for short-lived ones), by one thread while the others wait
// (io/cached_credential.hpp, which GCS's tokens use too). No key, secret or token is
// ever put in an error message: errors name the source (the file and profile, the role
// ARN, the endpoint).
#pragma once

#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include <ckpt/error.hpp>
#include <ckpt/io/cached_credential.hpp>
#include <ckpt/io/http.hpp>
#include <ckpt/storage/s3_xml.hpp>

namespace ckpt::detail::s3 {

// Thrown by the chain; the storage rethrows it as an Error naming the object.
class CredentialsError : public Error {
 public:
  explicit CredentialsError(const std::string& what) : Error(what) {}
};

struct AwsKeys {
  std::string access_key_id, secret_access_key, session_token;
};

inline std::string aws_env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// The sections of an AWS shared file (INI): name -> key -> value, keys in lower case.
using IniSections = std::map<std::string, std::map<std::string, std::string>>;
inline IniSections read_ini(const std::filesystem::path& file) {
  IniSections out;
  std::ifstream in(file);
  std::string line, section;
  auto trim = [](std::string s) {
    const auto b = s.find_first_not_of(" \t\r");
    const auto e = s.find_last_not_of(" \t\r");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  };
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = trim(line.substr(1, line.size() - 2));
      out[section];
      continue;
    }
    const auto eq = line.find('=');
    if (eq == std::string::npos || section.empty()) continue;
    std::string key = trim(line.substr(0, eq));
    for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out[section][key] = trim(line.substr(eq + 1));
  }
  return out;
}

// "YYYY-MM-DDThh:mm:ssZ" (fractions of a second ignored): how long from now.
inline std::optional<std::chrono::seconds> seconds_until(const std::string& iso) {
  std::tm t{};
  if (std::sscanf(iso.c_str(), "%d-%d-%dT%d:%d:%d", &t.tm_year, &t.tm_mon, &t.tm_mday, &t.tm_hour, &t.tm_min,
                  &t.tm_sec) != 6)
    return std::nullopt;
  t.tm_year -= 1900;
  t.tm_mon -= 1;
  const std::time_t at = ::timegm(&t);
  const std::time_t now = std::time(nullptr);
  return std::chrono::seconds(at > now ? at - now : 0);
}

class AwsCredentials {
 public:
  // Keys given outright (S3Options or AWS_ACCESS_KEY_ID): never fetched.
  static std::shared_ptr<AwsCredentials> fixed(AwsKeys keys, std::string source) {
    auto c = std::make_shared<AwsCredentials>();
    c->kind_ = Kind::fixed;
    c->fixed_ = std::move(keys);
    c->source_ = std::move(source);
    return c;
  }

  // Sources 2-6 above, resolved now (files read; the metadata service probed at the
  // first request). A broken source (a profile named but missing) is thrown by the
  // first request, which names its object.
  static std::shared_ptr<AwsCredentials> from_environment(const std::string& region) {
    auto c = std::make_shared<AwsCredentials>();
    c->region_ = region;
    try {
      c->resolve();
    } catch (const CredentialsError& e) {
      c->broken_ = e.message();
    }
    return c;
  }

  // The keys to sign with now; none: unsigned requests.
  std::optional<AwsKeys> keys() {
    std::lock_guard lock(mu_);
    if (!broken_.empty()) throw CredentialsError(broken_);
    switch (kind_) {
      case Kind::none: return std::nullopt;
      case Kind::fixed: return fixed_;
      case Kind::instance_metadata:
        if (!probed_) {
          probed_ = true;
          if (!imds_answers()) {
            kind_ = Kind::none;
            source_ = "none";
            return std::nullopt;
          }
        }
        [[fallthrough]];
      default: return cached_.get([&] { return fetch(); });
    }
  }

  // After a request was refused: temporary keys are fetched again before the next one.
  bool renew() {
    std::lock_guard lock(mu_);
    if (!broken_.empty() || kind_ == Kind::none || kind_ == Kind::fixed) return false;
    return cached_.renew();
  }

  // "profile ckpt from ~/.aws/credentials", "web identity, role arn:...", "none".
  std::string describe() const {
    std::lock_guard lock(mu_);
    return source_;
  }

  // How many temporary keys were fetched (tests: reused until they are due).
  int fetches() const { return cached_.fetches(); }

 private:
  enum class Kind { none, fixed, web_identity, container, instance_metadata };

  void resolve() {
    // 2. the shared files
    const std::string profile_env = aws_env("AWS_PROFILE");
    const std::string profile = profile_env.empty() ? "default" : profile_env;
    const std::string home = aws_env("HOME");
    auto file_of = [&](const char* var, const char* name) {
      const std::string v = aws_env(var);
      return v.empty() ? (home.empty() ? std::filesystem::path() : std::filesystem::path(home) / ".aws" / name)
                       : std::filesystem::path(v);
    };
    const auto credentials_file = file_of("AWS_SHARED_CREDENTIALS_FILE", "credentials");
    const auto config_file = file_of("AWS_CONFIG_FILE", "config");
    bool profile_found = false;
    for (const auto& [file, section] : {std::pair{credentials_file, profile},
                                        std::pair{config_file, profile == "default" ? profile : "profile " + profile}}) {
      std::error_code ec;
      if (file.empty() || !std::filesystem::is_regular_file(file, ec)) continue;
      const auto sections = read_ini(file);
      const auto it = sections.find(section);
      if (it == sections.end()) continue;
      profile_found = true;
      const auto& kv = it->second;
      const auto get = [&](const char* k) {
        const auto f = kv.find(k);
        return f == kv.end() ? std::string() : f->second;
      };
      const std::string where = "profile " + profile + " of " + file.string();
      if (!get("aws_access_key_id").empty() || !get("aws_secret_access_key").empty()) {
        if (get("aws_access_key_id").empty() || get("aws_secret_access_key").empty())
          throw CredentialsError("S3 credentials: " + where + " has aws_access_key_id or aws_secret_access_key, not both");
        kind_ = Kind::fixed;
        fixed_ = {get("aws_access_key_id"), get("aws_secret_access_key"), get("aws_session_token")};
        source_ = where;
        return;
      }
      if (!get("role_arn").empty() && !get("web_identity_token_file").empty()) {
        web_identity(get("web_identity_token_file"), get("role_arn"), get("role_session_name"), where);
        return;
      }
    }
    if (!profile_env.empty() && !profile_found)
      throw CredentialsError("S3 credentials: AWS_PROFILE=" + profile + " is in neither " + credentials_file.string() +
                             " nor " + config_file.string());
    // 3. web identity
    if (const std::string token_file = aws_env("AWS_WEB_IDENTITY_TOKEN_FILE"); !token_file.empty()) {
      const std::string role = aws_env("AWS_ROLE_ARN");
      if (role.empty())
        throw CredentialsError("S3 credentials: AWS_WEB_IDENTITY_TOKEN_FILE is set but AWS_ROLE_ARN is not");
      web_identity(token_file, role, aws_env("AWS_ROLE_SESSION_NAME"), "AWS_WEB_IDENTITY_TOKEN_FILE");
      return;
    }
    // 4. the container's endpoint
    std::string uri = aws_env("AWS_CONTAINER_CREDENTIALS_FULL_URI");
    if (const std::string rel = aws_env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"); !rel.empty())
      uri = "http://169.254.170.2" + rel;
    if (!uri.empty()) {
      kind_ = Kind::container;
      endpoint_ = uri;
      source_ = "container credentials from " + uri;
      return;
    }
    // 5. the instance metadata service, unless turned off
    std::string disabled = aws_env("AWS_EC2_METADATA_DISABLED");
    for (char& ch : disabled) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (disabled == "true") {
      source_ = "none";
      return;
    }
    std::string imds = aws_env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
    if (imds.empty()) imds = "http://169.254.169.254";
    while (!imds.empty() && imds.back() == '/') imds.pop_back();
    kind_ = Kind::instance_metadata;
    endpoint_ = imds;
    source_ = "the instance metadata service at " + imds;
  }

  void web_identity(const std::string& token_file, const std::string& role, const std::string& session,
                    const std::string& where) {
    kind_ = Kind::web_identity;
    token_file_ = token_file;
    role_arn_ = role;
    session_name_ = session.empty() ? "ckpt-" + std::to_string(std::time(nullptr)) : session;
    std::string sts = aws_env("AWS_ENDPOINT_URL_STS");
    if (sts.empty()) sts = aws_env("AWS_ENDPOINT_URL");
    if (sts.empty()) sts = "https://sts." + (region_.empty() ? std::string("us-east-1") : region_) + ".amazonaws.com";
    while (!sts.empty() && sts.back() == '/') sts.pop_back();
    endpoint_ = sts;
    source_ = "web identity (" + where + "), role " + role + " through STS at " + sts;
  }

  static io::HttpService sts_service() {
    io::HttpService s;
    s.name = "AWS credentials";
    s.describe_error = [](const io::HttpResponse& r) {
      const std::string code = xml_first(r.body, "Code");
      if (!code.empty()) return code + ": " + xml_first(r.body, "Message");
      const auto j = nlohmann::json::parse(r.body, nullptr, false);
      auto field = [&](const char* name) {
        return j.is_object() && j.contains(name) && j[name].is_string() ? j[name].get<std::string>() : std::string();
      };
      const std::string json_code = field("code"), message = field("message");
      return json_code.empty() ? message : json_code + ": " + message;
    };
    return s;
  }

  io::HttpClient& http() {
    if (!http_) {
      io::HttpOptions o;
      o.connections = 1;
      o.max_retries = 3;
      o.retry_delay = std::chrono::milliseconds(100);
      o.connect_timeout = std::chrono::milliseconds(kind_ == Kind::instance_metadata ? 1000 : 10'000);
      o.stall_timeout = std::chrono::milliseconds(10'000);
      o.request_timeout = std::chrono::milliseconds(30'000);
      http_ = std::make_unique<io::HttpClient>(o, sts_service());
    }
    return *http_;
  }

  static std::string read_text(const std::string& file, const std::string& what) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw CredentialsError("S3 credentials: cannot read " + what + " " + file);
    std::stringstream s;
    s << in.rdbuf();
    std::string t = s.str();
    while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
    return t;
  }

  // IMDSv2's session token, or none when no service answers (one quick try).
  std::optional<std::string> imds_token(bool probe) {
    io::HttpRequest r;
    r.method = "PUT";
    r.url = endpoint_ + "/latest/api/token";
    r.subject = "S3 credentials (" + source_ + ")";
    r.headers.push_back("X-aws-ec2-metadata-token-ttl-seconds: 21600");
    if (probe) {
      io::HttpOptions o;
      o.connections = 1;
      o.max_retries = 0;
      o.connect_timeout = std::chrono::milliseconds(1000);
      o.request_timeout = std::chrono::milliseconds(2000);
      io::HttpClient once(o, io::HttpService{});
      try {
        const auto res = once.perform(r, {403, 404, 405});
        if (res.status != 200) return std::nullopt;
        return res.body;
      } catch (const Error&) {
        return std::nullopt;
      }
    }
    return http().perform(r).body;
  }
  bool imds_answers() { return imds_token(true).has_value(); }

  // Fetches temporary keys from the source; returns them with their lifetime.
  io::CachedCredential<AwsKeys>::Fetched fetch() {
    const std::string subject = "S3 credentials (" + source_ + ")";
    io::HttpRequest r;
    r.subject = subject;
    std::string form;
    try {
      if (kind_ == Kind::web_identity) {
        const std::string token = read_text(token_file_, "the web identity token file");
        // STS names its query API by the version string every AWS SDK sends
        constexpr std::string_view sts_api_version = "2011-06-15";
        form = "Action=AssumeRoleWithWebIdentity&Version=" + std::string(sts_api_version) +
               "&RoleArn=" + io::url_encode(role_arn_, false) +
               "&RoleSessionName=" + io::url_encode(session_name_, false) +
               "&WebIdentityToken=" + io::url_encode(token, false);
        r.method = "POST";
        r.url = endpoint_ + "/";
        r.content_type = "application/x-www-form-urlencoded";
      } else if (kind_ == Kind::container) {
        r.url = endpoint_;
        std::string auth;
        if (const std::string f = aws_env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"); !f.empty())
          auth = read_text(f, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
        else
          auth = aws_env("AWS_CONTAINER_AUTHORIZATION_TOKEN");
        if (!auth.empty()) r.headers.push_back("Authorization: " + auth);
      } else {  // the instance metadata service: its token, the role's name, the role's keys
        const std::string token = *imds_token(false);
        io::HttpRequest role;
        role.subject = subject;
        role.url = endpoint_ + "/latest/meta-data/iam/security-credentials/";
        role.headers.push_back("X-aws-ec2-metadata-token: " + token);
        std::string name = http().perform(role).body;
        name = name.substr(0, name.find('\n'));
        if (name.empty() || name.find('/') != std::string::npos)
          throw CredentialsError(subject + ": the instance has no IAM role");
        r.url = role.url + name;
        r.headers.push_back("X-aws-ec2-metadata-token: " + token);
      }
    } catch (const CredentialsError&) {
      throw;
    } catch (const Error& e) {
      throw CredentialsError(e.message());
    }
    const std::span<const std::byte> body = std::as_bytes(std::span(form));
    if (!form.empty()) {
      r.body = std::span<const std::span<const std::byte>>(&body, 1);
      r.body_size = form.size();
    }
    io::HttpResponse res;
    try {
      res = http().perform(r);
    } catch (const Error& e) {
      throw CredentialsError(e.message());
    }
    AwsKeys k;
    std::string expiration;
    if (kind_ == Kind::web_identity) {
      k = {xml_first(res.body, "AccessKeyId"), xml_first(res.body, "SecretAccessKey"), xml_first(res.body, "SessionToken")};
      expiration = xml_first(res.body, "Expiration");
    } else {
      const auto j = nlohmann::json::parse(res.body, nullptr, false);
      auto field = [&](const char* name) {
        return j.is_object() && j.contains(name) && j[name].is_string() ? j[name].get<std::string>() : std::string();
      };
      k = {field("AccessKeyId"), field("SecretAccessKey"), field("Token")};
      expiration = field("Expiration");
    }
    if (k.access_key_id.empty() || k.secret_access_key.empty())
      throw CredentialsError(subject + ": the answer holds no AccessKeyId and SecretAccessKey");
    return {std::move(k), expiration.empty() ? std::optional<std::chrono::seconds>() : seconds_until(expiration)};
  }

  mutable std::mutex mu_;
  std::string broken_, region_, source_ = "none";
  Kind kind_ = Kind::none;
  AwsKeys fixed_;
  std::string endpoint_, token_file_, role_arn_, session_name_;
  bool probed_ = false;
  io::CachedCredential<AwsKeys> cached_;
  std::unique_ptr<io::HttpClient> http_;
};

}  // namespace ckpt::detail::s3
