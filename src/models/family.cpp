#include "pipetrain/models/family.h"

#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>

#include "models/builtin_families.h"

namespace pipetrain::models {
namespace {

// Every family by name: the built-in rows (statics of their files) and the registered ones,
// kept in a deque so that a row's address (ModelConfig::type) never moves.
struct FamilyTable {
  std::mutex mutex;
  std::deque<FamilyRow> registered;
  std::map<std::string, const FamilyRow*, std::less<>> by_name;
  std::vector<const FamilyRow*> in_order;

  FamilyTable() {
    for (const FamilyRow* row : builtin_family_rows()) {
      if (!by_name.emplace(row->name, row).second)
        throw std::logic_error("model family \"" + row->name + "\" is built in twice");
      in_order.push_back(row);
    }
  }
};
FamilyTable& table() {
  static FamilyTable t;
  return t;
}

}  // namespace

const FamilyRow* find_family(std::string_view name) {
  FamilyTable& t = table();
  const std::lock_guard lock(t.mutex);
  const auto found = t.by_name.find(name);
  return found == t.by_name.end() ? nullptr : found->second;
}

const FamilyRow* family(std::string_view name) {
  if (const FamilyRow* row = find_family(name)) return row;
  throw std::logic_error("no model family \"" + std::string(name) + "\"");
}

std::vector<const FamilyRow*> families() {
  FamilyTable& t = table();
  const std::lock_guard lock(t.mutex);
  return t.in_order;
}

std::string family_list(const std::function<bool(const FamilyRow&)>& keep,
                        const std::string& last_joint) {
  std::vector<std::string> names;
  for (const FamilyRow* row : families()) {
    if (keep(*row)) names.push_back("\"" + row->name + "\"");
  }
  std::string list;
  for (size_t i = 0; i < names.size(); ++i)
    list += (i == 0 ? "" : i + 1 == names.size() ? last_joint : ", ") + names[i];
  return list;
}

void register_family(FamilyRow row) {
  if (!row.build) throw std::logic_error("model family \"" + row.name + "\" has no build");
  FamilyTable& t = table();
  const std::lock_guard lock(t.mutex);
  if (t.by_name.contains(row.name))
    throw std::logic_error("model family \"" + row.name + "\" is taken: register another name");
  const FamilyRow* stored = &t.registered.emplace_back(std::move(row));
  t.by_name.emplace(stored->name, stored);
  t.in_order.push_back(stored);
}

}  // namespace pipetrain::models
