#include "nn/strict_json.hpp"

#include <algorithm>
#include <optional>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

namespace headroom {
namespace {

using json = nlohmann::json;

// One entry per open object or array; an object's keys so far and the current one
// (nullopt before its first key; "" is a key like any other).
struct Frame {
  std::optional<std::set<std::string>> keys;  // nullopt: an array
  std::optional<std::string> key;
};

std::string dotted(const std::vector<std::string>& path) {
  std::string s;
  for (std::size_t i = 0; i < path.size(); ++i) s += (i == 0 ? "" : ".") + path[i];
  return s;
}

struct StrictCallback {
  std::vector<Frame>* open;
  const DuplicateKeyMessage* describe;
  std::string source;

  std::vector<std::string> path() const {
    std::vector<std::string> p;
    for (const Frame& f : *open) {
      if (f.keys && f.key) p.push_back(*f.key);
    }
    return p;
  }

  bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) const {
    switch (event) {
      case json::parse_event_t::object_start: open->push_back(Frame{std::set<std::string>{}, {}}); break;
      case json::parse_event_t::array_start: open->push_back(Frame{std::nullopt, {}}); break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!open->empty()) open->pop_back();
        break;
      case json::parse_event_t::key: {
        if (open->empty() || !open->back().keys) break;
        const std::string& key = parsed.get_ref<const std::string&>();
        open->back().key = key;
        if (!open->back().keys->insert(key).second) {
          const std::vector<std::string> p = path();
          throw std::invalid_argument(*describe ? (*describe)(p)
                                                : fmt::format("{}: duplicate key '{}'", source, dotted(p)));
        }
        break;
      }
      case json::parse_event_t::value: break;
    }
    return true;
  }
};

}  // namespace

json parse_strict_json(std::string_view text, const std::string& source, const DuplicateKeyMessage& describe) {
  std::vector<Frame> open;
  const StrictCallback check{&open, &describe, source};
  try {
    return json::parse(text.begin(), text.end(), check);
  } catch (const json::out_of_range& e) {
    // 406: a number that overflows a double; the callback has seen its key.
    const std::string where = dotted(check.path());
    const std::string what = e.what();
    const std::size_t quote = what.find('\'');
    const std::string number =
        quote == std::string::npos ? what : what.substr(quote + 1, what.rfind('\'') - quote - 1);
    throw std::invalid_argument(where.empty()
                                    ? fmt::format("{}: number out of range: {}", source, number)
                                    : fmt::format("{}: '{}': number out of range: {}", source, where, number));
  } catch (const json::exception& e) {
    throw JsonSyntaxError(source, e.what());
  }
}

namespace {

std::string shown(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

std::optional<JsonDifference> difference_at(const json& a, const json& b, const std::string& path) {
  if (a == b) return std::nullopt;
  if (a.type() == b.type() && a.is_object()) {
    auto sub = [&](const std::string& key) { return path.empty() ? key : path + "." + key; };
    for (const auto& [key, v] : b.items()) {
      if (!a.contains(key)) return JsonDifference{sub(key), "absent", shown(v)};
      if (auto d = difference_at(a[key], v, sub(key))) return d;
    }
    for (const auto& [key, v] : a.items()) {
      if (!b.contains(key)) return JsonDifference{sub(key), shown(v), "absent"};
    }
  } else if (a.type() == b.type() && a.is_array()) {
    for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
      const bool named = a[i].is_object() && a[i].contains("id");
      const std::string sub = fmt::format("{}[{}]", path, named ? a[i]["id"].dump() : std::to_string(i));
      if (auto d = difference_at(a[i], b[i], sub)) return d;
    }
    if (a.size() != b.size()) {
      return JsonDifference{path, fmt::format("{} entries", a.size()), fmt::format("{} entries", b.size())};
    }
  }
  return JsonDifference{path, shown(a), shown(b)};
}

}  // namespace

std::optional<JsonDifference> first_json_difference(const json& first, const json& second) {
  return difference_at(first, second, "");
}

json read_strict_json_file(const std::filesystem::path& file, std::uintmax_t max_bytes) {
  return parse_strict_json(read_input_file(file, file.string(), max_bytes), file.string());
}

}  // namespace headroom
