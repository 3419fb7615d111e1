// The framework's temp-folder protocol (C44, docs/ane-framework.md): NSTemporaryDirectory()/<the
// model's own hexStringIdentifier>/ pre-populated with model.mil and every weight file at the path its
// "@model_path/..." key names, before compile. The framework's unload deletes the folder; we delete it
// too on release and at exit. Folders of crashed processes stay behind, so each gets an owner marker
// <tmp>/orion-ane-owners/<id>.<pid>; at start-up, folders whose only owners are dead processes are
// removed (folders of other tools, which have no marker, are never touched).
#pragma once
#include <string>
#include <vector>

#include "runtime/backend.h"

namespace orion::ane {

std::string temp_directory();  // NSTemporaryDirectory() without the trailing slash
constexpr size_t kMaxIdentifier = 255;  // NAME_MAX: one folder name
bool is_upstream_identifier(const std::string& name);  // <64 hex>_<64 hex>_<64 hex> (decompiled shape)
// Non-empty, at most kMaxIdentifier bytes, no '/', no '..', not '.': a single folder name that cannot
// escape NSTemporaryDirectory(). The only check on the identifier (running code uses any shape).
bool is_safe_component(const std::string& name);
// NSTemporaryDirectory()/<hex_id>; throws for an unsafe name, logs (once) a shape other than upstream's.
std::string model_folder(const std::string& hex_id);
// (Re)creates the folder with weights/ (always), model.mil, the weight files and this process's owner
// marker.
void populate_model_folder(const std::string& hex_id, const std::string& mil,
                           const std::vector<runtime::WeightEntry>& weights);
// Overwrites weight files in place (the delta_reload recipe; creates the folder if unload deleted it).
void rewrite_model_weights(const std::string& hex_id, const std::vector<runtime::WeightEntry>& weights);
// What the framework's save step writes itself on the first compile: net.plist = MIL text, and the file "data"
// (each entry's first value under its first key, so with several entries one blob ends up there: the
// caller picks it, ane_model.mm). Used by the direct route and the delta_patch recipe.
void write_framework_files(const std::string& hex_id, const std::string& mil, const runtime::WeightEntry* data_blob);
bool copy_file(const std::string& from, const std::string& to);
void remove_model_folder(const std::string& hex_id);  // folder + owner marker
void clean_stale_model_folders();                     // once per process
int live_model_folders();                             // folders this process created and still owns

}  // namespace orion::ane
