#include "examples/registry.h"

#include <algorithm>
#include <deque>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace kiln::examples {
namespace {
std::vector<Example>& Examples() {
  static std::vector<Example> examples;
  return examples;
}
}  // namespace

bool Register(Example example) {
  std::vector<Example>& all = Examples();
  all.push_back(std::move(example));
  std::sort(all.begin(), all.end(),
            [](const Example& a, const Example& b) { return a.name < b.name; });
  return true;
}

const std::vector<Example>& All() { return Examples(); }

std::vector<ExampleFamily>& FamilyList() {
  static std::vector<ExampleFamily> families;
  return families;
}

bool RegisterFamily(ExampleFamily family) {
  FamilyList().push_back(std::move(family));
  return true;
}

const std::vector<ExampleFamily>& Families() { return FamilyList(); }

const Example* Find(const std::string& name) {
  for (const Example& e : Examples())
    if (e.name == name) return &e;
  // base.options, the base being everything before the first '.' after the last '/'.
  const size_t slash = name.rfind('/'),
               dot = name.find('.', slash == std::string::npos ? 0 : slash);
  if (dot == std::string::npos) return nullptr;
  const std::string base = name.substr(0, dot), options = name.substr(dot + 1);
  static std::mutex mu;
  static std::deque<Example> members;  // stable addresses
  std::lock_guard<std::mutex> lock(mu);
  for (const Example& e : members)
    if (e.name == name) return &e;
  for (const ExampleFamily& f : FamilyList())
    if (f.base == base)
      return &members.emplace_back(
          Example{name, absl::StrCat(f.summary, " (", options, ")"),
                  [build = f.build, name, options] { return build(name, options); }});
  return nullptr;
}

}  // namespace kiln::examples
