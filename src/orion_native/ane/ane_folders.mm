// See ane_folders.h. Objective-C++ only for NSTemporaryDirectory(); the rest is std::filesystem.
#include "ane/ane_folders.h"

#import <Foundation/Foundation.h>
#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>

#include "ane/ane_framework.h"
#include "common/error.h"
#include "runtime/folders.h"

namespace fs = std::filesystem;

namespace orion::ane {

namespace {

std::mutex g_mu;
std::set<std::string> g_owned;  // identifiers whose folder this process created

std::string temp_root_uncached() {
  Pool pool;
  std::string t = str(NSTemporaryDirectory());
  if (t.empty()) t = fs::temp_directory_path().string();
  while (t.size() > 1 && t.back() == '/') t.pop_back();
  return t;
}

// Asked once: NSTemporaryDirectory() does not change during a process.
const std::string& temp_root() {
  static const std::string* t = new std::string(temp_root_uncached());
  return *t;
}

fs::path owners_dir() { return fs::path(temp_root()) / "orion-ane-owners"; }
fs::path marker(const std::string& id) { return owners_dir() / (id + "." + std::to_string((long)getpid())); }

void write_file(const fs::path& p, const void* data, size_t n) {
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  if (!f) throw_error(ErrorKind::Orion, "cannot write " + p.string() + " (ANE temp folder protocol, C44)");
  f.write(static_cast<const char*>(data), (std::streamsize)n);
  f.close();
  if (!f) throw_error(ErrorKind::Orion, "short write to " + p.string() + " (ANE temp folder protocol, C44)");
}

bool alive(long pid) { return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM); }

}  // namespace

std::string temp_directory() { return temp_root(); }

bool is_upstream_identifier(const std::string& s) {
  if (s.size() != 64 * 3 + 2) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == 64 || i == 129) {
      if (s[i] != '_') return false;
    } else if (!std::isxdigit((unsigned char)s[i])) {
      return false;
    }
  }
  return true;
}

bool is_safe_component(const std::string& s) {
  return !s.empty() && s.size() <= kMaxIdentifier && s != "." && s.find('/') == std::string::npos &&
         s.find("..") == std::string::npos && s.find('\0') == std::string::npos;
}

std::string model_folder(const std::string& hex_id) {
  if (!is_safe_component(hex_id))
    throw_error(ErrorKind::Orion, "-[_ANEInMemoryModel hexStringIdentifier] returned '" + hex_id.substr(0, 300) + "' (" +
                                      std::to_string(hex_id.size()) + " bytes), which is not a single safe folder name "
                                      "(non-empty, at most " + std::to_string(kMaxIdentifier) + " bytes, no '/', no '..'); "
                                      "refusing to create or delete NSTemporaryDirectory()/<it>" + context());
  // Working code uses whatever the framework returns; the 64_64_64 hex shape is from decompiled code
  // only, so another shape is logged once and used.
  static std::once_flag logged;
  if (!is_upstream_identifier(hex_id))
    std::call_once(logged, [&] {
      std::fprintf(stderr, "orion: note: -[_ANEInMemoryModel hexStringIdentifier] returned '%s' (%zu bytes), not the "
                           "<64 hex>_<64 hex>_<64 hex> shape of the decompiled framework; using it as the temp folder "
                           "name, as working code does%s\n", hex_id.c_str(), hex_id.size(), context().c_str());
    });
  return (fs::path(temp_root()) / hex_id).string();
}

void populate_model_folder(const std::string& hex_id, const std::string& mil,
                           const std::vector<runtime::WeightEntry>& weights) {
  fs::path dir = model_folder(hex_id);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw_error(ErrorKind::Orion, "cannot create ANE temp folder " + dir.string() + ": " + ec.message());
  {
    std::lock_guard<std::mutex> lk(g_mu);
    g_owned.insert(hex_id);
  }
  fs::create_directories(owners_dir(), ec);
  write_file(marker(hex_id), "", 0);
  // <dir>/weights exists even for weight-free programs: working code always creates it.
  fs::create_directories(dir / "weights", ec);
  if (ec) throw_error(ErrorKind::Orion, "cannot create " + (dir / "weights").string() + ": " + ec.message() + context());
  write_file(dir / "model.mil", mil.data(), mil.size());
  for (const auto& w : weights) write_file(dir / runtime::weight_relative_path(w.key), w.bytes.data(), w.bytes.size());
}

void rewrite_model_weights(const std::string& hex_id, const std::vector<runtime::WeightEntry>& weights) {
  fs::path dir = model_folder(hex_id);
  for (const auto& w : weights) write_file(dir / runtime::weight_relative_path(w.key), w.bytes.data(), w.bytes.size());
}

void write_framework_files(const std::string& hex_id, const std::string& mil, const runtime::WeightEntry* data_blob) {
  fs::path dir = model_folder(hex_id);
  write_file(dir / "net.plist", mil.data(), mil.size());
  if (data_blob) write_file(dir / "data", data_blob->bytes.data(), data_blob->bytes.size());
}

bool copy_file(const std::string& from, const std::string& to) {
  std::error_code ec;
  fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  return !ec;
}

void remove_model_folder(const std::string& hex_id) {
  std::error_code ec;
  if (is_safe_component(hex_id)) fs::remove_all(fs::path(temp_root()) / hex_id, ec);
  fs::remove(marker(hex_id), ec);
  fs::remove(owners_dir(), ec);  // only when empty
  std::lock_guard<std::mutex> lk(g_mu);
  g_owned.erase(hex_id);
}

void clean_stale_model_folders() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::error_code ec;
    fs::path owners = owners_dir();
    std::set<std::string> live, dead;
    for (auto& e : fs::directory_iterator(owners, ec)) {
      std::string n = e.path().filename().string();
      size_t dot = n.rfind('.');
      if (dot == std::string::npos || !is_safe_component(n.substr(0, dot))) continue;
      char* end = nullptr;
      long pid = std::strtol(n.c_str() + dot + 1, &end, 10);
      if (!end || *end) continue;
      if (alive(pid)) {
        live.insert(n.substr(0, dot));
      } else {
        dead.insert(n.substr(0, dot));
        fs::remove(e.path(), ec);
      }
    }
    for (const auto& id : dead)
      if (!live.count(id)) fs::remove_all(fs::path(temp_root()) / id, ec);
  });
}

int live_model_folders() {
  std::lock_guard<std::mutex> lk(g_mu);
  return (int)g_owned.size();
}

}  // namespace orion::ane
