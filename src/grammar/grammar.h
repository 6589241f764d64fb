// Grammar: a recursive transition network over bytes (one small NFA per rule, rules call rules).
// The JSON Schema compiler (json_schema.h) builds it; the matcher (matcher.h) runs it with a set of
// stacks. Immutable once built: share it between requests through a shared_ptr<const Grammar>.
//
// A node has byte-range edges, epsilon edges, call edges ("run rule R, then continue at node X") and
// an end flag (reaching it returns from the rule). Node 0 is the accept node: the bottom frame of
// every matcher stack returns there when the root rule ends, so "complete" is "a stack is [0]".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace onecard::grammar {

struct ByteEdge {
    uint8_t lo = 0;  // inclusive range [lo, hi]
    uint8_t hi = 0;
    uint32_t to = 0;
};

struct CallEdge {
    uint32_t rule = 0;  // callee
    uint32_t ret = 0;   // where the caller continues after the callee ends
};

struct Node {
    std::vector<ByteEdge> bytes;
    std::vector<uint32_t> eps;
    std::vector<CallEdge> calls;
    bool is_end = false;  // reaching this node returns from the node's rule
};

struct Rule {
    std::string name;    // for diagnostics ("string", "#/$defs/node", ...)
    uint32_t start = 0;  // entry node
    uint32_t end = 0;    // the rule's end node (is_end)
};

class Grammar {
public:
    static constexpr uint32_t kAcceptNode = 0;

    Grammar();

    // ---- building (the compiler's interface) ----------------------------------------------
    uint32_t add_node();
    // A new rule with fresh start and end nodes; its body is added later (so rules can recurse).
    uint32_t add_rule(std::string name);
    void add_bytes(uint32_t from, uint8_t lo, uint8_t hi, uint32_t to);
    void add_eps(uint32_t from, uint32_t to);
    void add_call(uint32_t from, uint32_t rule, uint32_t to);
    // from --bytes of `lit`--> to (a chain of fresh nodes; an empty literal is an epsilon edge).
    void add_literal(uint32_t from, std::string_view lit, uint32_t to);
    void set_root(uint32_t rule) { root_ = rule; }

    // ---- reading --------------------------------------------------------------------------
    const Node& node(uint32_t i) const { return nodes_[i]; }
    const Rule& rule(uint32_t i) const { return rules_[i]; }
    size_t n_nodes() const { return nodes_.size(); }
    size_t n_rules() const { return rules_.size(); }
    uint32_t root() const { return root_; }

    // Throws onecard::Error when an edge points outside the grammar, the accept node is not bare,
    // an epsilon cycle exists (the matcher's closure would not terminate), or a rule can call
    // itself before consuming a byte (left recursion, e.g. {"$ref": "#"}).
    void check_integrity() const;

private:
    std::vector<Node> nodes_;  // [n_nodes]; node 0 is kAcceptNode
    std::vector<Rule> rules_;  // [n_rules]
    uint32_t root_ = 0;
};

}  // namespace onecard::grammar
