// Package structured holds generations to a format, token by token: the
// structured output of OpenAI's response_format, {"type": "json_object"}
// (JSONObject) and {"type": "json_schema"} (JSONSchema, patterns
// included), vLLM's guided_choice (Choice), guided_regex (Regex) and
// guided_grammar (Grammar: GBNF, recognized by a pushdown automaton,
// grammar.go and grammar_match.go), and the calls tool_choice forces
// (ToolCalls, ToolArguments; package toolcall reads them back). A regex is a DFA over characters
// (regex.go); strings with one are read character by character, escapes
// decoded, each byte allowed only while the character it begins can
// still lead the DFA to a match.
//
// A Format is compiled once per request: a schema becomes a graph of
// nodes, each saying what one value may be. A Vocab arranges a model's
// vocabulary once (every token's bytes in a trie); a Matcher per sequence
// masks the logits of the tokens that cannot come next
// (sample.Constraint) and follows the tokens chosen. The format is
// recognized byte by byte, so tokens that split a character, an escape, a
// key or a number anywhere are handled; every prefix the Matcher allows
// can be completed, and the end tokens are allowed only once it is.
package structured
