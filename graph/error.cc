#include "graph/error.h"

namespace tessera {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kUsage: return "usage error";
    case ErrorKind::kIo: return "I/O error";
    case ErrorKind::kParse: return "parse error";
    case ErrorKind::kUnsupported: return "unsupported";
    case ErrorKind::kInvalidGraph: return "invalid graph";
    case ErrorKind::kResource: return "resource error";
    case ErrorKind::kInternal: return "internal error";
  }
  return "error";
}

Error::Error(ErrorKind kind, const std::string& message, ErrorContext context)
    : std::runtime_error(format(message, context)),
      kind_(kind),
      message_(message),
      context_(std::move(context)) {}

std::string Error::format(const std::string& message, const ErrorContext& context) {
  std::string out;
  if (!context.file.empty()) out += context.file + ": ";
  if (!context.node.empty() || !context.op.empty()) {
    out += "node '" + context.node + "'";
    if (!context.op.empty()) out += " (" + context.op + ")";
    out += ": ";
  }
  return out + message;
}

Error Error::with_context(const ErrorContext& outer) const {
  ErrorContext merged = context_;
  if (merged.file.empty()) merged.file = outer.file;
  if (merged.node.empty()) merged.node = outer.node;
  if (merged.op.empty()) merged.op = outer.op;
  return Error(kind_, message_, merged);
}

namespace detail {
void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  std::ostringstream os;
  os << "check failed at " << file << ":" << line << ": " << cond;
  if (!msg.empty()) os << ": " << msg;
  throw Error(ErrorKind::kInternal, os.str());
}
}  // namespace detail

}  // namespace tessera
