// SPDX-License-Identifier: MIT
// A Hugging Face id ("meta-llama/Llama-3.1-8B") read offline from the cache that huggingface_hub
// fills: vramfit never downloads, and says which command would.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vramfit/hf_config.hpp>

#include "choices.hpp"

namespace vramfit::cli {

/// An id as --model gives it: "org/name", and the revision after an optional "@".
struct hub_id {
  std::string repo, revision = "main";
};

/// Whether `name` is to be read as a Hub id rather than a path: it is not there, names no .json,
/// and has a "/" before any "@" without starting at the root or home.
inline bool looks_like_hub_id(const std::string& name) {
  std::error_code ec;
  const std::string repo = name.substr(0, name.find('@'));
  return !name.empty() && name.front() != '/' && name.front() != '~' &&
         repo.find('/') != std::string::npos && name.find(".json") == std::string::npos &&
         !std::filesystem::exists(name, ec) && ec != std::errc::too_many_symbolic_link_levels;
}

namespace detail_hub {
inline bool word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
/// A part of an id as huggingface_hub's validate_repo_id takes it (utils/_validators.py,
/// REPO_ID_REGEX `\b[\w\-.]+\b`): word characters, '-' and '.', a word character at each end.
inline bool valid_part(std::string_view part) {
  if (part.empty() || !word_char(part.front()) || !word_char(part.back())) return false;
  for (char c : part)
    if (!word_char(c) && c != '-' && c != '.') return false;
  return true;
}
/// A 40-hex commit hash (huggingface_hub constants.py REGEX_COMMIT_HASH `^[0-9a-f]{40}$`).
inline bool commit_hash(std::string_view text) {
  if (text.size() != 40) return false;
  for (char c : text)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}
/// $name, or "" when it is unset or empty.
inline std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}
/// "~/x" as os.path.expanduser writes it, from $HOME.
inline std::string expand_home(const std::string& path) {
  if (path == "~" || path.starts_with("~/")) {
    const std::string home = env("HOME");
    if (!home.empty()) return home + path.substr(1);
  }
  return path;
}
}  // namespace detail_hub

/// `name` ("org/name" or "org/name@revision") checked as huggingface_hub's validate_repo_id
/// checks an id: two valid parts, no "--" or "..", no ".git" end, at most 96 characters.
inline hub_id parse_hub_id(const std::string& name) {
  const std::string shown = "--model '" + shown_value(name) + "'";
  hub_id id;
  const std::size_t at = name.find('@');
  id.repo = name.substr(0, at);
  if (at != std::string::npos) id.revision = name.substr(at + 1);
  const std::size_t slash = id.repo.find('/');
  const bool valid = id.repo.size() <= 96 && id.repo.find("--") == std::string::npos &&
                     id.repo.find("..") == std::string::npos && !id.repo.ends_with(".git") &&
                     detail_hub::valid_part(std::string_view(id.repo).substr(0, slash)) &&
                     detail_hub::valid_part(std::string_view(id.repo).substr(slash + 1));
  if (!valid)
    detail::raise(shown +
                  " is not a file here, nor a Hugging Face id: org/name, each of letters, digits, "
                  "'-', '_' and '.', without '..' or '--', at most 96 characters");
  // A ref name (refs/<revision>) or a commit: a path inside the repository's folder, no more.
  bool revision_ok = !id.revision.empty() && id.revision.size() <= 128 &&
                     id.revision.find("..") == std::string::npos &&
                     id.revision.find("//") == std::string::npos && id.revision.front() != '/' &&
                     id.revision.back() != '/';
  for (char c : id.revision)
    revision_ok = revision_ok && (detail_hub::word_char(c) || c == '-' || c == '.' || c == '/');
  if (!revision_ok)
    detail::raise(shown +
                  ": the revision after '@' must be a branch or tag name or a commit hash "
                  "(letters, digits, '-', '_', '.', '/'; no '..'; at most 128 characters)");
  return id;
}

/// The cache folder as huggingface_hub constants.py finds it: $HF_HUB_CACHE, else the legacy
/// $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
/// ~/.cache/huggingface/hub. An empty variable counts as unset.
inline std::filesystem::path hub_cache_folder() {
  using detail_hub::env, detail_hub::expand_home;
  for (const char* name : {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"})
    if (!env(name).empty()) return expand_home(env(name));
  if (!env("HF_HOME").empty()) return std::filesystem::path(expand_home(env("HF_HOME"))) / "hub";
  if (!env("XDG_CACHE_HOME").empty())
    return std::filesystem::path(expand_home(env("XDG_CACHE_HOME"))) / "huggingface" / "hub";
  if (env("HOME").empty())
    detail::raise("a Hugging Face id needs the cache's folder: HOME is unset; set HF_HUB_CACHE");
  return std::filesystem::path(env("HOME")) / ".cache" / "huggingface" / "hub";
}

/// The config.json of `name` (an id, see parse_hub_id) in the local cache, laid out as
/// huggingface_hub's file_download.py writes it and try_to_load_from_cache reads it:
/// models--{org}--{name}/refs/{revision} holds a commit, snapshots/{commit}/config.json.
inline nlohmann::json read_hub_config(const std::string& name) {
  const hub_id id = parse_hub_id(name);
  const std::string shown = "--model '" + id.repo + "'";
  std::string repo_folder = "models--" + id.repo;  // repo_folder_name: "/" becomes "--"
  repo_folder.replace(repo_folder.find('/'), 1, "--");
  const std::filesystem::path folder = hub_cache_folder() / repo_folder;
  const std::string fetch =
      " and vramfit does not download: fetch its config.json with "
      "huggingface-cli download " +
      id.repo + (id.revision == "main" ? "" : " --revision " + id.revision) + " config.json";
  // Each step refuses a symlink loop by name: status() reports it rather than "missing".
  const auto kind = [&shown](const std::filesystem::path& p) {
    std::error_code ec;
    const std::filesystem::file_status s = std::filesystem::status(p, ec);
    if (ec == std::errc::too_many_symbolic_link_levels)
      detail::raise(shown + ": '" + p.string() + "' is a symbolic link loop in the cache");
    return s.type();
  };
  if (kind(folder) != std::filesystem::file_type::directory)
    detail::raise(shown + " is not a preset, a file here, or in the Hugging Face cache ('" +
                  folder.string() + "' is missing)," + fetch);
  std::string commit = id.revision;
  const std::filesystem::path ref = folder / "refs" / id.revision;
  const std::filesystem::file_type ref_kind = kind(ref);
  if (ref_kind == std::filesystem::file_type::regular) {
    std::ifstream in(ref, std::ios::binary);
    char text[128] = {};  // a commit and a newline; more is not a ref
    in.read(text, sizeof text);
    commit.assign(text, static_cast<std::size_t>(in.gcount()));
    while (!commit.empty() && (commit.back() == '\n' || commit.back() == '\r' ||
                               commit.back() == ' ' || commit.back() == '\t'))
      commit.pop_back();
    if (!detail_hub::commit_hash(commit))
      detail::raise(shown + ": '" + ref.string() + "' does not hold a commit hash (40 hex digits)");
  } else if (ref_kind != std::filesystem::file_type::not_found) {
    detail::raise(shown + ": '" + ref.string() + "' is not a regular file");
  } else if (!detail_hub::commit_hash(commit)) {
    detail::raise(shown + " has no revision '" + id.revision + "' in the Hugging Face cache ('" +
                  ref.string() + "' is missing)," + fetch);
  }
  const std::filesystem::path config = folder / "snapshots" / commit / "config.json";
  if (kind(config) == std::filesystem::file_type::not_found)
    detail::raise(shown + " has no config.json in the Hugging Face cache ('" + config.string() +
                  "' is missing)," + fetch);
  try {
    return read_hf_config(config);  // its size and depth limits, a regular file only
  } catch (const vramfit::error& e) {
    std::string_view what = e.what();
    if (what.starts_with("vramfit: ")) what.remove_prefix(9);
    detail::raise(shown + ": " + std::string(what));
  }
}

}  // namespace vramfit::cli
