package comm

import (
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
)

// Kind names a family of operations for byte accounting.
type Kind uint8

const (
	KindAllReduce     Kind = iota // AllReduce
	KindAllGather                 // AllGather and AllGatherV
	KindReduceScatter             // ReduceScatter
	KindAllToAll                  // AllToAll and AllToAllV
	KindBroadcast                 // Broadcast
	KindSend                      // Send: counts bytes sent
	KindRecv                      // Recv: counts bytes received
	KindBarrier                   // Barrier: counts calls only
	KindRead                      // a one-sided read (Group.Drive): the reader's received bytes, the owner's sent bytes

	// NumKinds is the number of kinds, the length of per-kind arrays.
	NumKinds
)

var kindNames = [NumKinds]string{
	KindAllReduce:     "all_reduce",
	KindAllGather:     "all_gather",
	KindReduceScatter: "reduce_scatter",
	KindAllToAll:      "all_to_all",
	KindBroadcast:     "broadcast",
	KindSend:          "send",
	KindRecv:          "recv",
	KindBarrier:       "barrier",
	KindRead:          "read",
}

// String returns the snake_case name used in logs and metric labels, e.g.
// "all_reduce".
func (k Kind) String() string {
	if k < NumKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Counter is the traffic of completed operations. Bytes are counted with
// the World's Options.ElemBytes, as the standard algorithm of each kind
// moves them over the wire (see volume.go).
type Counter struct {
	Calls     int64 // completed operations
	SentBytes int64 // bytes this rank put on the wire
	RecvBytes int64 // bytes this rank took off the wire
}

// Add returns c + o.
func (c Counter) Add(o Counter) Counter {
	return Counter{c.Calls + o.Calls, c.SentBytes + o.SentBytes, c.RecvBytes + o.RecvBytes}
}

// Sub returns c − o.
func (c Counter) Sub(o Counter) Counter {
	return Counter{c.Calls - o.Calls, c.SentBytes - o.SentBytes, c.RecvBytes - o.RecvBytes}
}

// Key identifies one row of Stats.
type Key struct {
	Group string // the group's label; groups sharing a label add up
	Rank  int    // world rank
	Kind  Kind
}

// Stats is a snapshot of a World's traffic: one Counter per group label,
// world rank and kind that has completed at least one operation. It is a
// plain map, safe to keep, compare and modify.
type Stats map[Key]Counter

// Sum returns the total of the rows for which keep returns true.
func (s Stats) Sum(keep func(Key) bool) Counter {
	var t Counter
	for k, c := range s {
		if keep(k) {
			t = t.Add(c)
		}
	}
	return t
}

// Total returns the sum over all rows.
func (s Stats) Total() Counter { return s.Sum(func(Key) bool { return true }) }

// Rank returns the traffic of one world rank over all groups and kinds.
func (s Stats) Rank(rank int) Counter { return s.Sum(func(k Key) bool { return k.Rank == rank }) }

// Group returns the traffic of the groups labelled label, over all ranks
// and kinds.
func (s Stats) Group(label string) Counter {
	return s.Sum(func(k Key) bool { return k.Group == label })
}

// Kind returns the traffic of one kind over all groups and ranks.
func (s Stats) Kind(kind Kind) Counter { return s.Sum(func(k Key) bool { return k.Kind == kind }) }

// Sub returns s − prev row by row, dropping rows that become zero: the
// traffic between two snapshots of the same World.
func (s Stats) Sub(prev Stats) Stats {
	d := make(Stats, len(s))
	for k, c := range s {
		if c = c.Sub(prev[k]); c != (Counter{}) {
			d[k] = c
		}
	}
	for k, c := range prev {
		if _, ok := s[k]; !ok {
			d[k] = Counter{}.Sub(c)
		}
	}
	return d
}

// String formats one row per line, sorted by group, rank and kind:
// "group=tp rank=0 kind=all_reduce calls=2 sent=1024 recv=1024".
func (s Stats) String() string {
	keys := make([]Key, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Rank != b.Rank {
			return a.Rank < b.Rank
		}
		return a.Kind < b.Kind
	})
	var sb strings.Builder
	for _, k := range keys {
		c := s[k]
		fmt.Fprintf(&sb, "group=%s rank=%d kind=%s calls=%d sent=%d recv=%d\n",
			k.Group, k.Rank, k.Kind, c.Calls, c.SentBytes, c.RecvBytes)
	}
	return sb.String()
}

// counters is one Comm's live traffic, written by its rank and read by
// World.Stats from any goroutine.
type counters [NumKinds]struct {
	calls, sent, recv atomic.Int64
}

func (cs *counters) add(k Kind, sent, recv int64) {
	c := &cs[k]
	c.calls.Add(1)
	if sent != 0 {
		c.sent.Add(sent)
	}
	if recv != 0 {
		c.recv.Add(recv)
	}
}
