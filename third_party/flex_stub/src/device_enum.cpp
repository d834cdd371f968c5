// Device enumeration from the environment. Read on every call (no caching) so
// the answer always follows the current environment.
#include <algorithm>
#include <climits>
#include <optional>
#include <sstream>
#include <vector>

#include "env.hpp"
#include "flex/flex.hpp"

namespace flex {
namespace {

int cardCount() { return static_cast<int>(detail::envInt("FLEX_STUB_CARDS", 8, 1, INT_MAX)); }

// The list of visible cards and the variable it came from: SPYRE_DEVICES, else
// SPYRE_VISIBLE_DEVICES (the name torch's generic messages tell users to set).
struct CardList {
  const char* name;
  std::string value;
};

std::optional<CardList> cardList() {
  for (const char* name : {"SPYRE_DEVICES", "SPYRE_VISIBLE_DEVICES"}) {
    if (auto value = detail::envValue(name)) return CardList{name, *value};
  }
  return std::nullopt;
}

// The card list as card indices: duplicates removed (first occurrence kept),
// entries outside [0, cards) dropped.
std::vector<int> visibleCards(const CardList& cards_env, int cards) {
  const std::string& list = cards_env.value;
  const std::string name = cards_env.name;
  std::vector<int> result;
  std::stringstream entries(list);
  std::string entry;
  // getline yields nothing for "", and drops one trailing empty entry ("1,"):
  // check those by hand so every empty entry is reported.
  if (list.empty() || list.back() == ',') {
    throw Error("flex: " + name + "='" + list + "' has an empty entry; expected a comma list "
                "of card indices");
  }
  while (std::getline(entries, entry, ',')) {
    int64_t card = 0;
    try {
      card = detail::parseInt(cards_env.name, entry, INT64_MIN, INT64_MAX);
    } catch (const Error&) {
      throw Error("flex: " + name + "='" + list + "' has a non-integer entry '" + entry +
                  "'; expected a comma list of card indices");
    }
    if (card < 0 || card >= cards) continue;
    if (std::find(result.begin(), result.end(), card) == result.end()) {
      result.push_back(static_cast<int>(card));
    }
  }
  return result;
}

int worldSize(const char* name, const std::string& value, int cards) {
  return static_cast<int>(std::min<int64_t>(detail::parseInt(name, value, 1, INT64_MAX), cards));
}

}  // namespace

int getNumDevices() {
  const int cards = cardCount();
  if (auto list = cardList()) {
    return static_cast<int>(visibleCards(*list, cards).size());
  }
  if (auto size = detail::envValue("AIU_WORLD_SIZE")) {
    return worldSize("AIU_WORLD_SIZE", *size, cards);
  }
  if (auto size = detail::envValue("LOCAL_WORLD_SIZE")) {
    return worldSize("LOCAL_WORLD_SIZE", *size, cards);
  }
  // As on a real host: with no variable set, every card is visible.
  return cards;
}

int getCardIndex(int logical_device) {
  const int devices = getNumDevices();
  if (logical_device < 0 || logical_device >= devices) {
    throw Error("flex: logical device " + std::to_string(logical_device) +
                " is out of range: " + std::to_string(devices) +
                " device(s) visible, expected an index in [0, " + std::to_string(devices) + ")");
  }
  if (auto list = cardList()) {
    return visibleCards(*list, cardCount())[logical_device];
  }
  return logical_device;
}

}  // namespace flex
