#include "graphs/graph_dot.h"

#include <map>
#include <sstream>

namespace spyre {
namespace {

std::string escaped(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string graphDot(const std::vector<capture::Node>& nodes) {
  std::map<c10::StreamId, std::vector<size_t>> by_stream;
  for (size_t i = 0; i < nodes.size(); ++i) by_stream[nodes[i].stream].push_back(i);
  std::ostringstream out;
  out << "digraph spyre_graph {\n  node [shape=box];\n";
  for (const auto& [stream, members] : by_stream) {
    out << "  subgraph cluster_stream_" << stream << " {\n    label=\"stream id=" << stream
        << "\";\n";
    for (const size_t i : members) {
      out << "    n" << i << " [label=\"" << i << ": " << escaped(nodes[i].name) << "\\n"
          << nodes[i].bytes << " bytes\"];\n";
    }
    out << "  }\n";
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const size_t dep : nodes[i].deps) out << "  n" << dep << " -> n" << i << ";\n";
  }
  out << "}\n";
  return out.str();
}

}  // namespace spyre
