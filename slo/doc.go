// Package slo holds the service-level tiers a deployment serves: each tier
// names a time-to-first-token and a time-per-output-token target, or marks
// background work that has none. A Set is read once from a --slo-tiers
// JSON file (Load, Parse) and then answers which tier a request belongs
// to (Resolve).
//
// The file is a JSON array of tiers in priority order, the most important
// first:
//
//	[
//	  {"name": "strict", "ttft_ms": 300, "tpot_ms": 10},
//	  {"name": "loose", "ttft_ms": 300, "tpot_ms": 20, "default": true},
//	  {"name": "batch", "background": true}
//	]
//
// Invariant: a Set is valid once built. Names are unique, 1 to 64 of the
// characters A–Z a–z 0–9 . _ - (they travel in HTTP headers); every
// non-background tier has positive TTFT and TPOT targets; a background
// tier has none; exactly one tier is the default (the one marked
// "default", else the first). A Set never changes, so it is safe for
// concurrent use.
package slo
