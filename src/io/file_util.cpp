#include "io/file_util.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "ffn/io.hpp"
#include "ffn/types.hpp"

namespace ffn::io {

namespace {
// The temporary file being written, for the signal handler. One slot: the
// first writer claims it (other threads writing at the same time are not
// registered, and still remove their file on every error path).
char g_pending[4096];
volatile sig_atomic_t g_has_pending = 0;
std::atomic<bool> g_slot_taken{false};

void clear_pending(bool owner) {
  if (!owner) return;
  g_has_pending = 0;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  g_slot_taken.store(false);
}

// Paths removed, in order, if a signal ends the program (files with unlink,
// then directories with rmdir, which only removes them when empty).
constexpr int kMaxCleanup = 16;
char g_cleanup[kMaxCleanup][4096];
volatile sig_atomic_t g_cleanup_count = 0;

extern "C" void remove_pending_and_reraise(int sig) {
  if (g_has_pending) ::unlink(g_pending);  // async-signal-safe
  for (int i = 0; i < g_cleanup_count; ++i)
    if (::unlink(g_cleanup[i]) != 0) ::rmdir(g_cleanup[i]);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}
}  // namespace

void remove_on_signal(const std::vector<std::string>& paths) {
  if (paths.size() > size_t(kMaxCleanup))  // a caller's mistake: it would leave files behind on a signal
    throw std::logic_error("remove_on_signal: more than " + std::to_string(kMaxCleanup) + " paths");
  g_cleanup_count = 0;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  int n = 0;
  for (const std::string& p : paths) {
    if (n == kMaxCleanup || p.size() >= sizeof g_cleanup[0]) break;
    std::memcpy(g_cleanup[n++], p.c_str(), p.size() + 1);
  }
  std::atomic_signal_fence(std::memory_order_seq_cst);
  g_cleanup_count = n;
}

SignalBlock::SignalBlock() {
  sigset_t block;
  sigemptyset(&block);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&block, sig);
  pthread_sigmask(SIG_BLOCK, &block, &old_);
}

SignalBlock::~SignalBlock() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }

void remove_temporaries_on_signals() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction sa {};
    sa.sa_handler = remove_pending_and_reraise;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
  }
}


std::string errno_text() { return std::strerror(errno); }

InputFile::InputFile(const std::string& path) : path_(path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw Error(path + ": cannot open: is a directory");
  f_ = std::fopen(path.c_str(), "rb");
  if (!f_) throw Error(path + ": cannot open: " + errno_text());
  if (std::fseek(f_, 0, SEEK_END) != 0) throw Error(path + ": cannot seek: " + errno_text());
  long end = std::ftell(f_);
  if (end < 0) throw Error(path + ": cannot tell size: " + errno_text());
  size_ = static_cast<uint64_t>(end);
}

InputFile::~InputFile() {
  if (f_) std::fclose(f_);
}

void InputFile::read_at(uint64_t offset, void* dst, uint64_t n, const char* what) const {
  if (offset > size_ || n > size_ - offset) {
    throw Error(path_ + ": file too short for " + what + " (needs bytes " + std::to_string(offset) +
                ".." + std::to_string(offset + n) + ", file has " + std::to_string(size_) + ")");
  }
  if (n == 0) return;
  if (fseeko(f_, static_cast<off_t>(offset), SEEK_SET) != 0 ||
      std::fread(dst, 1, n, f_) != n) {
    throw Error(path_ + ": cannot read " + what + ": " + errno_text());
  }
}

void write_all(std::FILE* f, const void* data, size_t n, const std::string& path) {
  if (n && std::fwrite(data, 1, n, f) != n) throw Error(path + ": cannot write: " + errno_text());
}

namespace {
// Throws unless `dir` is an existing directory this process may create files in.
void check_directory_writable(const std::filesystem::path& dir, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (!fs::exists(st)) throw Error(what + ": cannot write: directory '" + dir.string() + "' does not exist");
  if (!fs::is_directory(st)) throw Error(what + ": cannot write: '" + dir.string() + "' is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw Error(what + ": cannot write in directory '" + dir.string() + "': " + errno_text());
}
}  // namespace

void check_writable_target(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) throw Error("cannot write to an empty path");
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);  // follows symlinks
  if (fs::exists(st)) {
    if (fs::is_directory(st)) throw Error(path + ": cannot write: is a directory");
    if (!fs::is_regular_file(st)) throw Error(path + ": cannot write: exists and is not a regular file");
  }
  // The directory the new file is created in (a symlink's target's): known
  // before any work, not after it (write_file_atomic renames a file made there).
  fs::path target(path);
  if (fs::is_symlink(fs::symlink_status(path, ec))) target = fs::weakly_canonical(path, ec);
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  check_directory_writable(dir, path);
}

void check_writable_directory(const std::string& dir) {
  namespace fs = std::filesystem;
  if (dir.empty()) throw Error("cannot write to an empty directory path");
  std::error_code ec;
  fs::path p(dir);
  if (fs::exists(fs::status(p, ec))) {
    if (!fs::is_directory(p, ec)) throw Error(dir + ": exists and is not a directory");
    return check_directory_writable(p, dir);
  }
  // create_directories makes the missing chain: its first existing ancestor must take it.
  fs::path up = fs::absolute(p, ec).parent_path();
  while (!up.empty() && !fs::exists(fs::status(up, ec)) && up != up.root_path()) up = up.parent_path();
  check_directory_writable(up.empty() ? fs::path(".") : up, dir);
}

void write_file_atomic(const std::string& path, const std::function<void(std::FILE*)>& body) {
  namespace fs = std::filesystem;
  check_writable_target(path);
  std::error_code ec;
  // Replace the file a symlink points to, not the link.
  fs::path target(path);
  if (fs::is_symlink(fs::symlink_status(path, ec))) {
    std::error_code ec_link;
    target = fs::weakly_canonical(path, ec_link);
    if (ec_link) throw Error(path + ": cannot resolve symlink: " + ec_link.message());
  }
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec)) throw Error(path + ": cannot write: directory '" + dir.string() + "' does not exist");
  std::string tmpl = (dir / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
  // mkstemp writes the file's name into its template before it creates the
  // file, so with the signal handler's buffer as the template there is no
  // moment when the file exists and the handler does not know its name.
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  bool expected = false;
  const bool registered = name.size() <= sizeof g_pending && g_slot_taken.compare_exchange_strong(expected, true);
  if (registered) {
    std::memcpy(g_pending, name.data(), name.size());
    std::atomic_signal_fence(std::memory_order_seq_cst);  // the name is complete before the flag says so
    g_has_pending = 1;
  }
  struct Clear {
    bool owner;
    ~Clear() { clear_pending(owner); }
  } clear_on_exit{registered};
  int fd = mkstemp(registered ? g_pending : name.data());
  if (fd < 0) throw Error(path + ": cannot create a temporary file in '" + dir.string() + "': " + errno_text());
  std::string tmp(registered ? g_pending : name.data());
  std::FILE* f = fdopen(fd, "wb");
  if (!f) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw Error(path + ": cannot write: " + errno_text());
  }
  try {
    body(f);
    if (std::fflush(f) != 0 || fsync(fileno(f)) != 0) throw Error(path + ": cannot write: " + errno_text());
  } catch (...) {
    std::fclose(f);
    ::unlink(tmp.c_str());
    throw;
  }
  if (std::fclose(f) != 0) {
    ::unlink(tmp.c_str());
    throw Error(path + ": cannot write: " + errno_text());
  }
  // mkstemp creates 0600; give the file the usual permissions (umask applied).
  mode_t mask = umask(0);
  umask(mask);
  ::chmod(tmp.c_str(), 0666 & ~mask);
  if (std::rename(tmp.c_str(), target.c_str()) != 0) {
    std::string why = errno_text();
    ::unlink(tmp.c_str());
    throw Error(path + ": cannot write: " + why);
  }
}

uint64_t checked_product(const int64_t* dims, size_t n, uint64_t limit, const std::string& what) {
  uint64_t p = 1;
  for (size_t i = 0; i < n; ++i) {
    if (dims[i] < 0) throw Error(what + ": negative dimension " + std::to_string(dims[i]));
    uint64_t d = static_cast<uint64_t>(dims[i]);
    if (d != 0 && p > limit / d) throw Error(what + ": dimension product overflows (shape too large)");
    p *= d;
  }
  return p;
}

namespace {
// A zip archive's kind from its first member's name (the local file header:
// name length at byte 26, name at 30): torch.save writes <archive>/data.pkl
// first, numpy.savez only <key>.npy members.
FileKind zip_kind(const InputFile& f) {
  unsigned char h[30];
  if (f.size() < sizeof h) return FileKind::zip;
  f.read_at(0, h, sizeof h, "zip header");
  const uint64_t len = uint64_t(h[26]) | uint64_t(h[27]) << 8;
  if (f.size() < sizeof h + len) return FileKind::zip;
  std::string name(len, '\0');
  f.read_at(sizeof h, name.data(), len, "zip member name");
  if (name.ends_with("data.pkl")) return FileKind::torch_zip;
  if (name.ends_with(".npy")) return FileKind::npz;
  return FileKind::zip;
}
}  // namespace

FileKind sniff(const InputFile& f) {
  unsigned char h[9] = {};
  const uint64_t n = std::min<uint64_t>(f.size(), 9);
  if (n > 0) f.read_at(0, h, n, "first bytes");
  if (n >= 4 && std::memcmp(h, "PK\x03\x04", 4) == 0) return zip_kind(f);
  if (n >= 6 && std::memcmp(h, "\x93NUMPY", 6) == 0) return FileKind::npy;
  if (n >= 9 && h[8] == '{') return FileKind::safetensors;  // before pickle: a header length can start 0x80 0x02
  if (n >= 2 && h[0] == 0x80 && h[1] >= 2 && h[1] <= 5) return FileKind::pickle;  // PROTO 2–5
  return FileKind::unknown;
}

std::string wrong_kind(FileKind k, const std::string& expected) {
  const std::string torch_hint = "; save the state_dict as safetensors with scripts/torch_roundtrip.py (README: From PyTorch and back)";
  switch (k) {
    case FileKind::torch_zip: return "a PyTorch checkpoint (torch.save), not " + expected + torch_hint;
    case FileKind::pickle: return "a pickle file (torch.save, legacy format), not " + expected + torch_hint;
    case FileKind::npy: return "a NumPy .npy array, not " + expected + " (weights are .safetensors files)";
    case FileKind::npz:
      return "a NumPy .npz archive (numpy.savez), not " + expected +
             (expected == ".npy" ? " (save the one array with numpy.save)" : " (weights are .safetensors files)");
    case FileKind::zip: return "a zip archive, not " + expected;
    case FileKind::safetensors: return "a safetensors file, not " + expected + " (arrays are float32 .npy files)";
    case FileKind::unknown: break;
  }
  return "";
}

}  // namespace ffn::io
