#include "runtime/folders.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include "common/error.h"

namespace fs = std::filesystem;

namespace orion::runtime {

namespace {

struct Folder {
  std::string path;
  int refs = 0;
};

std::mutex g_mu;
std::map<std::string, Folder> g_folders;
std::string g_root;

bool process_alive(long pid) { return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM); }

// Stale folders of crashed processes would otherwise pile up in the temp dir (they do with the ANE's).
void clean_stale(const fs::path& base) {
  std::error_code ec;
  for (auto& e : fs::directory_iterator(base, ec)) {
    const std::string n = e.path().filename().string();
    char* end = nullptr;
    long pid = std::strtol(n.c_str(), &end, 10);
    if (end && *end == '\0' && pid != (long)getpid() && !process_alive(pid)) fs::remove_all(e.path(), ec);
  }
}

// The per-user root: $ORION_TMPDIR/orion-sim-<uid>, else $XDG_RUNTIME_DIR/orion-sim, else
// <tmp>/orion-sim-<uid>. One root shared by every user would let the first user's 0755 folder lock the
// others out, and a root pre-created by someone else could redirect program folders: the root must be
// a real folder (not a link) owned by this user and closed to others (0700, set when it is ours).
fs::path user_root() {
  const char* env = std::getenv("ORION_TMPDIR");
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  const std::string uid = std::to_string((long)getuid());
  fs::path base = env && *env ? fs::path(env) / ("orion-sim-" + uid)
                  : xdg && *xdg && fs::is_directory(xdg) ? fs::path(xdg) / "orion-sim"
                                                         : fs::temp_directory_path() / ("orion-sim-" + uid);
  std::error_code ec;
  fs::create_directories(base, ec);
  if (ec) throw_error(ErrorKind::Orion, "cannot create temp folder root " + base.string() + ": " + ec.message());
  struct stat st {};
  if (lstat(base.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw_error(ErrorKind::Orion, "temp folder root " + base.string() + " is not a folder (a link?); remove it or "
                                  "set ORION_TMPDIR to a folder of yours");
  if (st.st_uid != getuid())
    throw_error(ErrorKind::Orion, "temp folder root " + base.string() + " belongs to user " +
                                      std::to_string((long)st.st_uid) + ", not to you (" + uid +
                                      "); remove it or set ORION_TMPDIR to a folder of yours");
  if ((st.st_mode & 077) && chmod(base.c_str(), 0700) != 0)
    throw_error(ErrorKind::Orion, "cannot make temp folder root " + base.string() + " private (chmod 0700)");
  return base;
}

const std::string& root_locked() {
  if (g_root.empty()) {
    fs::path base = user_root();
    std::error_code ec;
    clean_stale(base);
    fs::path mine = base / std::to_string((long)getpid());
    fs::create_directories(mine, ec);
    if (ec) throw_error(ErrorKind::Orion, "cannot create " + mine.string() + ": " + ec.message());
    g_root = mine.string();
  }
  return g_root;
}

void write_file(const fs::path& p, const void* data, size_t n) {
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  fs::path tmp = p;
  tmp += ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw_error(ErrorKind::Orion, "cannot write " + tmp.string());
    f.write(static_cast<const char*>(data), (std::streamsize)n);
    if (!f) throw_error(ErrorKind::Orion, "short write to " + tmp.string());
  }
  fs::rename(tmp, p, ec);
  if (ec) throw_error(ErrorKind::Orion, "cannot rename " + tmp.string() + ": " + ec.message());
}

}  // namespace

std::string weight_relative_path(const std::string& key) {
  static const std::string prefix = "@model_path/";
  auto bad = [&](const std::string& why) {
    throw_error(ErrorKind::Input, "weight key '" + key + "' " + why +
                                      "; keys must look like \"@model_path/weights/name.bin\" (the BLOBFILE path)");
  };
  if (key.compare(0, prefix.size(), prefix) != 0) bad("does not start with \"@model_path/\"");
  std::string rel = key.substr(prefix.size());
  if (rel.empty()) bad("names no file");
  if (rel.size() > 1024) bad("is too long");
  if (rel.find('\0') != std::string::npos || rel.find('\\') != std::string::npos) bad("contains a NUL byte or backslash");
  if (rel[0] == '/') bad("is absolute");
  size_t start = 0;
  while (start <= rel.size()) {
    size_t end = rel.find('/', start);
    if (end == std::string::npos) end = rel.size();
    std::string comp = rel.substr(start, end - start);
    if (comp.empty()) bad("has an empty path component");
    if (comp == "..") bad("escapes the program folder");
    if (comp == ".") bad("has a '.' path component");
    start = end + 1;
  }
  if (rel == "model.mil") bad("would overwrite model.mil");
  return rel;
}

std::string acquire_folder(const std::string& identifier, const std::string& mil, const std::vector<WeightEntry>& weights) {
  std::lock_guard<std::mutex> lk(g_mu);
  Folder& f = g_folders[identifier];
  if (f.refs++ > 0) return f.path;
  try {
    fs::path dir = fs::path(root_locked()) / identifier;
    std::error_code ec;
    fs::remove_all(dir, ec);
    fs::create_directories(dir, ec);
    if (ec) throw_error(ErrorKind::Orion, "cannot create program folder " + dir.string() + ": " + ec.message());
    write_file(dir / "model.mil", mil.data(), mil.size());
    for (const auto& w : weights) write_file(dir / weight_relative_path(w.key), w.bytes.data(), w.bytes.size());
    f.path = dir.string();
  } catch (...) {
    g_folders.erase(identifier);
    throw;
  }
  return f.path;
}

void release_folder(const std::string& identifier) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = g_folders.find(identifier);
  if (it == g_folders.end()) return;
  if (--it->second.refs > 0) return;
  std::error_code ec;
  fs::remove_all(it->second.path, ec);
  g_folders.erase(it);
}

void rewrite_weight_files(const std::string& dir, const std::vector<WeightEntry>& weights) {
  for (const auto& w : weights) write_file(fs::path(dir) / weight_relative_path(w.key), w.bytes.data(), w.bytes.size());
}

std::vector<WeightEntry> read_weight_files(const std::string& dir, const std::vector<std::string>& keys) {
  std::vector<WeightEntry> out;
  for (const auto& k : keys) {
    fs::path p = fs::path(dir) / weight_relative_path(k);
    std::ifstream f(p, std::ios::binary);
    if (!f) throw_error(ErrorKind::WeightUpdate, "weight file " + p.string() + " is missing");
    WeightEntry e{k, std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>())};
    out.push_back(std::move(e));
  }
  return out;
}

std::string folder_root() {
  std::lock_guard<std::mutex> lk(g_mu);
  return root_locked();
}

void remove_all_folders() {
  std::lock_guard<std::mutex> lk(g_mu);
  std::error_code ec;
  for (auto& kv : g_folders) fs::remove_all(kv.second.path, ec);
  g_folders.clear();
  if (!g_root.empty()) fs::remove_all(g_root, ec);
  g_root.clear();
}

int live_folder_count() {
  std::lock_guard<std::mutex> lk(g_mu);
  return (int)g_folders.size();
}

}  // namespace orion::runtime
