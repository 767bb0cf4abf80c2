#include "examples/registry.h"

#include <algorithm>

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
  std::sort(all.begin(), all.end(), [](const Example& a, const Example& b) { return a.name < b.name; });
  return true;
}

const std::vector<Example>& All() { return Examples(); }

const Example* Find(const std::string& name) {
  for (const Example& e : Examples())
    if (e.name == name) return &e;
  return nullptr;
}

}  // namespace kiln::examples
