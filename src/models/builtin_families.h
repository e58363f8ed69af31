#pragma once

#include <vector>

#include "pipetrain/models/family.h"

// The built-in families: each folder of src/models/ with a family.cpp defines its row as
// `const FamilyRow* <folder>_family_row()`; the build lists them (builtin_families.cpp,
// generated from those files), so a new family touches only its own folder.
namespace pipetrain::models {

std::vector<const FamilyRow*> builtin_family_rows();

}  // namespace pipetrain::models
