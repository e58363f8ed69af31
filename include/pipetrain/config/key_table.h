#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "pipetrain/config/json_value.h"

namespace pipetrain::config {

// One key of a config file as a person reads about it.
struct KeyDoc {
  std::string key;       // dotted path, e.g. "pipeline.stages"
  std::string type;      // int, number, bool, string, object, ...
  std::string fallback;  // the default, as JSON
  std::string help;
};

// The keys of a config, each bound once to a field of the typed `Config`: its dotted name,
// JSON type, bounds, allowed values and help. From the one table come reading (InputError
// naming the key), the unknown keys of a file, the effective config written back as JSON,
// and the documentation. Fields are given as accessors usable on a const and a mutable
// Config, e.g. [](auto& c) -> auto& { return c.pipeline.recompute; }. Defaults are the
// fields' values in a default-constructed Config.
// A field of a config for KeyTable: PIPETRAIN_FIELD(pipeline.recompute).
#define PIPETRAIN_FIELD(member) \
  [](auto& config_) -> auto& {  \
    return config_.member;      \
  }

template <typename Config>
class KeyTable {
 public:
  // Keys added after this hold only for configs that `applies` accepts once the keys
  // before it are read (e.g. the GPT's sizes when model.type is "gpt"), until the next
  // call; others are unknown keys there. `note` tells the docs when they apply.
  KeyTable& when(std::function<bool(const Config&)> applies, std::string note) {
    group_ = static_cast<int>(groups_.size());
    groups_.push_back({std::move(applies), std::move(note)});
    return *this;
  }

  template <typename Field>
  KeyTable& integer(std::string name, Field field, std::string help, Range range = {}) {
    return add<Field>(std::move(name), "int", std::move(help), field,
                      [range](const std::string& key, const nlohmann::json& v) {
                        return read_integer(key, v, range);
                      });
  }
  template <typename Field>
  KeyTable& number(std::string name, Field field, std::string help, Range range = {}) {
    return add<Field>(std::move(name), "number", std::move(help), field,
                      [range](const std::string& key, const nlohmann::json& v) {
                        return read_number(key, v, range);
                      });
  }
  template <typename Field>
  KeyTable& flag(std::string name, Field field, std::string help) {
    return add<Field>(std::move(name), "bool", std::move(help), field, read_bool);
  }
  template <typename Field>
  KeyTable& text(std::string name, Field field, std::string help) {
    return add<Field>(std::move(name), "string", std::move(help), field, read_string);
  }
  // A string or a list of strings, kept as a list.
  template <typename Field>
  KeyTable& texts(std::string name, Field field, std::string help) {
    return add<Field>(std::move(name), "string or list", std::move(help), field, read_strings);
  }
  // A JSON object kept whole, for its owner to read (e.g. optimizer.params).
  template <typename Field>
  KeyTable& object(std::string name, Field field, std::string help) {
    return add<Field>(std::move(name), "object", std::move(help), field, read_object);
  }
  // One of the named values of `Value` (an enum, or a string limited to some spellings).
  // A field holding a value without a name (e.g. an empty string for "none") is unset:
  // left out of the effective config.
  template <typename Field, typename Value>
  KeyTable& choice(std::string name, Field field, Names<Value> names, std::string help,
                   Quoting quoting = Quoting::kQuoted) {
    std::string type = "one of";
    for (const auto& [text, value] : names) type += " `" + text + "`";
    return custom(
        std::move(name), std::move(type), std::move(help),
        [field, names, quoting](const std::string& key, const nlohmann::json& v, Config& c) {
          field(c) = read_choice(key, v, names, quoting);
        },
        [field, names](const Config& c) {
          for (const auto& [text, value] : names) {
            if (value == field(c)) return nlohmann::json(text);
          }
          return nlohmann::json();
        });
  }

  // A key read and written by hand (e.g. one whose value sets a field another key also
  // touches): `read(key, value, config)`, `write(config)` (null: leave the key out).
  KeyTable& custom(std::string name, std::string type, std::string help,
                   std::function<void(const std::string&, const nlohmann::json&, Config&)> read,
                   std::function<nlohmann::json(const Config&)> write) {
    entries_.push_back({std::move(name), std::move(type), std::move(help), group_, std::move(read),
                        std::move(write)});
    return *this;
  }

  // A key other tools write that this program accepts without using it: known (no
  // warning) and documented, never stored or written back.
  KeyTable& accepted(std::string name, std::string type, std::string help) {
    return custom(
        std::move(name), std::move(type), std::move(help),
        [](const std::string&, const nlohmann::json&, Config&) {},
        [](const Config&) { return nlohmann::json(); });
  }

  // A key this program no longer reads: known and documented (`help`), refused wherever it
  // is set with InputError "<name> <message>", so no config relies on it unknowingly.
  KeyTable& refused(std::string name, std::string help, std::string message) {
    return custom(
        std::move(name), kRefused, std::move(help),
        [message = std::move(message)](const std::string& key, const nlohmann::json&, Config&) {
          throw_input_error(key + " " + message);
        },
        [](const Config&) { return nlohmann::json(); });
  }

  // A rule between keys, checked once every key is read: throws InputError naming them.
  KeyTable& check(std::function<void(const Config&)> rule) {
    checks_.push_back(std::move(rule));
    return *this;
  }

  // Reads every key `json` has into `config`, in table order, then checks the rules between
  // keys; InputError names the first bad one. Returns the keys it does not know (full
  // paths), for a warning.
  std::vector<std::string> read(const nlohmann::json& json, Config& config) const {
    if (!json.is_object()) throw_input_error("the config must be a JSON object");
    for (const auto& entry : entries_) {
      if (!holds(entry, config)) continue;
      if (const nlohmann::json* value = find(json, entry.name))
        entry.read(entry.name, *value, config);
    }
    for (const auto& rule : checks_) rule(config);
    std::vector<std::string> unknown;
    collect_unknown(json, "", config, unknown);
    return unknown;
  }

  // Sets key `name` of `json` before `json` is read, as a command-line option overrides a
  // file: the value then passes the key's own checks. `name` must be a key of this table,
  // lie inside one kept whole (optimizer.params.lr) or name a section of keys (log);
  // std::logic_error otherwise, since a misspelt name is a bug here, not input. InputError
  // when a part of the path on the way holds something other than an object.
  void set(nlohmann::json& json, const std::string& name, nlohmann::json value) const {
    require_key(name);
    // A section written as null takes the key as an absent one would.
    for (size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', dot + 1)) {
      const nlohmann::json::json_pointer section(pointer_of(name.substr(0, dot)));
      if (json.contains(section) && json[section].is_null())
        json[section] = nlohmann::json::object();
    }
    find(json, name);
    json[nlohmann::json::json_pointer(pointer_of(name))] = std::move(value);
  }
  // The value of key `name` in `json` as given, before it is read; null where it is unset
  // (the same rule for names).
  const nlohmann::json* get(const nlohmann::json& json, const std::string& name) const {
    require_key(name);
    return find(json, name);
  }
  // Removes key (or section) `name` from `json` where it is set (the same rule for names).
  void erase(nlohmann::json& json, const std::string& name) const {
    require_key(name);
    if (!find(json, name)) return;
    const nlohmann::json::json_pointer pointer(pointer_of(name));
    json[pointer.parent_pointer()].erase(pointer.back());
  }

  // Every key that holds for `config`, with its value: the effective config.
  nlohmann::json write(const Config& config) const {
    nlohmann::json json = nlohmann::json::object();
    for (const auto& entry : entries_) {
      if (!holds(entry, config)) continue;
      nlohmann::json value = entry.write(config);
      if (!value.is_null()) json[nlohmann::json::json_pointer(pointer_of(entry.name))] = value;
    }
    return json;
  }

  // Every key's full name, in table order (what unknown keys are matched against), but
  // the refused ones: no misspelling should be pointed at a key that is refused anyway.
  std::vector<std::string> names() const {
    std::vector<std::string> names;
    for (const auto& entry : entries_) {
      if (entry.type != kRefused) names.push_back(entry.name);
    }
    return names;
  }

  std::vector<KeyDoc> docs() const {
    const Config defaults{};
    std::vector<KeyDoc> docs;
    for (const auto& entry : entries_) {
      std::string help = entry.help;
      if (entry.group >= 0) help += " (" + groups_[entry.group].note + ")";
      const nlohmann::json fallback = entry.write(defaults);
      docs.push_back({entry.name, entry.type, fallback.is_null() ? "" : fallback.dump(), help});
    }
    return docs;
  }

  // Binds every key of `other` under the same names to the part of Config that `part`
  // selects (how a job's table takes in the engine's, the model's and the trainer's).
  template <typename Part, typename Select>
  KeyTable& include(const KeyTable<Part>& other, Select part) {
    for (const auto& group : other.groups_) {
      when([part, applies = group.applies](const Config& c) { return applies(part(c)); },
           group.note);
    }
    const int first_group =
        static_cast<int>(groups_.size()) - static_cast<int>(other.groups_.size());
    for (const auto& entry : other.entries_) {
      entries_.push_back({entry.name, entry.type, entry.help,
                          entry.group < 0 ? -1 : first_group + entry.group,
                          [part, read = entry.read](const std::string& key, const nlohmann::json& v,
                                                    Config& c) { read(key, v, part(c)); },
                          [part, write = entry.write](const Config& c) { return write(part(c)); }});
    }
    for (const auto& rule : other.checks_) {
      checks_.push_back([part, rule](const Config& c) { rule(part(c)); });
    }
    group_ = -1;
    return *this;
  }

 private:
  static constexpr const char* kRefused = "-";  // the type refused keys are documented with
  template <typename>
  friend class KeyTable;

  struct Entry {
    std::string name;
    std::string type;
    std::string help;
    int group = -1;  // index into groups_; -1: always
    std::function<void(const std::string&, const nlohmann::json&, Config&)> read;
    std::function<nlohmann::json(const Config&)> write;
  };
  struct Group {
    std::function<bool(const Config&)> applies;
    std::string note;
  };

  template <typename Field, typename Reader>
  KeyTable& add(std::string name, std::string type, std::string help, Field field, Reader reader) {
    return custom(
        std::move(name), std::move(type), std::move(help),
        [field, reader](const std::string& key, const nlohmann::json& v, Config& c) {
          field(c) = reader(key, v);
        },
        [field](const Config& c) { return nlohmann::json(field(c)); });
  }

  void require_key(const std::string& name) const {
    for (const auto& entry : entries_) {
      const bool inside = entry.type == "object" && name.rfind(entry.name + ".", 0) == 0;
      const bool section = entry.name.rfind(name + ".", 0) == 0;
      if (entry.name == name || inside || section) return;
    }
    throw std::logic_error("config key " + name + " is not in the key table");
  }

  bool holds(const Entry& entry, const Config& config) const {
    return entry.group < 0 || groups_[entry.group].applies(config);
  }

  void collect_unknown(const nlohmann::json& object, const std::string& prefix,
                       const Config& config, std::vector<std::string>& unknown) const {
    for (const auto& item : object.items()) {
      const std::string path = prefix.empty() ? item.key() : prefix + "." + item.key();
      bool known = false;
      bool parent = false;
      for (const auto& entry : entries_) {
        if (!holds(entry, config)) continue;
        known = known || entry.name == path;
        parent = parent || entry.name.rfind(path + ".", 0) == 0;
      }
      if (known) continue;
      if (parent && item.value().is_object()) {
        collect_unknown(item.value(), path, config, unknown);
      } else {
        unknown.push_back(path);
      }
    }
  }

  std::vector<Entry> entries_;
  std::vector<Group> groups_;
  std::vector<std::function<void(const Config&)>> checks_;
  int group_ = -1;
};

// Markdown rows, one per key: | `key` | type | default | meaning |, with the header.
inline std::string markdown_table(const std::vector<KeyDoc>& docs) {
  std::string table = "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const auto& doc : docs) {
    table += "| `" + doc.key + "` | " + doc.type + " | " +
             (doc.fallback.empty() ? "" : "`" + doc.fallback + "`") + " | " + doc.help + " |\n";
  }
  return table;
}

}  // namespace pipetrain::config
