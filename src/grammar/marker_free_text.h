// Text that never spells one of a few markers: what a grammar allows where a parser ends the text
// at the first marker, e.g. a DSML parameter value, which the server's DsmlParser reads up to the
// next "｜DSML｜" or end-of-sentence text (dsml_grammar.h).
#pragma once

#include "grammar/grammar.h"

#include <cstdint>
#include <string_view>
#include <vector>

namespace onecard::grammar {

// from --valid UTF-8 text holding none of `markers` as a substring and no byte of `excluded`--> to;
// min_one: at least one byte. (UTF-8 because the text ends up in JSON: DsmlParser copies a raw value
// into the arguments as a JSON string.) The text may stop after any whole character (an epsilon
// edge to `to`), so the caller must make sure that what follows `to` cannot complete a marker
// together with the text's tail. Built as the markers' Aho-Corasick DFA run beside a UTF-8 decoder:
// a marker state is the longest tail of the text that begins a marker, and a byte that would
// complete a marker has no edge.
void add_marker_free_text(Grammar& g, uint32_t from, uint32_t to, const std::vector<std::string_view>& markers,
                          std::string_view excluded, bool min_one = false);

}  // namespace onecard::grammar
