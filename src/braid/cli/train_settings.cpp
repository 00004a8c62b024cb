// The setting flags of `braid train` (see train_settings.h).
#include "cli/train_settings.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "train/recipes.h"
#include "train/settings.h"
#include "train/suggest.h"

namespace braid::cli {
namespace {

using nlohmann::json;
using train::Setting;
using train::SettingKind;

// What CLI11 fills, one slot per row of the settings table (sized once: CLI11 keeps
// pointers into these vectors).
struct FlagValues {
  std::vector<std::string> text;
  std::vector<std::vector<std::string>> list;
  std::unique_ptr<bool[]> boolean;  // not vector<bool>: CLI11 needs a bool& per flag
  std::vector<CLI::Option*> option;
};

bool set_by_a_recipe(const std::string& key) {
  for (const std::string& model : train::builtin_model_names()) {
    const json* at = train::builtin_recipe(model);
    const json::json_pointer pointer("/" + [&] {
      std::string p = key;
      for (char& ch : p)
        if (ch == '.') ch = '/';
      return p;
    }());
    if (at->contains(pointer)) return true;
  }
  return false;
}

std::string flatten(const json& j, const std::string& prefix = "") {
  std::string out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string key = prefix + it.key();
    std::string part = it->is_object()
                           ? flatten(*it, key + ".")
                           : key + " " + (it->is_string() ? it->get<std::string>() : it->dump());
    out += (out.empty() ? "" : ", ") + part;
  }
  return out;
}

std::string footer() {
  std::string f =
      "\nEvery setting flag is a config key: --a.b-c sets a.b_c (--max-steps sets max_steps,\n"
      "--optimizer.lr optimizer.lr). A nested key also answers to its last part where that\n"
      "is unambiguous (--lr, --warmup-steps), X.name to --X (--optimizer adamw), a boolean\n"
      "to --no-... for false. Flags override the --config file.\n\n"
      "A built-in model brings its recipe, the defaults marked * (the file and flags win):\n";
  for (const std::string& model : train::builtin_model_names())
    f += "  " + model + ": " + flatten(*train::builtin_recipe(model)) + "\n";
  return f + "The resolved config of a run is OUT/config.json.";
}

std::string default_text(const json& d) {
  if (d.is_string()) return d.get<std::string>();
  if (d.is_array() && d.empty()) return "none";
  if (d.is_number_float()) {
    std::ostringstream out;
    out << d.get<double>();  // 0 and 0.001, not 0.0 and 0.001
    return out.str();
  }
  return d.dump();
}

std::string type_name(SettingKind kind) {
  switch (kind) {
    case SettingKind::integer:
      return "INT";
    case SettingKind::number:
      return "NUMBER";
    case SettingKind::text_list:
      return "PATH ...";
    case SettingKind::number_list:
      return "NUMBER ...";
    case SettingKind::model:
      return "NAME|FILE";
    default:
      return "TEXT";
  }
}

// A flag's text as the JSON value its key holds. A number that does not parse as one
// stays a string, so the key's check reports the wrong type; one past double's range
// (1e400) cannot be represented at all and is refused here.
json value_of(const Setting& s, const std::string& text) {
  if (s.kind == SettingKind::integer || s.kind == SettingKind::number) {
    try {
      json v = json::parse(text);
      if (v.is_number()) return v;
    } catch (const json::out_of_range&) {
      BRAID_THROW(Error, "config: '", s.key, "' must be ", train::describe_accepted(s), ", got ",
                  text);
    } catch (const json::parse_error&) {
    }
    return text;
  }
  if (s.kind == SettingKind::model && text.ends_with(".json")) {
    std::ifstream in(text);
    if (!in) BRAID_THROW(IoError, "model spec '", text, "': cannot open it (does the file exist?)");
    try {
      return json::parse(in);
    } catch (const json::exception& e) {
      BRAID_THROW(Error, "model spec '", text, "': not valid JSON: ", e.what());
    }
  }
  return text;
}

// A number list's flag values (--loss-class-weights 1 2.5): each that parses as a number
// becomes one, the rest stay strings for the key's check to name.
json number_list_of(const Setting& s, const std::vector<std::string>& texts) {
  Setting each = s;
  each.kind = SettingKind::number;
  json out = json::array();
  for (const std::string& t : texts) out.push_back(value_of(each, t));
  return out;
}

// j["optimizer"]["lr"] = v for the key "optimizer.lr", refusing a section that is not an
// object ("optimizer": "adam") instead of letting nlohmann throw.
void set_path(json& j, const std::string& key, json v) {
  json* at = &j;
  std::string rest = key;
  for (size_t dot; (dot = rest.find('.')) != std::string::npos; rest = rest.substr(dot + 1)) {
    const std::string section = rest.substr(0, dot);
    json& next = (*at)[section];
    if (next.is_null()) next = json::object();
    BRAID_CHECK(next.is_object(), "config: '", key.substr(0, key.size() - rest.size() + dot),
                "' must be a JSON object ({\"key\": value, ...}), got ", next.dump());
    at = &next;
  }
  (*at)[rest] = std::move(v);
}

[[noreturn]] void refuse_unknown(const CLI::App& cmd, const std::string& arg) {
  std::string name = arg.substr(0, arg.find('='));
  if (!name.starts_with("-"))
    BRAID_THROW(Error, "train: unexpected argument '", arg,
                "'; every setting is a flag (braid train --help)");
  std::vector<std::string> names;
  for (const CLI::Option* o : cmd.get_options())
    for (const std::string& n : o->get_lnames()) names.push_back("--" + n);
  const std::string near = train::closest_match(name, names);
  BRAID_THROW(Error, "train: unknown flag '", name, "'; ",
              near.empty() ? std::string("the flags are listed by braid train --help")
                           : "did you mean '" + near + "'?");
}

}  // namespace

std::function<void(json& j)> add_setting_flags(CLI::App* cmd) {
  const auto& table = train::settings();
  auto values = std::make_shared<FlagValues>();
  values->text.resize(table.size());
  values->list.resize(table.size());
  values->boolean = std::make_unique<bool[]>(table.size());
  values->option.resize(table.size());
  const train::TrainConfig defaults;
  for (size_t i = 0; i < table.size(); ++i) {
    const Setting& s = table[i];
    std::string names;
    for (const std::string& n : train::flag_names(s)) names += (names.empty() ? "" : ",") + n;
    std::string help = s.help;
    if (s.kind == SettingKind::integer || s.kind == SettingKind::number || !s.choices.empty())
      help += "; " + train::describe_accepted(s, false);
    CLI::Option* o = nullptr;
    if (s.kind == SettingKind::boolean)
      o = cmd->add_flag(names + ",!" + train::negated_flag(s), values->boolean[i], help);
    else if (s.kind == SettingKind::text_list || s.kind == SettingKind::number_list)
      o = cmd->add_option(names, values->list[i], help);
    else
      o = cmd->add_option(names, values->text[i], help);
    o->group(s.group);
    if (s.kind != SettingKind::boolean) o->type_name(type_name(s.kind));
    o->default_str(default_text(s.get(defaults)) + (set_by_a_recipe(s.key) ? "*" : ""));
    values->option[i] = o;
  }
  cmd->footer(footer());
  cmd->allow_extras();
  return [cmd, values](json& j) {
    for (const std::string& extra : cmd->remaining()) refuse_unknown(*cmd, extra);
    BRAID_CHECK(j.is_object(),
                "config: the top level must be a JSON object ({\"key\": value, ...}), got ",
                j.type_name());
    const auto& table = train::settings();
    for (size_t i = 0; i < table.size(); ++i) {
      const Setting& s = table[i];
      if (values->option[i]->count() == 0) continue;
      json v;
      if (s.kind == SettingKind::boolean)
        v = values->boolean[i];
      else if (s.kind == SettingKind::text_list)
        v = values->list[i];
      else if (s.kind == SettingKind::number_list)
        v = number_list_of(s, values->list[i]);
      else
        v = value_of(s, values->text[i]);
      set_path(j, s.key, std::move(v));
    }
  };
}

}  // namespace braid::cli
