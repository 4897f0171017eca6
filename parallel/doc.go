// Package parallel describes where a model runs: plans of DP × PP × SP × TP
// ranks, placements that put a plan's coordinates on global ranks (which
// attention heads, KV heads, weight rows and columns, layers and
// vocabulary entries each rank holds, per op, and the communication groups
// it uses), the shards cut from the weights by a placement, and
// transitions: the counted moves of weights and KV that take an executor
// from one placement to another.
//
// Invariant: under a base plan (SP=s, TP=t) and its shift placement
// (TP=s·t in ShiftOrder), every rank holds the same KV slice, so the KV
// cache written under one is read by the other without moving
// (Placement.SharesKV); any other change of KV slice is a transition.
package parallel
