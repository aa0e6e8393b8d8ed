// Errors: one typed exception for everything a user can cause, and an always-on
// check macro for internal invariants.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace tessera {

enum class ErrorKind {
  kUsage,        // bad flag or argument
  kIo,           // file missing, unreadable, unwritable
  kParse,        // not a valid model / text form / tensor file
  kUnsupported,  // op, dtype or attribute form Tessera does not handle
  kInvalidGraph, // missing input, cycle, shape mismatch, bad attribute
  kResource,     // tensor too large to allocate
  kInternal,     // a broken invariant (a bug in Tessera)
};

const char* error_kind_name(ErrorKind kind);

// Context names where the error happened; every field is optional.
struct ErrorContext {
  std::string file;
  std::string node;
  std::string op;
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message, ErrorContext context = {});

  ErrorKind kind() const { return kind_; }
  const ErrorContext& context() const { return context_; }
  const std::string& message() const { return message_; }

  // Returns a copy with empty context fields filled from `outer`.
  Error with_context(const ErrorContext& outer) const;

 private:
  static std::string format(const std::string& message, const ErrorContext& context);

  ErrorKind kind_;
  std::string message_;
  ErrorContext context_;
};

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace detail

}  // namespace tessera

// Always-on invariant check; the message expression is evaluated only on failure.
#define TESSERA_CHECK(cond, msg)                                                  \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::ostringstream tessera_check_os_;                                       \
      tessera_check_os_ << msg;                                                   \
      ::tessera::detail::check_failed(__FILE__, __LINE__, #cond,                  \
                                      tessera_check_os_.str());                   \
    }                                                                             \
  } while (0)

// Throws a user-facing error built with stream syntax.
#define TESSERA_THROW(kind, msg)                                                  \
  do {                                                                            \
    std::ostringstream tessera_throw_os_;                                         \
    tessera_throw_os_ << msg;                                                     \
    throw ::tessera::Error(kind, tessera_throw_os_.str());                        \
  } while (0)
