#include "hspmd/comm/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "hspmd/core/error.h"

namespace hspmd::comm {

namespace {

// Unique temporary name per write, so concurrent writers (threads or processes) never share one.
std::string temp_suffix() {
  static std::atomic<uint64_t> counter{0};
  std::ostringstream s;
  s << ".tmp." << ::getpid() << "." << std::hash<std::thread::id>{}(std::this_thread::get_id()) << "."
    << counter.fetch_add(1);
  return s.str();
}

void write_atomically(const std::string& path, const std::string& value) {
  std::string tmp = path + temp_suffix();
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    HSPMD_CHECK(out.good()) << "file store: cannot write '" << tmp << "': " << std::strerror(errno);
    out.write(value.data(), static_cast<std::streamsize>(value.size()));
    HSPMD_CHECK(out.good()) << "file store: short write to '" << tmp << "'";
  }
  HSPMD_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0)
      << "file store: cannot rename '" << tmp << "' to '" << path << "': " << std::strerror(errno);
}

// Holds an exclusive flock on a file for its lifetime.
class FileLock {
 public:
  explicit FileLock(const std::string& path) : fd_(::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644)) {
    HSPMD_CHECK(fd_ >= 0) << "file store: cannot open lock '" << path << "': " << std::strerror(errno);
    HSPMD_CHECK(::flock(fd_, LOCK_EX) == 0) << "file store: flock '" << path << "': " << std::strerror(errno);
  }
  ~FileLock() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

}  // namespace

FileStore::FileStore(std::string directory) : directory_(std::move(directory)) {
  HSPMD_CHECK(!directory_.empty()) << "file store: empty directory";
  std::error_code ec;
  std::filesystem::create_directories(directory_, ec);
  HSPMD_CHECK(!ec && std::filesystem::is_directory(directory_))
      << "file store: cannot create directory '" << directory_ << "': " << ec.message();
}

std::string FileStore::path_of(const std::string& key) const {
  static const char* hex = "0123456789ABCDEF";
  std::string name;
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '_' || c == '-' || (c == '.' && !name.empty())) {
      name += static_cast<char>(c);
    } else {
      name += '%';
      name += hex[c >> 4];
      name += hex[c & 15];
    }
  }
  return directory_ + "/k_" + name;
}

void FileStore::set(const std::string& key, const std::string& value) { write_atomically(path_of(key), value); }

std::optional<std::string> FileStore::try_get(const std::string& key) {
  std::ifstream in(path_of(key), std::ios::binary);
  if (!in.is_open()) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  std::string path = path_of(key);
  FileLock lock(path + ".lock");
  int64_t value = 0;
  if (auto current = try_get(key)) {
    try {
      value = std::stoll(*current);
    } catch (const std::exception&) {
      HSPMD_THROW() << "file store " << describe() << ": key '" << key << "' holds '" << *current
                    << "', not an integer";
    }
  }
  value += delta;
  write_atomically(path, std::to_string(value));
  return value;
}

void FileStore::erase(const std::string& key) { std::filesystem::remove(path_of(key)); }

}  // namespace hspmd::comm
