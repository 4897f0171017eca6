// Package chat renders a conversation into a model's prompt text with the
// model's Hugging Face chat template (the Jinja2 chat_template of its
// tokenizer_config.json).
//
// Its one job is to give the text transformers' apply_chat_template(msgs,
// tokenize=False) gives. The invariant it keeps: a template renders as
// Python's Jinja2 renders it under transformers' settings (an immutable
// sandbox, trim_blocks, lstrip_blocks, loop controls, transformers' tojson,
// raise_exception and strftime_now), or Render returns an error; it never
// panics, never reads files and never runs past its limits.
//
// Read first: chat.go (the API), eval.go (the interpreter) and lex.go
// (the whitespace rules, where templates are most easily got wrong).
//
// The package holds its own Jinja interpreter: lexer (lex.go), parser
// (parse.go), evaluator over Python-like values (value.go, eval.go), and
// the filters, tests, globals and str/dict/list methods templates call
// (builtins.go, methods.go, json.go, format.go). It covers what chat
// templates use: {{ }}, if/elif/else, for with else, "if" filters,
// unpacking, loop.* and break/continue, set (names, tuples, namespace
// attributes, blocks), macros, filter blocks, raw, {% generation %};
// expressions with Python's operators, precedence and chained comparisons,
// conditional expressions, slicing, literals of lists, tuples and dicts;
// Jinja2's built-in filters and tests that templates use, and Python's
// str methods (strip, split, startswith, format, ...), dict.items/get/...
// and list.index/count. Values follow Python: str() and repr() of lists,
// dicts and floats, int/float arithmetic, truthiness, Undefined (prints
// empty, fails when used), None.
//
// Not supported, and rejected by Parse with a *SyntaxError: include,
// import, extends, block, call, with, recursive loops, *args and
// **kwargs. Known differences from Python: str.upper and str.lower use
// simple case mapping ("ß".upper() is "ß", Python gives "SS"); printing a
// dict view (d.items() without a filter) shows a list; integers are 64-bit
// (overflow is an error).
//
// Limits: every render counts steps (evaluated nodes and loop iterations;
// real templates spend 20 to 70 per message) and the size of the text and
// of every string or list it builds, and stops with a *LimitError past
// Options.MaxSteps or MaxBytes; macro recursion stops at 100 calls deep.
//
// A Template is immutable and safe for concurrent use. Tests compare with
// @huggingface/jinja (the Jinja of transformers.js) on real templates
// (testdata/fetch.sh installs it, see reference_test.go) and with Python
// Jinja2 on a table of features (testdata/features.json).
package chat
