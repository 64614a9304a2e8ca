// ckpt/io/cached_credential.hpp — a short-lived credential (an OAuth token, temporary
// AWS keys) shared by every request of a storage: fetched when first needed, kept, and
// fetched again before it expires — five minutes before, or halfway for one that lives
// less than ten — by one thread while the others wait for it. GCS's chain
// (storage/gcs_credentials.hpp) and AWS's (storage/s3_credentials.hpp) keep theirs here.
#pragma once

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <utility>

namespace ckpt::io {

template <class Value>
class CachedCredential {
 public:
  using clock = std::chrono::steady_clock;

  // What a fetch returns: the value and how long it lives (none: until renew()).
  struct Fetched {
    Value value;
    std::optional<std::chrono::seconds> lifetime;
  };

  // The value, fetched by fetch() (called under the lock: one fetch at a time, the other
  // threads wait and take its result) when there is none or it is due for a refresh.
  template <class Fetch>
  Value get(Fetch&& fetch) {
    std::lock_guard lock(mu_);
    if (!value_ || (refresh_at_ && clock::now() >= *refresh_at_)) store(fetch());
    return *value_;
  }

  // After a request was refused (a token revoked, or expired early): the next get()
  // fetches again, unless a value was fetched in the last second (by another thread
  // refused at the same time), which the caller then retries with. False when there is
  // nothing to renew.
  bool renew() {
    std::lock_guard lock(mu_);
    if (!value_) return false;
    if (clock::now() - fetched_at_ >= std::chrono::seconds(1)) refresh_at_ = clock::time_point{};
    return true;
  }

  // How many values were fetched (tests: one is reused until it is due).
  int fetches() const {
    std::lock_guard lock(mu_);
    return fetches_;
  }

  // When the value is next fetched (none: not before renew()), for tests and messages.
  std::optional<clock::time_point> refresh_at() const {
    std::lock_guard lock(mu_);
    return refresh_at_;
  }

 private:
  void store(Fetched f) {
    value_ = std::move(f.value);
    fetched_at_ = clock::now();
    refresh_at_.reset();
    if (f.lifetime) {
      const auto life = std::max(*f.lifetime, std::chrono::seconds(0));
      const auto margin = std::min<std::chrono::seconds>(std::chrono::minutes(5), life / 2);
      refresh_at_ = fetched_at_ + (life - margin);
    }
    ++fetches_;
  }

  mutable std::mutex mu_;
  std::optional<Value> value_;
  clock::time_point fetched_at_{};
  std::optional<clock::time_point> refresh_at_;
  int fetches_ = 0;
};

}  // namespace ckpt::io
