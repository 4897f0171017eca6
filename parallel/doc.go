// Package parallel describes parallel layouts: plans of DP × PP × SP × TP
// ranks, the mapping between a rank and its coordinates, which attention
// heads, KV heads, weight rows and columns, layers and vocabulary entries a
// rank holds, and the communication groups a plan needs.
//
// Invariant: under a base plan (SP=s, TP=t) and its shift plan (TP=s·t in
// ShiftOrder), every rank holds the same attention-head chunk, so the KV
// cache written under one is read by the other without moving.
package parallel
