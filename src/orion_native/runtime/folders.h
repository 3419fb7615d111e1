// Program temp folders, laid out like the ANE's (docs/ane-framework.md): <root>/<identifier>/
// holding model.mil and every weight file at the path its "@model_path/..." key names. Folders are
// reference-counted per identifier, so releasing one of two identical programs never deletes the
// other's folder (the C44 collision bug). The root is per user and process (<tmp>/orion-sim-<uid>/<pid>, 0700,
// owner checked; see user_root in folders.cpp); folders of
// dead processes are removed on first use, and everything is removed at exit.
#pragma once
#include <string>
#include <vector>

#include "runtime/backend.h"

namespace orion::runtime {

// "@model_path/weights/w.bin" -> "weights/w.bin". Throws InputError for keys that do not start with
// "@model_path/", are empty, absolute, contain "..", empty components, backslashes or NUL bytes.
std::string weight_relative_path(const std::string& key);

// Creates (or shares) the folder for `identifier`, writing model.mil and the weight files when it is
// created. Returns its path.
std::string acquire_folder(const std::string& identifier, const std::string& mil, const std::vector<WeightEntry>& weights);
void release_folder(const std::string& identifier);
// Rewrites weight files inside an existing folder (the delta_reload recipe).
void rewrite_weight_files(const std::string& dir, const std::vector<WeightEntry>& weights);
// Reads back the weight files named by `keys` from a folder (what a reload would see).
std::vector<WeightEntry> read_weight_files(const std::string& dir, const std::vector<std::string>& keys);
std::string folder_root();
void remove_all_folders();  // at interpreter exit
int live_folder_count();

}  // namespace orion::runtime
