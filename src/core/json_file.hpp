// Reading a model directory's JSON files (config.json, generation_config.json,
// vocab.json) with messages that name the file and the key.
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "ffn/types.hpp"

namespace ffn::models {

inline nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream f(p);
  if (!f) throw Error(p.string() + ": cannot open");
  try {
    return nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw Error(p.string() + ": not valid JSON (" + std::string(e.what()) + ")");
  }
}

template <typename T>
T json_get(const nlohmann::json& j, const char* key, const std::filesystem::path& p) {
  if (!j.is_object() || !j.contains(key)) throw Error(p.string() + ": no \"" + std::string(key) + "\"");
  try {
    const nlohmann::json& v = j.at(key);
    // An integer setting given as a float (2.0): only a whole number in T's
    // range (a cast of another is undefined behaviour).
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
      if (v.is_number_float()) {
        const double x = v.get<double>();
        if (!(x == std::floor(x)) || !(x >= double(std::numeric_limits<T>::min())) ||
            !(x < std::ldexp(1.0, std::numeric_limits<T>::digits)))
          throw Error(p.string() + ": \"" + std::string(key) + "\" is not an integer in range (" + v.dump() + ")");
        return T(x);
      }
    return v.get<T>();
  } catch (const nlohmann::json::exception&) {
    throw Error(p.string() + ": \"" + std::string(key) + "\" has the wrong type (" + j.at(key).dump() + ")");
  }
}

// The value at key, or `otherwise` when the key is absent or null (a present
// value of the wrong type is an error).
template <typename T>
T json_opt(const nlohmann::json& j, const char* key, T otherwise, const std::filesystem::path& p) {
  if (!j.is_object() || !j.contains(key) || j.at(key).is_null()) return otherwise;
  return json_get<T>(j, key, p);
}

}  // namespace ffn::models
