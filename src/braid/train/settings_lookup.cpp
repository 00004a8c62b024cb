// How a setting is found by key, spelled as flags, described, checked and suggested for a
// misspelling (see settings.h); the table itself is in settings.cpp.
#include <cmath>
#include <limits>
#include <map>
#include <sstream>

#include "core/error.h"
#include "train/settings.h"
#include "train/suggest.h"

namespace braid::train {
namespace {

using nlohmann::json;

std::string leaf_of(std::string_view key) {
  const size_t dot = key.rfind('.');
  return std::string(dot == std::string_view::npos ? key : key.substr(dot + 1));
}

std::string dashed(std::string s) {
  for (char& ch : s)
    if (ch == '_') ch = '-';
  return s;
}

// Whole numbers below 2^53 in full (1048576, not 1.04858e+06); others as the stream has it.
std::string format_number(double v) {
  if (std::trunc(v) == v && std::abs(v) < 9007199254740992.0)
    return std::to_string(static_cast<int64_t>(v));
  std::ostringstream out;
  out << v;
  return out.str();
}

}  // namespace

const Setting* find_setting(std::string_view key) {
  for (const Setting& s : settings())
    if (s.key == key) return &s;
  return nullptr;
}

bool is_section(std::string_view key) {
  for (const Setting& s : settings())
    if (s.key.size() > key.size() && s.key.starts_with(key) && s.key[key.size()] == '.')
      return true;
  return false;
}

std::vector<std::string> flag_names(const Setting& s) {
  std::vector<std::string> names{"--" + dashed(s.key)};
  const size_t dot = s.key.rfind('.');
  if (dot != std::string::npos) {
    const std::string leaf = leaf_of(s.key);
    int same_leaf = 0;
    // Another key spelled as the leaf ("schedule", for schedule.name) keeps the short flag.
    for (const Setting& other : settings())
      same_leaf += leaf_of(other.key) == leaf || other.key == leaf || other.key == leaf + ".name";
    if (leaf == "name")
      names.push_back("--" + dashed(s.key.substr(0, dot)));
    else if (same_leaf == 1)
      names.push_back("--" + dashed(leaf));
  }
  names.insert(names.end(), s.old_flags.begin(), s.old_flags.end());
  return names;
}

std::string negated_flag(const Setting& s) {
  return s.kind == SettingKind::boolean ? "--no-" + dashed(s.key) : std::string();
}

std::string describe_accepted(const Setting& s, bool with_type) {
  switch (s.kind) {
    case SettingKind::boolean:
      return "true or false";
    case SettingKind::integer: {
      std::string d = s.int_lo == 1   ? "positive"
                      : s.int_lo == 0 ? ">= 0"
                                      : ">= " + std::to_string(s.int_lo);
      if (s.int_hi < std::numeric_limits<int64_t>::max())
        d += " and at most " + std::to_string(s.int_hi);
      return with_type ? d + " (an integer)" : d;
    }
    case SettingKind::number: {
      const Range& r = s.range;
      if (std::isinf(r.hi))
        return (r.lo == 0 ? (r.lo_open ? "positive" : ">= 0")
                          : std::string(r.lo_open ? "> " : ">= ") + format_number(r.lo)) +
               (with_type ? " (a finite number)" : "");
      return std::string("in ") + (r.lo_open ? "(" : "[") + format_number(r.lo) + ", " +
             format_number(r.hi) + (r.hi_open ? ")" : "]") + (with_type ? " (a number)" : "");
    }
    case SettingKind::text: {
      if (s.choices.empty()) return "a string";
      std::string d = "one of: ";
      for (size_t i = 0; i < s.choices.size(); ++i) d += (i ? ", " : "") + s.choices[i];
      return d;
    }
    case SettingKind::text_list:
      return "a list of strings";
    case SettingKind::number_list: {
      Setting each = s;
      each.kind = SettingKind::number;
      return "a list of numbers, each " + describe_accepted(each, false);
    }
    case SettingKind::model:
      return "a built-in model name (mlp, cnn, cnn-bn, gpt-tiny, gpt-small) or a model spec object";
  }
  return "";
}

json check_value(const Setting& s, const json& v) {
  auto refuse = [&]() -> json {
    BRAID_THROW(Error, "config: '", s.key, "' must be ", describe_accepted(s), ", got ", v.dump());
  };
  switch (s.kind) {
    case SettingKind::boolean:
      return v.is_boolean() ? v : refuse();
    case SettingKind::integer: {
      int64_t n = 0;
      if (v.is_number_unsigned()) {
        if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
          refuse();
        n = static_cast<int64_t>(v.get<uint64_t>());
      } else if (v.is_number_integer()) {
        n = v.get<int64_t>();
      } else if (v.is_number_float()) {
        // An integral float (1e3) is the integer it spells; 2.5 or 1e20 is not one.
        const double d = v.get<double>();
        if (!(std::trunc(d) == d && std::abs(d) < 9.0e18)) refuse();
        n = static_cast<int64_t>(d);
      } else {
        refuse();
      }
      if (n < s.int_lo || n > s.int_hi) refuse();
      return n;
    }
    case SettingKind::number: {
      if (!v.is_number()) refuse();
      const double d = v.get<double>();
      const Range& r = s.range;
      const bool ok = std::isfinite(d) && (r.lo_open ? d > r.lo : d >= r.lo) &&
                      (r.hi_open ? d < r.hi : d <= r.hi);
      if (!ok) refuse();
      return d;
    }
    case SettingKind::text:
      if (!v.is_string()) refuse();
      if (!s.choices.empty()) {
        bool known = false;
        for (const std::string& c : s.choices) known |= v.get<std::string>() == c;
        if (!known) {
          const std::string near = closest_match(v.get<std::string>(), s.choices);
          BRAID_THROW(Error, "config: '", s.key, "' is ", v.dump(), "; ",
                      near.empty() ? "" : "did you mean '" + near + "'? ",
                      "accepted: ", describe_accepted(s).substr(8));
        }
      }
      return v;
    case SettingKind::text_list:
      if (!v.is_array()) refuse();
      for (const json& e : v)
        if (!e.is_string()) refuse();
      return v;
    case SettingKind::number_list: {
      if (!v.is_array()) refuse();
      Setting each = s;
      each.kind = SettingKind::number;
      json out = json::array();
      for (const json& e : v) {
        if (!e.is_number()) refuse();
        const double d = e.get<double>();
        const Range& r = s.range;
        if (!(std::isfinite(d) && (r.lo_open ? d > r.lo : d >= r.lo) &&
              (r.hi_open ? d < r.hi : d <= r.hi)))
          refuse();
        out.push_back(d);
      }
      return out;
    }
    case SettingKind::model:
      if (!v.is_string() && !v.is_object()) refuse();
      return v;
  }
  return v;
}

std::string suggest_key(std::string_view unknown) {
  // Every spelling a user may reach for, each mapped to its key: the key, its last part
  // ("lr" written at the top level), its flags written as keys ("steps") and other
  // frameworks' names.
  std::vector<std::pair<std::string, std::string>> spellings;
  for (const Setting& s : settings()) {
    spellings.emplace_back(s.key, s.key);
    if (const size_t dot = s.key.rfind('.'); dot != std::string::npos)
      spellings.emplace_back(s.key.substr(0, dot), s.key.substr(0, dot));
  }
  for (const Setting& s : settings()) {
    spellings.emplace_back(leaf_of(s.key), s.key);
    for (const std::string& f : flag_names(s)) {
      std::string k = f.substr(2);
      for (char& ch : k)
        if (ch == '-') ch = '_';
      spellings.emplace_back(k, s.key);
    }
  }
  spellings.emplace_back("learning_rate", "optimizer.lr");
  spellings.emplace_back("batch_size", "batch");
  spellings.emplace_back("num_epochs", "epochs");
  auto best_among = [&](std::string_view word, std::string_view section) {
    std::vector<std::string> names;
    std::map<std::string, std::string> key_of;
    for (const auto& [spelling, key] : spellings) {
      if (!section.empty() && !key.starts_with(std::string(section) + ".")) continue;
      if (key_of.emplace(spelling, key).second) names.push_back(spelling);
    }
    const std::string best = closest_match(word, names);
    return best.empty() ? best : key_of.at(best);
  };
  const size_t dot = unknown.rfind('.');
  if (dot == std::string_view::npos) return best_among(unknown, "");
  // A nested key: first among its own section's keys, then anywhere by its last part
  // ("optimizer.warmup_steps" -> "schedule.warmup_steps").
  const std::string_view leaf = unknown.substr(dot + 1);
  std::string best = best_among(leaf, unknown.substr(0, dot));
  return best.empty() ? best_among(leaf, "") : best;
}

}  // namespace braid::train
