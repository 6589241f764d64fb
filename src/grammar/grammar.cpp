#include "grammar/grammar.h"

#include "core/error.h"

#include <functional>

namespace onecard::grammar {

Grammar::Grammar() {
    nodes_.emplace_back();  // kAcceptNode: no edges, not an end; the bottom of every stack
}

uint32_t Grammar::add_node() {
    nodes_.emplace_back();
    return static_cast<uint32_t>(nodes_.size() - 1);
}

uint32_t Grammar::add_rule(std::string name) {
    Rule r;
    r.name = std::move(name);
    r.start = add_node();
    r.end = add_node();
    nodes_[r.end].is_end = true;
    rules_.push_back(std::move(r));
    return static_cast<uint32_t>(rules_.size() - 1);
}

void Grammar::add_bytes(uint32_t from, uint8_t lo, uint8_t hi, uint32_t to) {
    nodes_[from].bytes.push_back({lo, hi, to});
}

void Grammar::add_eps(uint32_t from, uint32_t to) {
    nodes_[from].eps.push_back(to);
}

void Grammar::add_call(uint32_t from, uint32_t rule, uint32_t to) {
    nodes_[from].calls.push_back({rule, to});
}

void Grammar::add_literal(uint32_t from, std::string_view lit, uint32_t to) {
    if (lit.empty()) {
        add_eps(from, to);
        return;
    }
    uint32_t cur = from;
    for (size_t i = 0; i < lit.size(); ++i) {
        const uint32_t next = i + 1 == lit.size() ? to : add_node();
        const auto b = static_cast<uint8_t>(lit[i]);
        add_bytes(cur, b, b, next);
        cur = next;
    }
}

void Grammar::check_integrity() const {
    const auto n = static_cast<uint32_t>(nodes_.size());
    ONECARD_CHECK(n > 0 && nodes_[kAcceptNode].bytes.empty() && nodes_[kAcceptNode].eps.empty() &&
                      nodes_[kAcceptNode].calls.empty() && !nodes_[kAcceptNode].is_end,
                  "grammar: the accept node has edges");
    ONECARD_CHECK(root_ < rules_.size(), "grammar: root rule {} of {}", root_, rules_.size());
    for (uint32_t i = 0; i < n; ++i) {
        const Node& nd = nodes_[i];
        for (const auto& e : nd.bytes)
            ONECARD_CHECK(e.to < n && e.lo <= e.hi, "grammar: node {} has a bad byte edge", i);
        for (uint32_t e : nd.eps) ONECARD_CHECK(e < n && e != kAcceptNode, "grammar: node {} has a bad epsilon", i);
        for (const auto& c : nd.calls)
            ONECARD_CHECK(c.rule < rules_.size() && c.ret < n && c.ret != kAcceptNode,
                          "grammar: node {} has a bad call", i);
    }
    for (const auto& r : rules_)
        ONECARD_CHECK(r.start < n && r.end < n && nodes_[r.end].is_end, "grammar: rule '{}' has bad nodes", r.name);

    // Epsilon cycles: depth-first search with colours over epsilon edges only.
    std::vector<uint8_t> colour(n, 0);  // [n_nodes] 0 new, 1 on the path, 2 done
    std::function<void(uint32_t)> visit = [&](uint32_t v) {
        colour[v] = 1;
        for (uint32_t w : nodes_[v].eps) {
            ONECARD_CHECK(colour[w] != 1, "grammar: epsilon cycle through node {}", w);
            if (colour[w] == 0) visit(w);
        }
        colour[v] = 2;
    };
    for (uint32_t i = 0; i < n; ++i)
        if (colour[i] == 0) visit(i);

    // Nullable rules (end reachable from start without a byte), then left calls: the rules a rule
    // can enter before consuming anything. A cycle there would make the closure recurse forever.
    std::vector<uint8_t> nullable(rules_.size(), 0);  // [n_rules]
    // Nodes reachable from `start` without consuming, through epsilons and nullable callees.
    auto reach = [&](uint32_t start, std::vector<uint32_t>& out) {
        std::vector<uint8_t> seen(n, 0);
        std::vector<uint32_t> work{start};
        seen[start] = 1;
        out.clear();
        while (!work.empty()) {
            const uint32_t v = work.back();
            work.pop_back();
            out.push_back(v);
            auto push = [&](uint32_t w) {
                if (!seen[w]) {
                    seen[w] = 1;
                    work.push_back(w);
                }
            };
            for (uint32_t w : nodes_[v].eps) push(w);
            for (const auto& c : nodes_[v].calls)
                if (nullable[c.rule]) push(c.ret);
        }
    };
    std::vector<uint32_t> reached;
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < rules_.size(); ++r) {
            if (nullable[r]) continue;
            reach(rules_[r].start, reached);
            for (uint32_t v : reached)
                if (v == rules_[r].end) {
                    nullable[r] = 1;
                    changed = true;
                    break;
                }
        }
    }
    std::vector<std::vector<uint32_t>> left(rules_.size());  // [n_rules] rules entered before a byte
    for (size_t r = 0; r < rules_.size(); ++r) {
        reach(rules_[r].start, reached);
        for (uint32_t v : reached)
            for (const auto& c : nodes_[v].calls) left[r].push_back(c.rule);
    }
    std::vector<uint8_t> rc(rules_.size(), 0);
    std::function<void(uint32_t)> visit_rule = [&](uint32_t r) {
        rc[r] = 1;
        for (uint32_t s : left[r]) {
            ONECARD_CHECK(rc[s] != 1, "grammar: rule '{}' can call itself before consuming a byte (left recursion)",
                          rules_[s].name);
            if (rc[s] == 0) visit_rule(s);
        }
        rc[r] = 2;
    };
    for (uint32_t r = 0; r < rules_.size(); ++r)
        if (rc[r] == 0) visit_rule(r);
}

}  // namespace onecard::grammar
