// ckpt/error.hpp — the exceptions every runtime failure of ckpt is reported with.
//
// Every message names the checkpoint directory and, when one is involved, the
// tree path: "<checkpoint>: <path>: <what went wrong>". Callers that want the
// parts separately read checkpoint(), path() and message(). A NUL byte in any part
// (a map key holds anything) is written as \0, so that what() is never cut short.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ckpt/detail/compile_mode.hpp>
#include <ckpt/detail/quote.hpp>

namespace ckpt {

class Error : public std::runtime_error {
 public:
  Error(std::string checkpoint, std::string path, const std::string& what)
      : std::runtime_error(compose(checkpoint, path, what)),
        checkpoint_(std::move(checkpoint)),
        path_(std::move(path)),
        message_(what) {}
  explicit Error(const std::string& what) : std::runtime_error(no_nul(what)), message_(what) {}

  // The checkpoint directory the error is about ("" when none is).
  const std::string& checkpoint() const noexcept { return checkpoint_; }
  // The tree path the error is about ("" when it concerns the whole checkpoint).
  const std::string& path() const noexcept { return path_; }
  // What went wrong, without the checkpoint and path in front.
  const std::string& message() const noexcept { return message_; }

  // Throws a copy of this error, of the same kind, about another checkpoint and with
  // another message: a save reports what failed in its staging directory as a failure
  // of the checkpoint the caller asked for (io::naming_target), and a caller must still
  // be able to catch the kind. Every kind below overrides it through ErrorKind.
  [[noreturn]] virtual void rethrow_about(std::string checkpoint, std::string what) const {
    Error copy = *this;
    copy.retarget(std::move(checkpoint), std::move(what));
    throw copy;
  }

 protected:
  // Points this error at another checkpoint and message, keeping its path.
  void retarget(std::string checkpoint, std::string what) {
    static_cast<std::runtime_error&>(*this) = std::runtime_error(compose(checkpoint, path_, what));
    checkpoint_ = std::move(checkpoint);
    message_ = std::move(what);
  }

 private:
  static std::string compose(const std::string& checkpoint, const std::string& path, const std::string& what);
  static std::string no_nul(std::string s) {
    for (std::size_t at = s.find('\0'); at != std::string::npos; at = s.find('\0', at + 2)) s.replace(at, 1, "\\0");
    return s;
  }
  std::string checkpoint_, path_, message_;
};

// A kind of error: Base's constructors, and rethrow_about() throwing a Kind, so that
// the kind survives being renamed (see Error::rethrow_about).
template <class Kind, class Base = Error>
class ErrorKind : public Base {
 public:
  using Base::Base;
  [[noreturn]] void rethrow_about(std::string checkpoint, std::string what) const override {
    Kind copy = static_cast<const Kind&>(*this);
    copy.retarget(std::move(checkpoint), std::move(what));
    throw copy;
  }
};

// Leaves the target needs and the checkpoint lacks; lists every one of them.
class MissingLeafError : public ErrorKind<MissingLeafError> {
 public:
  MissingLeafError(std::string checkpoint, std::vector<std::string> missing)
      : ErrorKind(std::move(checkpoint), join(missing), summary(missing)), missing_(std::move(missing)) {}
  const std::vector<std::string>& missing_paths() const noexcept { return missing_; }

 private:
  static std::string join(const std::vector<std::string>& v);
  static std::string summary(const std::vector<std::string>& v);
  std::vector<std::string> missing_;
};

// Leaves of the checkpoint that the target does not use, refused unless the restore
// asks for a part (RestoreOptions::partial): a model with fewer layers than its
// checkpoint, a struct that lacks a field. Names the first few and counts them all.
class UnusedLeafError : public ErrorKind<UnusedLeafError> {
 public:
  static constexpr std::size_t named = 8;  // paths listed in the message

  UnusedLeafError(std::string checkpoint, std::vector<std::string> first, std::uint64_t count)
      : ErrorKind(std::move(checkpoint), "", summary(first, count)), first_(std::move(first)), count_(count) {}
  // The first unused paths (at most `named`) and how many there are in all.
  const std::vector<std::string>& unused_paths() const noexcept { return first_; }
  std::uint64_t unused_count() const noexcept { return count_; }

 private:
  static std::string summary(const std::vector<std::string>& first, std::uint64_t count);
  std::vector<std::string> first_;
  std::uint64_t count_ = 0;
};

class ShapeMismatchError : public ErrorKind<ShapeMismatchError> {
 public:
  using ErrorKind::ErrorKind;
};

class DtypeMismatchError : public ErrorKind<DtypeMismatchError> {
 public:
  using ErrorKind::ErrorKind;
};

// The files are not a whole, intact checkpoint: a missing commit marker, a
// checksum that does not match, a truncated or malformed file.
class CorruptCheckpointError : public ErrorKind<CorruptCheckpointError> {
 public:
  using ErrorKind::ErrorKind;
};

// The CheckpointManager's failures, each a kind of its own so that a caller can
// catch the one it knows how to handle. checkpoint() names the root or the step.

// Another CheckpointManager (this or another process) writes to this root.
class RootLockedError : public ErrorKind<RootLockedError> {
 public:
  using ErrorKind::ErrorKind;
};

// save() of a step that exists, without SaveArgs::force.
class StepExistsError : public ErrorKind<StepExistsError> {
 public:
  using ErrorKind::ErrorKind;
};

// restore(), delete_step() or a query named a step the root does not hold (or the
// root holds no step at all).
class NoSuchStepError : public ErrorKind<NoSuchStepError> {
 public:
  using ErrorKind::ErrorKind;
};

// An asynchronous save failed in the background (thrown by the next save() or
// wait_until_finished()); what() carries the original failure's message.
class BackgroundSaveError : public ErrorKind<BackgroundSaveError> {
 public:
  using ErrorKind::ErrorKind;
};

// wait_until_finished() (or the next save()) gave up after async_timeout; the save
// keeps running.
class BackgroundSaveTimeoutError : public ErrorKind<BackgroundSaveTimeoutError, BackgroundSaveError> {
 public:
  using ErrorKind::ErrorKind;
};

// A write was asked of a manager opened with read_only = true.
class ReadOnlyError : public ErrorKind<ReadOnlyError> {
 public:
  using ErrorKind::ErrorKind;
};

// A progress callback (SaveOptions::progress, RestoreOptions::progress) returned false:
// the work stopped, and a save left no checkpoint behind.
class CancelledError : public ErrorKind<CancelledError> {
 public:
  using ErrorKind::ErrorKind;
};

// A string read from a checkpoint, quoted for an error message: printable ASCII and valid
// UTF-8 kept, control characters (NUL among them) and invalid bytes as \xNN, cut after
// a bounded prefix (detail/quote.hpp).
inline std::string quote_for_message(std::string_view s) { return detail::quote(s); }

#if CKPT_DEFINE_API
CKPT_API std::string Error::compose(const std::string& checkpoint, const std::string& path, const std::string& what) {
  // "<checkpoint>: <path>: <what>", leaving out the parts that are empty.
  std::string m;
  for (const std::string* part : {&checkpoint, &path})
    if (!part->empty()) m += *part + ": ";
  return no_nul(m + what);
}
CKPT_API std::string MissingLeafError::join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& p : v) s += (s.empty() ? "" : ", ") + (p.empty() ? std::string("<root>") : p);
  return s;
}
CKPT_API std::string MissingLeafError::summary(const std::vector<std::string>& v) {
  return v.size() == 1 ? "leaf missing from the checkpoint"
                       : std::to_string(v.size()) + " leaves missing from the checkpoint";
}
CKPT_API std::string UnusedLeafError::summary(const std::vector<std::string>& first, std::uint64_t count) {
  std::string s = count == 1 ? "the target does not use 1 leaf of the checkpoint: "
                             : "the target does not use " + std::to_string(count) + " leaves of the checkpoint: ";
  for (std::size_t i = 0; i < first.size(); ++i) s += (i ? ", " : "") + (first[i].empty() ? std::string("<root>") : first[i]);
  if (count > first.size()) s += ", ... (" + std::to_string(count - first.size()) + " more)";
  return s + "; restore a part on purpose with RestoreOptions{.partial = true}";
}
#endif

}  // namespace ckpt
