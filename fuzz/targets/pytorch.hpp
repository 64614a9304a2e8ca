// fuzz/targets/pytorch.hpp — the torch.save reader: the input's first byte picks what the
// rest is. 0: a whole .pt file (zip container, then the pickle). Otherwise: a data.pkl,
// put into a well-formed archive beside storages data/0..data/3 of 64 bytes each, so
// that the fuzzer spends its time on the unpickler and the tensors' offsets and strides.
#pragma once

#include "../fuzz_common.hpp"  // <ckpt/all.hpp>, which has ckpt::pytorch (the single header too)

namespace fuzz::targets::pytorch {

// The archive torch.save would write around a pickle (and four storages).
inline void write_archive(const fs::path& file, std::string_view pickle) {
  auto w = ckpt::storage::file_writer(file);
  ckpt::detail::pytorch::zip::Writer z(*w);
  z.add("archive/data.pkl", std::as_bytes(std::span(pickle.data(), pickle.size())));
  static const std::string storage(64, '\x3f');
  for (const char* key : {"0", "1", "2", "3"})
    z.add(std::string("archive/data/") + key, std::as_bytes(std::span(storage.data(), storage.size())));
  z.add("archive/version", std::as_bytes(std::span("3\n", 2)));
  z.finish();
}

inline int run(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  static const fs::path file = fuzz::scratch() / "model.pt";
  if (data[0] == 0) {
    fuzz::write_file(file, data + 1, size - 1);
  } else {
    fs::remove(file);
    write_archive(file, std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
  }
  fuzz::open_and_read<ckpt::pytorch>(file);
  return 0;
}

inline const Register registered{"pytorch", &run};

}  // namespace fuzz::targets::pytorch
