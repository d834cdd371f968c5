// A minimal test harness: TEST(name) registers a test; CHECK* report file:line
// and values. With HARNESS_MAIN defined (in exactly one file), it provides main:
//   binary --list    prints the test names, one per line
//   binary <name>    runs that test: exit 0 on pass, 1 with a message on failure
// Each test runs in its own process (the runtime binds one context per process).
#pragma once

#include <cstdio>
#include <cstring>
#include <exception>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace harness {

// Thrown by a failed check; not a std::exception, so CHECK_THROWS_MSG lets it pass.
struct Failure {
  std::string message;
};

struct TestCase {
  const char* name;
  void (*fn)();
};

inline std::vector<TestCase>& registry() {
  static std::vector<TestCase> tests;
  return tests;
}

struct Registrar {
  Registrar(const char* name, void (*fn)()) { registry().push_back({name, fn}); }
};

[[noreturn]] inline void fail(const char* file, int line, const std::string& message) {
  throw Failure{std::string(file) + ":" + std::to_string(line) + ": " + message};
}

template <class T, class = void>
struct Printable : std::false_type {};
template <class T>
struct Printable<T, std::void_t<decltype(std::declval<std::ostream&>() << std::declval<T>())>>
    : std::true_type {};

template <class T>
std::string show(const T& value) {
  if constexpr (std::is_same_v<T, bool>) {
    return value ? "true" : "false";
  } else if constexpr (std::is_enum_v<T>) {
    return std::to_string(static_cast<long long>(value));
  } else if constexpr (Printable<T>::value) {
    std::ostringstream out;
    out << value;
    return out.str();
  } else {
    return "<unprintable>";
  }
}

// Integers of mixed signedness compare by value (no -Wsign-compare surprises).
template <class A, class B>
bool equal(const A& a, const B& b) {
  if constexpr (std::is_integral_v<A> && std::is_integral_v<B> && !std::is_same_v<A, bool> &&
                !std::is_same_v<B, bool>) {
    if constexpr (std::is_signed_v<A> == std::is_signed_v<B>) {
      return a == b;
    } else if constexpr (std::is_signed_v<A>) {
      return a >= 0 && static_cast<std::make_unsigned_t<A>>(a) == b;
    } else {
      return b >= 0 && a == static_cast<std::make_unsigned_t<B>>(b);
    }
  } else {
    return a == b;
  }
}

}  // namespace harness

#define TEST(name)                                                     \
  static void name();                                                  \
  static const harness::Registrar name##_registrar(#name, name);       \
  static void name()

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) harness::fail(__FILE__, __LINE__, "CHECK(" #cond ") failed"); \
  } while (0)

#define CHECK_EQ(a, b)                                                                        \
  do {                                                                                        \
    const auto& check_a_ = (a);                                                               \
    const auto& check_b_ = (b);                                                               \
    if (!harness::equal(check_a_, check_b_)) {                                                \
      harness::fail(__FILE__, __LINE__,                                                       \
                    "CHECK_EQ(" #a ", " #b "): " + harness::show(check_a_) + " != " +         \
                        harness::show(check_b_));                                             \
    }                                                                                         \
  } while (0)

#define CHECK_THROWS_MSG(expr, substring)                                                    \
  do {                                                                                       \
    bool check_threw_ = false;                                                               \
    try {                                                                                    \
      expr;                                                                                  \
    } catch (const harness::Failure&) {                                                      \
      throw;                                                                                 \
    } catch (const std::exception& check_e_) {                                               \
      check_threw_ = true;                                                                   \
      if (std::string(check_e_.what()).find(substring) == std::string::npos) {               \
        harness::fail(__FILE__, __LINE__,                                                    \
                      std::string(#expr " threw '") + check_e_.what() +                      \
                          "', expected a message containing '" + (substring) + "'");         \
      }                                                                                      \
    }                                                                                        \
    if (!check_threw_) harness::fail(__FILE__, __LINE__, #expr " did not throw");           \
  } while (0)

#ifdef HARNESS_MAIN
int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--list") == 0) {
    for (const harness::TestCase& test : harness::registry()) std::printf("%s\n", test.name);
    return 0;
  }
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s --list | <test name>\n", argv[0]);
    return 2;
  }
  for (const harness::TestCase& test : harness::registry()) {
    if (std::strcmp(test.name, argv[1]) != 0) continue;
    try {
      test.fn();
    } catch (const harness::Failure& failure) {
      std::fprintf(stderr, "FAIL %s: %s\n", test.name, failure.message.c_str());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "FAIL %s: unexpected exception: %s\n", test.name, e.what());
      return 1;
    } catch (...) {
      std::fprintf(stderr, "FAIL %s: unexpected non-standard exception\n", test.name);
      return 1;
    }
    std::printf("PASS %s\n", test.name);
    return 0;
  }
  std::fprintf(stderr, "unknown test '%s' (see --list)\n", argv[1]);
  return 2;
}
#endif
