#include "comm/message.h"

#include "core/error.h"

namespace braid::comm {

const char* call_kind_name(CallKind k) {
  switch (k) {
    case CallKind::p2p:
      return "send/recv";
    case CallKind::allreduce:
      return "allreduce";
    case CallKind::reduce_scatter:
      return "reduce_scatter";
    case CallKind::allgather:
      return "allgather";
    case CallKind::broadcast:
      return "broadcast";
    case CallKind::reduce:
      return "reduce";
    case CallKind::gather:
      return "gather";
    case CallKind::scatter:
      return "scatter";
    case CallKind::alltoall:
      return "alltoall";
    case CallKind::barrier:
      return "barrier";
    case CallKind::split:
      return "split";
  }
  return "unknown call";
}

std::string describe_call(const CallSignature& sig, uint32_t seq) {
  std::string s = detail::concat(call_kind_name(sig.call), " #", seq, " (", dtype_name(sig.dtype));
  if (sig.call == CallKind::allreduce || sig.call == CallKind::reduce_scatter ||
      sig.call == CallKind::reduce)
    s += detail::concat(" ", reduce_op_name(sig.op));
  s += detail::concat(", ", sig.count, sig.call == CallKind::p2p ? " bytes" : " elements");
  if (sig.root >= 0) s += detail::concat(", root ", sig.root);
  return s + ")";
}

std::string describe_step(const CallSignature& sig, const Tag& tag) {
  if (sig.call != CallKind::p2p) return detail::concat("step ", tag.step);
  std::string name(4, ' ');
  bool printable = true;
  for (int i = 0; i < 4; ++i) {
    const auto c = static_cast<unsigned char>(tag.step >> (8 * (3 - i)));
    printable = printable && c > ' ' && c < 127 && c != '\'';
    name[static_cast<size_t>(i)] = static_cast<char>(c);
  }
  return printable ? "tag '" + name + "'" : detail::concat("tag ", tag.step);
}

}  // namespace braid::comm
