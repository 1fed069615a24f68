// A file that appears under its final name only once it is completely written.
//
//   AtomicFile out("ckpt/model.safetensors");   // writes go to "ckpt/.model.safetensors.tmp.<pid>"
//   out.write(header.data(), header.size());
//   out.write(tensor.raw_data(), tensor.nbytes());
//   out.commit();                                // fsync, rename onto the final name, fsync the dir
//
// Destroying an uncommitted AtomicFile (e.g. after an exception) removes the temp file, so bad
// input or a crash never leaves a torn file under the final name (architecture §8).
#pragma once

#include <cstddef>
#include <string>

namespace hspmd {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  // Appends bytes; Error naming the file on failure (e.g. disk full).
  void write(const void* data, size_t length);
  size_t bytes_written() const { return written_; }
  // Flushes to disk and renames onto the final path. No writes after this.
  void commit();

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  size_t written_ = 0;
};

}  // namespace hspmd
