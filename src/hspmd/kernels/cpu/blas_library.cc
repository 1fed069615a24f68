// blas_library (kernels/blas_library.h): feature detection, the core-type choice and the dlopen.
#include "hspmd/kernels/blas_library.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstdlib>
#include <optional>

#include "hspmd/core/error.h"

namespace hspmd::kernels {
namespace {

// What set_blas_num_threads asked for (0: nothing yet), and whether blas_library() has loaded.
std::atomic<int> g_requested_threads{0};
std::atomic<bool> g_loaded{false};

// The SONAME of Debian's libopenblas0 (pthread or openmp flavour, chosen by update-alternatives).
constexpr const char* kOpenBlasSoname = "libopenblas.so.0";

template <typename Fn>
Fn symbol(void* handle, const char* name, bool required = true) {
  void* p = dlsym(handle, name);
  HSPMD_CHECK(p != nullptr || !required) << "BLAS: " << kOpenBlasSoname << " has no symbol " << name;
  return reinterpret_cast<Fn>(p);
}

// Sets an environment variable for the duration of one scope unless it is set already; restores
// the environment afterwards so that child processes make the same choice themselves.
class ScopedDefaultEnv {
 public:
  ScopedDefaultEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* user = std::getenv(name); user != nullptr && *user != '\0') {
      in_force_ = user;
      by_user_ = true;
    } else if (!value.empty()) {
      setenv(name, value.c_str(), 1);
      in_force_ = value;
      set_ = true;
    }
  }
  ~ScopedDefaultEnv() {
    if (set_) unsetenv(name_);
  }
  ScopedDefaultEnv(const ScopedDefaultEnv&) = delete;
  ScopedDefaultEnv& operator=(const ScopedDefaultEnv&) = delete;

  const std::string& in_force() const { return in_force_; }
  bool by_user() const { return by_user_; }

 private:
  const char* name_;
  std::string in_force_;
  bool by_user_ = false, set_ = false;
};

// OpenBLAS's pthreads spin (yielding) for 2^28 cycles, about 0.1 s, after they start and after each
// call before they sleep. Beside the OpenMP threads of oneDNN and hspmd's kernels that
// oversubscribes the cores (docs/cpu-kernels.md, "GEMM"). 2^4 cycles is OpenBLAS's minimum: its
// threads sleep at once.
constexpr const char* kThreadTimeoutLog2Cycles = "4";

BlasLibrary load() {
  BlasLibrary lib;
  // A library the program links (CoinUtils, through LAPACK) may have loaded OpenBLAS at startup;
  // it then chose its kernels and threads before main() and the environment set below is moot.
  lib.loaded_before = dlopen(kOpenBlasSoname, RTLD_NOW | RTLD_NOLOAD) != nullptr;
  ScopedDefaultEnv core("OPENBLAS_CORETYPE", openblas_core_for(CpuFeatures::detect()));
  ScopedDefaultEnv timeout("OPENBLAS_THREAD_TIMEOUT", kThreadTimeoutLog2Cycles);
  lib.requested_core = core.in_force();
  lib.requested_by_user = core.by_user();
  // RTLD_LOCAL: nothing else in the process resolves against it; we only use what dlsym returns.
  void* handle = dlopen(kOpenBlasSoname, RTLD_NOW | RTLD_LOCAL);
  HSPMD_CHECK(handle != nullptr) << "BLAS: cannot load " << kOpenBlasSoname << " (" << dlerror()
                                 << "); install Debian's libopenblas0 (scripts/install-deps.sh)";
  // The handle is kept for the life of the process: the kernels call into it until exit.
  lib.sgemm = symbol<BlasLibrary::Sgemm>(handle, "cblas_sgemm");
  lib.dgemm = symbol<BlasLibrary::Dgemm>(handle, "cblas_dgemm");
  lib.set_num_threads = symbol<void (*)(int)>(handle, "openblas_set_num_threads");
  lib.get_num_threads = symbol<int (*)()>(handle, "openblas_get_num_threads");
  auto corename = symbol<char* (*)()>(handle, "openblas_get_corename", false);
  auto config = symbol<char* (*)()>(handle, "openblas_get_config", false);
  lib.core = corename != nullptr ? corename() : "unknown";
  lib.config = config != nullptr ? config() : "unknown";
  link_map* map = nullptr;
  lib.path = dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr ? map->l_name : kOpenBlasSoname;
  return lib;
}

}  // namespace

CpuFeatures CpuFeatures::detect() {
  // GCC's __builtin_cpu_supports also checks that the OS saves the wider registers (XCR0).
  __builtin_cpu_init();
  CpuFeatures f;
  f.avx = __builtin_cpu_supports("avx");
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.amd = __builtin_cpu_is("amd");
  return f;
}

std::string openblas_core_for(const CpuFeatures& f) {
  if (f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl) return "SkylakeX";
  if (f.avx2 && f.fma) return f.amd ? "Zen" : "Haswell";
  if (f.avx) return "Sandybridge";
  return "";
}

std::string BlasLibrary::describe() const {
  std::string from = requested_core.empty() ? "OpenBLAS's own choice"
                     : requested_by_user    ? "OPENBLAS_CORETYPE=" + requested_core + " from the environment"
                     : loaded_before
                         ? "chosen by OpenBLAS at startup: a linked library loaded it before hspmd could choose; "
                           "OPENBLAS_CORETYPE=" + requested_core + " would select the CPU's"
                         : "chosen by hspmd from CPU features";
  return "OpenBLAS (" + path + "), kernels " + core + " (" + from + "); " + config;
}

const BlasLibrary& blas_library() {
  static const BlasLibrary library = [] {
    BlasLibrary lib = load();
    if (const int n = g_requested_threads.load(); n > 0) lib.set_num_threads(n);
    g_loaded.store(true);
    return lib;
  }();
  return library;
}

void set_blas_num_threads(int n) {
  g_requested_threads.store(n);
  if (g_loaded.load()) blas_library().set_num_threads(n);
}

}  // namespace hspmd::kernels
