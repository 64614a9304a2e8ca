// ckpt/error.hpp — the exceptions every runtime failure of ckpt is reported with.
//
// Every message names the checkpoint directory and, when one is involved, the
// tree path: "<checkpoint>: <path>: <what went wrong>". Callers that want the
// parts separately read checkpoint(), path() and message(). A NUL byte in any part
// (a map key holds anything) is written as \0, so that what() is never cut short.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

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

 private:
  static std::string compose(const std::string& checkpoint, const std::string& path,
                             const std::string& what) {
    std::string m = checkpoint.empty() ? std::string("<no checkpoint>") : checkpoint;
    if (!path.empty()) m += ": " + path;
    return no_nul(m + ": " + what);
  }
  static std::string no_nul(std::string s) {
    for (std::size_t at = s.find('\0'); at != std::string::npos; at = s.find('\0', at + 2)) s.replace(at, 1, "\\0");
    return s;
  }
  std::string checkpoint_, path_, message_;
};

// Leaves the target needs and the checkpoint lacks; lists every one of them.
class MissingLeafError : public Error {
 public:
  MissingLeafError(std::string checkpoint, std::vector<std::string> missing)
      : Error(std::move(checkpoint), join(missing),
              missing.size() == 1 ? "leaf missing from the checkpoint"
                                  : std::to_string(missing.size()) + " leaves missing from the checkpoint"),
        missing_(std::move(missing)) {}
  const std::vector<std::string>& missing_paths() const noexcept { return missing_; }

 private:
  static std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& p : v) s += (s.empty() ? "" : ", ") + (p.empty() ? std::string("<root>") : p);
    return s;
  }
  std::vector<std::string> missing_;
};

class ShapeMismatchError : public Error {
 public:
  using Error::Error;
};

class DtypeMismatchError : public Error {
 public:
  using Error::Error;
};

// The files are not a whole, intact checkpoint: a missing commit marker, a
// checksum that does not match, a truncated or malformed file.
class CorruptCheckpointError : public Error {
 public:
  using Error::Error;
};

}  // namespace ckpt
