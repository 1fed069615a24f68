#include "hspmd/core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "hspmd/core/error.h"

namespace hspmd {

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  std::filesystem::path final_path(path_);
  // The temp file lives in the same directory so that rename() is atomic (same file system).
  std::string temp_name = ".";
  temp_name += final_path.filename().string();
  temp_name += ".tmp.";
  temp_name += std::to_string(::getpid());
  temp_path_ = (final_path.parent_path() / temp_name).string();
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  HSPMD_CHECK(fd_ >= 0) << "cannot create " << temp_path_ << " (for " << path_ << "): " << std::strerror(errno);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_path_.c_str());
  }
}

void AtomicFile::write(const void* data, size_t length) {
  HSPMD_CHECK(fd_ >= 0) << "write to " << path_ << " after commit";
  const char* p = static_cast<const char*>(data);
  while (length > 0) {
    ssize_t n = ::write(fd_, p, length);
    if (n < 0 && errno == EINTR) continue;
    HSPMD_CHECK(n > 0) << "cannot write " << temp_path_ << " (for " << path_ << "): " << std::strerror(errno);
    p += n;
    length -= static_cast<size_t>(n);
    written_ += static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  HSPMD_CHECK(fd_ >= 0) << "commit of " << path_ << " twice";
  HSPMD_CHECK(::fsync(fd_) == 0) << "cannot fsync " << temp_path_ << ": " << std::strerror(errno);
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0 || ::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    int err = errno;
    ::unlink(temp_path_.c_str());
    HSPMD_THROW() << "cannot write " << path_ << ": " << std::strerror(err);
  }
  // fsync the directory so the rename itself survives a crash.
  std::string dir = std::filesystem::path(path_).parent_path().string();
  int dir_fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

}  // namespace hspmd
